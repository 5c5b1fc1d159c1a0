"""Lenders' claims on lent quota.

A ClusterQueue's nominal quota is its own: while it lends it out and has a gang waiting that fits
within that nominal quota (its protected head), it claims the quota back, and nobody else may
borrow it (:meth:`Claims.reclaimer_for`). Claims are worked out per cohort tree when a cycle first
needs them (:class:`~gangq.core.scratch.TreeClaims`) and hold until the cycle ends.
"""

from __future__ import annotations

from gangq.core.flavors import (
    Assignment,
)
from gangq.core.model import (
    FlavorResource,
)
from gangq.core.placement import Placement
from gangq.core.queue import ClusterQueueState, Workload
from gangq.core.scratch import AvailableQuota, CycleScratch, TreeClaims
from gangq.core.state import EngineState


def claimed(claims: dict[FlavorResource, dict[str, Workload]], fr: FlavorResource, name: str) -> bool:
    """Does a ClusterQueue other than ``name`` claim ``fr`` back (see Claims.reclaimer_for)?"""
    holders = claims.get(fr)
    if not holders:
        return False
    return len(holders) > 1 or name not in holders


def reserved(claims: TreeClaims, fr: FlavorResource, name: str, wl: Workload) -> int:
    """How much of ``fr`` ClusterQueues other than ``name`` claim back from ``wl``, the gang
    through which ``name`` claims: their waiting gangs' needs, except those of gangs behind
    ``wl`` in queue order that could not fit when the claims were made (``claims.stuck``, see
    Claims.reclaimer_for)."""
    holders = claims.frs.get(fr)
    if not holders:
        return 0
    total = 0
    stuck = claims.stuck
    for holder, head in holders.items():
        if holder != name and not (stuck and head.key in stuck and head.order_key > wl.order_key):
            total += head.totals.get(fr[1], 0)
    return total


def claim_allows(available: int, unused: int, reserved: int) -> int:
    """The most of a flavor-resource that a claimant's waiting gang may take when ``available`` is
    free to it, ``unused`` of that is its queue's own unused nominal quota, and other queues'
    waiting gangs claim ``reserved`` back: all of its own quota, or what leaves their needs
    covered (see Claims.reclaimer_for)."""
    return max(min(available, max(0, unused)), available - reserved)


def claims_of(cq: ClusterQueueState, wl: Workload) -> tuple[FlavorResource, ...]:
    """The flavor-resources ``cq`` would claim back for ``wl`` as its waiting gang: those it
    needs and that fit within the queue's unused nominal quota (uncached: Claims.claimed_frs)."""
    node = cq.node
    usage = node.usage
    totals = wl.totals
    return tuple(
        fr
        for fr, nominal in node.nominal.items()
        if (need := totals.get(fr[1], 0)) and usage.get(fr, 0) + need <= nominal
    )


class Amounts:
    """What one queued gang of a ClusterQueue could take of each flavor-resource now, under the
    reclaim ``claims`` in force (:meth:`Claims.amount`), computed on first use."""

    __slots__ = ("claims", "cq", "owner", "values")

    def __init__(self, owner: Claims, cq: ClusterQueueState, claims: TreeClaims) -> None:
        self.owner = owner
        self.cq = cq
        self.claims = claims
        self.values: dict[FlavorResource, int] = {}

    def get(self, fr: FlavorResource) -> int:
        value = self.values.get(fr)
        if value is None:
            value = self.values[fr] = self.owner.amount(self.cq, fr, self.claims)
        return value


