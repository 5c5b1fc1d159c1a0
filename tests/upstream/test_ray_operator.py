"""gangq queues RayJobs and RayClusters that KubeRay's own operator (v1.5.0, built from
``hack/upstream/kuberay``, its CRDs from the pinned module) runs, on the real control plane with
kwok's nodes.

Two gangs that fit the ClusterQueue's quota but not the one node together run one at a time,
checked at every poll: never two gangs' pods bound at once; no pod bound before its gang is
admitted; no gang admitted while an unfinished gang's pods are alive. (A finished RayJob gives its
quota and node back at once, as Kueue's does: the next gang may be admitted while KubeRay still
deletes the finished one's RayCluster, and its pods are bound once those are gone.) An eviction
(the Workload deactivated) stops the whole gang — KubeRay deletes the RayJob's RayCluster and
submitter Job — and the next gang is admitted only once those pods are gone.

What "finished" means here: kwok runs no Ray, so KubeRay never learns a Ray job's status from the
Ray dashboard (it cannot reach one). The one way KubeRay ends a RayJob without the dashboard is its
submitter Job failing: the RayJob becomes ``Failed`` (reason ``SubmissionFailed``) at once, and
with ``shutdownAfterJobFinishes`` KubeRay deletes its RayCluster. So the RayJobs here have a
submitter pod that exits 1 after two seconds (kwok's stage annotations) and a submitter
``backoffLimit`` of 0. (A submitter that succeeds ends the RayJob ``Failed`` too, 30 s later, when
the dashboard never reports the Ray job.) A RayCluster never finishes on its own: deleting it is
its "done".
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gangq.sandbox.errors import ApiError
from tests.clusters import RealCluster
from tests.controlplane.kube import wait_for

from .beside import QUEUE, GangWatch, Pods, gangq_beside, operator_binary, pod_live
from .operators import kuberay_crds, kuberay_operator

NS = "ray-queue"
NODES = "1x{cpu:4,memory:16Gi}[pool=ray]"
RUNS_FOREVER = {"sandbox.gangq.io/run-seconds": "-1"}
RAYJOB_LABEL = "gangq.io/rayjob-name"
ADMISSION = "gangq.io/admission"


@pytest.fixture(scope="session")
def ray_operator() -> Path:
    """KubeRay's operator binary."""
    return operator_binary("kuberay", "ray-operator")


def _delete_ray_objects(store: Any) -> None:
    """Delete what is left of the test's RayJobs and RayClusters, their finalizers removed (the
    operator that removes them stops with the test)."""
    for plural in ("rayjobs", "rayclusters"):
        for obj in store.list("ray.io", plural, NS)["items"]:
            name = obj["metadata"]["name"]
            if obj["metadata"].get("finalizers"):
                with contextlib.suppress(ApiError):
                    store.patch("ray.io", plural, NS, name, [{"op": "remove", "path": "/metadata/finalizers"}],
                                "json")
            with contextlib.suppress(ApiError):
                store.delete("ray.io", plural, NS, name, propagation_policy="Background")


@pytest.fixture
def cluster(real_cluster: RealCluster, ray_operator: Path, tmp_path: Path) -> Iterator[RealCluster]:
    with gangq_beside(real_cluster, tmp_path, namespace=NS, nodes=NODES, pool="ray", crds=kuberay_crds(),
                      operators=[kuberay_operator(real_cluster.cp, ray_operator, tmp_path / "kuberay")],
                      cleanup=_delete_ray_objects) as cluster:
        yield cluster


# --- objects ------------------------------------------------------------------------------------------


def _pod_template(cpu: str, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"annotations": dict(annotations)}, "spec": {
        "terminationGracePeriodSeconds": 0, **spec,
        "containers": [{"name": "ray", "image": "rayproject/ray:2.41.0", "resources": {"requests": {"cpu": cpu}}}]}}


def cluster_spec() -> dict[str, Any]:
    """A head of 1 cpu and two workers of 1 cpu, running until deleted."""
    return {"rayVersion": "2.41.0",
            "headGroupSpec": {"rayStartParams": {}, "template": _pod_template("1", RUNS_FOREVER)},
            "workerGroupSpecs": [{"groupName": "workers", "replicas": 2, "minReplicas": 2, "maxReplicas": 2,
                                  "rayStartParams": {}, "template": _pod_template("1", RUNS_FOREVER)}]}


def rayjob(name: str, *, submitter: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"suspend": True, "entrypoint": "python -c 'print(1)'", "shutdownAfterJobFinishes": True,
                            "rayClusterSpec": cluster_spec()}
    if submitter is not None:
        spec["submitterPodTemplate"] = submitter
        spec["submitterConfig"] = {"backoffLimit": 0}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name, "labels": dict(QUEUE)},
            "spec": spec}


