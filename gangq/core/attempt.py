"""Trying one gang: its flavor options in order, each charged and placed in a what-if, admitted if
no lender's claim and no older head's reservation stands in its way; otherwise preemption, once
per queue per cycle, or the reason it waits.
"""

from __future__ import annotations

from enum import IntEnum

from gangq.core.claims import Claims
from gangq.core.decisions import (
    Admission,
    PodSetAssignment,
)
from gangq.core.flavors import (
    BORROW,
    FIT,
    PREEMPT,
    Assignment,
)
from gangq.core.placement import Placement, node_reason
from gangq.core.preemption import Preemption
from gangq.core.queue import ClusterQueueState, NodeMark, Workload
from gangq.core.reservations import Reservation, Reservations
from gangq.core.retries import RetryReason
from gangq.core.scratch import CycleScratch
from gangq.core.state import EngineState
from gangq.core.statement import Statement
from gangq.core.topology import pod_domains, shared_domain


class Outcome(IntEnum):
    """How a try of one gang ended."""

    ADMITTED = 0
    FAILED = 1  # it waits; the queue goes on
    STOP = 2  # it waits, and its StrictFIFO queue stops for the cycle


class Attempt:
    """Try, place and admit one gang."""

    def __init__(
        self,
        state: EngineState,
        placement: Placement,
        claims: Claims,
        reservations: Reservations,
        preemption: Preemption,
    ) -> None:
        self.s = state
        self.placement = placement
        self.claims = claims
        self.reservations = reservations
        self.preemption = preemption

    def try_gang(self, cq: ClusterQueueState, wl: Workload, ctx: CycleScratch) -> Outcome:
        """Try to admit ``wl`` now; on failure record why. Returns Outcome.ADMITTED, Outcome.FAILED or Outcome.STOP."""
        # A protected head stays protected while it is tried: the quota it claims back stays
        # claimed for the reservations worked out meanwhile (other heads' scopes), as it does for
        # the cycle's gangs. Dropped, another queue's head seemed able to borrow it and fit now,
        # and gangs behind that head passed it, depending on whose try worked its reservation out.
        was_head = cq.protected_head is wl
        preemptor = self.holding_preemptor(wl, ctx.now)
        sheltered = self.sheltered(cq, wl, ctx.now)
        delaying = self.delaying_head(cq, wl, ctx.now)
        if sheltered or (preemptor is not None and preemptor.cq is cq) or delaying is not None:
            # No option of this queue is open to it: said without working the options out (in a
            # saturated queue most of its gangs may wait so, and every retry tries them).
            self.held_back(cq, wl, ctx.now, preemptor, delaying)
            return Outcome.STOP if cq.strict else Outcome.FAILED
        cands = self.placement.assignments(cq, wl)
        if cands.never_fits:
            self.s.set_reason(wl, "NeverFits", cands.message)
            return Outcome.STOP if cq.strict else Outcome.FAILED
        nodes_checked = cq.spec.admission_mode == "QuotaAndNodes"
        if wl.has_topology and not nodes_checked:
            # A topology request is a node check: a queue without one would admit the gang
            # anywhere, and its pods would not be where the request asked.
            self.s.set_reason(
                wl,
                "NeverFits",
                f"asks for a topology placement, and ClusterQueue {cq.name!r} checks no nodes "
                "(admissionMode QuotaOnly)",
            )
            return Outcome.STOP if cq.strict else Outcome.FAILED
        quota_ok = [a for a in cands.assignments if a.mode <= BORROW]
        node_failure = ""
        # A mark from an earlier node check stays sound until a new one replaces it (see NodeMark).
        freed_seq = self.s.world.nodes.freed_seq
        shortfall = 0
        node_checked: set[int] = set()  # options whose node check failed
        blocked_by: Workload | None = None
        reclaimer: Workload | None = None
        held = False  # an option was ruled out only by a hold (preemptor, shelter)
        # Every option that fits the quota is tried, also after a reservation held the gang back
        # in one: another may fit its own quota and delay nobody. Stopping at the first such
        # option lets heads hold each other on an idle cluster (one head fits its own quota in
        # flavor b but is held back in flavor a by a second queue's starving head, which waits
        # for a third's, which the first queue's claim on b keeps out).
        for a in quota_ok:
            if a.borrowing and (preemptor is not None or sheltered is not None):
                held = True
                continue
            if a.borrowing:
                claimer = self.claims.reclaimer(cq, wl, a, ctx)
                if claimer is not None:
                    # Kept when a later option fails otherwise: the gang did not lack capacity
                    # only, and may fit later in the cycle, once the lender's gang is admitted.
                    reclaimer = claimer
                    continue
            in_scope = self.reservations.holding_heads(cq, wl, a, ctx)
            if ctx.preemptors_first and in_scope:
                # The room its victims freed is its own (see SchedulingCycle.try_preemptors).
                in_scope = [h for h in in_scope if h.cq is cq]
            stmt = Statement(self.s.world.quota, self.s.world.nodes)
            self.s.charge(wl, cq, a.usage)
            why = ""
            placement: dict[tuple[int, str], int] = {}
            placed = 0
            if nodes_checked:
                why, placement, placed = self.placement.place(wl, a, ctx)
            heads: list[tuple[Workload, Reservation]] = []
            if not why and in_scope:
                # The heads' reservations are computed without this gang: most gangs fail before
                # this point, so they are worked out only now, after undoing and then redoing the
                # gang's charge and placement (deterministic) if one is not cached.
                cached = [self.reservations.cached(h, ctx.now) for h in in_scope]
                if all(info is not None for info in cached):
                    heads = [(h, info) for h, info in zip(in_scope, cached, strict=True) if info is not None]
                else:
                    stmt.discard()
                    heads = [(h, self.reservations.reservation(h, ctx.now)) for h in in_scope]
                    stmt = Statement(self.s.world.quota, self.s.world.nodes)
                    self.s.charge(wl, cq, a.usage)
                    if nodes_checked:
                        why, placement, placed = self.placement.place(wl, a, ctx)
            if not why:
                blocked_by = self.reservations.blocks(heads, wl, ctx.now)
                if blocked_by is None:
                    stmt.commit()
                    self.admit(cq, wl, a, placement, ctx, was_head)
                    return Outcome.ADMITTED
            stmt.discard()
            if why:
                if not node_failure:
                    node_failure = why
                # A topology placement may fail with room to spare elsewhere: any freed pod's
                # worth in its pools may let it in (its mark must not wait for more).
                short = 1 if wl.has_topology else wl.min_member - placed
                shortfall = short if not shortfall else min(shortfall, short)
                node_checked.add(a.index)
        if blocked_by is not None:
            self.s.set_reason(
                wl, "BlockedByReservation", self.reservations.blocked_message(blocked_by, ctx.now), blocked_by
            )
            if node_failure:
                # Another option failed the node check: freed nodes alone may let it in there, out
                # of the holding head's way. Only the holder's admission or leave retried it.
                self.s.wait_for_nodes(cq, wl, None)
            self.reservations.note_head(cq, wl, ctx, reclaimer is not None)
            if self.s.book.limited or not self.reservations.starving(blocked_by, ctx.now):
                # Its reservation may change with any capacity change. A starving head without
                # a reservation time (no runtime limits anywhere) holds this gang back until it
                # is admitted or leaves, and either retries its cohort tree, or until it chooses
                # victims (see Reservations.retry_others_held).
                self.s.book.waiting_reservation[cq.name] = None
            elif cq.protected_head is wl and self.s.may_preempt(cq):
                # Whether it fits, so whether it may preempt, changes with the capacity others
                # take: see Reservations.retry_held_heads.
                self.s.book.held_heads[cq.name] = None
            return Outcome.STOP if cq.strict else Outcome.FAILED
        if held:
            # Only borrowing was open to it. Its queue is retried when its own quota comes free,
            # when the preemptor is admitted or leaves (EngineState.release_held), and when the
            # hold ends (a timer).
            self.held_back(cq, wl, ctx.now, preemptor)
            if node_failure:
                self.s.wait_for_nodes(cq, wl, None)
            self.reservations.note_head(cq, wl, ctx, reclaimer is not None)
            return Outcome.STOP if cq.strict else Outcome.FAILED
        if reclaimer is not None and not node_failure and not any(a.mode == FIT for a in quota_ok):
            self.s.set_reason(wl, "InsufficientQuota", self.claims.claim_message(reclaimer), reclaimer)
            self.reservations.note_head(cq, wl, ctx, True)
            if cq.protected_head is wl and self.s.may_preempt(cq):
                # An admission may make the claim give way (its gang can no longer fit, see
                # Claims.stuck_claimants), and then this head may preempt: see Reservations.retry_held_heads.
                self.s.book.held_heads[cq.name] = None
            return Outcome.STOP if cq.strict else Outcome.FAILED
        # Nothing fits now. Preemption, once per queue per cycle, for the first gang that may.
        target = next((a for a in cands.assignments if a.mode == PREEMPT), None)
        if target is None and quota_ok and node_failure:
            target = quota_ok[0]
        if (
            target is not None
            and cq.name not in ctx.preempted_in
            and self.s.may_preempt(cq)
            and not self.preemption.delayed(wl, ctx.now)
        ):
            ctx.preempted_in.add(cq.name)
            victims = self.preemption.victims_suffice(cq, wl, cands, nodes_checked, ctx)
            if victims is None:
                victims = self.preemption.find_victims(cq, wl, target, nodes_checked, ctx)
                if victims is not None:
                    wl.claim = dict(target.usage)
                    self.s.book.claimants[wl.key] = None
                    # The other preemptors' reservations count it (Reservations.charge_claims).
                    self.s.world.version += 1
            if victims is not None:
                self.preemption.preempt(cq, wl, victims, ctx)
                return Outcome.STOP if cq.strict else Outcome.FAILED
            if any(self.s.stopping(key) for key in wl.victims):
                wl.victims_short = True
        self.reservations.note_head(cq, wl, ctx, reclaimer is not None)
        if reclaimer is None:
            ctx.capacity_failed.add(wl.key)  # it lacked quota or nodes, not a lender's leave
        pool_ids: frozenset[int] | None = None  # the pools its pods could go to (None: not known)
        if node_failure and len(wl.spec.pod_sets) == 1 and shortfall > 0:
            pool_ids = frozenset(
                pool.pool_id
                for a in cands.assignments
                if a.index in node_checked
                for _, _, _, pools in self.placement.pod_sets_of(a.choices)
                for pool in pools
            )
            wl.node_mark = NodeMark(
                freed_seq,
                shortfall,
                (self.s.world.config_version, cq.name),
                frozenset(node_checked),
                pool_ids,
                self.s.world.nodes.version,
            )
        if node_failure:
            # Freed nodes alone may let it in, through the option that failed the node check,
            # even when another option lacks quota (and names the reason): a gang that failed
            # nodes in one flavor and quota in the next waited for an unrelated event.
            self.s.wait_for_nodes(cq, wl, pool_ids)
        if node_failure and not any(a.mode == PREEMPT for a in cands.assignments):
            self.s.set_reason(wl, node_reason(node_failure), node_failure)
        else:
            self.s.set_reason(wl, "InsufficientQuota", cands.message or node_failure)
        return Outcome.STOP if cq.strict else Outcome.FAILED

    def held_back(
        self,
        cq: ClusterQueueState,
        wl: Workload,
        now: float,
        preemptor: Workload | None,
        delaying: Workload | None = None,
    ) -> None:
        """Record why ``wl`` waits for its preemptor, in its shelter, or for a head in its
        preemption delay."""
        if preemptor is not None:
            message = f"preempted for {preemptor.key}, which has not been admitted yet; waits for it"
        elif delaying is not None:
            left = delaying.pending_since + self.s.world.config.preemption_delay - now
            message = (
                f"{delaying.key} (priority {delaying.priority}) waits for capacity in ClusterQueue {cq.name!r} "
                f"and would preempt this gang: the room that comes free is its first (for at most {left:.0f}s more)"
            )
            preemptor = delaying
        else:
            message = (
                f"preempted {wl.preempted} times: waits to be admitted where no waiting gang preempts it again "
                f"(without borrowing; not while ClusterQueue {cq.name!r}'s first waiting gang could preempt it)"
            )
        self.s.set_reason(wl, "BlockedByReservation", message, preemptor)

    def holding_preemptor(self, wl: Workload, now: float) -> Workload | None:
        """The preemptor that ``wl``, preempted for it, still waits for, if any.

        The problem it solves: a gang evicted to make room for a preemptor went back to its queue
        and was admitted again into that room while the preemptor still waited for more (a
        lender took back its quota, other queues' gangs took the nodes); the preemptor preempted
        it again, and a low-priority gang was started and killed over and over, each time losing
        its work.
        So until its preemptor is admitted, leaves its queue, or gives up its claim, the victim
        is admitted neither into its preemptor's ClusterQueue nor by borrowing; into its own
        queue's nominal quota elsewhere it may go (a preemptor of another queue reclaimed only
        what it had borrowed). The wait ends after the starvation timeout
        (:meth:`EngineState.hold_for_preemptor`)."""
        key = wl.held_for
        if key is None:
            return None
        preemptor = self.s.world.workloads.get(key)
        if (
            preemptor is None
            or preemptor.state != "Pending"
            or not preemptor.claim
            or preemptor.deactivated
            or preemptor.cq is None
        ):
            wl.held_for = None
            return None
        return preemptor

    def delaying_head(self, cq: ClusterQueueState, wl: Workload, now: float) -> Workload | None:
        """``cq``'s protected head (its first gang waiting for capacity) while it waits out its
        preemption delay (:meth:`Preemption.delayed`), if it could preempt ``wl`` within the
        queue; ``wl`` is then not admitted into ``cq`` until the delay ends or the head is
        admitted or leaves.

        The problem it solves: the head waits out its delay for capacity to come free on its
        own, and a lower-priority gang behind it took each bit that came free; when the delay
        ended the head preempted it, and the delay had only added a start and a kill (Kueue's
        baseline scenario without run times: 915 preemptions with the delay alone, none with
        this)."""
        head = cq.head()
        if head is None or head is wl or not self.head_could_preempt(cq, head, wl):
            return None
        return head if self.preemption.delayed(head, now) else None

    def head_could_preempt(self, cq: ClusterQueueState, head: Workload, wl: Workload) -> bool:
        """May ``cq``'s gang ``head`` preempt its gang ``wl`` under the queue's
        ``withinClusterQueue`` policy?"""
        within = cq.spec.preemption.within_cluster_queue
        if within == "Never":
            return False
        if within == "LowerOrNewerEqualPriority":
            return head.order_key < wl.order_key
        return head.priority > wl.priority

    def sheltered(self, cq: ClusterQueueState, wl: Workload, now: float) -> bool | None:
        """None when ``wl`` may be admitted anywhere; otherwise it may not borrow, and with True
        not be admitted into ``cq`` at all for now.

        The problem it solves: in a saturated cohort with gangs of several priorities, the same
        low-priority gang was admitted into whatever room came free, then preempted by the next
        higher-priority gang that wanted it, again and again; each time its work was lost. A gang
        preempted :attr:`EngineConfig.preemption_shelter` times is therefore admitted again only
        where no gang waiting now can take it back: not by borrowing (a lender reclaims), and in
        a ClusterQueue that preempts within itself only while its protected head (the first gang
        waiting for capacity) could not preempt it. At most for the starvation timeout after its
        requeue."""
        shelter = self.s.world.config.preemption_shelter
        if shelter is None or wl.preempted < shelter or now >= wl.shelter_until:
            return None
        # The protected head: the first gang of the queue that waits for capacity (one that can
        # never fit holds nothing back); a gang it may preempt waits for it.
        head = cq.head()
        return head is not None and head is not wl and self.head_could_preempt(cq, head, wl)

    def admit(
        self,
        cq: ClusterQueueState,
        wl: Workload,
        a: Assignment,
        placement: dict[tuple[int, str], int],
        ctx: CycleScratch,
        was_head: bool,
    ) -> None:
        now = ctx.now
        wl.state = "Admitted"
        wl.placement = None
        wl.victims = ()
        wl.victims_short = False
        wl.claim = {}
        if wl.holding:
            self.s.release_held(wl)
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
        self.s.cited_role_may_end(wl)
        cq.admitted[wl.key] = wl
        cq.admitted_total += 1
        if was_head:
            # Its claims on lent quota and its reservation end: others may borrow or pass now.
            self.s.retry(RetryReason.HEAD_ADMITTED, cq)
            self.s.retry_others(RetryReason.HEAD_ADMITTED, cq)
        else:
            head = cq.head()
            if head is not None:
                # The quota it took may leave the head's need beyond the unused nominal quota:
                # that claim ends (see Claims.add_claims), and the queues it kept from borrowing retry.
                node = cq.node
                usage, nominal = node.usage, node.nominal
                if any(
                    amount > 0
                    and fr in nominal
                    and (need := head.totals.get(fr[1], 0))
                    and usage.get(fr, 0) - amount + need <= nominal[fr] < usage.get(fr, 0) + need
                    for fr, amount in a.usage.items()
                ):
                    self.s.retry_others(RetryReason.CLAIM_ENDED, cq)
        self.reservations.forget(wl.key)
        if wl.spec.runtime_limit is not None:
            wl.end_time = now + wl.spec.runtime_limit
            self.s.book.running_by_end.add((wl.end_time, wl.seq, wl.key))
        pod_sets = []
        by_ps: dict[int, dict[str, int]] = {}
        for (index, node_name), count in placement.items():
            by_ps.setdefault(index, {})[node_name] = count
        for choice in a.choices:
            ps = choice.pod_set
            planned = by_ps.get(choice.index, {})
            domain: dict[str, str] = {}
            domains: list[tuple[dict[str, str], int]] = []
            if ps.topology is not None and planned:
                flavor = self.s.world.flavors.get(next(iter(choice.flavors.values()), ""))
                if flavor is not None and flavor.topology is not None:
                    nodes = self.s.world.nodes.nodes
                    levels = flavor.topology.levels
                    domain = shared_domain(levels, ps.topology, [nodes[n] for n in planned if n in nodes])
                    domains = pod_domains(
                        levels, ps.topology, [(nodes[n], c) for n, c in planned.items() if n in nodes], domain
                    )
            pod_sets.append(
                PodSetAssignment(ps.name, ps.count, dict(choice.flavors), dict(ps.requests), planned, domain, domains)
            )
        provisioning: dict[str, int] = {}
        provisional = self.s.world.provisioning.virtual
        if provisional:
            for node_name in {node_name for _, node_name in placement}:
                pool = provisional.get(node_name)
                if pool is not None:
                    provisioning[pool] = provisioning.get(pool, 0) + 1
            if provisioning:
                wl.message += "; Provisioning: its pods wait for " + ", ".join(
                    f"{n} new node{'' if n == 1 else 's'} of NodePool {pool!r}"
                    for pool, n in sorted(provisioning.items())
                )
        admission = Admission(wl.key, cq.name, tuple(pod_sets), a.borrowing, now, dict(a.usage), provisioning)
        wl.admission = admission
        ctx.decisions.append(admission)
        self.s.world.version += 1
        self.s.start_ready_timer(wl, now)
