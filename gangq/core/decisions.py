"""What the engine decides: admissions, evictions and pending-reason changes.

The shells (operator, simulator) turn these into API writes or simulated events. Every decision
is a plain value: the engine's state has already moved when it is returned.
"""

from __future__ import annotations

from typing import Literal

EvictionReason = Literal[
    "Preempted",
    "PodsReadyTimeout",
    "ClusterQueueStopped",
    "LocalQueueStopped",
    "InactiveClusterQueue",
    "Deactivated",
]

PendingReason = Literal[
    "Pending",  # not tried yet
    "LocalQueueNotFound",
    "ClusterQueueNotFound",
    "ClusterQueueInactive",
    "ClusterQueueStopped",
    "LocalQueueStopped",
    "NamespaceNotSelected",
    "NeverFits",  # requests more than the ClusterQueue could ever provide
    "InsufficientQuota",
    "InsufficientNodes",
    "InsufficientMinResources",
    "WaitingForPreemption",
    "BlockedByHead",  # StrictFIFO: a workload ahead blocks the queue
    "BlockedByReservation",  # a starving gang ahead holds a reservation
    "Backoff",
    "Deactivated",
]


class PodSetAssignment:
    """Where one pod set goes: the flavor per resource, the planned pods per node, and for a pod
    set placed by its topology request the labels of the one domain that holds its pods (every
    level from the top down to the deepest they share; empty otherwise), which its pods are given
    as a nodeSelector so that they land where the engine counted them."""

    __slots__ = ("count", "domains", "flavors", "name", "placement", "requests", "topology")

    def __init__(
        self,
        name: str,
        count: int,
        flavors: dict[str, str],
        requests: dict[str, int],
        placement: dict[str, int],
        topology: dict[str, str] | None = None,
        domains: list[tuple[dict[str, str], int]] | None = None,
    ) -> None:
        self.name = name
        self.count = count
        self.flavors = flavors
        self.requests = requests
        self.placement = placement
        self.topology: dict[str, str] = topology or {}
        # When the shared domain does not say enough (pods over several domains of the requested
        # level, or slices): each domain of that level with its pods, which the shell assigns
        # pod by pod (see gangq.core.topology.pod_domains).
        self.domains: list[tuple[dict[str, str], int]] = domains or []

    def __repr__(self) -> str:
        return (
            f"PodSetAssignment({self.name!r}, count={self.count}, flavors={self.flavors}, placement={self.placement})"
        )


class Admission:
    """Admit a whole gang: the ClusterQueue charged, the flavors assigned, the planned placement."""

    __slots__ = ("borrowing", "cluster_queue", "pod_sets", "provisioning", "time", "usage", "workload")

    def __init__(
        self,
        workload: str,
        cluster_queue: str,
        pod_sets: tuple[PodSetAssignment, ...],
        borrowing: bool,
        time: float,
        usage: dict[tuple[str, str], int],
        provisioning: dict[str, int] | None = None,
    ) -> None:
        self.workload = workload
        self.cluster_queue = cluster_queue
        self.pod_sets = pod_sets
        self.borrowing = borrowing
        self.time = time
        self.usage = usage  # (flavor, resource) -> quantity charged to the ClusterQueue
        # Autoscaler pool -> the nodes it must add for the gang's planned pods (empty: none; see
        # gangq.core.provisioning). Its pods stay pending until those nodes appear.
        self.provisioning: dict[str, int] = provisioning or {}

    def __repr__(self) -> str:
        return (
            f"Admission({self.workload!r} -> {self.cluster_queue!r}, borrowing={self.borrowing}, {list(self.pod_sets)})"
        )


class Eviction:
    """Stop an admitted gang (suspend it) and requeue it, or deactivate it.

    The gang keeps its quota until the shell reports that it stopped (``Engine.eviction_done``).
    """

    __slots__ = ("cluster_queue", "deactivated", "message", "preemptor", "reason", "requeue_at", "time", "workload")

    def __init__(
        self,
        workload: str,
        cluster_queue: str,
        reason: EvictionReason,
        message: str,
        time: float,
        preemptor: str | None = None,
        requeue_at: float | None = None,
        deactivated: bool = False,
    ) -> None:
        self.workload = workload
        self.cluster_queue = cluster_queue
        self.reason: EvictionReason = reason
        self.message = message
        self.time = time
        self.preemptor = preemptor
        self.requeue_at = requeue_at
        self.deactivated = deactivated

    def __repr__(self) -> str:
        return f"Eviction({self.workload!r}, {self.reason}, {self.message!r})"


class PendingUpdate:
    """A pending workload's reason or message changed (emitted only on change)."""

    __slots__ = ("cluster_queue", "message", "reason", "time", "workload")

    def __init__(
        self, workload: str, cluster_queue: str | None, reason: PendingReason, message: str, time: float
    ) -> None:
        self.workload = workload
        self.cluster_queue = cluster_queue
        self.reason: PendingReason = reason
        self.message = message
        self.time = time

    def __repr__(self) -> str:
        return f"PendingUpdate({self.workload!r}, {self.reason}, {self.message!r})"


Decision = Admission | Eviction | PendingUpdate
