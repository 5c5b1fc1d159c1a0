"""Kubeflow training jobs: PyTorchJob and TFJob (``kubeflow.org/v1``, the training operator) and
MPIJob (``kubeflow.org/v2beta1``, the MPI operator).

Each has a map of replica specs (``spec.pytorchReplicaSpecs`` …): replica type → ``{replicas,
template}``, one pod set per replica type named in lower case (``Master`` → ``master``, Kueue's
names too). Suspended by ``spec.runPolicy.suspend``; finished once its ``Succeeded`` or
``Failed`` condition is true. Their CRDs are optional: not served, there is nothing to queue.

Gang size: every pod, unless ``gangq.io/min-member`` says otherwise or the job's own
``spec.runPolicy.schedulingPolicy.minAvailable`` does (the training operator's gang setting,
honoured so a job written for Volcano's or coscheduling's gang keeps its meaning).

Min-resources: ``gangq.io/min-resources``, else the job's own
``spec.runPolicy.schedulingPolicy.minResources`` (an empty map: none), else — for the training
operator's kinds (PyTorchJob, TFJob) when ``minAvailable`` is set — what the training operator
(v1.8.1) writes into the coscheduling PodGroup it creates for a job once the job runs with
``--gang-scheduler-name`` (:func:`operator_min_resources`). Coscheduling lets none of the gang's
pods past its PreFilter while the cluster lacks the PodGroup's ``minResources``; gangq checks the
same aggregate against the free capacity of the flavors it assigns, so a job it admits is not then
held by that check. The MPI operator computes an MPIJob's PodGroup by rules of its own, which are
not derived here: an MPIJob's min-resources come from the annotation or ``minResources`` alone.

The PodGroup (``scheduling.x-k8s.io/v1alpha1``, named after the job, its controller the job) is
one of the job's :attr:`~KubeflowJobKind.child_resources`: the job's gang, never a gang of its own.
The job's pods carry the PodGroup's label, but they are the job's pods (the registry asks this
kind before the pod-group kind), so the webhook never gates them.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from gangq.api import kubeflow
from gangq.api.meta import Meta
from gangq.api.pods import FieldContext, exact_quantity
from gangq.api.quantity import to_canonical
from gangq.api.workload import MIN_MEMBER_ANNOTATION, MIN_RESOURCES_ANNOTATION, parse_min_member
from gangq.core.errors import SpecError
from gangq.core.model import WorkloadSpec
from gangq.integrations import podgroup, podsets
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.podsets import Patch, PodSet, Resource, object_name

PODGROUPS: Final = Resource(podgroup.GROUP, podgroup.VERSION, podgroup.PLURAL)
"""The coscheduling PodGroups a Kubeflow operator creates for its jobs when gang scheduling."""


class KubeflowJobKind(WorkloadKind):
    """PyTorchJob, TFJob, MPIJob (see the module docstring)."""

    group = kubeflow.GROUP
    suspend_path = kubeflow.SUSPEND_PATH
    optional = True
    pod_priority = 30  # an MPIJob's launcher runs in a Job of its own

    child_resources = (PODGROUPS,)

    def __init__(self, kf: kubeflow.KubeflowKind, *, training_operator: bool) -> None:
        self.kf = kf
        self.kind = kf.kind
        self.version = kf.version
        self.plural = kf.plural
        self.workload_prefix = f"{kf.kind.lower()}-"
        self.owner_label = f"gangq.io/{kf.kind.lower()}-name"
        self.pod_sets_field = f"spec.{kf.replica_specs}"
        self.training_operator = training_operator  # its PodGroups are the training operator's
        self.docs = ("one pod set per replica type (lower case); `spec.runPolicy.suspend`; "
                     "conditions `Succeeded` / `Failed`; honours `schedulingPolicy.minAvailable` and "
                     "`minResources`")

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
        annotations = Meta(obj).annotations
        total = sum(ps.count for ps in pod_sets)
        if MIN_MEMBER_ANNOTATION not in annotations:
            min_available = self._min_available(obj, total)
            if min_available is not None:
                spec.min_member = min_available
        if MIN_RESOURCES_ANNOTATION not in annotations:
            declared = _declared_min_resources(self.kind, obj)
            if declared is not None:
                spec.min_resources = declared or None
            elif self.training_operator and (min_available := self._min_available(obj, total)) is not None:
                spec.min_resources = operator_min_resources(self.kind, obj, self.kf.replica_specs, min_available)
        spec.validate()
        return spec

    def _min_available(self, obj: Mapping[str, Any], total: int) -> int | None:
        """The job's ``schedulingPolicy.minAvailable`` (1 to the gang's pods), or None."""
        raw = _min_available(obj)
        if raw is None:
            return None
        try:
            return parse_min_member(self.kind, object_name(obj), str(raw), total)
        except SpecError as err:
            raise SpecError(self.kind, object_name(obj), _MIN_AVAILABLE_FIELD, err.message) from err

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
        meta = Meta(pod)
        labels = meta.labels
        name = labels.get(kubeflow.JOB_NAME_LABEL)
        if not name or _kind_of_pod(meta, labels) is not self.kf:
            return None
        rtype = labels.get(kubeflow.REPLICA_TYPE_LABEL)
        return (self.key(meta.namespace_or_default, str(name)),
                kubeflow.pod_set_name(str(rtype)) if rtype else None)


_MIN_AVAILABLE_FIELD: Final = "spec.runPolicy.schedulingPolicy.minAvailable"
_BY_KIND: Final = {k.kind: k for k in kubeflow.KINDS}
_BY_OPERATOR: Final = {k.operator_name: k for k in kubeflow.KINDS}


_MIN_RESOURCES_FIELD: Final = "spec.runPolicy.schedulingPolicy.minResources"


def _scheduling_policy(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    policy = (obj.get("spec") or {}).get("runPolicy")
    scheduling = policy.get("schedulingPolicy") if isinstance(policy, Mapping) else None
    return scheduling if isinstance(scheduling, Mapping) else {}


def _min_available(obj: Mapping[str, Any]) -> Any:
    return _scheduling_policy(obj).get("minAvailable")


def _declared_min_resources(kind: str, obj: Mapping[str, Any]) -> dict[str, int] | None:
    """The job's ``schedulingPolicy.minResources`` in the engine's units (empty: the job asks for
    none), or None when it does not set it."""
    raw = _scheduling_policy(obj).get("minResources")
    if raw is None:
        return None
    name = object_name(obj)
    if not isinstance(raw, Mapping):
        raise SpecError(kind, name, _MIN_RESOURCES_FIELD, f"must map resource names to quantities, got {raw!r}")
    ctx = FieldContext(kind, name, "")
    return {str(r): to_canonical(str(r), exact_quantity(q, ctx, f"{_MIN_RESOURCES_FIELD}[{r}]"))
            for r, q in raw.items()}


def operator_min_resources(kind: str, obj: Mapping[str, Any], replica_specs: str, min_member: int) -> dict[str, int]:
    """The ``minResources`` the training operator (v1.8.1) writes into a job's PodGroup when the
    job sets ``minAvailable`` (``min_member``) and no ``minResources``.

    The operator adds up the first ``min_member`` pods, replica type by replica type, each pod its
    containers' requests — a container whose ``resources.requests`` is not set counts its limits
    instead — and nothing else (no init containers, no overhead). It means to take the replica
    types by descending PriorityClass, but the PriorityClass lister it reads is never filled (its
    informer is not started), so every lookup fails and every replica type counts as priority 0:
    it takes them in Go's map order, random on each reconcile, and it rewrites the PodGroup on each
    reconcile. When ``min_member`` ends inside the job's pods, which pods count can change from one
    write to the next.

    gangq takes, for each resource, the most any order adds up to (the replica types by that
    resource's amount per pod, largest first). That bounds every value the operator may write, so a
    gang gangq admits passes coscheduling's check of whichever it writes; one fixed order would
    admit gangs that order under-counts, whose pods coscheduling would then hold while they keep
    the quota. Where the replica types' pods ask for the same, every order agrees and this is
    exactly what the operator writes.
    """
    name = object_name(obj)
    specs = (obj.get("spec") or {}).get(replica_specs) or {}
    types: list[tuple[int, dict[str, Decimal]]] = []
    for rtype, rspec in specs.items():
        pod_spec = (rspec.get("template") or {}).get("spec") or {}
        types.append((rspec.get("replicas", 1),
                      _container_amounts(kind, name, f"spec.{replica_specs}[{rtype}].template.spec", pod_spec)))
    total: dict[str, int] = {}
    for resource in {r for _, per_pod in types for r in per_pod}:
        take, most = min_member, Decimal(0)
        for amount, count in sorted(((per_pod.get(resource, Decimal(0)), count) for count, per_pod in types),
                                    reverse=True):
            pods = min(count, take)
            most += amount * pods
            take -= pods
        total[resource] = to_canonical(resource, most)
    return total


def _container_amounts(kind: str, name: str, field: str, pod_spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """One pod's containers' requests as the training operator adds them up: a container's
    requests, or its limits when it sets no requests."""
    ctx = FieldContext(kind, name, field)
    out: dict[str, Decimal] = {}
    for i, container in enumerate(pod_spec.get("containers") or []):
        resources = (container.get("resources") if isinstance(container, Mapping) else None) or {}
        requests = resources.get("requests")
        which, amounts = ("requests", requests) if isinstance(requests, Mapping) else (
            "limits", resources.get("limits") or {})
        for resource, quantity in amounts.items():
            amount = exact_quantity(quantity, ctx, f"containers[{i}].resources.{which}[{resource}]")
            out[str(resource)] = out.get(str(resource), Decimal(0)) + amount
    return out


def _kind_of_pod(meta: Meta, labels: Mapping[str, Any]) -> kubeflow.KubeflowKind | None:
    """The Kubeflow kind of a pod labelled with a Kubeflow job's name: its controller owner's kind
    (the training operator creates pods itself), else its operator's label (an MPIJob's launcher
    runs in a Job of its own)."""
    ref = meta.controller_reference
    if ref is not None and ref.kind in _BY_KIND:
        return _BY_KIND[ref.kind]
    return _BY_OPERATOR.get(str(labels.get(kubeflow.OPERATOR_NAME_LABEL)))


PYTORCHJOB = KubeflowJobKind(kubeflow.PYTORCHJOB, training_operator=True)
TFJOB = KubeflowJobKind(kubeflow.TFJOB, training_operator=True)
MPIJOB = KubeflowJobKind(kubeflow.MPIJOB, training_operator=False)  # the MPI operator's
