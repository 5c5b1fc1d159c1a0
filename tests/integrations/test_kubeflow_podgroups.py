"""Kubeflow jobs and the coscheduling PodGroups the training operator (v1.8.1) writes for them with
``--gang-scheduler-name``: the gang's min-resources from ``schedulingPolicy.minResources``, else as
the operator computes a PodGroup's ``minResources`` for ``minAvailable``; the PodGroup and the pods
are the job's, never a pod group's gang of their own (gangq.integrations.kubeflow)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gangq.core import SpecError
from gangq.integrations import podgroup
from gangq.integrations.kubeflow import MPIJOB, PODGROUPS, PYTORCHJOB, TFJOB, operator_min_resources
from gangq.integrations.registry import KINDS, pod_gang, queued
from gangq.operator.webhook import Request, mutate_pod

GI = 2**30
HIGH = {"high": 1000}


def container(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
              name: str = "pytorch") -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources}


def replica(replicas: int, *containers: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {"spec": spec}}


def pytorchjob(master: dict[str, Any], worker: dict[str, Any], **scheduling: Any) -> dict[str, Any]:
    run_policy: dict[str, Any] = {"suspend": True}
    if scheduling:
        run_policy["schedulingPolicy"] = scheduling
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "bert", "namespace": "team", "uid": "u1", "labels": {"gangq.io/queue-name": "q"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": {"Master": master, "Worker": worker}}}


def uneven(**scheduling: Any) -> dict[str, Any]:
    """A master of 4 cpu and 1Gi, three workers of 1 cpu and 8Gi each."""
    return pytorchjob(replica(1, container({"cpu": "4", "memory": "1Gi"})),
                      replica(3, container({"cpu": "1", "memory": "8Gi"})), **scheduling)


# --- schedulingPolicy.minResources ------------------------------------------------------------------


def test_the_jobs_own_min_resources_are_the_gangs_in_the_engines_units() -> None:
    job = uneven(minAvailable=2, minResources={"cpu": "2500m", "memory": "9Gi", "nvidia.com/gpu": 2})
    spec = PYTORCHJOB.to_workload(job, {}, {})
    assert spec.min_member == 2
    assert spec.min_resources == {"cpu": 2500, "memory": 9 * GI, "nvidia.com/gpu": 2}
    # without minAvailable they are honoured too (the operator writes them whatever its minMember)
    assert TFJOB.to_workload(_as_tfjob(uneven(minResources={"cpu": "1"})), {}, {}).min_resources == {"cpu": 1000}
    # and an MPIJob's, which its operator passes on unchanged as well
    mpijob = _as_mpijob(uneven(minAvailable=2, minResources={"cpu": "3"}))
    assert MPIJOB.to_workload(mpijob, {}, {}).min_resources == {"cpu": 3000}


def test_the_annotation_wins_and_an_empty_map_asks_for_nothing() -> None:
    job = uneven(minAvailable=2, minResources={"cpu": "3"})
    job["metadata"]["annotations"] = {"gangq.io/min-resources": "cpu=1"}
    assert PYTORCHJOB.to_workload(job, {}, {}).min_resources == {"cpu": 1000}
    # an empty map is what the operator writes then: no aggregate, and none derived either
    assert PYTORCHJOB.to_workload(uneven(minAvailable=2, minResources={}), {}, {}).min_resources is None


@pytest.mark.parametrize(("value", "field"), [
    (["cpu", "1"], "spec.runPolicy.schedulingPolicy.minResources"),
    ("cpu=1", "spec.runPolicy.schedulingPolicy.minResources"),
    ({"cpu": "-1"}, "spec.runPolicy.schedulingPolicy.minResources[cpu]"),
    ({"memory": "lots"}, "spec.runPolicy.schedulingPolicy.minResources[memory]"),
    ({"cpu": True}, "spec.runPolicy.schedulingPolicy.minResources[cpu]"),
])
def test_bad_min_resources_are_errors_naming_the_field(value: Any, field: str) -> None:
    with pytest.raises(SpecError) as info:
        PYTORCHJOB.to_workload(uneven(minAvailable=2, minResources=value), {}, {})
    assert (info.value.kind, info.value.name, info.value.field) == ("PyTorchJob", "team/bert", field)


def test_a_bad_min_available_is_an_error_naming_it_also_when_only_min_resources_need_it() -> None:
    job = uneven(minAvailable=9)
    job["metadata"]["annotations"] = {"gangq.io/min-member": "2"}
    with pytest.raises(SpecError) as info:
        PYTORCHJOB.to_workload(job, {}, {})
    assert info.value.field == "spec.runPolicy.schedulingPolicy.minAvailable"
    # with both annotations it is not read: the operator's PodGroup is not gangq's to check
    job["metadata"]["annotations"]["gangq.io/min-resources"] = "cpu=2"
    assert PYTORCHJOB.to_workload(job, {}, {}).min_member == 2


# --- minAvailable without minResources: the operator's sum ----------------------------------------


def test_the_replica_types_count_the_most_any_order_of_theirs_adds_up_to() -> None:
    # master first: 5 cpu and 9Gi; workers first: 2 cpu and 16Gi; the operator's order is random
    assert PYTORCHJOB.to_workload(uneven(minAvailable=2), {}, {}).min_resources == {"cpu": 5000, "memory": 16 * GI}
    # three of four: master first 6 cpu, 17Gi; workers first 4 cpu (three workers), 24Gi
    assert PYTORCHJOB.to_workload(uneven(minAvailable=3), {}, {}).min_resources == {"cpu": 6000, "memory": 24 * GI}
    # every pod: all of them, in any order
    assert PYTORCHJOB.to_workload(uneven(minAvailable=4), {}, {}).min_resources == {"cpu": 7000, "memory": 25 * GI}
    # pods that ask for the same: every order agrees
    same = pytorchjob(replica(1, container({"cpu": "1", "memory": "1Gi"})),
                      replica(2, container({"cpu": "1", "memory": "1Gi"})), minAvailable=2)
    assert PYTORCHJOB.to_workload(same, {}, {}).min_resources == {"cpu": 2000, "memory": 2 * GI}


def test_priority_classes_do_not_order_the_replica_types() -> None:
    # v1.8.1's PriorityClass lister is never filled: the master's class changes nothing
    job = uneven(minAvailable=2)
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["priorityClassName"] = "high"
    assert PYTORCHJOB.to_workload(job, HIGH, {}).min_resources == {"cpu": 5000, "memory": 16 * GI}
    job = uneven(minAvailable=1)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "high"
    assert PYTORCHJOB.to_workload(job, HIGH, {}).min_resources == {"cpu": 4000, "memory": 8 * GI}


def test_each_container_counts_its_requests_else_its_limits_and_nothing_else() -> None:
    worker = replica(3, container({"cpu": "1"}, {"cpu": "2", "nvidia.com/gpu": "1"}),  # requests only
                     container(None, {"cpu": "500m", "memory": "1Gi"}, name="sidecar"))  # limits only
    worker["template"]["spec"]["initContainers"] = [container({"cpu": "8"}, name="init")]
    worker["template"]["spec"]["overhead"] = {"cpu": "1"}
    job = pytorchjob(replica(1, container({"cpu": "1"})), worker, minAvailable=3)
    # the most for cpu and memory: three workers of 1.5 cpu and 1Gi
    assert PYTORCHJOB.to_workload(job, {}, {}).min_resources == {"cpu": 4500, "memory": 3 * GI}
    # the gang itself still asks for what the pods request as the kube-scheduler counts them
    worker_set = PYTORCHJOB.to_workload(job, {}, {}).pod_sets[1]
    assert worker_set.requests == {"cpu": 9000, "memory": GI, "nvidia.com/gpu": 1}


def test_an_empty_requests_map_is_set_and_hides_the_limits() -> None:
    job = pytorchjob(replica(1, container({}, {"cpu": "2"})), replica(1, container({"cpu": "1"})), minAvailable=2)
    assert PYTORCHJOB.to_workload(job, {}, {}).min_resources == {"cpu": 1000}
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["requests"] = None
    assert PYTORCHJOB.to_workload(job, {}, {}).min_resources == {"cpu": 3000}


def test_replicas_left_out_are_one_pod_and_amounts_are_exact_until_rounded_once() -> None:
    job = pytorchjob(replica(1, container({"cpu": "0.3333"})), replica(2, container({"cpu": "0.3333"})),
                     minAvailable=3)
    del job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"]
    # 3 × 0.3333 cores = 999.9 millicores, rounded up once (not 3 × 334)
    assert PYTORCHJOB.to_workload(job, {}, {}).min_resources == {"cpu": 1000}
    assert operator_min_resources("PyTorchJob", job, "pytorchReplicaSpecs", 1) == {"cpu": 334}


def test_nothing_is_derived_without_min_available_or_for_the_mpi_operators_jobs() -> None:
    assert PYTORCHJOB.to_workload(uneven(), {}, {}).min_resources is None
    job = uneven(minAvailable=2)
    job["metadata"]["annotations"] = {"gangq.io/min-member": "3"}
    # the operator writes minAvailable's PodGroup whatever gangq's own min-member says
    spec = PYTORCHJOB.to_workload(job, {}, {})
    assert (spec.min_member, spec.min_resources) == (3, {"cpu": 5000, "memory": 16 * GI})
    assert TFJOB.to_workload(_as_tfjob(uneven(minAvailable=2)), {}, {}).min_resources == {
        "cpu": 5000, "memory": 16 * GI}
    assert MPIJOB.to_workload(_as_mpijob(uneven(minAvailable=2)), {}, {}).min_resources is None


def test_bad_container_quantities_are_errors_naming_the_template_field() -> None:
    job = pytorchjob(replica(1, container(None, {"cpu": "two"})), replica(1, container({"cpu": "1"})),
                     minAvailable=2)
    with pytest.raises(SpecError) as info:
        PYTORCHJOB.to_workload(job, {}, {})
    assert info.value.field == "spec.pytorchReplicaSpecs[Master].template.spec.containers[0].resources.limits[cpu]"


# --- the operator's PodGroup and pods ---------------------------------------------------------------


def operator_podgroup(owner_kind: str, api_version: str) -> dict[str, Any]:
    """A PodGroup as the operator creates it: named after the job, the job's annotations, the job its
    controller (no labels: the operator copies none)."""
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "bert", "namespace": "team", "uid": "pg-1", "resourceVersion": "7",
                         "annotations": {"gangq.io/admission": "{}"},
                         "ownerReferences": [{"apiVersion": api_version, "kind": owner_kind, "name": "bert",
                                              "uid": "u1", "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"minMember": 2, "minResources": {"cpu": "5", "memory": "16Gi"}}}


def operator_pod(owner_kind: str, index: int) -> dict[str, Any]:
    """A worker pod as the operator creates it with gang scheduling on."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"bert-worker-{index}", "namespace": "team", "uid": f"p{index}",
                         "resourceVersion": str(10 + index), "creationTimestamp": "2026-01-01T00:00:01Z",
                         "labels": {"training.kubeflow.org/job-name": "bert",
                                    "training.kubeflow.org/replica-type": "worker",
                                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                                    "scheduling.x-k8s.io/pod-group": "bert", "gangq.io/queue-name": "q"},
                         "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": owner_kind, "name": "bert",
                                              "uid": "u1", "controller": True}]},
            "spec": {"schedulerName": "scheduler-plugins",
                     "containers": [container({"cpu": "1", "memory": "8Gi"})]}}


