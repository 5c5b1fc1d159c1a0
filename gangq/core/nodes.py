"""Nodes, their free capacity, and gang placement (pod-level bin packing).

Nodes with the same labels and taints form a *pool*; a pool keeps its schedulable nodes in a sorted
index keyed by free capacity (extended resources first, then cpu, then memory), so placing a pod is
a bisect to the smallest node that can take it (best fit) instead of a scan of every node.

Free capacity = allocatable − requests of pods bound to the node − pods that admitted gangs have
been planned onto but that are not bound yet. The engine changes free capacity only through
:class:`NodeIndex` methods, each of which a :class:`~gangq.core.statement.Statement` can undo.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gangq.core.chunks import SortedChunks
from gangq.core.model import FlavorSpec, NodeSpec, PodSetSpec
from gangq.core.selectors import (
    Taint,
    Toleration,
    affinity_compatible,
    affinity_matches,
    selector_compatible,
    selector_matches,
    taints_tolerated,
)

_BASE_RESOURCES = ("cpu", "memory")


def _key_resources(allocatable: Mapping[str, int]) -> tuple[str, ...]:
    extended = sorted(r for r in allocatable if r not in ("cpu", "memory", "pods", "ephemeral-storage"))
    return (*extended, *_BASE_RESOURCES)


class NodeState:
    """One node and its free capacity."""

    __slots__ = (
        "allocatable",
        "free",
        "key",
        "labels",
        "name",
        "name_code",
        "pool",
        "rkeys",
        "schedulable",
        "taints",
        "values",
    )

    def __init__(self, spec: NodeSpec) -> None:
        self.name = spec.name
        self.labels = spec.labels
        self.taints = spec.taints
        self.allocatable = spec.allocatable
        self.free: dict[str, int] = dict(spec.allocatable)
        self.schedulable = not spec.unschedulable
        self.pool: NodePool | None = None
        # Its entry in its pool's index (NodePool.encode) and the free amounts of the pool's key
        # resources that the entry holds; its name's code there.
        self.key = 0
        self.values: tuple[int, ...] = ()
        self.name_code = 0
        # Per secondary list of its pool (``NodePool.by_resource``): the value it is listed with.
        self.rkeys: list[int] = []

    def describes(self, spec: NodeSpec) -> bool:
        """Is ``spec`` this node as it is (a status update, not a change of what it offers)?"""
        return (
            self.allocatable == spec.allocatable
            and self.schedulable == (not spec.unschedulable)
            and _signature(self.labels, self.taints) == _signature(spec.labels, spec.taints)
        )

    def fits(self, requests: Mapping[str, int], count: int = 1) -> bool:
        free = self.free
        for resource, amount in requests.items():
            if free.get(resource, 0) < amount * count:
                return False
        return True

    def how_many(self, requests: Mapping[str, int], limit: int) -> int:
        """How many pods of ``requests`` fit on this node, at most ``limit``."""
        n = limit
        free = self.free
        for resource, amount in requests.items():
            if amount > 0:
                n = min(n, free.get(resource, 0) // amount)
                if n <= 0:
                    return 0
        return n


class NodePool:
    """Nodes that share labels and taints, indexed by free capacity.

    ``index`` sorts schedulable nodes by their free capacity of the key resources in order, then
    name; ``by_resource[i - 1]`` sorts them by the free capacity of key resource ``i`` alone (for
    the first one, ``index`` serves), so that a pod whose first key resource is not the scarce one
    (a cpu-only pod on GPU nodes, a GPU pod where cpu runs out first) is found without scanning
    every node that has enough of the first.

    The secondary lists are brought up to date only when a query needs one: a query uses list
    ``i`` only if fewer nodes have enough of resource ``i`` than of the first key resource, and a
    histogram of free capacity per power of two (``hist``, always current) bounds that number from
    below. In a large pool where one resource is the scarce one (cpu, with memory to spare) the
    others' lists are rarely needed, and keeping them sorted was half of every placement's cost.
    """

    __slots__ = (
        "biases",
        "by_name_code",
        "by_resource",
        "hist",
        "index",
        "key_resources",
        "labels",
        "name_bytes",
        "nodes",
        "pending",
        "pool_id",
        "shifts",
        "stale",
        "taints",
        "widths",
    )

    def __init__(
        self, pool_id: int, labels: Mapping[str, str], taints: Sequence[Taint], key_resources: tuple[str, ...]
    ) -> None:
        self.pool_id = pool_id
        self.labels = labels
        self.taints = taints
        self.key_resources = key_resources
        # The hottest structure of a busy cluster: every placement and release moves entries
        # (see SortedChunks).
        self.index = SortedChunks()
        self.by_resource: tuple[SortedChunks, ...] = tuple(SortedChunks() for _ in key_resources[1:])
        # Per secondary list: nodes whose entry there is not their current free capacity yet.
        self.pending: tuple[dict[str, NodeState], ...] = tuple({} for _ in key_resources[1:])
        # Per secondary list: schedulable nodes per bucket of their free capacity (_bucket).
        self.hist: tuple[dict[int, int], ...] = tuple({} for _ in key_resources[1:])
        self.nodes: dict[str, NodeState] = {}
        # Nodes whose free capacity changed since the indexes were last refreshed; their
        # ``key`` is still the one indexed.
        self.stale: dict[str, NodeState] = {}
        # The index's entry encoding (see encode): bits and offset per key resource, and the
        # length of the names' codes; the indexed nodes by their name's code.
        self.widths: tuple[int, ...] = tuple(2 for _ in key_resources)
        self.biases: tuple[int, ...] = tuple(2 for _ in key_resources)
        self.name_bytes = 0
        self.shifts = self._field_shifts()
        self.by_name_code: dict[int, NodeState] = {}

    def node_key(self, node: NodeState) -> tuple[Any, ...]:
        """The node's current place in the index as a tuple: its free amounts of the key
        resources in order, then its name (what ``encode`` encodes; comparable across pools)."""
        return (*self.free_values(node), node.name)

    def free_values(self, node: NodeState) -> tuple[int, ...]:
        free = node.free
        return tuple([free.get(r, 0) for r in self.key_resources])

    def encode(self, values: tuple[int, ...], node: NodeState) -> int:
        """The index entry of ``node`` with free amounts ``values``: one int that orders as the
        tuple (values, name) does. The index is the hottest structure of a busy cluster, and in a
        large one cold: a bisect step on a tuple read the tuple and then its first int, each a
        cache miss, where an int is read once (5,000 nodes: a third less time per index move).
        Each amount gets a fixed bit field (offset, so that amounts below zero, pods bound beyond
        allocatable, order too), the name the bytes of its UTF-8 encoding plus one (zero pads a
        shorter name, so a prefix sorts first). A value or name that does not fit its field
        widens the fields and re-encodes the pool."""
        code = 0
        widths = self.widths
        biases = self.biases
        for i in range(len(values)):
            v = values[i] + biases[i]
            if v < 0 or v >> widths[i]:
                self._reencode(values)
                return self.encode(values, node)
            code = (code << widths[i]) | v
        return (code << (8 * self.name_bytes)) | node.name_code

    def _probe(self, amount: int) -> int:
        """The least entry with ``amount`` of the first key resource free (a bound for bisects)."""
        return (amount + self.biases[0]) << self.shifts[0]

    def _field_shifts(self) -> tuple[int, ...]:
        """Per key resource, how far its field sits from the low end of an entry (see encode)."""
        shift = 8 * self.name_bytes
        shifts = [0] * len(self.widths)
        for i in range(len(self.widths) - 1, -1, -1):
            shifts[i] = shift
            shift += self.widths[i]
        return tuple(shifts)

    def _name_code(self, name: str) -> int:
        raw = bytes(b + 1 for b in name.encode())  # UTF-8 has no 0xff byte
        return int.from_bytes(raw.ljust(self.name_bytes, b"\0"), "big")

    def _reencode(self, extra: tuple[int, ...] = ()) -> None:
        """Fields wide enough for every node's allocatable, indexed and current free amounts (and
        ``extra``), and for every name; every entry encoded again and the index rebuilt."""
        indexed = [n for n in self.nodes.values() if n.schedulable and n.values]
        widths = []
        for i, resource in enumerate(self.key_resources):
            most = abs(extra[i]) if extra else 0
            for n in self.nodes.values():
                most = max(most, abs(n.allocatable.get(resource, 0)), abs(n.free.get(resource, 0)))
                if n.values:
                    most = max(most, abs(n.values[i]))
            widths.append(most.bit_length() + 2)
        self.widths = tuple(widths)
        self.biases = tuple(1 << (w - 1) for w in widths)
        self.name_bytes = max((len(n.encode()) for n in self.nodes), default=0)
        self.shifts = self._field_shifts()
        self.by_name_code = {}
        for n in self.nodes.values():
            n.name_code = self._name_code(n.name)
        index = SortedChunks()
        for n in indexed:
            n.key = self.encode(n.values, n)
            self.by_name_code[n.name_code] = n
            index.add(n.key)
        self.index = index

    def _insert(self, node: NodeState) -> None:
        if len(node.name.encode()) > self.name_bytes:
            self._reencode()
        node.name_code = self._name_code(node.name)
        values = self.free_values(node)
        node.key = self.encode(values, node)
        node.values = values
        self.by_name_code[node.name_code] = node
        self.index.add(node.key)
        name = node.name
        node.rkeys = list(values[1:])
        for i, entries in enumerate(self.by_resource, 1):
            entries.add((values[i], name))
            _count(self.hist[i - 1], values[i], 1)

    def _delete(self, node: NodeState) -> None:
        self.index.remove(node.key)
        self.by_name_code.pop(node.name_code, None)
        name = node.name
        values = node.values
        for i, entries in enumerate(self.by_resource, 1):
            entries.remove((node.rkeys[i - 1], name))
            self.pending[i - 1].pop(name, None)
            _count(self.hist[i - 1], values[i], -1)
        node.values = ()

    def add(self, node: NodeState) -> None:
        self.nodes[node.name] = node
        node.pool = self
        if node.schedulable:
            self._insert(node)

    def remove(self, node: NodeState) -> None:
        self.nodes.pop(node.name, None)
        if node.schedulable:
            self._delete(node)
            self.stale.pop(node.name, None)
        node.pool = None

    def reindex(self, node: NodeState) -> None:
        """The node's free capacity changed: its index entries are refreshed before the next
        query (:meth:`best_fit`). Lazily, because a gang's what-if charges nodes and undoes the
        charge, and a placement that fails is undone: most changes cancel out before anyone looks.
        """
        if node.schedulable:
            self.stale[node.name] = node

    def _refresh(self) -> None:
        for node in self.stale.values():
            old = node.values
            values = self.free_values(node)
            if values == old:
                continue
            key = self.encode(values, node)  # first: it may re-encode the index
            index = self.index
            index.remove(node.key)
            index.add(key)
            node.key = key
            node.values = values
            for i in range(1, len(values)):
                if old[i] != values[i]:  # most pods change only some of the key resources
                    hist = self.hist[i - 1]
                    _count(hist, old[i], -1)
                    _count(hist, values[i], 1)
                    self.pending[i - 1][node.name] = node
        self.stale.clear()

    def _flush(self, i: int) -> SortedChunks:
        """Secondary list ``i`` (1-based key resource), up to date."""
        entries = self.by_resource[i - 1]
        pending = self.pending[i - 1]
        if pending:
            for name, node in pending.items():
                value = node.values[i]
                old = node.rkeys[i - 1]
                if value != old:
                    entries.remove((old, name))
                    entries.add((value, name))
                    node.rkeys[i - 1] = value
            pending.clear()
        return entries

    def _overlay(self) -> list[tuple[NodeState, tuple[int, ...]]]:
        """The stale nodes whose free amounts did change, each with its current ones; forgets
        the others (a what-if that was undone left them where they are indexed)."""
        stale = self.stale
        moved: list[tuple[NodeState, tuple[int, ...]]] = []
        reverted: list[str] = []
        for name, node in stale.items():
            values = self.free_values(node)
            if values == node.values:
                reverted.append(name)
            else:
                moved.append((node, values))
        for name in reverted:
            del stale[name]
        return moved

    def _at_least(self, i: int, amount: int, moved: list[tuple[NodeState, tuple[int, ...]]]) -> int:
        """A lower bound of how many schedulable nodes have ``amount`` or more of key resource
        ``i`` free (1-based): those in buckets that hold only values of at least ``amount``
        (``moved``: stale nodes, counted at their current key, see :meth:`best_fit`)."""
        hist = self.hist[i - 1]
        if amount <= 0:
            first = 0  # none, or more
        else:
            first = amount.bit_length()
            if (1 << (first - 1)) < amount:
                first += 1  # amount's own bucket also holds smaller values
        count = 0
        for bucket, n in hist.items():
            if bucket >= first:
                count += n
        for node, values in moved:
            if _bucket(values[i]) >= first:
                count += 1
            if _bucket(node.values[i]) >= first:
                count -= 1
        return count

    def best_fit(self, requests: Mapping[str, int]) -> NodeState | None:
        """A node that fits ``requests`` with the least free capacity of the scarcest resource.

        The key resource with the fewest nodes that have enough of it selects the nodes to scan
        (every node has enough of a resource the pod does not request): when it is the first key
        resource, in key order (least free first, by each key resource in turn), otherwise in
        order of that resource's free capacity. None if no node fits.

        A few stale nodes (at most ``_OVERLAY_MAX``) are not re-sorted first: they are counted
        and looked at by their current key, beside the index, which skips their old entries.
        Placing a gang charges one node after another, and re-sorting the node the last pod went
        to at each search is wasted when a failed placement or a what-if is then undone (the
        nodes go back); an undone node is simply forgotten.
        """
        stale = self.stale
        moved: list[tuple[NodeState, tuple[int, ...]]] = []
        if stale:
            if len(stale) > _OVERLAY_MAX:
                self._refresh()
            else:
                moved = self._overlay()
        key_resources = self.key_resources
        index = self.index
        # A resource the pod does not request bounds nothing: a node overcommitted on it (bound
        # pods beyond allocatable, a negative free amount) can still take the pod.
        bounded = key_resources[0] in requests
        amount = requests[key_resources[0]] if bounded else 0
        first_probe = self._probe(amount) if bounded else -1
        best_i = 0
        best_count = index.count_from(first_probe)
        if bounded:
            best_count += _moved_gain(moved, 0, amount)
        if best_count == 0:
            return None
        first_count = best_count
        best_probe: Any = first_probe
        best_amount = amount
        for i in range(1, len(key_resources)):
            resource = key_resources[i]
            if resource not in requests:
                continue  # it bounds nothing (see above), so it cannot select
            amount = requests[resource]
            if self._at_least(i, amount, moved) >= first_count:
                continue  # as many nodes have enough of it as of the first: it cannot select
            probe = (amount,)
            count = self._flush(i).count_from(probe) + _moved_gain(moved, i, amount)
            if count == 0:
                return None
            if count < best_count:
                best_i, best_count, best_probe, best_amount, bounded = i, count, probe, amount, True
        # The best of the moved nodes, by its current entry in the list to scan.
        found: NodeState | None = None
        found_entry: Any = None
        widths = self.widths
        for node, values in moved:
            if (bounded and values[best_i] < best_amount) or not node.fits(requests):
                continue
            entry: Any = self.encode(values, node) if best_i == 0 else (values[best_i], node.name)
            if found is None or entry < found_entry:
                found, found_entry = node, entry
        if best_i == 0:
            if self.widths is not widths:  # an amount outgrew its field: the index was re-encoded
                return self.best_fit(requests)
            by_code = self.by_name_code
            mask = (1 << (8 * self.name_bytes)) - 1
            start: int = best_probe
            while True:
                for code in index.iter_from(start):
                    if found is not None and found_entry < code:
                        return found
                    node = by_code[code & mask]
                    if node.name in stale:
                        continue  # indexed at its old amounts: looked at above
                    if node.fits(requests):
                        return node
                    skip = self._skip_to(code, requests)
                    if skip > code:
                        start = skip
                        break
                else:
                    return found
        nodes = self.nodes
        for entry in self.by_resource[best_i - 1].iter_from(best_probe):
            if found is not None and found_entry < entry:
                break
            name = entry[-1]
            if name in stale:
                continue  # indexed at its old amounts: looked at above
            node = nodes[name]
            if node.fits(requests):
                return node
        return found

    def _skip_to(self, code: int, requests: Mapping[str, int]) -> int:
        """The least index entry after ``code`` (a node that cannot take ``requests``) that might:
        past every entry that, like it, has the same free amounts of the key resources before the
        first requested one it lacks, and less of that one.

        The index orders nodes by the free amount of each key resource in turn; a scan for a pod
        that fits the first on many nodes but not the second (a GPU pod with too little CPU left
        beside the GPUs) met those one by one, each a cold node in a large pool.
        ``code`` itself when no key resource explains the misfit (the scan goes on).
        """
        key_resources = self.key_resources
        widths = self.widths
        biases = self.biases
        shifts = self.shifts
        for i in range(1, len(key_resources)):
            need = requests.get(key_resources[i])
            if need is None:
                continue
            width = widths[i]
            if ((code >> shifts[i]) & ((1 << width) - 1)) - biases[i] >= need:
                continue
            prefix = code >> (shifts[i] + width)  # the amounts before resource i
            target = need + biases[i]
            if target >> width:
                return (prefix + 1) << (shifts[i] + width)  # no node has that much: next prefix
            return ((prefix << width) | target) << shifts[i]
        return code


_OVERLAY_MAX = 8  # stale nodes that best_fit looks at beside the index (more: re-sort them first)


def _moved_gain(moved: list[tuple[NodeState, tuple[int, ...]]], i: int, amount: int) -> int:
    """How many more of the ``moved`` nodes have ``amount`` or more of key resource ``i`` free
    now than where the index has them (negative: fewer)."""
    gain = 0
    for node, values in moved:
        if values[i] >= amount:
            gain += 1
        if node.values[i] >= amount:
            gain -= 1
    return gain


def _bucket(value: int) -> int:
    """Histogram bucket of a free amount: b for values in [2^(b-1), 2^b), 0 for none, -1 for
    less than none (pods bound beyond allocatable)."""
    return value.bit_length() if value > 0 else (0 if value == 0 else -1)


def _count(hist: dict[int, int], value: int, delta: int) -> None:
    bucket = _bucket(value)
    count = hist.get(bucket, 0) + delta
    if count:
        hist[bucket] = count
    else:
        del hist[bucket]


def _signature(labels: Mapping[str, str], taints: Sequence[Taint]) -> tuple[object, ...]:
    return (tuple(sorted(labels.items())), tuple(sorted(t.signature() for t in taints)))


class Placement:
    """The result of placing a gang: pods per (pod set index, node), and how many were placed."""

    __slots__ = ("placed", "pods")

    def __init__(self) -> None:
        self.pods: dict[tuple[int, str], int] = {}
        self.placed = 0


class NodeIndex:
    """All nodes, grouped into pools; the only place that changes free node capacity."""

    __slots__ = (
        "_candidates",
        "_empty",
        "_empty_version",
        "_next_pool_id",
        "_pool_by_signature",
        "epoch",
        "freed",
        "freed_base",
        "log",
        "nodes",
        "pools",
        "spec_version",
        "version",
    )

    def __init__(self) -> None:
        self.nodes: dict[str, NodeState] = {}
        self.pools: dict[int, NodePool] = {}
        self._pool_by_signature: dict[tuple[object, ...], NodePool] = {}
        self._next_pool_id = 0
        self._candidates: dict[tuple[object, ...], tuple[NodePool, ...]] = {}
        # What empty nodes could hold (from node specs only): see :meth:`empty_total`.
        self._empty: dict[tuple[object, ...], Any] = {}
        self._empty_version = -1
        self.version = 0  # bumped when the set of pools changes (invalidates candidate caches)
        self.spec_version = 0  # bumped when any node is added, replaced or removed
        # Bumped whenever free capacity changes for real: outside a statement, or by a statement
        # that keeps its changes (Statement). Same epoch and no open what-if change: same state.
        self.epoch = 0
        # Nodes whose free capacity rose (pods released, node added), oldest first; ``freed_base``
        # is the sequence number of ``freed[0]``. See :meth:`pods_freed_since`.
        self.freed: list[NodeState] = []
        self.freed_base = 0
        # Undo log of the open statement, if any: (node, requests, count) allocated.
        self.log: list[tuple[NodeState, Mapping[str, int], int]] | None = None

    # -- nodes -----------------------------------------------------------------------------------

    def upsert(self, spec: NodeSpec) -> NodeState:
        """Add or replace a node, keeping the usage already charged to it."""
        self.spec_version += 1
        self.epoch += 1
        old = self.nodes.get(spec.name)
        node = NodeState(spec)
        if old is not None:
            used = {r: old.allocatable.get(r, 0) - old.free.get(r, 0) for r in set(old.allocatable) | set(old.free)}
            for resource, amount in used.items():
                if amount:
                    node.free[resource] = node.free.get(resource, 0) - amount
            self._detach(old)
        self.nodes[spec.name] = node
        sig = _signature(node.labels, node.taints)
        pool = self._pool_by_signature.get(sig)
        if pool is None:
            pool = NodePool(self._next_pool_id, node.labels, node.taints, _key_resources(node.allocatable))
            self._next_pool_id += 1
            self._pool_by_signature[sig] = pool
            self.pools[pool.pool_id] = pool
            self._candidates.clear()
            self.version += 1
        pool.add(node)
        self._note_freed(node)
        return node

    def _detach(self, node: NodeState) -> None:
        pool = node.pool
        if pool is None:
            return
        pool.remove(node)
        if not pool.nodes:
            del self.pools[pool.pool_id]
            del self._pool_by_signature[_signature(pool.labels, pool.taints)]
            self._candidates.clear()
            self.version += 1

    def remove(self, name: str) -> NodeState | None:
        node = self.nodes.pop(name, None)
        if node is not None:
            self.spec_version += 1
            self.epoch += 1
            self._detach(node)
        return node

    # -- capacity --------------------------------------------------------------------------------

    def allocate(self, node: NodeState, requests: Mapping[str, int], count: int = 1) -> None:
        """Charge ``count`` pods of ``requests`` to the node (negative ``count`` releases)."""
        free = node.free
        for resource, amount in requests.items():
            free[resource] = free.get(resource, 0) - amount * count
        if node.pool is not None:
            node.pool.reindex(node)
        if self.log is not None:
            self.log.append((node, requests, count))
        else:
            self.epoch += 1
            if count < 0:
                self._note_freed(node)

    def undo(self, mark: int) -> None:
        """Roll the open statement's node changes back to ``mark``."""
        log = self.log
        assert log is not None
        while len(log) > mark:
            node, requests, count = log.pop()
            free = node.free
            for resource, amount in requests.items():
                free[resource] = free.get(resource, 0) + amount * count
            if node.pool is not None:
                node.pool.reindex(node)

    _FREED_KEPT = 4096

    def _note_freed(self, node: NodeState) -> None:
        freed = self.freed
        freed.append(node)
        if len(freed) > 2 * self._FREED_KEPT:
            drop = len(freed) - self._FREED_KEPT
            del freed[:drop]
            self.freed_base += drop

    @property
    def freed_seq(self) -> int:
        """Sequence number of the next capacity increase (a mark for :meth:`pods_freed_since`)."""
        return self.freed_base + len(self.freed)

    def pods_freed_since(
        self,
        since: int,
        requests: Mapping[str, int],
        limit: int,
        scan_limit: int = 64,
        pools: frozenset[int] | None = None,
    ) -> int | None:
        """How many more pods of ``requests`` (at most ``limit``) the nodes freed since mark
        ``since`` (and, given ``pools``, only nodes of those pools) could take now, compared with
        what they could take then. None when it cannot tell (the mark is older than the nodes
        kept, or more than ``scan_limit`` were freed).

        An upper bound for a gang whose placement failed: only nodes whose capacity rose since
        the mark can take more pods than they could, so while this stays below the pods it was
        short, a new attempt fails too (see NodeMark).
        """
        start = since - self.freed_base
        if start < 0 or len(self.freed) - start > scan_limit:
            return None
        seen: set[str] = set()
        total = 0
        for node in self.freed[start:]:
            if node.name in seen or self.nodes.get(node.name) is not node:
                continue
            seen.add(node.name)
            if pools is not None and (node.pool is None or node.pool.pool_id not in pools):
                continue
            if node.schedulable:
                total += node.how_many(requests, limit)
                if total >= limit:
                    return total
        return total

    # -- placement -------------------------------------------------------------------------------

    def candidate_pools(
        self, flavor_labels: Mapping[str, str], flavor_tolerations: Sequence[Toleration], pod_set: PodSetSpec
    ) -> tuple[NodePool, ...]:
        """Pools whose nodes carry the flavors' labels, match the pod set's nodeSelector and
        required node affinity, and whose taints the pod set tolerates (with the flavors'
        tolerations injected)."""
        sig = (
            tuple(sorted(flavor_labels.items())),
            tuple(t.signature() for t in flavor_tolerations),
            pod_set.placement_signature(),
        )
        cached = self._candidates.get(sig)
        if cached is not None:
            return cached
        tolerations = (*pod_set.tolerations, *flavor_tolerations)
        pools = tuple(
            pool
            for pool in self.pools.values()
            if selector_matches(flavor_labels, pool.labels)
            and selector_matches(pod_set.node_selector, pool.labels)
            and affinity_matches(pod_set.node_affinity, pool.labels)
            and taints_tolerated(pool.taints, tolerations)
        )
        self._candidates[sig] = pools
        return pools

    def place(
        self,
        pod_sets: Sequence[tuple[int, Mapping[str, int], int, tuple[NodePool, ...]]],
        needed: int,
        unplaceable: dict[tuple[int, ...], list[Mapping[str, int]]] | None = None,
    ) -> Placement:
        """Place pods greedily, best fit, several identical pods per node at a time.

        ``pod_sets`` are (pod set index, per-pod requests, count, candidate pools). Placement stops
        early once it is clear fewer than ``needed`` pods can be placed. Capacity is charged as
        pods are placed; the caller undoes it (through its statement) when the gang does not fit.
        ``unplaceable`` is a per-cycle cache: per candidate-pool set, request vectors known not to
        fit anywhere; a pod that needs at least as much of everything is skipped without a search.
        """
        result = Placement()
        remaining_total = sum(count for _, _, count, _ in pod_sets)
        for ps_index, requests, count, pools in pod_sets:
            pools_key = tuple(p.pool_id for p in pools)
            known = unplaceable.get(pools_key) if unplaceable is not None else None
            left = count
            while left > 0:
                if known is not None and any(_dominates(requests, bad) for bad in known):
                    break
                best: NodeState | None = None
                best_key: tuple[Any, ...] = ()
                for pool in pools:
                    node = pool.best_fit(requests)
                    if node is None:
                        continue
                    if len(pools) == 1:
                        best = node
                        break
                    key = pool.node_key(node)  # its current key (it may be stale in the index)
                    if best is None or key < best_key:
                        best, best_key = node, key
                if best is None:
                    # Only a pod that failed before this attempt charged anything proves that no
                    # node can take it for the rest of the cycle (capacity only shrinks there).
                    if unplaceable is not None and result.placed == 0:
                        unplaceable.setdefault(pools_key, []).append(requests)
                    break
                n = best.how_many(requests, left)
                self.allocate(best, requests, n)
                slot = (ps_index, best.name)
                result.pods[slot] = result.pods.get(slot, 0) + n
                result.placed += n
                left -= n
            remaining_total -= count
            if result.placed + remaining_total < needed:
                break
        return result

    def _empty_cache(self) -> dict[tuple[object, ...], Any]:
        if self._empty_version != self.spec_version:
            self._empty.clear()
            self._empty_version = self.spec_version
        return self._empty

    def empty_total(self, pools: Iterable[NodePool]) -> dict[str, int]:
        """Total allocatable of every node of ``pools`` (specs only, so cached until a node is
        added, replaced or removed: a holding head asks for it on every what-if)."""
        by_id = {p.pool_id: p for p in pools}
        key: tuple[object, ...] = ("total", *sorted(by_id))
        cache = self._empty_cache()
        total: dict[str, int] | None = cache.get(key)
        if total is None:
            total = {}
            for pool in by_id.values():
                for node in pool.nodes.values():
                    for resource, amount in node.allocatable.items():
                        total[resource] = total.get(resource, 0) + amount
            cache[key] = total
        return total

    def empty_pods(self, pools: Sequence[NodePool], requests: Mapping[str, int]) -> int:
        """How many pods of ``requests`` the schedulable nodes of ``pools`` could hold if they were
        empty, each node counted on its own (cached like :meth:`empty_total`)."""
        key: tuple[object, ...] = ("pods", tuple(p.pool_id for p in pools), *sorted(requests.items()))
        cache = self._empty_cache()
        pods: int | None = cache.get(key)
        if pods is None:
            pods = 0
            for pool in pools:
                for node in pool.nodes.values():
                    if not node.schedulable:
                        continue
                    allocatable = node.allocatable
                    n = -1
                    for resource, amount in requests.items():
                        if amount > 0:
                            fit = allocatable.get(resource, 0) // amount
                            n = fit if n < 0 else min(n, fit)
                    pods += n if n >= 0 else 1 << 30  # a pod that requests nothing: no bound
            cache[key] = pods
        return pods

    def free_in_pools(self, pools: Iterable[NodePool]) -> dict[str, int]:
        """Total free capacity of the schedulable nodes of ``pools``."""
        total: dict[str, int] = {}
        for pool in pools:
            for node in pool.nodes.values():
                if not node.schedulable:
                    continue
                for resource, amount in node.free.items():
                    if amount > 0:
                        total[resource] = total.get(resource, 0) + amount
        return total


def _dominates(requests: Mapping[str, int], other: Mapping[str, int]) -> bool:
    """True when ``requests`` needs at least as much of every resource ``other`` needs."""
    for resource, amount in other.items():
        if requests.get(resource, 0) < amount:
            return False
    return True


def flavor_fits_pod_set(flavor: FlavorSpec, pod_set: PodSetSpec) -> bool:
    """A flavor can host a pod set when the pod's nodeSelector agrees with the flavor's nodeLabels
    and the pod (with the flavor's tolerations injected) tolerates the flavor's taints."""
    if not selector_compatible(pod_set.node_selector, flavor.node_labels):
        return False
    if not affinity_compatible(pod_set.node_affinity, flavor.node_labels):
        return False
    return taints_tolerated(flavor.node_taints, (*pod_set.tolerations, *flavor.tolerations))
