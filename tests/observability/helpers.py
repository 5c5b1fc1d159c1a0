"""A small engine world for the observability tests: one cohort, two ClusterQueues, GPU nodes."""

from __future__ import annotations

from gangq.core import (
    ClusterQueueSpec,
    CohortSpec,
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


def world(config: EngineConfig | None = None, nodes: int = 4) -> Engine:
    """Cohort ``pool`` (2 GPUs of its own) with ClusterQueues ``a`` (8 GPUs, borrows up to 4) and
    ``b`` (8 GPUs, lends at most 2, reclaims lent quota); ``nodes`` nodes of 8 GPUs. Gangs preempt
    as soon as they wait (no preemption delay)."""
    e = Engine(config or EngineConfig(pods_ready_timeout=None, preemption_delay=0))
    e.upsert_namespace("ns", {})
    e.upsert_flavor(FlavorSpec("a100", {"pool": "a100"}))
    e.upsert_cohort(
        CohortSpec(
            "pool",
            resource_groups=[
                ResourceGroup(["cpu", GPU], [FlavorQuotas("a100", [ResourceQuota("cpu", 0), ResourceQuota(GPU, 2)])])
            ],
        )
    )
    reclaim = PreemptionSpec(reclaim_within_cohort="Any")
    for name, borrow, lend in (("a", 4, None), ("b", None, 2)):
        gpus = ResourceQuota(GPU, 8, borrowing_limit=borrow, lending_limit=lend)
        e.upsert_cluster_queue(
            ClusterQueueSpec(
                name,
                [ResourceGroup(["cpu", GPU], [FlavorQuotas("a100", [ResourceQuota("cpu", 64_000), gpus])])],
                cohort="pool",
                namespace_selector=LabelSelector(),
                preemption=reclaim,
            )
        )
        e.upsert_local_queue(LocalQueueSpec("ns", name, name))
    for i in range(nodes):
        e.upsert_node(NodeSpec(f"n{i}", {"cpu": 64_000, GPU: 8}, {"pool": "a100"}))
    return e


def gang(
    name: str, queue: str, pods: int, gpu: int, t: float = 0.0, priority: int = 0, priority_class: str = ""
) -> WorkloadSpec:
    return WorkloadSpec(
        f"ns/{name}",
        "ns",
        queue,
        [PodSetSpec("w", pods, {"cpu": 1000, GPU: gpu})],
        priority=priority,
        creation_time=t,
        priority_class=priority_class,
    )
