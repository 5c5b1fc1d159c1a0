"""Read-only answers to "what is going on": per workload, per pending list, per ClusterQueue."""

from __future__ import annotations

from gangq.core.decisions import Admission
from gangq.core.model import FlavorResource


class WorkloadView:
    """One workload as a researcher asks about it."""

    __slots__ = ("admission", "cluster_queue", "key", "message", "position", "reason", "state")

    def __init__(
        self,
        key: str,
        state: str,
        cluster_queue: str | None,
        reason: str,
        message: str,
        position: tuple[int, int] | None,
        admission: Admission | None,
    ) -> None:
        self.key = key
        self.state = state
        self.cluster_queue = cluster_queue
        self.reason = reason
        self.message = message
        self.position = position
        self.admission = admission


class PendingView:
    """A row of a ClusterQueue's pending list, in admission order."""

    __slots__ = (
        "expected_runtime",
        "key",
        "local_queue",
        "message",
        "namespace",
        "pending_since",
        "position",
        "priority",
        "reason",
        "runtime_estimated",
    )

    def __init__(
        self,
        key: str,
        position: int,
        priority: int,
        namespace: str,
        local_queue: str,
        pending_since: float,
        reason: str,
        message: str,
        expected_runtime: float | None = None,
        runtime_estimated: bool = False,
    ) -> None:
        self.key = key
        self.position = position
        self.priority = priority
        self.namespace = namespace
        self.local_queue = local_queue
        self.pending_since = pending_since
        self.reason = reason
        self.message = message
        self.expected_runtime = expected_runtime  # declared, or learned (runtime_estimated)
        self.runtime_estimated = runtime_estimated


class ClusterQueueView:
    """A ClusterQueue's status: active or why not, counts, usage per flavor × resource."""

    __slots__ = (
        "active",
        "admitted",
        "admitted_total",
        "borrowed",
        "cohort",
        "evicted_total",
        "inactive_reason",
        "name",
        "nominal",
        "pending_active",
        "pending_inadmissible",
        "preempted_total",
        "share",
        "usage",
    )

    def __init__(
        self,
        name: str,
        cohort: str | None,
        active: bool,
        inactive_reason: str,
        pending_active: int,
        pending_inadmissible: int,
        admitted: int,
        usage: dict[FlavorResource, int],
        nominal: dict[FlavorResource, int],
        borrowed: dict[FlavorResource, int],
        share: float,
        admitted_total: int,
        evicted_total: int,
        preempted_total: int,
    ) -> None:
        self.name = name
        self.cohort = cohort
        self.active = active
        self.inactive_reason = inactive_reason
        self.pending_active = pending_active
        self.pending_inadmissible = pending_inadmissible
        self.admitted = admitted
        self.usage = usage
        self.nominal = nominal
        self.borrowed = borrowed
        self.share = share
        self.admitted_total = admitted_total
        self.evicted_total = evicted_total
        self.preempted_total = preempted_total

    @property
    def pending(self) -> int:
        return self.pending_active + self.pending_inadmissible
