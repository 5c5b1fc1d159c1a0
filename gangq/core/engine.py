"""The admission engine: events in, decisions out.

Shells (the kopf operator, the simulator, benchmarks) tell the engine what exists — flavors,
cohorts, ClusterQueues, LocalQueues, namespaces, nodes, pods, workloads — and call
:meth:`Engine.schedule` with the current time. It answers with decisions: :class:`Admission` (a whole
gang, flavors assigned, pods planned onto nodes), :class:`Eviction` (preemption, pods-ready
timeout, stopped queue) and :class:`PendingUpdate` (a pending workload's reason changed).

The engine does no I/O and reads no clock: time is an argument, iteration orders are insertion or
sort orders, so the same events in the same order give the same decisions.

Layout, after Kueue: :mod:`~gangq.core.queue` holds the pending queues, :mod:`~gangq.core.quota` and
:mod:`~gangq.core.nodes` the admitted-state cache, this module the scheduler that decides.
"""

from __future__ import annotations

import bisect
import heapq
import logging
from collections.abc import Iterator, Mapping
from typing import Literal

from gangq.core.chunks import SortedChunks
from gangq.core.config import EngineConfig
from gangq.core.decisions import (
    Admission,
    Decision,
    Eviction,
    EvictionReason,
    PendingReason,
    PendingUpdate,
    PodSetAssignment,
)
from gangq.core.errors import SpecError
from gangq.core.fairshare import dominant_share
from gangq.core.flavors import (
    BORROW,
    FIT,
    NO_FIT,
    PREEMPT,
    Assignment,
    Candidates,
    FlavorOptions,
    GroupCache,
    PodSetChoice,
    assignments,
    flavor_options,
)
from gangq.core.model import (
    ClusterQueueSpec,
    CohortSpec,
    FlavorResource,
    FlavorSpec,
    LocalQueueSpec,
    NodeSpec,
    PodInfo,
    PodSetSpec,
    WorkloadSpec,
    flavor_resource,
)
from gangq.core.nodes import NodeIndex, NodePool
from gangq.core.preemption import may_preempt_within_queue, may_reclaim, minimal_victims, victim_order
from gangq.core.queue import ClusterQueueState, merge_keys
from gangq.core.quota import QuotaNode, QuotaTree
from gangq.core.selectors import Toleration
from gangq.core.statement import Statement
from gangq.core.units import format_amount
from gangq.core.views import ClusterQueueView, PendingView, WorkloadView
from gangq.core.workload import NodeMark, OrderKey, Workload

log = logging.getLogger("gangq.core")

_MAX_RESERVATION_CHAIN = 64  # older heads followed when a head's reservation depends on theirs

_ADMITTED = 0
_FAILED = 1
_STOP = 2

# Reasons of a gang that failed for capacity or for a reservation, not for its spec.
_HELD_BACK = ("InsufficientQuota", "InsufficientNodes", "InsufficientMinResources", "BlockedByReservation")
_CAPACITY_REASONS = ("InsufficientQuota", "InsufficientNodes", "InsufficientMinResources", "WaitingForPreemption")


_MAX_SHAPES = 100_000


def _pod_set_signature(ps: PodSetSpec) -> tuple[object, ...]:
    """Everything of a pod set that its flavor options depend on."""
    return (ps.name, ps.count, tuple(sorted(ps.requests.items())), ps.placement_signature())


def _claimed(claims: Mapping[FlavorResource, Mapping[str, object]], fr: FlavorResource, name: str) -> bool:
    """Does a ClusterQueue other than ``name`` claim ``fr`` back (see Engine._reclaimer_for)?"""
    holders = claims.get(fr)
    if not holders:
        return False
    return len(holders) > 1 or name not in holders


def _reserved(claims: _Claims, fr: FlavorResource, name: str, wl: Workload) -> int:
    """How much of ``fr`` ClusterQueues other than ``name`` claim back from ``wl``, the gang
    through which ``name`` claims: their waiting gangs' needs, except those of gangs behind
    ``wl`` in queue order that could not fit when the claims were made (``claims.stuck``, see
    Engine._reclaimer_for)."""
    holders = claims.get(fr)
    if not holders:
        return 0
    total = 0
    stuck = claims.stuck
    for holder, head in holders.items():
        if holder != name and not (stuck and head.key in stuck and head.order_key > wl.order_key):
            total += head.totals.get(fr[1], 0)
    return total


def _claim_allows(available: int, unused: int, reserved: int) -> int:
    """The most of a flavor-resource that a claimant's waiting gang may take when ``available`` is
    free to it, ``unused`` of that is its queue's own unused nominal quota, and other queues'
    waiting gangs claim ``reserved`` back: all of its own quota, or what leaves their needs
    covered (see Engine._reclaimer_for)."""
    return max(min(available, max(0, unused)), available - reserved)


def _claims_of(cq: ClusterQueueState, wl: Workload) -> tuple[FlavorResource, ...]:
    """The flavor-resources ``cq`` would claim back for ``wl`` as its waiting gang: those it
    needs and that fit within the queue's unused nominal quota (uncached: Engine._claimed_frs)."""
    node = cq.node
    usage = node.usage
    totals = wl.totals
    return tuple(
        fr
        for fr, nominal in node.nominal.items()
        if (need := totals.get(fr[1], 0)) and usage.get(fr, 0) + need <= nominal
    )


class _Claims(dict[FlavorResource, dict[str, Workload]]):
    """The reclaim claims of one cohort tree: flavor-resource -> ClusterQueue -> the waiting gang
    through which that queue claims its lent quota back; ``claimants``, per ClusterQueue that
    claims anything, that gang (see Engine._reclaimer_for). Within a cycle, claims made after
    it started are ``late``: whether a claimant's gang is kept out (``kept_out``, per gang)
    is read from the others. ``yielding``: the ClusterQueues that claim something through a
    gang that is kept out (None: not worked out since the last claim was added). ``stuck``:
    the gangs of yielding claims that could not fit the quota when the cycle started."""

    __slots__ = ("claimants", "kept_out", "late", "sealed", "stuck", "yielding")

    def __init__(self) -> None:
        super().__init__()
        self.claimants: dict[str, Workload] = {}
        self.kept_out: dict[str, bool] = {}
        self.late: set[tuple[FlavorResource, str]] = set()
        self.sealed = False
        self.stuck: frozenset[str] = frozenset()
        self.yielding: set[str] | None = None


def _before(cursor: Iterator[OrderKey], head: OrderKey) -> Iterator[OrderKey]:
    """StrictFIFO without a retry: only workloads queued ahead of the blocked head may be tried."""
    for key in cursor:
        if key >= head:
            return
        yield key


def _after(cursor: Iterator[OrderKey], key: OrderKey) -> Iterator[OrderKey]:
    """The keys of ``cursor`` after ``key`` (a queue's walk that turns into a retry midway)."""
    for k in cursor:
        if k > key:
            yield k


class _Amounts:
    """What one queued gang of a ClusterQueue could take of each flavor-resource now, under the
    reclaim ``claims`` in force (:meth:`Engine._amount`), computed on first use."""

    __slots__ = ("claims", "cq", "engine", "values")

    def __init__(
        self, engine: Engine, cq: ClusterQueueState, claims: _Claims
    ) -> None:
        self.engine = engine
        self.cq = cq
        self.claims = claims
        self.values: dict[FlavorResource, int] = {}

    def get(self, fr: FlavorResource) -> int:
        value = self.values.get(fr)
        if value is None:
            value = self.values[fr] = self.engine._amount(self.cq, fr, self.claims)
        return value


class _Available(dict[FlavorResource, int]):
    """A ClusterQueue's available quota per flavor-resource, computed on first use."""

    __slots__ = ("node", "potentials", "reclaimers", "tree")

    def __init__(self, tree: QuotaTree, node: QuotaNode) -> None:
        super().__init__()
        self.tree = tree
        self.node = node
        self.reclaimers: dict[tuple[object, ...], Workload | None] = {}
        self.potentials: dict[FlavorResource, int] = {}

    def __missing__(self, fr: FlavorResource) -> int:
        value = self.tree.available(self.node, fr)
        self[fr] = value
        return value

    def potential(self, fr: FlavorResource) -> int:
        value = self.potentials.get(fr)
        if value is None:
            value = self.potentials[fr] = self.tree.potential(self.node, fr)
        return value

    def reclaimer(
        self,
        engine: Engine,
        cq: ClusterQueueState,
        wl: Workload,
        claimant: bool,
        borrowed: list[tuple[FlavorResource, int]],
        ctx: _Cycle,
    ) -> Workload | None:
        # A claimant's waiting gang is judged by the amounts it borrows, any other gang by what
        # it borrows only (Engine._reclaimer_for).
        key: tuple[object, ...] = (wl.key, *borrowed) if claimant else tuple([fr for fr, _ in borrowed])
        cache = self.reclaimers
        if key not in cache:
            cache[key] = engine._reclaimer_for(cq, wl, borrowed, ctx)
        return cache[key]


class _Cycle:
    """Per-cycle scratch state."""

    __slots__ = (
        "admitted",
        "available",
        "available_version",
        "capacity_failed",
        "claims",
        "decisions",
        "failed",
        "now",
        "preempted_in",
        "stopped",
        "unplaceable",
    )

    def __init__(self, now: float, decisions: list[Decision]) -> None:
        self.now = now
        # Available quota per ClusterQueue, valid while the quota tree's version is unchanged.
        self.available: dict[str, _Available] = {}
        self.available_version = (-1, -1)
        # Request vectors that fit no node of a candidate-pool set this cycle.
        self.unplaceable: dict[tuple[int, ...], list[Mapping[str, int]]] = {}
        # ClusterQueues whose head already tried preemption this cycle.
        self.preempted_in: set[str] = set()
        # StrictFIFO queues that stopped at a head this cycle, and that head.
        self.stopped: dict[ClusterQueueState, Workload] = {}
        self.admitted: list[Workload] = []
        self.failed: list[Workload] = []
        # Gangs that failed this cycle for lack of quota or nodes, with no lender's claim involved
        # (see Engine._not_now).
        self.capacity_failed: set[str] = set()
        # Per cohort tree (its root): flavor-resource -> ClusterQueue -> the waiting gang through
        # which that queue reclaims its lent quota. Claims in force when the cycle starts, and
        # those made during it, hold until the cycle ends (see Engine._reclaimer_for).
        self.claims: dict[QuotaNode, _Claims] = {}
        self.decisions = decisions


class _Reservation:
    """When a blocked head will fit: ``time`` (None: unknown), or ``never`` with current capacity."""

    __slots__ = ("at", "claimed", "held_by", "never", "time", "version")

    def __init__(self, version: tuple[int, int], time: float | None, never: bool, at: float) -> None:
        self.version = version  # (capacity version, heads version) it was worked out in
        self.at = at  # the time it was worked out at
        self.time = time
        self.never = never
        # Some flavor option was ruled out only by a lender's claim (_claimed_from): the claim
        # may end within a cycle, when its gang is admitted, and the head fit then.
        self.claimed = False
        # Per flavor option that fits now, the older head whose reservation holds it back: that
        # head may be admitted within a cycle, and this one fit then.
        self.held_by: tuple[Workload, ...] = ()


