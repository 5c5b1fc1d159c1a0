"""The engine's shared state, in three parts, and the requests between the rule modules.

One :class:`EngineState` per engine: :class:`World` (what exists: specs, quota, nodes, gangs,
pods), :class:`QueueBook` (what the engine keeps about the waiting gangs between calls: queues to
retry and why they wait, protected heads, timers, claimants, each queue's scratch) and
:class:`CallState` (what lasts one ``schedule`` call). The rule modules
(:mod:`~gangq.core.placement`, :mod:`~gangq.core.claims`, :mod:`~gangq.core.reservations`,
:mod:`~gangq.core.retry`, :mod:`~gangq.core.preemption`, :mod:`~gangq.core.attempt`,
:mod:`~gangq.core.reasons`, :mod:`~gangq.core.cycle`) each hold it; the requests they make of each
other through it are its methods: a retry, always with its :class:`~gangq.core.retries.RetryReason`
(:meth:`EngineState.retry`, :meth:`~EngineState.retry_others`, :meth:`~EngineState.retry_tree`,
:meth:`~EngineState.repeat_cycle`), a reason for a gang, an eviction.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Literal

from gangq.core.chunks import SortedChunks
from gangq.core.config import EngineConfig
from gangq.core.decisions import (
    Decision,
    Eviction,
    EvictionReason,
    PendingReason,
)
from gangq.core.model import (
    CohortSpec,
    FlavorResource,
    FlavorSpec,
    LocalQueueSpec,
    PodInfo,
)
from gangq.core.nodes import NodeIndex
from gangq.core.provisioning import Provisioning
from gangq.core.queue import ClusterQueueState, Workload
from gangq.core.quota import QuotaTree
from gangq.core.retries import REASONS, RetryReason
from gangq.core.scratch import QueueScratch
from gangq.core.walk import StateStamp


class World:
    """What exists: the configuration, the quota tree, nodes, flavors, queues, namespaces, gangs
    and pods, with the version counters that caches of them are keyed by."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.quota = QuotaTree()
        self.nodes = NodeIndex()
        self.provisioning = Provisioning(self.nodes)  # nodes autoscalers may add, as provisional nodes
        self.flavors: dict[str, FlavorSpec] = {}
        self.cluster_queues: dict[str, ClusterQueueState] = {}
        self.cohort_specs: dict[str, CohortSpec] = {}
        self.local_queues: dict[str, LocalQueueSpec] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.workloads: dict[str, Workload] = {}
        self.pods: dict[str, PodInfo] = {}
        self.seq = 0  # submissions so far (a gang's tie-break in its queue)
        self.trees: dict[str, list[ClusterQueueState]] = {}  # root name -> its ClusterQueues
        self.version = 0  # bumped on every capacity change (reservation cache key)
        self.config_version = 0  # bumped on every spec change (flavor-choice cache key)


