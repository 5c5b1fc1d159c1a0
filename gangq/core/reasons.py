"""Pending reasons: what a waiting gang is told, and keeping the reasons that name another gang true.

A reason that names a gang as what holds this one back (a head's reservation, a lender's claim)
is re-checked when that gang stops being its queue's protected head (:meth:`Reasons.refresh_citations`),
without trying the gang (:meth:`Reasons.explain`).
"""

from __future__ import annotations

from gangq.core.claims import Claims
from gangq.core.decisions import (
    PendingReason,
)
from gangq.core.fairshare import dominant_share
from gangq.core.flavors import (
    BORROW,
    Assignment,
)
from gangq.core.placement import Placement, node_reason
from gangq.core.queue import ClusterQueueState, Workload
from gangq.core.reservations import Reservations
from gangq.core.scratch import CycleScratch
from gangq.core.state import EngineState
from gangq.core.statement import Statement
from gangq.core.views import ClusterQueueView, PendingView, WorkloadView


def strict_message(cq: ClusterQueueState) -> str:
    """What the gangs behind a StrictFIFO queue's blocked head are told. The head is not named:
    it changes with each admission, and the gangs behind it are not tried again until they reach
    it, so a name (and the head's reason) would go stale at once (the views add it when asked,
    :meth:`Reasons.shown_message`)."""
    return f"StrictFIFO ClusterQueue {cq.name!r}: the gang at its head cannot be admitted yet, and nothing may pass it"


