"""One sample per registered kind for the contract test (tests/integrations/test_contract.py): a
queued object of the kind, suspended, with at least one pod set, and a pod as the kind's own
controller would create it for a pod set. A kind added to gangq/integrations/registry.py adds its
sample here (docs/integrating-a-kind.md)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gangq.integrations import podgroup
from gangq.integrations.podsets import Resource
from gangq.integrations.trainjob import CLUSTER_TRAINING_RUNTIMES, TRAINJOB

NS, NAME, QUEUE = "team", "train", "research"


def pod_template(gpus: int = 1) -> dict[str, Any]:
    return {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "busybox",
         "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                       "limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def meta(**extra: Any) -> dict[str, Any]:
    return {"name": NAME, "namespace": NS, "uid": "uid-1", "generation": 1,
            "creationTimestamp": "2026-12-01T00:00:00Z", "labels": {"gangq.io/queue-name": QUEUE}, **extra}


def pod(labels: dict[str, str], owner_kind: str, owner_name: str = NAME) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{owner_name}-pod", "namespace": NS, "labels": labels,
                         "ownerReferences": [{"kind": owner_kind, "name": owner_name, "controller": True,
                                              "uid": "uid-2", "apiVersion": "x/v1"}]},
            "spec": copy.deepcopy(pod_template()["spec"])}


@dataclass(frozen=True)
class Sample:
    obj: Callable[[], dict[str, Any]]
    """A queued, suspended object with its pod sets."""
    pod: Callable[[str], dict[str, Any]]
    """A pod of the named pod set, as the kind's controller creates it."""
    pod_sets: dict[str, int]
    """Each pod set's name and pod count."""
    break_cpu: Callable[[dict[str, Any], str], None] | None = None
    """For a kind whose first pod set's template is not in the object itself (a TrainJob's is in
    its runtime): set that template's first container's cpu request to the given text."""
    references: Callable[[], list[tuple[Resource, dict[str, Any]]]] | None = None
    """The objects the kind builds the sample's gang from (a TrainJob's runtime): the contract
    test hands each to the kind (``reference_event``, ADDED) before a test and takes it back
    (DELETED) after it."""
    members: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None
    """For a kind whose writes patch or delete its pods (a pod group): the object's pods."""
    regroup: Callable[[dict[str, Any], list[dict[str, Any]]], dict[str, Any]] | None = None
    """For such a kind: the object as its watches show it once its pods are the given ones."""


def _jobset() -> dict[str, Any]:
    def rjob(name: str, replicas: int, pods: int) -> dict[str, Any]:
        return {"name": name, "replicas": replicas, "template": {"spec": {
            "parallelism": pods, "completions": pods, "template": pod_template()}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta(),
            "spec": {"suspend": True, "replicatedJobs": [rjob("driver", 1, 1), rjob("workers", 2, 2)]}}


def _job() -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(),
            "spec": {"suspend": True, "parallelism": 3, "completions": 3, "template": pod_template()}}


def _kubeflow(kind: str, version: str, field: str, types: tuple[str, ...]) -> Callable[[], dict[str, Any]]:
    def make() -> dict[str, Any]:
        specs = {t: {"replicas": 1 if i == 0 else 2, "template": pod_template()} for i, t in enumerate(types)}
        return {"apiVersion": f"kubeflow.org/{version}", "kind": kind, "metadata": meta(),
                "spec": {"runPolicy": {"suspend": True}, field: specs}}
    return make


def _kubeflow_pod(kind: str, operator: str) -> Callable[[str], dict[str, Any]]:
    def make(pod_set: str) -> dict[str, Any]:
        return pod({"training.kubeflow.org/job-name": NAME, "training.kubeflow.org/replica-type": pod_set,
                    "training.kubeflow.org/operator-name": operator}, kind)
    return make


def _ray_cluster_spec() -> dict[str, Any]:
    return {"headGroupSpec": {"rayStartParams": {}, "template": pod_template()},
            "workerGroupSpecs": [{"groupName": "workers", "replicas": 2, "minReplicas": 0, "maxReplicas": 4,
                                  "rayStartParams": {}, "template": pod_template()}]}


def _rayjob() -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta(),
            "spec": {"suspend": True, "shutdownAfterJobFinishes": True, "entrypoint": "python train.py",
                     "rayClusterSpec": _ray_cluster_spec(), "submitterPodTemplate": pod_template()}}


def _raycluster() -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta(),
            "spec": {"suspend": True, **_ray_cluster_spec()}}


def _ray_pod(cluster: str, pod_set: str, **labels: str) -> dict[str, Any]:
    node = {"ray.io/node-type": "head", "ray.io/group": "headgroup"} if pod_set == "head" else {
        "ray.io/node-type": "worker", "ray.io/group": pod_set}
    return pod({"ray.io/cluster": cluster, "ray.io/is-ray-node": "yes", **node, **labels}, "RayCluster", cluster)


def _rayjob_pod(pod_set: str) -> dict[str, Any]:
    """KubeRay names a RayJob's RayCluster with a random suffix and its submitter Job after the
    RayJob; gangq's admission labels every template with the RayJob's name."""
    if pod_set == "submitter":
        return pod({"batch.kubernetes.io/job-name": NAME, "job-name": NAME, "gangq.io/rayjob-name": NAME}, "Job")
    return _ray_pod(f"{NAME}-x7k2q", pod_set, **{"gangq.io/rayjob-name": NAME})