class Claims:
    """The lenders' claims of every cohort tree, and what they keep from borrowers."""

    def __init__(self, state: EngineState, placement: Placement) -> None:
        self.s = state
        self.placement = placement

    def cached_reclaimer(
        self,
        available: AvailableQuota,
        cq: ClusterQueueState,
        wl: Workload,
        claimant: bool,
        borrowed: list[tuple[FlavorResource, int]],
        ctx: CycleScratch,
    ) -> Workload | None:
        """:meth:`reclaimer_for`, cached in ``available`` for the cycle: a claimant's waiting gang
        is judged by the amounts it borrows, any other gang by what it borrows only."""
        key: tuple[object, ...] = (wl.key, *borrowed) if claimant else tuple([fr for fr, _ in borrowed])
        cache = available.reclaimers
        if key not in cache:
            cache[key] = self.reclaimer_for(cq, wl, borrowed, ctx)
        return cache[key]

    def claimed_frs(self, cq: ClusterQueueState, head: Workload) -> tuple[FlavorResource, ...]:
        """The flavor-resources ``cq`` claims back for its waiting gang ``head``: those it needs
        and that fit within the queue's unused nominal quota (cached per queue until its head or
        its usage changes). None for a gang that could not fit even an empty cluster: it is never
        admitted, so its claim would never end (a head whose pods fit no node would keep other
        queues' gangs from borrowing for good, on an idle cluster)."""
        node = cq.node
        sc = self.s.book.scratch[cq.name]
        cached_head, version, frs = sc.claims_cache
        if cached_head is not head or version != node.usage_version:
            frs = claims_of(cq, head)
            sc.claims_cache = (head, node.usage_version, frs)
        if frs and self.placement.never_fits(cq, head):
            return ()
        return frs

    def amount(
        self,
        cq: ClusterQueueState,
        fr: FlavorResource,
        claims: TreeClaims,
    ) -> int:
        """How much of ``fr`` a gang of ``cq`` could take: the available quota, or only the unused
        nominal quota where another queue's waiting gang claims the rest back (``claims``). Not
        the gang through which ``cq`` claims itself (:meth:`claimant_head`)."""
        node = cq.node
        amount = self.s.world.quota.available(node, fr)
        if amount > 0 and claimed(claims.frs, fr, cq.name):
            amount = min(amount, max(0, node.nominal.get(fr, 0) - node.usage.get(fr, 0)))
        return amount

    def claimant_head(self, cq: ClusterQueueState, claims: TreeClaims) -> Workload | None:
        """The waiting gang through which ``cq`` claims lent quota back in this cycle (its
        protected head when the claim was made), if it waits to be retried and some other
        queue's claim gives way (its gang is kept out, :meth:`kept_out`): the one gang of ``cq``
        that may borrow what other queues claim (see :meth:`reclaimer_for`), and so the one
        that the retry's bounds and screen (:mod:`~gangq.core.retry`), worked out for the others
        under the claims, do not cover. Each asks :meth:`claimant_may_fit` for it instead (bounds
        that covered it would let every gang of a claimant's queue through, and most queues with
        a waiting head claim something)."""
        head = claims.claimants.get(cq.name)
        if head is None or head.queued != "inadmissible":
            return None
        yielding = self.yielding(claims)
        if not yielding or (len(yielding) == 1 and cq.name in yielding):
            return None  # no claim gives way: the queue's bounds and screen cover its head
        return head

    def yielding(self, claims: TreeClaims) -> set[str]:
        """The ClusterQueues whose claim gives way somewhere: they claim through a gang that is
        kept out (:meth:`kept_out`), per holder of a claim the gang it claims through there (a
        queue whose head changed during the cycle claims new flavor-resources through the new
        one). Worked out again after a claim is added."""
        yielding = claims.yielding
        if yielding is None:
            yielding = claims.yielding = {
                holder
                for holders in claims.frs.values()
                for holder, gang in holders.items()
                if self.kept_out(claims, holder, gang)
            }
        return yielding

    def claimant_may_fit(self, cq: ClusterQueueState, head: Workload, claims: TreeClaims) -> bool:
        """Could ``head``, the gang through which ``cq`` claims, fit the quota now in some flavor
        option, borrowing what leaves the other queues' claims covered?"""
        node = cq.node
        available = self.s.world.quota.available
        usage, nominal = node.usage, node.nominal
        name = cq.name
        for option in self.placement.options(cq, head).usages:
            for fr, need in option.items():
                if need <= 0:
                    continue
                amount = available(node, fr)
                if amount >= need and claimed(claims.frs, fr, name):
                    unused = nominal.get(fr, 0) - usage.get(fr, 0)
                    if self.unyielding(claims, fr, name) is None:
                        amount = claim_allows(amount, unused, reserved(claims, fr, name, head))
                    else:
                        amount = min(amount, max(0, unused))
                if amount < need:
                    break
            else:
                return True
        return False

    def claims_now(self, cq: ClusterQueueState) -> TreeClaims:
        """The reclaim claims of ``cq``'s tree as they are now, when a cycle first needs them
        (:meth:`tree_claims`); those the cycle adds later are ``late``."""
        claims = TreeClaims()
        if self.s.book.protected and cq.node.root() is not cq.node:
            for other in self.s.tree_queues(cq):
                if other.protected_head is not None:
                    head = other.head()
                    if head is not None:
                        self.add_claims(claims, other, head)
            if len(claims.claimants) > 1 and len(self.yielding(claims)) > 1:
                claims.stuck = self.stuck_claimants(claims)
        claims.sealed = True
        return claims

    def stuck_claimants(self, claims: TreeClaims) -> frozenset[str]:
        """The gangs through which yielding claims are made (:meth:`yielding`) that cannot fit
        the quota now, each keeping the others' needs covered (:meth:`claimant_may_fit`).

        Two claimants' gangs whose needs do not fit together would otherwise keep each other
        out for good: queue a has 8 GPUs and its gang needs 6 of them and borrows 4 CPUs, queue
        b has 8 CPUs and its gang needs 6 and borrows 4 GPUs; each could run alone, but each
        would leave less than the other needs. A stuck gang's need is not kept free from a
        claimant's gang ahead of it in queue order (priority, then time): the first of the two
        runs, the other follows. A gang that can fit keeps its need covered, whatever its place:
        the claim on a lender's own quota stands against an older borrower. Worked out once, as
        the cycle's claims are made, so that what a gang may take only shrinks during a cycle."""
        stuck: set[str] = set()
        for holder in self.yielding(claims):
            gang = claims.claimants.get(holder)
            cq = self.s.world.cluster_queues.get(holder)
            if gang is not None and cq is not None and not self.claimant_may_fit(cq, gang, claims):
                stuck.add(gang.key)
        return frozenset(stuck)

    def tree_claims(self, cq: ClusterQueueState, ctx: CycleScratch) -> TreeClaims:
        """The reclaim claims of ``cq``'s tree in this cycle (computed on first use)."""
        root = cq.node.root()
        claims = ctx.claims.get(root)
        if claims is None:
            claims = ctx.claims[root] = self.claims_now(cq)
        return claims

    def add_claims(self, claims: TreeClaims, cq: ClusterQueueState, head: Workload) -> bool:
        """Add the flavor-resources that ``cq`` claims back for its waiting gang ``head``. Returns
        whether the claims, already worked out for the cycle, lacked some of them (``late``) or
        had ``cq`` claim through another gang: they did not count ``head``'s claim when they
        decided which claims give way (:meth:`kept_out`, :meth:`stuck_claimants`)."""
        late = False
        frs = self.claimed_frs(cq, head)
        if frs:
            late = claims.claimants.setdefault(cq.name, head) is not head
        for fr in frs:
            holders = claims.frs.get(fr)
            if holders is None:
                holders = claims.frs[fr] = {}
            if cq.name not in holders:
                holders[cq.name] = head
                claims.yielding = None
                if claims.sealed:
                    claims.late.add((fr, cq.name))
                    late = True
        return late

    def reclaimer(self, cq: ClusterQueueState, wl: Workload, a: Assignment, ctx: CycleScratch) -> Workload | None:
        """A waiting gang of another queue that is entitled to the quota ``wl`` would borrow
        with ``a`` (see :meth:`reclaimer_for`)."""
        node = cq.node
        borrowed = [
            (fr, amount) for fr, amount in a.usage.items() if node.usage.get(fr, 0) + amount > node.nominal.get(fr, 0)
        ]
        return self.reclaimer_for(cq, wl, borrowed, ctx)

    def reclaimer_for(
        self, cq: ClusterQueueState, wl: Workload, borrowed: list[tuple[FlavorResource, int]], ctx: CycleScratch
    ) -> Workload | None:
        """The waiting gang of another queue in ``cq``'s tree whose claim keeps ``wl`` from
        borrowing ``borrowed`` (flavor-resource, the amount ``wl`` would borrow of it).

        A ClusterQueue's nominal quota is its own: while it lends it out and has a gang waiting
        that fits within that nominal quota (its protected head), it claims the quota back, and
        nobody else may borrow it. Without this rule a preempted borrower is re-admitted (it is
        older) the moment it stops, and is preempted again by the same reclaimer, forever.

        Except where a claim gives way: when the claim's own gang is itself kept out by other
        claims (:meth:`kept_out`), another claimant's waiting gang (``wl`` is the gang its own
        queue claims through) may borrow as long as what stays available to its queue covers
        the needs of the claims it borrows from. Two queues whose waiting heads each fit their
        own quota of one resource and must borrow the other's (one has GPUs and too few CPUs,
        the other CPUs and no GPUs) would otherwise keep each other out for good, on an idle
        cluster, and with them every third queue that borrows either resource. Only claimants' gangs:
        they are what such a cycle of claims holds; every other borrower still leaves a claimed
        resource alone, which keeps the lender's quota for its head however many borrowers come
        and go. Two claimants whose needs do not fit together would still keep each other out:
        the one behind in queue order gives way to the other (:meth:`stuck_claimants`).

        Within a cycle a claim, once in force, holds until the cycle ends, even if the claimant
        is admitted meanwhile, and so does the gang its queue claims through: what another
        queue may take then only shrinks during a cycle, so the cycle can tell at its start
        which gangs could fit at all (the claimant's queue retries the others in the next
        cycle, which :meth:`schedule` runs at once).
        """
        if not borrowed:
            return None
        claims = self.tree_claims(cq, ctx)
        if not claims.frs:
            return None
        name = cq.name
        claimant = claims.claimants.get(name) is wl
        for fr, need in borrowed:
            if not claimed(claims.frs, fr, name):
                continue
            first = next(head for holder, head in claims.frs[fr].items() if holder != name)
            if not claimant:
                return first
            blocker = self.unyielding(claims, fr, name)
            if blocker is not None:
                return blocker
            if self.s.world.quota.available(cq.node, fr) - need < reserved(claims, fr, name, wl):
                return first
        return None

    def unyielding(self, claims: TreeClaims, fr: FlavorResource, name: str) -> Workload | None:
        """The first gang through which a ClusterQueue other than ``name`` claims ``fr`` and
        whose claim does not give way (it is not kept out, :meth:`kept_out`); None if all of
        them give way."""
        for holder, head in claims.frs[fr].items():
            if holder != name and not self.kept_out(claims, holder, head):
                return head
        return None

    def kept_out(self, claims: TreeClaims, holder: str, head: Workload) -> bool:
        """Must every flavor option of ``head``, through which ClusterQueue ``holder`` claims,
        borrow (need more than ``holder``'s nominal quota of) something that another queue
        claimed when the cycle started (see :meth:`reclaimer_for`)?

        Read from the nominal quota, not the usage, and from the claims in force as the cycle
        started, so that it does not change during a cycle: what a gang may take must only
        shrink then (read from a usage that grew during the cycle, a head would become kept
        out, and another queue's head could then borrow what it could not at the cycle's
        start). A head that borrows only because its own queue's gangs use its
        quota waits for those, not for a claim."""
        # Answered once per gang and cycle: within a cycle the gang's queue, its flavor options
        # and the claims it is read from stay as they were (the memo holds only gangs that passed
        # the checks below).
        known = claims.kept_out.get(head.key)
        if known is not None:
            return known
        other = self.s.world.cluster_queues.get(holder)
        if other is None:
            return False
        beyond = self.beyond_nominal(other, head)
        if beyond is None:
            return False
        late = claims.late
        out = all(
            any(
                (holders := claims.frs.get(fr)) is not None
                and any(h != holder and (fr, h) not in late for h in holders)
                for fr in frs
            )
            for frs in beyond
        )
        claims.kept_out[head.key] = out
        return out

    def beyond_nominal(self, cq: ClusterQueueState, wl: Workload) -> tuple[tuple[FlavorResource, ...], ...] | None:
        """Per flavor option of ``wl`` in ``cq``, the flavor-resources it needs more of than the
        queue's nominal quota; None if some option needs none, or there is no option (cached on
        the gang until the specs change)."""
        cached = wl.beyond
        if cached is None or cached[0] != self.s.world.config_version or cached[1] != cq.name:
            result: tuple[tuple[FlavorResource, ...], ...] | None = None
            options = self.placement.options(cq, wl)
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
            cached = wl.beyond = (self.s.world.config_version, cq.name, result)
        return cached[2]

    def claimed_from(self, cq: ClusterQueueState, a: Assignment) -> bool:
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
        for other, head in self.s.other_heads(cq):
            claimed = self.claimed_frs(other, head)
            if claimed and any(fr in claimed for fr in borrowed):
                return True
        return False

    def claim_keeps_out(self, cq: ClusterQueueState, wl: Workload, head: Workload, ctx: CycleScratch) -> bool:
        """Would the claim that ``cq`` makes through ``wl`` keep ``head``, another queue's waiting
        head, out in every flavor option? ``wl`` claims if it is ``cq``'s protected head, or
        becomes it by failing now. Then ``head`` cannot be admitted before ``wl`` is, and
        admitting ``wl`` cannot delay it: its reservation does not hold ``wl`` back.

        The problem it solves: a starving head that must borrow a lender's quota held back the
        lender's own waiting gang (which borrows something else, and so is in its scope), while
        the lender's claim kept the starving head out; both waited, on an idle cohort, until
        unrelated capacity came free. Not where ``head`` may borrow through a claim that gives way (both claim, and
        ``wl`` is
        kept out itself, see :meth:`reclaimer_for`)."""
        first = cq.head()
        if first is not None and first is not wl and first.order_key < wl.order_key:
            return False  # wl would not become the protected head: its queue claims through first
        frs = self.claimed_frs(cq, wl) if first is wl else claims_of(cq, wl)
        if not frs or (first is not wl and self.placement.never_fits(cq, wl)):
            return False
        other = head.cq
        if other is None:
            return False
        totals = head.totals
        if not any(fr[1] in totals for fr in frs):
            return False
        claims = self.tree_claims(cq, ctx)
        if claims.claimants.get(other.name) is head and self.kept_out(claims, cq.name, wl):
            return False
        reachable = self.placement.reachable_options(other, head)
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

    @staticmethod
    def claim_message(reclaimer: Workload) -> str:
        name = reclaimer.cq.name if reclaimer.cq is not None else ""
        return f"cannot borrow: ClusterQueue {name!r} is reclaiming its lent quota for {reclaimer.key}"
