"""gangq queues TrainJobs that the Kubeflow Trainer's own controller (v2.0.0, built from
``hack/upstream/trainer``, its CRDs and validating webhooks from the pinned module) runs, on the
real control plane with kwok's nodes; the JobSets it makes run in gangq's embedded JobSet
reconciler.

Two TrainJobs that fit the ClusterQueue's quota but not the one node together run one at a time:
no two gangs have pods alive at once, and no pod is bound before its gang is admitted (both
checked at every poll). The flavor reaches the pods through the TrainJob's
``podSpecOverrides`` (the Trainer's webhook checks each of gangq's two admission patches). kwok
completes the pods, the JobSet completes, and the Trainer marks the TrainJob ``Complete``. An
eviction (the Workload deactivated) suspends the TrainJob; the Trainer suspends its JobSet, whose
Jobs' pods go; the next gang is admitted only once they are gone, and the evicted TrainJob's
``podSpecOverrides`` are put back as the user wrote them (which the Trainer's webhook allows only
once its JobSet counts no active Job).
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangq.integrations.trainjob import OVERRIDES_ANNOTATION
from gangq.sandbox.errors import ApiError
from tests.clusters import RealCluster
from tests.controlplane.kube import wait_for

from .beside import QUEUE, GangWatch, Pods, gangq_beside, operator_binary, pod_live
from .operators import trainer_crds, trainer_operator

NS = "trainer-queue"
NODES = "1x{cpu:4,memory:16Gi}[pool=trainer]"
ADMISSION = "gangq.io/admission"
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
USER_OVERRIDES = [{"targetJobs": [{"name": "node"}], "serviceAccountName": "default"}]


@pytest.fixture(scope="session")
def trainer_manager() -> Path:
    """The Trainer's controller manager."""
    return operator_binary("trainer", "trainer-controller-manager")


def runtime(name: str, run_seconds: str) -> dict[str, Any]:
    """A ClusterTrainingRuntime as the Trainer's torch-distributed one: its ``node`` replicatedJob
    is the trainer, one node of 1.5 cpu by default, whose pods kwok runs ``run_seconds`` (-1: until
    deleted) and then completes."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterTrainingRuntime", "metadata": {"name": name},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
                     "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                         "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                         "spec": {"template": {
                             "metadata": {"annotations": {"sandbox.gangq.io/run-seconds": run_seconds}},
                             "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                                 "name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                                 "resources": {"requests": {"cpu": "1500m"}}}]}}}}}]}}}}


def trainjob(name: str, runtime_name: str) -> dict[str, Any]:
    """Two nodes of the runtime: 3 cpu, so two TrainJobs do not fit the 4-cpu node together."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob", "metadata": {"name": name, "labels": dict(QUEUE)},
            "spec": {"suspend": True, "runtimeRef": {"name": runtime_name}, "trainer": {"numNodes": 2},
                     "podSpecOverrides": copy.deepcopy(USER_OVERRIDES)}}


def _delete_trainer_objects(store: Any) -> None:
    """The test's TrainJobs (their JobSets go with them) and runtimes."""
    for obj in store.list(GROUP, "trainjobs", NS)["items"]:
        with contextlib.suppress(ApiError):
            store.delete(GROUP, "trainjobs", NS, obj["metadata"]["name"], propagation_policy="Background")
    for obj in store.list(GROUP, "clustertrainingruntimes", None)["items"]:
        with contextlib.suppress(ApiError):
            store.delete(GROUP, "clustertrainingruntimes", None, obj["metadata"]["name"])


@pytest.fixture
def cluster(real_cluster: RealCluster, trainer_manager: Path, tmp_path: Path) -> Iterator[RealCluster]:
    with gangq_beside(real_cluster, tmp_path, namespace=NS, nodes=NODES, pool="trainer", crds=trainer_crds(),
                      operators=[trainer_operator(real_cluster.cp, trainer_manager, tmp_path / "trainer")],
                      cleanup=_delete_trainer_objects) as cluster:
        for name, seconds in (("short", "3"), ("forever", "-1")):
            cluster.store.create(GROUP, "clustertrainingruntimes", runtime(name, seconds))
        yield cluster


# --- watching the gangs ----------------------------------------------------------------------------------