class Engine:
    """The gang admission engine. Not thread-safe: drive it from one task."""

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self.quota = QuotaTree()
        self.nodes = NodeIndex()
        self.flavors: dict[str, FlavorSpec] = {}
        self.cluster_queues: dict[str, ClusterQueueState] = {}
        self.cohort_specs: dict[str, CohortSpec] = {}
        self.local_queues: dict[str, LocalQueueSpec] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.workloads: dict[str, Workload] = {}
        self.pods: dict[str, PodInfo] = {}
        self._seq = 0
        self._timers: list[tuple[float, int, str, str, int]] = []  # (time, seq, kind, key, token)
        self._timer_seq = 0
        self._dirty: dict[str, None] = {}  # ClusterQueues with something to try
        self._updates: dict[str, None] = {}  # workloads whose pending reason changed
        # Cited gang (its key) -> the gangs whose pending reason named it (see _set_reason), and
        # the cited gangs that may have stopped being what those reasons say (_refresh_citations).
        self._citers: dict[str, dict[str, Workload]] = {}
        self._cite_ended: dict[str, Workload] = {}
        self._unrouted: dict[str, Workload] = {}  # pending, not in any ClusterQueue queue
        # ClusterQueues with gangs blocked on nodes -> the node pools (ids) that could take their
        # pods (None: any pool); see _capacity_freed_nodes.
        self._waiting_nodes: dict[str, frozenset[int] | None] = {}
        self._freed_seen = 0  # NodeIndex.freed_seq when _capacity_freed_nodes last looked
        self._freed_pools_version = -1  # NodeIndex.version then (pool ids change with it)
        self._waiting_reservation: dict[str, None] = {}  # ... with gangs held back by a reservation
        # Queues that may preempt whose protected head fits but a starving head without a
        # reservation time holds back, a lender's claim keeps out, or that waits for its victims
        # to stop (see _retry_held_heads).
        self._held_heads: dict[str, None] = {}
        # Workloads with a runtime limit. While there are none, a reservation has no time: a
        # starving head holds back its queue until it is admitted (see _holding_head).
        self._limited: dict[str, None] = {}
        # key -> (config version, ClusterQueue, the usage of each flavor option it could ever get)
        self._reachable: dict[str, tuple[tuple[int, int], str, tuple[Mapping[FlavorResource, int], ...]]] = {}
        # Flavor options shared by the gangs of a queue that have the same pod sets (see _options).
        self._shapes: dict[tuple[object, ...], FlavorOptions] = {}
        self._groups: GroupCache = {}  # see flavor_options
        self._running_by_end = SortedChunks()  # (end time, seq, key) of bounded runners
        self._drain: dict[str, None] = {}  # ClusterQueues / LocalQueues to drain next cycle
        self._version = 0  # bumped on every capacity change (reservation cache key)
        self._config_version = 0  # bumped on every spec change (flavor-choice cache key)
        self._reservations: dict[str, _Reservation] = {}
        # Per waiting head: the reservation time it was first held to (see _reservation_blocks).
        self._promised: dict[str, float] = {}
        self._reservation_depth = 0  # nesting of _reservation through older heads (see there)
        self._protected: dict[str, None] = {}  # ClusterQueues that may have a protected head
        self._heads_version = 0  # bumped when a queue gets a new protected head
        # ClusterQueue name -> its heads displaced in this cycle, that still hold the other
        # queues' gangs back until the cycle ends (see _heads_in_scope).
        self._displaced: dict[str, list[Workload]] = {}
        # Bumped by a change within a cycle that asks for another cycle at once (see schedule).
        self._cycle_again = 0
        self._trees: dict[str, list[ClusterQueueState]] = {}  # root name -> its ClusterQueues

    # ------------------------------------------------------------------------------------------
    # Cluster configuration events
    # ------------------------------------------------------------------------------------------

    def upsert_flavor(self, spec: FlavorSpec) -> None:
        self.flavors[spec.name] = spec
        self._config_changed()

    def delete_flavor(self, name: str) -> None:
        self.flavors.pop(name, None)
        self._config_changed()

    def upsert_cohort(self, spec: CohortSpec) -> None:
        spec.validate()
        self.quota.set_cohort(spec.name, spec.parent, spec.resource_groups, spec.fair_sharing_weight)
        self.cohort_specs[spec.name] = spec
        self._config_changed()

    def delete_cohort(self, name: str) -> None:
        self.cohort_specs.pop(name, None)
        self.quota.remove_cohort(name)
        self._config_changed()

    def upsert_cluster_queue(self, spec: ClusterQueueSpec) -> None:
        spec.validate()
        node = self.quota.set_cluster_queue(spec.name, spec.cohort, spec.resource_groups, spec.fair_sharing_weight)
        cq = self.cluster_queues.get(spec.name)
        if cq is None:
            cq = ClusterQueueState(spec, node)
            self.cluster_queues[spec.name] = cq
        cq.deleted = False
        cq.set_spec(spec)
        if spec.stop_policy == "HoldAndDrain":
            self._drain["cq:" + spec.name] = None
        self._config_changed()

    def delete_cluster_queue(self, name: str) -> None:
        """Delete a ClusterQueue. Its pending workloads become unrouted; admitted ones keep their
        quota until they finish (like Kueue's resource-in-use finalizer)."""
        cq = self.cluster_queues.get(name)
        if cq is None:
            return
        cq.deleted = True
        for key in list(cq.ordered()):
            wl = self.workloads[key[3]]
            cq.discard(wl)
            wl.cq = None
            self._unrouted[wl.key] = wl
        if not cq.admitted:
            self._forget_cluster_queue(cq)
        self._config_changed()

    def _forget_cluster_queue(self, cq: ClusterQueueState) -> None:
        self._trees.clear()
        self.cluster_queues.pop(cq.name, None)
        self.quota.remove_cluster_queue(cq.name)
        self._dirty.pop(cq.name, None)

    def upsert_local_queue(self, spec: LocalQueueSpec) -> None:
        self.local_queues[spec.key] = spec
        if spec.stop_policy == "HoldAndDrain":
            self._drain["lq:" + spec.key] = None
        self._config_changed()

    def delete_local_queue(self, namespace: str, name: str) -> None:
        self.local_queues.pop(f"{namespace}/{name}", None)
        self._config_changed()

    def upsert_namespace(self, name: str, labels: dict[str, str]) -> None:
        self.namespaces[name] = dict(labels)
        self._config_changed()

    def delete_namespace(self, name: str) -> None:
        self.namespaces.pop(name, None)
        self._config_changed()

    def _config_changed(self) -> None:
        """Specs changed: recheck which queues are active, re-route every pending workload."""
        self._trees.clear()
        self._version += 1
        self._config_version += 1
        self._reservations.clear()
        self._promised.clear()
        self._shapes.clear()
        self._groups.clear()
        for cq in self.cluster_queues.values():
            missing = [
                f
                for group in cq.spec.resource_groups
                for f in (fl.name for fl in group.flavors)
                if f not in self.flavors
            ]
            if cq.deleted:
                cq.inactive_reason = f"ClusterQueue {cq.name!r} is being deleted"
            elif missing:
                cq.inactive_reason = f"ClusterQueue {cq.name!r} is inactive: flavor {missing[0]!r} not found"
            else:
                cq.inactive_reason = None
        # Re-route every pending workload: LocalQueue targets, namespaces or selectors may have moved.
        for cq in list(self.cluster_queues.values()):
            for key in list(cq.ordered()):
                wl = self.workloads[key[3]]
                target, _, _ = self._route_target(wl)
                if target is not cq:
                    cq.discard(wl)
                    wl.cq = None
                    self._unrouted[wl.key] = wl
            self._request_retry(cq)
        for wl in list(self._unrouted.values()):
            if wl.requeue_at is None and not wl.deactivated:
                self._route(wl)

    # ------------------------------------------------------------------------------------------
    # Nodes and pods
    # ------------------------------------------------------------------------------------------

    def upsert_node(self, spec: NodeSpec) -> None:
        old = self.nodes.nodes.get(spec.name)
        changed = old is not None and not old.describes(spec)
        self.nodes.upsert(spec)
        if changed:
            self._nodes_changed()
        self._capacity_freed_nodes()

    def delete_node(self, name: str) -> None:
        if self.nodes.remove(name) is not None:
            self._version += 1
            self._nodes_changed()

    def _nodes_changed(self) -> None:
        """A node left, or changed its capacity, labels, taints or schedulability: a protected
        head may no longer fit even an empty cluster, and then it holds back nothing behind it
        (see :meth:`_holding_head`). Its queue's gangs are retried: a node that only shrank
        frees nothing, and without this retry they waited, held back by a head that could never
        start, until some unrelated change retried the queue."""
        for name in self._protected:
            cq = self.cluster_queues.get(name)
            if cq is not None and cq.protected_head is not None:
                self._request_retry(cq)

    def update_pod(self, pod: PodInfo) -> None:
        """A pod is bound to a node (or changed phase). Pods of admitted gangs replace the gang's
        planned reservation; other pods just consume node capacity."""
        old = self.pods.get(pod.key)
        if old is not None:
            if old.node == pod.node and old.requests == pod.requests and old.workload == pod.workload:
                self.pods[pod.key] = pod
                self._pod_running_changed(old, pod)
                return
            self.delete_pod(pod.key)
        node = self.nodes.nodes.get(pod.node)
        self.pods[pod.key] = pod
        wl = self.workloads.get(pod.workload) if pod.workload else None
        if wl is not None:
            wl.pods[pod.key] = False
        if wl is not None and wl.state in ("Admitted", "Evicting"):
            self._bind_gang_pod(wl, pod)
        elif node is not None:
            self.nodes.allocate(node, pod.requests, 1)
            self._version += 1
        if pod.running and wl is not None and wl.state == "Admitted":
            self._count_running(wl, +1)

    def delete_pod(self, key: str) -> None:
        """A pod is gone (deleted, or terminal): its node capacity is free again."""
        pod = self.pods.pop(key, None)
        if pod is None:
            return
        wl = self.workloads.get(pod.workload) if pod.workload else None
        held = wl.pods.pop(key, False) if wl is not None else False
        node = self.nodes.nodes.get(pod.node)
        if node is not None:
            self.nodes.allocate(node, pod.requests, -1)
        if wl is not None and held:
            wl.hold(pod.node, pod.requests, -1)
        if pod.running and wl is not None and wl.state == "Admitted":
            self._count_running(wl, -1)
        self._capacity_freed_nodes()

    def _pod_running_changed(self, old: PodInfo, pod: PodInfo) -> None:
        if old.running == pod.running or not pod.workload:
            return
        wl = self.workloads.get(pod.workload)
        if wl is not None and wl.state == "Admitted":
            self._count_running(wl, 1 if pod.running else -1)

    def _count_running(self, wl: Workload, delta: int) -> None:
        wl.running += delta
        if wl.running >= wl.min_member:
            wl.pods_ready = True

    def _bind_gang_pod(self, wl: Workload, pod: PodInfo) -> None:
        """Swap one planned slot of the gang for the bound pod (prefer the slot on its node)."""
        ps_index = next((i for i, ps in enumerate(wl.spec.pod_sets) if ps.name == pod.pod_set), -1)
        slot: tuple[int, str] | None = (ps_index, pod.node)
        if slot not in wl.planned:
            slot = next((s for s in wl.planned if s[0] == ps_index), None)
            if slot is None:
                slot = next(iter(wl.planned), None)
        if slot is not None:
            planned_req = wl.spec.pod_sets[slot[0]].requests
            planned_node = self.nodes.nodes.get(slot[1])
            if planned_node is not None:
                self.nodes.allocate(planned_node, planned_req, -1)
            wl.hold(slot[1], planned_req, -1)
            left = wl.planned[slot] - 1
            if left:
                wl.planned[slot] = left
            else:
                del wl.planned[slot]
        node = self.nodes.nodes.get(pod.node)
        if node is not None:
            self.nodes.allocate(node, pod.requests, 1)
        wl.hold(pod.node, pod.requests, 1)
        wl.pods[pod.key] = True
        self._version += 1

    def pods_ready(self, key: str, ready: bool = True) -> None:
        """Shells that observe readiness directly (e.g. from JobSet status) report it here."""
        wl = self.workloads.get(key)
        if wl is not None and wl.state == "Admitted":
            wl.pods_ready = ready or wl.pods_ready

    def _capacity_freed_nodes(self) -> None:
        """Node capacity came free (or nodes changed): retry the queues whose node-blocked gangs
        could use it, and those waiting on a reservation.

        A queue whose retry would look only at the gangs that fit what it may take
        (:meth:`_retry_walks_candidates`: it may not preempt, so a retry is not also its
        preemption attempt) is retried only if capacity came free in a pool where its
        node-blocked gangs' pods could go: in a cluster of a CPU and a GPU pool whose GPU nodes
        are full, every finish of a CPU gang retried every queue whose GPU gangs wait for GPU
        nodes (100,000 pending: 1.6 such retries per admission, each of which found its gangs
        still short). A skipped queue stays waiting; its gangs' node marks count the nodes freed
        since they were made, so the next retry misses nothing.
        """
        self._version += 1
        freed = self._pools_freed()
        waiting = self._waiting_nodes
        still: dict[str, frozenset[int] | None] = {}
        for name, pools in waiting.items():
            cq = self.cluster_queues.get(name)
            if cq is None:
                continue
            if (
                freed is not None
                and pools is not None
                and pools.isdisjoint(freed)
                and self._retry_walks_candidates(cq)
            ):
                still[name] = pools
                continue
            self._request_retry(cq, "nodes")
        self._waiting_nodes = still
        for name in self._waiting_reservation:
            cq = self.cluster_queues.get(name)
            if cq is not None:
                self._request_retry(cq)
        self._waiting_reservation.clear()

    def _pools_freed(self) -> set[int] | None:
        """The node pools (ids) where capacity came free since the last call, None if not known
        (the record was trimmed, or pools were made or dropped since: ids change with them). Every
        capacity increase is recorded, a node that joins or changes included (NodeIndex.freed)."""
        nodes = self.nodes
        start = self._freed_seen - nodes.freed_base
        freed: set[int] | None = None
        if start >= 0 and self._freed_pools_version == nodes.version:
            freed = {node.pool.pool_id for node in nodes.freed[start:] if node.pool is not None}
        self._freed_seen = nodes.freed_seq
        self._freed_pools_version = nodes.version
        return freed

    def _wait_for_nodes(self, cq: ClusterQueueState, wl: Workload, pools: frozenset[int] | None) -> None:
        """``cq``'s gang ``wl`` is blocked on the nodes of ``pools`` (None: of any pool): freed
        capacity there retries ``cq``, and :meth:`_node_retry` looks at ``wl`` first."""
        cq.node_blocked[wl.key] = wl
        waiting = self._waiting_nodes
        if cq.name not in waiting:
            waiting[cq.name] = pools
        else:
            known = waiting[cq.name]
            if known is not None and (pools is None or not pools.issubset(known)):
                waiting[cq.name] = None if pools is None else known | pools

    def _request_retry(self, cq: ClusterQueueState, why: Literal["", "quota", "nodes"] = "") -> None:
        """Something that could let one of ``cq``'s waiting gangs fit changed: retry them all.

        ``why`` names a change that the retry shortcuts know to be all there is, as long as
        nothing else asks for the retry before the next cycle: ``"quota"``, quota given back by
        another queue of ``cq``'s tree or a claim on lent quota that ended (see _still_short);
        ``"nodes"``, node capacity that came free (see _node_retry).
        """
        first = not cq.retry
        cq.retry = True
        if not why:
            cq.node_retry = cq.quota_retry = False
        elif why == "quota":
            cq.node_retry = False
            if first:
                cq.quota_retry = True
        elif first:
            cq.node_retry = cq.quota_retry = True
        self._dirty[cq.name] = None

    # ------------------------------------------------------------------------------------------
    # Workload events
    # ------------------------------------------------------------------------------------------

    def submit(self, spec: WorkloadSpec, now: float) -> None:
        """Queue a new workload, or update a pending one (priority, pod sets, queue)."""
        spec.validate()
        wl = self.workloads.get(spec.key)
        if wl is not None:
            if wl.state != "Pending":
                return  # admitted gangs are immutable; the shell evicts to change them
            self._unqueue(wl)
            fresh = Workload(spec, wl.seq, now)
            fresh.set_queue_ts(wl.queue_ts if spec.creation_time == wl.spec.creation_time else spec.creation_time)
            fresh.ready_evictions = wl.ready_evictions
            fresh.requeue_at = wl.requeue_at
            fresh.deactivated = wl.deactivated
            fresh.emitted = wl.emitted
            fresh.pending_since = wl.pending_since
            wl = fresh
        else:
            self._seq += 1
            wl = Workload(spec, self._seq, now)
        self.workloads[spec.key] = wl
        if spec.runtime_limit is not None:
            self._limited[spec.key] = None
        else:
            self._limited.pop(spec.key, None)
        if wl.deactivated:
            self._set_reason(wl, "Deactivated", wl.message)
            self._unrouted[wl.key] = wl
        elif wl.requeue_at is not None and wl.requeue_at > now:
            self._unrouted[wl.key] = wl
        else:
            self._route(wl)

    def finish(self, key: str, now: float) -> None:
        """The workload finished or was deleted: release everything it holds and forget it."""
        wl = self.workloads.pop(key, None)
        if wl is None:
            return
        if wl.state == "Pending":
            self._unqueue(wl)
        else:
            self._release(wl)
            # Its pods are done too: a finished gang's pods no longer use their nodes.
            self._forget_pods(wl)
        wl.state = "Finished"
        self._updates.pop(key, None)
        self._reservations.pop(key, None)
        self._promised.pop(key, None)
        self._limited.pop(key, None)
        self._reachable.pop(key, None)

    def eviction_done(self, key: str, now: float) -> None:
        """An evicted gang has stopped (JobSet suspended, pods gone): release it and requeue it."""
        wl = self.workloads.get(key)
        if wl is None or wl.state != "Evicting":
            return
        self._release(wl)
        self._forget_pods(wl)
        wl.state = "Pending"
        wl.admission = None
        wl.running = 0
        wl.pods_ready = False
        wl.pending_since = now
        if wl.deactivated:
            self._set_reason(wl, "Deactivated", wl.message)
            self._unrouted[wl.key] = wl
            return
        requeue_at = wl.evict_requeue_at
        wl.evict_requeue_at = None
        if requeue_at is not None and requeue_at > now:
            wl.requeue_at = requeue_at
            self._set_reason(wl, "Backoff", f"requeued after backoff at t={requeue_at:.0f}")
            self._unrouted[wl.key] = wl
            self._add_timer(requeue_at, "requeue", wl.key, wl.admit_count)
            return
        self._route(wl)

    def _forget_pods(self, wl: Workload) -> None:
        """A stopped or finished gang's pods no longer use their nodes."""
        for pod_key in list(wl.pods):
            self.delete_pod(pod_key)
        wl.pods.clear()

    def restore(
        self, spec: WorkloadSpec, cluster_queue: str, flavors: list[dict[str, str]], now: float
    ) -> tuple[Admission | None, str]:
        """Put back a gang that was admitted before a restart, with the flavors it was given.

        Its pods run with those flavors' node labels, so it is charged exactly there (choosing
        again could pick another flavor and charge quota the pods do not use). ``flavors`` has one
        mapping (resource → flavor) per pod set, in order; report the gang's pods after it.
        Returns the admission, or None and why it cannot be restored (unknown or inactive
        ClusterQueue, a flavor the queue does not have, or more than the queue may take now); the
        shell then suspends the gang and queues it.
        """
        spec.validate()
        existing = self.workloads.get(spec.key)
        if existing is not None and existing.state != "Pending":
            return existing.admission, ""
        cq = self.cluster_queues.get(cluster_queue)
        if cq is None or cq.deleted:
            return None, f"ClusterQueue {cluster_queue!r} does not exist"
        if cq.inactive_reason:
            return None, f"ClusterQueue {cluster_queue!r} is inactive: {cq.inactive_reason}"
        if len(flavors) != len(spec.pod_sets):
            return None, f"the admission names {len(flavors)} pod sets, the workload has {len(spec.pod_sets)}"
        usage: dict[FlavorResource, int] = {}
        for ps, mapping in zip(spec.pod_sets, flavors, strict=True):
            for resource, amount in ps.requests.items():
                if amount <= 0 or ps.count == 0:
                    continue
                flavor = mapping.get(resource)
                fr = flavor_resource(flavor or "", resource)
                if flavor is None or fr not in cq.node.nominal:
                    return None, (
                        f"pod set {ps.name!r}: ClusterQueue {cluster_queue!r} has no quota for {resource} in "
                        f"flavor {flavor!r}"
                    )
                usage[fr] = usage.get(fr, 0) + amount * ps.count
        for fr, need in usage.items():
            if need > self.quota.available(cq.node, fr):
                return None, (
                    f"needs {format_amount(fr[1], need)} {fr[1]} in flavor {fr[0]}; ClusterQueue "
                    f"{cluster_queue!r} has {format_amount(fr[1], self.quota.available(cq.node, fr))} available"
                )
        if existing is not None:
            self._unqueue(existing)
            self.workloads.pop(spec.key, None)
        self._seq += 1
        wl = Workload(spec, self._seq, now)
        self.workloads[spec.key] = wl
        if spec.runtime_limit is not None:
            self._limited[spec.key] = None
        for fr, need in usage.items():
            self.quota.add_usage(cq.node, fr, need)
        wl.cq = cq
        borrowing = any(cq.node.usage.get(fr, 0) > cq.node.nominal.get(fr, 0) for fr in usage)
        pod_sets = tuple(
            PodSetAssignment(ps.name, ps.count, dict(mapping), dict(ps.requests), {})
            for ps, mapping in zip(spec.pod_sets, flavors, strict=True)
        )
        admission = Admission(wl.key, cq.name, pod_sets, borrowing, now, dict(usage))
        wl.state = "Admitted"
        wl.usage = usage
        wl.admission = admission
        wl.admitted_at = now
        wl.admit_count = 1
        wl.message = f"admitted by ClusterQueue {cq.name!r} (restored)"
        cq.admitted[wl.key] = wl
        cq.admitted_total += 1
        if spec.runtime_limit is not None:
            wl.end_time = now + spec.runtime_limit
            self._running_by_end.add((wl.end_time, wl.seq, wl.key))
        for pod_key in list(existing.pods) if existing is not None else ():
            pod = self.pods.get(pod_key)
            if pod is not None:  # reported while it was queued: now they are an admitted gang's pods
                self.delete_pod(pod_key)
                self.update_pod(pod)
        self._version += 1
        if self.config.pods_ready_timeout is not None:
            self._add_timer(now + self.config.pods_ready_timeout, "ready", wl.key, wl.admit_count)
        return admission, ""

    def reactivate(self, key: str, now: float) -> None:
        """Put a deactivated workload back in its queue (an admin's explicit decision)."""
        wl = self.workloads.get(key)
        if wl is None or not wl.deactivated:
            return
        wl.deactivated = False
        wl.ready_evictions = 0
        wl.requeue_at = None
        if wl.state == "Pending":
            self._unrouted.pop(wl.key, None)
            self._route(wl)

    # ------------------------------------------------------------------------------------------
    # Routing: LocalQueue -> ClusterQueue
    # ------------------------------------------------------------------------------------------

    def _route_target(self, wl: Workload) -> tuple[ClusterQueueState | None, PendingReason, str]:
        lq = self.local_queues.get(wl.lq_key)
        if lq is None:
            return None, "LocalQueueNotFound", f"LocalQueue {wl.lq_key} does not exist"
        if lq.stop_policy != "None":
            return None, "LocalQueueStopped", f"LocalQueue {wl.lq_key} is stopped ({lq.stop_policy})"
        cq = self.cluster_queues.get(lq.cluster_queue)
        if cq is None or cq.deleted:
            return (
                None,
                "ClusterQueueNotFound",
                f"ClusterQueue {lq.cluster_queue!r} of LocalQueue {wl.lq_key} does not exist",
            )
        selector = cq.spec.namespace_selector
        labels = self.namespaces.get(wl.spec.namespace, {})
        if selector is None or not selector.matches(labels):
            return (
                None,
                "NamespaceNotSelected",
                (f"ClusterQueue {cq.name!r} does not admit workloads from namespace {wl.spec.namespace!r}"),
            )
        return cq, "Pending", ""

    def _route(self, wl: Workload) -> None:
        cq, reason, message = self._route_target(wl)
        if cq is None:
            self._unrouted[wl.key] = wl
            self._set_reason(wl, reason, message)
            return
        self._unrouted.pop(wl.key, None)
        wl.requeue_at = None
        cq.push(wl)
        self._dirty[cq.name] = None
        if cq.inactive_reason:
            self._set_reason(wl, "ClusterQueueInactive", cq.inactive_reason)
        elif cq.stopped:
            self._set_reason(wl, "ClusterQueueStopped", f"ClusterQueue {cq.name!r} is stopped ({cq.spec.stop_policy})")
        elif wl.reason == "Pending":
            self._set_reason(wl, "Pending", f"queued in ClusterQueue {cq.name!r}, waiting for quota")

    def _unqueue(self, wl: Workload) -> None:
        self._unrouted.pop(wl.key, None)
        cq = wl.cq
        self._cited_role_may_end(wl)
        if cq is not None:
            was_head = cq.head() is wl
            cq.discard(wl)
            if cq.strict or was_head:
                self._request_retry(cq)
            if was_head:
                # The heads changed: reservations worked out with this one (other heads' scopes,
                # the claims it made) are stale. Without this, a reservation cached before the
                # deletion said a lender claimed what no lender claimed any more.
                self._heads_version += 1
                self._retry_tree(cq)
        wl.cq = None

    # ------------------------------------------------------------------------------------------
    # Capacity accounting
    # ------------------------------------------------------------------------------------------

    def _charge(self, wl: Workload, cq: ClusterQueueState, usage: dict[FlavorResource, int]) -> None:
        for fr, amount in usage.items():
            self.quota.add_usage(cq.node, fr, amount)

    def _release(self, wl: Workload) -> None:
        """Give back a gang's quota and planned node capacity (bound pods are released by the
        shell's pod deletions)."""
        cq = wl.cq
        if cq is None:
            return
        released = wl.usage
        given_back = cq.node.top.released
        cq.screen = None  # its own unused quota grows: the last screen no longer bounds it
        for fr, amount in released.items():
            self.quota.add_usage(cq.node, fr, -amount)
            given_back[fr] = given_back.get(fr, 0) + amount
        bound = any(wl.pods.values())  # pods that hold capacity for it
        for (ps_index, node_name), count in wl.planned.items():
            node = self.nodes.nodes.get(node_name)
            req = wl.spec.pod_sets[ps_index].requests
            if node is not None:
                self.nodes.allocate(node, req, -count)
            if bound:
                wl.hold(node_name, req, -count)
        if not bound:
            wl.held = {}  # it held its planned pods only
        wl.planned = {}
        wl.usage = {}
        cq.admitted.pop(wl.key, None)
        if wl.end_time is not None:
            self._running_by_end.discard((wl.end_time, wl.seq, wl.key))
            wl.end_time = None
        wl.cq = None
        self._version += 1
        self._retry_after_release(cq)
        self._capacity_freed_nodes()
        if cq.deleted and not cq.admitted:
            self._forget_cluster_queue(cq)

    def _retry_tree(self, cq: ClusterQueueState) -> None:
        """Quota came free under ``cq``'s cohort tree: every queue there may admit again."""
        for other in self._tree_queues(cq):
            self._request_retry(other)

    def _retry_after_release(self, cq: ClusterQueueState) -> None:
        """Quota came free in ``cq``: retry ``cq`` and the other queues of its tree (for those,
        nothing changed but the quota given back, see :meth:`_still_short`)."""
        self._request_retry(cq)
        self._retry_others(cq)

    def _claimed_frs(self, cq: ClusterQueueState, head: Workload) -> tuple[FlavorResource, ...]:
        """The flavor-resources ``cq`` claims back for its waiting gang ``head``: those it needs
        and that fit within the queue's unused nominal quota (cached per queue until its head or
        its usage changes). None for a gang that could not fit even an empty cluster: it is never
        admitted, so its claim would never end (random world 8 with CPU-only gangs: a head whose
        pods fit no node kept another queue's gang from borrowing 1 CPU, on an idle cluster)."""
        node = cq.node
        cached_head, version, frs = cq.claims_cache
        if cached_head is not head or version != node.usage_version:
            frs = _claims_of(cq, head)
            cq.claims_cache = (head, node.usage_version, frs)
        if frs and self._never_fits(cq, head):
            return ()
        return frs

    def _retry_others(self, cq: ClusterQueueState) -> None:
        """More quota may be available to the other queues of ``cq``'s tree: retry them. Called
        when ``cq`` releases quota, and when it stops claiming lent quota back for a waiting gang
        (:meth:`_add_claims`); without the latter, a gang blocked only by the claim ("cannot
        borrow: ClusterQueue … is reclaiming its lent quota") waited for some unrelated release.
        Either way a quota retry (:meth:`_still_short` may skip it): a claim that ends raises what
        a queue may take only where it capped it, and the screen knows those places. As full
        retries, the end of a head's claims (its admission) retried every other queue of its
        cohort, and at 100,000 pending 2.5 such retries per admission found no gang to try.

        All of them, without first asking whether one of their gangs could use it: that question
        is the one a retry asks first anyway (:meth:`_candidate_bounds`), at the queue's turn in
        the cycle, with the cycle's claims already worked out; asked here as well, at every
        release, for every queue of the cohort, it cost more than the retries it saved (100,000
        pending: 330 µs per admission with the screen, 300 without; fewer at every size), and
        its answer could be out of date by the queue's turn. A retry that cannot admit anything
        ends at its bounds or at its protected head (:meth:`_retry_keys`).
        """
        for other in self._tree_queues(cq):
            if other is not cq:
                self._waiting_reservation.pop(other.name, None)
                self._request_retry(other, "quota")

    def _amount(
        self,
        cq: ClusterQueueState,
        fr: FlavorResource,
        claims: _Claims,
    ) -> int:
        """How much of ``fr`` a gang of ``cq`` could take: the available quota, or only the unused
        nominal quota where another queue's waiting gang claims the rest back (``claims``). Not
        the gang through which ``cq`` claims itself (:meth:`_claimant_head`)."""
        node = cq.node
        amount = self.quota.available(node, fr)
        if amount > 0 and _claimed(claims, fr, cq.name):
            amount = min(amount, max(0, node.nominal.get(fr, 0) - node.usage.get(fr, 0)))
        return amount

    def _claimant_head(self, cq: ClusterQueueState, claims: _Claims) -> Workload | None:
        """The waiting gang through which ``cq`` claims lent quota back in this cycle (its
        protected head when the claim was made), if it waits to be retried and some other
        queue's claim gives way (its gang is kept out, :meth:`_kept_out`): the one gang of ``cq``
        that may borrow what other queues claim (see :meth:`_reclaimer_for`), and so the one
        that the bounds of :meth:`_candidate_bounds` and the screen of :meth:`_still_short`,
        worked out for the others under the lock, do not cover. Each asks
        :meth:`_claimant_may_fit` for it instead. When the bounds covered it, every gang of a
        claimant's queue passed them (most queues with a waiting head claim something), and
        retries checked almost 4 times as many gangs at 100,000 pending, to find that they
        still did not fit."""
        head = claims.claimants.get(cq.name)
        if head is None or head.queued != "inadmissible":
            return None
        yielding = self._yielding(claims)
        if not yielding or (len(yielding) == 1 and cq.name in yielding):
            return None  # no claim gives way: the queue's bounds and screen cover its head
        return head

    def _yielding(self, claims: _Claims) -> set[str]:
        """The ClusterQueues whose claim gives way somewhere: they claim through a gang that is
        kept out (:meth:`_kept_out`), per holder of a claim the gang it claims through there (a
        queue whose head changed during the cycle claims new flavor-resources through the new
        one). Worked out again after a claim is added."""
        yielding = claims.yielding
        if yielding is None:
            yielding = claims.yielding = {
                holder
                for holders in claims.values()
                for holder, gang in holders.items()
                if self._kept_out(claims, holder, gang)
            }
        return yielding

    def _claimant_may_fit(self, cq: ClusterQueueState, head: Workload, claims: _Claims) -> bool:
        """Could ``head``, the gang through which ``cq`` claims, fit the quota now in some flavor
        option, borrowing what leaves the other queues' claims covered?"""
        node = cq.node
        available = self.quota.available
        usage, nominal = node.usage, node.nominal
        name = cq.name
        for option in self._options(cq, head).usages:
            for fr, need in option.items():
                if need <= 0:
                    continue
                amount = available(node, fr)
                if amount >= need and _claimed(claims, fr, name):
                    unused = nominal.get(fr, 0) - usage.get(fr, 0)
                    if self._unyielding(claims, fr, name) is None:
                        amount = _claim_allows(amount, unused, _reserved(claims, fr, name, head))
                    else:
                        amount = min(amount, max(0, unused))
                if amount < need:
                    break
            else:
                return True
        return False

    def _claims_now(self, cq: ClusterQueueState) -> _Claims:
        """The reclaim claims of ``cq``'s tree as they are now, when a cycle first needs them
        (:meth:`_tree_claims`); those the cycle adds later are ``late``."""
        claims = _Claims()
        if self._protected and cq.node.root() is not cq.node:
            for other in self._tree_queues(cq):
                if other.protected_head is not None:
                    head = other.head()
                    if head is not None:
                        self._add_claims(claims, other, head)
            if len(claims.claimants) > 1 and len(self._yielding(claims)) > 1:
                claims.stuck = self._stuck_claimants(claims)
        claims.sealed = True
        return claims

    def _stuck_claimants(self, claims: _Claims) -> frozenset[str]:
        """The gangs through which yielding claims are made (:meth:`_yielding`) that cannot fit
        the quota now, each keeping the others' needs covered (:meth:`_claimant_may_fit`).

        Two claimants' gangs whose needs do not fit together would otherwise keep each other
        out for good: queue a has 8 GPUs and its gang needs 6 of them and borrows 4 CPUs, queue
        b has 8 CPUs and its gang needs 6 and borrows 4 GPUs; each could run alone, but each
        would leave less than the other needs. A stuck gang's need is not kept free from a
        claimant's gang ahead of it in queue order (priority, then time): the first of the two
        runs, the other follows. A gang that can fit keeps its need covered, whatever its place:
        the claim on a lender's own quota stands against an older borrower. Worked out once, as
        the cycle's claims are made, so that what a gang may take only shrinks during a cycle."""
        stuck: set[str] = set()
        for holder in self._yielding(claims):
            gang = claims.claimants.get(holder)
            cq = self.cluster_queues.get(holder)
            if gang is not None and cq is not None and not self._claimant_may_fit(cq, gang, claims):
                stuck.add(gang.key)
        return frozenset(stuck)

    def _tree_queues(self, cq: ClusterQueueState) -> list[ClusterQueueState]:
        """The ClusterQueues of ``cq``'s cohort tree (``cq`` alone without a cohort), stable order."""
        root = cq.node.root()
        if root is cq.node:
            return [cq]
        queues = self._trees.get(root.name)
        if queues is None:
            queues = [
                c for n in self.quota.tree_cluster_queues(root) if (c := self.cluster_queues.get(n.name)) is not None
            ]
            self._trees[root.name] = queues
        return queues

    def _other_heads(self, cq: ClusterQueueState) -> Iterator[tuple[ClusterQueueState, Workload]]:
        """The protected heads of the other queues in ``cq``'s cohort tree."""
        if not self._protected:
            return
        for other in self._tree_queues(cq):
            if other is cq or other.protected_head is None:
                continue
            head = other.head()
            if head is not None:
                yield other, head

    # ------------------------------------------------------------------------------------------
    # Scheduling
    # ------------------------------------------------------------------------------------------

    def schedule(self, now: float) -> list[Decision]:
        """Run timers (pods-ready timeouts, backoff), drains, then one scheduling cycle that admits
        as many whole gangs as fit. Returns the decisions, in the order they were taken."""
        decisions: list[Decision] = []
        self._run_timers(now, decisions)
        self._run_drains(now, decisions)
        # A cycle that admits a lender's waiting gang ends its claim: the queues that may now
        # borrow get their turn in another cycle at once, not at the next event.
        # So does a cycle that displaces a queue's head (the other queues of its tree, whose gangs
        # the old head's reservation held back, are retried), makes a head whose own claim the
        # cycle's claims did not count (its queue is retried, see _note_head), or in which a gang
        # chooses other victims (see _retry_others_held). Those retries waited for the next
        # event, and on an idle cluster for good (random worlds 24 and 236 with CPU-only gangs
        # at 40 s). It ends: without events, a queue's head only moves to an older gang or leaves
        # by admission, and a gang chooses other victims only after an admission or an eviction.
        while True:
            asked = self._cycle_again
            if not (self._cycle(now, decisions) or self._cycle_again != asked) or not self._dirty:
                break
        if self._cite_ended:
            self._refresh_citations(now)
        for key in self._updates:
            wl = self.workloads.get(key)
            if wl is None or wl.state != "Pending":
                continue
            current = (wl.reason, wl.message)
            if wl.emitted != current:
                wl.emitted = current
                decisions.append(PendingUpdate(wl.key, wl.cq.name if wl.cq else None, wl.reason, wl.message, now))
        self._updates.clear()
        return decisions

    def next_wakeup(self) -> float | None:
        """The earliest time at which :meth:`schedule` has timed work (None: only events matter)."""
        while self._timers:
            time, _, kind, key, token = self._timers[0]
            if self._timer_live(kind, key, token):
                return time
            heapq.heappop(self._timers)
        return None

    def _add_timer(self, time: float, kind: str, key: str, token: int) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (time, self._timer_seq, kind, key, token))

    def _timer_live(self, kind: str, key: str, token: int) -> bool:
        wl = self.workloads.get(key)
        if wl is None or wl.admit_count != token:
            return False
        if kind == "ready":
            return wl.state == "Admitted" and not wl.pods_ready
        return wl.state == "Pending" and wl.requeue_at is not None

    def _run_timers(self, now: float, decisions: list[Decision]) -> None:
        while self._timers and self._timers[0][0] <= now:
            _, _, kind, key, token = heapq.heappop(self._timers)
            if not self._timer_live(kind, key, token):
                continue
            wl = self.workloads[key]
            if kind == "ready":
                self._pods_ready_timeout(wl, now, decisions)
            else:
                wl.requeue_at = None
                self._unrouted.pop(wl.key, None)
                self._route(wl)

    def _pods_ready_timeout(self, wl: Workload, now: float, decisions: list[Decision]) -> None:
        cfg = self.config
        wl.ready_evictions += 1
        n = wl.ready_evictions
        message = (
            f"fewer than {wl.min_member} pods running {cfg.pods_ready_timeout:.0f}s after admission "
            f"({wl.running} running); eviction {n}"
        )
        if cfg.backoff_limit is not None and n > cfg.backoff_limit:
            wl.deactivated = True
            message += f", over the backoff limit of {cfg.backoff_limit}: deactivated"
            self._evict(wl, "PodsReadyTimeout", message, now, decisions, deactivated=True)
            return
        delay = min(cfg.backoff_base * (2 ** (n - 1)), cfg.backoff_max)
        requeue_at = now + delay
        if cfg.requeue_timestamp == "Eviction":
            wl.set_queue_ts(now)
        wl.evict_requeue_at = requeue_at
        self._evict(
            wl, "PodsReadyTimeout", message + f", requeued after {delay:.0f}s", now, decisions, requeue_at=requeue_at
        )

    def _evict(
        self,
        wl: Workload,
        reason: EvictionReason,
        message: str,
        now: float,
        decisions: list[Decision],
        preemptor: str | None = None,
        requeue_at: float | None = None,
        deactivated: bool = False,
    ) -> None:
        cq = wl.cq
        assert cq is not None
        wl.state = "Evicting"
        wl.message = message
        cq.evicted_total += 1
        if reason == "Preempted":
            cq.preempted_total += 1
        decisions.append(
            Eviction(
                wl.key,
                cq.name,
                reason,
                message,
                now,
                preemptor=preemptor,
                requeue_at=requeue_at,
                deactivated=deactivated,
            )
        )
        self._version += 1
        # A waiting gang that may preempt can take a stopping gang as its victim ("already
        # evicted first") and so hold its capacity from the moment it is free; without this
        # retry it competed for that capacity with every other gang once the eviction was done,
        # unless some unrelated change happened to retry its queue first. (Evicted by a
        # preemption in a cycle, the other queues of the tree are retried at once: the preemptor
        # chose victims, see _retry_others_held.)
        for other in self._tree_queues(cq):
            if self._may_preempt(other):
                self._request_retry(other)

    def _run_drains(self, now: float, decisions: list[Decision]) -> None:
        if not self._drain:
            return
        drains = list(self._drain)
        self._drain.clear()
        for item in drains:
            kind, name = item.split(":", 1)
            if kind == "cq":
                cq = self.cluster_queues.get(name)
                if cq is None or cq.spec.stop_policy != "HoldAndDrain":
                    continue
                victims = list(cq.admitted.values())
                reason: EvictionReason = "ClusterQueueStopped"
                message = f"ClusterQueue {name!r} was stopped with HoldAndDrain"
            else:
                lq = self.local_queues.get(name)
                if lq is None or lq.stop_policy != "HoldAndDrain":
                    continue
                victims = [w for c in self.cluster_queues.values() for w in c.admitted.values() if w.lq_key == name]
                reason = "LocalQueueStopped"
                message = f"LocalQueue {name} was stopped with HoldAndDrain"
            for wl in victims:
                if wl.state == "Admitted":
                    self._evict(wl, reason, message, now, decisions)

    def _cqs_to_visit(self) -> Iterator[ClusterQueueState]:
        dirty = list(self._dirty)
        self._dirty.clear()
        for name in dirty:
            cq = self.cluster_queues.get(name)
            if cq is not None:
                yield cq

    def _head_key(self, cq: ClusterQueueState, key: OrderKey) -> tuple[float, int, float, int]:
        """Order of ClusterQueue heads within a cycle. Tie-breaks, in order:

        1. with fair sharing, the queue with the smaller weighted dominant share first;
        2. higher priority first;
        3. earlier queue timestamp first;
        4. earlier submission first (determinism).
        """
        share = dominant_share(cq.node) if self.config.fair_sharing else 0.0
        return (share, key[0], key[1], key[2])

    def _cycle(self, now: float, decisions: list[Decision]) -> bool:
        """One scheduling cycle; returns whether it admitted anything."""
        ctx = _Cycle(now, decisions)
        # (head key, push order, next key, queue, its cursor; None: a retry not expanded yet)
        heap: list[tuple[tuple[float, int, float, int], int, OrderKey, ClusterQueueState, Iterator[OrderKey] | None]]
        heap = []
        order = 0
        visited: list[ClusterQueueState] = []
        node_retries: set[str] = set()  # queues retried only because nodes came free
        # Queues retried only for quota given back, that the cycle's start found no longer short:
        # their tree's stamp then (see below, where their turn comes).
        quota_retries: dict[str, int] = {}
        retried: dict[str, ClusterQueueState] = {}  # queues whose waiting gangs this cycle retries
        for cq in self._cqs_to_visit():
            visited.append(cq)
            if cq.inactive_reason or cq.stopped:
                self._mark_all(cq)
                continue
            retry = cq.retry
            cq.retry = False
            node_retry = cq.node_retry
            cq.node_retry = False
            quota_retry = cq.quota_retry
            cq.quota_retry = False
            if cq.parked and not retry:
                # Quota was exhausted; only new arrivals (which unpark) or freed capacity help.
                continue
            if retry:
                retried[cq.name] = cq
            if not cq.active and not cq.inadmissible:
                # Nothing queued: a retry would work out what it could take for no gang. Queues
                # drain unevenly, and a drained one is still retried by every release in its
                # cohort (100,000 pending: 0.6 such retries per admission).
                continue
            cq.parked = False
            claims = self._tree_claims(cq, ctx)  # pin the claims in force as the cycle starts
            if quota_retry and not node_retry and self._still_short(cq, claims):
                continue
            cursor: Iterator[OrderKey] | None
            if cq.strict:
                cursor = cq.cursor(include_inadmissible=retry)
                if not retry and cq.inadmissible:
                    cursor = _before(cursor, cq.inadmissible.first())
                first = next(cursor, None)
            elif retry and cq.inadmissible:
                # Which waiting gangs could fit is worked out when the queue's turn comes: by then
                # the gangs ahead of it in the cycle may have taken what came free.
                cursor = None
                if node_retry:
                    node_retries.add(cq.name)
                elif quota_retry:
                    quota_retries[cq.name] = self.quota.tree_stamp(cq.node)
                first = cq.inadmissible.first() if not cq.active else min(cq.active.first(), cq.inadmissible.first())
            else:
                cursor = self._best_effort_cursor(cq, retry, ctx)
                first = next(cursor, None)
            if first is not None:
                order += 1
                heapq.heappush(heap, (self._head_key(cq, first), order, first, cq, cursor))
        while heap:
            head_key, _, key, cq, cursor = heapq.heappop(heap)
            if cursor is None:
                if cq.name in node_retries and self._node_retry(cq, ctx):
                    continue
                stamp = quota_retries.get(cq.name)
                if (
                    stamp is not None
                    and stamp != self.quota.tree_stamp(cq.node)
                    and self._still_short(cq, self._tree_claims(cq, ctx))
                ):
                    # What came free went to queues whose turn came earlier in this cycle (in a
                    # full cohort, usually the queue that gave it back): asked again now, the
                    # screen answers for a retry that would find every gang short (at 10,000
                    # pending, 0.84 retries per admission after the first cycle).
                    continue
                cursor = self._best_effort_cursor(cq, True, ctx)
                first = next(cursor, None)
                if first is not None:
                    order += 1
                    heapq.heappush(heap, ((head_key[0], first[0], first[1], first[2]), order, first, cq, cursor))
                continue
            wl = self.workloads[key[3]]
            before = cq.protected_head
            cq.node_blocked.pop(wl.key, None)  # back if it fails the node check again
            if wl.queued == "inadmissible" and self._fails_again(cq, wl, ctx):
                outcome = _STOP if cq.strict else _FAILED
            else:
                outcome = self._try(cq, wl, ctx)
            if cq.protected_head is not before:
                self._heads_version += 1
                if before is not None and before.cq is cq and before.state == "Pending" and cq.name not in retried:
                    cq.head_displaced = True
                    if not cq.strict and cq.inadmissible:
                        # The gangs the old head held back may pass the new one, which has not
                        # waited: they are looked at now, behind it, as a retry of the queue would.
                        # They used to wait for whichever retry of the queue came next, and which
                        # one that was depended on the retry shortcuts (random world 172 at 40 s).
                        # Not counted as a retry: the flag stays, and the next retry is a full one.
                        cursor = _after(self._best_effort_cursor(cq, True, ctx), key)
            if outcome == _ADMITTED:
                ctx.admitted.append(wl)
            else:
                ctx.failed.append(wl)
                if outcome == _STOP:
                    ctx.stopped[cq] = wl
                    continue
            nxt = next(cursor, None)
            if nxt is not None:
                order += 1
                heapq.heappush(heap, (self._head_key(cq, nxt), order, nxt, cq, cursor))
        for cq in retried.values():
            cq.head_displaced = False
        if self._displaced:
            self._displaced.clear()
            self._heads_version += 1
        if ctx.admitted and self._waiting_reservation:
            # An admission moves reservations too (a runner more: a head's time may come later,
            # and gangs that end before it may pass), so the queues with gangs held back by one
            # are retried, in the next cycle, at once. Only freed capacity retried them, and a
            # gang that fitted waited for the next event (random world 61 with CPU-only gangs at
            # 40 s: held back by another queue's head, whose reservation the cycle's admissions
            # moved).
            for name in self._waiting_reservation:
                waiting = self.cluster_queues.get(name)
                if waiting is not None:
                    self._request_retry(waiting)
            self._waiting_reservation.clear()
        for wl in ctx.admitted:
            if wl.cq is not None and wl.queued is not None:
                wl.cq.discard(wl)
        for wl in ctx.failed:
            if wl.cq is not None and wl.state == "Pending":
                wl.cq.make_inadmissible(wl)
        if ctx.admitted and self._held_heads:
            self._retry_held_heads(ctx.admitted)
        for cq in visited:
            if cq.fresh:
                head = ctx.stopped.get(cq)
                if head is None and cq.inadmissible:
                    head = self.workloads.get(cq.inadmissible.first()[3])
                self._tell_blocked(cq, head)
        return bool(ctx.admitted)

    def _tell_blocked(self, cq: ClusterQueueState, head: Workload | None) -> None:
        """StrictFIFO: gangs queued behind the head that stopped the queue were not tried; say so."""
        fresh = cq.fresh
        cq.fresh = []
        if head is None:
            return
        message = self._strict_message(cq)
        for wl in fresh:
            if wl.cq is cq and wl.state == "Pending" and wl.reason == "Pending" and head.order_key < wl.order_key:
                self._set_reason(wl, "BlockedByHead", message)

    @staticmethod
    def _strict_message(cq: ClusterQueueState) -> str:
        # The head is not named: it changes with each admission, and the gangs behind it are not
        # tried again until they reach it, so a name (and the head's reason) went stale at once.
        return (
            f"StrictFIFO ClusterQueue {cq.name!r}: the gang at its head cannot be admitted yet, "
            "and nothing may pass it"
        )

    def _node_retry(self, cq: ClusterQueueState, ctx: _Cycle) -> bool:
        """A retry that only freed node capacity asked for: look at the gangs that failed the node
        check, not the whole queue. Returns False (do the full retry) unless it is certain that
        the full retry would end as this one did.

        Nodes are shared by every ClusterQueue, so in a full cluster every finish retries every
        queue that waits on nodes. Nothing but node capacity changed for such a queue since its
        last retry (any other change asks for a full one), so its other waiting gangs fail again
        exactly as before (quota, a lender's claim, a reservation) and a full retry would not
        even look at them: with its protected head in front, a BestEffortFIFO queue that may not
        preempt and has no new gangs retries only the gangs that fit what it may take, which
        are the ones that failed the node check. Each of those is checked as the full retry
        would (:meth:`_fails_again`); if one may fit now, the full retry runs.
        """
        if not self._retry_walks_candidates(cq) or self._holding_head(cq, ctx.now) is not None:
            return False
        blocked = cq.node_blocked
        gangs = [wl for wl in blocked.values() if wl.cq is cq and wl.queued == "inadmissible"]
        blocked.clear()  # each is back if it fails the node check again
        gangs.sort(key=lambda wl: wl.order_key)
        for i, wl in enumerate(gangs):
            before = cq.protected_head
            if not self._fails_again(cq, wl, ctx):
                for rest in gangs[i:]:  # the full retry looks at them
                    blocked[rest.key] = rest
                return False
            if cq.protected_head is not before:
                self._heads_version += 1
            ctx.failed.append(wl)
        return True

    def _best_effort_cursor(self, cq: ClusterQueueState, retry: bool, ctx: _Cycle) -> Iterator[OrderKey]:
        """BestEffortFIFO: the gangs worth trying this cycle, in queue order.

        Every gang never tried yet (``active``) is tried once, so it gets a real reason. Gangs
        tried before are retried only after a change (``retry``), and then only those whose demand
        fits what the queue could take now (``candidates``): the work of a retry is proportional
        to the gangs that could fit, not to the depth of the queue. What the queue could take can
        only shrink during the cycle (admissions use quota; reclaim claims hold until the cycle
        ends), so the list made at the start holds every gang that could fit later in the cycle.
        A gang left out would have failed, and failing has effects, so every waiting gang is
        looked at, in order, until the queue has a protected head at or ahead of the next one (the
        first gang that fails for lack of capacity becomes the head, and its reservation keeps
        later gangs from starving it) and until the queue has made its preemption attempt of this
        cycle (the first gang with a preemption target preempts).
        """
        if not retry:
            return iter(cq.active)
        bounds = self._candidate_bounds(cq, ctx)
        short: list[tuple[int, str, int]] | None = [] if bounds and not cq.multi_pod_set else None
        candidates = cq.candidates(bounds, short)
        if not candidates and short:
            self._note_classes_short(cq, short)
        workloads = self.workloads
        keys = [k for k in candidates if workloads[k[3]].queued == "inadmissible"]
        claims = self._tree_claims(cq, ctx)
        claimant = self._claimant_head(cq, claims)
        if claimant is not None:
            # Among the keys, and kept there when the bounds shrink during the walk (a candidate
            # anyway, it fit the bounds of a flavor it cannot have, and was dropped from a retry
            # when that flavor's quota went to gangs ahead of it: random world 7 at 40 s).
            at = bisect.bisect_left(keys, claimant.order_key)
            if at == len(keys) or keys[at] != claimant.order_key:  # not a candidate
                if self._claimant_may_fit(cq, claimant, claims):
                    keys.insert(at, claimant.order_key)
                else:
                    claimant = None
        holding: Workload | None = None
        if keys and not (self._may_preempt(cq) and cq.name not in ctx.preempted_in):
            head = self._holding_head(cq, ctx.now)
            if head is not None and keys[-1] > head.order_key and (not cq.active or cq.active.first() > head.order_key):
                end = bisect.bisect_right(keys, head.order_key)
                if keys[end - 1] == head.order_key and head.key not in ctx.capacity_failed:
                    # The walk tries the head before any gang behind it: whether it starves is
                    # known for free once it has failed (see _retry_keys), instead of by a what-if
                    # placement of it now, which at 100,000 pending was 0.39 per admission, mostly
                    # for heads that fit and were then placed again for real.
                    holding = head
                elif self._starving_now(head, ctx):
                    # It does not fit now, and cannot later in this cycle (what the queue may take
                    # only shrinks): no gang behind it can be admitted in this cycle. Unless a new
                    # gang ahead of it fails in this cycle and so becomes the protected head in its
                    # place (then the walk decides at each step, see _retry_keys).
                    keys = keys[:end]
        retried = self._retry_keys(cq, keys, ctx, holding, claimant)
        return merge_keys(iter(cq.active), retried) if cq.active else retried

    def _candidate_bounds(self, cq: ClusterQueueState, ctx: _Cycle) -> list[dict[str, int]]:
        """Upper bounds (resource → amount) of what one queued gang could take this cycle.

        Per flavor-resource: the available quota, and where another queue's waiting gang claims
        it back (:meth:`_reclaimer_for`), only the queue's unused nominal quota. A gang with one
        pod set in a ClusterQueue with one resource group charges all its resources to one
        flavor: one bound per flavor. Otherwise a resource may be charged to any flavor of its
        group, or split over them by several pod sets: one bound, the largest (or, with several
        pod sets, the total) amount per resource.
        """
        claims = self._tree_claims(cq, ctx)
        memo = _Amounts(self, cq, claims)
        split = cq.multi_pod_set > 0
        if not self._may_fit_any(cq, memo):
            self._note_short(cq, memo, claims)
            return []
        for fr in cq.flavor_resources:
            memo.get(fr)
        amounts = memo.values
        groups = cq.spec.resource_groups
        if len(groups) == 1 and not split:
            return [{q.name: amounts[(flavor.name, q.name)] for q in flavor.resources} for flavor in groups[0].flavors]
        out: dict[str, int] = {}
        for (_, resource), amount in amounts.items():
            if split:
                out[resource] = out.get(resource, 0) + amount
            elif amount > out.get(resource, -1):
                out[resource] = amount
        return [out]

    @staticmethod
    def _may_fit_any(cq: ClusterQueueState, amounts: _Amounts) -> bool:
        """False if some resource that every queued gang of ``cq`` requests is available (per
        ``amounts``) in smaller amounts than the least of them needs: then none can fit."""
        split = cq.multi_pod_set > 0
        demand = cq.least_common_demand()
        first = cq.screen_first
        frs_by_resource = cq.frs_by_resource
        # The resource that ruled the queue out last time usually still does: it goes first.
        for pass_first in (True, False) if first else (False,):
            for resource, least in demand:
                if (resource == first) != pass_first:
                    continue
                enough = least <= 0
                total = 0
                for fr in frs_by_resource.get(resource, ()):
                    value = amounts.get(fr)
                    if split:
                        total += value
                        enough = total >= least
                    elif value >= least:
                        enough = True
                    if enough:
                        break
                if not enough:
                    cq.screen_first = resource
                    return False
        return True

    def _note_short(
        self, cq: ClusterQueueState, amounts: _Amounts, claims: _Claims
    ) -> None:
        """Keep what :meth:`_may_fit_any` just showed (``cq.screen_first`` is the resource that
        no queued gang of ``cq`` can get enough of), for :meth:`_still_short`."""
        resource = cq.screen_first
        least = 0
        for r, amount in cq.least_common_demand():
            if r == resource:
                least = amount
        name = cq.name
        quota = self.quota
        node = cq.node
        # What the queue could take without lenders' claims: a claim may end before the next
        # check (and one may start), so the check applies the claims in force then.
        self._keep_screen(
            cq,
            least,
            [
                (fr, least, quota.available(node, fr) if _claimed(claims, fr, name) else amounts.get(fr))
                for fr in cq.frs_by_resource.get(resource, ())
            ],
        )

    def _note_classes_short(self, cq: ClusterQueueState, short: list[tuple[int, str, int]]) -> None:
        """Keep, for :meth:`_still_short`, why no queued gang of ``cq`` fits any of the bounds of
        :meth:`_candidate_bounds`, when no one resource rules them all out (:meth:`_may_fit_any`
        let them through): ``short`` holds, per group of gangs that request the same resources
        and per bound, a resource that every gang of the group needs more of than the bound
        allows, with the least of them (:meth:`ClusterQueueState.candidates`). The screen then
        holds while, for each of those flavor-resources, what the queue could take stays below
        the least that some group needs of it.

        In a queue of CPU-only and GPU gangs, the CPU gangs may be short of CPU while GPU gangs
        that need less CPU are short of GPUs: the least CPU that every gang requests fits, yet no
        gang does. At 100,000 pending, those were three in four of the retries that found no
        gang to try, and without a screen each release in the cohort repeated them.
        """
        groups = cq.spec.resource_groups
        flavors = groups[0].flavors if len(groups) == 1 else None  # one bound per flavor
        frs_by_resource = cq.frs_by_resource
        leasts: dict[FlavorResource, int] = {}
        for index, resource, least in short:
            if not resource:
                return  # some gang fits each resource's bound; only their combination does not
            frs = frs_by_resource.get(resource, ())
            if flavors is not None:
                fr = (flavors[index].name, resource)
                frs = (fr,) if fr in frs else ()
            for fr in frs:
                if least < leasts.get(fr, least + 1):
                    leasts[fr] = least
        quota = self.quota
        node = cq.node
        self._keep_screen(cq, 0, [(fr, least, quota.available(node, fr)) for fr, least in leasts.items()])

    def _keep_screen(self, cq: ClusterQueueState, least: int, entries: list[tuple[FlavorResource, int, int]]) -> None:
        """Store ``cq.screen`` from ``entries``, (flavor-resource, least demand, what the queue
        could take of it without lenders' claims), with the marks :meth:`_still_short` measures
        gains from; ``least``: the least total demand when the queue's gangs may split a resource
        over flavors (several pod sets)."""
        node = cq.node
        root = node.top
        released = root.released
        ancestors = []
        parent = node.parent
        while parent is not None:
            ancestors.append(parent)
            parent = parent.parent
        cq.screen = (
            root,
            least,
            cq.multi_pod_set > 0,
            cq.demand_adds,
            self._config_version,
            tuple(
                [
                    (fr, need, raw, released.get(fr, 0), tuple([(a, a.usage.get(fr, 0)) for a in ancestors]))
                    for fr, need, raw in entries
                ]
            ),
        )

    def _still_short(self, cq: ClusterQueueState, claims: _Claims) -> bool:
        """Would a retry of ``cq`` try no gang at all? Asked at the start of a cycle (and again at
        the queue's turn if its tree's usage changed in between), when all that
        asked for the retry since the last one is quota given back by other queues of its tree,
        claims on lent quota that ended, and freed nodes. In a cohort of ten queues every
        finished gang retries all ten, and in a full cluster most of them cannot use what it gave
        back: each retry worked out what the queue could take, from per-queue state that is cold
        in a large cluster, to find that no gang fits. Here a few counters answer.

        Exact. The last screen of ``cq`` (:meth:`_note_short`, :meth:`_note_classes_short`) found
        that every queued gang needs more of some resource than the queue could get of it, and
        kept, per flavor-resource that ruled gangs out, the least they need of it and what the
        queue could take then without lenders' claims. That grows by at most what its tree gave
        back since (the root's ``released``; admissions only shrink it), and by at most the drop
        in usage, since, of the cohorts above the queue (a cohort's share of the
        quota rises by no more than its usage falls; in a full cohort another queue soon takes
        what one gives back, and counted alone, what was given back soon let every gang in
        again). A lender's claim in force now caps it at the queue's unused nominal quota, as
        :meth:`_amount` does; one that ended since is no reason to retry in full (a head's
        admission ends its claims and retries the other queues of its cohort: at 100,000 pending
        2.5 such retries per admission found every gang still short). That stands as long as no
        gang joined the queue (leaving ones only raise the least demand), the queue's own usage did
        not drop (its own releases discard the screen), and the configuration is the same. If
        even those bounds leave every gang short, the retry's candidates would be empty, and it
        would try nothing if it looks at candidates only (:meth:`_retry_walks_candidates`).
        """
        screen = cq.screen
        if screen is None:
            return False
        root, least, split, adds, config_version, entries = screen
        if root is not cq.node.top or adds != cq.demand_adds or config_version != self._config_version:
            return False
        released = root.released
        name = cq.name
        total = 0
        usage, nominal = cq.node.usage, cq.node.nominal
        capped = False  # a claim capped what the queue could take (not for its claimant's head)
        for fr, need, amount, mark, used in entries:
            gain = released.get(fr, 0) - mark
            if gain > 0:
                # No more than the cohorts above the queue stopped using: what was given back and
                # then taken by other queues' admissions does not count.
                drop = 0
                for cohort, then in used:
                    now = cohort.usage.get(fr, 0)
                    if now < then:
                        drop += then - now
                gain = min(gain, drop)
            most = amount + gain
            if _claimed(claims, fr, name):
                unused = max(0, nominal.get(fr, 0) - usage.get(fr, 0))
                if most > unused:  # as _amount does
                    most = unused
                    capped = True
            if split:
                total += most
            elif most >= need:
                return False
        if split and total >= least:
            return False
        if capped:
            head = self._claimant_head(cq, claims)
            if head is not None and self._claimant_may_fit(cq, head, claims):
                return False
        return self._retry_walks_candidates(cq)

    def _retry_walks_candidates(self, cq: ClusterQueueState) -> bool:
        """Would a full retry of ``cq`` look only at the gangs that fit what it may take? Yes for a
        BestEffortFIFO queue with no new gangs that may not preempt (its preemption attempt walks
        every gang) and whose protected head is its first waiting gang (the gangs ahead of the
        head are retried whatever their demand): see :meth:`_best_effort_cursor` and
        :meth:`_retry_keys`. The condition of both retry shortcuts, :meth:`_node_retry` and
        :meth:`_still_short`, which also requires that no new gang took the place of the queue's
        protected head since its last retry: gangs that the old head held back may pass now, and
        only a full retry looks at them."""
        if cq.active or cq.strict or cq.head_displaced or self._may_preempt(cq):
            return False
        head = cq.head()
        return head is not None and not head.order_key > cq.inadmissible.first()

    def _retry_keys(
        self,
        cq: ClusterQueueState,
        keys: list[OrderKey],
        ctx: _Cycle,
        holding: Workload | None = None,
        claimant: Workload | None = None,
    ) -> Iterator[OrderKey]:
        """The waiting gangs to retry, lazily, in queue order: each next one is the next waiting
        gang while the queue has no protected head at or ahead of it, or has not made its
        preemption attempt of this cycle; otherwise the next candidate (see
        :meth:`_best_effort_cursor`). Decided at each step, since trying a gang can admit the head
        or make a new one. ``holding``: a head past the starvation timeout, among the candidates,
        whose reservation was left open; when the walk passes it, it ends there if the queue's
        protected head then starves (it was not admitted, or a gang ahead of it failed).
        ``claimant``: the gang through which the queue claims, among the keys although it may not
        fit the bounds (see :meth:`_claimant_head`); it stays among them."""
        inadmissible = cq.inadmissible  # not changed before the end of the cycle
        m = len(keys)
        j = 0
        may_preempt = self._may_preempt(cq)
        quota = self.quota
        version = quota.tree_stamp(cq.node)  # the candidates fit what the queue could take then
        bounds: list[dict[str, int]] = []
        refilter = False
        workloads = self.workloads
        key: OrderKey | None = inadmissible.first() if inadmissible else None
        while key is not None:
            if not (may_preempt and cq.name not in ctx.preempted_in):
                head = cq.head()
                if head is not None and head.order_key <= key:
                    j = bisect.bisect_left(keys, key, j)
                    stamp = quota.tree_stamp(cq.node)
                    if stamp != version:
                        # Admissions since took quota: keep only candidates that still fit.
                        version = stamp
                        bounds = self._candidate_bounds(cq, ctx)
                        refilter = True
                    if refilter:
                        while (
                            j < m
                            and not any(
                                all(v <= b.get(r, 0) for r, v in workloads[keys[j][3]].totals.items()) for b in bounds
                            )
                            and (claimant is None or keys[j] != claimant.order_key)
                        ):
                            j += 1
                    if j == m:
                        return
                    key = keys[j]
            if holding is not None and key > holding.order_key:
                holder = self._holding_head(cq, ctx.now)
                if holder is not None and self._starving_now(holder, ctx):
                    return
                holding = None
            yield key
            j = bisect.bisect_right(keys, key, j)
            key = inadmissible.after(key)

    def _fails_again(self, cq: ClusterQueueState, wl: Workload, ctx: _Cycle) -> bool:
        """Whether a retried gang is known to fail, without building assignments and messages or
        placing pods; if so, leave the state a failed :meth:`_try` would (protected head, waiting
        for nodes). Exact: it follows :meth:`_try`'s decisions step by step, and answers False
        (try it) wherever it cannot tell. Not applied before the queue's preemption attempt of
        this cycle, since preemption is how a gang that does not fit gets in.
        """
        if self._may_preempt(cq) and cq.name not in ctx.preempted_in:
            return False
        if wl.reason in _HELD_BACK and not self._may_preempt(cq):
            head = cq.head()
            if (
                head is not None
                and head.order_key < wl.order_key
                and self._holds_queue(head, ctx)
            ):
                # Every path of _try ends before admission: at quota, at nodes, or at this head's
                # reservation. Retry when capacity comes free anywhere (a superset of the others),
                # unless the head holds the queue until it is admitted (which retries the queue).
                # Not in a queue that may preempt: each of its retries is also a preemption
                # attempt, taken by its first gang that may preempt, so the retries it gets must
                # be those _try asks for. _try, which also looks at the other flavor options, may
                # find one that fails the node check and ask for a retry when nodes come free;
                # skipped here, a later retry did not happen, and a new gang took the preemption
                # attempt that the head had taken (random world 426 at 40 s).
                # Not behind a head that only a lender's claim keeps out (``claimed``): it holds
                # nothing for sure, and the gang's try asks for what the gang waits for (freed
                # nodes, if it fails the node check), which no retry request here could match.
                if self._limited:
                    self._waiting_reservation[cq.name] = None
                if wl.reason != "BlockedByReservation" or wl.cites is not head:
                    self._set_reason(wl, "BlockedByReservation", self._blocked_message(head, ctx.now), head)
                return True
        if wl.reason not in ("InsufficientQuota", "InsufficientNodes"):
            return False
        options = self._options(cq, wl)
        if options.why:
            return False
        quota = self.quota
        version = (quota.version, self._heads_version)
        if ctx.available_version != version:
            ctx.available.clear()
            ctx.available_version = version
        available = ctx.available.get(cq.name)
        if available is None:
            available = ctx.available[cq.name] = _Available(quota, cq.node)
        node = cq.node
        usage, nominal = node.usage, node.nominal
        stop_at_preempt = cq.spec.flavor_fungibility.when_can_preempt == "MayStopSearch"
        listed = reclaimed = False
        unblocked: list[int] = []  # options that fit the quota and that no lender reclaims
        claimant: bool | None = None  # is it the gang through which its queue claims?
        for index, option in enumerate(options.usages):
            mode = FIT
            borrowed: list[tuple[FlavorResource, int]] = []
            for fr, need in option.items():
                if need <= 0:
                    continue
                if need <= available[fr]:
                    if usage.get(fr, 0) + need > nominal.get(fr, 0):
                        borrowed.append((fr, need))
                elif need <= available.potential(fr):
                    mode = PREEMPT
                else:
                    mode = NO_FIT
                    break
            if mode == NO_FIT:
                continue
            listed = True
            if mode == PREEMPT:
                if stop_at_preempt:
                    break
            elif not borrowed:
                unblocked.append(index)
            else:
                if claimant is None:
                    claimant = self._tree_claims(cq, ctx).claimants.get(cq.name) is wl
                if available.reclaimer(self, cq, wl, claimant, borrowed, ctx) is None:
                    unblocked.append(index)
                else:
                    reclaimed = True
        if not listed:
            return False  # never fits: _try says so
        if unblocked:
            # _try would check nodes for these; skip only if every one of them must fail.
            mark = wl.node_mark
            if (
                cq.spec.admission_mode != "QuotaAndNodes"
                or mark is None
                or mark.config != (self._config_version, cq.name)
                or not mark.options.issuperset(unblocked)
                or not self._mark_holds(wl, mark)
            ):
                return False
            self._wait_for_nodes(cq, wl, mark.pools if mark.pools_version == self.nodes.version else None)
        # Otherwise nothing fits the quota, or only quota a lender reclaims: _try fails on quota.
        if cq.protected_head is wl:
            cq.protected_head = None
        self._note_head(cq, wl, ctx, reclaimed)
        if not reclaimed:
            ctx.capacity_failed.add(wl.key)
        return True

    def _mark_holds(self, wl: Workload, mark: NodeMark) -> bool:
        """Does ``wl``'s node mark still prove that its pods do not fit (see NodeMark)?

        When it does, the mark moves forward: the nodes freed since it was made could take at
        most ``gain`` of the missing pods, so from now on the gang is ``shortfall - gain`` pods
        short. Sound: a node not freed again since can only have lost capacity, and one freed
        again is counted anew. Each check then scans only the nodes freed since the last one,
        instead of giving up (and trying the gang in full) once many nodes have been freed.
        """
        nodes = self.nodes
        gain = nodes.pods_freed_since(
            mark.freed_seq,
            wl.spec.pod_sets[0].requests,
            mark.shortfall,
            pools=mark.pools if mark.pools_version == nodes.version else None,
        )
        if gain is None or gain >= mark.shortfall:
            return False
        mark.freed_seq = nodes.freed_seq
        mark.shortfall -= gain
        return True

    def _mark_all(self, cq: ClusterQueueState) -> None:
        reason: PendingReason = "ClusterQueueInactive" if cq.inactive_reason else "ClusterQueueStopped"
        message = cq.inactive_reason or f"ClusterQueue {cq.name!r} is stopped ({cq.spec.stop_policy})"
        for key in list(cq.ordered()):
            self._set_reason(self.workloads[key[3]], reason, message)

    def _note_head(self, cq: ClusterQueueState, wl: Workload, ctx: _Cycle, claimed: bool = False) -> None:
        """Keep ``protected_head``: the first capacity-blocked gang in queue order.

        A new head's reclaim claims join the cycle's at once (the cycle compares heads before and
        after each gang it tries and bumps ``_heads_version`` when they differ). ``claimed``: a
        lender's claim kept ``wl`` out in some flavor option.
        """
        head = cq.head()
        if head is None or wl.order_key < head.order_key:
            if head is not None:
                self._cited_role_may_end(head)
            cq.protected_head = wl
            self._protected[cq.name] = None
            claims = ctx.claims.get(cq.node.root())
            if claims is not None and self._add_claims(claims, cq, wl) and claimed:
                # A lender's claim kept it out, in a cycle whose claims were worked out without
                # its own: counted, that lender's gang may give way to it (see _stuck_claimants).
                # Random world 236 with CPU-only gangs at 40 s: two heads claimed what the other
                # borrowed, and one of them waited on an idle cluster.
                self._request_retry(cq)
                self._cycle_again += 1
            # The head it replaces may claim quota back that it does not, and its reservation
            # held back other queues' gangs that borrow (its scope), which the new head's may not.
            # Without the retry, such a gang waited on a head that no longer was one ("ns/w58 has
            # waited longer than the starvation timeout" while ns/w60 had taken its place).
            if head is not None:
                self._cycle_again += 1
                self._displaced.setdefault(cq.name, []).append(head)
                self._retry_others(cq)

    # ------------------------------------------------------------------------------------------
    # Trying one workload
    # ------------------------------------------------------------------------------------------

    def _try(self, cq: ClusterQueueState, wl: Workload, ctx: _Cycle) -> int:
        """Try to admit ``wl`` now; on failure record why. Returns _ADMITTED, _FAILED or _STOP."""
        # A protected head stays protected while it is tried: the quota it claims back stays
        # claimed for the reservations worked out meanwhile (other heads' scopes), as it does for
        # the cycle's gangs. Dropped, another queue's head seemed able to borrow it and fit now,
        # and gangs behind that head passed it, depending on whose try worked its reservation out.
        was_head = cq.protected_head is wl
        cands = self._assignments(cq, wl)
        if cands.never_fits:
            self._set_reason(wl, "NeverFits", cands.message)
            return _STOP if cq.strict else _FAILED
        nodes_checked = cq.spec.admission_mode == "QuotaAndNodes"
        quota_ok = [a for a in cands.assignments if a.mode <= BORROW]
        node_failure = ""
        # A mark from an earlier node check stays sound until a new one replaces it (see NodeMark).
        freed_seq = self.nodes.freed_seq
        shortfall = 0
        node_checked: set[int] = set()  # options whose node check failed
        blocked_by: Workload | None = None
        reclaimer: Workload | None = None
        # Every option that fits the quota is tried, also after a reservation held the gang back
        # in one: another may fit its own quota and delay nobody. The search used to stop at the
        # first such option, and three heads held each other on an idle cluster (random world 3
        # at 40 s: q0's head fitted its own quota in flavor b, but was held back in flavor a by
        # q1's starving head, which waited for q2's, which q0's claim on b kept out).
        for a in quota_ok:
            if a.borrowing:
                claimer = self._reclaimer(cq, wl, a, ctx)
                if claimer is not None:
                    # Kept when a later option fails otherwise: the gang did not lack capacity
                    # only, and may fit later in the cycle, once the lender's gang is admitted.
                    reclaimer = claimer
                    continue
            in_scope = self._holding_heads(cq, wl, a, ctx)
            stmt = Statement(self.quota, self.nodes)
            self._charge(wl, cq, a.usage)
            why = ""
            placement: dict[tuple[int, str], int] = {}
            placed = 0
            if nodes_checked:
                why, placement, placed = self._place(wl, a, ctx)
            heads: list[tuple[Workload, _Reservation]] = []
            if not why and in_scope:
                # The heads' reservations are computed without this gang: most gangs fail before
                # this point, so they are worked out only now, after undoing and then redoing the
                # gang's charge and placement (deterministic) if one is not cached.
                cached = [self._cached_reservation(h, ctx.now) for h in in_scope]
                if all(info is not None for info in cached):
                    heads = [(h, info) for h, info in zip(in_scope, cached, strict=True) if info is not None]
                else:
                    stmt.discard()
                    heads = [(h, self._reservation(h, ctx.now)) for h in in_scope]
                    stmt = Statement(self.quota, self.nodes)
                    self._charge(wl, cq, a.usage)
                    if nodes_checked:
                        why, placement, placed = self._place(wl, a, ctx)
            if not why:
                blocked_by = self._reservation_blocks(heads, wl, ctx.now)
                if blocked_by is None:
                    stmt.commit()
                    self._admit(cq, wl, a, placement, ctx, was_head)
                    return _ADMITTED
            stmt.discard()
            if why:
                if not node_failure:
                    node_failure = why
                short = wl.min_member - placed
                shortfall = short if not shortfall else min(shortfall, short)
                node_checked.add(a.index)
        if blocked_by is not None:
            self._set_reason(wl, "BlockedByReservation", self._blocked_message(blocked_by, ctx.now), blocked_by)
            if node_failure:
                # Another option failed the node check: freed nodes alone may let it in there, out
                # of the holding head's way. Only the holder's admission or leave retried it.
                self._wait_for_nodes(cq, wl, None)
            self._note_head(cq, wl, ctx, reclaimer is not None)
            if self._limited or not self._starving(blocked_by, ctx.now):
                # Its reservation may change with any capacity change. A starving head without
                # a reservation time (no runtime limits anywhere) holds this gang back until it
                # is admitted or leaves, and either retries its cohort tree, or until it chooses
                # victims (see _retry_others_held).
                self._waiting_reservation[cq.name] = None
            elif cq.protected_head is wl and self._may_preempt(cq):
                # Whether it fits, so whether it may preempt, changes with the capacity others
                # take: see _retry_held_heads.
                self._held_heads[cq.name] = None
            return _STOP if cq.strict else _FAILED
        if reclaimer is not None and not node_failure and not any(a.mode == FIT for a in quota_ok):
            self._set_reason(wl, "InsufficientQuota", self._claim_message(reclaimer), reclaimer)
            self._note_head(cq, wl, ctx, True)
            if cq.protected_head is wl and self._may_preempt(cq):
                # An admission may make the claim give way (its gang can no longer fit, see
                # _stuck_claimants), and then this head may preempt: see _retry_held_heads.
                self._held_heads[cq.name] = None
            return _STOP if cq.strict else _FAILED
        # Nothing fits now. Preemption, once per queue per cycle, for the first gang that may.
        target = next((a for a in cands.assignments if a.mode == PREEMPT), None)
        if target is None and quota_ok and node_failure:
            target = quota_ok[0]
        if target is not None and cq.name not in ctx.preempted_in and self._may_preempt(cq):
            ctx.preempted_in.add(cq.name)
            victims = self._victims_suffice(cq, wl, cands, nodes_checked, ctx)
            if victims is None:
                victims = self._find_victims(cq, wl, target, nodes_checked, ctx)
            if victims is not None:
                self._preempt(cq, wl, victims, ctx)
                return _STOP if cq.strict else _FAILED
        self._note_head(cq, wl, ctx, reclaimer is not None)
        if reclaimer is None:
            ctx.capacity_failed.add(wl.key)  # it lacked quota or nodes, not a lender's leave
        pool_ids: frozenset[int] | None = None  # the pools its pods could go to (None: not known)
        if node_failure and len(wl.spec.pod_sets) == 1 and shortfall > 0:
            pool_ids = frozenset(
                pool.pool_id
                for a in cands.assignments
                if a.index in node_checked
                for _, _, _, pools in self._pod_sets_of(a.choices)
                for pool in pools
            )
            wl.node_mark = NodeMark(
                freed_seq,
                shortfall,
                (self._config_version, cq.name),
                frozenset(node_checked),
                pool_ids,
                self.nodes.version,
            )
        if node_failure:
            # Freed nodes alone may let it in, through the option that failed the node check,
            # even when another option lacks quota (and names the reason): a gang that failed
            # nodes in one flavor and quota in the next waited for an unrelated event.
            self._wait_for_nodes(cq, wl, pool_ids)
        if node_failure and not any(a.mode == PREEMPT for a in cands.assignments):
            self._set_reason(wl, _node_reason(node_failure), node_failure)
        else:
            self._set_reason(wl, "InsufficientQuota", cands.message or node_failure)
        return _STOP if cq.strict else _FAILED

    def _holding_heads(self, cq: ClusterQueueState, wl: Workload, a: Assignment, ctx: _Cycle) -> list[Workload]:
        """The heads in ``wl``'s scope with ``a`` whose reservation may hold it back now: not those
        known to hold nothing now (:meth:`_not_now`), nor another queue's head that the claim
        ``wl``'s queue makes through it keeps out (:meth:`_claim_keeps_out`)."""
        return [
            h
            for h in self._heads_in_scope(cq, wl, a)
            if not self._not_now(h, ctx) and (h.cq is cq or not self._claim_keeps_out(cq, wl, h, ctx))
        ]

    @staticmethod
    def _claim_message(reclaimer: Workload) -> str:
        name = reclaimer.cq.name if reclaimer.cq is not None else ""
        return f"cannot borrow: ClusterQueue {name!r} is reclaiming its lent quota for {reclaimer.key}"

    def _options(self, cq: ClusterQueueState, wl: Workload) -> FlavorOptions:
        """The gang's flavor options in ``cq`` (cached on the gang until the specs change).

        Gangs with equal pod sets, in queues with the same flavors, share one FlavorOptions: a
        deep queue holds many gangs of few shapes, and the options (with their usage per
        flavor-resource) are read on every retry screen, so sharing keeps the engine's working
        set small.
        """
        cached = wl.choices
        if cached is None or cached[0] != self._config_version or cached[1] != cq.name:
            signatures = tuple(_pod_set_signature(ps) for ps in wl.spec.pod_sets)
            shapes = self._shapes
            # Keyed on the queue's flavor layout, not its name: queues with the same resource
            # groups and flavors (a platform's per-team queues) share options too. Options
            # that can never match name the ClusterQueue in their reason, so they do not.
            options = shapes.get((cq.layout, signatures))
            if options is None:
                options = shapes.get((cq.name, signatures))
            if options is None:
                if len(shapes) >= _MAX_SHAPES:
                    shapes.clear()  # caches: shapes of gangs long gone must not pile up
                    self._groups.clear()
                options = flavor_options(cq.spec, self.flavors, wl.spec.pod_sets, self._groups)
                shapes[(cq.name, signatures) if options.why else (cq.layout, signatures)] = options
            cached = (self._config_version, cq.name, options)
            wl.choices = cached
        return cached[2]

    def _assignments(self, cq: ClusterQueueState, wl: Workload, messages: bool = True) -> Candidates:
        return assignments(self.quota, cq.node, cq.spec, self._options(cq, wl), messages)

    def _pod_sets_of(
        self, choices: tuple[PodSetChoice, ...]
    ) -> list[tuple[int, dict[str, int], int, tuple[NodePool, ...]]]:
        out = []
        for choice in choices:
            ps = choice.pod_set
            labels: dict[str, str] = {}
            tolerations: list[Toleration] = []
            for flavor_name in dict.fromkeys(choice.flavors.values()):
                flavor = self.flavors[flavor_name]
                labels.update(flavor.node_labels)
                tolerations.extend(flavor.tolerations)
            pools = self.nodes.candidate_pools(labels, tuple(tolerations), ps)
            out.append((choice.index, ps.requests, ps.count, pools))
        # Largest pods first: they are the hardest to fit.
        out.sort(key=lambda item: tuple(-v for _, v in sorted(item[1].items())))
        return out

    def _place(self, wl: Workload, a: Assignment, ctx: _Cycle | None) -> tuple[str, dict[tuple[int, str], int], int]:
        """Node check inside the caller's statement: charge the planned pods, or say why not.
        Returns (why not, or "", the planned pods per (pod set, node), how many pods were placed).

        A placement that fitted every pod is kept on the gang with the state it was found in
        (node epoch, no what-if change open): asked again in the same state, it is charged again
        without a search. A starving head is placed in a what-if (its reservation: does it fit
        now?) and, when it does, placed again at once by its real attempt; at 100,000 pending
        that second search was most of what the reservation check cost.
        """
        nodes = self.nodes
        state = (nodes.epoch, self._config_version, nodes.version, a.index)
        clean = not nodes.log  # the state is the real one of this epoch
        known = wl.placement
        if clean and known is not None and known[0] == state:
            for node, requests, count in known[1]:
                nodes.allocate(node, requests, count)
            return "", dict(known[2]), known[3]
        pod_sets = self._pod_sets_of(a.choices)
        placement = nodes.place(pod_sets, wl.min_member, ctx.unplaceable if ctx is not None else None)
        if placement.placed < wl.min_member:
            sizes = ", ".join(
                f"{count}× {{{', '.join(f'{format_amount(r, v)} {r}' for r, v in sorted(req.items()))}}}"
                for _, req, count, _ in pod_sets
            )
            return (
                (
                    f"only {placement.placed} of the {wl.min_member} pods needed together fit on nodes of the "
                    f"assigned flavors ({sizes})"
                ),
                {},
                placement.placed,
            )
        if wl.spec.min_resources:
            pools = {p.pool_id: p for _, _, _, ps in pod_sets for p in ps}
            free = self.nodes.free_in_pools(pools.values())
            planned: dict[str, int] = {}
            for (index, _), count in placement.pods.items():
                for r, v in wl.spec.pod_sets[index].requests.items():
                    planned[r] = planned.get(r, 0) + v * count
            for resource, amount in wl.spec.min_resources.items():
                have = free.get(resource, 0) + planned.get(resource, 0)
                if have < amount:
                    return (
                        (
                            f"minResources needs {format_amount(resource, amount)} {resource} free on nodes of the "
                            f"assigned flavors, {format_amount(resource, have)} is"
                        ),
                        {},
                        placement.placed,
                    )
        log = nodes.log
        if clean and log is not None and placement.placed == sum(count for _, _, count, _ in pod_sets):
            wl.placement = (state, list(log), dict(placement.pods), placement.placed)
        return "", placement.pods, placement.placed

    def _admit(
        self,
        cq: ClusterQueueState,
        wl: Workload,
        a: Assignment,
        placement: dict[tuple[int, str], int],
        ctx: _Cycle,
        was_head: bool,
    ) -> None:
        now = ctx.now
        wl.state = "Admitted"
        wl.placement = None
        wl.victims = ()
        wl.usage = dict(a.usage)
        wl.planned = dict(placement)
        wl.held = {}
        for (index, node_name), count in placement.items():
            wl.hold(node_name, wl.spec.pod_sets[index].requests, count)
        wl.admitted_at = now
        wl.admit_count += 1
        wl.running = 0
        wl.pods_ready = False
        wl.reason = "Pending"
        wl.message = f"admitted by ClusterQueue {cq.name!r}" + (" (borrowing)" if a.borrowing else "")
        wl.cites = None
        self._cited_role_may_end(wl)
        cq.admitted[wl.key] = wl
        cq.admitted_total += 1
        if was_head:
            # Its claims on lent quota and its reservation end: others may borrow or pass now.
            self._request_retry(cq)
            self._retry_others(cq)
        else:
            head = cq.head()
            if head is not None:
                # The quota it took may leave the head's need beyond the unused nominal quota:
                # that claim ends (see _add_claims), and the queues it kept from borrowing retry.
                node = cq.node
                usage, nominal = node.usage, node.nominal
                if any(
                    amount > 0
                    and fr in nominal
                    and (need := head.totals.get(fr[1], 0))
                    and usage.get(fr, 0) - amount + need <= nominal[fr] < usage.get(fr, 0) + need
                    for fr, amount in a.usage.items()
                ):
                    self._retry_others(cq)
        self._reservations.pop(wl.key, None)
        self._promised.pop(wl.key, None)
        if wl.spec.runtime_limit is not None:
            wl.end_time = now + wl.spec.runtime_limit
            self._running_by_end.add((wl.end_time, wl.seq, wl.key))
        pod_sets = []
        by_ps: dict[int, dict[str, int]] = {}
        for (index, node_name), count in placement.items():
            by_ps.setdefault(index, {})[node_name] = count
        for choice in a.choices:
            ps = choice.pod_set
            pod_sets.append(
                PodSetAssignment(
                    ps.name, ps.count, dict(choice.flavors), dict(ps.requests), by_ps.get(choice.index, {})
                )
            )
        admission = Admission(wl.key, cq.name, tuple(pod_sets), a.borrowing, now, dict(a.usage))
        wl.admission = admission
        ctx.decisions.append(admission)
        self._version += 1
        if self.config.pods_ready_timeout is not None:
            self._add_timer(now + self.config.pods_ready_timeout, "ready", wl.key, wl.admit_count)

    # ------------------------------------------------------------------------------------------
    # Preemption
    # ------------------------------------------------------------------------------------------

    def _may_preempt(self, cq: ClusterQueueState) -> bool:
        p = cq.spec.preemption
        return p.within_cluster_queue != "Never" or p.reclaim_within_cohort != "Never"

    def _find_victims(
        self, cq: ClusterQueueState, wl: Workload, a: Assignment, nodes_checked: bool, ctx: _Cycle
    ) -> list[Workload] | None:
        """A minimal set of victims (see docs/engine.md, Preemption) after whose release ``wl``
        fits with ``a``, or None. Fitting includes the lenders' claims: quota that a claim keeps
        from ``wl`` is not room for it. Without that, a gang preempted gangs of its own queue to
        make room that it then could not borrow, and the victims, requeued, were admitted again
        into it at once (the benchmark's preempting mode at 1,000 pending: a gang evicted 24
        times, one at one instant thousands of times once its preemptor was retried after each
        admission)."""
        policy = cq.spec.preemption
        needed_frs = set(a.usage)
        borrows = any(cq.node.usage.get(fr, 0) + amount > cq.node.nominal.get(fr, 0) for fr, amount in a.usage.items())
        final_share = dominant_share(cq.node, a.usage) if self.config.fair_sharing else 0.0
        budget = self.config.preemption_budget
        keyed: list[tuple[tuple[int, int, float, int, float, int], Workload]] = []
        for other in self._tree_queues(cq):
            own = other is cq
            share = 0.0
            if not own:
                if not any(other.node.borrowing(fr) > 0 for fr in needed_frs):
                    continue
                if self.config.fair_sharing:
                    share = dominant_share(other.node)
                    if share <= final_share:
                        continue
            for victim in other.admitted.values():
                if not nodes_checked and not needed_frs.intersection(victim.usage):
                    continue
                if victim.state == "Evicting":
                    pass
                elif budget is not None and victim.admit_count > budget:
                    continue  # evicted `budget` times already: it may run to completion
                elif own:
                    if not may_preempt_within_queue(policy.within_cluster_queue, wl.priority, wl.creation_time, victim):
                        continue
                elif not may_reclaim(
                    policy.reclaim_within_cohort,
                    policy.borrow_within_cohort,
                    policy.max_priority_threshold,
                    wl.priority,
                    borrows,
                    victim,
                ):
                    continue
                keyed.append(
                    (
                        victim_order(
                            victim.state == "Evicting", not own, share, victim.priority, victim.admitted_at, victim.seq
                        ),
                        victim,
                    )
                )
        if not keyed:
            return None
        keyed.sort(key=lambda item: item[0])
        candidates = [v for _, v in keyed]
        stmt = Statement(self.quota, self.nodes)
        try:
            assert self.quota.log is not None and self.nodes.log is not None
            qlog, nlog = self.quota.log, self.nodes.log

            def mark() -> tuple[int, int]:
                return (len(qlog), len(nlog))

            def undo(m: tuple[int, int]) -> None:
                q, n = m
                self.nodes.undo(n)
                self.quota.undo(q)

            def fits() -> bool:
                return self._fits_unclaimed(cq, wl, a, nodes_checked, ctx)

            victims = minimal_victims(candidates, self._release_in_statement, fits, mark, undo)
        finally:
            stmt.discard()
        return victims

    def _victims_suffice(
        self, cq: ClusterQueueState, wl: Workload, cands: Candidates, nodes_checked: bool, ctx: _Cycle
    ) -> list[Workload] | None:
        """``wl``'s victims that are still stopping, if it fits in some flavor option once they
        have stopped; None otherwise (it chooses victims anew).

        Victims are chosen in the first option that needs preemption, but the reservation that
        lets gangs pass a preemptor fits it in any option once its victims stop. A gang that
        passed it that way then made it choose more victims at its next try, one of them the
        gang just admitted (random world 195 at 40 s: its victims freed room for it in another
        option than the one it preempted in). Room that a lender's claim keeps from it does not
        count (see :meth:`_find_victims`)."""
        stopping = [self.workloads[key] for key in wl.victims if self._stopping(key)]
        if not stopping:
            return None
        with Statement(self.quota, self.nodes):
            for victim in stopping:
                self._release_in_statement(victim)
            if any(self._fits_unclaimed(cq, wl, a, nodes_checked, ctx) for a in cands.assignments):
                return stopping
        return None

    def _fits_unclaimed(
        self, cq: ClusterQueueState, wl: Workload, a: Assignment, nodes_checked: bool, ctx: _Cycle
    ) -> bool:
        """Would ``wl`` fit with ``a`` in the current (what-if) state, borrowing nothing that a
        lender's claim keeps from it (see :meth:`_find_victims`)?"""
        return self._fits_with(cq, wl, a, nodes_checked) and self._reclaimer(cq, wl, a, ctx) is None

    def _release_in_statement(self, victim: Workload) -> None:
        """What-if: free a victim's quota and every node capacity it holds."""
        cq = victim.cq
        assert cq is not None
        for fr, amount in victim.usage.items():
            self.quota.add_usage(cq.node, fr, -amount)
        for node_name, req in victim.held.items():
            node = self.nodes.nodes.get(node_name)
            if node is not None:
                self.nodes.allocate(node, req, -1)

    def _held_back(
        self,
        cq: ClusterQueueState,
        head: Workload,
        a: Assignment,
        scope: list[tuple[Workload, _Reservation]],
        nodes_checked: bool,
        now: float,
    ) -> Workload | None:
        """The older head whose reservation would keep ``head`` from being admitted now with
        ``a``, if any. Then ``head`` cannot be admitted now either and holds no reservation for
        now: otherwise heads queue up behind one starving gang in a chain, each holding back
        everything behind it although none of them can start. ``head`` fits the nodes."""
        if not scope:
            return None
        held = self._placed_and_held_back(cq, head, a, scope, nodes_checked, now)
        return held if isinstance(held, Workload) else None

    def _placed_and_held_back(
        self,
        cq: ClusterQueueState,
        head: Workload,
        a: Assignment,
        scope: list[tuple[Workload, _Reservation]],
        nodes_checked: bool,
        now: float,
    ) -> Workload | bool | None:
        """In a what-if with ``head`` charged and placed: None if its pods do not fit the nodes,
        else the older head whose reservation in ``scope`` holds it back, or False."""
        with Statement(self.quota, self.nodes):
            self._charge(head, cq, a.usage)
            if nodes_checked and self._place(head, a, None)[0]:
                return None
            blocker = self._reservation_blocks(scope, head, now, promise=False)
            return False if blocker is None else blocker

    def _claimed_from(self, cq: ClusterQueueState, a: Assignment) -> bool:
        """Would ``a`` borrow quota that a lender claims back now? A head that fits only that way
        cannot be admitted now, so it holds no reservation for now: gangs behind it that are
        blocked by nothing else may pass (otherwise heads that all wait for one lender hold up
        everything behind them)."""
        node = cq.node
        borrowed = [fr for fr, amount in a.usage.items() if node.usage.get(fr, 0) + amount > node.nominal.get(fr, 0)]
        if not borrowed:
            return False
        # Whether a claim is in force, whatever the amounts (even for a claimant's head, which
        # may borrow what leaves the claims covered): those shrink as a cycle admits gangs, and
        # the existence of a claim changes only with the heads and the lenders' usage.
        for other, head in self._other_heads(cq):
            claimed = self._claimed_frs(other, head)
            if claimed and any(fr in claimed for fr in borrowed):
                return True
        return False

    def _fits_with(self, cq: ClusterQueueState, wl: Workload, a: Assignment, nodes_checked: bool) -> bool:
        """Would ``wl`` fit with assignment ``a`` in the current (what-if) state?"""
        return self._fits_quota(cq, a) and self._fits_nodes(wl, a, nodes_checked)

    def _fits_nodes(self, wl: Workload, a: Assignment, nodes_checked: bool) -> bool:
        """Would the pods of ``wl`` with assignment ``a`` fit the nodes now (always, unchecked)?"""
        if not nodes_checked:
            return True
        with Statement(self.quota, self.nodes):
            why, _, _ = self._place(wl, a, None)
        return not why

    def _fits_quota(self, cq: ClusterQueueState, a: Assignment) -> bool:
        """Does the quota available to ``cq`` now take assignment ``a``?"""
        available = self.quota.available
        node = cq.node
        return all(amount <= available(node, fr) for fr, amount in a.usage.items())

    def _preempt(self, cq: ClusterQueueState, wl: Workload, victims: list[Workload], ctx: _Cycle) -> None:
        new = [v for v in victims if v.state == "Admitted"]
        for victim in new:
            vcq = victim.cq
            assert vcq is not None
            where = "its own ClusterQueue" if vcq is cq else f"ClusterQueue {vcq.name!r} (reclaim in cohort)"
            self._evict(
                victim,
                "Preempted",
                f"preempted by {wl.key} (priority {wl.priority}) in {where}",
                ctx.now,
                ctx.decisions,
                preemptor=wl.key,
            )
        names = ", ".join(v.key for v in victims[:5]) + (" …" if len(victims) > 5 else "")
        keys = tuple(v.key for v in victims)
        changed = keys != wl.victims
        wl.victims = keys
        # Its reservation counts its stopping victims as released: one worked out before (in this
        # capacity version, so still cached) said otherwise, and the retries that skip gangs
        # work it out again later than the engine that tries every gang does.
        self._reservations.pop(wl.key, None)
        self._note_head(cq, wl, ctx)
        self._set_reason(wl, "WaitingForPreemption", f"waits for {len(victims)} preempted gang(s) to stop: {names}")
        if cq.protected_head is wl:
            # Others' admissions, or a new claim, may leave its stopping victims short: then it
            # chooses more, and the gangs it holds back wait for that (see _retry_held_heads).
            self._held_heads[cq.name] = None
        if changed:
            self._retry_others_held(cq, wl)

    def _retry_others_held(self, cq: ClusterQueueState, wl: Workload) -> None:
        """``wl``'s reservation changed in this cycle (it chose victims: those still stopping count
        as released, see :meth:`_reservation`): the other queues of its tree, whose gangs it may
        have held back, are retried in another cycle at once. A starving head without a
        reservation time was taken to hold them until it was admitted or left, and a gang that
        no longer delayed it waited for the next event (random world 117 at 40 s: q0's new gang
        was held back by q1's starving head, which then took a gang stopping after its
        pods-ready timeout as its victim; with that counted as released, q0's gang delays
        nothing, and it waited although it fitted; in random world 137 the victims were new, and
        a starving head of another queue, retried, would take them as its victims too).

        Every other queue, not only those whose gangs' reasons name ``wl``: the retry shortcuts
        leave a skipped gang its last reason, so which gangs name it depends on them, and
        retrying only those decided otherwise than trying every gang (limits world 160 at
        20 s)."""
        others = [other for other in self._tree_queues(cq) if other is not cq]
        for other in others:
            self._request_retry(other)
        if others:
            self._cycle_again += 1

    def _retry_held_heads(self, admitted: list[Workload]) -> None:
        """A cycle admitted ``admitted``: the queues of their trees that may preempt and whose
        protected head fitted but was held back by a starving head without a reservation time,
        was kept out by a lender's claim, or waits for its victims to stop, are retried, in the
        next cycle, at once. The admissions may have taken what the head fitted, made the claim
        give way (the lender's gang can no longer fit), or left its stopping victims short, and
        then it may preempt (more); with its victims counted as released, the gangs that it
        holds back and that do not delay it may pass. Nothing else retried it: its holder holds
        it until it is admitted or leaves (random world 82 at 40 s: an admission took what q0's
        head fitted; retried, it took a stopping gang as its victim, and two gangs of q0 that it
        held back fitted; worlds 277, 143 and 258 with CPU-only gangs: a claim gave way, and
        victims no longer sufficed).

        Only queues that may preempt: a head that may not gains nothing from the retry (without
        runtime limits it holds the gangs behind it either way), and retrying every such queue
        after every admitting cycle took the gangs tried per admission at 100,000 pending (where
        no queue preempts) from about 2 to over 200 once heads starved. The whole queue, not
        the head alone: a gang behind the head may take the queue's preemption attempt (a
        retry of the head alone decided otherwise than trying every gang, in plain random world
        82 at 20 s: the gang behind the head took a stopping gang as its victim)."""
        roots = {wl.cq.node.top for wl in admitted if wl.cq is not None}
        for name in list(self._held_heads):
            cq = self.cluster_queues.get(name)
            if cq is None:
                del self._held_heads[name]
            elif cq.node.top in roots:
                del self._held_heads[name]
                self._request_retry(cq)

    # ------------------------------------------------------------------------------------------
    # Starvation protection: reservations and backfill
    # ------------------------------------------------------------------------------------------

    def _reservation_blocks(
        self, heads: list[tuple[Workload, _Reservation]], wl: Workload, now: float, promise: bool = True
    ) -> Workload | None:
        """A starving head that admitting ``wl`` (already charged in a statement) would delay.

        Users of Volcano and Kueue report large gangs starved by a stream of small ones (volcano#13,
        kueue#8309). The first capacity-blocked gang of a queue therefore holds a reservation: the
        earliest time it fits given the runtime limits of running gangs. A later gang may pass it
        only if it ends before that time or leaves the head still fitting then (EASY backfill).
        Without runtime limits there is no such time; then, once the head has waited longer than
        the starvation timeout, nothing in its scope passes it. Expected ends may be estimates that
        runners overrun: once the time first promised to the head is a starvation timeout past,
        nothing passes it either.

        The promise is the reservation time when a gang was first checked against it here
        (``promise``: a real attempt, not an older head's what-if inside another reservation).
        Not the first time anybody worked the reservation out: when that happens depends on which
        retries the engine skips, and a preemptor's reservation worked out while its victims
        stopped ("now") was kept as its promise through a later wait without any time, so that
        a minute later gangs behind it that the engine trying every gang let pass were held back.
        """
        promised = self._promised
        for head, info in heads:
            if info.never:
                continue
            if info.time is None:
                if now - head.pending_since >= self.config.starvation_timeout:
                    return head
                continue
            first = promised.get(head.key)
            if first is None:
                if promise:
                    promised[head.key] = info.time
            elif now - first >= self.config.starvation_timeout:
                return head  # its reservation slipped that long: expected ends were wrong
            limit = wl.spec.runtime_limit
            if limit is not None and now + limit <= info.time:
                continue
            if not self._fits_at(head, info.time, exclude=wl.key):
                return head
        return None

    def _holding_head(self, cq: ClusterQueueState, now: float) -> Workload | None:
        """The queue's head if it holds back every gang behind it for as long as it waits: it has
        waited past the starvation timeout, could fit an empty cluster, and no workload has a
        runtime limit (so no reservation time lets a gang backfill ahead of it)."""
        head = cq.head()
        if (
            head is None
            or self._limited
            or now - head.pending_since < self.config.starvation_timeout
            or self._never_fits(cq, head)
        ):
            return None
        return head

    def _never_fits(self, cq: ClusterQueueState, wl: Workload) -> bool:
        """Could ``wl`` not fit even an empty cluster (quota potential, node capacity)? From specs
        only: no flavor option of it is reachable (:meth:`_reachable_options`), every option
        counted, not only those a flavor search lists now. It used to look at the options listed
        now, and a ``MayStopSearch`` search lists fewer while usage is high: cached, the answer
        then depended on when it was first asked, and once claims asked it (they end for a gang
        that never fits) the engine decided otherwise than trying every gang did (random world
        320 with CPU-only gangs and runtime limits, 60 s)."""
        return not self._reachable_options(cq, wl)

    def _starving(self, head: Workload, now: float) -> bool:
        """Does ``head`` hold back every later gang in its scope (see :meth:`_reservation_blocks`)?
        True when it has no reservation time (no runtime limits to compute one) and has waited
        longer than the starvation timeout, yet could fit an empty cluster."""
        if now - head.pending_since < self.config.starvation_timeout:
            return False
        info = self._reservation(head, now)
        return info.time is None and not info.never

    def _starving_now(self, head: Workload, ctx: _Cycle) -> bool:
        """Does ``head`` (which :meth:`_holding_head` returned) starve, and will it for the rest of
        this cycle? Then a retry of its queue may stop at it.

        Without a what-if placement when it already failed in this cycle for lack of capacity
        (which only shrinks during a cycle) and has no preempted gangs still stopping: then it has
        no reservation time (no runtime limits anywhere). Not when only a lender's claim keeps it
        from fitting (:attr:`_Reservation.claimed`): the claim ends for reservations as soon as
        the lender's gang is admitted, possibly later in this cycle, and then the head fits and
        gangs behind it that do not delay it may pass; each is then checked at its turn. Stopping
        at such a head for the whole cycle decided otherwise than trying every gang does.
        """
        if self._failed_for_capacity(head, ctx):
            return True
        return self._holds_queue(head, ctx)

    def _failed_for_capacity(self, head: Workload, ctx: _Cycle) -> bool:
        """Did ``head`` fail for lack of capacity in this cycle (not for a claim), with no
        preempted gangs still stopping? Then it cannot fit for the rest of the cycle."""
        return head.key in ctx.capacity_failed and not any(self._stopping(key) for key in head.victims)

    def _holds_queue(self, head: Workload, ctx: _Cycle) -> bool:
        """Does starving ``head`` hold back every later gang for sure, for the rest of the cycle?

        Not when only a lender's claim keeps it from fitting (:attr:`_Reservation.claimed`).
        Nor when it fits but an older head's reservation holds it back
        (:attr:`_Reservation.held_by`) and that older head may still be admitted in this cycle:
        then it fits, and gangs behind it that do not delay it may pass. Stopping at such a head
        for the rest of the cycle decided otherwise than trying every gang (random world 459
        with CPU-only gangs at 40 s). An older head that starves without a reservation time and
        that does not fit now in any option (or failed for lack of capacity in this cycle)
        cannot fit before the cycle ends, so it holds the head back until then: as long as
        every option's holder is such a head, the queue stays held (counting every held head as
        not holding had retries at 100,000 pending try 14 % more gangs)."""
        now = ctx.now
        if not self._starving(head, now):
            return False
        info = self._reservation(head, now)
        if info.claimed:
            return False
        for older in info.held_by:
            if not self._starving(older, now):
                return False
            if self._failed_for_capacity(older, ctx):
                continue
            reservation = self._reservation(older, now)
            if reservation.claimed or reservation.held_by:
                return False  # it may fit later in the cycle: the claim or its own holder gone
        return True

    def _not_now(self, head: Workload, ctx: _Cycle) -> bool:
        """Is ``head`` known to hold nothing back now, without computing its reservation?

        True when no workload has a runtime limit (so its reservation is "now" or has no time),
        it has not starved yet (so no time means it holds nothing back), it has no preempted
        gangs still stopping (those would count as released), and it does not fit now: it
        already failed in this cycle for lack of capacity, which only shrinks during a cycle, or
        no flavor option of it fits the available quota.
        In a busy cluster most admissions pass an older head of their queue; this spares each
        one a what-if placement of that head.
        """
        if self._limited or ctx.now - head.pending_since >= self.config.starvation_timeout:
            return False
        if any(self._stopping(key) for key in head.victims):
            return False
        if head.key in ctx.capacity_failed:
            return True
        # Or it lacks quota now for every flavor option (the first test of _fits_with).
        cq = head.cq
        if cq is None:
            return False
        node = cq.node
        available = self.quota.available
        for usage in self._options(cq, head).usages:
            for fr, amount in usage.items():
                if amount > available(node, fr):
                    break
            else:
                return False  # this option fits the quota: it may fit now
        return True

    def _claim_keeps_out(self, cq: ClusterQueueState, wl: Workload, head: Workload, ctx: _Cycle) -> bool:
        """Would the claim that ``cq`` makes through ``wl`` keep ``head``, another queue's waiting
        head, out in every flavor option? ``wl`` claims if it is ``cq``'s protected head, or
        becomes it by failing now. Then ``head`` cannot be admitted before ``wl`` is, and
        admitting ``wl`` cannot delay it: its reservation does not hold ``wl`` back.

        The problem it solves: a starving head that must borrow a lender's quota held back the
        lender's own waiting gang (which borrows something else, and so is in its scope), while
        the lender's claim kept the starving head out; both waited, on an idle cohort, until
        unrelated capacity came free (random world 457 with CPU-only gangs, 40 s timeout).
        Not where ``head`` may borrow through a claim that gives way (both claim, and ``wl`` is
        kept out itself, see :meth:`_reclaimer_for`)."""
        first = cq.head()
        if first is not None and first is not wl and first.order_key < wl.order_key:
            return False  # wl would not become the protected head: its queue claims through first
        frs = self._claimed_frs(cq, wl) if first is wl else _claims_of(cq, wl)
        if not frs or (first is not wl and self._never_fits(cq, wl)):
            return False
        other = head.cq
        if other is None:
            return False
        totals = head.totals
        if not any(fr[1] in totals for fr in frs):
            return False
        claims = self._tree_claims(cq, ctx)
        if claims.claimants.get(other.name) is head and self._kept_out(claims, cq.name, wl):
            return False
        reachable = self._reachable_options(other, head)
        if not reachable:
            return False
        usage, nominal = other.node.usage, other.node.nominal
        for option in reachable:
            for fr, amount in option.items():
                if amount > 0 and fr in frs and usage.get(fr, 0) + amount > nominal.get(fr, 0):
                    break
            else:
                return False  # this option borrows nothing that wl's queue claims
        return True

    def _reachable_options(self, cq: ClusterQueueState, wl: Workload) -> tuple[Mapping[FlavorResource, int], ...]:
        """The usage of each flavor option of ``wl`` in ``cq`` that it could ever get (nothing
        beyond the queue's quota potential, pods that empty nodes of its flavors could hold):
        none if it never fits. From the specs only, so cached until they change (all of them,
        also those a ``MayStopSearch`` flavor search does not reach now). An option whose pods
        fit no node counts for nothing: a starving head that could only ever run in a flavor a
        lender claims held the lender's head back through an option its pods never fit (random
        world 3 at 40 s), and neither was admitted on an idle cluster."""
        version = (self._config_version, self.nodes.spec_version)
        cached = self._reachable.get(wl.key)
        if cached is None or cached[0] != version or cached[1] != cq.name:
            options = self._options(cq, wl)
            usages = options.usages[:1] if options.single else options.usages
            potential, node = self.quota.potential, cq.node
            nodes_checked = cq.spec.admission_mode == "QuotaAndNodes"
            reachable = () if options.why else tuple(
                usage
                for index, usage in enumerate(usages)
                if all(need <= potential(node, fr) for fr, need in usage.items())
                and (not nodes_checked or self._option_fits_empty_nodes(wl, options.combos[index]))
            )
            cached = self._reachable[wl.key] = (version, cq.name, reachable)
        return cached[2]

    def _heads_in_scope(self, cq: ClusterQueueState, wl: Workload, a: Assignment) -> Iterator[Workload]:
        """The older heads whose reservations ``wl`` must not delay with ``a``: its queue's, and
        when ``a`` borrows, those of the other queues of its tree that need a resource it takes.

        Another queue's head displaced during the cycle (:meth:`_note_head`) still counts until
        the cycle ends, like the claims pinned as it starts. Its queues are retried in another
        cycle at once (see :meth:`schedule`); had the hold ended in the middle of the cycle,
        whether a gang it held back passed in this cycle or in the next depended on whether the
        retry shortcuts had let its queue in at the start (random world 67 with CPU-only gangs
        at 60 s)."""
        if not self._protected:
            return
        head = cq.head()
        if head is not None and head.order_key < wl.order_key:
            yield head
        if not a.borrowing:
            return
        for _, h in self._other_heads(cq):
            if h.order_key < wl.order_key and any(fr[1] in h.totals for fr in a.usage):
                yield h
        if self._displaced:
            root = cq.node.root()
            for name, heads in self._displaced.items():
                other = self.cluster_queues.get(name)
                if other is None or other is cq or other.node.root() is not root:
                    continue
                for h in heads:
                    if (
                        h.state == "Pending"
                        and h.cq is other
                        and h.queued is not None
                        and h is not other.protected_head
                        and h.order_key < wl.order_key
                        and any(fr[1] in h.totals for fr in a.usage)
                    ):
                        yield h

    def _reclaimer(self, cq: ClusterQueueState, wl: Workload, a: Assignment, ctx: _Cycle) -> Workload | None:
        """A waiting gang of another queue that is entitled to the quota ``wl`` would borrow
        with ``a`` (see :meth:`_reclaimer_for`)."""
        node = cq.node
        borrowed = [
            (fr, amount) for fr, amount in a.usage.items() if node.usage.get(fr, 0) + amount > node.nominal.get(fr, 0)
        ]
        return self._reclaimer_for(cq, wl, borrowed, ctx)

    def _reclaimer_for(
        self, cq: ClusterQueueState, wl: Workload, borrowed: list[tuple[FlavorResource, int]], ctx: _Cycle
    ) -> Workload | None:
        """The waiting gang of another queue in ``cq``'s tree whose claim keeps ``wl`` from
        borrowing ``borrowed`` (flavor-resource, the amount ``wl`` would borrow of it).

        A ClusterQueue's nominal quota is its own: while it lends it out and has a gang waiting
        that fits within that nominal quota (its protected head), it claims the quota back, and
        nobody else may borrow it. Without this rule a preempted borrower is re-admitted (it is
        older) the moment it stops, and is preempted again by the same reclaimer, forever.

        Except where a claim gives way: when the claim's own gang is itself kept out by other
        claims (:meth:`_kept_out`), another claimant's waiting gang (``wl`` is the gang its own
        queue claims through) may borrow as long as what stays available to its queue covers
        the needs of the claims it borrows from. Two queues whose waiting heads each fit their
        own quota of one resource and must borrow the other's (one has GPUs and too few CPUs,
        the other CPUs and no GPUs) used to keep each other out for good, on an idle cluster,
        and with them every third queue that borrowed either resource. Only claimants' gangs:
        they are what such a cycle of claims holds; every other borrower still leaves a claimed
        resource alone, which keeps the lender's quota for its head however many borrowers come
        and go. Two claimants whose needs do not fit together would still keep each other out:
        the one behind in queue order gives way to the other (:meth:`_stuck_claimants`).

        Within a cycle a claim, once in force, holds until the cycle ends, even if the claimant
        is admitted meanwhile, and so does the gang its queue claims through: what another
        queue may take then only shrinks during a cycle, so the cycle can tell at its start
        which gangs could fit at all (the claimant's queue retries the others in the next
        cycle, which :meth:`schedule` runs at once).
        """
        if not borrowed:
            return None
        claims = self._tree_claims(cq, ctx)
        if not claims:
            return None
        name = cq.name
        claimant = claims.claimants.get(name) is wl
        for fr, need in borrowed:
            if not _claimed(claims, fr, name):
                continue
            first = next(head for holder, head in claims[fr].items() if holder != name)
            if not claimant:
                return first
            blocker = self._unyielding(claims, fr, name)
            if blocker is not None:
                return blocker
            if self.quota.available(cq.node, fr) - need < _reserved(claims, fr, name, wl):
                return first
        return None

    def _unyielding(self, claims: _Claims, fr: FlavorResource, name: str) -> Workload | None:
        """The first gang through which a ClusterQueue other than ``name`` claims ``fr`` and
        whose claim does not give way (it is not kept out, :meth:`_kept_out`); None if all of
        them give way."""
        for holder, head in claims[fr].items():
            if holder != name and not self._kept_out(claims, holder, head):
                return head
        return None

    def _kept_out(self, claims: _Claims, holder: str, head: Workload) -> bool:
        """Must every flavor option of ``head``, through which ClusterQueue ``holder`` claims,
        borrow (need more than ``holder``'s nominal quota of) something that another queue
        claimed when the cycle started (see :meth:`_reclaimer_for`)?

        Read from the nominal quota, not the usage, and from the claims in force as the cycle
        started, so that it does not change during a cycle: what a gang may take must only
        shrink then (a usage that grew during the cycle made a head kept out, and another
        queue's head could then borrow what it could not at the cycle's start: random world 24
        with CPU-only gangs). A head that borrows only because its own queue's gangs use its
        quota waits for those, not for a claim."""
        other = self.cluster_queues.get(holder)
        if other is None:
            return False
        beyond = self._beyond_nominal(other, head)
        if beyond is None:
            return False
        known = claims.kept_out.get(head.key)
        if known is None:
            late = claims.late
            known = all(
                any(
                    (holders := claims.get(fr)) is not None
                    and any(h != holder and (fr, h) not in late for h in holders)
                    for fr in frs
                )
                for frs in beyond
            )
            claims.kept_out[head.key] = known
        return known

    def _beyond_nominal(
        self, cq: ClusterQueueState, wl: Workload
    ) -> tuple[tuple[FlavorResource, ...], ...] | None:
        """Per flavor option of ``wl`` in ``cq``, the flavor-resources it needs more of than the
        queue's nominal quota; None if some option needs none, or there is no option (cached on
        the gang until the specs change)."""
        cached = wl.beyond
        if cached is None or cached[0] != self._config_version or cached[1] != cq.name:
            result: tuple[tuple[FlavorResource, ...], ...] | None = None
            options = self._options(cq, wl)
            if not options.why and options.usages:
                nominal = cq.node.nominal
                per_option: list[tuple[FlavorResource, ...]] = []
                for option in options.usages:
                    frs = tuple([fr for fr, amount in option.items() if amount > nominal.get(fr, 0)])
                    if not frs:
                        break
                    per_option.append(frs)
                else:
                    result = tuple(per_option)
            cached = wl.beyond = (self._config_version, cq.name, result)
        return cached[2]

    def _tree_claims(self, cq: ClusterQueueState, ctx: _Cycle) -> _Claims:
        """The reclaim claims of ``cq``'s tree in this cycle (computed on first use)."""
        root = cq.node.root()
        claims = ctx.claims.get(root)
        if claims is None:
            claims = ctx.claims[root] = self._claims_now(cq)
        return claims

    def _add_claims(self, claims: _Claims, cq: ClusterQueueState, head: Workload) -> bool:
        """Add the flavor-resources that ``cq`` claims back for its waiting gang ``head``. Returns
        whether the claims, already worked out for the cycle, lacked some of them (``late``) or
        had ``cq`` claim through another gang: they did not count ``head``'s claim when they
        decided which claims give way (:meth:`_kept_out`, :meth:`_stuck_claimants`)."""
        late = False
        frs = self._claimed_frs(cq, head)
        if frs:
            late = claims.claimants.setdefault(cq.name, head) is not head
        for fr in frs:
            holders = claims.get(fr)
            if holders is None:
                holders = claims[fr] = {}
            if cq.name not in holders:
                holders[cq.name] = head
                claims.yielding = None
                if claims.sealed:
                    claims.late.add((fr, cq.name))
                    late = True
        return late

    def _cached_reservation(self, head: Workload, now: float) -> _Reservation | None:
        """The reservation :meth:`_reservation` would return without computing, or None.

        Only one worked out at this very time: a reservation depends on the time as well as on
        the state. Runners past their expected end have no known end any more, and heads start
        to starve as time passes, so one worked out at 418 (a runner ending at 419 let the head
        in at 478) was not the one a computation at 420 gives (no time), and kept at 420 it let
        a gang pass that trying every gang held back (random world 320 with CPU-only gangs and
        runtime limits, 60 s)."""
        cached = self._reservations.get(head.key)
        if cached is not None and cached.version == (self._version, self._heads_version) and cached.at == now:
            return cached
        return None

    def _reservation(self, head: Workload, now: float) -> _Reservation:
        """When ``head`` will fit (cached until capacity or a queue's protected head changes).

        ``time`` is the earliest moment it fits, releasing running gangs in the order of their
        expected end; ``None`` when it does not fit before the runners with runtime limits end
        (runners already past their expected end count as having none).
        ``never`` when it cannot fit even on an empty cluster (:meth:`_never_fits`: from the specs,
        every flavor option counted; it read the options a flavor search lists now, which depends
        on the usage, and so on when the reservation was worked out).
        The gangs it preempted and that are still stopping count as released: it fits "now" once
        they stop, and nobody behind it may take that capacity in the meantime (otherwise a gang
        that passes the preemptor takes the freed quota, the preemptor preempts again, and so on).
        """
        hit = self._cached_reservation(head, now)
        if hit is not None:
            return hit
        truncated = False
        cq = head.cq
        assert cq is not None
        cands = self._assignments(cq, head, messages=False)
        nodes_checked = cq.spec.admission_mode == "QuotaAndNodes"
        if self._never_fits(cq, head):
            result = _Reservation((self._version, self._heads_version), None, True, now)
        else:
            result = _Reservation((self._version, self._heads_version), None, False, now)
            truncated = self._reservation_depth >= _MAX_RESERVATION_CHAIN
            if any(self._stopping(key) for key in head.victims):
                result.time = self._reservation_time(cq, head, cands, truncated, now, result)
            else:
                # Nothing is released first: each assignment's claim, quota and node tests run
                # before the older heads' reservations are worked out, and those only for an
                # assignment that passes them. Each is a what-if of its own, needed only to know
                # whether a head that fits is held back; at 100,000 pending, heads that a lender
                # claims back from or that the nodes cannot take made 0.31 of them per admission
                # when they were all worked out first, and 0.06 remain.
                for a in cands.assignments:
                    if self._claimed_from(cq, a):
                        result.claimed = True
                        continue
                    held = self._fits_and_held_back(cq, head, a, truncated, nodes_checked, now)
                    if held is False:
                        result.time = now
                        break
                    if isinstance(held, Workload):
                        result.held_by = (*result.held_by, held)
                if result.time is None and self._running_by_end:
                    with Statement(self.quota, self.nodes):
                        result.time = self._end_time_fit(cq, head, cands, set(), nodes_checked, now)
        if not truncated:
            self._reservations[head.key] = result
        return result

    def _fits_and_held_back(
        self, cq: ClusterQueueState, head: Workload, a: Assignment, truncated: bool, nodes_checked: bool, now: float
    ) -> Workload | bool | None:
        """None if ``head`` does not fit with ``a`` now (:meth:`_fits_with`), else the older head
        whose reservation holds it back (:meth:`_held_back`; none with a ``truncated`` chain), or
        False.

        When the older heads' reservations are all cached, one what-if placement of ``head``
        answers both; otherwise they are worked out after the fit test and outside any what-if,
        as :meth:`_scope` requires, and the head is placed again. At 100,000 pending, 0.2 heads per
        admission were placed twice, once to learn that they fit and once to hold their place
        while the older heads' reservations were checked.
        """
        if not self._fits_quota(cq, a):
            return None
        scope: list[tuple[Workload, _Reservation]] = []
        for h in [] if truncated else self._heads_in_scope(cq, head, a):
            info = self._cached_reservation(h, now)
            if info is None:
                break
            scope.append((h, info))
        else:
            return self._placed_and_held_back(cq, head, a, scope, nodes_checked, now)
        if not self._fits_nodes(head, a, nodes_checked):
            return None
        blocker = self._held_back(cq, head, a, self._scope(cq, head, a, now), nodes_checked, now)
        return False if blocker is None else blocker

    def _stopping(self, key: str) -> bool:
        """Is ``key`` a preempted gang that is still stopping (it holds its quota and nodes)?"""
        victim = self.workloads.get(key)
        return victim is not None and victim.state == "Evicting" and victim.cq is not None

    def _scope(
        self, cq: ClusterQueueState, head: Workload, a: Assignment, now: float
    ) -> list[tuple[Workload, _Reservation]]:
        """The reservations of the older heads in the scope of ``head`` with ``a``, computed
        outside any what-if (they are cached for the current state). Chains are followed to a
        bounded depth; deeper, a head is taken as not held back, and that answer is not cached
        (so it cannot depend on the order in which reservations were asked for)."""
        self._reservation_depth += 1
        try:
            return [(h, self._reservation(h, now)) for h in self._heads_in_scope(cq, head, a)]
        finally:
            self._reservation_depth -= 1

    def _reservation_time(
        self,
        cq: ClusterQueueState,
        head: Workload,
        cands: Candidates,
        truncated: bool,
        now: float,
        result: _Reservation,
    ) -> float | None:
        """:meth:`_reservation`'s time for a head whose preempted gangs are still stopping: they
        count as released, so every scope is worked out first, before that what-if. Marks
        ``result`` :attr:`~_Reservation.claimed` as :meth:`_reservation` does."""
        nodes_checked = cq.spec.admission_mode == "QuotaAndNodes"
        scopes: list[list[tuple[Workload, _Reservation]]] = [
            [] if truncated else self._scope(cq, head, a, now) for a in cands.assignments
        ]
        with Statement(self.quota, self.nodes):
            released = self._release_victims(head, "")
            # The claim first: it is the cheaper test, and a gang that borrows what a lender
            # claims back often fits otherwise (a what-if placement of it for nothing).
            for a, scope in zip(cands.assignments, scopes, strict=True):
                if self._claimed_from(cq, a):
                    result.claimed = True
                elif self._fits_with(cq, head, a, nodes_checked):
                    blocker = self._held_back(cq, head, a, scope, nodes_checked, now)
                    if blocker is None:
                        return now
                    result.held_by = (*result.held_by, blocker)
            return self._end_time_fit(cq, head, cands, released, nodes_checked, now)

    def _end_time_fit(
        self,
        cq: ClusterQueueState,
        head: Workload,
        cands: Candidates,
        released: set[str],
        nodes_checked: bool,
        now: float,
    ) -> float | None:
        """In an open what-if, release the runners with a runtime limit in the order of their
        expected end until ``head`` fits: the end that lets it, or None. Runners past their
        expected end have no known end (their runtime was an estimate, or the limit is not
        enforced): only the others give a time."""
        for end, _, key in self._running_by_end.iter_from((now, -1, "")):
            runner = self.workloads.get(key)
            if runner is None or runner.cq is None or key in released:
                continue
            self._release_in_statement(runner)
            if self._fits_any(cq, head, cands, nodes_checked):
                time: float = end
                return time
        return None

    def _option_fits_empty_nodes(self, wl: Workload, choices: tuple[PodSetChoice, ...]) -> bool:
        """Could the gang's ``minMember`` pods fit the empty nodes of one flavor option? From the
        specs only (:meth:`_reachable_options` keeps the answer until they change).

        Each pod set's pods must fit the empty nodes node by node, not only in total: a gang of 3
        pods of 4 GPUs on nodes of 6, 3, 2, 4 and 3 GPUs (18 in all) never fits, and as a
        starving head it held its queue on an idle cluster (random world 2 with CPU-only gangs)."""
        pod_sets = self._pod_sets_of(choices)
        nodes = self.nodes
        placeable = 0  # any minMember pods may be the ones placed, but no more of a pod set than its nodes hold
        for _, requests, count, pools in pod_sets:
            pods = nodes.empty_pods(pools, requests)
            if not pods:
                return False  # no empty node takes one of its pods
            placeable += min(count, pods)
        if placeable < wl.min_member:
            return False
        total = nodes.empty_total(p for _, _, _, pools in pod_sets for p in pools)
        needed: dict[str, int] = {}
        pods_left = wl.min_member
        for _, requests, count, _ in pod_sets:
            take = min(count, pods_left)
            pods_left -= take
            for resource, amount in requests.items():
                needed[resource] = needed.get(resource, 0) + amount * take
        return all(total.get(r, 0) >= v for r, v in needed.items())

    def _fits_any(self, cq: ClusterQueueState, wl: Workload, cands: Candidates, nodes_checked: bool) -> bool:
        """Would any of the gang's candidate assignments fit in the current (what-if) state?"""
        return any(self._fits_with(cq, wl, a, nodes_checked) for a in cands.assignments)

    def _release_victims(self, head: Workload, exclude: str) -> set[str]:
        """What-if: release the gangs ``head`` preempted that are still stopping."""
        released: set[str] = set()
        for key in head.victims:
            if key != exclude and self._stopping(key):
                self._release_in_statement(self.workloads[key])
                released.add(key)
        return released

    def _fits_at(self, head: Workload, time: float, exclude: str) -> bool:
        """Would ``head`` fit at ``time`` with the current (what-if) admissions, once every runner
        with a runtime limit ending by then has ended?"""
        cq = head.cq
        assert cq is not None
        cands = self._assignments(cq, head, messages=False)
        with Statement(self.quota, self.nodes):
            released = self._release_victims(head, exclude)
            for _end, _, key in self._running_by_end.iter_until((time, 1 << 62, "\uffff")):
                runner = self.workloads.get(key)
                if runner is None or runner.cq is None or key == exclude or key in released:
                    continue
                self._release_in_statement(runner)
            return self._fits_any(cq, head, cands, cq.spec.admission_mode == "QuotaAndNodes")

    def _blocked_message(self, head: Workload, now: float) -> str:
        info = self._reservations.get(head.key)
        if info is not None and info.time is not None:
            return f"would delay the reservation of {head.key} (starts at t={info.time:.0f}); waits behind it"
        return (
            f"{head.key} has waited longer than the starvation timeout ({self.config.starvation_timeout:.0f}s) "
            "and holds its queue until it fits"
        )

    # ------------------------------------------------------------------------------------------
    # Reasons and queries
    # ------------------------------------------------------------------------------------------

    def _set_reason(self, wl: Workload, reason: PendingReason, message: str, cites: Workload | None = None) -> None:
        """Set a pending gang's reason. ``cites``: the gang the message names as what holds this
        one back; when that gang stops being so, :meth:`_refresh_citations` says what does."""
        wl.reason = reason
        wl.message = message
        if wl.cites is not cites:
            wl.cites = cites
            if cites is not None:
                citers = self._citers.get(cites.key)
                if citers is None:
                    citers = self._citers[cites.key] = {}
                citers[wl.key] = wl
                # Checked when the cycles end: a claim holds until its cycle ends, and a gang
                # tried after the claimant's admission in that cycle still names it.
                self._cite_ended[cites.key] = cites
        if wl.emitted != (reason, message):
            self._updates[wl.key] = None

    def _cited_role_may_end(self, wl: Workload) -> None:
        """``wl`` is admitted, leaves its queue or stops being its queue's protected head: the
        reasons that name it may no longer hold."""
        if wl.key in self._citers:
            self._cite_ended[wl.key] = wl

    def _refresh_citations(self, now: float) -> None:
        """Pending reasons that name a gang as what holds them back (a head's reservation, a
        lender's claim) stay true: when that gang is no longer its queue's protected head, the
        gangs whose reason names it and that were not tried again since get a new reason, worked
        out without trying them (:meth:`_explain`).

        The retry shortcuts skip the gangs that are known to fail, and a skipped gang kept the
        reason of its last try: "cannot borrow: ClusterQueue 'q1' is reclaiming its lent quota
        for ns/w30" long after ns/w30 was admitted, and q1's new head ns/w52 claimed nothing the
        gang needs. Only the gangs whose reason names the gang that changed are looked at: as
        many as were told so, by tries that happened anyway."""
        ended = self._cite_ended
        self._cite_ended = {}
        ctx: _Cycle | None = None
        for key, cited in ended.items():
            cq = cited.cq
            if cq is not None and cq.head() is cited:
                continue  # still its queue's protected head (head() checks that it is queued there)
            citers = self._citers.pop(key, None)
            if not citers:
                continue
            for wl in citers.values():
                cq = wl.cq
                if wl.cites is not cited or wl.state != "Pending" or cq is None or wl.queued is None:
                    continue
                wl.cites = None
                if cq.inactive_reason or cq.stopped:
                    continue  # its reason says so already
                if ctx is None:
                    ctx = _Cycle(now, [])
                self._explain(cq, wl, ctx, cited)

    def _explain(self, cq: ClusterQueueState, wl: Workload, ctx: _Cycle, cited: Workload) -> None:
        """Set the reason a try of ``wl`` would give now, without trying it (no admission, no
        preemption, no retry requested): its queue's holding head, if one is ahead of it; else the
        quota it lacks, or the lender whose claim keeps it from borrowing; else the node check.
        For a gang that fits quota and nodes, only a head's reservation (its queue's, or another
        queue's whose scope it borrows in) can hold it back; if none does, it would fit now, and
        the try at its queue's next retry gives the reason (``cited``: the gang its reason named)."""
        if cq.strict and next(cq.ordered()) != wl.order_key:
            self._set_reason(wl, "BlockedByHead", self._strict_message(cq))
            return
        head = self._holding_head(cq, ctx.now)
        if head is not None and head is not wl and head.order_key < wl.order_key:
            self._set_reason(wl, "BlockedByReservation", self._blocked_message(head, ctx.now), head)
            return
        cands = self._assignments(cq, wl)
        if cands.never_fits:
            self._set_reason(wl, "NeverFits", cands.message)
            return
        quota_ok = [a for a in cands.assignments if a.mode <= BORROW]
        if not quota_ok:
            self._set_reason(wl, "InsufficientQuota", cands.message)
            return
        reclaimer: Workload | None = None
        open_options: list[Assignment] = []
        for a in quota_ok:
            claimer = self._reclaimer(cq, wl, a, ctx) if a.borrowing else None
            if claimer is None:
                open_options.append(a)
            else:
                reclaimer = claimer
        if not open_options and reclaimer is not None:
            self._set_reason(wl, "InsufficientQuota", self._claim_message(reclaimer), reclaimer)
            return
        nodes_checked = cq.spec.admission_mode == "QuotaAndNodes"
        node_failure = ""
        held: Workload | None = None
        for a in open_options:
            in_scope = self._holding_heads(cq, wl, a, ctx)
            heads = [(h, self._reservation(h, ctx.now)) for h in in_scope]
            with Statement(self.quota, self.nodes):
                self._charge(wl, cq, a.usage)
                why = self._place(wl, a, None)[0] if nodes_checked else ""
                blocked_by = None if why else self._reservation_blocks(heads, wl, ctx.now, promise=False)
            if blocked_by is not None:
                held = held or blocked_by
                continue
            if not why:
                # It fits now: the try at its queue's next retry gives the reason.
                self._set_reason(
                    wl, "Pending", f"{cited.key} no longer holds it back; tried again at its ClusterQueue's next retry"
                )
                return
            node_failure = node_failure or why
        if held is not None:
            self._set_reason(wl, "BlockedByReservation", self._blocked_message(held, ctx.now), held)
            return
        self._set_reason(wl, _node_reason(node_failure), node_failure)

    def position(self, key: str) -> tuple[int, int] | None:
        """(1-based position, queue length) of a pending workload in its ClusterQueue."""
        wl = self.workloads.get(key)
        if wl is None or wl.cq is None or wl.queued is None:
            return None
        return wl.cq.position(wl.order_key), wl.cq.pending_count()

    def _shown_message(self, wl: Workload) -> str:
        """A pending gang's message as a person sees it now: behind a StrictFIFO head, with the
        head named (the stored message does not name it, see :meth:`_strict_message`)."""
        cq = wl.cq
        if wl.reason != "BlockedByHead" or cq is None or wl.state != "Pending":
            return wl.message
        first = next(cq.ordered(), None)
        if first is None or first == wl.order_key:
            return wl.message
        head = self.workloads[first[3]]
        return f"{wl.message} (its head: {head.key}, {head.reason})"

    def workload(self, key: str) -> WorkloadView | None:
        """What a person asks about one workload: state, queue, reason, position."""
        wl = self.workloads.get(key)
        if wl is None:
            return None
        pos = self.position(key)
        message = self._shown_message(wl)
        if wl.state == "Pending" and pos is not None:
            message = f"{message}; position {pos[0]} of {pos[1]}"
        cq_name = wl.cq.name if wl.cq is not None else None
        return WorkloadView(
            wl.key, wl.state, cq_name, wl.reason if wl.state == "Pending" else "", message, pos, wl.admission
        )

    def pending_workloads(self, cluster_queue: str, limit: int | None = None, offset: int = 0) -> list[PendingView]:
        """The pending workloads of a ClusterQueue in admission order (Kueue's visibility API)."""
        cq = self.cluster_queues.get(cluster_queue)
        if cq is None:
            return []
        out: list[PendingView] = []
        for i, key in enumerate(cq.ordered()):
            if i < offset:
                continue
            if limit is not None and len(out) >= limit:
                break
            wl = self.workloads[key[3]]
            out.append(
                PendingView(
                    wl.key,
                    i + 1,
                    wl.priority,
                    wl.spec.namespace,
                    wl.spec.queue_name,
                    wl.pending_since,
                    wl.reason,
                    self._shown_message(wl),
                )
            )
        return out

    def cluster_queue(self, name: str) -> ClusterQueueView | None:
        """Status of a ClusterQueue: active or why not, pending / admitted counts, usage."""
        cq = self.cluster_queues.get(name)
        if cq is None:
            return None
        usage = {fr: cq.node.usage.get(fr, 0) for fr in cq.flavor_resources}
        nominal = {fr: cq.node.nominal.get(fr, 0) for fr in cq.flavor_resources}
        borrowed = {fr: cq.node.borrowing(fr) for fr in cq.flavor_resources}
        reason = cq.inactive_reason or (f"stopped ({cq.spec.stop_policy})" if cq.stopped else "")
        return ClusterQueueView(
            name,
            cq.spec.cohort,
            not reason,
            reason,
            len(cq.active),
            len(cq.inadmissible),
            len(cq.admitted),
            usage,
            nominal,
            borrowed,
            dominant_share(cq.node),
            cq.admitted_total,
            cq.evicted_total,
            cq.preempted_total,
        )

    def check_invariants(self) -> None:
        """Assert the engine's invariants (used by tests and the simulator's debug mode)."""
        for cq in self.cluster_queues.values():
            usage: dict[FlavorResource, int] = {}
            for wl in cq.admitted.values():
                assert wl.state in ("Admitted", "Evicting"), wl.key
                assert wl.cq is cq, wl.key
                for fr, amount in wl.usage.items():
                    usage[fr] = usage.get(fr, 0) + amount
            for fr in set(usage) | set(cq.node.usage):
                assert usage.get(fr, 0) == cq.node.usage.get(fr, 0), (cq.name, fr)
        for wl in self.workloads.values():
            if wl.state in ("Admitted", "Evicting"):
                # What it holds: its planned pods and the pods bound while it was admitted.
                held: dict[str, dict[str, int]] = {}
                slots = [(node, wl.spec.pod_sets[index].requests, count) for (index, node), count in wl.planned.items()]
                slots += [(self.pods[key].node, self.pods[key].requests, 1) for key, holds in wl.pods.items() if holds]
                for node, requests, count in slots:
                    amounts = held.setdefault(node, {})
                    for resource, amount in requests.items():
                        amounts[resource] = amounts.get(resource, 0) + amount * count
                assert _nonzero(wl.held) == _nonzero(held), wl.key
            if wl.state == "Pending":
                assert wl.reason, wl.key
                assert not wl.planned and all(not any(h.values()) for h in wl.held.values()), wl.key
                in_queue = wl.cq is not None and wl.queued is not None
                assert in_queue != (wl.key in self._unrouted), wl.key
        if self.quota.log is not None or self.nodes.log is not None:
            raise AssertionError("a statement was left open")


def _node_reason(why: str) -> PendingReason:
    """The reason code of a failed node check's message (see Engine._place)."""
    return "InsufficientMinResources" if why.startswith("minResources") else "InsufficientNodes"


def _nonzero(held: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Amounts per node and resource, without the zero ones (for comparisons)."""
    out = {node: {r: v for r, v in amounts.items() if v} for node, amounts in held.items()}
    return {node: amounts for node, amounts in out.items() if amounts}


__all__ = ["Engine", "SpecError"]