def failing_submitter() -> dict[str, Any]:
    """A submitter pod that exits 1 after two seconds: KubeRay fails the RayJob at once."""
    template = _pod_template("500m", {"sandbox.gangq.io/run-seconds": "2", "sandbox.gangq.io/exit-code": "1"},
                             restartPolicy="Never")
    template["spec"]["containers"][0]["name"] = "ray-job-submitter"
    return template


def raycluster(name: str) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name, "labels": dict(QUEUE)},
            "spec": {"suspend": True, **cluster_spec()}}


# --- watching the gangs ----------------------------------------------------------------------------------


class Gangs(GangWatch):
    """The gangs of one kind and their pods; every poll also checks that no gang is admitted while
    another's pods are alive, and that the one node never holds two gangs' bound pods.

    ``gang_of(pod)`` names a pod's gang from KubeRay's and the Job controller's labels alone."""

    def __init__(self, store: Any, plural: str, gang_of: Callable[[dict[str, Any]], str | None]) -> None:
        super().__init__(store, NS)
        self.plural = plural
        self.pod_gang = gang_of
        self.done: set[str] = set()

    def objects(self) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in self.store.list("ray.io", self.plural, NS)["items"]}

    def admitted(self) -> set[str]:
        """The gangs admitted and not finished (a finished RayJob keeps gangq's admission record)."""
        return {name for name, o in self.objects().items()
                if ADMISSION in (o["metadata"].get("annotations") or {}) and not o["spec"].get("suspend")
                and not finished(o)}

    def gang_of(self, pod: dict[str, Any]) -> str | None:
        return self.pod_gang(pod)

    def poll(self) -> Pods:
        self.done = {name for name, o in self.objects().items() if finished(o)}
        return super().poll()

    def check(self, before: set[str], alive: Pods, every: Pods) -> None:
        for gang in before:
            # a finished gang gives its quota back at once, as Kueue's does; its RayCluster's pods may
            # still be on their way out (KubeRay deletes the cluster after the RayJob has finished)
            others = sorted(g for g in alive if g != gang and g not in self.done)
            assert not others, f"{gang} admitted while pods of {others} are alive: " + ", ".join(
                p["metadata"]["name"] for g in others for p in alive[g])
        running = sorted({g for g, ps in alive.items() if any(p["spec"].get("nodeName") for p in ps)})
        assert len(running) <= 1, f"pods of {running} bound at once on a node that holds one gang"


