"""gangq admits gangs onto nodes a Karpenter NodePool will add (Karpenter v1.14.1 with its kwok
provider, built from ``hack/upstream/karpenter``, on the real control plane).

The NodePool starts at zero nodes, makes nodes of 8 nvidia.com/gpu (``gpu-8x-amd64-linux``), is
limited to 32 GPUs and says what one of its nodes offers in ``gangq.io/node-resources``. A JobSet
of 4 pods × 8 GPUs — more than the nodes that exist — is admitted as ``Provisioning``, its pods
wait pending, Karpenter provisions four nodes for them, the gang runs and completes, and Karpenter
consolidates the empty nodes away. A JobSet of 5 × 8 GPUs, beyond the pool's limit, waits with a
reason that names the limit, and stays suspended (Karpenter adds no node for it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangq.api.nodepools import NODE_RESOURCES
from gangq.controlplane import karpenter
from gangq.sandbox.errors import ApiError
from tests.clusters import RealCluster
from tests.controlplane.kube import wait_for
from tests.operator.helpers import jobset

from .beside import gangq_beside, operator_binary
from .operators import KARPENTER_NODES, karpenter_autoscaler

NS = "karpenter-queue"
POOL = "gpu"
FLAVOR_POOL = "kgpu"
INSTANCE_TYPE = "gpu-8x-amd64-linux"
GPU = "nvidia.com/gpu"
NODES = "1x{cpu:4,memory:16Gi}"
"""One node outside the flavor's pool: a gang's pods fit only on nodes Karpenter makes."""


@pytest.fixture(scope="session")
def karpenter_binary() -> Path:
    return operator_binary("karpenter", karpenter.BINARY)


def _delete_jobsets(store: Any) -> None:
    for obj in store.list("jobset.x-k8s.io", "jobsets", NS)["items"]:
        with contextlib.suppress(ApiError):
            store.delete("jobset.x-k8s.io", "jobsets", NS, obj["metadata"]["name"], propagation_policy="Background")
    wait_for(lambda: not store.list("", "pods", NS)["items"], 60, "the test's pods gone")


@pytest.fixture
def cluster(real_cluster: RealCluster, karpenter_binary: Path, tmp_path: Path) -> Iterator[RealCluster]:
    operators = [karpenter_autoscaler(real_cluster.cp, karpenter_binary, tmp_path / "karpenter")]
    with gangq_beside(real_cluster, tmp_path, namespace=NS, nodes=NODES, pool=FLAVOR_POOL, crds=[],
                      operators=operators, cleanup=_delete_jobsets,
                      quota={"cpu": "64", "memory": "64Gi", GPU: "64"}) as cluster:
        yield cluster


def gpu_jobset(name: str, pods: int, run_seconds: float) -> dict[str, Any]:
    return jobset(name, "user-queue", ns=NS, parallelism=pods, requests={"cpu": 1, GPU: 8}, run_seconds=run_seconds)


def workload(store: Any, name: str) -> dict[str, Any]:
    return store.get("gangq.io", "workloads", NS, f"jobset-{name}")


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), None)


def is_true(obj: dict[str, Any], ctype: str) -> bool:
    c = condition(obj, ctype)
    return c is not None and c.get("status") == "True"


def karpenter_nodes(store: Any) -> list[dict[str, Any]]:
    return list(store.list("", "nodes", label_selector=KARPENTER_NODES)["items"])


def test_a_gang_bigger_than_the_nodes_is_admitted_as_provisioning_and_runs_on_the_nodes_karpenter_adds(
        cluster: RealCluster) -> None:
    cp, store = cluster.cp, cluster.store
    karpenter.kubectl_apply(cp.kubectl, cp.kubeconfig("admin"), [karpenter.node_pool(
        POOL, labels={"pool": FLAVOR_POOL}, limits={GPU: "32"}, consolidate_after="2s", instance_type=INSTANCE_TYPE,
        annotations={NODE_RESOURCES: "nvidia.com/gpu=8,cpu=60,memory=480Gi"})])
    wait_for(lambda: is_true(store.get("karpenter.sh", "nodepools", None, POOL), "Ready"), 30, "the NodePool Ready")
    assert karpenter_nodes(store) == []

    store.create("jobset.x-k8s.io", "jobsets", gpu_jobset("train", 4, run_seconds=4), namespace=NS)

    def provisioning() -> dict[str, Any] | None:
        with contextlib.suppress(ApiError):
            wl = workload(store, "train")
            ready = condition(wl, "PodsReady")
            if is_true(wl, "Admitted") and ready is not None and ready["reason"] == "Provisioning":
                return wl
        return None

    wl = wait_for(provisioning, 60, "the JobSet admitted as Provisioning")
    assert "4 new nodes of NodePool 'gpu'" in condition(wl, "PodsReady")["message"]  # type: ignore[index]

    def running() -> list[dict[str, Any]]:
        return [p for p in store.list("", "pods", NS)["items"] if p["status"].get("phase") == "Running"]

    wait_for(lambda: len(running()) == 4, 120, "the gang's four pods running on nodes Karpenter made")
    nodes = {n["metadata"]["name"] for n in karpenter_nodes(store)}
    assert len(nodes) == 4 and {p["spec"]["nodeName"] for p in running()} == nodes
    wait_for(lambda: is_true(store.get("jobset.x-k8s.io", "jobsets", NS, "train"), "Completed"), 120,
             "the JobSet completed")

    # beyond the pool's limit of 32 GPUs: it waits, naming the limit, while the nodes go and after
    store.create("jobset.x-k8s.io", "jobsets", gpu_jobset("big", 5, run_seconds=4), namespace=NS)

    def waiting_message() -> str:
        with contextlib.suppress(ApiError):
            wl = workload(store, "big")
            message = str(condition(wl, "QuotaReserved") and condition(wl, "QuotaReserved")["message"])  # type: ignore[index]
            if "its limit of 32 nvidia.com/gpu" in message:
                return message
        return ""

    said = wait_for(waiting_message, 60, "the 5-pod gang waiting, its reason naming the NodePool's limit")
    assert "NodePool 'gpu' may add" in said, said
    wait_for(lambda: not karpenter_nodes(store) and not store.list("karpenter.sh", "nodeclaims")["items"], 120,
             "Karpenter to consolidate the empty nodes away")
    # it stays suspended (no pod asks Karpenter for a node) and keeps naming the limit
    assert waiting_message(), workload(store, "big").get("status")
    assert not is_true(workload(store, "big"), "Admitted")
    assert not [p for p in store.list("", "pods", NS)["items"] if p["metadata"]["name"].startswith("big")]
    assert not store.list("karpenter.sh", "nodeclaims")["items"]
