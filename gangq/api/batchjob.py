"""A batch/v1 Job as a gang: one pod set, ``main``, of the Job's pods.

A Job's spec is exactly the JobSpec of a JobSet's replicatedJob template, so a Job is mapped,
admitted and restored as the JobSet with one replicatedJob ``main`` (``replicas: 1``) whose
template is the Job's spec (:func:`as_jobset`): one implementation of the gang rules
(:mod:`gangq.api.workload`: pods per Job, requests, min-member, priority, runtime limit, flavor
injection) for both kinds. Errors and patches are translated back to the Job's own field paths,
so a researcher reads ``Job 'ns/train': spec.template.spec.containers[0]...``.

What differs is the eviction: the API server refuses changes to a running Job's pod template, so
an evicted Job is only suspended; its original nodeSelector and tolerations stay recorded in
``gangq.io/original-pod-scheduling`` and the next admission starts from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gangq.api.jobset import API_VERSION as JOBSET_API_VERSION
from gangq.api.jobset import KIND as JOBSET_KIND
from gangq.api.workload import NotQueuedError, admission_patch, jobset_to_workload
from gangq.core.decisions import Admission
from gangq.core.errors import SpecError
from gangq.core.model import FlavorSpec, WorkloadSpec

KIND: Final = "Job"
GROUP: Final = "batch"
VERSION: Final = "v1"
PLURAL: Final = "jobs"
POD_SET: Final = "main"
"""The name of a Job's one pod set (Kueue's name for it too)."""

JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
"""The label the Job controller puts on a Job's pods."""

_FIELD_PREFIX: Final = "spec.replicatedJobs[0].template.spec"
_POINTER_PREFIX: Final = "/spec/replicatedJobs/0/template/spec"
_NAME_TEST: Final = "/spec/replicatedJobs/0/name"


def as_jobset(job: Mapping[str, Any]) -> dict[str, Any]:
    """The JobSet a Job is admitted as: its metadata, and one replicatedJob ``main`` whose
    template is the Job's spec (without ``suspend``, which is the JobSet's)."""
    spec = dict(job.get("spec") or {})
    suspend = spec.pop("suspend", None)
    js_spec: dict[str, Any] = {"replicatedJobs": [{"name": POD_SET, "replicas": 1, "template": {"spec": spec}}]}
    if suspend is not None:
        js_spec["suspend"] = suspend
    return {"apiVersion": JOBSET_API_VERSION, "kind": JOBSET_KIND, "metadata": job.get("metadata") or {},
            "spec": js_spec}


def job_key(namespace: str, name: str) -> str:
    """The engine's key of a Job's gang: apart from a JobSet's (``namespace/name``) of the same name."""
    return f"{namespace}/job:{name}"


def _field(field: str) -> str:
    if field.startswith(_FIELD_PREFIX):
        return "spec" + field[len(_FIELD_PREFIX):]
    if field.startswith("spec.replicatedJobs"):
        return "spec"
    return field


def _job_error(err: SpecError, name: str) -> SpecError:
    out = NotQueuedError if isinstance(err, NotQueuedError) else SpecError
    message = err.message.replace("replicatedJob", "Job").replace("JobSet", "Job")
    return out(KIND, name, _field(err.field), message)


def job_to_workload(
    job: Mapping[str, Any],
    *,
    priority_classes: Mapping[str, int] | None = None,
    workload_priority_classes: Mapping[str, int] | None = None,
    default_queue: str | None = None,
) -> WorkloadSpec:
    """The gang a queued Job asks the engine to admit (see the module docstring). Raises
    :class:`NotQueuedError` without a queue label (and no ``default_queue``) and
    :class:`SpecError` naming the Job's field."""
    meta = job.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    name = f"{namespace}/{meta.get('name')}"
    try:
        spec = jobset_to_workload(as_jobset(job), priority_classes=priority_classes,
                                  workload_priority_classes=workload_priority_classes, default_queue=default_queue)
    except SpecError as err:
        raise _job_error(err, name) from err
    spec.key = job_key(namespace, str(meta.get("name")))
    return spec


def job_admission_patch(job: Mapping[str, Any], admission: Admission,
                        flavors: Mapping[str, FlavorSpec]) -> list[dict[str, Any]]:
    """The JSON Patch that admits a suspended Job: the flavors' nodeLabels and tolerations in its
    pod template (originals recorded), ``spec.suspend: false``."""
    name = f"{(job.get('metadata') or {}).get('namespace') or 'default'}/{(job.get('metadata') or {}).get('name')}"
    try:
        ops = admission_patch(as_jobset(job), admission, flavors)
    except SpecError as err:
        raise _job_error(err, name) from err
    out = []
    for op in ops:
        path = str(op["path"])
        if path == _NAME_TEST:
            continue  # the test of the replicatedJob's name: a Job has one template
        if path.startswith(_POINTER_PREFIX):
            op = {**op, "path": "/spec" + path[len(_POINTER_PREFIX):]}
        out.append(op)
    return out


def terminal_condition(obj: Mapping[str, Any], complete: str) -> str | None:
    """``Completed`` or ``Failed`` (the JobSet's words) once ``obj`` has a true ``complete`` or
    ``Failed`` condition, else None."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("status") == "True":
            if cond.get("type") == complete:
                return "Completed"
            if cond.get("type") == "Failed":
                return "Failed"
    return None


def job_terminal(job: Mapping[str, Any]) -> str | None:
    """``Completed`` or ``Failed`` (the JobSet's words) once the Job has finished, else None."""
    return terminal_condition(job, "Complete")


def owned_by_another_controller(job: Mapping[str, Any]) -> bool:
    """A Job another object controls (a JobSet's child Job, a CronJob's run …) is that object's
    to queue, not a gang of its own."""
    refs = (job.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("controller") for r in refs)


__all__ = [
    "GROUP",
    "JOB_NAME_LABEL",
    "KIND",
    "PLURAL",
    "POD_SET",
    "VERSION",
    "as_jobset",
    "job_admission_patch",
    "job_key",
    "job_terminal",
    "job_to_workload",
    "owned_by_another_controller",
    "terminal_condition",
]
