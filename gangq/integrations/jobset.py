"""JobSet (``jobset.x-k8s.io/v1alpha2``): one pod set per replicatedJob, ``replicas`` × the pods
one child Job runs at once; suspended by ``spec.suspend``; finished once its ``Completed`` or
``Failed`` condition is true. Its gang is keyed ``namespace/name``.

The JobSet-specific gang rules (pods per child Job, the runtime bound from the Jobs' deadlines,
the success and failure policies) are in :mod:`gangq.api.workload`. A JobSet another queued
object controls (a Kubeflow TrainJob's) is that object's gang, not one of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangq.api.jobset import JobSet, effective_replicas, parse_jobset
from gangq.api.meta import Meta, conditions
from gangq.api.pods import FieldContext
from gangq.api.queues import label_key_problem
from gangq.api.workload import jobset_runtime_limit, pods_per_job
from gangq.core.errors import SpecError
from gangq.core.model import TopologyRequest, WorkloadSpec
from gangq.integrations import podsets
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.podsets import PodSet, Resource
from gangq.jobset import constants as js


def exclusive_topology(parsed: JobSet, index: int) -> tuple[str, str] | None:
    """``(field, topology key)`` of the exclusive placement the ``index``-th replicatedJob's child
    Jobs get (annotation ``alpha.jobset.sigs.k8s.io/exclusive-topology`` on its Job template,
    else on the JobSet: upstream's JobSet controller lets the replicatedJob's win), or None."""
    rjob = parsed.replicated_jobs()[index]
    tmeta = rjob.template.metadata
    own = (tmeta.annotations or {}) if tmeta is not None else {}
    if js.EXCLUSIVE_KEY in own:
        return f"spec.replicatedJobs[{index}].template.metadata.annotations[{js.EXCLUSIVE_KEY}]", own[js.EXCLUSIVE_KEY]
    top = parsed.metadata.annotations or {}
    if js.EXCLUSIVE_KEY in top:
        return f"metadata.annotations[{js.EXCLUSIVE_KEY}]", top[js.EXCLUSIVE_KEY]
    return None


def jobset_pod_sets(obj: Mapping[str, Any] | JobSet) -> list[PodSet]:
    """One pod set per replicatedJob: ``replicas`` × the pods one child Job runs at once, its pod
    template at ``spec.replicatedJobs[i].template.spec.template`` (guarded by the name).

    With exclusive placement (:func:`exclusive_topology`) each child Job runs in a domain of the
    topology key of its own (the embedded reconciler gives its pods the affinities), so the pod
    set asks for slices of one child Job's pods in one domain of that level, and is otherwise
    unconstrained: a Required request at that level would put every Job of the replicatedJob in
    one domain, which the affinities forbid. Topology annotations on the pod template win."""
    parsed = parse_jobset(obj)
    out = []
    seen: set[str] = set()
    for i, rjob in enumerate(parsed.replicated_jobs()):
        base = f"spec.replicatedJobs[{i}]"
        if rjob.name in seen:
            raise SpecError(js.KIND, parsed.key, f"{base}.name", f"duplicate replicatedJob name {rjob.name!r}")
        seen.add(rjob.name)
        per_job = pods_per_job(rjob, FieldContext(js.KIND, parsed.key, base))
        count = effective_replicas(rjob) * per_job
        topology: TopologyRequest | None = None
        exclusive = exclusive_topology(parsed, i)
        if exclusive is not None:
            field, key = exclusive
            problem = label_key_problem(key)
            if problem is not None:
                raise SpecError(js.KIND, parsed.key, field, f"must be a topology level (a node label key): {problem}")
            topology = TopologyRequest("Unconstrained", None, slice_level=key, slice_size=per_job, exclusive=True)
        out.append(PodSet(rjob.name, count, ("spec", "replicatedJobs", i, "template", "spec", "template"),
                          f"{base}.template.spec.template", guard=(f"/spec/replicatedJobs/{i}/name", rjob.name),
                          topology=topology))
    return out


def jobset_to_workload(
    obj: Mapping[str, Any] | JobSet,
    *,
    priority_classes: Mapping[str, int] | None = None,
    workload_priority_classes: Mapping[str, int] | None = None,
    default_queue: str | None = None,
) -> WorkloadSpec:
    """The gang a queued JobSet asks the engine to admit: the gang rules
    (:func:`gangq.integrations.podsets.to_workload`) over its replicatedJobs, its runtime bounded
    by its Jobs' deadlines (:func:`gangq.api.workload.jobset_runtime_limit`). Raises
    ``NotQueuedError`` without a queue label and no ``default_queue``, ``SpecError`` naming the
    field for anything malformed."""
    parsed = parse_jobset(obj)
    if not parsed.replicated_jobs():
        raise SpecError(js.KIND, parsed.key, "spec.replicatedJobs", "must list at least one replicatedJob")
    pod_sets = jobset_pod_sets(parsed)
    doc = obj if isinstance(obj, Mapping) else parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    limit = jobset_runtime_limit(parsed, {ps.name: ps.count for ps in pod_sets})
    return podsets.to_workload(js.KIND, doc, pod_sets, key=JOBSET.key_of(doc), priority_classes=priority_classes,
                               workload_priority_classes=workload_priority_classes, default_queue=default_queue,
                               runtime_limit=limit, sets_field="spec.replicatedJobs")


class JobSetKind(WorkloadKind):
    kind = js.KIND
    group = js.GROUP
    version = js.VERSION
    plural = js.PLURAL
    workload_prefix = "jobset-"
    owner_label = "gangq.io/jobset-name"
    has_child_jobs = True
    pod_priority = 20  # its pods carry their child Job's labels too
    child_resources = (Resource("batch", "v1", "jobs"),)
    docs = "one pod set per replicatedJob; `spec.suspend`; conditions `Completed` / `Failed`"
    pod_sets_field = "spec.replicatedJobs"
    controlled_by: frozenset[str] = frozenset()  # kinds whose JobSets are theirs (set by the registry)

    def key(self, namespace: str, name: str) -> str:
        return f"{namespace}/{name}"

    def ours(self, obj: Mapping[str, Any]) -> bool:
        ref = Meta(obj).controller_reference
        return ref is None or ref.kind not in self.controlled_by

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        return jobset_pod_sets(obj)

    def to_workload(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int],
                    workload_priority_classes: Mapping[str, int], default_queue: str | None = None) -> WorkloadSpec:
        return jobset_to_workload(obj, priority_classes=priority_classes,
                                  workload_priority_classes=workload_priority_classes, default_queue=default_queue)

    def pod_set_names(self, obj: Mapping[str, Any]) -> list[str]:
        return [str(r.get("name")) for r in ((obj.get("spec") or {}).get("replicatedJobs") or [])
                if isinstance(r, dict) and r.get("name")] or ["main"]

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        status = obj.get("status") or {}
        terminal = (js.COND_COMPLETED, js.COND_FAILED)
        for cond in conditions(obj):
            if cond.get("status") == "True" and cond.get("type") in terminal:
                return str(cond["type"])
        state = status.get("terminalState")
        return str(state) if state in terminal else None

    def started(self, obj: Mapping[str, Any]) -> bool:
        return any(isinstance(s, dict) and (s.get("active") or s.get("ready") or s.get("succeeded"))
                   for s in (obj.get("status") or {}).get("replicatedJobsStatus") or [])

    def pod_selector(self, name: str) -> str:
        return f"{js.JOBSET_NAME_KEY}={name}"

    def pod_owner(self, pod: Mapping[str, Any]) -> tuple[str, str | None] | None:
        meta = Meta(pod)
        labels = meta.labels
        name = labels.get(js.JOBSET_NAME_KEY)
        if not name:
            return None
        return self.key(meta.namespace_or_default, str(name)), labels.get(js.REPLICATED_JOB_NAME_KEY)


JOBSET = JobSetKind()
