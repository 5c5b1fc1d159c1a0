"""Kubeflow training jobs as gangs: PyTorchJob and TFJob (``kubeflow.org/v1``, the training
operator) and MPIJob (``kubeflow.org/v2beta1``, the MPI operator).

Each has a map of replica specs (``spec.pytorchReplicaSpecs``, ``spec.tfReplicaSpecs``,
``spec.mpiReplicaSpecs``): replica type → ``{replicas, template}``. A job is mapped, admitted and
restored as the JobSet with one replicatedJob per replica type, named after it in lower case
(``Master`` → ``master``, Kueue's pod-set names too), whose Job runs ``replicas`` pods of the
template (:func:`as_jobset`): one implementation of the gang rules (:mod:`gangq.api.workload`) for
every kind. Errors and patches are translated back to the job's own field paths.

Gang size: every pod of every replica type, unless ``gangq.io/min-member`` says otherwise or the
job's own ``spec.runPolicy.schedulingPolicy.minAvailable`` does (the training operator's gang
setting, honoured so a job written for Volcano's gang keeps its meaning).

Suspension is ``spec.runPolicy.suspend``; a job has finished once its ``Succeeded`` or ``Failed``
condition is true.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gangq.api.batchjob import terminal_condition
from gangq.api.jobset import API_VERSION as JOBSET_API_VERSION
from gangq.api.jobset import KIND as JOBSET_KIND
from gangq.api.workload import (
    MIN_MEMBER_ANNOTATION,
    NotQueuedError,
    admission_patch,
    jobset_to_workload,
    restore_patch,
)
from gangq.core.decisions import Admission
from gangq.core.errors import SpecError
from gangq.core.model import FlavorSpec, WorkloadSpec

GROUP: Final = "kubeflow.org"
JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
"""The label the Kubeflow operators put on a job's pods: the job's name."""
REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
"""The label of a pod's replica type, in lower case (``master``, ``worker``, ``launcher``)."""
OPERATOR_NAME_LABEL: Final = "training.kubeflow.org/operator-name"
"""The label naming the operator that made a pod (``pytorchjob-controller`` …)."""
SUSPEND_PATH: Final = "/spec/runPolicy/suspend"


@dataclass(frozen=True, slots=True)
class KubeflowKind:
    """What tells one Kubeflow kind from another."""

    kind: str
    version: str
    plural: str
    replica_specs: str  # the spec field of the replica-type map
    operator_name: str  # the value of OPERATOR_NAME_LABEL on its pods

    def key(self, namespace: str, name: str) -> str:
        """The engine's key of the job's gang, apart from other kinds' of the same name."""
        return f"{namespace}/{self.plural}:{name}"


PYTORCHJOB: Final = KubeflowKind("PyTorchJob", "v1", "pytorchjobs", "pytorchReplicaSpecs", "pytorchjob-controller")
TFJOB: Final = KubeflowKind("TFJob", "v1", "tfjobs", "tfReplicaSpecs", "tfjob-controller")
MPIJOB: Final = KubeflowKind("MPIJob", "v2beta1", "mpijobs", "mpiReplicaSpecs", "mpi-operator")
KINDS: Final = (PYTORCHJOB, TFJOB, MPIJOB)

_RJOB_FIELD: Final = re.compile(r"^spec\.replicatedJobs\[(\d+)\](.*)$")
_RJOB_POINTER: Final = re.compile(r"^/spec/replicatedJobs/(\d+)(/.*)?$")


def replica_types(kind: KubeflowKind, job: Mapping[str, Any]) -> list[str]:
    """The job's replica types, in the order of its spec."""
    specs = (job.get("spec") or {}).get(kind.replica_specs)
    return [str(t) for t in specs] if isinstance(specs, Mapping) else []


def pod_set_name(replica_type: str) -> str:
    return replica_type.lower()


def as_jobset(kind: KubeflowKind, job: Mapping[str, Any]) -> dict[str, Any]:
    """The JobSet a job is admitted as (see the module docstring); ``spec.runPolicy.suspend`` is
    the JobSet's ``spec.suspend``."""
    spec = job.get("spec") or {}
    specs = spec.get(kind.replica_specs)
    meta = dict(job.get("metadata") or {})
    raw_policy = spec.get("runPolicy")
    run_policy: Mapping[str, Any] = raw_policy if isinstance(raw_policy, Mapping) else {}
    scheduling = run_policy.get("schedulingPolicy")
    min_available = scheduling.get("minAvailable") if isinstance(scheduling, Mapping) else None
    annotations = dict(meta.get("annotations") or {})
    if min_available is not None and MIN_MEMBER_ANNOTATION not in annotations:
        annotations[MIN_MEMBER_ANNOTATION] = str(min_available)
        meta["annotations"] = annotations
    rjobs = []
    if isinstance(specs, Mapping):
        for rtype, rspec in specs.items():
            rspec = rspec if isinstance(rspec, Mapping) else {}
            replicas = rspec.get("replicas", 1)
            rjobs.append({"name": pod_set_name(str(rtype)), "replicas": 1,
                          "template": {"spec": {"parallelism": replicas, "completions": replicas,
                                                "template": rspec.get("template")}}})
    js_spec: dict[str, Any] = {"replicatedJobs": rjobs}
    if "suspend" in run_policy:
        js_spec["suspend"] = run_policy["suspend"]
    return {"apiVersion": JOBSET_API_VERSION, "kind": JOBSET_KIND, "metadata": meta, "spec": js_spec}