class QueueBook:
    """What the engine keeps between calls about the waiting gangs: which queues to retry and why
    they wait (nodes, a reservation, a held head), protected heads and the reasons that cite
    them, timers, claimants and each queue's scratch."""

    def __init__(self) -> None:
        self.timers: list[tuple[float, int, str, str, int]] = []  # (time, seq, kind, key, token)
        self.timer_seq = 0
        self.dirty: dict[str, None] = {}  # ClusterQueues with something to try
        self.updates: dict[str, None] = {}  # workloads whose pending reason changed
        # Cited gang (its key) -> the gangs whose pending reason named it (see set_reason), and
        # the cited gangs that may have stopped being what those reasons say (Reasons.refresh_citations).
        self.citers: dict[str, dict[str, Workload]] = {}
        self.cite_ended: dict[str, Workload] = {}
        self.unrouted: dict[str, Workload] = {}  # pending, not in any ClusterQueue queue
        # ClusterQueues with gangs blocked on nodes -> the node pools (ids) that could take their
        # pods (None: any pool); see Capacity.capacity_freed.
        self.waiting_nodes: dict[str, frozenset[int] | None] = {}
        self.freed_seen = 0  # NodeIndex.freed_seq when pools_freed last looked
        self.freed_pools_version = -1  # NodeIndex.version then (pool ids change with it)
        self.waiting_reservation: dict[str, None] = {}  # ... with gangs held back by a reservation
        # Queues that may preempt whose protected head fits but a starving head without a
        # reservation time holds back, a lender's claim keeps out, or that waits for its victims
        # to stop (see Reservations.retry_held_heads).
        self.held_heads: dict[str, None] = {}
        # Workloads with a runtime limit. While there are none, a reservation has no time: a
        # starving head holds back its queue until it is admitted (see Reservations.holding_head).
        self.limited: dict[str, None] = {}
        self.running_by_end = SortedChunks()  # (end time, seq, key) of bounded runners
        self.drain: dict[str, None] = {}  # ClusterQueues / LocalQueues to drain next cycle
        self.protected: dict[str, None] = {}  # ClusterQueues that may have a protected head
        self.heads_version = 0  # bumped when a queue gets a new protected head
        # Preemptors whose last stopping victim has stopped: tried first in the next cycle, in a
        # cycle of their own (see SchedulingCycle.try_preemptors).
        self.ready_preemptors: dict[str, None] = {}
        # Gangs that chose victims (see Reservations.charge_claims); kept until they no longer wait.
        self.claimants: dict[str, None] = {}
        # ClusterQueues whose preemptor found no victims but gangs admitted at this very time:
        # retried at the next ``schedule`` call (see Preemption.admitted_now).
        self.deferred_preemptions: dict[str, None] = {}
        self.scratch: dict[str, QueueScratch] = {}  # ClusterQueue name -> the engine's work on it
        self.retry_counts = [0] * len(REASONS)  # requests per RetryReason (by value)


class CallState:
    """What lasts one ``schedule`` call: the heads displaced in its cycles, and whether its
    changes asked for another cycle."""

    def __init__(self) -> None:
        # ClusterQueue name -> its heads displaced in this cycle, that still hold the other
        # queues' gangs back until the cycle ends (see Reservations.heads_in_scope).
        self.displaced: dict[str, list[Workload]] = {}
        # Bumped by a change within a cycle that asks for another cycle at once (see Engine.schedule).
        self.cycle_again = 0


