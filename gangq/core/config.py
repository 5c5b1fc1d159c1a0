"""Engine configuration: the knobs an admin sets once per installation."""

from __future__ import annotations

from typing import Any, Literal

RequeueTimestamp = Literal["Creation", "Eviction"]
TopologyFit = Literal["BestFit", "FirstFit"]


class EngineConfig:
    """Settings of the admission engine.

    - ``pods_ready_timeout``: seconds an admitted gang has to get ``minMember`` pods running before
      it is evicted (``None`` switches the check off).
    - ``backoff_base`` / ``backoff_max``: requeue delay after such an eviction, doubling per
      eviction; ``backoff_limit``: evictions after which the workload is deactivated (``None``: never).
    - ``requeue_timestamp``: where an evicted workload re-enters its queue: ``Creation`` keeps its
      original position, ``Eviction`` puts it behind everything queued before the eviction.
    - ``starvation_timeout``: seconds after which a blocked head that has no computable reservation
      (runners without runtime limits) stops anything in its scope from passing it.
    - ``fair_sharing``: order ClusterQueues in a cohort by weighted dominant-resource share and let
      reclaim prefer the queues with the largest share.
    - ``preemption_budget``: a gang that has already been evicted this many times is no longer
      chosen as a preemption victim, so it can run to completion (``None``: no limit, Kueue's
      behaviour). Bounds the work a gang can lose when higher-priority gangs keep reclaiming the
      capacity it is re-admitted into.
    - ``preemption_grace``: seconds after its last admission during which a gang that has been
      evicted before is chosen as a preemption victim only if no victim set without such gangs
      lets the preemptor in (0: no grace). See docs/engine.md, Preemption.
    - ``preemption_delay``: seconds a gang must have waited since it was queued (or requeued)
      before it may preempt (0: at once). Capacity often comes free on its own within moments —
      short gangs end, finishes and evictions the controller has not seen yet complete — and a
      preemption then kills a running job for room that was coming anyway. Meanwhile the gangs
      of its ClusterQueue that it could preempt are not admitted there. YuniKorn's
      ``preemption.delay`` has the same meaning. See docs/engine.md, Preemption.
    - ``preemption_shelter``: a gang preempted this many times is admitted again only where no
      gang waiting now could preempt it: not by borrowing, and in a ClusterQueue that preempts
      within itself only while its protected head could not preempt it, for at most the
      starvation timeout after its requeue; and it is no victim of a preemptor that has waited
      less than the starvation timeout (``None``: off). See docs/engine.md, Preemption.
    - ``topology_fit``: which domain a pod set with a topology request is placed in, of those that
      can hold it: ``BestFit`` (the one with the least room) or ``FirstFit`` (the first by label
      values: the baseline the simulator compares best fit with). See docs/engine.md, Topology.
    """

    __slots__ = (
        "backoff_base",
        "backoff_limit",
        "backoff_max",
        "fair_sharing",
        "pods_ready_timeout",
        "preemption_budget",
        "preemption_delay",
        "preemption_grace",
        "preemption_shelter",
        "requeue_timestamp",
        "starvation_timeout",
        "topology_fit",
    )

    def __init__(
        self,
        pods_ready_timeout: float | None = 300.0,
        backoff_base: float = 60.0,
        backoff_max: float = 3600.0,
        backoff_limit: int | None = None,
        requeue_timestamp: RequeueTimestamp = "Eviction",
        starvation_timeout: float = 1800.0,
        fair_sharing: bool = False,
        preemption_budget: int | None = None,
        preemption_grace: float = 300.0,
        preemption_shelter: int | None = 2,
        preemption_delay: float = 5.0,
        topology_fit: TopologyFit = "BestFit",
    ) -> None:
        if pods_ready_timeout is not None and pods_ready_timeout <= 0:
            raise ValueError("pods_ready_timeout must be positive or None")
        if backoff_base < 0 or backoff_max < backoff_base:
            raise ValueError("backoff_base must be >= 0 and backoff_max >= backoff_base")
        if backoff_limit is not None and backoff_limit < 0:
            raise ValueError("backoff_limit must be >= 0 or None")
        if requeue_timestamp not in ("Creation", "Eviction"):
            raise ValueError("requeue_timestamp must be Creation or Eviction")
        if starvation_timeout < 0:
            raise ValueError("starvation_timeout must be >= 0")
        self.pods_ready_timeout = pods_ready_timeout
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.backoff_limit = backoff_limit
        if preemption_budget is not None and preemption_budget < 1:
            raise ValueError("preemption_budget must be >= 1 or None")
        self.requeue_timestamp: RequeueTimestamp = requeue_timestamp
        self.starvation_timeout = starvation_timeout
        self.fair_sharing = fair_sharing
        self.preemption_budget = preemption_budget
        if preemption_grace < 0:
            raise ValueError("preemption_grace must be >= 0")
        self.preemption_grace = preemption_grace
        if preemption_shelter is not None and preemption_shelter < 1:
            raise ValueError("preemption_shelter must be >= 1 or None")
        self.preemption_shelter = preemption_shelter
        if preemption_delay < 0:
            raise ValueError("preemption_delay must be >= 0")
        self.preemption_delay = preemption_delay
        if topology_fit not in ("BestFit", "FirstFit"):
            raise ValueError("topology_fit must be BestFit or FirstFit")
        self.topology_fit: TopologyFit = topology_fit

    def replace(self, **changes: Any) -> EngineConfig:
        """A copy with ``changes`` (keyword arguments of the constructor), validated as new."""
        fields: dict[str, Any] = {name: getattr(self, name) for name in _FIELDS}
        fields.update(changes)
        return EngineConfig(**fields)


_FIELDS = (
    "pods_ready_timeout",
    "backoff_base",
    "backoff_max",
    "backoff_limit",
    "requeue_timestamp",
    "starvation_timeout",
    "fair_sharing",
    "preemption_budget",
    "preemption_grace",
    "preemption_shelter",
    "preemption_delay",
    "topology_fit",
)
"""The constructor's parameters, each kept as the attribute of that name."""
