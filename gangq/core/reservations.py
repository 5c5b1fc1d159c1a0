"""A starving head's reservation, and what it holds back.

The first capacity-blocked gang of a ClusterQueue is its protected head (:meth:`Reservations.note_head`).
It holds a reservation: the earliest time it fits given the runtime limits of running gangs
(:meth:`Reservations.reservation`). A later gang may pass it only if it ends before that time or
leaves the head still fitting then (EASY backfill, :meth:`Reservations.blocks`); without runtime
limits, once the head has waited longer than the starvation timeout, nothing in its scope passes
it (:meth:`Reservations.heads_in_scope`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gangq.core.claims import Claims
from gangq.core.flavors import (
    Assignment,
    Candidates,
)
from gangq.core.model import FlavorResource
from gangq.core.nodes import NodeState
from gangq.core.placement import Placement
from gangq.core.queue import ClusterQueueState, Workload
from gangq.core.retries import RetryReason
from gangq.core.scratch import CycleScratch
from gangq.core.state import EngineState
from gangq.core.statement import Statement

_MAX_RESERVATION_CHAIN = 64  # older heads followed when a head's reservation depends on theirs


class Reservation:
    """When a blocked head will fit: ``time`` (None: unknown), or ``never`` with current capacity."""

    __slots__ = ("at", "claimed", "held_by", "never", "time", "version")

    def __init__(self, version: tuple[int, int], time: float | None, never: bool, at: float) -> None:
        self.version = version  # (capacity version, heads version) it was worked out in
        self.at = at  # the time it was worked out at
        self.time = time
        self.never = never
        # Some flavor option was ruled out only by a lender's claim (Claims.claimed_from): the
        # claim may end within a cycle, when its gang is admitted, and the head fit then.
        self.claimed = False
        # Per flavor option that fits now, the older head whose reservation holds it back: that
        # head may be admitted within a cycle, and this one fit then.
        self.held_by: tuple[Workload, ...] = ()


class NodeShortfall:
    """How many pods of a one-pod-set gang the nodes cannot take, kept up to date as a what-if
    releases runners: each released node counts the pods it takes now less those it took before
    (:meth:`Placement.single_pod_set` says why that count is exact)."""

    __slots__ = ("limit", "pools", "requests", "short")

    def __init__(self, requests: Mapping[str, int], pools: frozenset[int], short: int, limit: int) -> None:
        self.requests = requests
        self.pools = pools
        self.short = short  # pods short; the gang may fit once this is 0 or less
        self.limit = limit  # minMember: no node counts for more

    def pods_on(self, node: NodeState) -> int:
        """The gang's pods that ``node`` could take now (none off its candidate pools)."""
        pool = node.pool
        if pool is None or not node.schedulable or pool.pool_id not in self.pools:
            return 0
        return node.how_many(self.requests, self.limit)


