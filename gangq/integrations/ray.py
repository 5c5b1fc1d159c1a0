"""KubeRay's RayJob and RayCluster (``ray.io/v1``), held to KubeRay's operator v1.5.0.

**Pod sets**, Kueue's names: ``head`` (one pod), one per worker group named after its
``groupName`` in lower case, and for a RayJob in ``submissionMode: K8sJobMode`` (the CRD's
default) ``submitter``: the one pod of the Kubernetes Job KubeRay runs ``ray job submit`` in. A
worker group makes the pods KubeRay makes: ``replicas`` held within ``[minReplicas,
maxReplicas]`` (KubeRay clamps it so), times ``numOfHosts`` (default 1); a suspended worker group
none. Without ``spec.submitterPodTemplate`` the submitter is KubeRay's default pod (one container
``ray-job-submitter``, the head's image, requests cpu 500m and memory 200Mi); in ``SidecarMode``
KubeRay adds that default container to the head pod, so the head pod set requests it too.

**Queued** by ``spec.suspend``: KubeRay creates nothing for a suspended RayJob and deletes a
running one's RayCluster and submitter Job; it deletes a suspended RayCluster's pods.

**Finished**: a RayJob once ``status.jobDeploymentStatus`` is ``Complete`` or ``Failed`` (KubeRay's
terminal states: a failure it retries under ``spec.backoffLimit`` is written as ``Retrying``,
never ``Failed``), or ``ValidationFailed`` before any RayCluster was named (KubeRay never leaves
that state). A RayCluster never finishes on its own: it holds its quota until it is deleted or
suspended.

**Refused** (a ``SpecError`` naming the field), as Kueue refuses them: in-tree autoscaling
(``enableInTreeAutoscaling``: the autoscaler changes the number of pods after admission, and
gangq admits a fixed gang); a queued RayJob that keeps its RayCluster after the job ends
(``spec.shutdownAfterJobFinishes`` false: the cluster would hold the quota, and KubeRay refuses to
suspend such a RayJob); a RayJob with both ``spec.rayClusterSpec`` and ``spec.clusterSelector``;
a worker group named ``head`` (or ``submitter`` beside a submitter). Also refused: GCS fault
tolerance (``gcsFaultToleranceOptions``, or annotation ``ray.io/ft-enabled``), whose Redis cleanup
Job KubeRay runs when the cluster is deleted, outside the gang's pods.

**Not queued**: a RayJob with ``spec.clusterSelector`` alone runs on an existing RayCluster, which
holds the quota (queue that RayCluster); KubeRay cannot suspend it. A RayCluster that a RayJob
controls is that RayJob's gang (it carries the RayJob's labels, the queue label too).

**Which pods**: a RayCluster's pods carry ``ray.io/cluster`` (its name), ``ray.io/node-type`` and
``ray.io/group``. A RayJob's RayCluster is named by KubeRay with a random suffix and its submitter
Job's pods carry no Ray label at all, so the admission labels every pod template of a RayJob with
``gangq.io/rayjob-name`` (and writes KubeRay's default submitter template into
``spec.submitterPodTemplate`` when it is absent, as Kueue does). An eviction puts the templates
back as the user wrote them; the pods made meanwhile keep the label, so the stopping gang's pods
are counted until they are gone.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from gangq.api.meta import Meta
from gangq.core.decisions import Admission
from gangq.core.errors import SpecError
from gangq.core.model import FlavorSpec, WorkloadSpec
from gangq.integrations import podsets
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.podsets import JsonPath, Patch, PodSet, object_name, pointer

GROUP: Final = "ray.io"
VERSION: Final = "v1"

CLUSTER_LABEL: Final = "ray.io/cluster"
GROUP_LABEL: Final = "ray.io/group"
NODE_TYPE_LABEL: Final = "ray.io/node-type"
FT_ENABLED_ANNOTATION: Final = "ray.io/ft-enabled"
"""GCS fault tolerance turned on the older way (a RayJob's annotations go to its RayCluster)."""
RAYJOB_LABEL: Final = "gangq.io/rayjob-name"
"""On every pod template of an admitted RayJob (and so on its pods): the RayJob's name."""
DEFAULT_SUBMITTER_ANNOTATION: Final = "gangq.io/default-submitter"
"""On a submitter template that is KubeRay's default, written out by gangq's admission."""

HEAD: Final = "head"
SUBMITTER: Final = "submitter"
K8S_JOB_MODE: Final = "K8sJobMode"
SIDECAR_MODE: Final = "SidecarMode"
SUBMISSION_MODES: Final = frozenset({K8S_JOB_MODE, "HTTPMode", "InteractiveMode", SIDECAR_MODE})
SUBMITTER_CONTAINER: Final = "ray-job-submitter"
SUBMITTER_RESOURCES: Final[Mapping[str, Mapping[str, str]]] = {
    "limits": {"cpu": "1", "memory": "1Gi"},
    "requests": {"cpu": "500m", "memory": "200Mi"},
}
"""KubeRay's default submitter container's resources (``GetDefaultSubmitterContainer``)."""

_MAX_INT32: Final = 2**31 - 1
_COMPLETE: Final = "Complete"
_FAILED: Final = "Failed"
_VALIDATION_FAILED: Final = "ValidationFailed"
# JobDeploymentStatus values reached only once a RayCluster ran.
_RAN: Final = frozenset({"Running", "Waiting", _COMPLETE, _FAILED, "Retrying"})


def _int(kind: str, obj: Mapping[str, Any], field: str, value: Any, default: int, minimum: int) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SpecError(kind, object_name(obj), field, f"must be an integer >= {minimum}, got {value!r}")
    return value


def worker_pods(kind: str, obj: Mapping[str, Any], group: Mapping[str, Any], field: str) -> int:
    """The pods KubeRay makes for a worker group (``GetWorkerGroupDesiredReplicas``): none when
    it is suspended; else ``replicas`` (absent: ``minReplicas``) held within ``[minReplicas,
    maxReplicas]`` (``maxReplicas`` when they cross), times ``numOfHosts``."""
    low = _int(kind, obj, f"{field}.minReplicas", group.get("minReplicas"), 0, 0)
    high = _int(kind, obj, f"{field}.maxReplicas", group.get("maxReplicas"), _MAX_INT32, 0)
    replicas = _int(kind, obj, f"{field}.replicas", group.get("replicas"), low, 0)
    hosts = _int(kind, obj, f"{field}.numOfHosts", group.get("numOfHosts"), 1, 1)
    if group.get("suspend") is True:
        return 0
    count = high if low > high else min(max(replicas, low), high)
    return count * hosts


def cluster_pod_sets(kind: str, obj: Mapping[str, Any], spec_path: JsonPath, field: str,
                     reserved: tuple[str, ...] = (HEAD,)) -> list[PodSet]:
    """The head's and the worker groups' pod sets of the RayClusterSpec at ``spec_path``
    (``field`` as the user writes it); worker groups are guarded by their ``groupName``."""
    name = object_name(obj)
    spec = podsets.get(obj, spec_path)
    if not isinstance(spec, Mapping):
        raise SpecError(kind, name, field, "is required (a RayClusterSpec)")
    if not isinstance(spec.get("headGroupSpec"), Mapping):
        raise SpecError(kind, name, f"{field}.headGroupSpec", "is required")
    out = [PodSet(HEAD, 1, (*spec_path, "headGroupSpec", "template"), f"{field}.headGroupSpec.template")]
    groups = spec.get("workerGroupSpecs")
    if groups is None:
        return out
    if not isinstance(groups, list):
        raise SpecError(kind, name, f"{field}.workerGroupSpecs", "must be a list of worker groups")
    for i, group in enumerate(groups):
        gfield = f"{field}.workerGroupSpecs[{i}]"
        if not isinstance(group, Mapping):
            raise SpecError(kind, name, gfield, "must be a worker group (an object)")
        group_name = group.get("groupName")
        if not isinstance(group_name, str) or not group_name:
            raise SpecError(kind, name, f"{gfield}.groupName", "is required (a non-empty string)")
        set_name = group_name.lower()
        if set_name in reserved:
            raise SpecError(kind, name, f"{gfield}.groupName",
                            f"{group_name!r} is reserved for the {set_name} pod set; rename the worker group")
        path: JsonPath = (*spec_path, "workerGroupSpecs", i)
        out.append(PodSet(set_name, worker_pods(kind, obj, group, gfield), (*path, "template"),
                          f"{gfield}.template", guard=(pointer((*path, "groupName")), group_name)))
    return out


def check_cluster_spec(kind: str, obj: Mapping[str, Any], spec_path: JsonPath, field: str) -> None:
    """What gangq refuses in a RayClusterSpec (see the module docstring)."""
    spec = podsets.get(obj, spec_path)
    if not isinstance(spec, Mapping):
        return
    if spec.get("enableInTreeAutoscaling") is True:
        raise SpecError(kind, object_name(obj), f"{field}.enableInTreeAutoscaling",
                        "must not be true for a queued workload: the autoscaler would change the number of pods "
                        "after admission, and the gang is admitted with a fixed number (elastic admission is not "
                        "supported); set the worker groups' replicas instead")
    why = ("is not supported for a queued workload: KubeRay runs a Redis cleanup Job when the cluster is "
           "deleted, whose pod no quota would account for")
    if spec.get("gcsFaultToleranceOptions") is not None:
        raise SpecError(kind, object_name(obj), f"{field}.gcsFaultToleranceOptions", why)
    annotations = Meta(obj).annotations
    if str(annotations.get(FT_ENABLED_ANNOTATION, "")).lower() == "true":
        raise SpecError(kind, object_name(obj), f"metadata.annotations[{FT_ENABLED_ANNOTATION}]",
                        f"(GCS fault tolerance) {why}")


def _cluster_ran(status: Mapping[str, Any]) -> bool:
    """Has the RayCluster with this status had pods: ready once, a head pod named, workers ready?"""
    head = status.get("head")
    return bool(status.get("state") == "ready" or (isinstance(head, Mapping) and head.get("podName"))
                or status.get("readyWorkerReplicas") or status.get("availableWorkerReplicas"))


def _pod_set_of(labels: Mapping[str, Any]) -> str | None:
    node_type = labels.get(NODE_TYPE_LABEL)
    if node_type == "head":
        return HEAD
    if node_type == "worker" and labels.get(GROUP_LABEL):
        return str(labels[GROUP_LABEL]).lower()
    return None


def _remove_label_ops(obj: Mapping[str, Any], ps: PodSet, key: str) -> Patch:
    """JSON Patch operations that take label ``key`` off the pod set's template, and the labels
    (and metadata) that held it alone: the template as it was before :func:`_add_label_ops`."""
    meta = podsets.get(obj, (*ps.path, "metadata"))
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(labels, Mapping) or key not in labels:
        return []
    if len(labels) > 1:
        return [{"op": "remove", "path": pointer((*ps.path, "metadata", "labels", key))}]
    if len(meta) > 1:
        return [{"op": "remove", "path": pointer((*ps.path, "metadata", "labels"))}]
    return [{"op": "remove", "path": pointer((*ps.path, "metadata"))}]


def _add_label_ops(obj: Mapping[str, Any], ps: PodSet, key: str, value: str) -> Patch:
    """JSON Patch operations that set label ``key`` to ``value`` on the pod set's template."""
    meta = podsets.get(obj, (*ps.path, "metadata"))
    if not isinstance(meta, Mapping):
        return [{"op": "add", "path": pointer((*ps.path, "metadata")), "value": {"labels": {key: value}}}]
    labels = meta.get("labels")
    if not isinstance(labels, Mapping):
        return [{"op": "add", "path": pointer((*ps.path, "metadata", "labels")), "value": {key: value}}]
    if labels.get(key) == value:
        return []
    return [{"op": "add", "path": pointer((*ps.path, "metadata", "labels", key)), "value": value}]


class RayClusterKind(WorkloadKind):
    """RayCluster (see the module docstring)."""

    kind = "RayCluster"
    group = GROUP
    version = VERSION
    plural = "rayclusters"
    workload_prefix = "raycluster-"
    owner_label = "gangq.io/raycluster-name"
    optional = True
    pod_priority = 35  # after RayJob's: a RayJob's pods carry ray.io/cluster too
    docs = ("pod sets `head` and one per worker group (`groupName`, lower case); `spec.suspend`; never finishes "
            "on its own; refuses `enableInTreeAutoscaling`")

    def ours(self, obj: Mapping[str, Any]) -> bool:
        ref = Meta(obj).controller_reference
        return ref is None or ref.kind != RAYJOB_KIND or not ref.api_version.startswith(GROUP)

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        return cluster_pod_sets(self.kind, obj, ("spec",), "spec")

    def to_workload(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int],
                    workload_priority_classes: Mapping[str, int], default_queue: str | None = None) -> WorkloadSpec:
        check_cluster_spec(self.kind, obj, ("spec",), "spec")
        return super().to_workload(obj, priority_classes, workload_priority_classes, default_queue)

    def started(self, obj: Mapping[str, Any]) -> bool:
        status = obj.get("status")
        return isinstance(status, Mapping) and _cluster_ran(status)

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        return None  # it runs until deleted or suspended

    def pod_selector(self, name: str) -> str:
        return f"{CLUSTER_LABEL}={name}"

    def pod_owner(self, pod: Mapping[str, Any]) -> tuple[str, str | None] | None:
        meta = Meta(pod)
        labels = meta.labels
        cluster = labels.get(CLUSTER_LABEL)
        if not cluster or labels.get(RAYJOB_LABEL):
            return None
        return self.key(meta.namespace_or_default, str(cluster)), _pod_set_of(labels)


