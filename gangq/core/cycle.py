"""The scheduling cycle over ClusterQueues.

A cycle visits the ClusterQueues with something to try and interleaves their gangs in one order
(:meth:`SchedulingCycle.head_key`): each queue's next gang is tried
(:meth:`~gangq.core.attempt.Attempt.try_gang`) unless the retry policy knows it fails again
(:mod:`~gangq.core.retry`). After the cycle, failed gangs wait on their queue's inadmissible list.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from gangq.core.attempt import Attempt, Outcome
from gangq.core.claims import Claims
from gangq.core.decisions import (
    Decision,
)
from gangq.core.demand import OrderKey
from gangq.core.fairshare import dominant_share
from gangq.core.queue import ClusterQueueState, Workload
from gangq.core.reasons import Reasons
from gangq.core.reservations import Reservations
from gangq.core.retries import RetryReason
from gangq.core.retry import RetryPolicy
from gangq.core.scratch import CycleScratch
from gangq.core.state import EngineState


def _before(cursor: Iterator[OrderKey], head: OrderKey) -> Iterator[OrderKey]:
    """StrictFIFO without a retry: only workloads queued ahead of the blocked head may be tried."""
    for key in cursor:
        if key >= head:
            return
        yield key


def _walk_ended(name: str, ctx: CycleScratch, live: dict[str, int]) -> None:
    """ClusterQueue ``name`` has no gang left to try in this cycle: it keeps no entry in the
    heap, but stays in ``live`` (with no entry, 0) while its walk skipped gangs, since the walk may
    start again behind a later change (see SchedulingCycle.restart_walks)."""
    walk = ctx.walks.get(name)
    if walk is not None and walk.skipped:
        live[name] = 0
    else:
        live.pop(name, None)


class SchedulingCycle:
    """One scheduling cycle over the ClusterQueues that have something to try."""

    def __init__(
        self,
        state: EngineState,
        retry: RetryPolicy,
        attempt: Attempt,
        reservations: Reservations,
        reasons: Reasons,
        claims: Claims,
    ) -> None:
        self.s = state
        self.claims = claims
        self.retry = retry
        self.attempt = attempt
        self.reservations = reservations
        self.reasons = reasons

    def run(self, now: float, decisions: list[Decision]) -> bool:
        """One scheduling cycle; returns whether it admitted anything."""
        ctx = CycleScratch(now, decisions)
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
        live: dict[str, int] = {}  # ClusterQueue -> the push order of its entry in the heap
        scratch = self.s.book.scratch
        # Preemptors whose victims have all stopped go first, in a cycle of their own; the
        # queues with something to try wait for the next cycle, which runs at once.
        tried = self.try_preemptors(ctx) if self.s.book.ready_preemptors else False
        for cq in () if tried else self.queues_to_visit():
            visited.append(cq)
            if cq.inactive_reason or cq.stopped:
                self.reasons.mark_all(cq)
                continue
            sc = scratch[cq.name]
            retry = sc.retry
            node_retry = sc.node_retry
            quota_retry = sc.quota_retry
            sc.retry = sc.node_retry = sc.quota_retry = False
            if retry:
                retried[cq.name] = cq
            if not cq.active and not cq.inadmissible:
                # Nothing queued: a retry would work out what it could take for no gang. Queues
                # drain unevenly, and a drained one is still retried by every release in its
                # cohort.
                continue
            claims = self.claims.tree_claims(cq, ctx)  # pin the claims in force as the cycle starts
            if quota_retry and not node_retry and self.retry.still_short(cq, claims):
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
                    quota_retries[cq.name] = self.s.world.quota.tree_stamp(cq.node)
                first = cq.inadmissible.first() if not cq.active else min(cq.active.first(), cq.inadmissible.first())
            else:
                cursor = self.retry.cursor(cq, retry, ctx)
                first = next(cursor, None)
            if first is not None:
                order += 1
                heapq.heappush(heap, (self.head_key(cq, first), order, first, cq, cursor))
                live[cq.name] = order
        s = self.s
        while heap:
            head_key, entry, key, cq, cursor = heapq.heappop(heap)
            if live.get(cq.name) != entry:
                continue  # replaced: its walk started again (see below)
            if cursor is None:
                if cq.name in node_retries:
                    state = s.stamp()
                    done = self.retry.node_retry(cq, ctx)
                    if ctx.skipping and state != s.stamp():
                        order = self.restart_walks(cq, key, ctx, heap, live, order)
                    if done:
                        continue
                stamp = quota_retries.get(cq.name)
                if (
                    stamp is not None
                    and stamp != self.s.world.quota.tree_stamp(cq.node)
                    and self.retry.still_short(cq, self.claims.tree_claims(cq, ctx))
                ):
                    # What came free went to queues whose turn came earlier in this cycle (in a
                    # full cohort, usually the queue that gave it back): asked again now, the
                    # screen answers for a retry that would find every gang short.
                    continue
                cursor = self.retry.cursor(cq, True, ctx)
                first = next(cursor, None)
                if first is not None:
                    order += 1
                    heapq.heappush(heap, ((head_key[0], first[0], first[1], first[2]), order, first, cq, cursor))
                    live[cq.name] = order
                continue
            wl = self.s.world.workloads[key[3]]
            before = cq.protected_head
            scratch[cq.name].node_blocked.pop(wl.key, None)  # back if it fails the node check again
            # The state the skipping walks judged in (none: no walk skipped gangs, none to restart).
            judged = s.stamp() if ctx.skipping else None
            if wl.queued == "inadmissible" and self.retry.fails_again(cq, wl, ctx):
                outcome = Outcome.STOP if cq.strict else Outcome.FAILED
            else:
                outcome = self.attempt.try_gang(cq, wl, ctx)
            if cq.protected_head is not before:
                self.s.book.heads_version += 1
                if before is not None and before.cq is cq and before.state == "Pending" and cq.name not in retried:
                    scratch[cq.name].head_displaced = True
                    if not cq.strict and cq.inadmissible:
                        # The gangs the old head held back may pass the new one, which has not
                        # waited: they are looked at now, behind it, as a retry of the queue would.
                        # Otherwise they would wait for whichever retry of the queue came next,
                        # and which one that is depends on the retry policy. Not counted as a retry: the flag stays,
                        # and the next retry is a full one.
                        cursor = self.retry.cursor(cq, True, ctx, key)
            if judged is not None and judged != s.stamp():
                order = self.restart_walks(cq, key, ctx, heap, live, order)
            if outcome == Outcome.ADMITTED:
                ctx.admitted.append(wl)
            else:
                ctx.failed.append(wl)
                if outcome == Outcome.STOP:
                    ctx.stopped[cq] = wl
                    continue
            nxt = next(cursor, None)
            if nxt is not None:
                order += 1
                heapq.heappush(heap, (self.head_key(cq, nxt), order, nxt, cq, cursor))
                live[cq.name] = order
            else:
                _walk_ended(cq.name, ctx, live)
        for cq in retried.values():
            scratch[cq.name].head_displaced = False
        if self.s.call.displaced:
            self.s.call.displaced.clear()
            self.s.book.heads_version += 1
        if ctx.admitted and self.s.book.waiting_reservation:
            for name in self.s.book.waiting_reservation:
                waiting = self.s.world.cluster_queues.get(name)
                if waiting is not None:
                    self.s.retry(RetryReason.RESERVATION_MOVED, waiting)
            self.s.book.waiting_reservation.clear()
        for wl in ctx.admitted:
            if wl.cq is not None and wl.queued is not None:
                wl.cq.discard(wl)
        for wl in ctx.failed:
            if wl.cq is not None and wl.state == "Pending":
                wl.cq.make_inadmissible(wl)
        if ctx.admitted and self.s.book.held_heads:
            self.reservations.retry_held_heads(ctx.admitted)
        for cq in visited:
            if scratch[cq.name].fresh:
                head = ctx.stopped.get(cq)
                if head is None and cq.inadmissible:
                    head = self.s.world.workloads.get(cq.inadmissible.first()[3])
                self.reasons.tell_blocked(cq, head)
        return bool(ctx.admitted)

    def restart_walks(
        self,
        cq: ClusterQueueState,
        key: OrderKey,
        ctx: CycleScratch,
        heap: list[tuple[tuple[float, int, float, int], int, OrderKey, ClusterQueueState, Iterator[OrderKey] | None]],
        live: dict[str, int],
        order: int,
    ) -> int:
        """The state changed at ``cq``'s gang ``key``: the walk of every other queue that skipped
        gangs behind it, judged in the state before, starts again behind it, so that each gang is
        judged in the state of its turn (see CandidateWalk). Returns the last push order."""
        if not ctx.skipping:
            return order
        for name in list(ctx.skipping):
            if name == cq.name or name not in live:
                continue
            other = self.s.world.cluster_queues.get(name)
            if other is None:
                continue
            restarted = self.retry.cursor(other, True, ctx, key)
            nxt = next(restarted, None)
            if nxt is None:
                _walk_ended(name, ctx, live)
            else:
                order += 1
                heapq.heappush(heap, (self.head_key(other, nxt), order, nxt, other, restarted))
                live[name] = order
        return order

    def try_preemptors(self, ctx: CycleScratch) -> bool:
        """Try the preemptors whose victims have all stopped (``EngineState.ready_preemptors``)
        before any other gang, in the cycle order; returns whether any was tried.

        The problem it solves: the capacity a preemptor's victims free is the room it chose them
        for. In the cycle order, a gang of another queue of its cohort tree that comes first
        borrowed part of that room, or the victim itself, requeued, was admitted into it again;
        the preemptor, short, preempted again, and the same gangs were evicted over and over. A
        cycle of their own keeps the claims, reservations and retries of the other queues those
        of a cycle in which the preemptors' admissions are already counted."""
        s = self.s
        ready: list[tuple[tuple[float, int, float, int], Workload, ClusterQueueState]] = []
        for key in s.book.ready_preemptors:
            wl = s.world.workloads.get(key)
            cq = wl.cq if wl is not None else None
            if (
                wl is None
                or cq is None
                or wl.state != "Pending"
                or wl.queued is None
                or not wl.victims
                or cq.inactive_reason
                or cq.stopped
                or any(s.stopping(victim) for victim in wl.victims)
            ):
                continue
            ready.append((self.head_key(cq, wl.order_key), wl, cq))
        s.book.ready_preemptors.clear()
        if not ready:
            return False
        ready.sort(key=lambda item: item[0])
        ctx.preemptors_first = True
        for _, wl, cq in ready:
            if wl.state != "Pending" or wl.queued is None:
                continue
            self.claims.tree_claims(cq, ctx)  # pin the claims in force as the cycle starts
            before = cq.protected_head
            s.book.scratch[cq.name].node_blocked.pop(wl.key, None)
            outcome = self.attempt.try_gang(cq, wl, ctx)
            if cq.protected_head is not before:
                s.book.heads_version += 1
                if before is not None and before.cq is cq and before.state == "Pending":
                    s.book.scratch[cq.name].head_displaced = True
            if outcome == Outcome.ADMITTED:
                ctx.admitted.append(wl)
                cq.discard(wl)
            else:
                ctx.failed.append(wl)
                if outcome == Outcome.STOP:
                    ctx.stopped[cq] = wl
        # The retries asked for meanwhile are served in another cycle, at once.
        s.repeat_cycle(RetryReason.PREEMPTORS_FIRST)
        return True

    def queues_to_visit(self) -> Iterator[ClusterQueueState]:
        dirty = list(self.s.book.dirty)
        self.s.book.dirty.clear()
        for name in dirty:
            cq = self.s.world.cluster_queues.get(name)
            if cq is not None:
                yield cq

    def head_key(self, cq: ClusterQueueState, key: OrderKey) -> tuple[float, int, float, int]:
        """Order of ClusterQueue heads within a cycle. Tie-breaks, in order:

        1. with fair sharing, the queue with the smaller weighted dominant share first;
        2. higher priority first;
        3. earlier queue timestamp first;
        4. earlier submission first (determinism).
        """
        share = dominant_share(cq.node) if self.s.world.config.fair_sharing else 0.0
        return (share, key[0], key[1], key[2])
