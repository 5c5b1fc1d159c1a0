"""The engine's record of one workload (gang) through its life: pending → admitted → evicting → ..."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from gangq.core.decisions import Admission, PendingReason
from gangq.core.flavors import FlavorOptions
from gangq.core.model import FlavorResource, WorkloadSpec

if TYPE_CHECKING:
    from gangq.core.queue import ClusterQueueState

State = Literal["Pending", "Admitted", "Evicting", "Finished"]

# A placement kept for reuse (Engine._place): (the state it was found in: node epoch, config
# version, pools version, flavor option), the node charges (node, requests, pods), the pods per
# (pod set, node), how many pods.
Placed = tuple[tuple[int, int, int, int], list[tuple[Any, Any, int]], dict[tuple[int, str], int], int]

# A gang's place in its queue: (-priority, queue timestamp, sequence number, key). Typed as a
# plain tuple on purpose: mypyc keeps a fixed-shape tuple type unboxed in locals, so every
# key read out of a queue, a demand index or a heap would be type-checked field by field and
# boxed again on the way back (a cache miss per field in a deep queue, and an allocation).
OrderKey = tuple[Any, ...]


class NodeMark:
    """What a gang's last failed node check proved, for a retry filter: at capacity mark
    ``freed_seq`` (``NodeIndex.freed_seq``) the nodes were ``shortfall`` pods short for each of
    the flavor ``options`` (indices into the gang's flavor options of ``config``); only nodes of
    ``pools`` (ids, while the set of pools is ``pools_version``) could take its pods.

    It stays sound however long ago it was made: nodes whose capacity did not rise since then can
    take no more of its pods than they could, so only the nodes freed since can add any. A check
    that finds them still too few moves it forward (Engine._mark_holds).
    """

    __slots__ = ("config", "freed_seq", "options", "pools", "pools_version", "shortfall")

    def __init__(
        self,
        freed_seq: int,
        shortfall: int,
        config: tuple[int, str],
        options: frozenset[int],
        pools: frozenset[int] = frozenset(),
        pools_version: int = -1,
    ) -> None:
        self.freed_seq = freed_seq
        self.shortfall = shortfall
        self.config = config
        self.options = options
        self.pools = pools
        self.pools_version = pools_version


class Workload:
    """Mutable engine state of a gang. Only the engine changes it."""

    __slots__ = (
        "admission",
        "admit_count",
        "admitted_at",
        "beyond",
        "choices",
        "cites",
        "cq",
        "deactivated",
        "emitted",
        "end_time",
        "evict_requeue_at",
        "held",
        "key",
        "lq_key",
        "message",
        "min_member",
        "node_mark",
        "order_key",
        "pending_since",
        "placement",
        "planned",
        "pods",
        "pods_ready",
        "queue_ts",
        "queued",
        "ready_evictions",
        "reason",
        "requeue_at",
        "running",
        "seq",
        "spec",
        "state",
        "totals",
        "usage",
        "victims",
    )

    def __init__(self, spec: WorkloadSpec, seq: int, now: float) -> None:
        self.spec = spec
        self.key = spec.key
        self.seq = seq
        self.state: State = "Pending"
        self.queue_ts = spec.creation_time
        self.order_key: OrderKey = (-spec.priority, self.queue_ts, seq, spec.key)
        self.cq: ClusterQueueState | None = None
        self.queued: Literal["active", "inadmissible"] | None = None
        self.reason: PendingReason = "Pending"
        self.message = "waiting for the first scheduling cycle"
        self.emitted: tuple[str, str] | None = None
        # The gang its pending reason names as what holds it back (the head whose reservation it
        # would delay, the claimant whose claim keeps it from borrowing): see Engine._set_reason.
        self.cites: Workload | None = None
        self.admission: Admission | None = None
        self.admitted_at = 0.0
        self.usage: dict[FlavorResource, int] = {}
        # Node capacity this gang holds: planned-but-unbound pods and bound pods, per node.
        self.held: dict[str, dict[str, int]] = {}
        # Planned, not yet bound pods: (pod set index, node) -> count.
        self.planned: dict[tuple[int, str], int] = {}
        self.running = 0
        self.pods_ready = False
        self.ready_evictions = 0
        self.requeue_at: float | None = None
        self.deactivated = False
        self.evict_requeue_at: float | None = None
        self.pending_since = now
        totals: dict[str, int] = {}
        for ps in spec.pod_sets:
            for resource, amount in ps.requests.items():
                totals[resource] = totals.get(resource, 0) + amount * ps.count
        self.totals = totals
        self.min_member = spec.min_member if spec.min_member is not None else spec.total_pods
        self.admit_count = 0
        self.end_time: float | None = None
        self.lq_key = f"{spec.namespace}/{spec.queue_name}"
        # Its pods bound to nodes (Engine.update_pod), each with whether it holds node capacity for
        # the gang (``held``): bound while the gang was admitted. One bound before the admission
        # (a JobSet that arrived unsuspended) uses its node like any other pod.
        self.pods: dict[str, bool] = {}
        # Gangs this one preempted (see Engine._reservation): their capacity is promised to it.
        self.victims: tuple[str, ...] = ()
        # (config version, ClusterQueue name, flavor options): see flavors.flavor_options.
        self.choices: tuple[int, str, FlavorOptions] | None = None
        # (config version, ClusterQueue name, per flavor option the flavor-resources it needs
        # more of than the queue's nominal quota; None if some option needs none): see
        # Engine._kept_out.
        self.beyond: tuple[int, str, tuple[tuple[FlavorResource, ...], ...] | None] | None = None
        # After a failed node check of a one-pod-set gang: see NodeMark.
        self.node_mark: NodeMark | None = None
        # Its last placement that fitted every pod: see Engine._place.
        self.placement: Placed | None = None

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def creation_time(self) -> float:
        return self.spec.creation_time

    def set_queue_ts(self, ts: float) -> None:
        self.queue_ts = ts
        self.order_key = (-self.spec.priority, ts, self.seq, self.key)

    def hold(self, node: str, requests: dict[str, int], count: int) -> None:
        """Record ``count`` pods of ``requests`` held on ``node`` (negative releases)."""
        held = self.held.setdefault(node, {})
        for resource, amount in requests.items():
            held[resource] = held.get(resource, 0) + amount * count
        if all(v == 0 for v in held.values()):
            del self.held[node]
