"""Groups of plain pods as gangs: a coscheduling PodGroup (``scheduling.x-k8s.io/v1alpha1``) and
the pods labelled ``scheduling.x-k8s.io/pod-group`` with its name; a Kueue plain-pod group (pods
labelled ``kueue.x-k8s.io/pod-group-name``, annotated ``kueue.x-k8s.io/pod-group-total-count``);
and a single pod with a queue label.

A pod has no ``spec.suspend``: the webhook gives each such pod the scheduling gate
``gangq.io/admission`` at creation, and the gate is what holds it. So the gang object is the
group as a whole, assembled from the PodGroup (if any) and the member pods
(:class:`PodGroups`): its pod sets are its pods grouped by their scheduling-relevant spec (a role
hash, as Kueue groups a plain-pod group's pods); it is suspended while every live pod is gated;
its admission is one patch per pod (the flavors' node labels and tolerations added — the API
server lets a gated pod get these — the original recorded on the pod, the gate removed); its
eviction deletes the ungated pods (as Kueue stops a pod group: a pod cannot be gated again), and
its quota comes back when they are gone.

When a group is a gang:

- a PodGroup: once it exists and ``spec.minMember`` of its pods exist (coscheduling's
  ``PreScheduling``); ``minMember`` is the gang's min-member, ``spec.minResources`` its
  min-resources, ``spec.scheduleTimeoutSeconds`` its own pods-ready timeout;
- a Kueue group: once its total count of pods exist (Kueue creates no Workload before); every pod
  is needed;
- a single pod: at once.

A PodGroup another queued kind controls (the training operator's, for a PyTorchJob gangq queues)
is that kind's gang, not one of its own (:meth:`PodGroupKind.ours`). Nothing here does I/O.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from gangq.api.meta import Meta
from gangq.api.pods import FieldContext, exact_quantity
from gangq.api.quantity import to_canonical
from gangq.api.workload import ORIGINAL_SCHEDULING_ANNOTATION, queue_name
from gangq.core.decisions import Admission
from gangq.core.errors import SpecError
from gangq.core.model import FlavorSpec, WorkloadSpec
from gangq.integrations import podsets
from gangq.integrations.interface import ObjectWrite, WorkloadKind
from gangq.integrations.podsets import Patch, PodSet, pointer

GROUP: Final = "scheduling.x-k8s.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "podgroups"
KIND: Final = "PodGroup"

POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
"""A pod's coscheduling PodGroup."""
KUEUE_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
"""A pod's Kueue plain-pod group."""
KUEUE_TOTAL_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-total-count"
"""How many pods a Kueue plain-pod group has."""
GATE: Final = "gangq.io/admission"
"""The scheduling gate the webhook gives each pod of a group at creation; the admission removes it."""
ADMISSION_ANNOTATION: Final = "gangq.io/admission"
"""The admission recorded on each admitted pod (as on a JobSet)."""

SOURCE_PODGROUP: Final = "PodGroup"
SOURCE_GROUP: Final = "Group"
SOURCE_POD: Final = "Pod"
MEMBERS: Final = "gangqMembers"
"""The field of an assembled group that holds its source and its pods."""
SINGLE_POD_SET: Final = "main"
"""The pod set of a single pod (Kueue's name)."""

_ROLE_FIELDS: Final = ("affinity", "nodeSelector", "tolerations", "priorityClassName", "priority",
                       "runtimeClassName", "overhead", "schedulerName", "topologySpreadConstraints",
                       "resourceClaims", "resources")
_CONTAINER_FIELDS: Final = ("resources", "restartPolicy")


# --- pods --------------------------------------------------------------------------------------










