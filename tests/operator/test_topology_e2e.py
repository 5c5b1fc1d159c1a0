"""On both control planes, 8 nodes of 8 GPUs in 2 blocks × 2 racks × 2 hosts: a gang that requires
one rack runs with every pod in one rack; a gang that requires one block waits, with a reason
naming the block level, while pods outside any queue hold one rack of each block, and runs inside
one block once they are gone. No gang ever runs split."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.operator.helpers import (
    Cluster,
    FakeJobSetRunner,
    admitted,
    apply,
    cluster_queue,
    install,
    jobset,
    local_queue,
    start_operator,
    wait_for,
    workload_status,
)

BLOCK = "example.com/topology-block"
RACK = "example.com/topology-rack"
GPU = "nvidia.com/gpu"
NODES = ";".join(
    f"b{b}r{r}@2x{{cpu:16,memory:64Gi,nvidia.com/gpu:8}}[pool=tas,{BLOCK}=b{b},{RACK}=b{b}r{r}]"
    for b in range(2)
    for r in range(2)
)


def _topology_jobset(name: str, pods: int, level: str) -> dict[str, Any]:
    js = jobset(name, "lq", parallelism=pods, requests={"cpu": 1, GPU: 8}, run_seconds=120)
    template = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    template["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] = level
    return js


def _outside_pod(node: str) -> dict[str, Any]:
    """A pod of no queue, bound to ``node``, that takes all its GPUs."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"outside-{node}", "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1", GPU: "8"},
                                                                            "limits": {GPU: "8"}}}],
        },
    }


def _nodes_of(sb: Cluster, name: str) -> list[str]:
    pods = sb.call(sb.store.list, "", "pods", "default",
                   label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")["items"]
    return sorted(p["spec"].get("nodeName") or "" for p in pods)


def test_required_rack_and_block_placements(cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(nodes=NODES)
    install(sb)
    levels = [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]
    topology = {"apiVersion": "gangq.io/v1alpha1", "kind": "Topology", "metadata": {"name": "t47-fleet"},
                "spec": {"levels": levels}}
    flavor = {"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "t47-fleet"},
              "spec": {"nodeLabels": {"pool": "tas"}, "topologyName": "t47-fleet"}}
    apply(sb, [topology, flavor,
               cluster_queue("fleet", {"cpu": 128, "memory": "512Gi", GPU: 64}, flavor="t47-fleet"),
               local_queue("lq", "fleet")])
    # One rack of each block is taken by pods outside any queue.
    outside = ["b0r0-0", "b0r0-1", "b1r1-0", "b1r1-1"]
    for node in outside:
        sb.call(sb.store.create, "", "pods", _outside_pod(node), namespace="default")
    op = start_operator(sb)
    try:
        with FakeJobSetRunner(sb):
            apply(sb, [_topology_jobset("rack2", 2, RACK)])
            wait_for(lambda: admitted(sb, "rack2"), 20, "the rack gang to be admitted")
            nodes = wait_for(lambda: (n := _nodes_of(sb, "rack2")) and len(n) == 2 and all(n) and n, 30,
                             "the rack gang's pods to be bound")
            assert len({node.split("-")[0] for node in nodes}) == 1, f"the rack gang runs split: {nodes}"

            apply(sb, [_topology_jobset("block4", 4, BLOCK)])
            status = wait_for(lambda: (s := workload_status(sb, "block4")) and "in one block" in
                              str(s.get("message", "")) and s, 20, "the block gang's reason")
            assert "at most 2 fit in one" in status["message"], status
            assert not admitted(sb, "block4")

            for node in outside:
                sb.call(sb.store.delete, "", "pods", "default", f"outside-{node}", grace_period_seconds=0)
            wait_for(lambda: admitted(sb, "block4"), 30, "the block gang to be admitted once the rack is free")
            nodes = wait_for(lambda: (n := _nodes_of(sb, "block4")) and len(n) == 4 and all(n) and n, 30,
                             "the block gang's pods to be bound")
            assert len({node[:2] for node in nodes}) == 1, f"the block gang runs split: {nodes}"
            assert len({node.split("-")[0] for node in _nodes_of(sb, "rack2")}) == 1
    finally:
        op.stop()


def test_slices_give_each_pod_its_rack(cluster_factory: Callable[..., Cluster]) -> None:
    """A pod set in one block, in slices of 2 pods per rack, spans two racks: the shared domain (the
    block) says too little, so its pods are created gated (``gangq.io/topology``), and gangq gives
    each pod one of the admission's racks — no rack more pods than the engine planned there —
    before the scheduler binds it."""
    sb = cluster_factory(nodes=NODES)
    install(sb)
    levels = [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]
    apply(sb, [{"apiVersion": "gangq.io/v1alpha1", "kind": "Topology", "metadata": {"name": "t47-slices"},
                "spec": {"levels": levels}},
               {"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "t47-slices"},
                "spec": {"nodeLabels": {"pool": "tas"}, "topologyName": "t47-slices"}},
               cluster_queue("slices", {"cpu": 128, "memory": "512Gi", GPU: 64}, flavor="t47-slices"),
               local_queue("lq", "slices")])
    js = _topology_jobset("sliced", 4, BLOCK)
    annotations = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"]
    annotations["kueue.x-k8s.io/podset-slice-required-topology"] = RACK
    annotations["kueue.x-k8s.io/podset-slice-size"] = "2"
    op = start_operator(sb)
    try:
        with FakeJobSetRunner(sb):
            apply(sb, [js])
            wait_for(lambda: admitted(sb, "sliced"), 20, "the sliced gang to be admitted")
            status = wait_for(lambda: (s := workload_status(sb, "sliced")).get("admission") and s, 20,
                              "the sliced gang's admission on its Workload")
            (assignment,) = status["admission"]["podSetAssignments"]
            topo = assignment["topologyAssignment"]
            assert topo["levels"] == [BLOCK, RACK], topo
            assert sorted(d["count"] for d in topo["domains"]) == [2, 2], topo
            planned = {d["values"][1]: d["count"] for d in topo["domains"]}

            def bound() -> list[dict[str, Any]]:
                pods = sb.call(sb.store.list, "", "pods", "default",
                               label_selector="jobset.sigs.k8s.io/jobset-name=sliced")["items"]
                return pods if len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods) else []

            pods = wait_for(bound, 30, "the sliced gang's pods bound")
            per_rack: dict[str, int] = {}
            for pod in pods:
                assert not [g for g in pod["spec"].get("schedulingGates") or [] if g["name"] == "gangq.io/topology"]
                rack = pod["spec"]["nodeSelector"][RACK]
                assert pod["spec"]["nodeName"].startswith(rack), (rack, pod["spec"]["nodeName"])
                per_rack[rack] = per_rack.get(rack, 0) + 1
            assert per_rack == planned, (per_rack, planned)
    finally:
        op.stop()
