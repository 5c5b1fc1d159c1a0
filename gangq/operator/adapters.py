"""The kinds of workload gangq queues, each behind one adapter: what gang an object is, how it is
admitted (suspend off, flavors injected) and evicted, when it has finished, and which pods are its.

The controller (:mod:`gangq.operator.gangs`, :mod:`~gangq.operator.writer`,
:mod:`~gangq.operator.recovery`) holds no kind-specific code: a JobSet and a batch/v1 Job are
queued, admitted, evicted, restored after a restart and reported the same way.

| kind | pod sets | suspend | finished |
|---|---|---|---|
| JobSet (jobset.x-k8s.io/v1alpha2) | one per replicatedJob | ``spec.suspend`` | conditions ``Completed`` / ``Failed`` |
| Job (batch/v1) | ``main``: its parallel pods | ``spec.suspend`` | conditions ``Complete`` / ``Failed`` |
| PyTorchJob, TFJob (kubeflow.org/v1), | one per replica type, | ``spec.runPolicy.suspend`` | conditions |
| MPIJob (kubeflow.org/v2beta1) | named in lower case | | ``Succeeded`` / ``Failed`` |

The Kubeflow kinds are optional: their CRDs may not be served, and then there is nothing of theirs
to queue (:attr:`WorkloadKind.optional`).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any, Final

from gangq.api import batchjob, kubeflow
from gangq.api.workload import admission_patch, jobset_to_workload, queue_name, restore_patch
from gangq.core.decisions import Admission
from gangq.core.model import FlavorSpec, WorkloadSpec
from gangq.jobset import constants as js
from gangq.operator.kube import resource_path
from gangq.operator.translate import jobset_signature, jobset_terminal


class WorkloadKind:
    """One kind of workload (see the module docstring); :data:`JOBSET` and :data:`JOB`."""

    kind: str
    group: str
    version: str
    plural: str
    workload_prefix: str  # the Workload object's name is this + the object's name
    owner_label: str  # on the Workload: the object's name
    suspend_path: str = "/spec/suspend"
    optional: bool = False  # its CRD may not be served (nothing to queue then)
    has_child_jobs: bool = False  # its pods come through Jobs it creates (an eviction waits for them)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def key(self, namespace: str, name: str) -> str:
        """The engine's key of the object's gang."""
        return f"{namespace}/{name}"

    def key_of(self, obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return self.key(str(meta.get("namespace") or "default"), str(meta.get("name")))

    def path(self, namespace: str, name: str) -> str:
        return resource_path(self.group, self.version, self.plural, namespace, name)

    def ours(self, obj: Mapping[str, Any]) -> bool:
        """Does gangq queue this object (not one another controller owns)? Queue label aside."""
        return True

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool((obj.get("spec") or {}).get("suspend"))

    def suspend_ops(self, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        """JSON Patch operations that suspend the object (and nothing else)."""
        return [{"op": "add", "path": self.suspend_path, "value": True}]

    def pod_selector(self, name: str) -> str:
        """The label selector of the object's pods."""
        raise NotImplementedError

    def workload_name(self, name: str) -> str:
        """The Workload's name: the prefix and the object's name, shortened to an object name's 253
        characters."""
        full = f"{self.workload_prefix}{name}"
        return full if len(full) <= 253 else full[:240] + "-" + secrets.token_hex(4)

    def to_workload(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int],
                    workload_priority_classes: Mapping[str, int], default_queue: str | None = None) -> WorkloadSpec:
        """The gang; ``default_queue`` for an object without a queue label."""
        raise NotImplementedError

    def signature(self, obj: Mapping[str, Any]) -> tuple[Any, ...]:
        """What the gang is built from besides the spec (a change resubmits it)."""
        return jobset_signature(obj)

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        """``Completed`` / ``Failed`` once finished, else None."""
        raise NotImplementedError

    def admission_ops(self, obj: Mapping[str, Any], admission: Admission,
                      flavors: Mapping[str, FlavorSpec]) -> list[dict[str, Any]]:
        """JSON Patch operations that admit the suspended object."""
        raise NotImplementedError

    def eviction_ops(self, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        """JSON Patch operations that undo the admission's pod-template changes and suspend."""
        raise NotImplementedError

    def pod_set_names(self, obj: Mapping[str, Any]) -> list[str]:
        """The pod sets' names, for the Workload of an object that does not map to a gang."""
        raise NotImplementedError

    def started(self, obj: Mapping[str, Any]) -> bool:
        """Have pods of this object started (it ran before gangq could suspend it)?"""
        raise NotImplementedError


class JobSetKind(WorkloadKind):
    kind = js.KIND
    group = js.GROUP
    version = js.VERSION
    plural = js.PLURAL
    workload_prefix = "jobset-"
    owner_label = "gangq.io/jobset-name"
    has_child_jobs = True

    def pod_selector(self, name: str) -> str:
        return f"{js.JOBSET_NAME_KEY}={name}"

    def to_workload(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int],
                    workload_priority_classes: Mapping[str, int], default_queue: str | None = None) -> WorkloadSpec:
        return jobset_to_workload(obj, priority_classes=priority_classes,
                                  workload_priority_classes=workload_priority_classes, default_queue=default_queue)

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        return jobset_terminal(obj)

    def admission_ops(self, obj: Mapping[str, Any], admission: Admission,
                      flavors: Mapping[str, FlavorSpec]) -> list[dict[str, Any]]:
        return admission_patch(obj, admission, flavors)

    def eviction_ops(self, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        return restore_patch(obj)

    def pod_set_names(self, obj: Mapping[str, Any]) -> list[str]:
        return [str(r.get("name")) for r in ((obj.get("spec") or {}).get("replicatedJobs") or [])
                if isinstance(r, dict) and r.get("name")] or ["main"]

    def started(self, obj: Mapping[str, Any]) -> bool:
        return any(isinstance(s, dict) and (s.get("active") or s.get("ready") or s.get("succeeded"))
                   for s in (obj.get("status") or {}).get("replicatedJobsStatus") or [])


class JobKind(WorkloadKind):
    kind = batchjob.KIND
    group = batchjob.GROUP
    version = batchjob.VERSION
    plural = batchjob.PLURAL
    workload_prefix = "job-"
    owner_label = "gangq.io/job-name"

    def key(self, namespace: str, name: str) -> str:
        return batchjob.job_key(namespace, name)

    def ours(self, obj: Mapping[str, Any]) -> bool:
        return not batchjob.owned_by_another_controller(obj)

    def pod_selector(self, name: str) -> str:
        return f"{batchjob.JOB_NAME_LABEL}={name}"

    def to_workload(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int],
                    workload_priority_classes: Mapping[str, int], default_queue: str | None = None) -> WorkloadSpec:
        return batchjob.job_to_workload(obj, priority_classes=priority_classes,
                                        workload_priority_classes=workload_priority_classes,
                                        default_queue=default_queue)

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        return batchjob.job_terminal(obj)

    def admission_ops(self, obj: Mapping[str, Any], admission: Admission,
                      flavors: Mapping[str, FlavorSpec]) -> list[dict[str, Any]]:
        return batchjob.job_admission_patch(obj, admission, flavors)

    def eviction_ops(self, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        # The API server refuses pod-template changes of a Job that has started: suspend only; the
        # originals stay recorded and the next admission starts from them.
        return [{"op": "add", "path": "/spec/suspend", "value": True}]

    def pod_set_names(self, obj: Mapping[str, Any]) -> list[str]:
        return [batchjob.POD_SET]

    def started(self, obj: Mapping[str, Any]) -> bool:
        # startTime: set when the Job controller first runs the Job, before its pods exist (its
        # active count can lag behind pods that already run)
        status = obj.get("status") or {}
        return bool(status.get("startTime") or status.get("active") or status.get("succeeded") or status.get("failed"))


class KubeflowJobKind(WorkloadKind):
    """PyTorchJob, TFJob, MPIJob (:mod:`gangq.api.kubeflow`)."""

    group = kubeflow.GROUP
    suspend_path = kubeflow.SUSPEND_PATH
    optional = True

    def __init__(self, kf: kubeflow.KubeflowKind) -> None:
        self.kf = kf
        self.kind = kf.kind
        self.version = kf.version
        self.plural = kf.plural
        self.workload_prefix = f"{kf.kind.lower()}-"
        self.owner_label = f"gangq.io/{kf.kind.lower()}-name"

    def key(self, namespace: str, name: str) -> str:
        return self.kf.key(namespace, name)

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return kubeflow.suspended(obj)

    def suspend_ops(self, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        ops: list[dict[str, Any]] = []
        if not isinstance((obj.get("spec") or {}).get("runPolicy"), dict):
            ops.append({"op": "add", "path": "/spec/runPolicy", "value": {}})
        return [*ops, {"op": "add", "path": self.suspend_path, "value": True}]

    def pod_selector(self, name: str) -> str:
        return f"{kubeflow.JOB_NAME_LABEL}={name}"

    def to_workload(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int],
                    workload_priority_classes: Mapping[str, int], default_queue: str | None = None) -> WorkloadSpec:
        return kubeflow.to_workload(self.kf, obj, priority_classes=priority_classes,
                                    workload_priority_classes=workload_priority_classes, default_queue=default_queue)

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        return kubeflow.terminal(obj)

    def admission_ops(self, obj: Mapping[str, Any], admission: Admission,
                      flavors: Mapping[str, FlavorSpec]) -> list[dict[str, Any]]:
        return kubeflow.admission_ops(self.kf, obj, admission, flavors)

    def eviction_ops(self, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        return kubeflow.eviction_ops(self.kf, obj)

    def pod_set_names(self, obj: Mapping[str, Any]) -> list[str]:
        return [kubeflow.pod_set_name(t) for t in kubeflow.replica_types(self.kf, obj)] or ["main"]

    def started(self, obj: Mapping[str, Any]) -> bool:
        return kubeflow.started(obj)


JOBSET: Final = JobSetKind()
JOB: Final = JobKind()
PYTORCHJOB: Final = KubeflowJobKind(kubeflow.PYTORCHJOB)
TFJOB: Final = KubeflowJobKind(kubeflow.TFJOB)
MPIJOB: Final = KubeflowJobKind(kubeflow.MPIJOB)
KINDS: Final[tuple[WorkloadKind, ...]] = (JOBSET, JOB, PYTORCHJOB, TFJOB, MPIJOB)
BY_PLURAL: Final[dict[str, WorkloadKind]] = {k.plural: k for k in KINDS}
BY_KIND: Final[dict[str, WorkloadKind]] = {k.kind: k for k in KINDS}
_KUBEFLOW_BY_OPERATOR: Final = {k.kf.operator_name: k for k in (PYTORCHJOB, TFJOB, MPIJOB)}


def _kubeflow_kind(meta: Mapping[str, Any], labels: Mapping[str, Any]) -> KubeflowJobKind | None:
    """The Kubeflow kind of a pod labelled with a Kubeflow job's name: its controller owner's kind
    (the training operator creates pods itself), else its operator's label (an MPIJob's launcher
    runs in a Job of its own)."""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            kind = BY_KIND.get(str(ref.get("kind")))
            if isinstance(kind, KubeflowJobKind):
                return kind
    return _KUBEFLOW_BY_OPERATOR.get(str(labels.get(kubeflow.OPERATOR_NAME_LABEL)))


def pod_gang(pod: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """The key of the gang a pod belongs to and its pod set: a JobSet's (label
    ``jobset.sigs.k8s.io/jobset-name``; its child Jobs' pods carry a Job's labels too), a Kubeflow
    job's (``training.kubeflow.org/job-name``, pod set from ``…/replica-type``), else a Job's
    (``batch.kubernetes.io/job-name``); None for other pods."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    ns = str(meta.get("namespace") or "default")
    name = labels.get(js.JOBSET_NAME_KEY)
    if name:
        return JOBSET.key(ns, name), labels.get(js.REPLICATED_JOB_NAME_KEY)
    name = labels.get(kubeflow.JOB_NAME_LABEL)
    if name:
        kf = _kubeflow_kind(meta, labels)
        if kf is not None:
            rtype = labels.get(kubeflow.REPLICA_TYPE_LABEL)
            return kf.key(ns, name), kubeflow.pod_set_name(str(rtype)) if rtype else None
    name = labels.get(batchjob.JOB_NAME_LABEL)
    if name:
        return JOB.key(ns, name), batchjob.POD_SET
    return None


def child_of_jobset(job: Mapping[str, Any]) -> str | None:
    """The gang key of the JobSet a Job belongs to (its controller ownerReference), or None."""
    meta = job.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == js.KIND and ref.get("name"):
            return JOBSET.key(str(meta.get("namespace") or "default"), str(ref["name"]))
    return None


def workload_owner(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """The gang key and uid of the object a Workload belongs to (its controller ownerReference to
    a queued kind), or None for a Workload gangq did not create."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        kind = BY_KIND.get(str(ref.get("kind"))) if isinstance(ref, dict) and ref.get("controller") else None
        if kind is not None and ref.get("name"):
            return kind.key(str(meta.get("namespace") or "default"), str(ref["name"])), str(ref.get("uid") or "")
    return None


def queued(kind: WorkloadKind, obj: Mapping[str, Any], default_queue: str | None = None) -> bool:
    """Is the object one gangq queues: ours, with a queue label (or a namespace's default queue
    for workloads without one, :meth:`ControllerState.default_queue`)?"""
    return kind.ours(obj) and (queue_name(obj) or default_queue) is not None