def membership(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The group a pod belongs to — ``(source, name)``: its PodGroup, its Kueue group, or itself
    when it only has a queue label — or None for a pod that is in no group."""
    labels = Meta(pod).labels
    for label, source in ((POD_GROUP_LABEL, SOURCE_PODGROUP), (KUEUE_GROUP_LABEL, SOURCE_GROUP)):
        value = labels.get(label)
        if isinstance(value, str) and value:
            return source, value
    if queue_name(pod) is not None and Meta(pod).name:
        return SOURCE_POD, Meta(pod).name
    return None


def gated(pod: Mapping[str, Any]) -> bool:
    """Does the pod carry gangq's scheduling gate?"""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == GATE for g in gates)


def terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def live(pod: Mapping[str, Any]) -> bool:
    """Neither finished nor being deleted: a pod that counts in the group's gang."""
    return not terminal(pod) and not Meta(pod).deleting


def original_scheduling(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's nodeSelector and tolerations before its admission (recorded on it then), else as
    they are."""
    spec = pod.get("spec") or {}
    text = Meta(pod).annotations.get(ORIGINAL_SCHEDULING_ANNOTATION)
    if isinstance(text, str):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            return {"nodeSelector": data.get("nodeSelector"), "tolerations": data.get("tolerations")}
    return {"nodeSelector": copy.deepcopy(spec.get("nodeSelector")),
            "tolerations": copy.deepcopy(spec.get("tolerations"))}


def role_template(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as a pod template of its role: its spec with the nodeSelector and tolerations it
    had before admission, without the gates."""
    spec = {k: copy.deepcopy(v) for k, v in (pod.get("spec") or {}).items()
            if k not in ("schedulingGates", "nodeName")}
    for field, value in original_scheduling(pod).items():
        if value is None:
            spec.pop(field, None)
        else:
            spec[field] = value
    return {"metadata": {"name": Meta(pod).name}, "spec": spec}


def role(pod: Mapping[str, Any]) -> str:
    """A hash of what of the pod decides where and on what it runs (containers' resources,
    nodeSelector and tolerations as created, affinity, priority, overhead …): pods of one role are
    one pod set. Images, names and commands are left out: two workers differing only in their
    arguments are one role."""
    spec = role_template(pod)["spec"]
    shape: dict[str, Any] = {k: spec.get(k) for k in _ROLE_FIELDS if spec.get(k) is not None}
    for field in ("containers", "initContainers"):
        shape[field] = [{k: c.get(k) for k in _CONTAINER_FIELDS if isinstance(c, Mapping) and c.get(k) is not None}
                        for c in spec.get(field) or []]
    text = json.dumps(shape, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]






# --- the assembled group -----------------------------------------------------------------------


def members(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get(MEMBERS)
    return value if isinstance(value, Mapping) else {}


def source(obj: Mapping[str, Any]) -> str:
    return str(members(obj).get("source") or SOURCE_PODGROUP)


def pods(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The group's pods (finished ones too), oldest first."""
    return [p for p in members(obj).get("pods") or [] if isinstance(p, Mapping)]


def assemble(src: str, namespace: str, name: str, podgroup: Mapping[str, Any] | None,
             group_pods: Iterable[Mapping[str, Any]], rv: int) -> dict[str, Any]:
    """The gang object of a group: the PodGroup's metadata, spec and status (a Kueue group's and a
    single pod's from its first pod), the admission recorded on its pods, and its pods and role
    under :data:`MEMBERS`. ``rv``: the newest resourceVersion of all of them."""
    ordered = sorted(group_pods, key=lambda p: (Meta(p).creation_timestamp, Meta(p).name))
    first: Mapping[str, Any] = ordered[0] if ordered else {}
    base = podgroup if podgroup is not None else first
    labels = dict(Meta(base).labels)
    if podgroup is not None and queue_name(podgroup) is None and first:
        labels.update({k: v for k, v in Meta(first).labels.items() if k.startswith(("gangq.io/", "kueue.x-k8s.io/"))})
    annotations = {k: v for k, v in Meta(base).annotations.items()
                   if k not in (ORIGINAL_SCHEDULING_ANNOTATION, ADMISSION_ANNOTATION)}
    record = next((Meta(p).annotations.get(ADMISSION_ANNOTATION) for p in ordered
                   if not gated(p) and Meta(p).annotations.get(ADMISSION_ANNOTATION)), None)
    if record is not None:
        annotations[ADMISSION_ANNOTATION] = record
    uid = ""
    if podgroup is not None:
        uid = Meta(podgroup).uid
    elif src == SOURCE_POD and first:
        uid = Meta(first).uid
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": str(rv),
                            "creationTimestamp": Meta(base).creation_timestamp or None, "labels": labels,
                            "annotations": annotations}
    if podgroup is not None and Meta(podgroup).raw.get("ownerReferences"):
        meta["ownerReferences"] = copy.deepcopy(Meta(podgroup).raw["ownerReferences"])
    out: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": meta,
        "spec": copy.deepcopy(dict((podgroup or {}).get("spec") or {})),
        MEMBERS: {"source": src, "pods": [copy.deepcopy(dict(p)) for p in ordered]},
    }
    if podgroup is not None and isinstance(podgroup.get("status"), Mapping):
        out["status"] = copy.deepcopy(dict(podgroup["status"]))
    return out


class _Group:
    __slots__ = ("emitted", "name", "namespace", "podgroup", "pods", "rv", "source")

    def __init__(self, src: str, namespace: str, name: str) -> None:
        self.source = src
        self.namespace = namespace
        self.name = name
        self.podgroup: Mapping[str, Any] | None = None
        self.pods: dict[str, Mapping[str, Any]] = {}
        self.rv = 0
        self.emitted = False


Event = tuple[str, dict[str, Any]]
"""``(event type, assembled group)`` for the controller's handler of :data:`PODGROUP`."""


class PodGroups:
    """The groups as the watches show them: PodGroup objects and member pods in, gang objects out.

    A group is handed to the controller (an ``ADDED``/``MODIFIED`` event) once it is a gang (see
    the module docstring) and on every later change; ``DELETED`` when its PodGroup is deleted, or
    (a Kueue group, a single pod) its last pod is.
    """

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}

    def __len__(self) -> int:
        return len(self._groups)

    def group(self, key: str) -> dict[str, Any] | None:
        """The assembled group of a gang key, if known."""
        g = self._groups.get(key)
        return None if g is None else self._assemble(g)

    def gangs(self) -> list[dict[str, Any]]:
        """The assembled groups that are gangs (handed to the controller, or would have been)."""
        return [self._assemble(g) for g in self._groups.values() if g.emitted]

    def podgroup_event(self, event_type: str, obj: Mapping[str, Any]) -> Event | None:
        """A PodGroup's event. An assembled group of another source (a Kueue group's, a single
        pod's, as the controller forgets one) is not a PodGroup's and changes nothing."""
        meta = Meta(obj)
        name = meta.name
        if not name or source(obj) != SOURCE_PODGROUP:
            return None
        key = PODGROUP.key(meta.namespace_or_default, name)
        g = self._groups.get(key)
        if g is None:
            if event_type == "DELETED":
                return None
            g = self._groups[key] = _Group(SOURCE_PODGROUP, meta.namespace_or_default, name)
        g.rv = max(g.rv, meta.resource_version)
        if event_type == "DELETED":
            g.podgroup = None
            out = self._emit(g, deleted=True)
            if not g.pods:
                del self._groups[key]
            return out
        g.podgroup = obj
        return self._emit(g)

    def pod_event(self, event_type: str, pod: Mapping[str, Any]) -> Event | None:
        """A pod's event; None when the pod is in no group or its group is no gang yet."""
        member = membership(pod)
        if member is None:
            return None
        src, name = member
        meta = Meta(pod)
        namespace = meta.namespace_or_default
        key = PODGROUP.key_for(src, namespace, name)
        g = self._groups.get(key)
        pod_name = meta.name
        if g is None:
            if event_type == "DELETED":
                return None
            g = self._groups[key] = _Group(src, namespace, name)
        known = g.pods.get(pod_name)
        rv = meta.resource_version
        if event_type != "DELETED" and known is not None and rv < Meta(known).resource_version:
            return None  # older than what is known (a patch's answer came before its watch event)
        g.rv = max(g.rv, rv)
        if event_type == "DELETED":
            g.pods.pop(pod_name, None)
        else:
            g.pods[pod_name] = pod
        if g.pods or g.podgroup is not None:
            return self._emit(g)
        del self._groups[key]
        return self._emit(g, deleted=True)

    def _complete(self, g: _Group) -> bool:
        live_pods = sum(1 for p in g.pods.values() if live(p))
        if g.source == SOURCE_PODGROUP:
            if g.podgroup is None:
                return False
            min_member = (g.podgroup.get("spec") or {}).get("minMember")
            need = min_member if isinstance(min_member, int) and not isinstance(min_member, bool) else 1
            return live_pods >= max(1, need)
        if g.source == SOURCE_GROUP:
            return live_pods >= max(1, _total_count(g.pods.values()) or 1)
        return live_pods >= 1

    def _emit(self, g: _Group, *, deleted: bool = False) -> Event | None:
        if deleted or (g.source == SOURCE_PODGROUP and g.podgroup is None):
            if not g.emitted:
                return None
            g.emitted = False
            return "DELETED", self._assemble(g)
        if not g.emitted and not self._complete(g):
            return None
        event = "MODIFIED" if g.emitted else "ADDED"
        g.emitted = True
        return event, self._assemble(g)

    @staticmethod
    def _assemble(g: _Group) -> dict[str, Any]:
        return assemble(g.source, g.namespace, g.name, g.podgroup, g.pods.values(), g.rv)


def _total_count(group_pods: Iterable[Mapping[str, Any]]) -> int | None:
    for pod in group_pods:
        text = Meta(pod).annotations.get(KUEUE_TOTAL_ANNOTATION)
        if isinstance(text, str) and text.strip().isdigit():
            return int(text.strip())
    return None


# --- the kind ----------------------------------------------------------------------------------


def _int_field(obj: Mapping[str, Any], field: str, *, minimum: int) -> int | None:
    value = (obj.get("spec") or {}).get(field)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SpecError(KIND, podsets.object_name(obj), f"spec.{field}",
                        f"must be an integer of at least {minimum}, got {value!r}")
    return value


def min_resources(obj: Mapping[str, Any]) -> dict[str, int] | None:
    """A PodGroup's ``spec.minResources`` (resource → quantity) in the engine's units."""
    raw = (obj.get("spec") or {}).get("minResources")
    if raw is None:
        return None
    name = podsets.object_name(obj)
    if not isinstance(raw, Mapping):
        raise SpecError(KIND, name, "spec.minResources", f"must map resource names to quantities, got {raw!r}")
    ctx = FieldContext(KIND, name, "")
    return {str(r): to_canonical(str(r), exact_quantity(q, ctx, f"spec.minResources[{r}]"))
            for r, q in raw.items()} or None


class PodGroupKind(WorkloadKind):
    """Pod groups (see the module docstring); its objects are assembled groups (:func:`assemble`)."""

    kind = KIND
    group = GROUP
    version = VERSION
    plural = PLURAL
    workload_prefix = "podgroup-"
    owner_label = "gangq.io/podgroup-name"
    suspend_path = "/metadata/annotations/gangq.io~1suspended"  # unused: the gates suspend
    optional = True
    gates_pods = True  # the webhook gives each pod the gate gangq.io/admission at creation
    queue_verbs = ("get", "list", "watch")  # admitted and evicted through its pods; its status apart
    pod_priority = -10  # the least specific: a pod of any other kind is that kind's
    docs = ("a PodGroup's, a Kueue plain-pod group's or a single pod's pods, one pod set per role; "
            "scheduling gate `gangq.io/admission`; finished once every pod has")
    controlled_by: frozenset[str] = frozenset()  # kinds whose PodGroups are theirs (set by the registry)

    _KEY_PLURALS: Final = {SOURCE_PODGROUP: PLURAL, SOURCE_GROUP: "pod-groups", SOURCE_POD: "pods"}
    _PREFIXES: Final = {SOURCE_PODGROUP: "podgroup-", SOURCE_GROUP: "pod-group-", SOURCE_POD: "pod-"}

    # --- identity -------------------------------------------------------------------------

    def key_for(self, src: str, namespace: str, name: str) -> str:
        """A group's gang key: apart from every other kind's and per source (a Kueue group and a
        PodGroup of one name are two gangs)."""
        return f"{namespace}/{self._KEY_PLURALS[src]}:{name}"

    def key_of(self, obj: Mapping[str, Any]) -> str:
        meta = Meta(obj)
        return self.key_for(source(obj), meta.namespace_or_default, meta.name)

    def workload_name_of(self, obj: Mapping[str, Any]) -> str:
        name = Meta(obj).name
        full = f"{self._PREFIXES[source(obj)]}{name}"
        return full if len(full) <= 253 else self.workload_name(name)

    def owner_reference(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A PodGroup's Workload is the PodGroup's; a single pod's, the pod's; a Kueue group's, its
        first pod's (as long as one pod of the group exists, so does its Workload)."""
        if source(obj) == SOURCE_PODGROUP:
            return super().owner_reference(obj)
        first = next(iter(pods(obj)), {})
        return {"apiVersion": "v1", "kind": "Pod", "name": Meta(first).name,
                "uid": Meta(first).uid, "controller": True, "blockOwnerDeletion": True}

    def ours(self, obj: Mapping[str, Any]) -> bool:
        return not any(r.controller and r.kind in self.controlled_by for r in Meta(obj).owner_references)

    # --- the gang -------------------------------------------------------------------------

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        """One pod set per role of the live pods, in the order of their first pods; its template
        is that first pod (a pod validates as a pod template)."""
        first: dict[str, int] = {}
        counts: dict[str, int] = {}
        group_pods = pods(obj)
        for i, pod in enumerate(group_pods):
            if live(pod):
                r = role(pod)
                first.setdefault(r, i)
                counts[r] = counts.get(r, 0) + 1
        single = source(obj) == SOURCE_POD
        return [PodSet(SINGLE_POD_SET if single else r, counts[r], (MEMBERS, "pods", i),
                       f"pods[{Meta(group_pods[i]).name}]") for r, i in first.items()]

    def pod_set_names(self, obj: Mapping[str, Any]) -> list[str]:
        return [ps.name for ps in self.pod_sets(obj)] or [SINGLE_POD_SET]

    def to_workload(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int],
                    workload_priority_classes: Mapping[str, int], default_queue: str | None = None) -> WorkloadSpec:
        name = podsets.object_name(obj)
        pod_sets = self.pod_sets(obj)
        total = sum(ps.count for ps in pod_sets)
        src = source(obj)
        if src == SOURCE_PODGROUP:
            min_member = _int_field(obj, "minMember", minimum=1)
            need = min_member or 1
            if total < need:
                raise SpecError(KIND, name, "spec.minMember",
                                f"is {need} but the group has {total} pods: waiting for its pods")
        elif src == SOURCE_GROUP:
            count = _total_count(pods(obj))
            field = f"metadata.annotations[{KUEUE_TOTAL_ANNOTATION}]"
            if count is None:
                raise SpecError(KIND, name, field, "must be set on the group's pods (a positive integer)")
            if total != count:
                raise SpecError(KIND, name, field, f"is {count} but the group has {total} pods")
            min_member = None
        else:
            min_member = None
        spec = podsets.to_workload(KIND, obj, pod_sets, key=self.key_of(obj), priority_classes=priority_classes,
                                   workload_priority_classes=workload_priority_classes, default_queue=default_queue)
        if src == SOURCE_PODGROUP:
            spec.min_member = min_member if min_member is not None and min_member < total else None
            spec.min_resources = min_resources(obj) or spec.min_resources
            timeout = _int_field(obj, "scheduleTimeoutSeconds", minimum=1)
            spec.pods_ready_timeout = float(timeout) if timeout is not None else None
            spec.validate()
        return spec

    def signature(self, obj: Mapping[str, Any]) -> tuple[Any, ...]:
        """The group's own fields, and its live pods' roles (a pod that comes or goes resubmits
        the gang)."""
        spec = obj.get("spec") or {}
        roles = sorted(role(p) for p in pods(obj) if live(p))
        return (*podsets.signature(obj), json.dumps(spec, sort_keys=True, default=str), tuple(roles),
                _total_count(pods(obj)))

    # --- its state ------------------------------------------------------------------------

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        """Every live pod is gated (none left: nothing runs)."""
        return all(gated(p) for p in pods(obj) if live(p))

    def started(self, obj: Mapping[str, Any]) -> bool:
        return any(not gated(p) and ((p.get("spec") or {}).get("nodeName") or terminal(p)) for p in pods(obj))

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        """``Completed`` once every pod has finished and enough succeeded (a PodGroup's
        ``minMember``, else every pod), ``Failed`` once every pod has finished and fewer did."""
        group_pods = pods(obj)
        if not group_pods or any(not terminal(p) for p in group_pods):
            return None
        succeeded = sum(1 for p in group_pods if (p.get("status") or {}).get("phase") == "Succeeded")
        need = len(group_pods)
        if source(obj) == SOURCE_PODGROUP:
            min_member = (obj.get("spec") or {}).get("minMember")
            if isinstance(min_member, int) and not isinstance(min_member, bool) and min_member > 0:
                need = min(need, min_member)
        return "Completed" if succeeded >= need else "Failed"

    # --- its pods -------------------------------------------------------------------------

    def pod_selector(self, name: str) -> str:
        return f"{POD_GROUP_LABEL}={name}"

    def pod_query(self, obj: Mapping[str, Any]) -> dict[str, str]:
        name = Meta(obj).name
        src = source(obj)
        if src == SOURCE_PODGROUP:
            return {"labelSelector": f"{POD_GROUP_LABEL}={name}"}
        if src == SOURCE_GROUP:
            return {"labelSelector": f"{KUEUE_GROUP_LABEL}={name}"}
        return {"fieldSelector": f"metadata.name={name}"}

    def pod_owner(self, pod: Mapping[str, Any]) -> tuple[str, str | None] | None:
        member = membership(pod)
        if member is None:
            return None
        src, name = member
        pod_set = SINGLE_POD_SET if src == SOURCE_POD else role(pod)
        return self.key_for(src, Meta(pod).namespace_or_default, name), pod_set

    # --- the writes -----------------------------------------------------------------------

    def suspend_ops(self, obj: Mapping[str, Any]) -> Patch:
        return []  # a gate cannot be added to a pod that exists: the webhook gates at creation

    def unsuspend_ops(self, obj: Mapping[str, Any]) -> Patch:
        return []

    def admission_ops(self, obj: Mapping[str, Any], admission: Admission, flavors: Mapping[str, FlavorSpec]) -> Patch:
        raise NotImplementedError("a pod group is admitted pod by pod: admission_writes")

    def eviction_ops(self, obj: Mapping[str, Any]) -> Patch:
        raise NotImplementedError("a pod group is evicted by deleting its pods: eviction_writes")

    def admission_writes(self, obj: Mapping[str, Any], admission: Admission, flavors: Mapping[str, FlavorSpec],
                         record: str) -> list[ObjectWrite]:
        """One JSON Patch per gated live pod: its uid and gate tested, the assigned flavors' node
        labels added to its nodeSelector and their tolerations appended (what it had recorded in
        ``gangq.io/original-pod-scheduling``), the admission recorded, the gate removed."""
        name = podsets.object_name(obj)
        assigned = {ps.name: ps for ps in admission.pod_sets}
        single = source(obj) == SOURCE_POD
        writes: list[ObjectWrite] = []
        for pod in pods(obj):
            if not live(pod) or not gated(pod):
                continue
            meta = Meta(pod)
            pod_name = meta.name
            set_name = SINGLE_POD_SET if single else role(pod)
            ps = assigned.get(set_name)
            if ps is None:
                raise SpecError(KIND, name, f"pods[{pod_name}]", f"its role {set_name!r} was not admitted "
                                "(the group changed since): it is admitted with the group's next admission")
            before = original_scheduling(pod)
            selector, tols = podsets.admitted_scheduling(KIND, name, f"pods[{pod_name}].spec", before,
                                                        list(ps.flavors.values()), flavors, ps.topology)
            spec = pod.get("spec") or {}
            gates = list(spec.get("schedulingGates") or [])
            index = next(i for i, g in enumerate(gates) if isinstance(g, Mapping) and g.get("name") == GATE)
            ops: Patch = [{"op": "test", "path": "/metadata/uid", "value": meta.raw.get("uid")},
                          {"op": "test", "path": f"/spec/schedulingGates/{index}", "value": gates[index]}]
            if selector != (spec.get("nodeSelector") or {}):
                ops.append({"op": "add", "path": "/spec/nodeSelector", "value": selector})
            if tols != (spec.get("tolerations") or []):
                ops.append({"op": "add", "path": "/spec/tolerations", "value": tols})
            original = json.dumps(before, sort_keys=True, separators=(",", ":"))
            if not isinstance(meta.raw.get("annotations"), Mapping):
                ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
            ops.append({"op": "add", "path": pointer(("metadata", "annotations", ORIGINAL_SCHEDULING_ANNOTATION)),
                        "value": original})
            ops.append({"op": "add", "path": pointer(("metadata", "annotations", ADMISSION_ANNOTATION)),
                        "value": record})
            ops.append({"op": "remove", "path": f"/spec/schedulingGates/{index}"})
            writes.append(ObjectWrite(pod_path(meta.namespace_or_default, pod_name), ops, meta.uid))
        return writes

    def release_writes(self, obj: Mapping[str, Any]) -> list[ObjectWrite]:
        """The writes that hand a group gangq does not queue back to the scheduler: gangq's gate
        removed from each of its gated live pods (uid and gate tested). The webhook gates a
        PodGroup's pods at their creation, before it can know whether their PodGroup will be
        queued (it may not exist yet, and carries the queue label, not they); a PodGroup without a
        queue label (and no default queue in its namespace) must not keep them from scheduling.
        None while a PodGroup's pods wait for their PodGroup, as coscheduling's wait."""
        if source(obj) == SOURCE_PODGROUP and not Meta(obj).uid:
            return []
        writes: list[ObjectWrite] = []
        for pod in pods(obj):
            if not live(pod) or not gated(pod):
                continue
            meta = Meta(pod)
            gates = list((pod.get("spec") or {}).get("schedulingGates") or [])
            index = next(i for i, g in enumerate(gates) if isinstance(g, Mapping) and g.get("name") == GATE)
            ops: Patch = [{"op": "test", "path": "/metadata/uid", "value": meta.raw.get("uid")},
                          {"op": "test", "path": f"/spec/schedulingGates/{index}", "value": gates[index]},
                          {"op": "remove", "path": f"/spec/schedulingGates/{index}"}]
            writes.append(ObjectWrite(pod_path(meta.namespace_or_default, meta.name), ops, meta.uid))
        return writes

    def eviction_writes(self, obj: Mapping[str, Any]) -> list[ObjectWrite]:
        """The deletion of every ungated pod that is neither finished nor being deleted (a pod's
        gate cannot come back; gated pods have not run and stay for the next admission)."""
        return [ObjectWrite(pod_path(Meta(p).namespace_or_default, Meta(p).name), None, Meta(p).uid)
                for p in pods(obj) if live(p) and not gated(p)]

    def status_writes(self, obj: Mapping[str, Any]) -> list[ObjectWrite]:
        """A PodGroup's status as coscheduling's controller keeps it, when it differs."""
        if source(obj) != SOURCE_PODGROUP or not Meta(obj).uid:
            return []
        want = podgroup_status(obj)
        current = obj.get("status") or {}
        ops: Patch = [{"op": "add", "path": f"/status/{k}", "value": v} for k, v in want.items() if current.get(k) != v]
        if not ops:
            return []
        if not isinstance(obj.get("status"), Mapping):
            ops.insert(0, {"op": "add", "path": "/status", "value": {}})
        meta = Meta(obj)
        return [ObjectWrite(PODGROUP.path(meta.namespace_or_default, meta.name),
                            [{"op": "test", "path": "/metadata/uid", "value": meta.raw.get("uid")}, *ops],
                            meta.uid, "status")]


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


PHASES: Final = ("Pending", "PreScheduling", "Scheduling", "Scheduled", "Running", "Finished", "Failed")


def podgroup_status(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A PodGroup's phase and counts, as the coscheduling controller computes them: Pending (fewer
    than minMember pods), PreScheduling (enough pods, waiting for admission: all gated), Scheduling
    (admitted; fewer than minMember bound), Scheduled (minMember bound), Running (minMember running
    or succeeded), Failed (a pod failed and minMember pods have run), Finished (minMember
    succeeded). ``scheduleStartTime`` is kept once set."""
    group_pods = pods(obj)
    min_member = (obj.get("spec") or {}).get("minMember")
    need = min_member if isinstance(min_member, int) and not isinstance(min_member, bool) and min_member > 0 else 1
    phase_of = [(p.get("status") or {}).get("phase") for p in group_pods]
    running = phase_of.count("Running")
    succeeded = phase_of.count("Succeeded")
    failed = phase_of.count("Failed")
    scheduled = sum(1 for p in group_pods if (p.get("spec") or {}).get("nodeName")
                    and (p.get("status") or {}).get("phase") != "Failed")
    present = sum(1 for p in group_pods if live(p)) + succeeded + failed
    admitted = any(not gated(p) for p in group_pods)
    if present < need and not admitted:
        phase = "Pending"
    elif not admitted:
        phase = "PreScheduling"
    elif scheduled < need:
        phase = "Scheduling"
    else:
        phase = "Scheduled"
    if admitted and running + succeeded >= need:
        phase = "Running"
    if failed and failed + running + succeeded >= need:
        phase = "Failed"
    if succeeded >= need:
        phase = "Finished"
    status: dict[str, Any] = {"phase": phase, "scheduled": scheduled, "running": running,
                              "succeeded": succeeded, "failed": failed}
    owners = sorted({f"{Meta(p).namespace_or_default}/{r.name}" for p in group_pods
                     for r in Meta(p).owner_references})
    if owners:
        status["occupiedBy"] = ",".join(owners)
    return status


PODGROUP = PodGroupKind()

__all__ = [
    "ADMISSION_ANNOTATION", "GATE", "KIND", "KUEUE_GROUP_LABEL", "KUEUE_TOTAL_ANNOTATION", "PHASES", "PODGROUP",
    "POD_GROUP_LABEL", "PodGroupKind", "PodGroups", "assemble", "gated", "membership", "min_resources", "pod_path",
    "podgroup_status", "role",
]
