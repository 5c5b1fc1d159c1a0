"""Small builders for engine tests: a cluster with flavors, cohorts, queues and nodes."""

from __future__ import annotations

from gangq.core import (
    ClusterQueueSpec,
    Engine,
    EngineConfig,
    FlavorQuotas,
    FlavorSpec,
    LabelSelector,
    LocalQueueSpec,
    NodeSpec,
    PodSetSpec,
    PreemptionSpec,
    ResourceGroup,
    ResourceQuota,
    WorkloadSpec,
)
from gangq.core.placement import Placement

GPU = "nvidia.com/gpu"


def quota(flavor: str, cpu: int, gpu: int, gpu_borrow: int | None = None, gpu_lend: int | None = None) -> FlavorQuotas:
    return FlavorQuotas(
        flavor,
        [ResourceQuota("cpu", cpu * 1000), ResourceQuota(GPU, gpu, borrowing_limit=gpu_borrow, lending_limit=gpu_lend)],
    )


def engine(config: EngineConfig | None = None) -> Engine:
    """An engine for rule tests: no pods-ready timeout, and gangs may preempt as soon as they
    wait (the preemption delay has tests of its own)."""
    e = Engine(config or EngineConfig(pods_ready_timeout=None, preemption_delay=0))
    e.upsert_namespace("ns", {})
    return e


def add_queue(
    e: Engine,
    name: str,
    flavors: list[FlavorQuotas],
    cohort: str | None = None,
    strategy: str = "BestEffortFIFO",
    preemption: PreemptionSpec | None = None,
    mode: str = "QuotaAndNodes",
    weight: float = 1.0,
) -> None:
    e.upsert_cluster_queue(
        ClusterQueueSpec(
            name,
            [ResourceGroup(["cpu", GPU], flavors)],
            cohort=cohort,
            queueing_strategy=strategy,  # type: ignore[arg-type]
            namespace_selector=LabelSelector(),
            preemption=preemption,
            admission_mode=mode,  # type: ignore[arg-type]
            fair_sharing_weight=weight,
        )
    )
    e.upsert_local_queue(LocalQueueSpec("ns", name, name))


def add_nodes(e: Engine, flavor: str, count: int, cpu: int = 64, gpu: int = 8, prefix: str | None = None) -> None:
    e.upsert_flavor(FlavorSpec(flavor, {"pool": flavor}))
    for i in range(count):
        e.upsert_node(NodeSpec(f"{prefix or flavor}-{i}", {"cpu": cpu * 1000, GPU: gpu}, {"pool": flavor}))


def gang(
    key: str,
    queue: str,
    pods: int,
    gpu: int,
    cpu: int = 1,
    priority: int = 0,
    t: float = 0.0,
    min_member: int | None = None,
    runtime: float | None = None,
) -> WorkloadSpec:
    return WorkloadSpec(
        f"ns/{key}",
        "ns",
        queue,
        [PodSetSpec("w", pods, {"cpu": cpu * 1000, GPU: gpu})],
        priority=priority,
        creation_time=t,
        min_member=min_member,
        runtime_limit=runtime,
    )


def admitted(decisions: list[object]) -> list[str]:
    from gangq.core import Admission

    return [d.workload.removeprefix("ns/") for d in decisions if isinstance(d, Admission)]


def evicted(decisions: list[object]) -> list[str]:
    from gangq.core import Eviction

    return [d.workload.removeprefix("ns/") for d in decisions if isinstance(d, Eviction)]


def hold_back_behind_starving_head(e: Engine) -> None:
    """In queues ``a`` (8 GPUs) and ``b`` (none) of one cohort: a's r takes 6 GPUs, a's h (4, at
    t=1) waits and starves (with a starvation timeout under 19 s), and b's g (2, at t=20), which
    would borrow a's 2 free GPUs, is held back by h's reservation."""
    e.submit(gang("r", "a", 1, 6), 0)
    assert admitted(e.schedule(0)) == ["r"]
    e.submit(gang("h", "a", 1, 4, t=1), 1)
    assert admitted(e.schedule(1)) == []
    submit_gang_held_back_by_h(e)


def submit_gang_held_back_by_h(e: Engine) -> None:
    """b's g (2 GPUs, at t=20) waits, held back by the reservation of the starving gang h."""
    e.submit(gang("g", "b", 1, 2, t=20), 20)
    assert admitted(e.schedule(20)) == []
    g = e.workload("ns/g")
    assert g is not None and g.reason == "BlockedByReservation" and g.message.startswith("ns/h has waited"), g.message


def assert_preempts_then_admitted(e: Engine, t: float, preemptor: str, victims: list[str], others: list[str]) -> None:
    """At ``t`` the scheduling call evicts ``victims`` for ``preemptor`` and admits ``others``;
    once the victims have stopped (at ``t + 1``), ``preemptor`` is admitted."""
    decisions = e.schedule(t)
    assert evicted(decisions) == victims
    assert admitted(decisions) == others
    wl = e.workload(f"ns/{preemptor}")
    assert wl is not None and wl.reason == "WaitingForPreemption", wl.message
    for victim in victims:
        e.eviction_done(f"ns/{victim}", t + 1)
    assert admitted(e.schedule(t + 1)) == [preemptor]


def add_lender_and_preempting_queue(e: Engine, lender: str, lender_gpu: int, queue: str, queue_gpu: int) -> None:
    """Two queues of cohort ``pool`` in flavor ``a100``: ``lender``, and ``queue``, which may
    preempt its own lower-priority gangs."""
    add_queue(e, lender, [quota("a100", 64, lender_gpu)], cohort="pool")
    add_queue(
        e,
        queue,
        [quota("a100", 64, queue_gpu)],
        cohort="pool",
        preemption=PreemptionSpec(within_cluster_queue="LowerPriority"),
    )


def use_placement(e: Engine, placement: Placement) -> None:
    """Make ``placement`` (a subclass that counts or records) the one every rule module of ``e``
    asks; compiled or not, the modules call its overrides."""
    for module in (e, e.claims, e.reservations, e.retry, e.preemption, e.attempt, e.reasons):
        module.placement = placement  # type: ignore[misc]
