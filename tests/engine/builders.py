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

GPU = "nvidia.com/gpu"


def quota(flavor: str, cpu: int, gpu: int, gpu_borrow: int | None = None, gpu_lend: int | None = None) -> FlavorQuotas:
    return FlavorQuotas(
        flavor,
        [ResourceQuota("cpu", cpu * 1000), ResourceQuota(GPU, gpu, borrowing_limit=gpu_borrow, lending_limit=gpu_lend)],
    )


def engine(config: EngineConfig | None = None) -> Engine:
    e = Engine(config or EngineConfig(pods_ready_timeout=None))
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