class Reasons:
    """Pending reasons and citations."""

    def __init__(self, state: EngineState, placement: Placement, claims: Claims, reservations: Reservations) -> None:
        self.s = state
        self.placement = placement
        self.claims = claims
        self.reservations = reservations

    def refresh_citations(self, now: float) -> None:
        """Pending reasons that name a gang as what holds them back (a head's reservation, a
        lender's claim) stay true: when that gang is no longer its queue's protected head, the
        gangs whose reason names it and that were not tried again since get a new reason, worked
        out without trying them (:meth:`explain`).

        The retry shortcuts skip the gangs that are known to fail, and a skipped gang keeps the
        reason of its last try: without this, "cannot borrow: ClusterQueue 'q1' is reclaiming its
        lent quota for ns/a" long after ns/a was admitted, when q1's new head claims nothing the
        gang needs. Only the gangs whose reason names the gang that changed are looked at: as
        many as were told so, by tries that happened anyway."""
        ended = self.s.book.cite_ended
        self.s.book.cite_ended = {}
        ctx: CycleScratch | None = None
        for key, cited in ended.items():
            cq = cited.cq
            if cq is not None and cq.head() is cited:
                continue  # still its queue's protected head (head() checks that it is queued there)
            citers = self.s.book.citers.pop(key, None)
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
                    ctx = CycleScratch(now, [])
                self.explain(cq, wl, ctx, cited)

    def explain(self, cq: ClusterQueueState, wl: Workload, ctx: CycleScratch, cited: Workload) -> None:
        """Set the reason a try of ``wl`` would give now, without trying it (no admission, no
        preemption, no retry requested): its queue's holding head, if one is ahead of it; else the
        quota it lacks, or the lender whose claim keeps it from borrowing; else the node check.
        For a gang that fits quota and nodes, only a head's reservation (its queue's, or another
        queue's whose scope it borrows in) can hold it back; if none does, it would fit now, and
        the try at its queue's next retry gives the reason (``cited``: the gang its reason named)."""
        if cq.strict and next(cq.ordered()) != wl.order_key:
            self.s.set_reason(wl, "BlockedByHead", strict_message(cq))
            return
        head = self.reservations.holding_head(cq, ctx.now)
        if head is not None and head is not wl and head.order_key < wl.order_key:
            self.s.set_reason(wl, "BlockedByReservation", self.reservations.blocked_message(head, ctx.now), head)
            return
        cands = self.placement.assignments(cq, wl)
        if cands.never_fits:
            self.s.set_reason(wl, "NeverFits", cands.message)
            return
        quota_ok = [a for a in cands.assignments if a.mode <= BORROW]
        if not quota_ok:
            self.s.set_reason(wl, "InsufficientQuota", cands.message)
            return
        reclaimer: Workload | None = None
        open_options: list[Assignment] = []
        for a in quota_ok:
            claimer = self.claims.reclaimer(cq, wl, a, ctx) if a.borrowing else None
            if claimer is None:
                open_options.append(a)
            else:
                reclaimer = claimer
        if not open_options and reclaimer is not None:
            self.s.set_reason(wl, "InsufficientQuota", self.claims.claim_message(reclaimer), reclaimer)
            return
        nodes_checked = cq.spec.admission_mode == "QuotaAndNodes"
        node_failure = ""
        held: Workload | None = None
        for a in open_options:
            in_scope = self.reservations.holding_heads(cq, wl, a, ctx)
            heads = [(h, self.reservations.reservation(h, ctx.now)) for h in in_scope]
            with Statement(self.s.world.quota, self.s.world.nodes):
                self.s.charge(wl, cq, a.usage)
                why = self.placement.place(wl, a, None)[0] if nodes_checked else ""
                blocked_by = None if why else self.reservations.blocks(heads, wl, ctx.now, promise=False)
            if blocked_by is not None:
                held = held or blocked_by
                continue
            if not why:
                # It fits now: the try at its queue's next retry gives the reason.
                self.s.set_reason(
                    wl, "Pending", f"{cited.key} no longer holds it back; tried again at its ClusterQueue's next retry"
                )
                return
            node_failure = node_failure or why
        if held is not None:
            self.s.set_reason(wl, "BlockedByReservation", self.reservations.blocked_message(held, ctx.now), held)
            return
        self.s.set_reason(wl, node_reason(node_failure), node_failure)

    def shown_message(self, wl: Workload) -> str:
        """A pending gang's message as a person sees it now: behind a StrictFIFO head, with the
        head named (the stored message does not name it, see :func:`~gangq.core.reasons.strict_message`)."""
        cq = wl.cq
        if wl.reason != "BlockedByHead" or cq is None or wl.state != "Pending":
            return wl.message
        first = next(cq.ordered(), None)
        if first is None or first == wl.order_key:
            return wl.message
        head = self.s.world.workloads[first[3]]
        return f"{wl.message} (its head: {head.key}, {head.reason})"

    def tell_blocked(self, cq: ClusterQueueState, head: Workload | None) -> None:
        """StrictFIFO: gangs queued behind the head that stopped the queue were not tried; say so."""
        sc = self.s.book.scratch[cq.name]
        fresh = sc.fresh
        sc.fresh = []
        if head is None:
            return
        message = strict_message(cq)
        for wl in fresh:
            if wl.cq is cq and wl.state == "Pending" and wl.reason == "Pending" and head.order_key < wl.order_key:
                self.s.set_reason(wl, "BlockedByHead", message)

    def mark_all(self, cq: ClusterQueueState) -> None:
        reason: PendingReason = "ClusterQueueInactive" if cq.inactive_reason else "ClusterQueueStopped"
        message = cq.inactive_reason or f"ClusterQueue {cq.name!r} is stopped ({cq.spec.stop_policy})"
        for key in list(cq.ordered()):
            self.s.set_reason(self.s.world.workloads[key[3]], reason, message)

    def position(self, key: str) -> tuple[int, int] | None:
        """(1-based position, queue length) of a pending workload in its ClusterQueue."""
        wl = self.s.world.workloads.get(key)
        if wl is None or wl.cq is None or wl.queued is None:
            return None
        return wl.cq.position(wl.order_key), wl.cq.pending_count()

    def workload_view(self, key: str) -> WorkloadView | None:
        """What a person asks about one workload: state, queue, reason, position."""
        wl = self.s.world.workloads.get(key)
        if wl is None:
            return None
        pos = self.position(key)
        message = self.shown_message(wl)
        if wl.state == "Pending" and pos is not None:
            message = f"{message}; position {pos[0]} of {pos[1]}"
        cq_name = wl.cq.name if wl.cq is not None else None
        return WorkloadView(
            wl.key, wl.state, cq_name, wl.reason if wl.state == "Pending" else "", message, pos, wl.admission
        )

    def pending_views(self, cluster_queue: str, limit: int | None = None, offset: int = 0) -> list[PendingView]:
        """The pending workloads of a ClusterQueue in admission order (Kueue's visibility API)."""
        cq = self.s.world.cluster_queues.get(cluster_queue)
        if cq is None:
            return []
        out: list[PendingView] = []
        for i, key in enumerate(cq.ordered()):
            if i < offset:
                continue
            if limit is not None and len(out) >= limit:
                break
            wl = self.s.world.workloads[key[3]]
            out.append(
                PendingView(
                    wl.key,
                    i + 1,
                    wl.priority,
                    wl.spec.namespace,
                    wl.spec.queue_name,
                    wl.pending_since,
                    wl.reason,
                    self.shown_message(wl),
                    wl.spec.runtime_limit,
                    wl.spec.runtime_estimated,
                )
            )
        return out

    def cluster_queue_view(self, name: str) -> ClusterQueueView | None:
        """Status of a ClusterQueue: active or why not, pending / admitted counts, usage."""
        cq = self.s.world.cluster_queues.get(name)
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
