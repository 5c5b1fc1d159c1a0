"""Per-ClusterQueue pending queues: the ordered workloads that wait for admission.

Each ClusterQueue keeps two sorted lists with one order (higher priority first, then earlier queue
timestamp, then submission sequence):

- ``active``: workloads not yet tried since they were queued;
- ``inadmissible``: workloads that were tried and did not fit. They are tried again only after
  something that could let them fit changed (``retry`` is set), never in a busy loop.

A workload's position is its rank across both lists, so it is O(log n) to answer "what position
am I?" even with 100,000 pending workloads.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from gangq.core.chunks import SortedChunks
from gangq.core.model import ClusterQueueSpec, FlavorResource, flavor_resource
from gangq.core.quota import QuotaNode
from gangq.core.workload import OrderKey, Workload


def merge_keys(first: Iterator[OrderKey], second: Iterator[OrderKey]) -> Iterator[OrderKey]:
    """Two ascending streams of distinct queue keys as one, lazily: each stream's next key is
    drawn only after the previous one was consumed, as :func:`heapq.merge` does (a retry's
    stream decides its next key from the state that trying the last one left). Not
    :func:`heapq.merge` itself, which is interpreted code on the scheduling cycle's hot path."""
    a = next(first, None)
    b = next(second, None)
    while a is not None and b is not None:
        if b < a:
            yield b
            b = next(second, None)
        else:
            yield a
            a = next(first, None)
    while a is not None:
        yield a
        a = next(first, None)
    while b is not None:
        yield b
        b = next(second, None)


_SHARED_TOTALS: dict[int, int] = {}


def _shared(value: int) -> int:
    """One int object per distinct total: the demand lists of a deep cluster compare totals on
    every bisect, and a few hundred shared objects stay in cache where one object per gang and
    resource did not (bounded: the table starts over once it holds 65,536 values)."""
    shared = _SHARED_TOTALS.get(value)
    if shared is None:
        if len(_SHARED_TOTALS) >= 65_536:
            _SHARED_TOTALS.clear()
        shared = _SHARED_TOTALS[value] = value
    return shared


class _TotalsIndex:
    """One resource's index in a demand class: parallel lists sorted by (total, gang key).

    Parallel plain lists rather than one list of (total, key, totals) tuples: a bisect compares
    bare totals, so it reads the list and a few shared int objects (:func:`_shared`) instead of
    a tuple and an int per step, each a cache miss in a deep cluster.
    """

    __slots__ = ("keys", "totals", "vectors")

    def __init__(self) -> None:
        self.totals: list[int] = []
        self.keys: list[OrderKey] = []
        # Each gang's totals of every resource of the class, in the class's order (the filter).
        self.vectors: list[tuple[int, ...]] = []

    def _position(self, total: int, key: OrderKey) -> int:
        totals = self.totals
        lo = bisect_left(totals, total)
        hi = bisect_right(totals, total, lo)
        return bisect_left(self.keys, key, lo, hi)

    def add(self, total: int, key: OrderKey, vector: tuple[int, ...]) -> None:
        i = self._position(total, key)
        self.totals.insert(i, total)
        self.keys.insert(i, key)
        self.vectors.insert(i, vector)

    def remove(self, total: int, key: OrderKey) -> None:
        i = self._position(total, key)
        del self.totals[i]
        del self.keys[i]
        del self.vectors[i]


