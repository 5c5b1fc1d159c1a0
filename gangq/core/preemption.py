"""Preemption of whole gangs: who may be preempted, in which order, and the minimal set.

Policy (per the preemptor's ClusterQueue, Kueue's vocabulary):

- ``withinClusterQueue``: ``LowerPriority`` lets a workload preempt lower-priority workloads of its
  own queue; ``LowerOrNewerEqualPriority`` also equal-priority ones created after it.
- ``reclaimWithinCohort``: a queue reclaims its lent quota from other queues of the cohort that are
  borrowing: ``Any`` workload of theirs, or only ``LowerPriority`` ones.
- ``borrowWithinCohort``: when the preemptor itself must borrow to fit, only workloads of lower
  priority (and at most ``maxPriorityThreshold``) in other queues may be preempted.

:class:`Preemption` chooses a preemptor's victims and evicts them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from gangq.core.claims import Claims
from gangq.core.fairshare import dominant_share
from gangq.core.flavors import (
    Assignment,
    Candidates,
)
from gangq.core.placement import Placement
from gangq.core.queue import ClusterQueueState, Workload
from gangq.core.reservations import Reservations
from gangq.core.scratch import CycleScratch
from gangq.core.state import EngineState
from gangq.core.statement import Statement

T = TypeVar("T")
M = TypeVar("M")


class Candidate(Protocol):
    """What victim selection needs to know about an admitted workload."""

    @property
    def priority(self) -> int: ...

    @property
    def creation_time(self) -> float: ...


def may_preempt_within_queue(policy: str, preemptor_priority: int, preemptor_created: float, victim: Candidate) -> bool:
    """``withinClusterQueue`` policy applied to one admitted workload of the preemptor's queue."""
    if policy == "LowerPriority":
        return victim.priority < preemptor_priority
    if policy == "LowerOrNewerEqualPriority":
        return victim.priority < preemptor_priority or (
            victim.priority == preemptor_priority and victim.creation_time > preemptor_created
        )
    return False


def may_reclaim(
    reclaim: str,
    borrow_policy: str,
    max_priority_threshold: int | None,
    preemptor_priority: int,
    preemptor_borrows: bool,
    victim: Candidate,
) -> bool:
    """Cohort policy applied to one admitted workload of another (borrowing) queue."""
    if reclaim == "Never":
        return False
    if preemptor_borrows:
        if borrow_policy != "LowerPriority" or victim.priority >= preemptor_priority:
            return False
        return max_priority_threshold is None or victim.priority <= max_priority_threshold
    if reclaim == "Any":
        return True
    return victim.priority < preemptor_priority


def victim_order(
    evicting: bool, other_queue: bool, share: float, priority: int, admitted_at: float, seq: int
) -> tuple[int, int, float, int, float, int]:
    """Sort key of preemption candidates, best victim first. Tie-breaks, in order:

    1. gangs already being evicted (their capacity is freed without a new eviction);
    2. gangs of other ClusterQueues before gangs of the preemptor's own queue;
    3. with fair sharing, queues with a larger share first (0 when fair sharing is off);
    4. lower priority first;
    5. most recently admitted first (least work lost);
    6. the later-submitted workload first (determinism).
    """
    return (0 if evicting else 1, 0 if other_queue else 1, -share, priority, -admitted_at, -seq)