def live(pods: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [p for p in pods or [] if pod_live(p)]


def finished(obj: dict[str, Any]) -> bool:
    """A RayJob KubeRay has finished (a RayCluster never finishes)."""
    return (obj.get("status") or {}).get("jobDeploymentStatus") in ("Complete", "Failed")


def rayjob_of(pod: dict[str, Any]) -> str | None:
    """A RayJob's pod by KubeRay's labels: its RayCluster is named ``<rayjob>-<5 characters>``, its
    submitter Job after the RayJob."""
    labels = pod["metadata"].get("labels") or {}
    if "ray.io/cluster" in labels:
        return str(labels["ray.io/cluster"]).rsplit("-", 1)[0]
    return labels.get("batch.kubernetes.io/job-name")


def raycluster_of(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get("ray.io/cluster")


def workloads(store: Any) -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in store.list("gangq.io", "workloads", NS)["items"]}


def condition(obj: dict[str, Any], ctype: str) -> bool:
    return any(c["type"] == ctype and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions", []))


# --- the tests -----------------------------------------------------------------------------------------------


def test_rayjobs_that_do_not_fit_the_node_together_run_one_at_a_time_and_finish(cluster: RealCluster) -> None:
    store = cluster.store
    for name in ("first", "second"):
        store.create("ray.io", "rayjobs", rayjob(name, submitter=failing_submitter()), namespace=NS)
    gangs = Gangs(store, "rayjobs", rayjob_of)

    # the first whole gang runs: head, two workers, then (once the cluster is ready) the submitter
    first = gangs.wait(lambda pods: len(pods.get("first", [])) == 4 or pods.get("second"), 120,
                       "the first RayJob's four pods")
    assert set(first) == {"first"}, "the second RayJob started beside the first"
    by_role = sorted((p["metadata"]["labels"].get("ray.io/node-type", "submitter"), p["spec"].get("nodeSelector"))
                     for p in first["first"])
    assert by_role == [("head", {"pool": "ray"}), ("submitter", {"pool": "ray"}), ("worker", {"pool": "ray"}),
                       ("worker", {"pool": "ray"})]  # the flavor's node labels, in every template
    assert all(p["metadata"]["labels"][RAYJOB_LABEL] == "first" for p in first["first"])
    assert "second" not in gangs.ever_admitted

    def failed(name: str) -> bool:
        return bool(store.get("ray.io", "rayjobs", NS, name).get("status", {}).get("jobDeploymentStatus") == "Failed")

    gangs.wait(lambda pods: failed("first") and not live(pods.get("first")), 120, "the first RayJob to finish")
    gangs.wait(lambda pods: failed("second") and not live(pods.get("second")), 180, "the second RayJob to finish")
    assert set(gangs.bound) == {"first", "second"} and gangs.bound["first"] < gangs.bound["second"]
    for name in ("first", "second"):
        status = store.get("ray.io", "rayjobs", NS, name)["status"]
        assert status["reason"] == "SubmissionFailed", status

    wls = workloads(store)
    # the RayClusters KubeRay made for the RayJobs are the RayJobs' gangs, not gangs of their own
    assert sorted(wls) == ["rayjob-first", "rayjob-second"]
    wait_for(lambda: all(condition(w, "Finished") for w in workloads(store).values()), 30, "both Workloads Finished")
    assert [ps["name"] for ps in wls["rayjob-first"]["spec"]["podSets"]] == ["head", "workers", "submitter"]


def test_rayclusters_run_one_at_a_time_and_the_next_starts_once_one_is_deleted(cluster: RealCluster) -> None:
    store = cluster.store
    for name in ("alpha", "beta"):
        store.create("ray.io", "rayclusters", raycluster(name), namespace=NS)
    gangs = Gangs(store, "rayclusters", raycluster_of)
    pods = gangs.wait(lambda pods: (len(pods.get("alpha", [])) == 3 and all(
        p["status"].get("phase") == "Running" for p in pods["alpha"])) or pods.get("beta"), 120, "alpha's pods")
    assert set(pods) == {"alpha"}
    time.sleep(3)  # a RayCluster runs until deleted: beta keeps waiting
    assert "beta" not in gangs.poll() and "beta" not in gangs.ever_admitted
    assert store.get("ray.io", "rayclusters", NS, "beta")["spec"]["suspend"] is True

    store.delete("ray.io", "rayclusters", NS, "alpha", propagation_policy="Background")
    gangs.wait(lambda pods: len(live(pods.get("beta"))) == 3 and not pods.get("alpha"), 120, "beta's pods after alpha")
    assert sorted(workloads(store)) == ["raycluster-beta"]  # alpha's Workload went with it
    beta = store.get("ray.io", "rayclusters", NS, "beta")
    assert beta["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {"pool": "ray"}


def test_a_deactivated_rayjob_stops_as_a_whole_and_frees_the_node_once_its_pods_are_gone(
        cluster: RealCluster) -> None:
    store = cluster.store
    # KubeRay's default submitter: gangq writes it out at admission
    stored = {name: store.create("ray.io", "rayjobs", rayjob(name), namespace=NS) for name in ("first", "second")}
    gangs = Gangs(store, "rayjobs", rayjob_of)
    first = gangs.wait(lambda pods: len(pods.get("first", [])) == 4 or pods.get("second"), 120,
                       "the first RayJob's four pods")
    assert set(first) == {"first"}
    admitted = store.get("ray.io", "rayjobs", NS, "first")
    submitter = admitted["spec"]["submitterPodTemplate"]
    assert submitter["spec"]["containers"][0]["name"] == "ray-job-submitter"
    assert submitter["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}
    assert submitter["spec"]["nodeSelector"] == {"pool": "ray"}

    store.patch("gangq.io", "workloads", NS, "rayjob-first", {"spec": {"active": False}}, "merge")
    gangs.wait(lambda pods: not live(pods.get("first")) and pods.get("second"), 120, "the second RayJob next")
    evicted = store.get("ray.io", "rayjobs", NS, "first")
    assert evicted["spec"]["suspend"] is True
    wait_for(lambda: store.get("ray.io", "rayjobs", NS, "first").get("status", {}).get(
        "jobDeploymentStatus") == "Suspended", 60, "KubeRay to suspend the first RayJob")
    assert store.list("batch", "jobs", NS, label_selector="batch.kubernetes.io/job-name=first")["items"] == []
    # the RayJob as it was written: the flavor and the label taken out, the default submitter too
    after = copy.deepcopy(evicted["spec"]["rayClusterSpec"])
    for group in after["workerGroupSpecs"]:
        if group.get("scaleStrategy") == {}:  # written by KubeRay's own update of the RayJob (Go's empty struct)
            del group["scaleStrategy"]
    assert after == stored["first"]["spec"]["rayClusterSpec"], json.dumps(after, sort_keys=True)
    assert "submitterPodTemplate" not in evicted["spec"]
    wl = workloads(store)["rayjob-first"]
    assert wl["status"].get("admission") is None
    second = gangs.wait(lambda pods: len(pods.get("second", [])) == 4, 120, "the second RayJob's four pods")
    assert set(second) == {"second"}  # the first's pods are all gone
    assert copy.deepcopy(gangs.ever_admitted) == {"first", "second"}
