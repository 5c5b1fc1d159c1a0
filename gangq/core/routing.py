"""Routing: LocalQueue → ClusterQueue, and taking a gang out of its queue.

A pending gang goes to the ClusterQueue of its LocalQueue if that queue exists, is not stopped,
and selects the gang's namespace; otherwise it waits unrouted, with the reason.
"""

from __future__ import annotations

from gangq.core.decisions import (
    PendingReason,
)
from gangq.core.queue import ClusterQueueState, Workload
from gangq.core.retries import RetryReason
from gangq.core.state import EngineState


class Routing:
    """Which ClusterQueue a pending gang waits in."""

    def __init__(self, state: EngineState) -> None:
        self.s = state

    def target(self, wl: Workload) -> tuple[ClusterQueueState | None, PendingReason, str]:
        lq = self.s.world.local_queues.get(wl.lq_key)
        if lq is None:
            return None, "LocalQueueNotFound", f"LocalQueue {wl.lq_key} does not exist"
        if lq.stop_policy != "None":
            return None, "LocalQueueStopped", f"LocalQueue {wl.lq_key} is stopped ({lq.stop_policy})"
        cq = self.s.world.cluster_queues.get(lq.cluster_queue)
        if cq is None or cq.deleted:
            return (
                None,
                "ClusterQueueNotFound",
                f"ClusterQueue {lq.cluster_queue!r} of LocalQueue {wl.lq_key} does not exist",
            )
        selector = cq.spec.namespace_selector
        labels = self.s.world.namespaces.get(wl.spec.namespace, {})
        if selector is None or not selector.matches(labels):
            return (
                None,
                "NamespaceNotSelected",
                (f"ClusterQueue {cq.name!r} does not admit workloads from namespace {wl.spec.namespace!r}"),
            )
        return cq, "Pending", ""

    def route(self, wl: Workload) -> None:
        cq, reason, message = self.target(wl)
        if cq is None:
            self.s.book.unrouted[wl.key] = wl
            self.s.set_reason(wl, reason, message)
            return
        self.s.book.unrouted.pop(wl.key, None)
        wl.requeue_at = None
        cq.push(wl)
        if cq.strict:
            self.s.book.scratch[cq.name].fresh.append(wl)
        self.s.book.dirty[cq.name] = None
        if cq.inactive_reason:
            self.s.set_reason(wl, "ClusterQueueInactive", cq.inactive_reason)
        elif cq.stopped:
            self.s.set_reason(wl, "ClusterQueueStopped", f"ClusterQueue {cq.name!r} is stopped ({cq.spec.stop_policy})")
        elif wl.reason == "Pending":
            self.s.set_reason(wl, "Pending", f"queued in ClusterQueue {cq.name!r}, waiting for quota")

    def unqueue(self, wl: Workload) -> None:
        self.s.book.unrouted.pop(wl.key, None)
        cq = wl.cq
        self.s.cited_role_may_end(wl)
        if cq is not None:
            was_head = cq.head() is wl
            cq.discard(wl)
            if cq.strict or was_head:
                self.s.retry(RetryReason.GANG_LEFT, cq)
            if was_head:
                # The heads changed: reservations worked out with this one (other heads' scopes,
                # the claims it made) are stale. Without this, a reservation cached before the
                # deletion said a lender claimed what no lender claimed any more.
                self.s.book.heads_version += 1
                self.s.retry_tree(RetryReason.HEAD_LEFT, cq)
        wl.cq = None