def minimal_victims(
    candidates: Sequence[T],
    release: Callable[[T], None],
    restore: Callable[[T], None],
    fits: Callable[[], bool],
    mark: Callable[[], M],
    undo: Callable[[M], None],
    could_fit: Callable[[], bool] | None = None,
) -> list[T] | None:
    """The smallest prefix-greedy set of ``candidates`` whose release makes the gang fit, then
    pruned: each chosen victim is put back (most important first) if the gang still fits without it.

    ``release`` frees a candidate's quota and nodes inside the caller's statement and ``restore``
    charges them back; ``mark`` / ``undo`` bracket trial releases. Returns ``None`` when even
    releasing every candidate does not make the gang fit. Leaves nothing released (the caller's
    statement is restored to entry state).

    ``could_fit``, when given, is a condition that ``fits`` implies and that releasing more can
    only turn true: tested once with every candidate released, it rules a search out without a
    fit test after each release (on a saturated cluster nearly every search fails). The pruning
    puts each victim back into the state where the others stay released, and leaves it there
    when the gang still fits: one change per victim, not the other victims released again.
    """
    start = mark()
    if could_fit is not None:
        for candidate in candidates:
            release(candidate)
        possible = could_fit()
        undo(start)
        if not possible:
            return None
    chosen: list[T] = []
    for candidate in candidates:
        release(candidate)
        chosen.append(candidate)
        if fits():
            break
    else:
        undo(start)
        return None
    # Prune: try keeping each victim, the last-chosen (most protected) first.
    needed = list(chosen)
    for victim in reversed(chosen):
        kept = mark()
        restore(victim)
        if fits():
            needed = [v for v in needed if v is not victim]
        else:
            undo(kept)
    undo(start)
    return needed


