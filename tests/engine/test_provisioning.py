"""Node pools that grow (gangq/core/provisioning.py): the nodes an autoscaler pool may still add
count in the node check, a gang that fits only on them is admitted as ``Provisioning`` and keeps
that capacity until the pool's nodes appear, and a gang beyond the pool's limit waits naming it."""

from __future__ import annotations

from gangq.core import (
    Admission,
    Engine,
    FlavorSpec,
    NodeSpec,
    PodInfo,
    PodSetSpec,
    ProvisionerSpec,
    Taint,
    WorkloadSpec,
)
from gangq.core.errors import SpecError
from gangq.core.model import TopologyRequest, TopologySpec
from tests.engine.builders import GPU, add_queue, engine, quota

POOL_LABEL = {"pool": "gpu"}
NODE = {"cpu": 64_000, GPU: 8}


def gpu_pool(
    limit: int | None = 32, in_use: int = 0, labels: dict[str, str] | None = None, max_new_nodes: int = 32
) -> ProvisionerSpec:
    return ProvisionerSpec(
        "gpu",
        NODE,
        labels=labels or dict(POOL_LABEL),
        limits={GPU: limit} if limit is not None else None,
        in_use={GPU: in_use},
        max_new_nodes=max_new_nodes,
    )


def gang(key: str, pods: int, t: float = 0.0, topology: TopologyRequest | None = None) -> WorkloadSpec:
    return WorkloadSpec(
        f"ns/{key}", "ns", "q", [PodSetSpec("w", pods, {"cpu": 1000, GPU: 8}, topology=topology)], creation_time=t
    )


def setup(pool: ProvisionerSpec | None = None, topology: TopologySpec | None = None) -> Engine:
    e = engine()
    e.upsert_flavor(FlavorSpec("gpu", dict(POOL_LABEL), topology=topology))
    add_queue(e, "q", [quota("gpu", 1000, 1000)])
    if pool is not None:
        e.upsert_provisioner(pool)
    return e


def admission(decisions: list[object], key: str) -> Admission | None:
    return next((d for d in decisions if isinstance(d, Admission) and d.workload == f"ns/{key}"), None)


def karpenter_node(name: str, pool: str = "gpu", **labels: str) -> NodeSpec:
    return NodeSpec(name, NODE, {**POOL_LABEL, "karpenter.sh/nodepool": pool, **labels})


def message(e: Engine, key: str) -> str:
    view = e.workload(f"ns/{key}")
    assert view is not None
    return view.message


def test_without_a_pool_a_gang_bigger_than_the_nodes_waits() -> None:
    e = setup()
    e.upsert_node(NodeSpec("n0", NODE, dict(POOL_LABEL)))
    e.submit(gang("big", 2), 0.0)
    assert admission(e.schedule(1.0), "big") is None
    assert "only 1 of the 2 pods" in message(e, "big")


def test_a_pool_from_zero_admits_a_gang_as_provisioning_within_its_limit() -> None:
    e = setup(gpu_pool(limit=32))
    e.submit(gang("four", 4), 0.0)
    adm = admission(e.schedule(1.0), "four")
    assert adm is not None
    assert adm.provisioning == {"gpu": 4}
    assert "Provisioning: its pods wait for 4 new nodes of NodePool 'gpu'" in message(e, "four")


def test_a_gang_beyond_the_limit_waits_naming_the_limit() -> None:
    e = setup(gpu_pool(limit=32))
    e.submit(gang("five", 5), 0.0)
    assert admission(e.schedule(1.0), "five") is None
    text = message(e, "five")
    assert "only 4 of the 5 pods" in text, text
    assert "NodePool 'gpu' may add at most 4 nodes (its limit of 32 nvidia.com/gpu (0 in use))" in text, text


def test_provisioned_capacity_is_held_for_the_gang_until_its_nodes_appear() -> None:
    """A second gang is not admitted into nodes the first one's pods wait for; a node of the pool
    that appears takes over the planned pods, and once bound they are the gang's as usual."""
    e = setup(gpu_pool(limit=32))
    e.submit(gang("a", 3), 0.0)
    assert admission(e.schedule(1.0), "a") is not None
    e.submit(gang("b", 2), 2.0)
    assert admission(e.schedule(3.0), "b") is None
    assert "NodePool 'gpu' may add at most 4 nodes" in message(e, "b"), message(e, "b")
    # Karpenter made a node for one of a's pods: that node's capacity is a's, not b's.
    e.upsert_node(karpenter_node("k0"))
    assert admission(e.schedule(4.0), "b") is None
    e.update_pod(PodInfo("ns/a-0", "k0", {"cpu": 1000, GPU: 8}, workload="ns/a", pod_set="w", running=True))
    assert admission(e.schedule(5.0), "b") is None
    # a finishes before its other nodes appear: its provisional capacity is free again
    e.finish("ns/a", 5.5)
    e.delete_pod("ns/a-0")
    adm = admission(e.schedule(6.0), "b")
    assert adm is not None
    nodes = sorted(node for ps in adm.pod_sets for node in ps.placement)
    assert "k0" in nodes and adm.provisioning == {"gpu": 1}


