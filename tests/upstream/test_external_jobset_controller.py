"""``gangq run --jobset-controller external`` with the upstream JobSet controller on the real control
plane: gangq queues and admits a JobSet, the upstream controller (built from the pin) runs it to
completion, and gangq runs no JobSet itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC
from gangq.controlplane.pki import CONTROLLER_NAMESPACE
from tests.clusters import RealCluster
from tests.controlplane.kube import RUN_CONFIG as CONFIG
from tests.controlplane.kube import gangq_run, get, wait_for

from .harness import jobset, rjob
from .manager import upstream_jobset_controller

NS = "external-jobset"


def _queues() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"},
         "spec": {"nodeLabels": {}}},
        {"apiVersion": "gangq.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
             {"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}},
    ]


@pytest.fixture
def cluster(real_cluster: RealCluster, jobset_manager: Path, tmp_path: Path) -> Iterator[RealCluster]:
    real_cluster.reset(DEFAULT_NODE_SPEC)
    cp = real_cluster.cp
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{CONTROLLER_NAMESPACE}/leases/gangq-controller"
    with upstream_jobset_controller(cp, jobset_manager, tmp_path / "upstream"), \
            gangq_run(real_cluster.controller_kubeconfig, CONFIG, tmp_path, lambda: get(cp, lease),
                      "the controller to take its lease", "--jobset-controller", "external"):
        yield real_cluster
    real_cluster.reset(DEFAULT_NODE_SPEC)


def test_gangq_admits_and_the_upstream_controller_runs_the_jobset(cluster: RealCluster) -> None:
    store = cluster.store
    store.create("", "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    wait_for(lambda: get(cluster.cp, f"/api/v1/namespaces/{NS}/serviceaccounts/default"), 30, "the default SA")
    for obj in _queues():
        store.create("gangq.io", obj["kind"].lower() + "s", obj)
    store.create("gangq.io", "localqueues", {"apiVersion": "gangq.io/v1alpha1", "kind": "LocalQueue",
                                             "metadata": {"name": "user-queue"}, "spec": {"clusterQueue": "cq"}},
                 namespace=NS)
    # two gangs of 3 cpu in a 4-cpu queue: the second waits for the first to finish
    for name in ("first", "second"):
        obj = jobset(name, [rjob("worker", replicas=3, run=2, pod_spec={"containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]})],
            labels={"gangq.io/queue-name": "user-queue"}, suspend=True)
        store.create("jobset.x-k8s.io", "jobsets", obj, namespace=NS)

    def jobset_obj(name: str) -> dict[str, Any]:
        return store.get("jobset.x-k8s.io", "jobsets", NS, name)  # type: ignore[no-any-return]

    def condition(name: str, ctype: str) -> bool:
        return any(c["type"] == ctype and c["status"] == "True"
                   for c in (jobset_obj(name).get("status") or {}).get("conditions", []))

    # the upstream controller makes the queued JobSets' Jobs at once, suspended (gangq's own would not)
    wait_for(lambda: len(store.list("batch", "jobs", NS)["items"]) == 6, 30, "upstream's suspended Jobs")
    running = wait_for(lambda: [p for p in store.list("", "pods", NS)["items"]
                                if p["status"].get("phase") == "Running"], 60, "running pods")
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] for p in running} == {"first"}
    assert condition("second", "Suspended")  # its gang does not fit beside the first one's
    wait_for(lambda: condition("first", "Completed"), 90, "the first JobSet to complete")
    wait_for(lambda: condition("second", "Completed"), 90, "the second JobSet to complete")

    jobs = store.list("batch", "jobs", NS)["items"]
    assert sorted(j["metadata"]["name"] for j in jobs) == [f"{n}-worker-{i}" for n in ("first", "second")
                                                            for i in range(3)]
    for job in jobs:  # created, suspended and resumed by the upstream manager; gangq only admitted
        managers = {m["manager"] for m in job["metadata"]["managedFields"] if m.get("subresource") is None}
        assert managers == {"jobset"}, job["metadata"]["managedFields"]  # upstream's user agent
    for name in ("first", "second"):
        status = jobset_obj(name)["status"]
        assert status["terminalState"] == "Completed" and status.get("restarts", 0) == 0
    workloads = store.list("gangq.io", "workloads", NS)["items"]
    assert sorted(w["metadata"]["name"] for w in workloads) == ["jobset-first", "jobset-second"]
    assert all(w["status"]["admission"]["clusterQueue"] == "cq" for w in workloads)
