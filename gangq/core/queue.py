"""Per-ClusterQueue pending queues and the gangs in them.

Each ClusterQueue keeps two sorted lists with one order (higher priority first, then earlier queue
timestamp, then submission sequence):

- ``active``: workloads not yet tried since they were queued;
- ``inadmissible``: workloads that were tried and did not fit. They are tried again only after
  something that could let them fit changed, never in a busy loop.

A workload's position is its rank across both lists, so it is O(log n) to answer "what position
am I?" even with 100,000 pending workloads. :class:`Workload` is the engine's record of one gang
through its life: pending → admitted → evicting → ...
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Literal

from gangq.core.chunks import SortedChunks
from gangq.core.decisions import Admission, PendingReason
from gangq.core.demand import DemandClass, OrderKey, ShapeIndex, ShapeQueue, merge_keys
from gangq.core.flavors import FlavorOptions
from gangq.core.model import ClusterQueueSpec, FlavorResource, WorkloadSpec, flavor_resource
from gangq.core.quota import QuotaNode

State = Literal["Pending", "Admitted", "Evicting", "Finished"]

# A placement kept for reuse (Placement.place): (the state it was found in: node epoch, config
# version, pools version, flavor option), the node charges (node, requests, pods), the pods per
# (pod set, node), how many pods.
Placed = tuple[tuple[int, int, int, int], list[tuple[Any, Any, int]], dict[tuple[int, str], int], int]


class NodeMark:
    """What a gang's last failed node check proved, for a retry filter: at capacity mark
    ``freed_seq`` (``NodeIndex.freed_seq``) the nodes were ``shortfall`` pods short for each of
    the flavor ``options`` (indices into the gang's flavor options of ``config``); only nodes of
    ``pools`` (ids, while the set of pools is ``pools_version``) could take its pods.

    It stays sound however long ago it was made: nodes whose capacity did not rise since then can
    take no more of its pods than they could, so only the nodes freed since can add any. A check
    that finds them still too few moves it forward (Placement.mark_holds).
    """

    __slots__ = ("config", "freed_seq", "options", "pools", "pools_version", "shortfall")

    def __init__(
        self,
        freed_seq: int,
        shortfall: int,
        config: tuple[int, str],
        options: frozenset[int],
        pools: frozenset[int] = frozenset(),
        pools_version: int = -1,
    ) -> None:
        self.freed_seq = freed_seq
        self.shortfall = shortfall
        self.config = config
        self.options = options
        self.pools = pools
        self.pools_version = pools_version


class Workload:
    """Mutable engine state of a gang. Only the engine changes it."""

    __slots__ = (
        "admission",
        "admit_count",
        "admitted_at",
        "beyond",
        "choices",
        "cites",
        "claim",
        "cq",
        "deactivated",
        "emitted",
        "end_time",
        "evict_requeue_at",
        "evicted_by",
        "has_topology",
        "held",
        "held_for",
        "holding",
        "key",
        "lq_key",
        "message",
        "min_member",
        "node_mark",
        "order_key",
        "pending_since",
        "placement",
        "planned",
        "pods",
        "pods_ready",
        "preempt_at",
        "preempted",
        "queue_ts",
        "queued",
        "ready_evictions",
        "reason",
        "requeue_at",
        "running",
        "seq",
        "shape",
        "shape_queue",
        "shelter_until",
        "spec",
        "starve_at",
        "state",
        "totals",
        "usage",
        "victims",
        "victims_short",
    )

    def __init__(self, spec: WorkloadSpec, seq: int, now: float) -> None:
        self.spec = spec
        self.key = spec.key
        self.seq = seq
        self.state: State = "Pending"
        self.queue_ts = spec.creation_time
        self.order_key: OrderKey = (-spec.priority, self.queue_ts, seq, spec.key)
        self.cq: ClusterQueueState | None = None
        self.queued: Literal["active", "inadmissible"] | None = None
        self.reason: PendingReason = "Pending"
        self.message = "waiting for the first scheduling cycle"
        self.emitted: tuple[str, str] | None = None
        # The gang its pending reason names as what holds it back (the head whose reservation it
        # would delay, the claimant whose claim keeps it from borrowing): see EngineState.set_reason.
        self.cites: Workload | None = None
        self.admission: Admission | None = None
        self.admitted_at = 0.0
        self.usage: dict[FlavorResource, int] = {}
        # Node capacity this gang holds: planned-but-unbound pods and bound pods, per node.
        self.held: dict[str, dict[str, int]] = {}
        # Planned, not yet bound pods: (pod set index, node) -> count.
        self.planned: dict[tuple[int, str], int] = {}
        self.running = 0
        self.pods_ready = False
        self.ready_evictions = 0
        self.requeue_at: float | None = None
        self.deactivated = False
        self.evict_requeue_at: float | None = None
        self.pending_since = now
        totals: dict[str, int] = {}
        for ps in spec.pod_sets:
            for resource, amount in ps.requests.items():
                totals[resource] = totals.get(resource, 0) + amount * ps.count
        self.totals = totals
        self.min_member = spec.min_member if spec.min_member is not None else spec.total_pods
        # Everything of the spec a try depends on but its runtime limit and place in the queue
        # (see ShapeQueue).
        # Some pod set asks for a topology placement (see gangq.core.topology).
        self.has_topology = any(ps.topology is not None for ps in spec.pod_sets)
        self.shape: tuple[object, ...] = (
            tuple(
                (ps.name, ps.count, tuple(sorted(ps.requests.items())), ps.placement_signature())
                for ps in spec.pod_sets
            ),
            self.min_member,
            tuple(sorted(spec.min_resources.items())) if spec.min_resources else (),
        )
        # While it waits on its queue's inadmissible list: the ShapeQueue that holds it there
        # (its queue's ``shapes[shape]``), so that finding it hashes no shape tuple.
        self.shape_queue: ShapeQueue | None = None
        self.admit_count = 0
        self.end_time: float | None = None
        self.lq_key = f"{spec.namespace}/{spec.queue_name}"
        # Its pods bound to nodes (Capacity.update_pod), each with whether it holds node capacity for
        # the gang (``held``): bound while the gang was admitted. One bound before the admission
        # (a JobSet that arrived unsuspended) uses its node like any other pod.
        self.pods: dict[str, bool] = {}
        # Gangs this one preempted (see Reservations.reservation): their capacity is promised to it.
        self.victims: tuple[str, ...] = ()
        # Its last preemption attempt found its stopping victims short and chose no others: its
        # reservation had no time then (see Preemption.preempt).
        self.victims_short = False
        # While it stops after a preemption: the preemptor's key (see Preemption.claimed_by_other).
        self.evicted_by: str | None = None
        # Once it has stopped after a preemption: the preemptor it waits for (see
        # Attempt.holding_preemptor); and, on a preemptor, the gangs that wait for it.
        self.held_for: str | None = None
        self.holding: list[str] = []
        self.preempted = 0  # times it was evicted by preemption (see Attempt.sheltered)
        self.shelter_until = 0.0  # until when Attempt.sheltered applies
        self.starve_at = 0.0  # a timer retries its queue then (see Preemption.find_victims)
        self.preempt_at = 0.0  # its preemption delay ends then; a timer retries its queue (Preemption.delayed)
        # While it waits for its victims: the quota of the option it chose them for (see
        # Reservations.charge_claims).
        self.claim: dict[FlavorResource, int] = {}
        # (config version, ClusterQueue name, flavor options): see flavors.flavor_options.
        self.choices: tuple[int, str, FlavorOptions] | None = None
        # (config version, ClusterQueue name, per flavor option the flavor-resources it needs
        # more of than the queue's nominal quota; None if some option needs none): see
        # Claims.kept_out.
        self.beyond: tuple[int, str, tuple[tuple[FlavorResource, ...], ...] | None] | None = None
        # After a failed node check of a one-pod-set gang: see NodeMark.
        self.node_mark: NodeMark | None = None
        # Its last placement that fitted every pod: see Placement.place.
        self.placement: Placed | None = None

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def creation_time(self) -> float:
        return self.spec.creation_time

    def set_queue_ts(self, ts: float) -> None:
        self.queue_ts = ts
        self.order_key = (-self.spec.priority, ts, self.seq, self.key)

    def hold(self, node: str, requests: dict[str, int], count: int) -> None:
        """Record ``count`` pods of ``requests`` held on ``node`` (negative releases)."""
        held = self.held.setdefault(node, {})
        for resource, amount in requests.items():
            held[resource] = held.get(resource, 0) + amount * count
        if all(v == 0 for v in held.values()):
            del self.held[node]


def _preempts(spec: ClusterQueueSpec) -> bool:
    """May the ClusterQueue preempt at all (within itself or to reclaim in its cohort)?"""
    p = spec.preemption
    return p.within_cluster_queue != "Never" or p.reclaim_within_cohort != "Never"


class ClusterQueueState:
    """A ClusterQueue as the scheduler sees it: spec, quota node, pending and admitted workloads."""

    __slots__ = (
        "active",
        "admitted",
        "admitted_total",
        "deleted",
        "demand",
        "demand_adds",
        "demand_version",
        "evicted_total",
        "flavor_resources",
        "frs_by_resource",
        "inactive_reason",
        "inadmissible",
        "layout",
        "least_cache",
        "multi_pod_set",
        "name",
        "node",
        "preempted_total",
        "preempts",
        "protected_head",
        "shape_index",
        "shapes",
        "spec",
    )

    def __init__(self, spec: ClusterQueueSpec, node: QuotaNode) -> None:
        self.name = spec.name
        self.spec = spec
        self.preempts = _preempts(spec)
        self.node = node
        # Queued gang keys in queue order: not tried yet / tried and waiting for a change.
        self.active = SortedChunks()
        self.inadmissible = SortedChunks()
        self.admitted: dict[str, Workload] = {}
        self.inactive_reason: str | None = None
        self.flavor_resources: tuple[FlavorResource, ...] = ()
        self.layout: tuple[object, ...] = ()
        self.frs_by_resource: dict[str, tuple[FlavorResource, ...]] = {}
        # The starving gang that holds a reservation (see Reservations.reservation), or None.
        self.protected_head: Workload | None = None
        self.deleted = False
        self.admitted_total = 0
        self.evicted_total = 0
        self.preempted_total = 0
        # Queued gangs grouped by the resources they request, each group indexed by its demand of
        # each resource, so "which queued gangs could fit what is available?" is answered without
        # trying them.
        self.demand: dict[tuple[str, ...], DemandClass] = {}
        self.demand_version = 0  # bumped whenever a gang joins or leaves the demand index
        self.demand_adds = 0  # bumped whenever a gang joins it
        self.least_cache: tuple[int, list[tuple[str, int]]] = (-1, [])
        # Queued gangs with several pod sets (whose demand of a resource may split over flavors).
        self.multi_pod_set = 0
        # Its waiting (inadmissible) gangs by shape (see ShapeQueue).
        self.shapes: dict[tuple[object, ...], ShapeQueue] = {}
        self.shape_index = ShapeIndex()  # the same shapes, by what they request

    def set_spec(self, spec: ClusterQueueSpec) -> None:
        self.spec = spec
        self.preempts = _preempts(spec)
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
        # What a gang's flavor options depend on, of this spec (see Placement.options).
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
            demand = self.demand[signature] = DemandClass(signature)
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
        with resource "" when no one resource rules them all out (see DemandClass.fitting).
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

    def push_inadmissible(self, wl: Workload) -> None:
        self._index(wl, True)
        self.inadmissible.add(wl.order_key)
        self._add_shape(wl)
        wl.queued = "inadmissible"
        wl.cq = self

    def discard(self, wl: Workload) -> None:
        if wl.queued == "active":
            self.active.remove(wl.order_key)
        elif wl.queued == "inadmissible":
            self.inadmissible.remove(wl.order_key)
            shapes = wl.shape_queue
            assert shapes is not None
            wl.shape_queue = None
            shapes.remove(wl.order_key)
            if not shapes:
                del self.shapes[wl.shape]
                self.shape_index.remove(shapes)
        else:
            return
        self._index(wl, False)
        wl.queued = None

    def make_inadmissible(self, wl: Workload) -> None:
        if wl.queued == "active":
            self.active.remove(wl.order_key)
            self.inadmissible.add(wl.order_key)
            self._add_shape(wl)
            wl.queued = "inadmissible"

    def _add_shape(self, wl: Workload) -> None:
        shapes = self.shapes.get(wl.shape)
        if shapes is None:
            shapes = self.shapes[wl.shape] = ShapeQueue(wl.shape, wl.totals)
            self.shape_index.add(shapes)
        limit = wl.spec.runtime_limit
        shapes.add(wl.order_key, math.inf if limit is None else limit)
        wl.shape_queue = shapes

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
        """The protected head if it is still queued here (see ``Reservations.blocks``)."""
        head = self.protected_head
        if head is not None and (head.queued is None or head.cq is not self or head.state != "Pending"):
            self.protected_head = head = None
        return head