@pytest.mark.parametrize("kind", [PYTORCHJOB, TFJOB, MPIJOB], ids=lambda k: k.kind)
def test_the_operators_podgroup_is_the_jobs_gang_not_one_of_its_own(kind: Any) -> None:
    assert PODGROUPS in kind.child_resources
    assert podgroup.PODGROUP.resource == PODGROUPS
    assert kind.kind in podgroup.PODGROUP.controlled_by
    groups = podgroup.PodGroups()
    groups.podgroup_event("ADDED", operator_podgroup(kind.kind, kind.api_version))
    event = None
    for i in range(2):
        event = groups.pod_event("ADDED", operator_pod(kind.kind, i))
    assert event is not None and event[0] == "ADDED"  # minMember pods: a group as coscheduling sees it
    group = event[1]
    assert group["metadata"]["labels"] == {"gangq.io/queue-name": "q"}  # its pods' queue label, even so
    assert not podgroup.PODGROUP.ours(group)
    assert not queued(podgroup.PODGROUP, group, default_queue="q")
    # the same PodGroup created by a user (no controller) is a gang of its own
    mine = operator_podgroup(kind.kind, kind.api_version)
    mine["metadata"]["ownerReferences"][0]["controller"] = False
    groups.podgroup_event("MODIFIED", mine)
    assert podgroup.PODGROUP.ours(groups.group(podgroup.PODGROUP.key("team", "bert")) or {})


