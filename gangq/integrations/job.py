"""batch/v1 Job: one pod set, ``main``, of the pods it runs at once (``min(parallelism,
completions)``, parallelism defaulting to 1); suspended by ``spec.suspend``; finished once its
``Complete`` or ``Failed`` condition is true. Its runtime is bounded by
``spec.activeDeadlineSeconds``. A Job another object controls (a JobSet's child Job, a CronJob's
run) is that object's, not a gang of its own.

The eviction only suspends: the API server refuses changes to the pod template of a Job that has
started, so the nodeSelector and tolerations recorded at admission stay recorded and the next
admission starts from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangq.api import batchjob
from gangq.api.meta import Meta
from gangq.core.errors import SpecError
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.podsets import Patch, PodSet, object_name


def _count(job: Mapping[str, Any]) -> int:
    spec = job.get("spec") or {}
    for field in ("parallelism", "completions"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise SpecError(batchjob.KIND, object_name(job), f"spec.{field}",
                            f"must be a non-negative integer, got {value!r}")
    parallelism = 1 if spec.get("parallelism") is None else int(spec["parallelism"])
    completions = spec.get("completions")
    return parallelism if completions is None else min(parallelism, int(completions))


class JobKind(WorkloadKind):
    kind = batchjob.KIND
    group = batchjob.GROUP
    version = batchjob.VERSION
    plural = batchjob.PLURAL
    workload_prefix = "job-"
    owner_label = "gangq.io/job-name"
    pod_sets_field = "spec.template"
    pod_priority = 0  # the least specific: every Job-made pod carries the label
    docs = "one pod set `main`; `spec.suspend`; conditions `Complete` / `Failed`"

    def key(self, namespace: str, name: str) -> str:
        return batchjob.job_key(namespace, name)

    def ours(self, obj: Mapping[str, Any]) -> bool:
        return not batchjob.owned_by_another_controller(obj)

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        return [PodSet(batchjob.POD_SET, _count(obj), ("spec", "template"), "spec.template")]

    def runtime_limit(self, obj: Mapping[str, Any]) -> float | None:
        deadline = (obj.get("spec") or {}).get("activeDeadlineSeconds")
        if isinstance(deadline, int) and not isinstance(deadline, bool) and deadline > 0:
            return float(deadline)
        return None

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        return batchjob.job_terminal(obj)

    def started(self, obj: Mapping[str, Any]) -> bool:
        # startTime: set when the Job controller first runs the Job, before its pods exist (its
        # active count can lag behind pods that already run)
        status = obj.get("status") or {}
        return bool(status.get("startTime") or status.get("active") or status.get("succeeded") or status.get("failed"))

    def eviction_ops(self, obj: Mapping[str, Any]) -> Patch:
        return self.suspend_ops(obj)

    def pod_selector(self, name: str) -> str:
        return f"{batchjob.JOB_NAME_LABEL}={name}"

    def pod_owner(self, pod: Mapping[str, Any]) -> tuple[str, str | None] | None:
        meta = Meta(pod)
        name = meta.labels.get(batchjob.JOB_NAME_LABEL)
        if not name:
            return None
        return self.key(meta.namespace_or_default, str(name)), batchjob.POD_SET


JOB = JobKind()