def _group_pod(name: str, cpu: str) -> dict[str, Any]:
    """A pod of the sample PodGroup, gated as the webhook creates it (its queue label is the
    PodGroup's)."""
    spec = copy.deepcopy(pod_template()["spec"])
    spec["containers"][0]["resources"]["requests"]["cpu"] = cpu
    spec["schedulingGates"] = [{"name": podgroup.GATE}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "5",
                         "creationTimestamp": "2026-12-01T00:00:01Z", "labels": {podgroup.POD_GROUP_LABEL: NAME}},
            "spec": spec, "status": {"phase": "Pending"}}


_GROUP_PODS: dict[str, tuple[str, tuple[str, ...]]] = {
    "launcher": ("1", (f"{NAME}-launcher",)), "worker": ("2", (f"{NAME}-worker-0", f"{NAME}-worker-1"))}
"""The sample group's two roles (one pod set each): their cpu request and pods."""
_ROLES: dict[str, str] = {podgroup.role(_group_pod("x", cpu)): r for r, (cpu, _) in _GROUP_PODS.items()}


def _podgroup_of(podgroup_obj: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    groups = podgroup.PodGroups()
    groups.podgroup_event("ADDED", podgroup_obj)
    for p in pods:
        groups.pod_event("ADDED", p)
    out = groups.group(podgroup.PODGROUP.key(NS, NAME))
    assert out is not None
    return out


def _podgroup() -> dict[str, Any]:
    obj = {"apiVersion": f"{podgroup.GROUP}/{podgroup.VERSION}", "kind": podgroup.KIND,
           "metadata": meta(resourceVersion="3"), "spec": {"minMember": 3}}
    return _podgroup_of(obj, [_group_pod(n, cpu) for cpu, names in _GROUP_PODS.values() for n in names])


def _podgroup_pod(pod_set: str) -> dict[str, Any]:
    cpu, names = _GROUP_PODS[_ROLES[pod_set]]
    return _group_pod(names[0], cpu)


def _regroup(obj: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    podgroup_obj = {k: copy.deepcopy(v) for k, v in obj.items() if k != podgroup.MEMBERS}
    return _podgroup_of(podgroup_obj, pods)


def _runtime(cpu: str = "1") -> dict[str, Any]:
    """A ClusterTrainingRuntime as the Trainer's torch-distributed one: a dataset initializer,
    then the trainer's nodes."""
    def rjob(name: str, step: str) -> dict[str, Any]:
        template = pod_template()
        template["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
        return {"name": name, "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}},
            "spec": {"template": template}}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torch-distributed", "uid": "uid-rt", "generation": 1},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
                     "template": {"spec": {"replicatedJobs": [rjob("dataset-initializer", "dataset-initializer"),
                                                              rjob("node", "trainer")]}}}}


def _trainjob() -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta(),
            "spec": {"suspend": True, "runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}}


def _break_runtime(obj: dict[str, Any], cpu: str) -> None:
    """The runtime changed under the TrainJob: its first replicatedJob's first container asks ``cpu``."""
    broken = _runtime()
    broken["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["resources"]["requests"]["cpu"] = cpu
    TRAINJOB.reference_event(CLUSTER_TRAINING_RUNTIMES, "MODIFIED", broken)


def _jobset_pod(pod_set: str) -> dict[str, Any]:
    """A pod of a JobSet's replicatedJob, as the JobSet's Job makes it (a TrainJob's JobSet too)."""
    return pod({"jobset.sigs.k8s.io/jobset-name": NAME, "jobset.sigs.k8s.io/replicatedjob-name": pod_set,
                "batch.kubernetes.io/job-name": f"{NAME}-{pod_set}-0"}, "Job", f"{NAME}-{pod_set}-0")


SAMPLES: dict[str, Sample] = {
    "JobSet": Sample(_jobset, lambda ps: pod({"jobset.sigs.k8s.io/jobset-name": NAME,
                                              "jobset.sigs.k8s.io/replicatedjob-name": ps,
                                              "batch.kubernetes.io/job-name": f"{NAME}-{ps}-0"}, "Job",
                                             f"{NAME}-{ps}-0"),
                     {"driver": 1, "workers": 4}),
    "Job": Sample(_job, lambda ps: pod({"batch.kubernetes.io/job-name": NAME}, "Job"), {"main": 3}),
    "PyTorchJob": Sample(_kubeflow("PyTorchJob", "v1", "pytorchReplicaSpecs", ("Master", "Worker")),
                         _kubeflow_pod("PyTorchJob", "pytorchjob-controller"), {"master": 1, "worker": 2}),
    "TFJob": Sample(_kubeflow("TFJob", "v1", "tfReplicaSpecs", ("Chief", "Worker")),
                    _kubeflow_pod("TFJob", "tfjob-controller"), {"chief": 1, "worker": 2}),
    "MPIJob": Sample(_kubeflow("MPIJob", "v2beta1", "mpiReplicaSpecs", ("Launcher", "Worker")),
                     _kubeflow_pod("MPIJob", "mpi-operator"), {"launcher": 1, "worker": 2}),
    "PodGroup": Sample(_podgroup, _podgroup_pod,
                       {r: len(_GROUP_PODS[name][1]) for r, name in _ROLES.items()},
                       members=lambda obj: [copy.deepcopy(dict(p)) for p in podgroup.pods(obj)], regroup=_regroup),
    "RayJob": Sample(_rayjob, _rayjob_pod, {"head": 1, "workers": 2, "submitter": 1}),
    "RayCluster": Sample(_raycluster, lambda ps: _ray_pod(NAME, ps), {"head": 1, "workers": 2}),
    "TrainJob": Sample(_trainjob, _jobset_pod, {"dataset-initializer": 1, "node": 2}, break_cpu=_break_runtime,
                       references=lambda: [(CLUSTER_TRAINING_RUNTIMES, _runtime())]),
}