RAYJOB_KIND: Final = "RayJob"
_CLUSTER_SPEC: Final[JsonPath] = ("spec", "rayClusterSpec")
_CLUSTER_FIELD: Final = "spec.rayClusterSpec"
_SUBMITTER_PATH: Final[JsonPath] = ("spec", "submitterPodTemplate")


def submission_mode(obj: Mapping[str, Any]) -> str:
    """``spec.submissionMode``, the CRD's default ``K8sJobMode`` when absent."""
    mode = (obj.get("spec") or {}).get("submissionMode")
    if mode is None or mode == "":
        return K8S_JOB_MODE
    if mode not in SUBMISSION_MODES:
        raise SpecError(RAYJOB_KIND, object_name(obj), "spec.submissionMode",
                        f"must be one of {', '.join(sorted(SUBMISSION_MODES))}, got {mode!r}")
    return str(mode)


def _head_image(obj: Mapping[str, Any]) -> Any:
    containers = podsets.get(obj, (*_CLUSTER_SPEC, "headGroupSpec", "template", "spec", "containers"))
    if isinstance(containers, list) and containers and isinstance(containers[0], Mapping):
        return containers[0].get("image")
    return None


def default_submitter_container(obj: Mapping[str, Any]) -> dict[str, Any]:
    """KubeRay's default submitter container: the head's image, the default resources."""
    container: dict[str, Any] = {"name": SUBMITTER_CONTAINER, "resources": copy.deepcopy(dict(SUBMITTER_RESOURCES))}
    image = _head_image(obj)
    if image is not None:
        container["image"] = image
    return container