def test_reported_use_and_nodes_that_exist_count_against_the_limit() -> None:
    e = setup(gpu_pool(limit=32, in_use=16))
    e.submit(gang("three", 3), 0.0)
    assert admission(e.schedule(1.0), "three") is None
    assert "may add at most 2 nodes (its limit of 32 nvidia.com/gpu (16 in use))" in message(e, "three")
    e.upsert_provisioner(gpu_pool(limit=32, in_use=0))
    for i in range(3):
        e.upsert_node(karpenter_node(f"k{i}"))
    for i in range(3):
        e.update_pod(PodInfo(f"other/{i}", f"k{i}", {"cpu": 1000, GPU: 8}, running=True))
    e.submit(gang("two", 2), 2.0)
    assert admission(e.schedule(3.0), "two") is None
    assert "may add at most 1 node (its limit of 32 nvidia.com/gpu (24 in use))" in message(e, "two")
    e.delete_node("k2")
    e.delete_pod("other/2")
    adm = admission(e.schedule(4.0), "two")
    assert adm is not None and adm.provisioning == {"gpu": 2}


def test_a_pool_whose_labels_or_taints_the_gang_cannot_use_adds_nothing() -> None:
    e = setup(ProvisionerSpec("cpu", {"cpu": 64_000}, labels={"pool": "cpu"}, limits={"cpu": 640_000}))
    e.submit(gang("g", 1), 0.0)
    assert admission(e.schedule(1.0), "g") is None
    assert "NodePool" not in message(e, "g")


def test_a_pool_without_limits_counts_up_to_its_max_new_nodes() -> None:
    e = setup(gpu_pool(limit=None, max_new_nodes=2))
    e.submit(gang("three", 3), 0.0)
    assert admission(e.schedule(1.0), "three") is None
    assert "gangq counts at most 2 new nodes of it" in message(e, "three")
    e.upsert_provisioner(gpu_pool(limit=None, max_new_nodes=3))
    assert admission(e.schedule(2.0), "three") is not None


def test_deleting_the_pool_takes_its_headroom_away() -> None:
    e = setup(gpu_pool(limit=32))
    e.delete_provisioner("gpu")
    e.submit(gang("one", 1), 0.0)
    assert admission(e.schedule(1.0), "one") is None


def test_new_nodes_count_in_the_topology_domain_their_labels_name() -> None:
    rack = "cloud.provider.com/topology-rack"
    topology = TopologySpec("default", [rack, "kubernetes.io/hostname"])
    e = setup(gpu_pool(limit=64, labels={**POOL_LABEL, rack: "r9"}), topology=topology)
    e.upsert_node(NodeSpec("n0", NODE, {**POOL_LABEL, rack: "r0", "kubernetes.io/hostname": "n0"}))
    e.submit(gang("pair", 2, topology=TopologyRequest("Required", rack)), 0.0)
    adm = admission(e.schedule(1.0), "pair")
    assert adm is not None
    (ps,) = adm.pod_sets
    assert ps.topology == {rack: "r9"} and adm.provisioning == {"gpu": 2}


def test_a_pool_that_offers_nothing_is_an_error_naming_it() -> None:
    e = setup()
    try:
        e.upsert_provisioner(ProvisionerSpec("empty", {}))
    except SpecError as err:
        assert "NodePool empty" in str(err) or "empty" in str(err)
    else:
        raise AssertionError("a pool whose nodes offer nothing was accepted")


def test_nodes_that_report_their_capacity_late_take_the_plan_over_and_nothing_outlives_the_limit() -> None:
    """Karpenter's nodes register tainted and without their GPUs, then report them; the gang's pods
    bind to other nodes than the ones the plan moved to. Once they have, and the gang finished,
    the pool counts what its limit leaves, not the provisional nodes of before: a gang of 5 is
    not admitted beyond the limit of 4 nodes (one of which a one-pod gang now uses)."""
    e = setup(gpu_pool(limit=32))
    e.submit(gang("train", 4), 0.0)
    adm = admission(e.schedule(1.0), "train")
    assert adm is not None and adm.provisioning == {"gpu": 4}
    unregistered = [Taint("karpenter.sh/unregistered", "", "NoExecute")]
    for i in range(4):
        e.upsert_node(NodeSpec(f"k{i}", {"cpu": 64_000}, {**POOL_LABEL, "karpenter.sh/nodepool": "gpu"}, unregistered))
    e.upsert_provisioner(gpu_pool(limit=32, in_use=32))
    for i in range(4):
        e.upsert_node(karpenter_node(f"k{i}"))
    assert not e.s.world.provisioning.virtual, "each node took a provisional node's planned pod over"
    e.submit(gang("other", 1), 1.5)
    assert admission(e.schedule(1.6), "other") is None, "the new nodes are the gang's"
    for i in range(4):
        pod = PodInfo(f"ns/train-{i}", f"k{(i + 1) % 4}", {"cpu": 1000, GPU: 8}, workload="ns/train", pod_set="w")
        e.update_pod(pod)
    e.schedule(2.0)
    e.finish("ns/train", 3.0)
    for i in range(4):
        e.delete_pod(f"ns/train-{i}")
    other = admission(e.schedule(3.5), "other")
    assert other is not None and not other.provisioning, "it runs on a node that exists"
    e.submit(gang("big", 5), 4.0)
    assert admission(e.schedule(4.0), "big") is None
    assert "may add no nodes (its limit of 32 nvidia.com/gpu (32 in use))" in message(e, "big")
    e.check_invariants()
