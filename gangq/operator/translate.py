"""Kubernetes objects → what the engine and the API need: keys, node specs, pod requests, quantities.

Pure functions and the names of the objects the controller watches and writes; no I/O, no state.
The queued kinds and their gangs come from :mod:`gangq.integrations`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any, Final

from gangq.api import nodepools
from gangq.api.meta import Meta, condition_true, conditions, rfc3339
from gangq.api.pods import pod_requests as _pod_spec_requests
from gangq.api.quantity import QuantityError, parse_quantity
from gangq.core import NodeSpec, Taint
from gangq.core.decisions import Admission, PodSetAssignment
from gangq.core.units import format_amount
from gangq.integrations.registry import KINDS, OPTIONAL, REFERENCE_RESOURCES

log = logging.getLogger(__name__)

GROUP: Final = "gangq.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
ADMISSION_ANNOTATION: Final = "gangq.io/admission"
"""On an admitted queued object (written in the patch that starts it): the ClusterQueue and flavors,
JSON. A restart recognises admitted objects by it together with their kind's not being suspended
(a JobSet's ``spec.suspend: false``)."""
EVICTION_ANNOTATION: Final = "gangq.io/eviction"
"""On a queued object gangq suspended after admitting it: ``{"reason", "message", "time"}`` of the last
eviction, written in the suspending patch itself (:func:`eviction_record`)."""
CQ_FINALIZER: Final = "gangq.io/resource-in-use"
"""On every ClusterQueue: a queue deleted while it has admitted gangs stays (deleting, admitting
nothing) until they are done, so a restart in between still finds the queue their admission
names and does not suspend them (Kueue's ``resource-in-use`` finalizer)."""
GPU: Final = "nvidia.com/gpu"

CONFIG_KINDS: Final = (
    "topologies", "resourceflavors", "cohorts", "admissionchecks", "clusterqueues", "localqueues",
    "workloadpriorityclasses", "priorityclasses", "namespaces", "nodes", "nodepools",
)
"""The configuration kinds: they reach the engine only when the part it reads changed (see
:func:`relevant`), and a restart applies them first, in this order (a ResourceFlavor names a
Topology; a ClusterQueue names flavors, cohorts and admission checks; a LocalQueue names its
ClusterQueue)."""

WATCHED: Final = (
    (GROUP, VERSION, "topologies"),
    (GROUP, VERSION, "resourceflavors"),
    (GROUP, VERSION, "admissionchecks"),
    (GROUP, VERSION, "cohorts"),
    (GROUP, VERSION, "clusterqueues"),
    (GROUP, VERSION, "localqueues"),
    (GROUP, VERSION, "workloadpriorityclasses"),
    ("scheduling.k8s.io", "v1", "priorityclasses"),
    ("", "v1", "namespaces"),
    ("", "v1", "nodes"),
    (nodepools.GROUP, nodepools.VERSION, nodepools.PLURAL),
    ("", "v1", "pods"),
    *((r.group, r.version, r.plural) for r in REFERENCE_RESOURCES),
    *((k.group, k.version, k.plural) for k in KINDS),
)
"""(group, version, plural) of everything the controller watches, in the order a restart lists them:
the configuration, the pods, the objects queued kinds build their gangs from
(:data:`gangq.integrations.registry.REFERENCE_RESOURCES`: a TrainJob's runtimes, before the
TrainJobs), then every registered kind (:data:`gangq.integrations.registry.KINDS`)."""
OPTIONAL_KINDS: Final = frozenset({*OPTIONAL, nodepools.PLURAL})
"""Plurals of watched kinds whose CRDs may not be served: the optional queued kinds and what they
are built from (:data:`gangq.integrations.registry.OPTIONAL`), and Karpenter's NodePools."""
NAMESPACED: Final = frozenset({"localqueues", "pods", "workloads", *(k.plural for k in KINDS)})
"""The namespaced kinds the controller reads: when the configuration names ``namespaces``, an event
of one of them in another namespace is dropped (the restart's lists are cluster-wide)."""


def workload_active(obj: Mapping[str, Any]) -> bool:
    """A Workload's ``spec.active`` (absent: true, the schema's default)."""
    return (obj.get("spec") or {}).get("active") is not False


def quantity_text(resource: str, value: int) -> str:
    """A quantity string for the API (``500m``, ``8``, ``16Gi``)."""
    return format_amount(resource, value)


def node_spec(obj: Mapping[str, Any]) -> NodeSpec:
    """A Node as the engine sees it; one that is not Ready (or cordoned) takes no new gangs."""
    meta = Meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable: dict[str, int] = {}
    for res, value in (status.get("allocatable") or status.get("capacity") or {}).items():
        try:
            allocatable[res] = parse_quantity(value, res)
        except QuantityError:
            log.warning("Node %s: status.allocatable[%s]: %r is not a quantity", meta.name, res, value)
    taints = []
    for t in spec.get("taints") or []:
        with contextlib.suppress(ValueError, KeyError):
            taints.append(Taint(str(t["key"]), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule")))
    conds = conditions(obj)
    ready = condition_true(conds, "Ready") or not conds
    return NodeSpec(
        meta.name,
        allocatable,
        dict(meta.labels),
        taints,
        unschedulable=bool(spec.get("unschedulable")) or not ready,
    )


def relevant(plural: str, obj: Mapping[str, Any]) -> Any:
    """The part of a configuration object the engine depends on: status writes (ours included) come
    back as MODIFIED events, and only a change of this part may reach the engine (an upsert
    re-routes every pending workload)."""
    meta = Meta(obj)
    if plural in ("workloadpriorityclasses", "priorityclasses"):
        return obj.get("value")
    if plural == "namespaces":
        return meta.labels
    if plural == "clusterqueues":
        finalized = CQ_FINALIZER in meta.finalizers
        return (obj.get("spec"), meta.deleting, finalized)
    if plural == "nodepools":
        return nodepools.relevant(obj)
    if plural == "nodes":
        status = obj.get("status") or {}
        ready = [c.get("status") for c in conditions(obj) if c.get("type") == "Ready"]
        return (meta.labels, obj.get("spec"), status.get("allocatable"), status.get("capacity"), ready)
    return obj.get("spec")


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """A pod's effective requests (engine units); raises ``SpecError`` on a malformed spec."""
    return _pod_spec_requests(pod.get("spec") or {})


def eviction_record(reason: str, message: str, at: float, admission: Mapping[str, Any] | None) -> str:
    """The ``gangq.io/eviction`` annotation: why and when gangq last suspended an admitted object,
    and the admission it had (a restart before its pods are gone keeps that quota held for them,
    see :func:`recorded_eviction`)."""
    when = rfc3339(at, "milliseconds")
    record: dict[str, Any] = {"reason": reason, "message": message[:1024], "time": when}
    if admission is not None:
        record["admission"] = dict(admission)
    return json.dumps(record, sort_keys=True)


def recorded_eviction(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The eviction recorded on a queued object (annotation ``gangq.io/eviction``), if readable."""
    return _json_annotation(obj, EVICTION_ANNOTATION)


def recorded_admission(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The admission recorded on a queued object (annotation ``gangq.io/admission``), if readable."""
    return _json_annotation(obj, ADMISSION_ANNOTATION)


def _json_annotation(obj: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """The JSON object in annotation ``key``, or None when absent or not a JSON object."""
    text = Meta(obj).annotations.get(key)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def admission_json(d: Admission) -> dict[str, Any]:
    """An admission as the Workload status and the ``gangq.io/admission`` annotation record it."""
    return {
        "clusterQueue": d.cluster_queue,
        "borrowing": d.borrowing,
        "podSetAssignments": [_pod_set_assignment_json(ps) for ps in d.pod_sets],
    }


def _pod_set_assignment_json(ps: PodSetAssignment) -> dict[str, Any]:
    """One pod set's assignment; a topology placement as Kueue's ``topologyAssignment``: the
    levels and values of each domain its pods were placed in (per pod, ``PodSetAssignment.domains``),
    or of the one domain that holds every pod."""
    out: dict[str, Any] = {
        "name": ps.name,
        "count": ps.count,
        "flavors": dict(ps.flavors),
        "resourceUsage": {r: quantity_text(r, v * ps.count) for r, v in ps.requests.items()},
    }
    if ps.domains:
        out["topologyAssignment"] = {
            "levels": list(ps.domains[0][0]),
            "domains": [{"values": list(labels.values()), "count": count} for labels, count in ps.domains],
        }
    elif ps.topology:
        out["topologyAssignment"] = {
            "levels": list(ps.topology),
            "domains": [{"values": list(ps.topology.values()), "count": ps.count}],
        }
    return out