def default_submitter_template(obj: Mapping[str, Any]) -> dict[str, Any]:
    """KubeRay's default submitter pod template (``GetSubmitterTemplate``), labelled with the
    RayJob and marked as written out by gangq (an eviction takes it out again)."""
    name = Meta(obj).name
    return {"metadata": {"labels": {RAYJOB_LABEL: name}, "annotations": {DEFAULT_SUBMITTER_ANNOTATION: "true"}},
            "spec": {"containers": [default_submitter_container(obj)], "restartPolicy": "Never"}}


def written_out_submitter(obj: Mapping[str, Any]) -> bool:
    """Is ``spec.submitterPodTemplate`` KubeRay's default that gangq wrote out at admission?"""
    annotations = podsets.get(obj, (*_SUBMITTER_PATH, "metadata", "annotations"))
    return isinstance(annotations, Mapping) and annotations.get(DEFAULT_SUBMITTER_ANNOTATION) == "true"


class RayJobKind(WorkloadKind):
    """RayJob (see the module docstring)."""

    kind = RAYJOB_KIND
    group = GROUP
    version = VERSION
    plural = "rayjobs"
    workload_prefix = "rayjob-"
    owner_label = RAYJOB_LABEL
    optional = True
    pod_priority = 40  # its submitter's pods carry the Job's labels, its Ray pods the RayCluster's
    docs = ("pod sets `head`, one per worker group (`groupName`, lower case) and `submitter` (K8sJobMode); "
            "`spec.suspend`; `status.jobDeploymentStatus` `Complete` / `Failed`; refuses "
            "`enableInTreeAutoscaling`; one with `clusterSelector` alone is not queued")

    def ours(self, obj: Mapping[str, Any]) -> bool:
        spec = obj.get("spec") or {}
        return not (spec.get("clusterSelector") and spec.get("rayClusterSpec") is None)

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        mode = submission_mode(obj)
        submitter = mode == K8S_JOB_MODE
        out = cluster_pod_sets(self.kind, obj, _CLUSTER_SPEC, _CLUSTER_FIELD,
                               (HEAD, SUBMITTER) if submitter else (HEAD,))
        if submitter:
            out.append(PodSet(SUBMITTER, 1, _SUBMITTER_PATH, "spec.submitterPodTemplate"))
        return out

    def gang_view(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """The RayJob with the pods KubeRay makes from it written out: the default submitter
        template when it has none (K8sJobMode), the submitter container in the head pod
        (SidecarMode). Its gang is built from this, never written back as such."""
        mode = submission_mode(obj)
        spec = obj.get("spec") or {}
        if mode == K8S_JOB_MODE and spec.get("submitterPodTemplate") is None:
            return {**obj, "spec": {**spec, "submitterPodTemplate": default_submitter_template(obj)}}
        containers = podsets.get(obj, (*_CLUSTER_SPEC, "headGroupSpec", "template", "spec", "containers"))
        if mode == SIDECAR_MODE and isinstance(containers, list):
            view = copy.deepcopy(dict(obj))
            head = view["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
            head["containers"] = [*containers, default_submitter_container(obj)]
            return view
        return obj

    def check(self, obj: Mapping[str, Any]) -> None:
        """What gangq refuses in a RayJob it queues (see the module docstring)."""
        name = object_name(obj)
        spec = obj.get("spec") or {}
        if spec.get("clusterSelector"):
            raise SpecError(self.kind, name, "spec.clusterSelector",
                            "must not be set beside spec.rayClusterSpec: a queued RayJob runs on a RayCluster of "
                            "its own (a RayJob on an existing RayCluster is not queued: queue that RayCluster)")
        if spec.get("rayClusterSpec") is None:
            raise SpecError(self.kind, name, _CLUSTER_FIELD, "is required: a queued RayJob runs on a RayCluster "
                            "of its own")
        if spec.get("shutdownAfterJobFinishes") is not True:
            raise SpecError(self.kind, name, "spec.shutdownAfterJobFinishes",
                            "must be true for a queued RayJob: its RayCluster would otherwise hold the quota after "
                            "the job ends (and KubeRay refuses to suspend such a RayJob)")
        check_cluster_spec(self.kind, obj, _CLUSTER_SPEC, _CLUSTER_FIELD)

    def to_workload(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int],
                    workload_priority_classes: Mapping[str, int], default_queue: str | None = None) -> WorkloadSpec:
        self.check(obj)
        return super().to_workload(obj, priority_classes, workload_priority_classes, default_queue)

    def runtime_limit(self, obj: Mapping[str, Any]) -> float | None:
        deadline = (obj.get("spec") or {}).get("activeDeadlineSeconds")
        if isinstance(deadline, int) and not isinstance(deadline, bool) and deadline > 0:
            return float(deadline)
        return None

    def started(self, obj: Mapping[str, Any]) -> bool:
        status = obj.get("status") or {}
        cluster = status.get("rayClusterStatus")
        return bool(status.get("jobDeploymentStatus") in _RAN
                    or (isinstance(cluster, Mapping) and _cluster_ran(cluster)))

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        status = obj.get("status") or {}
        state = status.get("jobDeploymentStatus")
        if state == _COMPLETE:
            return "Completed"
        if state == _FAILED or (state == _VALIDATION_FAILED and not status.get("rayClusterName")):
            return "Failed"
        return None

    def pod_selector(self, name: str) -> str:
        return f"{RAYJOB_LABEL}={name}"

    def pod_owner(self, pod: Mapping[str, Any]) -> tuple[str, str | None] | None:
        meta = Meta(pod)
        labels = meta.labels
        name = labels.get(RAYJOB_LABEL)
        if not name:
            return None
        pod_set = _pod_set_of(labels)
        if pod_set is None and not labels.get(NODE_TYPE_LABEL):
            pod_set = SUBMITTER  # the submitter Job's pod: no Ray label
        return self.key(meta.namespace_or_default, str(name)), pod_set

    def admission_ops(self, obj: Mapping[str, Any], admission: Admission,
                      flavors: Mapping[str, FlavorSpec]) -> Patch:
        """The flavors injected into the head, worker and submitter templates (KubeRay's default
        submitter template written out first when absent), every template labelled with the
        RayJob's name (its pods are found by it), then unsuspended."""
        ops: Patch = []
        view = obj
        spec = obj.get("spec") or {}
        if submission_mode(obj) == K8S_JOB_MODE and spec.get("submitterPodTemplate") is None:
            template = default_submitter_template(obj)
            ops.append({"op": "add", "path": pointer(_SUBMITTER_PATH), "value": template})
            view = {**obj, "spec": {**spec, "submitterPodTemplate": template}}
        pod_sets = self.pod_sets(view)
        ops += podsets.admission_ops(self.kind, view, pod_sets, admission, flavors)
        name = Meta(obj).name
        for ps in pod_sets:
            labels = _add_label_ops(view, ps, RAYJOB_LABEL, name)
            if labels and ps.guard is not None:
                ops.append({"op": "test", "path": ps.guard[0], "value": ps.guard[1]})
            ops += labels
        return [*ops, *self.unsuspend_ops(obj)]

    def eviction_ops(self, obj: Mapping[str, Any]) -> Patch:
        """The templates as the user wrote them: the flavors' node labels and tolerations and the
        RayJob's label taken out, a written-out default submitter removed; then suspended. (The
        pods already made keep the label: they are still counted as the gang's until gone.)"""
        pod_sets = self.pod_sets(obj)
        default = written_out_submitter(obj)
        submitter = pointer(_SUBMITTER_PATH)
        ops = [op for op in podsets.restore_ops(self.kind, obj, pod_sets)
               if not (default and (op["path"] == submitter or op["path"].startswith(submitter + "/")))]
        for ps in pod_sets:
            if default and ps.name == SUBMITTER:
                continue
            labels = _remove_label_ops(obj, ps, RAYJOB_LABEL)
            if labels and ps.guard is not None:
                ops.append({"op": "test", "path": ps.guard[0], "value": ps.guard[1]})
            ops += labels
        if default:
            ops.append({"op": "remove", "path": submitter})
        return [*ops, *self.suspend_ops(obj)]


RAYCLUSTER = RayClusterKind()
RAYJOB = RayJobKind()

__all__ = [
    "CLUSTER_LABEL", "DEFAULT_SUBMITTER_ANNOTATION", "GROUP", "GROUP_LABEL", "HEAD", "NODE_TYPE_LABEL", "RAYCLUSTER",
    "RAYJOB", "RAYJOB_LABEL", "SUBMITTER", "SUBMITTER_RESOURCES", "RayClusterKind", "RayJobKind", "check_cluster_spec",
    "cluster_pod_sets", "default_submitter_template", "submission_mode", "worker_pods", "written_out_submitter",
]