def live(pods: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [p for p in pods or [] if pod_live(p)]


def condition(obj: dict[str, Any], ctype: str) -> bool:
    return any(c["type"] == ctype and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions", []))


class Gangs(GangWatch):
    """The TrainJobs' pods; every poll also checks that no two TrainJobs have pods alive at once.
    A pod's TrainJob is its JobSet's name (the Trainer names the JobSet after the TrainJob). A
    TrainJob whose pods have all completed may still show admitted until the Trainer marks it
    ``Complete``: the next one may start then."""

    def __init__(self, store: Any) -> None:
        super().__init__(store, NS)

    def admitted(self) -> set[str]:
        """Admitted and not finished (a finished TrainJob keeps gangq's admission record)."""
        return {o["metadata"]["name"] for o in self.store.list(GROUP, "trainjobs", NS)["items"]
                if ADMISSION in (o["metadata"].get("annotations") or {}) and not o["spec"].get("suspend")
                and not condition(o, "Complete") and not condition(o, "Failed")}

    def gang_of(self, pod: dict[str, Any]) -> str | None:
        return (pod["metadata"].get("labels") or {}).get(JOBSET_NAME)

    def check(self, before: set[str], alive: Pods, every: Pods) -> None:
        assert len(alive) <= 1, f"pods of {sorted(alive)} alive at once"


def workloads(store: Any) -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in store.list("gangq.io", "workloads", NS)["items"]}


# --- the tests -----------------------------------------------------------------------------------------------


def test_trainjobs_that_do_not_fit_the_node_together_run_one_at_a_time_and_finish(cluster: RealCluster) -> None:
    store = cluster.store
    for name in ("first", "second"):
        store.create(GROUP, "trainjobs", trainjob(name, "short"), namespace=NS)
    gangs = Gangs(store)
    first = gangs.wait(lambda pods: len(pods.get("first", [])) == 2 or pods.get("second"), 120,
                       "the first TrainJob's two pods")
    assert set(first) == {"first"}, "the second TrainJob started beside the first"
    assert all(p["spec"].get("nodeSelector") == {"pool": "trainer"} for p in first["first"]), [
        p["spec"].get("nodeSelector") for p in first["first"]]  # the flavor, through podSpecOverrides
    assert all(p["spec"].get("serviceAccountName") == "default" for p in first["first"])
    admitted = store.get(GROUP, "trainjobs", NS, "first")
    assert json.loads(admitted["metadata"]["annotations"][OVERRIDES_ANNOTATION]) == USER_OVERRIDES

    def finished(name: str) -> bool:
        return condition(store.get(GROUP, "trainjobs", NS, name), "Complete")

    gangs.wait(lambda pods: finished("first") and not live(pods.get("first")), 120, "the first TrainJob to finish")
    gangs.wait(lambda pods: finished("second") and not live(pods.get("second")), 180, "the second TrainJob to finish")
    assert set(gangs.bound) == {"first", "second"} and gangs.bound["first"] < gangs.bound["second"]
    wls = workloads(store)
    assert sorted(wls) == ["trainjob-first", "trainjob-second"]  # the JobSets are the TrainJobs', no gangs of their own
    assert [(ps["name"], ps["count"]) for ps in wls["trainjob-first"]["spec"]["podSets"]] == [("node", 2)]
    wait_for(lambda: all(condition(w, "Finished") for w in workloads(store).values()), 30, "both Workloads Finished")


def test_a_deactivated_trainjob_stops_whole_frees_the_node_once_its_pods_are_gone_and_gets_its_overrides_back(
        cluster: RealCluster) -> None:
    store = cluster.store
    for name in ("first", "second"):
        store.create(GROUP, "trainjobs", trainjob(name, "forever"), namespace=NS)
    gangs = Gangs(store)
    first = gangs.wait(lambda pods: len(live(pods.get("first"))) == 2 or pods.get("second"), 120,
                       "the first TrainJob's two pods")
    assert set(first) == {"first"}
    time.sleep(3)  # it runs until stopped: the second keeps waiting
    assert "second" not in gangs.poll() and "second" not in gangs.ever_admitted

    store.patch("gangq.io", "workloads", NS, "trainjob-first", {"spec": {"active": False}}, "merge")
    second = gangs.wait(lambda pods: not live(pods.get("first")) and len(live(pods.get("second"))) == 2, 120,
                        "the second TrainJob's pods once the first's are gone")
    assert all(p["spec"].get("nodeSelector") == {"pool": "trainer"} for p in second["second"])
    evicted = store.get(GROUP, "trainjobs", NS, "first")
    assert evicted["spec"]["suspend"] is True
    jobset = store.get("jobset.x-k8s.io", "jobsets", NS, "first")
    assert jobset["spec"].get("suspend") is True  # the Trainer suspended its JobSet

    def restored() -> bool:
        obj = store.get(GROUP, "trainjobs", NS, "first")
        return (obj["spec"].get("podSpecOverrides") == USER_OVERRIDES
                and OVERRIDES_ANNOTATION not in (obj["metadata"].get("annotations") or {}))

    wait_for(restored, 120, "the first TrainJob's podSpecOverrides as the user wrote them")
    # the Workload's status is written in the background lane, after the writes that start and
    # stop gangs (the second TrainJob's admission): it follows the restored object, not before it
    wait_for(lambda: workloads(store)["trainjob-first"]["status"].get("admission") is None, 30,
             "the first TrainJob's Workload without its admission")
    wl = workloads(store)["trainjob-first"]
    assert any(c["type"] == "QuotaReserved" and c["status"] == "False" and c["reason"] == "Deactivated"
               for c in wl["status"]["conditions"]), wl["status"]
