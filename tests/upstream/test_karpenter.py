"""Karpenter (``sigs.k8s.io/karpenter`` v1.14.1 with its kwok cloud provider, built from
``hack/upstream/karpenter``) autoscales kwok nodes beside the real control plane.

A NodePool starts at zero nodes: on-demand instances of the type ``gpu-8x-amd64-linux`` (8
nvidia.com/gpu, 64 cpu, 512Gi: an instance-types file of ours, the provider's own types have no
GPU), limited to 32 GPUs, empty nodes consolidated 2 s after their last pod left. Five pods of 8
GPUs each, pinned to the pool's label, are pending for lack of nodes. Karpenter creates four
NodeClaims, their kwok nodes become Ready, Karpenter counts them initialized and the scheduler
binds four pods; the fifth stays pending (the pool's limit holds, through further provisioning
rounds). Once the pods are deleted Karpenter consolidates the empty nodes away.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangq.controlplane import karpenter
from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC
from tests.clusters import RealCluster
from tests.controlplane.kube import get, wait_for

from .beside import operator_binary
from .operators import KARPENTER_NODES, karpenter_autoscaler

NS = "karpenter-test"
POOL = "gpu"
POOL_LABEL = {"gangq.io/test-pool": "karpenter-gpu"}
INSTANCE_TYPE = "gpu-8x-amd64-linux"
GPU_LIMIT = 32
NODES = "1x{cpu:4,memory:16Gi}"
"""One node outside any NodePool: the pods fit only on nodes Karpenter makes."""


@pytest.fixture(scope="session")
def karpenter_binary() -> Path:
    """Karpenter's kwok provider, built from its pin when missing."""
    return operator_binary("karpenter", karpenter.BINARY)


@pytest.fixture
def cluster(real_cluster: RealCluster, karpenter_binary: Path, tmp_path: Path) -> Iterator[RealCluster]:
    real_cluster.reset(NODES)
    cp = real_cluster.cp
    try:
        with karpenter_autoscaler(cp, karpenter_binary, tmp_path / "karpenter"):
            real_cluster.store.create("", "namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": NS}})
            wait_for(lambda: get(cp, f"/api/v1/namespaces/{NS}/serviceaccounts/default"), 30, "the default SA")
            try:
                yield real_cluster
            finally:  # the pods first, so that Karpenter can take the nodes away
                for pod in real_cluster.store.list("", "pods", NS)["items"]:
                    real_cluster.store.delete("", "pods", NS, pod["metadata"]["name"])
    finally:
        real_cluster.reset(DEFAULT_NODE_SPEC)


def gpu_pod(name: str) -> dict[str, Any]:
    """A pod of 8 GPUs that runs until deleted, on the pool's nodes only."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name,
                                                            "annotations": {"sandbox.gangq.io/run-seconds": "-1"}},
            "spec": {"nodeSelector": dict(POOL_LABEL), "terminationGracePeriodSeconds": 0, "containers": [
                {"name": "train", "image": "trainer:latest",
                 "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}]}}


def condition(obj: dict[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def test_a_nodepool_from_zero_provisions_gpu_nodes_within_its_limit_and_consolidates_them(
        cluster: RealCluster) -> None:
    cp, store = cluster.cp, cluster.store
    karpenter.kubectl_apply(cp.kubectl, cp.kubeconfig("admin"), [karpenter.node_pool(
        POOL, labels=POOL_LABEL, limits={"nvidia.com/gpu": str(GPU_LIMIT)}, consolidate_after="2s",
        instance_type=INSTANCE_TYPE)])
    wait_for(lambda: condition(store.get("karpenter.sh", "nodepools", None, POOL), "Ready"), 30, "the NodePool Ready")
    assert store.list("", "nodes", label_selector=KARPENTER_NODES)["items"] == []

    names = [f"gpu-{i}" for i in range(5)]
    for name in names:
        store.create("", "pods", gpu_pod(name), namespace=NS)
    started = time.monotonic()

    def running() -> list[dict[str, Any]]:
        return [p for p in store.list("", "pods", NS)["items"] if p["status"].get("phase") == "Running"]

    wait_for(lambda: len(running()) == 4, 60, "four pods running on nodes Karpenter made")
    scale_up = time.monotonic() - started
    claims = store.list("karpenter.sh", "nodeclaims")["items"]
    assert len(claims) == 4, [c["metadata"]["name"] for c in claims]
    wait_for(lambda: all(condition(c, "Initialized") for c in store.list("karpenter.sh", "nodeclaims")["items"]),
             30, "Karpenter to count its four nodes initialized")
    claims = store.list("karpenter.sh", "nodeclaims")["items"]  # as initialized: each names its node
    nodes = {n["metadata"]["name"]: n for n in store.list("", "nodes", label_selector=KARPENTER_NODES)["items"]}
    assert sorted(nodes) == sorted(c["status"]["nodeName"] for c in claims)
    for node in nodes.values():
        labels = node["metadata"]["labels"]
        assert labels[KARPENTER_NODES] == POOL and labels["node.kubernetes.io/instance-type"] == INSTANCE_TYPE
        assert labels["gangq.io/test-pool"] == POOL_LABEL["gangq.io/test-pool"]
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert condition(node, "Ready")
        assert not [t for t in node["spec"].get("taints") or [] if t["effect"] in ("NoSchedule", "NoExecute")]
    bound = [p["spec"]["nodeName"] for p in running()]
    assert sorted(bound) == sorted(nodes), "one pod of 8 GPUs on each new node"

    # the fifth pod needs a fifth node, beyond the pool's 32 GPUs: it stays pending through
    # Karpenter's next provisioning rounds (every 10 s while pods are pending)
    (pending,) = [p for p in store.list("", "pods", NS)["items"] if not p["spec"].get("nodeName")]
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        assert len(store.list("karpenter.sh", "nodeclaims")["items"]) == 4
        assert not store.get("", "pods", NS, pending["metadata"]["name"])["spec"].get("nodeName")
        time.sleep(1)
    name = pending["metadata"]["name"]
    events = store.list("", "events", NS, field_selector=f"involvedObject.name={name}")["items"]
    said = [e["message"] for e in events if e.get("source", {}).get("component") == "karpenter"
            or e.get("reportingComponent") == "karpenter"]
    assert any(f"exceed limits for nodepool (NodePool={POOL})" in m for m in said), [e["message"] for e in events]
    pool = store.get("karpenter.sh", "nodepools", None, POOL)
    assert pool["status"]["resources"]["nvidia.com/gpu"] == str(GPU_LIMIT)
    assert pool["status"]["resources"]["nodes"] == "4"

    for name in names:
        store.delete("", "pods", NS, name)
    wait_for(lambda: not store.list("", "pods", NS)["items"], 30, "the pods gone")
    emptied = time.monotonic()
    wait_for(lambda: not store.list("karpenter.sh", "nodeclaims")["items"]
             and not store.list("", "nodes", label_selector=KARPENTER_NODES)["items"], 120,
             "Karpenter to consolidate the empty nodes away")
    consolidated = time.monotonic() - emptied
    assert [n["metadata"]["name"] for n in store.list("", "nodes")["items"]] == ["node-0"]
    print(f"scale-up to 4 running pods {scale_up:.1f} s, consolidation of the 4 empty nodes {consolidated:.1f} s")
