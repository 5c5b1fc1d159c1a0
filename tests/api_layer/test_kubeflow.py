"""Kubeflow training jobs as gangs (gangq.api.kubeflow, gangq.integrations.kubeflow): a pod set per
replica type, the JobSet's rules on the job's own paths, suspension through runPolicy."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from gangq.api import kubeflow
from gangq.core import Admission, FlavorSpec, SpecError
from gangq.core.decisions import PodSetAssignment
from gangq.core.selectors import Toleration
from gangq.integrations.kubeflow import MPIJOB, PYTORCHJOB, TFJOB
from gangq.integrations.registry import pod_gang


def template(gpus: int = 4) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "pytorch", "image": "x",
                                     "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": str(gpus)}}}]}}


def pytorchjob(workers: int = 3, **run_policy: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "bert", "namespace": "team", "uid": "u1", "labels": {"gangq.io/queue-name": "q"},
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "runPolicy": {"suspend": True, **run_policy},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template()},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": template()},
            },
        },
    }


def admission(*pod_sets: tuple[str, int]) -> Admission:
    return Admission("team/pytorchjobs:bert", "cq", tuple(
        PodSetAssignment(name, count, {"nvidia.com/gpu": "a100"}, {"nvidia.com/gpu": 4}, {}) for name, count in pod_sets
    ), False, 0.0, {})


FLAVORS = {"a100": FlavorSpec("a100", {"gpu": "a100"}, (), (Toleration("gpu", "Exists", "", "NoSchedule"),))}


def test_a_pytorchjob_is_a_pod_set_per_replica_type_under_a_key_of_its_own() -> None:
    spec = PYTORCHJOB.to_workload(pytorchjob(), {}, {})
    assert spec.key == "team/pytorchjobs:bert"
    assert [(ps.name, ps.count, ps.requests) for ps in spec.pod_sets] == [
        ("master", 1, {"cpu": 2000, "nvidia.com/gpu": 4}), ("worker", 3, {"cpu": 2000, "nvidia.com/gpu": 4})]
    assert spec.min_member is None  # the whole gang
    assert spec.queue_name == "q"
    assert PYTORCHJOB.workload_name("bert") == "pytorchjob-bert"
    assert PYTORCHJOB.pod_set_names(pytorchjob()) == ["master", "worker"]


def test_the_gang_size_follows_min_member_then_the_jobs_own_min_available() -> None:
    policy = pytorchjob(schedulingPolicy={"minAvailable": 2})
    assert PYTORCHJOB.to_workload(policy, {}, {}).min_member == 2
    policy["metadata"]["annotations"] = {"gangq.io/min-member": "3"}
    assert PYTORCHJOB.to_workload(policy, {}, {}).min_member == 3


def test_errors_name_the_jobs_own_fields() -> None:
    bad = pytorchjob()
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["requests"][
        "cpu"] = "-1"
    with pytest.raises(SpecError) as info:
        PYTORCHJOB.to_workload(bad, {}, {})
    assert info.value.kind == "PyTorchJob" and info.value.name == "team/bert"
    assert info.value.field == "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources.requests[cpu]"
    bad = pytorchjob(workers=-1)
    with pytest.raises(SpecError) as info:
        PYTORCHJOB.to_workload(bad, {}, {})
    assert info.value.field == "spec.pytorchReplicaSpecs[Worker].replicas", info.value.field
    empty = pytorchjob()
    del empty["spec"]["pytorchReplicaSpecs"]
    with pytest.raises(SpecError) as info:
        PYTORCHJOB.to_workload(empty, {}, {})
    assert info.value.field == "spec.pytorchReplicaSpecs"
    too_many = pytorchjob()
    too_many["metadata"]["annotations"] = {"gangq.io/min-member": "9"}
    with pytest.raises(SpecError) as info:
        PYTORCHJOB.to_workload(too_many, {}, {})
    assert info.value.field == "metadata.annotations[gangq.io/min-member]"


def test_admission_injects_the_flavor_into_each_replica_types_template_and_eviction_restores_it() -> None:
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {"zone": "a"}
    ops = PYTORCHJOB.admission_ops(job, admission(("master", 1), ("worker", 3)), FLAVORS)
    assert all(not o["path"].startswith("/spec/replicatedJobs") for o in ops), ops
    admitted = jsonpatch.apply_patch(job, ops)
    specs = admitted["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
    assert specs["Worker"]["template"]["spec"]["nodeSelector"] == {"zone": "a", "gpu": "a100"}
    assert specs["Worker"]["template"]["spec"]["tolerations"] == [
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert admitted["spec"]["runPolicy"] == {"suspend": False}
    assert not PYTORCHJOB.suspended(admitted)
    restored = jsonpatch.apply_patch(admitted, PYTORCHJOB.eviction_ops(admitted))
    assert restored["spec"]["pytorchReplicaSpecs"] == job["spec"]["pytorchReplicaSpecs"]
    assert restored["spec"]["runPolicy"]["suspend"] is True
    assert "gangq.io/original-pod-scheduling" not in (restored["metadata"].get("annotations") or {})


def test_a_job_without_run_policy_is_suspended_by_adding_one() -> None:
    job = pytorchjob()
    del job["spec"]["runPolicy"]
    assert not PYTORCHJOB.suspended(job)
    suspended = jsonpatch.apply_patch(job, PYTORCHJOB.suspend_ops(job))
    assert PYTORCHJOB.suspended(suspended) and suspended["spec"]["runPolicy"] == {"suspend": True}
    assert PYTORCHJOB.suspend_ops(suspended) == [{"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]


def test_tfjob_and_mpijob_use_their_own_replica_maps_and_versions() -> None:
    tf = copy.deepcopy(pytorchjob())
    tf["kind"] = "TFJob"
    tf["spec"]["tfReplicaSpecs"] = {"Chief": tf["spec"]["pytorchReplicaSpecs"]["Master"],
                                    "PS": {"replicas": 2, "template": template(0)},
                                    "Worker": tf["spec"]["pytorchReplicaSpecs"]["Worker"]}
    del tf["spec"]["pytorchReplicaSpecs"]
    spec = TFJOB.to_workload(tf, {}, {})
    assert [(ps.name, ps.count) for ps in spec.pod_sets] == [("chief", 1), ("ps", 2), ("worker", 3)]
    assert spec.key == "team/tfjobs:bert" and TFJOB.version == "v1"
    mpi = copy.deepcopy(pytorchjob())
    mpi["apiVersion"], mpi["kind"] = "kubeflow.org/v2beta1", "MPIJob"
    mpi["spec"]["mpiReplicaSpecs"] = {"Launcher": {"replicas": 1, "template": template(0)},
                                      "Worker": {"replicas": 2, "template": template()}}
    del mpi["spec"]["pytorchReplicaSpecs"]
    spec = MPIJOB.to_workload(mpi, {}, {})
    assert [(ps.name, ps.count) for ps in spec.pod_sets] == [("launcher", 1), ("worker", 2)]
    assert MPIJOB.path("team", "x") == "/apis/kubeflow.org/v2beta1/namespaces/team/mpijobs/x"
    worker = PodSetAssignment("worker", 2, {"nvidia.com/gpu": "a100"}, {"nvidia.com/gpu": 4}, {})
    ops = MPIJOB.admission_ops(mpi, Admission("team/mpijobs:bert", "cq", (worker,), False, 0.0, {}), FLAVORS)
    admitted = jsonpatch.apply_patch(mpi, ops)
    assert admitted["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
    assert "nodeSelector" not in admitted["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]


def test_finished_and_started_come_from_the_jobs_status() -> None:
    job = pytorchjob()
    assert PYTORCHJOB.terminal(job) is None and not PYTORCHJOB.started(job)
    job["status"] = {"replicaStatuses": {"Master": {"active": 1}}}
    assert PYTORCHJOB.started(job)
    job["status"]["conditions"] = [{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}]
    assert PYTORCHJOB.terminal(job) == "Completed"
    job["status"]["conditions"] = [{"type": "Failed", "status": "True"}]
    assert PYTORCHJOB.terminal(job) == "Failed"


def test_a_training_operators_pod_belongs_to_its_jobs_gang_and_replica_type() -> None:
    def pod(owner_kind: str | None, operator: str | None, job_label: str | None = None) -> dict[str, Any]:
        labels = {kubeflow.JOB_NAME_LABEL: "bert", kubeflow.REPLICA_TYPE_LABEL: "worker"}
        if operator:
            labels[kubeflow.OPERATOR_NAME_LABEL] = operator
        if job_label:
            labels["batch.kubernetes.io/job-name"] = job_label
        refs = [{"kind": owner_kind, "name": "bert", "controller": True}] if owner_kind else []
        return {"metadata": {"namespace": "team", "name": "p", "labels": labels, "ownerReferences": refs}}

    assert pod_gang(pod("PyTorchJob", None)) == ("team/pytorchjobs:bert", "worker")
    assert pod_gang(pod("TFJob", "pytorchjob-controller")) == ("team/tfjobs:bert", "worker")  # the owner decides
    # an MPIJob's launcher runs in a Job of its own: the operator's label tells the kind
    assert pod_gang(pod("Job", "mpi-operator", "bert-launcher")) == ("team/mpijobs:bert", "worker")
    # a pod labelled by no known operator and owned by none is not a Kubeflow gang's
    assert pod_gang(pod(None, None)) is None