class _DemandClass:
    """Queued gangs that request the same set of resources, sorted by their total of each.

    Plain sorted lists (bisect in C) rather than SortedList: a filter of a retry bisects every
    resource's list and copies a prefix, which SortedList does in interpreted code, and this is
    the retry's hottest step. The price is an O(n) insert, a memmove that stays small until a
    single ClusterQueue holds tens of thousands of gangs requesting the same resources.
    """

    __slots__ = ("indexes", "resources", "vectors")

    def __init__(self, resources: tuple[str, ...]) -> None:
        self.resources = resources
        self.indexes = [_TotalsIndex() for _ in resources]  # in ``resources`` order
        self.vectors: dict[OrderKey, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self.vectors)

    def add(self, key: OrderKey, totals: dict[str, int]) -> None:
        vector = self.vectors[key] = tuple(_shared(totals[r]) for r in self.resources)
        for i, index in enumerate(self.indexes):
            index.add(vector[i], key, vector)

    def remove(self, key: OrderKey) -> None:
        vector = self.vectors.pop(key)
        for i, index in enumerate(self.indexes):
            index.remove(vector[i], key)

    def fitting(self, bound: dict[str, int], short: list[tuple[str, int]] | None = None) -> list[OrderKey]:
        """The gangs whose total of every resource is at most ``bound`` (missing resources: 0).

        The resource that leaves the fewest gangs selects them from its sorted index; the others
        filter that selection exactly. When none fits, ``short`` (if given) gets a resource that
        every gang needs more of than ``bound`` allows and the least total of it, or ("", 0) when
        no one resource rules them all out.
        """
        # Each list's ends first: a resource whose smallest total exceeds its limit rules every
        # gang out, and one whose largest total is within it rules none out (memory, with quota
        # to spare): only the others are bisected and filtered. In a deep cluster these lists
        # are cold, and every comparison of a bisect is a cache miss.
        selective: list[tuple[int, int, list[int]]] = []
        resources = self.resources
        indexes = self.indexes
        for i in range(len(resources)):
            totals = indexes[i].totals
            if not totals:
                return []
            limit = bound.get(resources[i], 0)
            if totals[0] > limit:
                if short is not None:
                    short.append((resources[i], totals[0]))
                return []
            if totals[-1] > limit:
                selective.append((i, limit, totals))
        if not selective:
            return list(self.vectors)
        best_count = -1
        best = 0
        for i, limit, totals in selective:
            count = bisect_right(totals, limit)
            if best_count < 0 or count < best_count:
                best_count, best = count, i
        keys = indexes[best].keys
        if len(selective) == 1:
            return keys[:best_count]
        vectors = indexes[best].vectors
        out: list[OrderKey] = []
        for j in range(best_count):
            vector = vectors[j]
            for i, limit, _ in selective:
                if vector[i] > limit:
                    break
            else:
                out.append(keys[j])
        if not out and short is not None:
            short.append(("", 0))
        return out

    def min_total(self, resource: str) -> int | None:
        """The smallest total of ``resource`` among these gangs (None: they do not request it)."""
        for i, r in enumerate(self.resources):
            if r == resource:
                totals = self.indexes[i].totals
                return totals[0] if totals else None
        return None


