"""Retry policies: which waiting gangs a retry of a ClusterQueue tries.

A gang that does not fit waits on its queue's inadmissible list and is tried again only when
something that could let it fit changes. :class:`FullRetry` then tries every waiting gang in full.
:class:`IncrementalRetry` (the engine's default) skips the gangs that are known to fail and the
retries that are known to try nothing, and decides exactly as :class:`FullRetry` does
(``tests/engine/test_properties.py`` compares the two on random event sequences):

- the demand index bounds a retry to the gangs that fit what the queue may take
  (:meth:`IncrementalRetry.cursor`, :meth:`IncrementalRetry.candidate_bounds`);
- a gang that is known to fail again is not tried (:meth:`IncrementalRetry.fails_again`);
- a retry asked for only by freed nodes looks at the gangs that failed the node check
  (:meth:`IncrementalRetry.node_retry`), and only if capacity came free in a pool they can use
  (:meth:`IncrementalRetry.skips_node_wait`);
- a retry asked for only by quota given back in the cohort is skipped while the queue's screen
  shows every gang still short (:meth:`IncrementalRetry.still_short`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from mypy_extensions import mypyc_attr

from gangq.core.claims import Amounts, Claims, claimed
from gangq.core.demand import OrderKey, merge_keys
from gangq.core.flavors import (
    FIT,
    NO_FIT,
    PREEMPT,
)
from gangq.core.model import (
    FlavorResource,
)
from gangq.core.placement import Placement
from gangq.core.queue import ClusterQueueState, Workload
from gangq.core.reservations import Reservations
from gangq.core.retries import RetryReason
from gangq.core.scratch import AvailableQuota, CycleScratch, QueueScratch, QuotaScreen, ScreenEntry, TreeClaims
from gangq.core.state import EngineState
from gangq.core.walk import CandidateWalk


def _after(cursor: Iterator[OrderKey], key: OrderKey) -> Iterator[OrderKey]:
    """The keys of ``cursor`` after ``key``."""
    for k in cursor:
        if k > key:
            yield k


# Reasons of a gang that failed for capacity or for a reservation, not for its spec.
_HELD_BACK = ("InsufficientQuota", "InsufficientNodes", "InsufficientMinResources", "BlockedByReservation")


# Tests extend this class from Python (counting what the engine tries, or with every retry shortcut
# off); mypyc allows that only when asked.
@mypyc_attr(allow_interpreted_subclasses=True)
class RetryPolicy:
    """Which waiting gangs a retry tries. The engine binds it to its state (:meth:`bind`), so a
    policy object serves one engine."""

    def bind(self, state: EngineState, placement: Placement, claims: Claims, reservations: Reservations) -> None:
        self.s = state
        self.placement = placement
        self.claims = claims
        self.reservations = reservations

    def fails_again(self, cq: ClusterQueueState, wl: Workload, ctx: CycleScratch) -> bool:
        """Is retried gang ``wl`` known to fail (leaving the state a failed try would)?"""
        return False

    def after_release(self, cq: ClusterQueueState) -> None:
        """``cq`` released quota: ask for the retries that may admit with it."""
        self.s.retry_tree(RetryReason.QUOTA_RELEASED, cq)

    def cursor(
        self, cq: ClusterQueueState, retry: bool, ctx: CycleScratch, start: OrderKey | None = None
    ) -> Iterator[OrderKey]:
        """BestEffortFIFO: the gangs of ``cq`` to try this cycle, in queue order (after ``start``,
        if given: the gangs up to it were looked at in this cycle)."""
        cursor = cq.cursor(include_inadmissible=retry)
        return cursor if start is None else _after(cursor, start)

    def node_retry(self, cq: ClusterQueueState, ctx: CycleScratch) -> bool:
        """A retry that only freed nodes asked for: True if it is done (nothing more to try)."""
        return False

    def still_short(self, cq: ClusterQueueState, claims: TreeClaims) -> bool:
        """A retry that only quota given back asked for: True if it would try no gang."""
        return False

    def skips_node_wait(self, cq: ClusterQueueState, freed: set[int] | None, pools: frozenset[int] | None) -> bool:
        """May ``cq``, waiting on the nodes of ``pools``, skip the retry that capacity freed in
        ``freed`` (pool ids; None: not known) would ask for?"""
        return False


@mypyc_attr(allow_interpreted_subclasses=True)
class FullRetry(RetryPolicy):
    """Every retry tries every waiting gang in full, and freed capacity retries every queue
    waiting on nodes, whatever pool it came free in: the reference the shortcuts are tested
    against."""


@mypyc_attr(allow_interpreted_subclasses=True)
class IncrementalRetry(RetryPolicy):
    """The retry shortcuts: skip only what is known to fail (see the module docstring)."""

    def skips_node_wait(self, cq: ClusterQueueState, freed: set[int] | None, pools: frozenset[int] | None) -> bool:
        """Capacity that came free only in pools where ``cq``'s node-blocked gangs cannot go
        retries it only if the retry would do more than look at the gangs that fit what it may
        take (:meth:`walks_candidates`): in a cluster of a CPU and a GPU pool whose GPU nodes are
        full, a finish of a CPU gang otherwise retries every queue whose GPU gangs wait for GPU
        nodes, each retry finding its gangs still short. A skipped queue stays waiting; its gangs'
        node marks count the nodes freed since they were made, so the next retry misses nothing."""
        return freed is not None and pools is not None and pools.isdisjoint(freed) and self.walks_candidates(cq)

    def fails_again(self, cq: ClusterQueueState, wl: Workload, ctx: CycleScratch) -> bool:
        """Whether a retried gang is known to fail, without building assignments and messages or
        placing pods; if so, leave the state a failed :meth:`Attempt.try_gang` would (protected head, waiting
        for nodes). Exact: it follows :meth:`Attempt.try_gang`'s decisions step by step, and answers False
        (try it) wherever it cannot tell. Not applied before the queue's preemption attempt of
        this cycle, since preemption is how a gang that does not fit gets in.
        """
        if self.s.may_preempt(cq) and cq.name not in ctx.preempted_in:
            return False
        if wl.reason in _HELD_BACK and not self.s.may_preempt(cq):
            head = cq.head()
            if head is not None and head.order_key < wl.order_key and self.reservations.holds_queue(head, ctx):
                # Every path of try_gang ends before admission: at quota, at nodes, or at this head's
                # reservation. Retry when capacity comes free anywhere (a superset of the others),
                # unless the head holds the queue until it is admitted (which retries the queue).
                # Not in a queue that may preempt: each of its retries is also a preemption
                # attempt, taken by its first gang that may preempt, so the retries it gets must
                # be those try_gang asks for: it also looks at the other flavor options, may find
                # one that fails the node check and ask for a retry when nodes come free; skipped
                # here, that retry would not happen, and a new gang would take the preemption
                # attempt that the head takes.
                # Not behind a head that only a lender's claim keeps out (``claimed``): it holds
                # nothing for sure, and the gang's try asks for what the gang waits for (freed
                # nodes, if it fails the node check), which no retry request here could match.
                if self.s.book.limited:
                    self.s.book.waiting_reservation[cq.name] = None
                if wl.reason != "BlockedByReservation" or wl.cites is not head:
                    self.s.set_reason(
                        wl, "BlockedByReservation", self.reservations.blocked_message(head, ctx.now), head
                    )
                return True
        if wl.reason not in ("InsufficientQuota", "InsufficientNodes"):
            return False
        options = self.placement.options(cq, wl)
        if options.why:
            return False
        quota = self.s.world.quota
        heads = self.s.book.heads_version
        if ctx.available_quota != quota.version or ctx.available_heads != heads:
            ctx.available.clear()
            ctx.available_quota = quota.version
            ctx.available_heads = heads
        available = ctx.available.get(cq.name)
        if available is None:
            available = ctx.available[cq.name] = AvailableQuota(quota, cq.node)
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
                if need <= available.get(fr):
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
                    claimant = self.claims.tree_claims(cq, ctx).claimants.get(cq.name) is wl
                if self.claims.cached_reclaimer(available, cq, wl, claimant, borrowed, ctx) is None:
                    unblocked.append(index)
                else:
                    reclaimed = True
        if not listed:
            return False  # never fits: try_gang says so
        if unblocked:
            # try_gang would check nodes for these; skip only if every one of them must fail.
            mark = wl.node_mark
            if (
                cq.spec.admission_mode != "QuotaAndNodes"
                or mark is None
                or mark.config != (self.s.world.config_version, cq.name)
                or not mark.options.issuperset(unblocked)
                or not self.placement.mark_holds(wl, mark)
            ):
                return False
            self.s.wait_for_nodes(cq, wl, mark.pools if mark.pools_version == self.s.world.nodes.version else None)
        # Otherwise nothing fits the quota, or only quota a lender reclaims: try_gang fails on quota.
        if cq.protected_head is wl:
            cq.protected_head = None
        self.reservations.note_head(cq, wl, ctx, reclaimed)
        if not reclaimed:
            ctx.capacity_failed.add(wl.key)
        return True

    def after_release(self, cq: ClusterQueueState) -> None:
        """Quota came free in ``cq``: retry ``cq`` and the other queues of its tree (for those,
        nothing changed but the quota given back, see :meth:`still_short`)."""
        self.s.retry(RetryReason.QUOTA_RELEASED, cq)
        self.s.retry_others(RetryReason.QUOTA_RELEASED, cq)

    def cursor(
        self, cq: ClusterQueueState, retry: bool, ctx: CycleScratch, start: OrderKey | None = None
    ) -> Iterator[OrderKey]:
        """BestEffortFIFO: the gangs worth trying this cycle, in queue order (after ``start``, if
        given: the gangs up to it were looked at in this cycle).

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
        cycle (the first gang with a preemption target preempts). Among the candidates, gangs of
        a shape that one of them showed to fail in the state of the moment are skipped
        (:class:`CandidateWalk`).
        """
        if not retry:
            return iter(cq.active) if start is None else _after(iter(cq.active), start)
        bounds = self.candidate_bounds(cq, ctx)
        walk = CandidateWalk(cq, bounds, not self.s.world.config.fair_sharing, ctx.skipping)
        ctx.walks[cq.name] = walk
        ctx.skipping.pop(cq.name, None)
        claims = self.claims.tree_claims(cq, ctx)
        if walk.empty() and bounds and not cq.multi_pod_set:
            # No waiting gang fits: the screen keeps why (a gang not tried yet may fit, and then
            # there is none, as a retry's candidates count them too).
            short: list[tuple[int, str, int]] = []
            if not cq.candidates(bounds, short) and short:
                self.note_classes_short(cq, short)
        claimant = self.claims.claimant_head(cq, claims)
        if claimant is not None and not walk.holds(claimant):
            # Among the keys, and kept there when the bounds shrink during the walk (a candidate
            # anyway, it may fit the bounds of a flavor it cannot have, and must not be dropped
            # from the retry when that flavor's quota goes to gangs ahead of it).
            if self.claims.claimant_may_fit(cq, claimant, claims):
                walk.keep(claimant.order_key)
            else:
                claimant = None
        elif claimant is not None:
            walk.keep(claimant.order_key)
        # Gangs whose try depends on more than their shape, runtime limit and place: the gang
        # through which the queue claims lent quota back, and preemptors whose victims stop (a
        # preemptor's own claim is not charged when it is tried, see Reservations.charge_claims).
        special = claims.claimants.get(cq.name)
        if special is not None and special.cq is cq and special.queued == "inadmissible":
            walk.protect(special)
        for key in self.s.book.claimants:
            preemptor = self.s.world.workloads.get(key)
            if preemptor is not None and preemptor.cq is cq and preemptor.queued == "inadmissible":
                walk.protect(preemptor)
        holding: Workload | None = None
        if not walk.empty() and not (self.s.may_preempt(cq) and cq.name not in ctx.preempted_in):
            head = self.reservations.holding_head(cq, ctx.now)
            if (
                head is not None
                and walk.any_after(head.order_key)
                and (not cq.active or cq.active.first() > head.order_key)
            ):
                if walk.holds(head) and head.key not in ctx.capacity_failed:
                    # The walk tries the head before any gang behind it: whether it starves is
                    # known for free once it has failed (see keys), instead of by a what-if
                    # placement of it now (mostly of heads that fit and are then placed again for
                    # real).
                    holding = head
                elif self.reservations.starves_all_cycle(head, ctx):
                    # It does not fit now, and cannot later in this cycle (what the queue may take
                    # only shrinks): no gang behind it can be admitted in this cycle. Unless a new
                    # gang ahead of it fails in this cycle and so becomes the protected head in its
                    # place (then the walk decides at each step, see IncrementalRetry.keys).
                    walk.stop = head.order_key
        retried = self.keys(cq, walk, ctx, holding, start)
        if not cq.active:
            return retried
        return merge_keys(iter(cq.active) if start is None else _after(iter(cq.active), start), retried)

    def node_retry(self, cq: ClusterQueueState, ctx: CycleScratch) -> bool:
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
        would (:meth:`fails_again`); if one may fit now, the full retry runs.
        """
        if not self.walks_candidates(cq) or self.reservations.holding_head(cq, ctx.now) is not None:
            return False
        blocked = self.s.book.scratch[cq.name].node_blocked
        gangs = [wl for wl in blocked.values() if wl.cq is cq and wl.queued == "inadmissible"]
        blocked.clear()  # each is back if it fails the node check again
        gangs.sort(key=lambda wl: wl.order_key)
        for i, wl in enumerate(gangs):
            before = cq.protected_head
            if not self.fails_again(cq, wl, ctx):
                for rest in gangs[i:]:  # the full retry looks at them
                    blocked[rest.key] = rest
                return False
            if cq.protected_head is not before:
                self.s.book.heads_version += 1
            ctx.failed.append(wl)
        return True

    def still_short(self, cq: ClusterQueueState, claims: TreeClaims) -> bool:
        """Would a retry of ``cq`` try no gang at all? Asked at the start of a cycle (and again at
        the queue's turn if its tree's usage changed in between), when all that
        asked for the retry since the last one is quota given back by other queues of its tree,
        claims on lent quota that ended, and freed nodes. In a cohort of ten queues every
        finished gang retries all ten, and in a full cluster most of them cannot use what it gave
        back: each retry worked out what the queue could take, from per-queue state that is cold
        in a large cluster, to find that no gang fits. Here a few counters answer.

        Exact. The last screen of ``cq`` (:meth:`note_short`, :meth:`note_classes_short`) found
        that every queued gang needs more of some resource than the queue could get of it, and
        kept, per flavor-resource that ruled gangs out, the least they need of it and what the
        queue could take then without lenders' claims. That grows by at most what its tree gave
        back since (the root's ``released``; admissions only shrink it), and by at most the drop
        in usage, since, of the cohorts above the queue (a cohort's share of the
        quota rises by no more than its usage falls; in a full cohort another queue soon takes
        what one gives back, and counted alone, what was given back soon let every gang in
        again). A lender's claim in force now caps it at the queue's unused nominal quota, as
        :meth:`Claims.amount` does; one that ended since is no reason to retry in full (a head's
        admission ends its claims and retries the other queues of its cohort, which mostly find
        every gang still short). That stands as long as no
        gang joined the queue (leaving ones only raise the least demand), the queue's own usage did
        not drop (its own releases discard the screen), and the configuration is the same. If
        even those bounds leave every gang short, the retry's candidates would be empty, and it
        would try nothing if it looks at candidates only (:meth:`walks_candidates`).
        """
        screen = self.s.book.scratch[cq.name].screen
        if screen is None:
            return False
        root = screen.root
        config_version = self.s.world.config_version
        if root is not cq.node.top or screen.adds != cq.demand_adds or screen.config_version != config_version:
            return False
        least = screen.least
        split = screen.split
        released = root.released
        name = cq.name
        total = 0
        usage, nominal = cq.node.usage, cq.node.nominal
        capped = False  # a claim capped what the queue could take (not for its claimant's head)
        for entry in screen.entries:
            fr = entry.fr
            gain = released.get(fr, 0) - entry.mark
            if gain > 0:
                # No more than the cohorts above the queue stopped using: what was given back and
                # then taken by other queues' admissions does not count.
                drop = 0
                for cohort, then in entry.used:
                    now = cohort.usage.get(fr, 0)
                    if now < then:
                        drop += then - now
                gain = min(gain, drop)
            most = entry.amount + gain
            if claimed(claims.frs, fr, name):
                unused = max(0, nominal.get(fr, 0) - usage.get(fr, 0))
                if most > unused:  # as Claims.amount does
                    most = unused
                    capped = True
            if split:
                total += most
            elif most >= entry.need:
                return False
        if split and total >= least:
            return False
        if capped:
            head = self.claims.claimant_head(cq, claims)
            if head is not None and self.claims.claimant_may_fit(cq, head, claims):
                return False
        return self.walks_candidates(cq)

    def walks_candidates(self, cq: ClusterQueueState) -> bool:
        """Would a full retry of ``cq`` look only at the gangs that fit what it may take? Yes for a
        BestEffortFIFO queue with no new gangs that may not preempt (its preemption attempt walks
        every gang) and whose protected head is its first waiting gang (the gangs ahead of the
        head are retried whatever their demand): see :meth:`cursor` and
        :meth:`keys`. The condition of both retry shortcuts, :meth:`node_retry` and
        :meth:`still_short`, which also requires that no new gang took the place of the queue's
        protected head since its last retry: gangs that the old head held back may pass now, and
        only a full retry looks at them."""
        if cq.active or cq.strict or self.s.book.scratch[cq.name].head_displaced or self.s.may_preempt(cq):
            return False
        head = cq.head()
        return head is not None and not head.order_key > cq.inadmissible.first()

    def candidate_bounds(self, cq: ClusterQueueState, ctx: CycleScratch) -> list[dict[str, int]]:
        """Upper bounds (resource → amount) of what one queued gang could take this cycle.

        Per flavor-resource: the available quota, and where another queue's waiting gang claims
        it back (:meth:`Claims.reclaimer_for`), only the queue's unused nominal quota. A gang with one
        pod set in a ClusterQueue with one resource group charges all its resources to one
        flavor: one bound per flavor. Otherwise a resource may be charged to any flavor of its
        group, or split over them by several pod sets: one bound, the largest (or, with several
        pod sets, the total) amount per resource.
        """
        claims = self.claims.tree_claims(cq, ctx)
        memo = Amounts(self.claims, cq, claims)
        split = cq.multi_pod_set > 0
        if not self.may_fit_any(cq, self.s.book.scratch[cq.name], memo):
            self.note_short(cq, memo, claims)
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
    def may_fit_any(cq: ClusterQueueState, sc: QueueScratch, amounts: Amounts) -> bool:
        """False if some resource that every queued gang of ``cq`` requests is available (per
        ``amounts``) in smaller amounts than the least of them needs: then none can fit."""
        split = cq.multi_pod_set > 0
        demand = cq.least_common_demand()
        first = sc.screen_first
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
                    sc.screen_first = resource
                    return False
        return True

    def note_short(self, cq: ClusterQueueState, amounts: Amounts, claims: TreeClaims) -> None:
        """Keep what :meth:`may_fit_any` just showed (``screen_first`` is the resource that
        no queued gang of ``cq`` can get enough of), for :meth:`still_short`."""
        resource = self.s.book.scratch[cq.name].screen_first
        least = 0
        for r, amount in cq.least_common_demand():
            if r == resource:
                least = amount
        name = cq.name
        quota = self.s.world.quota
        node = cq.node
        # What the queue could take without lenders' claims: a claim may end before the next
        # check (and one may start), so the check applies the claims in force then.
        self.keep_screen(
            cq,
            least,
            [
                (fr, least, quota.available(node, fr) if claimed(claims.frs, fr, name) else amounts.get(fr))
                for fr in cq.frs_by_resource.get(resource, ())
            ],
        )

    def note_classes_short(self, cq: ClusterQueueState, short: list[tuple[int, str, int]]) -> None:
        """Keep, for :meth:`still_short`, why no queued gang of ``cq`` fits any of the bounds of
        :meth:`candidate_bounds`, when no one resource rules them all out (:meth:`may_fit_any`
        let them through): ``short`` holds, per group of gangs that request the same resources
        and per bound, a resource that every gang of the group needs more of than the bound
        allows, with the least of them (:meth:`ClusterQueueState.candidates`). The screen then
        holds while, for each of those flavor-resources, what the queue could take stays below
        the least that some group needs of it.

        In a queue of CPU-only and GPU gangs, the CPU gangs may be short of CPU while GPU gangs
        that need less CPU are short of GPUs: the least CPU that every gang requests fits, yet no
        gang does; without a screen, each release in the cohort would retry such a queue for
        nothing.
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
        quota = self.s.world.quota
        node = cq.node
        self.keep_screen(cq, 0, [(fr, least, quota.available(node, fr)) for fr, least in leasts.items()])

    def keep_screen(self, cq: ClusterQueueState, least: int, entries: list[tuple[FlavorResource, int, int]]) -> None:
        """Store ``cq``'s screen from ``entries``, (flavor-resource, least demand, what the queue
        could take of it without lenders' claims), with the marks :meth:`still_short` measures
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
        self.s.book.scratch[cq.name].screen = QuotaScreen(
            root,
            least,
            cq.multi_pod_set > 0,
            cq.demand_adds,
            self.s.world.config_version,
            tuple(
                [
                    ScreenEntry(fr, need, raw, released.get(fr, 0), tuple([(a, a.usage.get(fr, 0)) for a in ancestors]))
                    for fr, need, raw in entries
                ]
            ),
        )

    def keys(
        self,
        cq: ClusterQueueState,
        walk: CandidateWalk,
        ctx: CycleScratch,
        holding: Workload | None = None,
        start: OrderKey | None = None,
    ) -> Iterator[OrderKey]:
        """The waiting gangs to retry, lazily, in queue order: each next one is the next waiting
        gang while the queue has no protected head at or ahead of it, or has not made its
        preemption attempt of this cycle; otherwise the next candidate of ``walk`` (see
        :meth:`cursor`). Decided at each step, since trying a gang can admit the head
        or make a new one. ``holding``: a head past the starvation timeout, among the candidates,
        whose reservation was left open; when the walk passes it, it ends there if the queue's
        protected head then starves (it was not admitted, or a gang ahead of it failed). ``start``:
        the walk begins after it.

        A candidate behind the protected head that fails tells the walk that the later gangs of
        its shape fail too while the state stays as it is (:meth:`CandidateWalk.failed`)."""
        inadmissible = cq.inadmissible  # not changed before the end of the cycle
        may_preempt = self.s.may_preempt(cq)
        s = self.s
        quota = s.world.quota
        version = quota.tree_stamp(cq.node)  # the candidates fit what the queue could take then
        workloads = s.world.workloads
        key: OrderKey | None = None
        if inadmissible:
            key = inadmissible.first() if start is None else inadmissible.after(start)
        while key is not None:
            behind: Workload | None = None  # the protected head the gang is behind, in the candidate walk
            if not (may_preempt and cq.name not in ctx.preempted_in):
                head = cq.head()
                if head is not None and head.order_key <= key:
                    stamp = quota.tree_stamp(cq.node)
                    if stamp != version:
                        # Admissions since took quota: keep only candidates that still fit.
                        version = stamp
                        walk.refilter(self.candidate_bounds(cq, ctx))
                    key = walk.first_from(key, s.stamp())
                    if key is None:
                        return
                    if head.order_key < key:
                        behind = head
            if holding is not None and key > holding.order_key:
                holder = self.reservations.holding_head(cq, ctx.now)
                if holder is not None and self.reservations.starves_all_cycle(holder, ctx):
                    return
                holding = None
            if behind is None:
                yield key
            else:
                before = s.stamp()
                yield key
                wl = workloads.get(key[3])
                if (
                    wl is not None
                    and wl.state == "Pending"
                    and wl.cq is cq
                    and wl.queued == "inadmissible"
                    and cq.head() is behind
                    and before == s.stamp()
                    # A gang under a hold (its preemptor, its shelter: Attempt.try_gang) failed
                    # for what only it has done: the others of its shape may fit.
                    and ctx.now >= wl.shelter_until
                ):
                    walk.failed(wl, before, ctx.now, self.passing_end(wl, ctx.now))
            key = inadmissible.after(key)

    def passing_end(self, wl: Workload, now: float) -> float | None:
        """``wl`` failed, held back by the reservation of the head its reason names: the time by
        which a gang of its shape must end to pass that head (``-inf``: none passes; None: not
        known). A reservation without a time holds back every gang (the head starves); one with a
        time lets a gang pass only if it ends by then (``now + limit <= time``, as
        Reservations.blocks compares) or if the head still fits then with the gang running, which
        depends on the shape alone, and for ``wl``'s shape it did not."""
        head = wl.cites
        if wl.reason != "BlockedByReservation" or head is None:
            return None
        info = self.reservations.cached(head, now)
        if info is None or info.never:
            return None
        if info.time is None:
            return -math.inf
        time: float = info.time
        return time