def test_the_operators_pods_are_the_jobs_and_the_webhook_never_gates_them() -> None:
    for owner, key in (("PyTorchJob", "team/pytorchjobs:bert"), ("TFJob", "team/tfjobs:bert")):
        pod = operator_pod(owner, 0)
        assert pod_gang(pod) == (key, "worker")
        answer = mutate_pod(Request("r1", "CREATE", None, "team", pod, None, pod=True))
        assert answer == {"uid": "r1", "allowed": True}  # no patch: no gate
    # the same labels on a pod no Kubeflow job controls: a pod group's member, gated
    stray = copy.deepcopy(operator_pod("PyTorchJob", 0))
    stray["metadata"]["ownerReferences"] = []
    del stray["metadata"]["labels"]["training.kubeflow.org/operator-name"]
    assert pod_gang(stray) == ("team/podgroups:bert", podgroup.role(stray))
    assert mutate_pod(Request("r2", "CREATE", None, "team", stray, None, pod=True)).get("patchType") == "JSONPatch"


def test_every_kubeflow_kind_is_registered_with_its_podgroups() -> None:
    kubeflow_kinds = [k for k in KINDS if k.group == "kubeflow.org"]
    assert kubeflow_kinds == [PYTORCHJOB, TFJOB, MPIJOB]
    assert all(PODGROUPS in k.child_resources for k in kubeflow_kinds)


# --- helpers --------------------------------------------------------------------------------------------


def _as_tfjob(job: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(job)
    out["kind"] = "TFJob"
    specs = out["spec"].pop("pytorchReplicaSpecs")
    out["spec"]["tfReplicaSpecs"] = {"Chief" if t == "Master" else t: s for t, s in specs.items()}
    return out


def _as_mpijob(job: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(job)
    out["apiVersion"], out["kind"] = "kubeflow.org/v2beta1", "MPIJob"
    specs = out["spec"].pop("pytorchReplicaSpecs")
    out["spec"]["mpiReplicaSpecs"] = {"Launcher" if t == "Master" else t: s for t, s in specs.items()}
    return out