class ClusterQueueState:
    """A ClusterQueue as the scheduler sees it: spec, quota node, pending and admitted workloads."""

    __slots__ = (
        "active",
        "admitted",
        "admitted_total",
        "claims_cache",
        "deleted",
        "demand",
        "demand_adds",
        "demand_version",
        "evicted_total",
        "flavor_resources",
        "fresh",
        "frs_by_resource",
        "head_displaced",
        "inactive_reason",
        "inadmissible",
        "layout",
        "least_cache",
        "multi_pod_set",
        "name",
        "node",
        "node_blocked",
        "node_retry",
        "parked",
        "preempted_total",
        "protected_head",
        "quota_retry",
        "retry",
        "screen",
        "screen_first",
        "spec",
    )

    def __init__(self, spec: ClusterQueueSpec, node: QuotaNode) -> None:
        self.name = spec.name
        self.spec = spec
        self.node = node
        # Queued gang keys in queue order: not tried yet / tried and waiting for a change.
        self.active = SortedChunks()
        self.inadmissible = SortedChunks()
        self.retry = False
        # The pending retry was asked for only by freed node capacity (see Engine._node_retry).
        self.node_retry = False
        # ... or only by freed node capacity and quota that other queues of the tree gave back
        # (see Engine._still_short).
        self.quota_retry = False
        # Gangs whose last try failed the node check (some may have left since).
        self.node_blocked: dict[str, Workload] = {}
        self.parked = False
        self.admitted: dict[str, Workload] = {}
        self.inactive_reason: str | None = None
        self.flavor_resources: tuple[FlavorResource, ...] = ()
        self.layout: tuple[object, ...] = ()
        self.frs_by_resource: dict[str, tuple[FlavorResource, ...]] = {}
        # The starving gang that holds a reservation (see Engine._reservation), or None.
        self.protected_head: Workload | None = None
        # Since the queue's last retry, a new gang that failed took the place of a protected head
        # that still waits: gangs that the old head held back may pass now (Engine._cycle).
        self.head_displaced = False
        self.deleted = False
        self.admitted_total = 0
        self.evicted_total = 0
        self.preempted_total = 0
        # Queued gangs grouped by the resources they request, each group indexed by its demand of
        # each resource, so "which queued gangs could fit what is available?" is answered without
        # trying them.
        self.demand: dict[tuple[str, ...], _DemandClass] = {}
        self.demand_version = 0  # bumped whenever a gang joins or leaves the demand index
        self.demand_adds = 0  # bumped whenever a gang joins it
        self.least_cache: tuple[int, list[tuple[str, int]]] = (-1, [])
        # The resource that last showed that no queued gang could fit (checked first next time).
        self.screen_first = ""
        # Why no queued gang could fit, for Engine._still_short: (tree root, the least total
        # demand where flavors add up, whether they do, gangs joined, config version, and per
        # flavor-resource that ruled gangs out: the least demand of them for it, what the queue
        # could get without lenders' claims, the root's ``released`` of it, and each cohort above
        # the queue with its usage of it).
        self.screen: (
            tuple[
                QuotaNode,
                int,
                bool,
                int,
                int,
                tuple[tuple[FlavorResource, int, int, int, tuple[tuple[QuotaNode, int], ...]], ...],
            ]
            | None
        )
        self.screen = None
        # (protected head, quota usage version) -> the flavor-resources it claims back.
        self.claims_cache: tuple[Workload | None, int, tuple[FlavorResource, ...]] = (None, -1, ())
        # Queued gangs with several pod sets (whose demand of a resource may split over flavors).
        self.multi_pod_set = 0
        # StrictFIFO: gangs queued since the queue's last cycle (to tell them what blocks them).
        self.fresh: list[Workload] = []

    def set_spec(self, spec: ClusterQueueSpec) -> None:
        self.spec = spec
        self.flavor_resources = tuple(
            flavor_resource(flavor.name, quota.name)
            for group in spec.resource_groups
            for flavor in group.flavors
            for quota in flavor.resources
        )
        by_resource: dict[str, list[FlavorResource]] = {}
        for fr in self.flavor_resources:
            by_resource.setdefault(fr[1], []).append(fr)
        self.frs_by_resource = {r: tuple(frs) for r, frs in by_resource.items()}
        # What a gang's flavor options depend on, of this spec (see Engine._options).
        self.layout = tuple(
            (tuple(group.covered_resources), tuple(flavor.name for flavor in group.flavors))
            for group in spec.resource_groups
        )

    @property
    def strict(self) -> bool:
        return self.spec.queueing_strategy == "StrictFIFO"

    @property
    def stopped(self) -> bool:
        return self.spec.stop_policy != "None"

    def _index(self, wl: Workload, add: bool) -> None:
        self.demand_version += 1
        if add:
            self.demand_adds += 1
        if len(wl.spec.pod_sets) > 1:
            self.multi_pod_set += 1 if add else -1
        totals = wl.totals
        signature = tuple(sorted(totals))
        demand = self.demand.get(signature)
        if demand is None:
            demand = self.demand[signature] = _DemandClass(signature)
        if add:
            demand.add(wl.order_key, totals)
        else:
            demand.remove(wl.order_key)
            if not demand:
                del self.demand[signature]

    def candidates(
        self, bounds: list[dict[str, int]], short: list[tuple[int, str, int]] | None = None
    ) -> list[OrderKey]:
        """Queued gangs whose demand fits one of ``bounds`` (resource → amount), in queue order.

        Gangs are grouped by the set of resources they request; within a group every gang requests
        each of them, so the resource that leaves the fewest candidates selects and the others
        filter. A gang not in the list needs more of some resource than every bound allows.
        ``short`` (if given) gets, per group and bound that no gang of the group fits, (index of
        the bound, a resource that every gang of the group needs more of, the least total of it),
        with resource "" when no one resource rules them all out (see _DemandClass.fitting).
        """
        out: list[OrderKey] = []
        matched = 0  # bounds that matched some gang: a gang may fit several of them
        groups: list[tuple[str, int]] | None = [] if short is not None else None
        for index, bound in enumerate(bounds):
            size = len(out)
            for demand in self.demand.values():
                out.extend(demand.fitting(bound, groups))
            if groups:
                assert short is not None
                short.extend([(index, resource, least) for resource, least in groups])
                groups.clear()
            if len(out) > size:
                matched += 1
        out.sort()
        if matched > 1:
            unique = out[:1]
            for key in out:
                if key != unique[-1]:
                    unique.append(key)
            return unique
        return out

    def least_common_demand(self) -> list[tuple[str, int]]:
        """(resource, smallest total of it) for each resource that every queued gang requests
        (cached until a gang joins or leaves the queue)."""
        version, cached = self.least_cache
        if version == self.demand_version:
            return cached
        out: list[tuple[str, int]] = []
        demands = list(self.demand.values())
        for resource in demands[0].resources if demands else ():
            least = None
            for demand in demands:
                total = demand.min_total(resource)
                if total is None:
                    break
                least = total if least is None else min(least, total)
            else:
                if least is not None:
                    out.append((resource, least))
        self.least_cache = (self.demand_version, out)
        return out

    def push(self, wl: Workload) -> None:
        self._index(wl, True)
        self.active.add(wl.order_key)
        wl.queued = "active"
        wl.cq = self
        self.parked = False
        if self.spec.queueing_strategy == "StrictFIFO":
            self.fresh.append(wl)

    def push_inadmissible(self, wl: Workload) -> None:
        self._index(wl, True)
        self.inadmissible.add(wl.order_key)
        wl.queued = "inadmissible"
        wl.cq = self

    def discard(self, wl: Workload) -> None:
        if wl.queued == "active":
            self.active.remove(wl.order_key)
        elif wl.queued == "inadmissible":
            self.inadmissible.remove(wl.order_key)
        else:
            return
        self._index(wl, False)
        wl.queued = None

    def make_inadmissible(self, wl: Workload) -> None:
        if wl.queued == "active":
            self.active.remove(wl.order_key)
            self.inadmissible.add(wl.order_key)
            wl.queued = "inadmissible"

    def pending_count(self) -> int:
        return len(self.active) + len(self.inadmissible)

    def position(self, key: OrderKey) -> int:
        """1-based position of a queued workload among all pending workloads of this queue."""
        rank = self.active.count_below(key) + self.inadmissible.count_below(key)
        return rank + 1

    def cursor(self, include_inadmissible: bool) -> Iterator[OrderKey]:
        """Queued workloads to try this cycle, in queue order (snapshot: do not mutate while used)."""
        if include_inadmissible and self.inadmissible:
            return merge_keys(iter(self.active), iter(self.inadmissible))
        return iter(self.active)

    def ordered(self) -> Iterator[OrderKey]:
        """All pending workloads in queue order."""
        return merge_keys(iter(self.active), iter(self.inadmissible))

    def head(self) -> Workload | None:
        """The protected head if it is still queued here (see ``Engine._reservation_blocks``)."""
        head = self.protected_head
        if head is not None and (head.queued is None or head.cq is not self or head.state != "Pending"):
            self.protected_head = head = None
        return head