class Reservations:
    """Protected heads, their reservations, and the gangs those hold back."""

    def __init__(self, state: EngineState, placement: Placement, claims: Claims) -> None:
        self.s = state
        self.placement = placement
        self.claims = claims
        self.cache: dict[str, Reservation] = {}
        # Per waiting head: the reservation time it was first held to (see blocks).
        self.promised: dict[str, float] = {}
        self.depth = 0  # nesting of reservation through older heads (see there)

    def forget(self, key: str) -> None:
        """``key`` was admitted or left: its reservation and promise end."""
        self.cache.pop(key, None)
        self.promised.pop(key, None)

    def cached(self, head: Workload, now: float) -> Reservation | None:
        """The reservation :meth:`reservation` would return without computing, or None.

        Only one worked out at this very time: a reservation depends on the time as well as on
        the state. Runners past their expected end have no known end any more, and heads start
        to starve as time passes: one worked out a moment ago (a runner about to end lets the
        head in later) is not the one worked out now (that runner past its end: no time), and
        kept, it would let a gang pass that the head holds back."""
        cached = self.cache.get(head.key)
        version = (self.s.world.version, self.s.book.heads_version)
        if cached is not None and cached.version == version and cached.at == now:
            return cached
        return None

    def reservation(self, head: Workload, now: float) -> Reservation:
        """When ``head`` will fit (cached until capacity or a queue's protected head changes).

        ``time`` is the earliest moment it fits, releasing running gangs in the order of their
        expected end; ``None`` when it does not fit before the runners with runtime limits end
        (runners already past their expected end count as having none).
        ``never`` when it cannot fit even on an empty cluster (:meth:`Placement.never_fits`: from the specs,
        every flavor option counted; it read the options a flavor search lists now, which depends
        on the usage, and so on when the reservation was worked out).
        The gangs it preempted and that are still stopping count as released: it fits "now" once
        they stop, and nobody behind it may take that capacity in the meantime (otherwise a gang
        that passes the preemptor takes the freed quota, the preemptor preempts again, and so on).
        """
        hit = self.cached(head, now)
        if hit is not None:
            return hit
        truncated = False
        cq = head.cq
        assert cq is not None
        cands = self.placement.assignments(cq, head, messages=False)
        nodes_checked = cq.spec.admission_mode == "QuotaAndNodes"
        if self.placement.never_fits(cq, head):
            result = Reservation((self.s.world.version, self.s.book.heads_version), None, True, now)
        else:
            result = Reservation((self.s.world.version, self.s.book.heads_version), None, False, now)
            truncated = self.depth >= _MAX_RESERVATION_CHAIN
            if any(self.s.stopping(key) for key in head.victims):
                result.time = self.reservation_time(cq, head, cands, truncated, now, result)
            else:
                # Nothing is released first: each assignment's claim, quota and node tests run
                # before the older heads' reservations are worked out, and those only for an
                # assignment that passes them. Each is a what-if of its own, needed only to know
                # whether a head that fits is held back, and most heads are ruled out before
                # (a lender claims back what they borrow, or the nodes cannot take them).
                for a in cands.assignments:
                    if self.claims.claimed_from(cq, a):
                        result.claimed = True
                        continue
                    held = self.fits_and_held_back(cq, head, a, truncated, nodes_checked, now)
                    if held is False:
                        result.time = now
                        break
                    if isinstance(held, Workload):
                        result.held_by = (*result.held_by, held)
                if result.time is None and self.s.book.running_by_end:
                    with Statement(self.s.world.quota, self.s.world.nodes):
                        result.time = self.end_time_fit(cq, head, cands, set(), nodes_checked, now)
        if not truncated:
            self.cache[head.key] = result
        return result

    def fits_and_held_back(
        self, cq: ClusterQueueState, head: Workload, a: Assignment, truncated: bool, nodes_checked: bool, now: float
    ) -> Workload | bool | None:
        """None if ``head`` does not fit with ``a`` now (:meth:`Placement.fits`), else the older head
        whose reservation holds it back (:meth:`held_back`; none with a ``truncated`` chain), or
        False.

        When the older heads' reservations are all cached, one what-if placement of ``head``
        answers both; otherwise they are worked out after the fit test and outside any what-if,
        as :meth:`scope` requires, and the head is placed again (once to learn that it fits, once
        to hold its place while the older heads' reservations are checked).
        """
        if not self.placement.fits_quota(cq, a):
            return None
        scope: list[tuple[Workload, Reservation]] = []
        for h in [] if truncated else self.heads_in_scope(cq, head, a):
            info = self.cached(h, now)
            if info is None:
                break
            scope.append((h, info))
        else:
            return self.placed_and_held_back(cq, head, a, scope, nodes_checked, now)
        if not self.placement.fits_nodes(head, a, nodes_checked):
            return None
        blocker = self.held_back(cq, head, a, self.scope(cq, head, a, now), nodes_checked, now)
        return False if blocker is None else blocker

    def scope(
        self, cq: ClusterQueueState, head: Workload, a: Assignment, now: float
    ) -> list[tuple[Workload, Reservation]]:
        """The reservations of the older heads in the scope of ``head`` with ``a``, computed
        outside any what-if (they are cached for the current state). Chains are followed to a
        bounded depth; deeper, a head is taken as not held back, and that answer is not cached
        (so it cannot depend on the order in which reservations were asked for)."""
        self.depth += 1
        try:
            return [(h, self.reservation(h, now)) for h in self.heads_in_scope(cq, head, a)]
        finally:
            self.depth -= 1

    def reservation_time(
        self,
        cq: ClusterQueueState,
        head: Workload,
        cands: Candidates,
        truncated: bool,
        now: float,
        result: Reservation,
    ) -> float | None:
        """:meth:`reservation`'s time for a head whose preempted gangs are still stopping: they
        count as released, so every scope is worked out first, before that what-if. Marks
        ``result`` :attr:`~Reservation.claimed` as :meth:`reservation` does."""
        nodes_checked = cq.spec.admission_mode == "QuotaAndNodes"
        scopes: list[list[tuple[Workload, Reservation]]] = [
            [] if truncated else self.scope(cq, head, a, now) for a in cands.assignments
        ]
        with Statement(self.s.world.quota, self.s.world.nodes):
            released = self.release_victims(head, "")
            # The claim first: it is the cheaper test, and a gang that borrows what a lender
            # claims back often fits otherwise (a what-if placement of it for nothing).
            for a, scope in zip(cands.assignments, scopes, strict=True):
                if self.claims.claimed_from(cq, a):
                    result.claimed = True
                elif self.placement.fits(cq, head, a, nodes_checked):
                    blocker = self.held_back(cq, head, a, scope, nodes_checked, now)
                    if blocker is None:
                        return now
                    result.held_by = (*result.held_by, blocker)
            return self.end_time_fit(cq, head, cands, released, nodes_checked, now)

    def end_time_fit(
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
        enforced): only the others give a time.

        A flavor option is tried only once nothing it is known to lack is missing any more: on a
        saturated cluster a head waits for many runners to end, and trying it after each one
        made a reservation's cost grow with the number of runners.
        - Quota: until the quota released in ``cq``'s tree could cover the option (releasing
          usage raises what a queue may take by at most the amount released, and quota of other
          trees is no room for it).
        - Nodes: once the option failed on nodes, until the nodes released since could take the
          pods it was short (:class:`NodeShortfall`; gangs of one pod set).
        """
        available = self.s.world.quota.available
        short: list[dict[FlavorResource, int]] = []
        for a in cands.assignments:
            missing: dict[FlavorResource, int] = {}
            for fr, need in a.usage.items():
                have = available(cq.node, fr)
                if need > have:
                    missing[fr] = need - have
            short.append(missing)
        bounds: list[NodeShortfall | None] = [None] * len(cands.assignments)
        tracking = False
        nodes = self.s.world.nodes.nodes
        top = cq.node.top
        for end, _, key in self.s.book.running_by_end.iter_from((now, -1, "")):
            runner = self.s.world.workloads.get(key)
            if runner is None or runner.cq is None or key in released:
                continue
            before: list[tuple[NodeState, list[int]]] = []
            if tracking:
                for name in runner.held:
                    node = nodes.get(name)
                    if node is not None:
                        before.append((node, [0 if b is None else b.pods_on(node) for b in bounds]))
            self.placement.release_in_statement(runner)
            for node, pods_before in before:
                for b, pods in zip(bounds, pods_before, strict=True):
                    if b is not None:
                        b.short -= b.pods_on(node) - pods
            if runner.cq.node.top is top:
                for still in short:
                    for fr in [fr for fr in still if fr in runner.usage]:
                        left = still[fr] - runner.usage[fr]
                        if left > 0:
                            still[fr] = left
                        else:
                            del still[fr]
            for i, a in enumerate(cands.assignments):
                bound = bounds[i]
                if short[i] or (bound is not None and bound.short > 0):
                    continue
                fits, pods_short = self.placement.fit_test(cq, head, a, nodes_checked)
                if fits:
                    time: float = end
                    return time
                bounds[i] = None
                one = self.placement.single_pod_set(a) if pods_short > 0 else None
                if one is not None:
                    bounds[i] = NodeShortfall(one[0], one[1], pods_short, head.min_member)
                    tracking = True
        return None

    def release_victims(self, head: Workload, exclude: str) -> set[str]:
        """What-if: release the gangs ``head`` preempted that are still stopping; returns the
        gangs released. When there are any, the other waiting preemptors of its cohort tree are
        put in place of their own stopping victims too (:meth:`charge_claims`).

        The room a preemptor counts on is then the one it chose its victims for
        (:meth:`Preemption.find_victims`) and checks them against
        (:meth:`Preemption.victims_suffice`). Counted without the other preemptors' claims, a
        gang behind it passed it, checked against room another preemptor was promised; the
        preemptor, short once the other was counted, took that gang as a further victim in the
        same ``schedule`` call: its pods were started and stopped at once, on quota promised to
        others."""
        own = [key for key in head.victims if key != exclude and self.s.stopping(key)]
        if not own:
            return set()
        cq = head.cq
        assert cq is not None
        released = self.charge_claims(cq, head, exclude)
        for key in own:
            if key not in released:
                self.placement.release_in_statement(self.s.world.workloads[key])
                released.add(key)
        return released

    def charge_claims(self, cq: ClusterQueueState, wl: Workload, exclude: str = "") -> set[str]:
        """What-if: charge the quota that the other preemptors of ``cq``'s cohort tree (but
        ``exclude``, a gang being admitted) chose their victims for (``Workload.claim``), in place
        of their victims that are still stopping; returns those victims.

        The problem it solves: two preemptors that count on the same free quota (what a cohort
        lends) both choose victims; once the victims stop, the first admitted takes it, the other
        is short, its victims are admitted again into the room it cannot use, and it preempts
        them again, over and over."""
        released: set[str] = set()
        top = cq.node.top
        for key in list(self.s.book.claimants):
            other = self.s.world.workloads.get(key)
            ocq = other.cq if other is not None else None
            if other is None or ocq is None or other.state != "Pending" or not other.victims or not other.claim:
                del self.s.book.claimants[key]
                continue
            if other is wl or key == exclude or ocq.node.top is not top:
                continue
            for vkey in other.victims:
                victim = self.s.world.workloads.get(vkey)
                if (
                    victim is not None
                    and vkey not in released
                    and self.s.stopping(vkey)
                    and victim.evicted_by == other.key
                ):
                    vcq = victim.cq
                    assert vcq is not None
                    for fr, amount in victim.usage.items():
                        self.s.world.quota.add_usage(vcq.node, fr, -amount)
                    released.add(vkey)
            self.s.charge(other, ocq, other.claim)
        return released

    def fits_at(self, head: Workload, time: float, exclude: str, now: float) -> bool:
        """Would ``head`` fit at ``time`` with the current (what-if) admissions, once every runner
        with a runtime limit ending from ``now`` to then has ended?

        Tested as its reservation was worked out (:meth:`reservation`), so that a gang passes
        only if it leaves the head the room its reservation counted on: runners already past
        their expected end have no known end and stay; and at a reservation of ``now``, an
        option that borrows what a lender claims back is no room for it."""
        cq = head.cq
        assert cq is not None
        cands = self.placement.assignments(cq, head, messages=False)
        nodes_checked = cq.spec.admission_mode == "QuotaAndNodes"
        with Statement(self.s.world.quota, self.s.world.nodes):
            released = self.release_victims(head, exclude)
            for end, _, key in self.s.book.running_by_end.iter_from((now, -1, "")):
                if end > time:
                    break
                runner = self.s.world.workloads.get(key)
                if runner is None or runner.cq is None or key == exclude or key in released:
                    continue
                self.placement.release_in_statement(runner)
            if time <= now:
                return any(
                    not self.claims.claimed_from(cq, a) and self.placement.fits(cq, head, a, nodes_checked)
                    for a in cands.assignments
                )
            return self.placement.fits_any(cq, head, cands, nodes_checked)

    def blocks(
        self, heads: list[tuple[Workload, Reservation]], wl: Workload, now: float, promise: bool = True
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
        retries the retry policy skips, and a preemptor's reservation worked out while its
        victims stopped ("now") would be kept as its promise through a later wait without any
        time, holding back gangs behind it that delay nothing.
        """
        promised = self.promised
        for head, info in heads:
            if info.never:
                continue
            if info.time is None:
                if now - head.pending_since >= self.s.world.config.starvation_timeout:
                    return head
                continue
            first = promised.get(head.key)
            if first is None:
                if promise:
                    promised[head.key] = info.time
            elif now - first >= self.s.world.config.starvation_timeout:
                return head  # its reservation slipped that long: expected ends were wrong
            limit = wl.spec.runtime_limit
            if limit is not None and now + limit <= info.time:
                continue
            if not self.fits_at(head, info.time, wl.key, now):
                return head
        return None

    def held_back(
        self,
        cq: ClusterQueueState,
        head: Workload,
        a: Assignment,
        scope: list[tuple[Workload, Reservation]],
        nodes_checked: bool,
        now: float,
    ) -> Workload | None:
        """The older head whose reservation would keep ``head`` from being admitted now with
        ``a``, if any. Then ``head`` cannot be admitted now either and holds no reservation for
        now: otherwise heads queue up behind one starving gang in a chain, each holding back
        everything behind it although none of them can start. ``head`` fits the nodes."""
        if not scope:
            return None
        held = self.placed_and_held_back(cq, head, a, scope, nodes_checked, now)
        return held if isinstance(held, Workload) else None

    def placed_and_held_back(
        self,
        cq: ClusterQueueState,
        head: Workload,
        a: Assignment,
        scope: list[tuple[Workload, Reservation]],
        nodes_checked: bool,
        now: float,
    ) -> Workload | bool | None:
        """In a what-if with ``head`` charged and placed: None if its pods do not fit the nodes,
        else the older head whose reservation in ``scope`` holds it back, or False."""
        with Statement(self.s.world.quota, self.s.world.nodes):
            self.s.charge(head, cq, a.usage)
            if nodes_checked and self.placement.place(head, a, None)[0]:
                return None
            blocker = self.blocks(scope, head, now, promise=False)
            return False if blocker is None else blocker

    def holding_head(self, cq: ClusterQueueState, now: float) -> Workload | None:
        """The queue's head if it holds back every gang behind it for as long as it waits: it has
        waited past the starvation timeout, could fit an empty cluster, and no workload has a
        runtime limit (so no reservation time lets a gang backfill ahead of it)."""
        head = cq.head()
        if (
            head is None
            or self.s.book.limited
            or now - head.pending_since < self.s.world.config.starvation_timeout
            or self.placement.never_fits(cq, head)
        ):
            return None
        return head

    def starving(self, head: Workload, now: float) -> bool:
        """Does ``head`` hold back every later gang in its scope (see :meth:`blocks`)?
        True when it has no reservation time (no runtime limits to compute one) and has waited
        longer than the starvation timeout, yet could fit an empty cluster."""
        if now - head.pending_since < self.s.world.config.starvation_timeout:
            return False
        info = self.reservation(head, now)
        return info.time is None and not info.never

    def starves_all_cycle(self, head: Workload, ctx: CycleScratch) -> bool:
        """Does ``head`` (which :meth:`holding_head` returned) starve, and will it for the rest of
        this cycle? Then a retry of its queue may stop at it.

        Without a what-if placement when it already failed in this cycle for lack of capacity
        (which only shrinks during a cycle) and has no preempted gangs still stopping: then it has
        no reservation time (no runtime limits anywhere). Not when only a lender's claim keeps it
        from fitting (:attr:`Reservation.claimed`): the claim ends for reservations as soon as
        the lender's gang is admitted, possibly later in this cycle, and then the head fits and
        gangs behind it that do not delay it may pass; each is then checked at its turn.
        """
        if self.failed_for_capacity(head, ctx):
            return True
        return self.holds_queue(head, ctx)

    def failed_for_capacity(self, head: Workload, ctx: CycleScratch) -> bool:
        """Did ``head`` fail for lack of capacity in this cycle (not for a claim), with no
        preempted gangs still stopping? Then it cannot fit for the rest of the cycle."""
        return head.key in ctx.capacity_failed and not any(self.s.stopping(key) for key in head.victims)

    def holds_queue(self, head: Workload, ctx: CycleScratch) -> bool:
        """Does starving ``head`` hold back every later gang for sure, for the rest of the cycle?

        Not when only a lender's claim keeps it from fitting (:attr:`Reservation.claimed`).
        Nor when it fits but an older head's reservation holds it back
        (:attr:`Reservation.held_by`) and that older head may still be admitted in this cycle:
        then it fits, and gangs behind it that do not delay it may pass (stopping at such a head
        for the rest of the cycle would hold them back for nothing). An older head that starves without a
        reservation time and
        that does not fit now in any option (or failed for lack of capacity in this cycle)
        cannot fit before the cycle ends, so it holds the head back until then: as long as
        every option's holder is such a head, the queue stays held."""
        now = ctx.now
        if not self.starving(head, now):
            return False
        info = self.reservation(head, now)
        if info.claimed:
            return False
        for older in info.held_by:
            if not self.starving(older, now):
                return False
            if self.failed_for_capacity(older, ctx):
                continue
            reservation = self.reservation(older, now)
            if reservation.claimed or reservation.held_by:
                return False  # it may fit later in the cycle: the claim or its own holder gone
        return True

    def holds_nothing_now(self, head: Workload, ctx: CycleScratch) -> bool:
        """Is ``head`` known to hold nothing back now, without computing its reservation?

        True when no workload has a runtime limit (so its reservation is "now" or has no time),
        it has not starved yet (so no time means it holds nothing back), it has no preempted
        gangs still stopping (those would count as released), and it does not fit now: it
        already failed in this cycle for lack of capacity, which only shrinks during a cycle, or
        no flavor option of it fits the available quota.
        In a busy cluster most admissions pass an older head of their queue; this spares each
        one a what-if placement of that head.
        """
        if self.s.book.limited or ctx.now - head.pending_since >= self.s.world.config.starvation_timeout:
            return False
        if any(self.s.stopping(key) for key in head.victims):
            return False
        if head.key in ctx.capacity_failed:
            return True
        # Or it lacks quota now for every flavor option (the first test of Placement.fits).
        cq = head.cq
        if cq is None:
            return False
        node = cq.node
        available = self.s.world.quota.available
        for usage in self.placement.options(cq, head).usages:
            for fr, amount in usage.items():
                if amount > available(node, fr):
                    break
            else:
                return False  # this option fits the quota: it may fit now
        return True

    def heads_in_scope(self, cq: ClusterQueueState, wl: Workload, a: Assignment) -> Iterator[Workload]:
        """The older heads whose reservations ``wl`` must not delay with ``a``: its queue's, and
        when ``a`` borrows, those of the other queues of its tree that need a resource it takes.

        Another queue's head displaced during the cycle (:meth:`note_head`) still counts until
        the cycle ends, like the claims pinned as it starts. Its queues are retried in another
        cycle at once (see :meth:`Engine.schedule`); were the hold to end in the middle of the
        cycle, whether a gang it held back passed in this cycle or in the next would depend on
        whether the retry policy let its queue in at the start."""
        if not self.s.book.protected:
            return
        head = cq.head()
        if head is not None and head.order_key < wl.order_key:
            yield head
        if not a.borrowing:
            return
        for _, h in self.s.other_heads(cq):
            if h.order_key < wl.order_key and any(fr[1] in h.totals for fr in a.usage):
                yield h
        if self.s.call.displaced:
            root = cq.node.root()
            for name, heads in self.s.call.displaced.items():
                other = self.s.world.cluster_queues.get(name)
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

    def holding_heads(self, cq: ClusterQueueState, wl: Workload, a: Assignment, ctx: CycleScratch) -> list[Workload]:
        """The heads in ``wl``'s scope with ``a`` whose reservation may hold it back now: not those
        known to hold nothing now (:meth:`holds_nothing_now`), nor another queue's head that the claim
        ``wl``'s queue makes through it keeps out (:meth:`Claims.claim_keeps_out`)."""
        return [
            h
            for h in self.heads_in_scope(cq, wl, a)
            if not self.holds_nothing_now(h, ctx) and (h.cq is cq or not self.claims.claim_keeps_out(cq, wl, h, ctx))
        ]

    def blocked_message(self, head: Workload, now: float) -> str:
        info = self.cache.get(head.key)
        if info is not None and info.time is not None:
            return f"would delay the reservation of {head.key} (starts at t={info.time:.0f}); waits behind it"
        return (
            f"{head.key} has waited longer than the starvation timeout ({self.s.world.config.starvation_timeout:.0f}s) "
            "and holds its queue until it fits"
        )

    def retry_others_held(self, cq: ClusterQueueState, wl: Workload) -> None:
        """``wl``'s reservation changed in this cycle (it chose victims, or its stopping victims
        suffice again after an attempt that found them short: those still stopping count as
        released, see :meth:`reservation`): the other queues of its tree are retried in another
        cycle at once (``VICTIMS_CHOSEN``), and its own queue when that queue's protected head is
        another preemptor whose victims are stopping (``PREEMPTOR_HEAD_SHORT``); why, in
        docs/engine.md, "Retry reasons"."""
        others = [other for other in self.s.tree_queues(cq) if other is not cq]
        for other in others:
            self.s.retry(RetryReason.VICTIMS_CHOSEN, other)
        head = cq.head()
        own = head is not None and head is not wl and any(self.s.stopping(key) for key in head.victims)
        if own:
            self.s.retry(RetryReason.PREEMPTOR_HEAD_SHORT, cq)
        if others or own:
            self.s.repeat_cycle(RetryReason.VICTIMS_CHOSEN if others else RetryReason.PREEMPTOR_HEAD_SHORT)

    def retry_held_heads(self, admitted: list[Workload]) -> None:
        """A cycle admitted ``admitted``: the queues of their trees that may preempt and whose
        protected head fitted but was held back by a starving head without a reservation time,
        was kept out by a lender's claim, or waits for its victims to stop, are retried, in the
        next cycle, at once. The admissions may have taken what the head fitted, made the claim
        give way (the lender's gang can no longer fit), or left its stopping victims short, and
        then it may preempt (more); with its victims counted as released, the gangs that it
        holds back and that do not delay it may pass. Nothing else retries it: its holder holds
        it until it is admitted or leaves.

        Only queues that may preempt: a head that may not gains nothing from the retry (without
        runtime limits it holds the gangs behind it either way), and retrying every such queue
        after every admitting cycle would retry deep queues over and over once heads starve. The
        whole queue, not the head alone: a gang behind the head may take the queue's preemption
        attempt (a stopping gang as its victim).

        Also those of other trees whose head could use the node pools where an admission placed
        pods (:meth:`may_use_pools`): node capacity is shared across trees, and an admission in
        another tree may take the nodes the head fitted (quota and claims are per tree)."""
        roots = {wl.cq.node.top for wl in admitted if wl.cq is not None}
        pools: set[int] | None = None  # where the admissions placed pods, worked out when needed
        for name in list(self.s.book.held_heads):
            cq = self.s.world.cluster_queues.get(name)
            if cq is None:
                del self.s.book.held_heads[name]
                continue
            if cq.node.top not in roots:
                if pools is None:
                    nodes = self.s.world.nodes.nodes
                    pools = {
                        node.pool.pool_id
                        for wl in admitted
                        for _, node_name in wl.planned
                        if (node := nodes.get(node_name)) is not None and node.pool is not None
                    }
                if not self.may_use_pools(cq, pools):
                    continue
            del self.s.book.held_heads[name]
            self.s.retry(RetryReason.HELD_HEAD_MAY_PASS, cq)

    def may_use_pools(self, cq: ClusterQueueState, pools: set[int]) -> bool:
        """Could the pods of ``cq``'s protected head go to a node of ``pools`` (ids), in some
        flavor option? Never in a queue that does not check nodes."""
        if not pools or cq.spec.admission_mode != "QuotaAndNodes":
            return False
        head = cq.head()
        if head is None:
            return False
        cands = self.placement.assignments(cq, head, messages=False)
        return any(
            pool.pool_id in pools
            for a in cands.assignments
            for _, _, _, candidates in self.placement.pod_sets_of(a.choices)
            for pool in candidates
        )

    def note_head(self, cq: ClusterQueueState, wl: Workload, ctx: CycleScratch, claimed: bool = False) -> None:
        """Keep ``protected_head``: the first capacity-blocked gang in queue order.

        A new head's reclaim claims join the cycle's at once (the cycle compares heads before and
        after each gang it tries and bumps ``heads_version`` when they differ). ``claimed``: a
        lender's claim kept ``wl`` out in some flavor option.
        """
        head = cq.head()
        if head is None or wl.order_key < head.order_key:
            if head is not None:
                self.s.cited_role_may_end(head)
            cq.protected_head = wl
            self.s.book.protected[cq.name] = None
            claims = ctx.claims.get(cq.node.root())
            if claims is not None and self.claims.add_claims(claims, cq, wl) and claimed:
                self.s.retry(RetryReason.OWN_CLAIM_UNCOUNTED, cq)
                self.s.repeat_cycle(RetryReason.OWN_CLAIM_UNCOUNTED)
            if head is not None:
                self.s.repeat_cycle(RetryReason.HEAD_DISPLACED)
                self.s.call.displaced.setdefault(cq.name, []).append(head)
                self.s.retry_others(RetryReason.HEAD_DISPLACED, cq)