class Preemption:
    """A preemptor's victims: the minimal set, whether those still stopping suffice, eviction."""

    def __init__(self, state: EngineState, placement: Placement, claims: Claims, reservations: Reservations) -> None:
        self.s = state
        self.placement = placement
        self.claims = claims
        self.reservations = reservations

    def find_victims(
        self, cq: ClusterQueueState, wl: Workload, a: Assignment, nodes_checked: bool, ctx: CycleScratch
    ) -> list[Workload] | None:
        """A minimal set of victims (see docs/engine.md, Preemption) after whose release ``wl``
        fits with ``a``, or None. Fitting includes the lenders' claims: quota that a claim keeps
        from ``wl`` is not room for it. Without that, a gang preempts gangs of its own queue to
        make room that it then cannot borrow, and the victims, requeued, are admitted again into
        it at once: the same gangs are evicted over and over."""
        policy = cq.spec.preemption
        needed_frs = set(a.usage)
        borrows = any(cq.node.usage.get(fr, 0) + amount > cq.node.nominal.get(fr, 0) for fr, amount in a.usage.items())
        final_share = dominant_share(cq.node, a.usage) if self.s.world.config.fair_sharing else 0.0
        budget = self.s.world.config.preemption_budget
        keyed: list[tuple[tuple[int, int, float, int, float, int], Workload]] = []
        deferred = False  # a gang was left out as admitted at this very time
        for other in self.s.tree_queues(cq):
            own = other is cq
            share = 0.0
            if not own:
                if not any(other.node.borrowing(fr) > 0 for fr in needed_frs):
                    continue
                if self.s.world.config.fair_sharing:
                    share = dominant_share(other.node)
                    if share <= final_share:
                        continue
            for victim in other.admitted.values():
                if not nodes_checked and not needed_frs.intersection(victim.usage):
                    continue
                if self.admitted_now(victim, ctx.now):
                    deferred = True
                    continue
                if victim.state == "Evicting":
                    if self.claimed_by_other(victim, wl):
                        continue
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
        shelter = self.s.world.config.preemption_shelter
        if shelter is not None and ctx.now - wl.pending_since < self.s.world.config.starvation_timeout:
            # A gang preempted `shelter` times is no victim of a preemptor that has not starved
            # (see Attempt.sheltered): that one waits for capacity to come free instead.
            unsheltered = [item for item in keyed if item[1].state == "Evicting" or item[1].preempted < shelter]
            if len(unsheltered) < len(keyed):
                starve_at = wl.pending_since + self.s.world.config.starvation_timeout
                if wl.starve_at != starve_at:
                    # Then it may take them: its queue is retried.
                    wl.starve_at = starve_at
                    self.s.add_timer(starve_at, "starve", wl.key, wl.admit_count)
                keyed = unsheltered
        if not keyed:
            if deferred:
                self.s.book.deferred_preemptions[cq.name] = None
            return None
        if not self.quota_could_suffice(cq, a, [v for _, v in keyed]):
            if deferred:
                self.s.book.deferred_preemptions[cq.name] = None
            return None
        keyed.sort(key=lambda item: item[0])
        candidates = [v for _, v in keyed]
        stmt = Statement(self.s.world.quota, self.s.world.nodes)
        try:
            assert self.s.world.quota.log is not None and self.s.world.nodes.log is not None
            qlog, nlog = self.s.world.quota.log, self.s.world.nodes.log

            def mark() -> tuple[int, int]:
                return (len(qlog), len(nlog))

            def undo(m: tuple[int, int]) -> None:
                q, n = m
                self.s.world.nodes.undo(n)
                self.s.world.quota.undo(q)

            def fits() -> bool:
                return self.fits_unclaimed(cq, wl, a, nodes_checked, ctx)

            def fits_placement() -> bool:
                return self.placement.fits(cq, wl, a, nodes_checked)

            release = self.placement.release_in_statement
            restore = self.placement.restore_in_statement
            # Quota and nodes alone: more released is never less room for them when the pods
            # are of one size (Placement.single_pod_set); pods of several sizes are placed in
            # turn, and more room may change where the first go.
            monotonic = not nodes_checked or self.placement.single_pod_set(a) is not None
            could_fit = fits_placement if monotonic else None

            self.reservations.charge_claims(cq, wl)
            victims = None
            grace = self.s.world.config.preemption_grace
            if grace > 0 or shelter is not None:
                # Gangs evicted before and admitted again within the grace, and gangs preempted
                # `shelter` times (see Attempt.sheltered), go only when no set without them
                # lets ``wl`` in.
                settled = [
                    v
                    for v in candidates
                    if v.state == "Evicting"
                    or (
                        (v.admit_count < 2 or ctx.now - v.admitted_at >= grace)
                        and (shelter is None or v.preempted < shelter)
                    )
                ]
                if len(settled) < len(candidates):
                    victims = minimal_victims(settled, release, restore, fits, mark, undo, could_fit)
            if victims is None:
                victims = minimal_victims(candidates, release, restore, fits, mark, undo, could_fit)
        finally:
            stmt.discard()
        if victims is None and deferred:
            self.s.book.deferred_preemptions[cq.name] = None
        return victims

    def delayed(self, wl: Workload, now: float) -> bool:
        """Is ``wl`` still inside its preemption delay (``EngineConfig.preemption_delay``)? Then it
        waits for capacity to come free on its own, and a timer retries its queue when the delay
        ends, so that it preempts then if it still does not fit."""
        ready_at = wl.pending_since + self.s.world.config.preemption_delay
        if now >= ready_at:
            return False
        if wl.preempt_at != ready_at:
            wl.preempt_at = ready_at
            self.s.add_timer(ready_at, "preempt", wl.key, wl.admit_count)
        return True

    def quota_could_suffice(self, cq: ClusterQueueState, a: Assignment, candidates: list[Workload]) -> bool:
        """Could releasing every candidate give ``cq`` the quota of ``a``? Releasing usage raises
        what a queue may take by at most the amount released, so when the quota available now
        plus every candidate's usage falls short in some flavor-resource, no victim set exists.

        A necessary condition checked without a what-if: on a saturated cluster nearly every
        search fails (the waiting heads outrank no running gang by enough), and trying each one
        by releasing every candidate and checking after each cost more than all else together."""
        available = self.s.world.quota.available
        for fr, amount in a.usage.items():
            short = amount - available(cq.node, fr)
            if short > 0 and sum(v.usage.get(fr, 0) for v in candidates) < short:
                return False
        return True

    def admitted_now(self, victim: Workload, now: float) -> bool:
        """Was ``victim`` admitted at ``now``, the time of this ``schedule`` call? Then it is no
        victim at that time; a preemptor that finds no victims without such gangs is tried again
        at the next call (its ClusterQueue is retried then: ``EngineState.deferred_preemptions``).

        The problem it solves: a gang admitted and preempted in one call has its pods started
        and stopped in the same instant. The shell writes both decisions at once, the write that
        stops the gang races the one that starts it, and pods it starts run on quota the
        preemptor was given. The gangs of a call are tried in order, so a gang tried later (a
        lender's gang that reclaims the quota an earlier gang borrowed, a head retried in the
        call's next cycle) may need the room an earlier one took. Kueue chooses victims in a
        snapshot taken as the cycle starts, which holds no gang of that cycle either."""
        return victim.state == "Admitted" and victim.admitted_at == now

    def claimed_by_other(self, victim: Workload, wl: Workload) -> bool:
        """Is stopping ``victim`` the victim of another gang that still waits for it? Its capacity
        is that gang's: taken as ``wl``'s victim too, both count on it, one finds its victims
        short once they stop, and preempts again."""
        owner = victim.evicted_by
        if owner is None or owner == wl.key:
            return False
        preemptor = self.s.world.workloads.get(owner)
        return preemptor is not None and preemptor.state == "Pending" and victim.key in preemptor.victims

    def victims_suffice(
        self, cq: ClusterQueueState, wl: Workload, cands: Candidates, nodes_checked: bool, ctx: CycleScratch
    ) -> list[Workload] | None:
        """``wl``'s victims that are still stopping, if it fits in some flavor option once they
        have stopped; None otherwise (it chooses victims anew).

        Victims are chosen in the first option that needs preemption, but the reservation that
        lets gangs pass a preemptor fits it in any option once its victims stop. Without this,
        a gang that passed it that way would make it choose more victims at its next try, one of
        them the gang just admitted (its victims freed room for it in another option than the
        one it preempted in). Room that a lender's claim keeps from it does not
        count (see :meth:`find_victims`)."""
        stopping = [
            victim
            for key in wl.victims
            if self.s.stopping(key) and not self.claimed_by_other(victim := self.s.world.workloads[key], wl)
        ]
        if not stopping:
            return None
        with Statement(self.s.world.quota, self.s.world.nodes):
            self.reservations.charge_claims(cq, wl)
            for victim in stopping:
                self.placement.release_in_statement(victim)
            if any(self.fits_unclaimed(cq, wl, a, nodes_checked, ctx) for a in cands.assignments):
                return stopping
        return None

    def fits_unclaimed(
        self, cq: ClusterQueueState, wl: Workload, a: Assignment, nodes_checked: bool, ctx: CycleScratch
    ) -> bool:
        """Would ``wl`` fit with ``a`` in the current (what-if) state, borrowing nothing that a
        lender's claim keeps from it (see :meth:`find_victims`)?"""
        return self.placement.fits(cq, wl, a, nodes_checked) and self.claims.reclaimer(cq, wl, a, ctx) is None

    def preempt(self, cq: ClusterQueueState, wl: Workload, victims: list[Workload], ctx: CycleScratch) -> None:
        new = [v for v in victims if v.state == "Admitted"]
        for victim in new:
            vcq = victim.cq
            assert vcq is not None
            where = "its own ClusterQueue" if vcq is cq else f"ClusterQueue {vcq.name!r} (reclaim in cohort)"
            self.s.evict(
                victim,
                "Preempted",
                f"preempted by {wl.key} (priority {wl.priority}) in {where}",
                ctx.now,
                ctx.decisions,
                preemptor=wl.key,
            )
        names = ", ".join(v.key for v in victims[:5]) + (" …" if len(victims) > 5 else "")
        keys = tuple(v.key for v in victims)
        # Its stopping victims suffice again after an attempt that found them short: its
        # reservation went from no time to "now", as if it had chosen them anew.
        changed = keys != wl.victims or wl.victims_short
        wl.victims = keys
        wl.victims_short = False
        # Its reservation counts its stopping victims as released: one worked out before (in this
        # capacity version, so still cached) said otherwise, and the retries that skip gangs
        # work it out again later than the engine that tries every gang does.
        self.reservations.cache.pop(wl.key, None)
        self.reservations.note_head(cq, wl, ctx)
        self.s.set_reason(wl, "WaitingForPreemption", f"waits for {len(victims)} preempted gang(s) to stop: {names}")
        if cq.protected_head is wl:
            # Others' admissions, or a new claim, may leave its stopping victims short: then it
            # chooses more, and the gangs it holds back wait for that (see Reservations.retry_held_heads).
            self.s.book.held_heads[cq.name] = None
        if changed:
            self.reservations.retry_others_held(cq, wl)