class EngineState:
    """What the engine knows, in three parts (:class:`World`, :class:`QueueBook`,
    :class:`CallState`), and the requests the rule modules make of each other (a retry with its
    reason, a reason for a gang, an eviction): shared by the rule modules."""

    __slots__ = ("book", "call", "world")

    def __init__(self, config: EngineConfig) -> None:
        self.world = World(config)
        self.book = QueueBook()
        self.call = CallState()

    def stamp(self) -> StateStamp:
        """Capacity, protected heads, configuration and nodes as they are between two changes
        (what-ifs leave it as it is): a gang tried twice with the same stamp fails alike."""
        return (self.world.version, self.book.heads_version, self.world.config_version, self.world.nodes.epoch)

    def retry(self, reason: RetryReason, cq: ClusterQueueState) -> None:
        """Something that could let one of ``cq``'s waiting gangs fit changed: retry them all.

        For ``NODES_FREED`` the retry may look at the gangs that failed the node check only
        (:meth:`IncrementalRetry.node_retry`), as long as nothing else asks for a retry of ``cq``
        before the next cycle; any other reason asks for a full one."""
        self.book.retry_counts[reason] += 1
        self._retry_queue(cq, "nodes" if reason == RetryReason.NODES_FREED else "")

    def retry_tree(self, reason: RetryReason, cq: ClusterQueueState) -> None:
        """Every queue of ``cq``'s cohort tree may admit again: retry each in full."""
        self.book.retry_counts[reason] += 1
        for other in self.tree_queues(cq):
            self._retry_queue(other, "")

    def retry_others(self, reason: RetryReason, cq: ClusterQueueState) -> None:
        """More quota may be available to the other queues of ``cq``'s tree: retry them, as
        retries for quota given back (:meth:`IncrementalRetry.still_short` may find one
        needless). Their gangs held back by a reservation are retried with them."""
        queues = self.tree_queues(cq)
        if len(queues) > 1:  # counted when it retries some queue
            self.book.retry_counts[reason] += 1
        for other in queues:
            if other is not cq:
                self.book.waiting_reservation.pop(other.name, None)
                self._retry_queue(other, "quota")

    def repeat_cycle(self, reason: RetryReason) -> None:
        """Run another scheduling cycle in this ``schedule`` call (see Engine.schedule)."""
        self.book.retry_counts[reason] += 1
        self.call.cycle_again += 1

    def _retry_queue(self, cq: ClusterQueueState, why: Literal["", "quota", "nodes"]) -> None:
        """Mark ``cq`` for a retry in the next cycle. ``why`` names a change that the retry
        shortcuts know to be all there is, as long as nothing else asks for the retry before the
        next cycle: ``"quota"``, quota given back by another queue of ``cq``'s tree or a claim
        on lent quota that ended (see IncrementalRetry.still_short); ``"nodes"``, node capacity
        that came free (see IncrementalRetry.node_retry)."""
        sc = self.book.scratch[cq.name]
        first = not sc.retry
        sc.retry = True
        if not why:
            sc.node_retry = sc.quota_retry = False
        elif why == "quota":
            sc.node_retry = False
            if first:
                sc.quota_retry = True
        elif first:
            sc.node_retry = sc.quota_retry = True
        self.book.dirty[cq.name] = None

    def tree_queues(self, cq: ClusterQueueState) -> list[ClusterQueueState]:
        """The ClusterQueues of ``cq``'s cohort tree (``cq`` alone without a cohort), stable order."""
        root = cq.node.root()
        if root is cq.node:
            return [cq]
        queues = self.world.trees.get(root.name)
        if queues is None:
            queues = [
                c
                for n in self.world.quota.tree_cluster_queues(root)
                if (c := self.world.cluster_queues.get(n.name)) is not None
            ]
            self.world.trees[root.name] = queues
        return queues

    def other_heads(self, cq: ClusterQueueState) -> Iterator[tuple[ClusterQueueState, Workload]]:
        """The protected heads of the other queues in ``cq``'s cohort tree."""
        if not self.book.protected:
            return
        for other in self.tree_queues(cq):
            if other is cq or other.protected_head is None:
                continue
            head = other.head()
            if head is not None:
                yield other, head

    def set_reason(self, wl: Workload, reason: PendingReason, message: str, cites: Workload | None = None) -> None:
        """Set a pending gang's reason. ``cites``: the gang the message names as what holds this
        one back; when that gang stops being so, :meth:`Reasons.refresh_citations` says what does."""
        wl.reason = reason
        wl.message = message
        if wl.cites is not cites:
            wl.cites = cites
            if cites is not None:
                citers = self.book.citers.get(cites.key)
                if citers is None:
                    citers = self.book.citers[cites.key] = {}
                citers[wl.key] = wl
                # Checked when the cycles end: a claim holds until its cycle ends, and a gang
                # tried after the claimant's admission in that cycle still names it.
                self.book.cite_ended[cites.key] = cites
        if wl.emitted != (reason, message):
            self.book.updates[wl.key] = None

    def cited_role_may_end(self, wl: Workload) -> None:
        """``wl`` is admitted, leaves its queue or stops being its queue's protected head: the
        reasons that name it may no longer hold."""
        if wl.key in self.book.citers:
            self.book.cite_ended[wl.key] = wl

    def hold_for_preemptor(self, victim: Workload, preemptor: Workload, now: float) -> None:
        """``victim`` has stopped after ``preemptor`` chose it: it waits for the preemptor (see
        Attempt.holding_preemptor) at most the starvation timeout, when a timer retries its queue."""
        victim.held_for = preemptor.key
        preemptor.holding.append(victim.key)
        self.hold_until(victim, now)

    def hold_until(self, wl: Workload, now: float) -> None:
        """``wl`` was requeued under a hold (its preemptor, its shelter): the holds end after the
        starvation timeout, when a timer retries its queue."""
        wl.shelter_until = now + self.world.config.starvation_timeout
        self.add_timer(wl.shelter_until, "hold", wl.key, wl.admit_count)

    def release_held(self, preemptor: Workload) -> None:
        """``preemptor`` was admitted or left its queue: the gangs that waited for it may go."""
        for key in preemptor.holding:
            victim = self.world.workloads.get(key)
            if victim is not None and victim.held_for == preemptor.key:
                victim.held_for = None
                if victim.cq is not None and victim.state == "Pending":
                    self.retry(RetryReason.PREEMPTOR_GONE, victim.cq)
        preemptor.holding = []

    def ready_timeout(self, wl: Workload) -> float | None:
        """Seconds ``wl`` has to get its pods running once admitted: its own, else the engine's."""
        own = wl.spec.pods_ready_timeout
        return own if own is not None else self.world.config.pods_ready_timeout

    def start_ready_timer(self, wl: Workload, now: float) -> None:
        """``wl`` was admitted: its pods-ready timeout starts (none when it has no timeout)."""
        timeout = self.ready_timeout(wl)
        if timeout is not None:
            self.add_timer(now + timeout, "ready", wl.key, wl.admit_count)

    def add_timer(self, time: float, kind: str, key: str, token: int) -> None:
        self.book.timer_seq += 1
        heapq.heappush(self.book.timers, (time, self.book.timer_seq, kind, key, token))

    def wait_for_nodes(self, cq: ClusterQueueState, wl: Workload, pools: frozenset[int] | None) -> None:
        """``cq``'s gang ``wl`` is blocked on the nodes of ``pools`` (None: of any pool): freed
        capacity there retries ``cq``, and :meth:`IncrementalRetry.node_retry` looks at ``wl`` first."""
        self.book.scratch[cq.name].node_blocked[wl.key] = wl
        waiting = self.book.waiting_nodes
        if cq.name not in waiting:
            waiting[cq.name] = pools
        else:
            known = waiting[cq.name]
            if known is not None and (pools is None or not pools.issubset(known)):
                waiting[cq.name] = None if pools is None else known | pools

    def stopping(self, key: str) -> bool:
        """Is ``key`` a preempted gang that is still stopping (it holds its quota and nodes)?"""
        victim = self.world.workloads.get(key)
        return victim is not None and victim.state == "Evicting" and victim.cq is not None

    def may_preempt(self, cq: ClusterQueueState) -> bool:
        """May ``cq`` preempt (read from its spec when the spec is set)?"""
        return cq.preempts

    def evict(
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
        wl.evicted_by = preemptor
        if reason == "Preempted":
            cq.preempted_total += 1
            wl.preempted += 1
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
        self.world.version += 1
        for other in self.tree_queues(cq):
            if self.may_preempt(other):
                self.retry(RetryReason.GANG_STOPPING, other)

    def pools_freed(self) -> set[int] | None:
        """The node pools (ids) where capacity came free since the last call, None if not known
        (the record was trimmed, or pools were made or dropped since: ids change with them). Every
        capacity increase is recorded, a node that joins or changes included (NodeIndex.freed)."""
        nodes = self.world.nodes
        start = self.book.freed_seen - nodes.freed_base
        freed: set[int] | None = None
        if start >= 0 and self.book.freed_pools_version == nodes.version:
            freed = {node.pool.pool_id for node in nodes.freed[start:] if node.pool is not None}
        self.book.freed_seen = nodes.freed_seq
        self.book.freed_pools_version = nodes.version
        return freed

    def charge(self, wl: Workload, cq: ClusterQueueState, usage: dict[FlavorResource, int]) -> None:
        for fr, amount in usage.items():
            self.world.quota.add_usage(cq.node, fr, amount)

    def forget_cluster_queue(self, cq: ClusterQueueState) -> None:
        self.world.trees.clear()
        self.world.cluster_queues.pop(cq.name, None)
        self.world.quota.remove_cluster_queue(cq.name)
        self.book.dirty.pop(cq.name, None)
        self.book.scratch.pop(cq.name, None)
