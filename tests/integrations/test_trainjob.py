"""A Kubeflow Trainer v2 TrainJob as a gang (gangq.integrations.trainjob): its pod sets resolved
from its runtime as the Trainer v2.0.0 builds its JobSet, errors naming the TrainJob's fields, the
admission through podSpecOverrides in two patches (the Trainer's webhook rules checked on the
result) and the restore once the gang has stopped."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from gangq.core import Admission, FlavorSpec, SpecError, Toleration
from gangq.core.decisions import PodSetAssignment
from gangq.integrations.jobset import JOBSET
from gangq.integrations.podsets import get
from gangq.integrations.trainjob import (
    CLUSTER_TRAINING_RUNTIMES,
    OVERRIDES_ANNOTATION,
    TRAINING_RUNTIMES,
    TrainJobKind,
)

NODE_RES = {"requests": {"cpu": "2"}}


def pod(name: str = "node", cpu: str = "1", **spec: Any) -> dict[str, Any]:
    return {"spec": {"restartPolicy": "Never",
                     "containers": [{"name": name, "image": "x", "resources": {"requests": {"cpu": cpu}}}], **spec}}


def rjob(name: str, *, ancestor: str | None = None, replicas: int | None = None, parallelism: int | None = None,
         template: dict[str, Any] | None = None) -> dict[str, Any]:
    job: dict[str, Any] = {"name": name, "template": {"spec": {"template": template or pod()}}}
    if ancestor:
        job["template"]["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}}
    if replicas is not None:
        job["replicas"] = replicas
    if parallelism is not None:
        job["template"]["spec"]["parallelism"] = parallelism
    return job


def runtime(name: str, rjobs: list[dict[str, Any]], *, namespace: str | None = None,
            ml: dict[str, Any] | None = None, generation: int = 1) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "generation": generation}
    if namespace:
        meta["namespace"] = namespace
    spec: dict[str, Any] = {"template": {"spec": {"replicatedJobs": rjobs}}}
    if ml is not None:
        spec["mlPolicy"] = ml
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainingRuntime" if namespace else "ClusterTrainingRuntime", "metadata": meta, "spec": spec}


TORCH = runtime("torch", [rjob("node", ancestor="trainer")], ml={"numNodes": 1, "torch": {"numProcPerNode": "auto"}})
MPI = runtime("mpi", [rjob("launcher", ancestor="trainer", template=pod(cpu="500m")), rjob("node")],
              ml={"numNodes": 1, "mpi": {"runLauncherAsNode": True}})


def trainjob(name: str = "llm", runtime_name: str = "torch", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}",
                         "labels": {"gangq.io/queue-name": "q"}, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"suspend": True, "runtimeRef": {"name": runtime_name}, **spec}}


def kind_with(*runtimes: dict[str, Any]) -> TrainJobKind:
    kind = TrainJobKind()
    for rt in runtimes:
        resource = TRAINING_RUNTIMES if rt["kind"] == "TrainingRuntime" else CLUSTER_TRAINING_RUNTIMES
        assert kind.reference_event(resource, "ADDED", rt)
    return kind


def sets(kind: TrainJobKind, obj: dict[str, Any]) -> list[tuple[str, int, dict[str, int]]]:
    spec = kind.to_workload(obj, {}, {})
    return [(ps.name, ps.count, ps.requests) for ps in spec.pod_sets]


def test_the_trainer_steps_pods_are_numnodes_with_resources_per_node_under_its_jobsets_key() -> None:
    kind = kind_with(TORCH)
    assert sets(kind, trainjob()) == [("node", 1, {"cpu": 1000})]  # mlPolicy.numNodes
    obj = trainjob(trainer={"numNodes": 4, "resourcesPerNode": NODE_RES})
    assert sets(kind, obj) == [("node", 4, {"cpu": 2000})]
    spec = kind.to_workload(obj, {}, {})
    # the TrainJob's JobSet is the same namespace/name: its pods and child Jobs are the gang's
    assert spec.key == "team/llm" == JOBSET.key("team", "llm")
    jobset_pod = {"metadata": {"namespace": "team", "labels": {"jobset.sigs.k8s.io/jobset-name": "llm",
                                                                 "jobset.sigs.k8s.io/replicatedjob-name": "node"}}}
    assert kind.pod_owner(jobset_pod) == JOBSET.pod_owner(jobset_pod) == ("team/llm", "node")


def test_mpi_numnodes_sizes_the_node_job_one_less_with_the_launcher_as_a_node() -> None:
    kind = kind_with(MPI)
    obj = trainjob(runtime_name="mpi", trainer={"numNodes": 3})
    assert sets(kind, obj) == [("launcher", 1, {"cpu": 500}), ("node", 2, {"cpu": 1000})]
    no_launcher_node = copy.deepcopy(MPI)
    no_launcher_node["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] = False
    kind = kind_with(no_launcher_node)
    assert sets(kind, obj) == [("launcher", 1, {"cpu": 500}), ("node", 3, {"cpu": 1000})]


def test_initializers_run_one_job_other_steps_their_replicas_and_parallelism() -> None:
    rt = runtime("steps", [rjob("dataset-initializer", ancestor="dataset-initializer", replicas=3),
                           rjob("sidecar", replicas=2, parallelism=3),
                           rjob("node", ancestor="trainer", parallelism=5)])  # no mlPolicy: its parallelism
    kind = kind_with(rt)
    assert [(n, c) for n, c, _ in sets(kind, trainjob(runtime_name="steps"))] == [
        ("dataset-initializer", 1), ("sidecar", 6), ("node", 5)]
    assert [(n, c) for n, c, _ in sets(kind, trainjob(runtime_name="steps", trainer={"numNodes": 2}))] == [
        ("dataset-initializer", 1), ("sidecar", 6), ("node", 2)]


def test_a_namespaced_runtime_is_looked_up_in_the_trainjobs_namespace() -> None:
    other = runtime("mine", [rjob("node", ancestor="trainer")], namespace="elsewhere")
    kind = kind_with(other)
    ref = {"name": "mine", "kind": "TrainingRuntime"}
    with pytest.raises(SpecError) as info:
        kind.to_workload(trainjob(runtimeRef=ref), {}, {})
    assert info.value.field == "spec.runtimeRef" and "namespace team" in info.value.message
    kind.reference_event(TRAINING_RUNTIMES, "ADDED", runtime("mine", [rjob("node", ancestor="trainer")],
                                                             namespace="team"))
    assert sets(kind, trainjob(runtimeRef=ref)) == [("node", 1, {"cpu": 1000})]


def test_a_trainjob_waits_for_its_runtime_and_maps_again_when_it_appears_or_changes() -> None:
    kind = TrainJobKind()
    obj = trainjob()
    with pytest.raises(SpecError) as info:
        kind.to_workload(obj, {}, {})
    assert (info.value.kind, info.value.name, info.value.field) == ("TrainJob", "team/llm", "spec.runtimeRef")
    assert "ClusterTrainingRuntime 'torch' does not exist" in info.value.message
    assert "waits for it" in info.value.message
    waiting = kind.signature(obj)
    assert kind.reference_event(CLUSTER_TRAINING_RUNTIMES, "ADDED", TORCH)
    present = kind.signature(obj)
    assert present != waiting
    changed = copy.deepcopy(TORCH)
    changed["metadata"]["generation"] = 2
    changed["spec"]["mlPolicy"]["numNodes"] = 3
    kind.reference_event(CLUSTER_TRAINING_RUNTIMES, "MODIFIED", changed)
    assert kind.signature(obj) != present
    assert sets(kind, obj) == [("node", 3, {"cpu": 1000})]
    kind.reference_event(CLUSTER_TRAINING_RUNTIMES, "DELETED", changed)
    with pytest.raises(SpecError):
        kind.to_workload(obj, {}, {})


def test_overrides_add_node_selector_keys_and_replace_tolerations_as_the_trainer_merges_them() -> None:
    base = pod(nodeSelector={"zone": "a"}, tolerations=[{"key": "spot", "operator": "Exists"}])
    kind = kind_with(runtime("sel", [rjob("node", ancestor="trainer", template=base)]))
    obj = trainjob(runtime_name="sel", podSpecOverrides=[{
        "targetJobs": [{"name": "node"}], "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}])
    ps = kind.to_workload(obj, {}, {}).pod_sets[0]
    assert ps.node_selector == {"zone": "a", "disk": "ssd"}
    assert [t.key for t in ps.tolerations] == ["gpu"]


@pytest.mark.parametrize(("spec", "field", "words"), [
    ({"trainer": {"numNodes": -1}}, "spec.trainer.numNodes", "non-negative"),
    ({"podSpecOverrides": [{"targetJobs": [{"name": "worker"}]}]}, "spec.podSpecOverrides[0].targetJobs",
     "not a replicatedJob"),
    ({"podSpecOverrides": [{"targetJobs": [{"name": "node"}], "containers": [{"name": "other"}]}]},
     "spec.podSpecOverrides.containers[0].name", "not a container"),
    ({"runtimeRef": {"name": "torch", "apiGroup": "example.com"}}, "spec.runtimeRef", "only a TrainingRuntime"),
    ({"runtimeRef": {}}, "spec.runtimeRef.name", "is required"),
])
def test_errors_name_the_trainjobs_fields(spec: dict[str, Any], field: str, words: str) -> None:
    kind = kind_with(TORCH)
    with pytest.raises(SpecError) as info:
        kind.to_workload(trainjob(**spec), {}, {})
    assert (info.value.kind, info.value.name, info.value.field) == ("TrainJob", "team/llm", field)
    assert words in info.value.message


def test_a_runtimes_bad_field_names_the_runtime_behind_the_trainjobs_runtimeref() -> None:
    kind = kind_with(runtime("bad", [rjob("node", ancestor="trainer", parallelism=-2)]))
    with pytest.raises(SpecError) as info:
        kind.to_workload(trainjob(runtime_name="bad"), {}, {})
    assert info.value.field == "spec.runtimeRef"
    assert "ClusterTrainingRuntime bad: spec.template.spec.replicatedJobs[0].template.spec.parallelism" in (
        info.value.message)


FLAVORS = {"a100": FlavorSpec("a100", {"gpu": "a100"}, (), [Toleration("gpu", "Exists", "", "NoSchedule")]),
           "cpu": FlavorSpec("cpu", {"pool": "cpu"})}


def admission_of(key: str, flavors: dict[str, str]) -> Admission:
    return Admission(key, "cq", tuple(PodSetAssignment(n, 1, {"cpu": f}, {}, {}) for n, f in flavors.items()),
                     False, 0.0, {})


def admit(kind: TrainJobKind, obj: dict[str, Any], flavors: dict[str, str]) -> dict[str, Any]:
    """``obj`` after the admission's writes, each applied as the API server would (the Trainer's
    webhook rules checked on each step)."""
    admission = admission_of(obj["metadata"]["namespace"] + "/" + obj["metadata"]["name"], flavors)
    writes = kind.admission_writes(obj, admission, FLAVORS, '{"clusterQueue":"cq"}')
    assert writes is not None and len(writes) == 2
    current = obj
    for i, write in enumerate(writes):
        assert write.path == "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/" + obj["metadata"]["name"]
        assert write.patch is not None
        after = jsonpatch.apply_patch(current, write.patch)
        trainer_webhook(current, after)
        current = after
        assert current["spec"]["suspend"] is (i == 0)  # the overrides first, suspended; then unsuspended
    return current


def trainer_webhook(old: dict[str, Any], new: dict[str, Any]) -> None:
    """The Trainer v2.0.0 webhook's rules on podSpecOverrides: changed only while suspended; each
    replicatedJob named by one override at most."""
    if old["spec"].get("podSpecOverrides") != new["spec"].get("podSpecOverrides"):
        assert new["spec"]["suspend"] is True, "PodSpecOverrides can only be modified when the TrainJob is suspended"
    names = [t["name"] for o in new["spec"].get("podSpecOverrides") or [] for t in o["targetJobs"]]
    assert len(names) == len(set(names)), names


def built(kind: TrainJobKind, obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod specs the Trainer builds from the TrainJob as it now is (its overrides as written)."""
    bare = copy.deepcopy(obj)
    bare["metadata"].get("annotations", {}).pop(OVERRIDES_ANNOTATION, None)
    resolved = kind.resolved(bare)
    return {ps.name: get(resolved, ps.path)["spec"] for ps in kind.pod_sets(bare)}