def _field(kind: KubeflowKind, types: list[str], field: str) -> str:
    m = _RJOB_FIELD.match(field)
    if m is None:
        return field
    index, rest = int(m.group(1)), m.group(2)
    if index >= len(types):
        return f"spec.{kind.replica_specs}"
    base = f"spec.{kind.replica_specs}[{types[index]}]"
    for virtual, real in ((".template.spec.template", ".template"), (".template.spec.parallelism", ".replicas"),
                          (".template.spec.completions", ".replicas")):
        if rest.startswith(virtual):
            return base + real + rest[len(virtual):]
    return base


def _kind_error(kind: KubeflowKind, types: list[str], err: SpecError, name: str) -> SpecError:
    out = NotQueuedError if isinstance(err, NotQueuedError) else SpecError
    message = err.message.replace("replicatedJob", "replica type").replace("JobSet", kind.kind)
    return out(kind.kind, name, _field(kind, types, err.field), message)


def _name(job: Mapping[str, Any]) -> str:
    meta = job.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def to_workload(
    kind: KubeflowKind,
    job: Mapping[str, Any],
    *,
    priority_classes: Mapping[str, int] | None = None,
    workload_priority_classes: Mapping[str, int] | None = None,
    default_queue: str | None = None,
) -> WorkloadSpec:
    """The gang a queued job asks the engine to admit. Raises :class:`NotQueuedError` without a
    queue label (and no ``default_queue``) and :class:`SpecError` naming the job's field."""
    types = replica_types(kind, job)
    if not types:
        raise SpecError(kind.kind, _name(job), f"spec.{kind.replica_specs}", "must name at least one replica type")
    try:
        spec = jobset_to_workload(as_jobset(kind, job), priority_classes=priority_classes,
                                  workload_priority_classes=workload_priority_classes, default_queue=default_queue)
    except SpecError as err:
        raise _kind_error(kind, types, err, _name(job)) from err
    meta = job.get("metadata") or {}
    spec.key = kind.key(str(meta.get("namespace") or "default"), str(meta.get("name")))
    return spec


def _translate(kind: KubeflowKind, job: Mapping[str, Any], ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The virtual JobSet's patch on the job itself."""
    types = replica_types(kind, job)
    out: list[dict[str, Any]] = []
    for op in ops:
        path = str(op["path"])
        m = _RJOB_POINTER.match(path)
        if m is not None:
            rest = m.group(2) or ""
            if rest == "/name":
                continue  # the test of a replicatedJob's name: replica types are map keys
            index = int(m.group(1))
            prefix = "/template/spec/template"
            if index >= len(types) or not rest.startswith(prefix):
                raise SpecError(kind.kind, _name(job), f"spec.{kind.replica_specs}", f"cannot patch {path}")
            rtype = types[index].replace("~", "~0").replace("/", "~1")
            op = {**op, "path": f"/spec/{kind.replica_specs}/{rtype}/template{rest[len(prefix):]}"}
        elif path == "/spec/suspend":
            if not isinstance((job.get("spec") or {}).get("runPolicy"), Mapping):
                out.append({"op": "add", "path": "/spec/runPolicy", "value": {}})
            op = {**op, "path": SUSPEND_PATH}
        out.append(op)
    return out


def admission_ops(kind: KubeflowKind, job: Mapping[str, Any], admission: Admission,
                  flavors: Mapping[str, FlavorSpec]) -> list[dict[str, Any]]:
    """The JSON Patch that admits a suspended job: the flavors' nodeLabels and tolerations in the
    assigned replica types' pod templates (originals recorded), ``runPolicy.suspend: false``."""
    types = replica_types(kind, job)
    try:
        ops = admission_patch(as_jobset(kind, job), admission, flavors)
    except SpecError as err:
        raise _kind_error(kind, types, err, _name(job)) from err
    return _translate(kind, job, ops)


def eviction_ops(kind: KubeflowKind, job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch that puts the pod templates back as they were before admission and
    suspends the job (its operator deletes the pods)."""
    types = replica_types(kind, job)
    try:
        ops = restore_patch(as_jobset(kind, job))
    except SpecError as err:
        raise _kind_error(kind, types, err, _name(job)) from err
    return _translate(kind, job, ops)


def suspended(job: Mapping[str, Any]) -> bool:
    run_policy = (job.get("spec") or {}).get("runPolicy")
    return isinstance(run_policy, Mapping) and bool(run_policy.get("suspend"))


def terminal(job: Mapping[str, Any]) -> str | None:
    """``Completed`` or ``Failed`` (the JobSet's words) once the job has finished, else None."""
    return terminal_condition(job, "Succeeded")


def started(job: Mapping[str, Any]) -> bool:
    """Have the job's pods started (its operator recorded a start time or an active replica)?"""
    status = job.get("status") or {}
    if status.get("startTime"):
        return True
    replicas = status.get("replicaStatuses")
    return isinstance(replicas, Mapping) and any(
        isinstance(s, Mapping) and (s.get("active") or s.get("succeeded") or s.get("failed"))
        for s in replicas.values())


__all__ = [
    "GROUP",
    "JOB_NAME_LABEL",
    "KINDS",
    "MPIJOB",
    "OPERATOR_NAME_LABEL",
    "PYTORCHJOB",
    "REPLICA_TYPE_LABEL",
    "SUSPEND_PATH",
    "TFJOB",
    "KubeflowKind",
    "admission_ops",
    "as_jobset",
    "eviction_ops",
    "pod_set_name",
    "replica_types",
    "started",
    "suspended",
    "terminal",
    "to_workload",
]
