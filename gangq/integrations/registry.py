"""The registered kinds, and what is derived from them: lookups by kind and plural, which gang a
pod belongs to, which object a Workload belongs to.

The controller's watches, handlers and recovery lists (:mod:`gangq.operator.translate`,
:mod:`gangq.operator.kinds`, :mod:`gangq.operator.recovery`), the webhook's rules
(:mod:`gangq.operator.install`) and the RBAC coverage test read :data:`KINDS`; adding a kind is
one line here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gangq.api.meta import Meta
from gangq.api.workload import queue_name
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.job import JOB
from gangq.integrations.jobset import JOBSET
from gangq.integrations.kubeflow import MPIJOB, PYTORCHJOB, TFJOB
from gangq.integrations.podgroup import PODGROUP
from gangq.integrations.podsets import Resource
from gangq.integrations.ray import RAYCLUSTER, RAYJOB
from gangq.integrations.trainjob import TRAINJOB

KINDS: Final[tuple[WorkloadKind, ...]] = (JOBSET, JOB, PYTORCHJOB, TFJOB, MPIJOB, RAYJOB, RAYCLUSTER, TRAINJOB,
                                          PODGROUP)
"""Every kind gangq queues, in the order a restart lists them (pod groups last: their gangs are
assembled from the pods, listed before them)."""

BY_PLURAL: Final[dict[str, WorkloadKind]] = {k.plural: k for k in KINDS}
BY_KIND: Final[dict[str, WorkloadKind]] = {k.kind: k for k in KINDS}
REFERENCE_RESOURCES: Final[tuple[Resource, ...]] = tuple(dict.fromkeys(
    r for k in KINDS for r in k.reference_resources))
"""The objects queued kinds build their gangs from (a TrainJob's runtimes), each once: watched,
listed before the kinds at a restart, each event handed to the kinds that name it."""
REFERENCED_BY: Final[dict[str, tuple[WorkloadKind, ...]]] = {
    r.plural: tuple(k for k in KINDS if r in k.reference_resources) for r in REFERENCE_RESOURCES}
"""Plural of a reference resource → the kinds whose gangs are built from it."""
OPTIONAL: Final = frozenset({*(k.plural for k in KINDS if k.optional),
                             *(r.plural for k in KINDS if k.optional for r in k.reference_resources)})
"""Plurals of kinds whose CRDs may not be served, and of the objects such a kind's gangs are built
from (a TrainJob's runtimes come with its CRDs)."""
_BY_POD_PRIORITY: Final = tuple(sorted(KINDS, key=lambda k: -k.pod_priority))

JOBSET.controlled_by = frozenset(k.kind for k in KINDS if JOBSET.resource in k.child_resources)
PODGROUP.controlled_by = frozenset(k.kind for k in KINDS if k is not PODGROUP)
"""A PodGroup another queued kind creates (the training operator's, for a PyTorchJob) is that
kind's gang."""


def pod_gang(pod: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """The key of the gang a pod belongs to and its pod set, asking the kinds from the most
    specific (a TrainJob's pods carry its JobSet's and Jobs' labels too); None for other pods."""
    for kind in _BY_POD_PRIORITY:
        owner = kind.pod_owner(pod)
        if owner is not None:
            return owner
    return None


def child_of_jobset(job: Mapping[str, Any]) -> str | None:
    """The gang key of the JobSet a Job belongs to (its controller ownerReference), or None."""
    meta = Meta(job)
    ref = meta.controller_reference
    if ref is None or ref.kind != JOBSET.kind or not ref.name:
        return None
    return JOBSET.key(meta.namespace_or_default, ref.name)


def workload_owner(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """The gang key and uid of the object a Workload belongs to (its controller ownerReference to
    a queued kind), or None for a Workload gangq did not create."""
    meta = Meta(obj)
    ref = meta.controller_reference
    kind = BY_KIND.get(ref.kind) if ref is not None else None
    if ref is None or kind is None or not ref.name:
        return None
    return kind.key(meta.namespace_or_default, ref.name), ref.uid


def queued(kind: WorkloadKind, obj: Mapping[str, Any], default_queue: str | None = None) -> bool:
    """Is the object one gangq queues: ours, with a queue label (or a namespace's default queue
    for workloads without one, :meth:`ControllerState.default_queue`)?"""
    return kind.ours(obj) and (queue_name(obj) or default_queue) is not None


def webhook_rules(operations: list[str]) -> list[dict[str, Any]]:
    """The admission webhook's rules for every registered kind: one rule per group and version, its
    plurals in registry order (the install's webhook configurations are generated from this by
    ``hack/gen-chart.py``)."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for kind in KINDS:
        grouped.setdefault((kind.group, kind.version), []).append(kind.plural)
    return [{"apiGroups": [group], "apiVersions": [version], "operations": list(operations),
             "resources": plurals, "scope": "Namespaced"} for (group, version), plurals in grouped.items()]


def pod_webhook_rules() -> list[dict[str, Any]]:
    """The mutating webhook's rule for pods when a registered kind gates its pods at creation (a
    pod group's: :attr:`WorkloadKind.gates_pods`), else none: the webhook gates the pods of such a
    kind and lets every other pod through unchanged (``hack/gen-chart.py`` writes it into the
    install's webhook configurations)."""
    if not any(kind.gates_pods for kind in KINDS):
        return []
    return [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
             "scope": "Namespaced"}]