def gang(kind: TrainJobKind, obj: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(ps.name, ps.count, ps.requests, ps.placement_signature()) for ps in kind.to_workload(obj, {}, {}).pod_sets]


def test_admission_merges_flavors_into_each_jobs_own_override_and_the_restore_puts_the_users_back() -> None:
    base = pod(tolerations=[{"key": "spot", "operator": "Exists"}])
    rt = runtime("three", [rjob("init", ancestor="model-initializer", template=pod(name="model-initializer")),
                           rjob("node", ancestor="trainer", template=base), rjob("aux", template=base)])
    kind = kind_with(rt)
    users = [{"targetJobs": [{"name": "node"}, {"name": "aux"}], "nodeSelector": {"disk": "ssd"}},
             {"targetJobs": [{"name": "init"}], "serviceAccountName": "loader"}]
    obj = trainjob(runtime_name="three", podSpecOverrides=users)
    before = built(kind, obj)
    admitted = admit(kind, obj, {"node": "a100", "aux": "cpu", "init": "cpu"})
    after = built(kind, admitted)
    assert after["node"]["nodeSelector"] == {"disk": "ssd", "gpu": "a100"}
    # the full list: the Trainer replaces a template's tolerations with an override's
    assert after["node"]["tolerations"] == [{"key": "spot", "operator": "Exists"},
                                            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert after["aux"]["nodeSelector"] == {"disk": "ssd", "pool": "cpu"}
    assert after["aux"]["tolerations"] == before["aux"]["tolerations"]
    assert after["init"]["nodeSelector"] == {"pool": "cpu"} and after["init"]["serviceAccountName"] == "loader"
    # the gang is still the user's: the flavors do not feed back into the pod sets
    assert gang(kind, admitted) == gang(kind, obj)

    # a re-admission starts from the recorded list: no flavor piles up
    evicted = jsonpatch.apply_patch(admitted, kind.eviction_ops(admitted))
    assert evicted["spec"]["suspend"] is True
    assert evicted["spec"]["podSpecOverrides"] == admitted["spec"]["podSpecOverrides"]  # running pods: unchanged
    again = built(kind, admit(kind, evicted, {"node": "cpu", "aux": "cpu", "init": "cpu"}))
    assert again["node"]["nodeSelector"] == {"disk": "ssd", "pool": "cpu"}
    assert again["node"]["tolerations"] == before["node"]["tolerations"]

    # once stopped: the user's list exactly, the record gone
    restored = jsonpatch.apply_patch(evicted, kind.stopped_ops(evicted))
    trainer_webhook(evicted, restored)
    assert restored["spec"] == obj["spec"]
    assert OVERRIDES_ANNOTATION not in restored["metadata"]["annotations"]
    assert kind.stopped_ops(restored) == []


def test_a_trainjob_without_overrides_gets_them_and_loses_them_again() -> None:
    kind = kind_with(TORCH)
    obj = trainjob(trainer={"numNodes": 2})
    admitted = admit(kind, obj, {"node": "a100"})
    assert admitted["spec"]["podSpecOverrides"] == [{
        "targetJobs": [{"name": "node"}], "nodeSelector": {"gpu": "a100"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}]
    assert admitted["metadata"]["annotations"]["gangq.io/admission"] == '{"clusterQueue":"cq"}'
    # the stop restores only what a suspended TrainJob may change
    assert kind.stopped_ops(admitted) == []
    evicted = jsonpatch.apply_patch(admitted, kind.eviction_ops(admitted))
    restored = jsonpatch.apply_patch(evicted, kind.stopped_ops(evicted))
    assert "podSpecOverrides" not in restored["spec"]


def test_an_assigned_flavor_that_contradicts_the_users_node_selector_is_an_error() -> None:
    kind = kind_with(TORCH)
    obj = trainjob(podSpecOverrides=[{"targetJobs": [{"name": "node"}], "nodeSelector": {"gpu": "h100"}}])
    admission = admission_of("team/llm", {"node": "a100"})
    with pytest.raises(SpecError) as info:
        kind.admission_writes(obj, admission, FLAVORS, "{}")
    assert info.value.name == "team/llm" and "nodeSelector[gpu]" in info.value.field


def test_state_and_ownership() -> None:
    kind = kind_with(TORCH)
    assert kind.terminal(trainjob()) is None
    for ctype, terminal in (("Complete", "Completed"), ("Failed", "Failed")):
        done = {**trainjob(), "status": {"conditions": [{"type": ctype, "status": "True"}]}}
        assert kind.terminal(done) == terminal
    assert not kind.ours(trainjob(managedBy="kueue.x-k8s.io/multikueue"))
    assert kind.ours(trainjob(managedBy="trainer.kubeflow.org/trainjob-controller"))
    assert kind.suspended(trainjob()) and not kind.suspended(trainjob(suspend=False))
    # the Trainer's JobSet and PodGroup are the TrainJob's (the registry makes the JobSet kind's
    # ours() read this)
    assert JOBSET.resource in kind.child_resources
    assert ("scheduling.x-k8s.io", "podgroups") in {(r.group, r.plural) for r in kind.child_resources}
    assert {(r.group, r.plural) for r in kind.reference_resources} == {
        ("trainer.kubeflow.org", "trainingruntimes"), ("trainer.kubeflow.org", "clustertrainingruntimes")}
