"""KubeRay's RayJob and RayCluster as gangs (gangq.integrations.ray): the pod sets KubeRay's
operator makes pods from, what is refused, the admission's and the eviction's patches, and which
gang a pod belongs to."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest

from gangq.core import Admission, FlavorSpec, SpecError
from gangq.core.decisions import PodSetAssignment
from gangq.core.selectors import Toleration
from gangq.integrations import registry
from gangq.integrations.job import JOB
from gangq.integrations.ray import RAYCLUSTER, RAYJOB, RAYJOB_LABEL
from gangq.integrations.registry import pod_gang
from gangq.operator.webhook import mutate, parse_review

FLAVORS = {"a100": FlavorSpec("a100", {"gpu": "a100"}, (), (Toleration("gpu", "Exists", "", "NoSchedule"),))}


def template(cpu: str = "1", image: str = "rayproject/ray:2.41.0", **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "ray", "image": image, "resources": {"requests": {"cpu": cpu}}}],
                     **spec}}


def cluster_spec(**worker: Any) -> dict[str, Any]:
    group = {"groupName": "gpu-Workers", "replicas": 3, "minReplicas": 0, "maxReplicas": 10,
             "rayStartParams": {}, "template": template("2"), **worker}
    return {"headGroupSpec": {"rayStartParams": {}, "template": template("1")}, "workerGroupSpecs": [group]}


def raycluster(**worker: Any) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "team", "uid": "u1", "labels": {"gangq.io/queue-name": "q"}},
            "spec": {"suspend": True, **cluster_spec(**worker)}}


def rayjob(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "rj", "namespace": "team", "uid": "u2", "labels": {"gangq.io/queue-name": "q"}},
            "spec": {"suspend": True, "shutdownAfterJobFinishes": True, "entrypoint": "python x.py",
                     "rayClusterSpec": cluster_spec(), **spec}}


def admission(key: str, *pod_sets: tuple[str, int]) -> Admission:
    return Admission(key, "cq", tuple(
        PodSetAssignment(name, count, {"cpu": "a100"}, {"cpu": 1000}, {}) for name, count in pod_sets), False, 0.0, {})


def pods_of(spec: Any) -> list[tuple[str, int, dict[str, int]]]:
    return [(ps.name, ps.count, dict(ps.requests)) for ps in spec.pod_sets]


# --- pod sets ---------------------------------------------------------------------------------------


def test_a_raycluster_is_its_head_and_a_pod_set_per_worker_group() -> None:
    spec = RAYCLUSTER.to_workload(raycluster(numOfHosts=2), {}, {})
    assert spec.key == "team/rayclusters:rc"
    assert pods_of(spec) == [("head", 1, {"cpu": 1000}), ("gpu-workers", 6, {"cpu": 2000})]
    assert RAYCLUSTER.workload_name("rc") == "raycluster-rc"
    assert RAYCLUSTER.suspended(raycluster())
    assert RAYCLUSTER.terminal({**raycluster(), "status": {"state": "ready"}}) is None  # never finishes


@pytest.mark.parametrize(("worker", "pods"), [
    ({"replicas": 1, "minReplicas": 2}, 2),       # KubeRay raises replicas to minReplicas
    ({"replicas": 12, "maxReplicas": 4}, 4),      # and lowers them to maxReplicas
    ({"minReplicas": 5, "maxReplicas": 3}, 3),    # crossed bounds: maxReplicas
    ({"replicas": None, "minReplicas": 2}, 2),    # absent replicas: minReplicas
    ({"suspend": True}, 0),                       # a suspended worker group makes none
])
def test_a_worker_group_counts_the_pods_kuberay_makes(worker: dict[str, Any], pods: int) -> None:
    obj = raycluster(**worker)
    group = obj["spec"]["workerGroupSpecs"][0]
    for key, value in worker.items():
        if value is None:
            del group[key]
    assert [ps.count for ps in RAYCLUSTER.pod_sets(obj)] == [1, pods]


def test_a_rayjob_in_k8s_job_mode_adds_kuberays_default_submitter() -> None:
    spec = RAYJOB.to_workload(rayjob(), {}, {})
    assert spec.key == "team/rayjobs:rj"
    assert pods_of(spec) == [("head", 1, {"cpu": 1000}), ("gpu-workers", 3, {"cpu": 2000}),
                             ("submitter", 1, {"cpu": 500, "memory": 200 * 2**20})]
    assert RAYJOB.workload_name("rj") == "rayjob-rj"


def test_a_rayjobs_own_submitter_template_is_its_submitter_pod_set() -> None:
    spec = RAYJOB.to_workload(rayjob(submitterPodTemplate=template("250m", restartPolicy="Never")), {}, {})
    assert pods_of(spec)[-1] == ("submitter", 1, {"cpu": 250})


def test_http_and_interactive_modes_have_no_submitter_and_sidecar_mode_puts_it_in_the_head() -> None:
    for mode in ("HTTPMode", "InteractiveMode"):
        assert [ps.name for ps in RAYJOB.to_workload(rayjob(submissionMode=mode), {}, {}).pod_sets] == [
            "head", "gpu-workers"]
    sidecar = RAYJOB.to_workload(rayjob(submissionMode="SidecarMode"), {}, {})
    assert pods_of(sidecar)[0] == ("head", 1, {"cpu": 1500, "memory": 200 * 2**20})
    assert [ps.name for ps in sidecar.pod_sets] == ["head", "gpu-workers"]


def test_a_rayjob_is_bounded_by_its_active_deadline() -> None:
    assert RAYJOB.to_workload(rayjob(activeDeadlineSeconds=600), {}, {}).runtime_limit == 600.0
    assert RAYJOB.to_workload(rayjob(), {}, {}).runtime_limit is None


# --- refused ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("obj", "field"), [
    ({**raycluster(), "spec": {**raycluster()["spec"], "enableInTreeAutoscaling": True}},
     "spec.enableInTreeAutoscaling"),
    ({**raycluster(), "spec": {**raycluster()["spec"], "gcsFaultToleranceOptions": {"redisAddress": "r:6379"}}},
     "spec.gcsFaultToleranceOptions"),
    ({**raycluster(), "metadata": {**raycluster()["metadata"], "annotations": {"ray.io/ft-enabled": "True"}}},
     "metadata.annotations[ray.io/ft-enabled]"),
    (raycluster(groupName="Head"), "spec.workerGroupSpecs[0].groupName"),
    (raycluster(groupName=""), "spec.workerGroupSpecs[0].groupName"),
    (raycluster(replicas=-1), "spec.workerGroupSpecs[0].replicas"),
    (raycluster(numOfHosts=0), "spec.workerGroupSpecs[0].numOfHosts"),
    ({**raycluster(), "spec": {"suspend": True}}, "spec.headGroupSpec"),
])
def test_a_raycluster_gangq_cannot_queue_is_refused_naming_the_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        RAYCLUSTER.to_workload(obj, {}, {})
    assert err.value.field == field
    assert err.value.kind == "RayCluster" and err.value.name == "team/rc"


def test_in_tree_autoscaling_is_refused_in_a_rayjobs_cluster_spec() -> None:
    obj = rayjob()
    obj["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    with pytest.raises(SpecError) as err:
        RAYJOB.to_workload(obj, {}, {})
    assert err.value.field == "spec.rayClusterSpec.enableInTreeAutoscaling"
    assert "autoscaler" in err.value.message


@pytest.mark.parametrize(("spec", "field"), [
    ({"shutdownAfterJobFinishes": False}, "spec.shutdownAfterJobFinishes"),
    ({"clusterSelector": {"ray.io/cluster": "other"}}, "spec.clusterSelector"),
    ({"rayClusterSpec": None}, "spec.rayClusterSpec"),
    ({"submissionMode": "Batch"}, "spec.submissionMode"),
])
def test_a_rayjob_gangq_cannot_queue_is_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        RAYJOB.to_workload(rayjob(**spec), {}, {})
    assert err.value.field == field


def test_a_worker_group_named_submitter_is_refused_only_beside_a_submitter() -> None:
    obj = rayjob()
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"] = "submitter"
    with pytest.raises(SpecError) as err:
        RAYJOB.to_workload(obj, {}, {})
    assert err.value.field == "spec.rayClusterSpec.workerGroupSpecs[0].groupName"
    obj["spec"]["submissionMode"] = "HTTPMode"
    assert [ps.name for ps in RAYJOB.to_workload(obj, {}, {}).pod_sets] == ["head", "submitter"]


# --- whose it is --------------------------------------------------------------------------------------


def test_a_rayjob_on_an_existing_cluster_and_a_rayjobs_own_cluster_are_not_queued() -> None:
    on_existing = rayjob(clusterSelector={"ray.io/cluster": "shared"}, rayClusterSpec=None)
    del on_existing["spec"]["rayClusterSpec"]
    assert not RAYJOB.ours(on_existing)
    assert not registry.queued(RAYJOB, on_existing)
    assert RAYJOB.ours(rayjob())
    child = raycluster()
    child["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj",
                                             "uid": "u2", "controller": True}]
    assert not RAYCLUSTER.ours(child)  # it carries the RayJob's queue label, but the RayJob is the gang
    assert not registry.queued(RAYCLUSTER, child)
    assert registry.queued(RAYCLUSTER, raycluster())


def test_terminal_follows_the_job_deployment_status() -> None:
    def status(**s: Any) -> dict[str, Any]:
        return {**rayjob(), "status": s}

    assert RAYJOB.terminal(status(jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")) == "Completed"
    assert RAYJOB.terminal(status(jobDeploymentStatus="Failed")) == "Failed"
    assert RAYJOB.terminal(status(jobDeploymentStatus="ValidationFailed")) == "Failed"
    assert RAYJOB.terminal(status(jobDeploymentStatus="ValidationFailed", rayClusterName="rj-abcde")) is None
    for running in ("", "Initializing", "Running", "Retrying", "Suspending", "Suspended", "Waiting"):
        assert RAYJOB.terminal(status(jobDeploymentStatus=running)) is None
    assert not RAYJOB.started(status(jobDeploymentStatus="Initializing", rayClusterName="rj-abcde"))
    assert not RAYJOB.started(status(jobDeploymentStatus="Suspending"))  # created suspended, KubeRay's way there
    assert RAYJOB.started(status(jobDeploymentStatus="Running"))
    assert RAYJOB.started(status(jobDeploymentStatus="Initializing",
                                 rayClusterStatus={"head": {"podName": "rj-abcde-head-x"}}))
    assert not RAYCLUSTER.started({**raycluster(), "status": {"state": "suspended"}})
    assert RAYCLUSTER.started({**raycluster(), "status": {"state": "ready"}})


def pod(labels: dict[str, str], owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "team", "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    return {"metadata": meta, "spec": {}}


def test_pods_belong_to_their_rayjob_their_raycluster_or_neither() -> None:
    ray_pod = {"ray.io/cluster": "rj-abcde", "ray.io/node-type": "worker", "ray.io/group": "gpu-Workers",
               "ray.io/is-ray-node": "yes"}
    assert pod_gang(pod({**ray_pod, RAYJOB_LABEL: "rj"}, "RayCluster")) == ("team/rayjobs:rj", "gpu-workers")
    assert pod_gang(pod({**ray_pod, "ray.io/node-type": "head", "ray.io/group": "headgroup",
                         RAYJOB_LABEL: "rj"}, "RayCluster")) == ("team/rayjobs:rj", "head")
    # the submitter Job's pod: the Job's labels and the RayJob's, no Ray label; the Job kind would claim it
    submitter = pod({"batch.kubernetes.io/job-name": "rj", "job-name": "rj", RAYJOB_LABEL: "rj"}, "Job")
    assert JOB.pod_owner(submitter) is not None
    assert RAYJOB.pod_priority > JOB.pod_priority
    assert pod_gang(submitter) == ("team/rayjobs:rj", "submitter")
    assert pod_gang(pod({**ray_pod, "ray.io/cluster": "rc"}, "RayCluster")) == ("team/rayclusters:rc", "gpu-workers")
    assert RAYCLUSTER.pod_owner(pod({**ray_pod, RAYJOB_LABEL: "rj"})) is None  # a RayJob's, not a gang of its own
    assert RAYJOB.pod_owner(pod(ray_pod)) is None
    assert RAYCLUSTER.pod_selector("rc") == "ray.io/cluster=rc"
    assert RAYJOB.pod_selector("rj") == f"{RAYJOB_LABEL}=rj"


# --- the admission's and the eviction's patches -----------------------------------------------------------


def test_a_raycluster_admission_injects_the_flavor_into_head_and_workers_and_its_eviction_restores() -> None:
    obj = raycluster()
    obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] = {"zone": "a"}
    ops = RAYCLUSTER.admission_ops(obj, admission("team/rayclusters:rc", ("head", 1), ("gpu-workers", 3)), FLAVORS)
    assert {"op": "test", "path": "/spec/workerGroupSpecs/0/groupName", "value": "gpu-Workers"} in ops
    admitted = jsonpatch.apply_patch(obj, ops)
    assert admitted["spec"]["suspend"] is False
    head = admitted["spec"]["headGroupSpec"]["template"]["spec"]
    worker = admitted["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert head["nodeSelector"] == {"gpu": "a100"}
    assert worker["nodeSelector"] == {"zone": "a", "gpu": "a100"}
    assert worker["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    evicted = jsonpatch.apply_patch(admitted, RAYCLUSTER.eviction_ops(admitted))
    assert evicted["spec"] == {**obj["spec"], "suspend": True}
    assert "gangq.io/original-pod-scheduling" not in evicted["metadata"].get("annotations", {})


def test_an_admission_guarded_by_the_group_name_fails_when_the_worker_groups_were_reordered() -> None:
    obj = raycluster()
    ops = RAYCLUSTER.admission_ops(obj, admission("team/rayclusters:rc", ("head", 1), ("gpu-workers", 3)), FLAVORS)
    other = copy.deepcopy(obj)
    other["spec"]["workerGroupSpecs"][0]["groupName"] = "cpu"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(other, ops)


def test_a_rayjob_admission_writes_the_default_submitter_labels_every_template_and_injects_flavors() -> None:
    obj = rayjob()
    ops = RAYJOB.admission_ops(obj, admission("team/rayjobs:rj", ("head", 1), ("gpu-workers", 3), ("submitter", 1)),
                               FLAVORS)
    admitted = jsonpatch.apply_patch(obj, ops)
    spec = admitted["spec"]
    assert spec["suspend"] is False
    submitter = spec["submitterPodTemplate"]
    assert submitter["spec"]["containers"] == [{
        "name": "ray-job-submitter", "image": "rayproject/ray:2.41.0",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}}]
    assert submitter["spec"]["restartPolicy"] == "Never"
    templates = [spec["rayClusterSpec"]["headGroupSpec"]["template"],
                 spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"], submitter]
    for t in templates:
        assert t["metadata"]["labels"][RAYJOB_LABEL] == "rj"
        assert t["spec"]["nodeSelector"] == {"gpu": "a100"}
    # a second admission of the same object changes nothing more than the first
    assert jsonpatch.apply_patch(admitted, RAYJOB.admission_ops(admitted, admission(
        "team/rayjobs:rj", ("head", 1), ("gpu-workers", 3), ("submitter", 1)), FLAVORS)) == admitted
    # the eviction puts the RayJob back as the user wrote it: no flavor, no label, no written-out submitter
    evicted = jsonpatch.apply_patch(admitted, RAYJOB.eviction_ops(admitted))
    assert evicted == {**obj, "spec": {**obj["spec"], "suspend": True}}


def test_a_rayjobs_own_submitter_template_keeps_its_labels_and_gets_the_rayjobs() -> None:
    own = template("250m", restartPolicy="Never")
    own["metadata"] = {"labels": {"team": "x"}}
    obj = rayjob(submitterPodTemplate=own, submissionMode="K8sJobMode")
    ops = RAYJOB.admission_ops(obj, admission("team/rayjobs:rj", ("head", 1), ("gpu-workers", 3), ("submitter", 1)),
                               FLAVORS)
    admitted = jsonpatch.apply_patch(obj, ops)
    submitter = admitted["spec"]["submitterPodTemplate"]
    assert submitter["metadata"]["labels"] == {"team": "x", RAYJOB_LABEL: "rj"}
    assert submitter["spec"]["containers"] == own["spec"]["containers"]
    assert submitter["spec"]["nodeSelector"] == {"gpu": "a100"}
    evicted = jsonpatch.apply_patch(admitted, RAYJOB.eviction_ops(admitted))
    assert evicted["spec"]["submitterPodTemplate"] == own  # the user's own template stays, as it was


def test_the_suspension_is_spec_suspend_alone() -> None:
    assert RAYJOB.suspend_ops(rayjob()) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert RAYCLUSTER.unsuspend_ops(raycluster()) == [{"op": "add", "path": "/spec/suspend", "value": False}]
    assert not RAYCLUSTER.suspended({**raycluster(), "spec": {**raycluster()["spec"], "suspend": None}})


# --- the webhook -------------------------------------------------------------------------------------------


def _review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "uid-1", "operation": "CREATE", "namespace": "team", "object": obj,
        "kind": {"group": "ray.io", "version": "v1", "kind": obj["kind"]}}}


def _mutation(obj: dict[str, Any]) -> list[dict[str, Any]] | None:
    response = mutate(parse_review(_review(obj)))
    assert response["allowed"] is True
    return json.loads(base64.b64decode(response["patch"])) if "patch" in response else None


def test_the_webhook_suspends_a_labelled_rayjob_or_raycluster_at_creation_and_nothing_else() -> None:
    suspend = [{"op": "add", "path": "/spec/suspend", "value": True}]
    running = rayjob(suspend=False)
    assert _mutation(running) == suspend
    cluster = raycluster()
    del cluster["spec"]["suspend"]  # a RayCluster's suspend is optional
    assert _mutation(cluster) == suspend
    assert _mutation(rayjob()) is None  # already suspended
    child = raycluster()
    child["spec"]["suspend"] = False
    child["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj",
                                             "uid": "u2", "controller": True}]
    assert _mutation(child) is None  # the RayCluster its RayJob creates (with the RayJob's labels) runs
    on_existing = rayjob(suspend=False, clusterSelector={"ray.io/cluster": "shared"})
    del on_existing["spec"]["rayClusterSpec"]
    assert _mutation(on_existing) is None  # KubeRay cannot suspend it: not queued
