"""Kubeflow training jobs: PyTorchJob and TFJob (``kubeflow.org/v1``, the training operator) and
MPIJob (``kubeflow.org/v2beta1``, the MPI operator).

Each has a map of replica specs (``spec.pytorchReplicaSpecs`` …): replica type → ``{replicas,
template}``, one pod set per replica type named in lower case (``Master`` → ``master``, Kueue's
names too). Suspended by ``spec.runPolicy.suspend``; finished once its ``Succeeded`` or
``Failed`` condition is true. Their CRDs are optional: not served, there is nothing to queue.

Gang size: every pod, unless ``gangq.io/min-member`` says otherwise or the job's own
``spec.runPolicy.schedulingPolicy.minAvailable`` does (the training operator's gang setting,
honoured so a job written for Volcano's or coscheduling's gang keeps its meaning).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gangq.api import kubeflow
from gangq.api.workload import MIN_MEMBER_ANNOTATION, parse_min_member
from gangq.core.errors import SpecError
from gangq.core.model import WorkloadSpec
from gangq.integrations import podsets
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.podsets import Patch, PodSet, object_name


class KubeflowJobKind(WorkloadKind):
    """PyTorchJob, TFJob, MPIJob (see the module docstring)."""

    group = kubeflow.GROUP
    suspend_path = kubeflow.SUSPEND_PATH
    optional = True
    pod_priority = 30  # an MPIJob's launcher runs in a Job of its own

    def __init__(self, kf: kubeflow.KubeflowKind) -> None:
        self.kf = kf
        self.kind = kf.kind
        self.version = kf.version
        self.plural = kf.plural
        self.workload_prefix = f"{kf.kind.lower()}-"
        self.owner_label = f"gangq.io/{kf.kind.lower()}-name"
        self.pod_sets_field = f"spec.{kf.replica_specs}"
        self.docs = ("one pod set per replica type (lower case); `spec.runPolicy.suspend`; "
                     "conditions `Succeeded` / `Failed`; honours `schedulingPolicy.minAvailable`")

    def key(self, namespace: str, name: str) -> str:
        return self.kf.key(namespace, name)

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        specs = (obj.get("spec") or {}).get(self.kf.replica_specs)
        field = f"spec.{self.kf.replica_specs}"
        if not isinstance(specs, Mapping) or not specs:
            raise SpecError(self.kind, object_name(obj), field, "must name at least one replica type")
        out = []
        for rtype, rspec in specs.items():
            replicas = rspec.get("replicas", 1) if isinstance(rspec, Mapping) else 1
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise SpecError(self.kind, object_name(obj), f"{field}[{rtype}].replicas",
                                f"must be a non-negative integer, got {replicas!r}")
            out.append(PodSet(kubeflow.pod_set_name(str(rtype)), replicas,
                              ("spec", self.kf.replica_specs, str(rtype), "template"), f"{field}[{rtype}].template"))
        return out

    def to_workload(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int],
                    workload_priority_classes: Mapping[str, int], default_queue: str | None = None) -> WorkloadSpec:
        pod_sets = self.pod_sets(obj)
        spec = podsets.to_workload(self.kind, obj, pod_sets, key=self.key_of(obj), priority_classes=priority_classes,
                                   workload_priority_classes=workload_priority_classes, default_queue=default_queue,
                                   sets_field=self.pod_sets_field)
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        min_available = _min_available(obj)
        if min_available is not None and MIN_MEMBER_ANNOTATION not in annotations:
            total = sum(ps.count for ps in pod_sets)
            try:
                spec.min_member = parse_min_member(self.kind, object_name(obj), str(min_available), total)
            except SpecError as err:
                raise SpecError(self.kind, object_name(obj), _MIN_AVAILABLE_FIELD, err.message) from err
            spec.validate()
        return spec

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return kubeflow.suspended(obj)

    def suspend_ops(self, obj: Mapping[str, Any]) -> Patch:
        return [*self._run_policy(obj), {"op": "add", "path": self.suspend_path, "value": True}]

    def unsuspend_ops(self, obj: Mapping[str, Any]) -> Patch:
        return [*self._run_policy(obj), {"op": "add", "path": self.suspend_path, "value": False}]

    @staticmethod
    def _run_policy(obj: Mapping[str, Any]) -> Patch:
        if isinstance((obj.get("spec") or {}).get("runPolicy"), Mapping):
            return []
        return [{"op": "add", "path": "/spec/runPolicy", "value": {}}]

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        return kubeflow.terminal(obj)

    def started(self, obj: Mapping[str, Any]) -> bool:
        return kubeflow.started(obj)

    def pod_selector(self, name: str) -> str:
        return f"{kubeflow.JOB_NAME_LABEL}={name}"

    def pod_owner(self, pod: Mapping[str, Any]) -> tuple[str, str | None] | None:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        name = labels.get(kubeflow.JOB_NAME_LABEL)
        if not name or _kind_of_pod(meta, labels) is not self.kf:
            return None
        rtype = labels.get(kubeflow.REPLICA_TYPE_LABEL)
        return (self.key(str(meta.get("namespace") or "default"), str(name)),
                kubeflow.pod_set_name(str(rtype)) if rtype else None)


_MIN_AVAILABLE_FIELD: Final = "spec.runPolicy.schedulingPolicy.minAvailable"
_BY_KIND: Final = {k.kind: k for k in kubeflow.KINDS}
_BY_OPERATOR: Final = {k.operator_name: k for k in kubeflow.KINDS}


def _min_available(obj: Mapping[str, Any]) -> Any:
    policy = (obj.get("spec") or {}).get("runPolicy")
    scheduling = policy.get("schedulingPolicy") if isinstance(policy, Mapping) else None
    return scheduling.get("minAvailable") if isinstance(scheduling, Mapping) else None


def _kind_of_pod(meta: Mapping[str, Any], labels: Mapping[str, Any]) -> kubeflow.KubeflowKind | None:
    """The Kubeflow kind of a pod labelled with a Kubeflow job's name: its controller owner's kind
    (the training operator creates pods itself), else its operator's label (an MPIJob's launcher
    runs in a Job of its own)."""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") and str(ref.get("kind")) in _BY_KIND:
            return _BY_KIND[str(ref.get("kind"))]
    return _BY_OPERATOR.get(str(labels.get(kubeflow.OPERATOR_NAME_LABEL)))


PYTORCHJOB = KubeflowJobKind(kubeflow.PYTORCHJOB)
TFJOB = KubeflowJobKind(kubeflow.TFJOB)
MPIJOB = KubeflowJobKind(kubeflow.MPIJOB)
