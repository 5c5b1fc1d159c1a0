"""The gang rules, the same for every kind: pod sets → the gang the engine admits, and the pod
template changes an admission makes and an eviction undoes.

A kind describes its pod templates as :class:`PodSet` s (where each template is and how many pods
it makes); everything else is decided here, once:

- **requests** per pod as the kube-scheduler computes them (:func:`gangq.api.pods.pod_requests`);
  node selector, required node affinity and tolerations per pod set, so the engine places pods
  only on nodes they would be bound to;
- **min-member**: annotation ``gangq.io/min-member``, else the sum of the pod sets'
  ``min_count`` when a kind sets one, else every pod;
- ``gangq.io/min-resources``, ``gangq.io/runtime-limit`` (else the kind's own bound);
- **priority**: label ``gangq.io/priority-class`` / ``kueue.x-k8s.io/priority-class`` (a
  WorkloadPriorityClass), else the first pod template's ``priorityClassName`` (a PriorityClass),
  else its ``priority``, else 0;
- **topology** per pod set: the pod template's annotations ``podset-required-topology``,
  ``podset-preferred-topology``, ``podset-unconstrained-topology``, ``podset-slice-required-topology``
  and ``podset-slice-size``, with Kueue's prefix ``kueue.x-k8s.io/`` or gangq's ``gangq.io/``
  (:func:`topology_request`), else the kind's own (a JobSet's exclusive placement);
- **admission**: the assigned flavors' nodeLabels merged into each admitted template's
  nodeSelector and their tolerations appended; the template's nodeSelector and tolerations as
  they were kept per pod set in annotation ``gangq.io/original-pod-scheduling``, so an eviction
  puts them back exactly and a re-admission never piles flavors up. A pod set whose pods the
  engine placed over several topology domains (``PodSetAssignment.domains``) also gets the
  scheduling gate ``gangq.io/topology``: the controller gives each pod its domain's labels and
  lifts the gate (:mod:`gangq.operator.topologypods`), as Kueue's topology ungater does.

Every malformed input raises :class:`~gangq.core.errors.SpecError` naming the kind, the object
and the field as the user wrote it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from gangq.api.jobset import PodSpec, PodTemplateSpec, plain_json, spec_error
from gangq.api.meta import Meta, object_name
from gangq.api.pods import FieldContext, pod_requests
from gangq.api.queues import label_key_problem
from gangq.api.workload import (
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_LABEL,
    MIN_MEMBER_ANNOTATION,
    MIN_RESOURCES_ANNOTATION,
    ORIGINAL_SCHEDULING_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    RUNTIME_LIMIT_ANNOTATION,
    NotQueuedError,
    node_affinity,
    parse_duration,
    parse_min_member,
    parse_min_resources,
    parse_timestamp,
    queue_name,
    tolerations,
)
from gangq.core.decisions import Admission
from gangq.core.errors import SpecError
from gangq.core.model import FlavorSpec, PodSetSpec, TopologyRequest, WorkloadSpec
from gangq.core.selectors import Toleration
from gangq.jobset.constants import EXCLUSIVE_KEY

_MISSING: Final = object()
TOPOLOGY_GATE: Final = "gangq.io/topology"
"""The scheduling gate of pods that wait for their topology domain (see the module docstring)."""

JsonPath = tuple[str | int, ...]
Patch = list[dict[str, Any]]

@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` pods made from the pod template (a PodTemplateSpec) at ``path`` in the object.

    ``name``: the pod set's name on the Workload (Kueue's: a replicatedJob's name, a replica type
    in lower case, ``head``, a worker group's name). ``field``: the same path as a user writes it
    (``spec.rayClusterSpec.headGroupSpec.template``), for errors. ``min_count``: at least this
    many of its pods make the gang useful (None: all of them). ``guard``: a ``(pointer, value)``
    the admission patch tests first, so a list that changed meanwhile fails the patch instead of
    writing into the wrong template (a list item's name).
    """

    name: str
    count: int
    path: JsonPath
    field: str
    min_count: int | None = None
    guard: tuple[str, Any] | None = None
    topology: TopologyRequest | None = None
    """The kind's own topology request (a JobSet's exclusive placement), for a template that
    carries no topology annotation."""


@dataclass(frozen=True, slots=True)
class Resource:
    """An API resource: group (``""`` for the core group), version and plural."""

    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


_GANG_ANNOTATIONS: Final = frozenset({MIN_MEMBER_ANNOTATION, MIN_RESOURCES_ANNOTATION, RUNTIME_LIMIT_ANNOTATION,
                                      EXCLUSIVE_KEY})

TOPOLOGY_PREFIXES: Final = ("kueue.x-k8s.io/", "gangq.io/")
"""The prefixes the per pod set topology annotations are read with (Kueue's, gangq's)."""
REQUIRED_TOPOLOGY: Final = "podset-required-topology"
PREFERRED_TOPOLOGY: Final = "podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY: Final = "podset-unconstrained-topology"
SLICE_REQUIRED_TOPOLOGY: Final = "podset-slice-required-topology"
SLICE_SIZE: Final = "podset-slice-size"
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # Go's strconv.ParseBool, as Kueue reads it
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _topology_annotation(kind: str, name: str, field: str, annotations: Mapping[str, Any],
                         suffix: str) -> tuple[str, str] | None:
    """``(the key as written, its value)`` of one topology annotation, with either prefix; the two
    prefixes with different values are an error."""
    found = [(prefix + suffix, str(annotations[prefix + suffix])) for prefix in TOPOLOGY_PREFIXES
             if prefix + suffix in annotations]
    if len(found) == 2 and found[0][1] != found[1][1]:
        raise SpecError(kind, name, f"{field}[{found[1][0]}]",
                        f"is {found[1][1]!r} but {found[0][0]} is {found[0][1]!r}: set one of them")
    return found[0] if found else None


def topology_request(kind: str, name: str, field: str, annotations: Mapping[str, Any],
                     count: int) -> TopologyRequest | None:
    """A pod set's topology request from its pod template's annotations (``field``: their path,
    for errors), checked as Kueue's webhook checks them: at most one of required, preferred and
    unconstrained; a level is a label key; the slice level and size come together, the size a
    positive integer that divides the pod set's ``count``. Slices alone (no required or preferred
    level) leave the pod set otherwise unconstrained, as in Kueue. Whether a level is one of the
    flavor's Topology is the engine's check (the flavor is chosen there). None: no annotation."""
    found = {suffix: _topology_annotation(kind, name, field, annotations, suffix)
             for suffix in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY, SLICE_REQUIRED_TOPOLOGY,
                            SLICE_SIZE)}
    modes = [kv for kv in (found[REQUIRED_TOPOLOGY], found[PREFERRED_TOPOLOGY], found[UNCONSTRAINED_TOPOLOGY])
             if kv is not None]
    if len(modes) > 1:
        raise SpecError(kind, name, f"{field}[{modes[1][0]}]",
                        f"must not be set together with {modes[0][0]}: a pod set has at most one of "
                        f"{REQUIRED_TOPOLOGY}, {PREFERRED_TOPOLOGY} and {UNCONSTRAINED_TOPOLOGY}")
    for suffix in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, SLICE_REQUIRED_TOPOLOGY):
        kv = found[suffix]
        if kv is not None:
            problem = label_key_problem(kv[1])
            if problem is not None:
                raise SpecError(kind, name, f"{field}[{kv[0]}]", f"must be a topology level (a node label key): "
                                                                 f"{problem}")
    unconstrained = found[UNCONSTRAINED_TOPOLOGY]
    if unconstrained is not None and unconstrained[1] not in _TRUE | _FALSE:
        raise SpecError(kind, name, f"{field}[{unconstrained[0]}]", f"must be true or false, got {unconstrained[1]!r}")
    slice_level, size = found[SLICE_REQUIRED_TOPOLOGY], found[SLICE_SIZE]
    if slice_level is not None and size is None:
        raise SpecError(kind, name, f"{field}[{slice_level[0].replace(SLICE_REQUIRED_TOPOLOGY, SLICE_SIZE)}]",
                        f"must be set when {slice_level[0]} is (the pods per slice)")
    if size is not None and slice_level is None:
        raise SpecError(kind, name, f"{field}[{size[0]}]",
                        f"may be set only with {size[0].replace(SLICE_SIZE, SLICE_REQUIRED_TOPOLOGY)}")
    slice_size: int | None = None
    if size is not None:
        text = size[1].strip()
        if not text.isdigit() or int(text) < 1:
            raise SpecError(kind, name, f"{field}[{size[0]}]", f"must be a positive integer, got {size[1]!r}")
        slice_size = int(text)
        if count % slice_size:
            raise SpecError(kind, name, f"{field}[{size[0]}]",
                            f"must divide the pod set's {count} pods into whole slices, got {slice_size}")
    sliced = slice_level[1] if slice_level is not None else None
    if found[REQUIRED_TOPOLOGY] is not None:
        return TopologyRequest("Required", found[REQUIRED_TOPOLOGY][1], sliced, slice_size)
    if found[PREFERRED_TOPOLOGY] is not None:
        return TopologyRequest("Preferred", found[PREFERRED_TOPOLOGY][1], sliced, slice_size)
    if (unconstrained is not None and unconstrained[1] in _TRUE) or sliced is not None:
        return TopologyRequest("Unconstrained", None, sliced, slice_size)
    return None


def _has_topology_annotation(annotations: Mapping[str, Any]) -> bool:
    return any(prefix + suffix in annotations for prefix in TOPOLOGY_PREFIXES
               for suffix in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY, SLICE_REQUIRED_TOPOLOGY,
                              SLICE_SIZE))


def pod_set_topology(kind: str, obj: Mapping[str, Any], ps: PodSet) -> TopologyRequest | None:
    """The pod set's topology request: its template's annotations (:func:`topology_request`),
    else the kind's own (``ps.topology``)."""
    template = get(obj, ps.path)
    meta = template.get("metadata") if isinstance(template, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping) or not _has_topology_annotation(annotations):
        return ps.topology
    return topology_request(kind, object_name(obj), f"{ps.field}.metadata.annotations", annotations, ps.count)


def signature(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of an object its gang is built from besides its spec: its generation, gangq's and
    Kueue's labels and the gang annotations. A change resubmits the gang; its status and gangq's
    own patches do not change it."""
    meta = Meta(obj)
    labels = meta.labels
    ann = meta.annotations
    return (
        meta.generation,
        tuple(sorted((k, v) for k, v in labels.items() if k.startswith(("gangq.io/", "kueue.x-k8s.io/")))),
        tuple(sorted((k, v) for k, v in ann.items() if k in _GANG_ANNOTATIONS)),
    )


def get(doc: Any, path: JsonPath) -> Any:
    """The value at ``path`` in ``doc``, or :data:`_MISSING`."""
    for p in path:
        if isinstance(p, int):
            if not isinstance(doc, list) or not 0 <= p < len(doc):
                return _MISSING
        elif not isinstance(doc, Mapping) or p not in doc:
            return _MISSING
        doc = doc[p]
    return doc


def pointer(path: JsonPath) -> str:
    """An RFC 6901 JSON Pointer."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def pod_spec(kind: str, obj: Mapping[str, Any], ps: PodSet) -> PodSpec:
    """The pod set's pod spec, validated."""
    name = object_name(obj)
    template = get(obj, ps.path)
    if not isinstance(template, Mapping):
        raise SpecError(kind, name, ps.field, "is required (a pod template)")
    try:
        parsed = PodTemplateSpec.model_validate(plain_json(template))
    except ValidationError as err:
        raise spec_error(err, kind, name, ps.field) from err
    if parsed.spec is None:
        raise SpecError(kind, name, f"{ps.field}.spec", "is required (the pod template has no spec)")
    if not parsed.spec.containers:
        raise SpecError(kind, name, f"{ps.field}.spec.containers", "must list at least one container")
    return parsed.spec


def to_workload(
    kind: str,
    obj: Mapping[str, Any],
    pod_sets: Sequence[PodSet],
    *,
    key: str,
    priority_classes: Mapping[str, int] | None = None,
    workload_priority_classes: Mapping[str, int] | None = None,
    default_queue: str | None = None,
    runtime_limit: float | None = None,
    sets_field: str = "spec",
) -> WorkloadSpec:
    """The gang of an object of ``kind`` with these pod sets (see the module docstring); ``key``
    is the engine's key of it. Raises :class:`NotQueuedError` without a queue label (and no
    ``default_queue``), :class:`SpecError` for anything malformed."""
    name = object_name(obj)
    meta = Meta(obj)
    if not meta.name:
        raise SpecError(kind, name, "metadata.name", "is required")
    queue = queue_name(obj) or default_queue
    if queue is None:
        raise NotQueuedError(kind, name, f"metadata.labels[{QUEUE_LABEL}]",
                             f"is not set (nor {KUEUE_QUEUE_LABEL}): the {kind} is not queued")
    if not pod_sets:
        raise SpecError(kind, name, sets_field, "has no pod template: the gang has no pods")
    specs: list[PodSetSpec] = []
    pods: list[PodSpec] = []
    seen: set[str] = set()
    for ps in pod_sets:
        if ps.name in seen:
            raise SpecError(kind, name, ps.field, f"pod set name {ps.name!r} is used twice")
        seen.add(ps.name)
        if ps.count < 0:
            raise SpecError(kind, name, ps.field, f"must not run a negative number of pods, got {ps.count}")
        pod = pod_spec(kind, obj, ps)
        pods.append(pod)
        ctx = FieldContext(kind, name, f"{ps.field}.spec")
        specs.append(PodSetSpec(ps.name, ps.count, pod_requests(pod, ctx), pod.node_selector,
                                tolerations(pod.tolerations or [], ctx), node_affinity(pod.affinity, ctx),
                                topology=pod_set_topology(kind, obj, ps)))
    total = sum(ps.count for ps in pod_sets)
    if total == 0:
        raise SpecError(kind, name, sets_field, "the gang has no pods (every pod set runs 0 pods)")
    annotations = meta.annotations
    min_member: int | None = None
    if MIN_MEMBER_ANNOTATION in annotations:
        min_member = parse_min_member(kind, name, str(annotations[MIN_MEMBER_ANNOTATION]), total)
    elif any(ps.min_count is not None for ps in pod_sets):
        min_member = sum(ps.count if ps.min_count is None else min(ps.min_count, ps.count) for ps in pod_sets)
        min_member = max(1, min_member) if min_member < total else None
    min_resources: dict[str, int] | None = None
    if MIN_RESOURCES_ANNOTATION in annotations:
        try:
            min_resources = parse_min_resources(str(annotations[MIN_RESOURCES_ANNOTATION]))
        except ValueError as err:
            raise SpecError(kind, name, f"metadata.annotations[{MIN_RESOURCES_ANNOTATION}]", str(err)) from err
    if RUNTIME_LIMIT_ANNOTATION in annotations:
        try:
            runtime_limit = parse_duration(str(annotations[RUNTIME_LIMIT_ANNOTATION]))
        except ValueError as err:
            raise SpecError(kind, name, f"metadata.annotations[{RUNTIME_LIMIT_ANNOTATION}]", str(err)) from err
    creation_time = 0.0
    if meta.creation_timestamp:
        try:
            creation_time = parse_timestamp(meta.creation_timestamp)
        except ValueError as err:
            raise SpecError(kind, name, "metadata.creationTimestamp", str(err)) from err
    priority, priority_class = _priority(kind, name, meta.labels, pod_sets, pods, priority_classes or {},
                                         workload_priority_classes or {})
    spec = WorkloadSpec(key, meta.namespace_or_default, queue, specs, priority=priority,
                        creation_time=creation_time, min_member=min_member, min_resources=min_resources,
                        runtime_limit=runtime_limit, priority_class=priority_class)
    spec.validate()
    return spec


def _priority(kind: str, name: str, labels: Mapping[str, Any], pod_sets: Sequence[PodSet], pods: Sequence[PodSpec],
              priority_classes: Mapping[str, int], workload_priority_classes: Mapping[str, int]) -> tuple[int, str]:
    for label in (PRIORITY_CLASS_LABEL, KUEUE_PRIORITY_CLASS_LABEL):
        value = labels.get(label)
        if value:
            if value not in workload_priority_classes:
                raise SpecError(kind, name, f"metadata.labels[{label}]",
                                f"WorkloadPriorityClass {value!r} does not exist")
            return workload_priority_classes[value], str(value)
    for ps, pod in zip(pod_sets, pods, strict=True):
        if pod.priority_class_name:
            if pod.priority_class_name not in priority_classes:
                raise SpecError(kind, name, f"{ps.field}.spec.priorityClassName",
                                f"PriorityClass {pod.priority_class_name!r} does not exist")
            return priority_classes[pod.priority_class_name], pod.priority_class_name
    for pod in pods:
        if pod.priority is not None:
            return pod.priority, ""
    return 0, ""


# --- admission: inject flavors into pod templates, and undo it ---------------------------------


def toleration_json(t: Toleration) -> dict[str, str]:
    out = {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
    return {k: v for k, v in out.items() if v}


def toleration_identity(t: Mapping[str, Any]) -> tuple[str, str, str, str, Any]:
    return (
        t.get("key") or "",
        t.get("operator") or "Equal",
        t.get("value") or "",
        t.get("effect") or "",
        t.get("tolerationSeconds"),
    )




def recorded_originals(kind: str, obj: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    """Per pod set, the nodeSelector and tolerations its template had before admission (annotation
    ``gangq.io/original-pod-scheduling``), or None when nothing is recorded."""
    text = Meta(obj).annotations.get(ORIGINAL_SCHEDULING_ANNOTATION)
    if text is None:
        return None
    field = f"metadata.annotations[{ORIGINAL_SCHEDULING_ANNOTATION}]"
    try:
        data: Any = json.loads(text)
    except ValueError as err:
        raise SpecError(kind, object_name(obj), field,
                        f"is not JSON ({err}); it is written by gangq, do not edit it") from err
    ok = isinstance(data, dict) and all(
        isinstance(v, dict) and isinstance(v.get("nodeSelector"), dict | type(None))
        and isinstance(v.get("tolerations"), list | type(None))
        and isinstance(v.get("schedulingGates"), list | type(None)) for v in data.values())
    if not ok:
        raise SpecError(kind, object_name(obj), field,
                        "must map pod set names to {nodeSelector, tolerations}; written by gangq")
    originals: dict[str, dict[str, Any]] = data
    return originals


def _template_spec(kind: str, obj: Mapping[str, Any], ps: PodSet) -> Mapping[str, Any]:
    spec = get(obj, (*ps.path, "spec"))
    if not isinstance(spec, Mapping):
        raise SpecError(kind, object_name(obj), f"{ps.field}.spec", "is required (the pod template has no spec)")
    return spec


def _field_ops(obj: Mapping[str, Any], ps: PodSet, field: str, value: Any, ops: Patch) -> None:
    path = (*ps.path, "spec", field)
    if get(obj, path) == (_MISSING if value is None else value):
        return
    if value is None:
        ops.append({"op": "remove", "path": pointer(path)})
    else:
        ops.append({"op": "add", "path": pointer(path), "value": copy.deepcopy(value)})


def _annotation_ops(obj: Mapping[str, Any], value: str | None) -> Patch:
    annotations = Meta(obj).raw.get("annotations")  # absent and empty patch differently
    current = annotations.get(ORIGINAL_SCHEDULING_ANNOTATION) if isinstance(annotations, Mapping) else None
    if current == value:
        return []
    if value is None:
        if isinstance(annotations, Mapping) and len(annotations) == 1:
            return [{"op": "remove", "path": "/metadata/annotations"}]  # the API server never returns {}
        return [{"op": "remove", "path": pointer(("metadata", "annotations", ORIGINAL_SCHEDULING_ANNOTATION))}]
    if not isinstance(annotations, Mapping):
        return [{"op": "add", "path": "/metadata/annotations", "value": {ORIGINAL_SCHEDULING_ANNOTATION: value}}]
    return [{"op": "add", "path": pointer(("metadata", "annotations", ORIGINAL_SCHEDULING_ANNOTATION)), "value": value}]


def admitted_scheduling(kind: str, name: str, field: str, before: Mapping[str, Any], flavor_names: Sequence[str],
                        flavors: Mapping[str, FlavorSpec], domain: Mapping[str, str] | None = None,
                        ) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """A pod's nodeSelector and tolerations once these flavors are injected into ``before``'s
    (``field``: the pod spec's path, for errors), and the labels of the topology domain the
    engine placed the pod set in (``domain``: the admission's ``PodSetAssignment.topology``), so
    that its pods land in that domain."""
    selector: dict[str, str] = dict(before.get("nodeSelector") or {})
    tols: list[dict[str, Any]] = [dict(t) for t in before.get("tolerations") or []]
    seen = {toleration_identity(t) for t in tols}
    for flavor_name in dict.fromkeys(flavor_names):
        flavor = flavors.get(flavor_name)
        if flavor is None:
            raise SpecError(kind, name, field, f"assigned ResourceFlavor {flavor_name!r} is not known")
        for label, value in flavor.node_labels.items():
            if selector.get(label, value) != value:
                raise SpecError(kind, name, f"{field}.nodeSelector[{label}]",
                                f"is {selector[label]!r} but ResourceFlavor {flavor_name!r} needs {value!r}")
            selector[label] = value
        for tol in flavor.tolerations:
            as_json = toleration_json(tol)
            ident = toleration_identity(as_json)
            if ident not in seen:
                seen.add(ident)
                tols.append(as_json)
    for label, value in (domain or {}).items():
        if selector.get(label, value) != value:
            raise SpecError(kind, name, f"{field}.nodeSelector[{label}]",
                            f"is {selector[label]!r} but the topology domain it was admitted to needs {value!r}")
        selector[label] = value
    return selector, tols


def admission_ops(kind: str, obj: Mapping[str, Any], pod_sets: Sequence[PodSet], admission: Admission,
                  flavors: Mapping[str, FlavorSpec], sets_field: str = "spec") -> Patch:
    """The JSON Patch operations that inject ``admission``'s flavors into the pod templates and
    record what they were (see the module docstring); suspension is the kind's. ``sets_field``:
    where the object lists its pod sets, for the error of an admitted pod set it does not have."""
    name = object_name(obj)
    by_name = {ps.name: ps for ps in pod_sets}
    originals = recorded_originals(kind, obj) or {}
    recorded: dict[str, dict[str, Any]] = {}
    template_ops: Patch = []
    for assigned in admission.pod_sets:
        ps = by_name.get(assigned.name)
        if ps is None:
            raise SpecError(kind, name, sets_field, f"has no pod set {assigned.name!r} (admitted)")
        spec = _template_spec(kind, obj, ps)
        before = originals.get(ps.name) or {"nodeSelector": copy.deepcopy(spec.get("nodeSelector")),
                                            "tolerations": copy.deepcopy(spec.get("tolerations"))}
        recorded[ps.name] = before
        selector, tols = admitted_scheduling(kind, name, f"{ps.field}.spec", before,
                                             list(assigned.flavors.values()), flavors, assigned.topology)
        changes: Patch = []
        _field_ops(obj, ps, "nodeSelector", selector if selector or before.get("nodeSelector") is not None else None,
                   changes)
        _field_ops(obj, ps, "tolerations", tols if tols or before.get("tolerations") is not None else None, changes)
        if assigned.domains or "schedulingGates" in before:
            if "schedulingGates" not in before:
                before["schedulingGates"] = copy.deepcopy(spec.get("schedulingGates"))
            gates = [g for g in before["schedulingGates"] or [] if g.get("name") != TOPOLOGY_GATE]
            if assigned.domains:
                gates.append({"name": TOPOLOGY_GATE})
            _field_ops(obj, ps, "schedulingGates",
                       gates if gates or before["schedulingGates"] is not None else None, changes)
            if not assigned.domains:
                del before["schedulingGates"]
        if changes and ps.guard is not None:
            template_ops.append({"op": "test", "path": ps.guard[0], "value": ps.guard[1]})
        template_ops += changes
    for set_name, before in originals.items():  # recorded by an earlier admission, not assigned now
        if set_name not in recorded and set_name in by_name:
            recorded[set_name] = before
    text = json.dumps(recorded, sort_keys=True, separators=(",", ":")) if recorded else None
    return [*_annotation_ops(obj, text), *template_ops]


def restore_ops(kind: str, obj: Mapping[str, Any], pod_sets: Sequence[PodSet]) -> Patch:
    """The JSON Patch operations that put the pod templates' nodeSelector and tolerations back as
    recorded at admission and drop the record; none when nothing is recorded. Pod sets that no
    longer exist are skipped."""
    originals = recorded_originals(kind, obj)
    if originals is None:
        return []
    by_name = {ps.name: ps for ps in pod_sets}
    ops: Patch = []
    for set_name, before in originals.items():
        ps = by_name.get(set_name)
        if ps is None or not isinstance(get(obj, (*ps.path, "spec")), Mapping):
            continue
        changes: Patch = []
        _field_ops(obj, ps, "nodeSelector", before.get("nodeSelector"), changes)
        _field_ops(obj, ps, "tolerations", before.get("tolerations"), changes)
        if "schedulingGates" in before:
            _field_ops(obj, ps, "schedulingGates", before["schedulingGates"], changes)
        if changes and ps.guard is not None:
            ops.append({"op": "test", "path": ps.guard[0], "value": ps.guard[1]})
        ops += changes
    return [*_annotation_ops(obj, None), *ops]


__all__ = [
    "TOPOLOGY_GATE", "JsonPath", "Patch", "PodSet", "Resource", "admission_ops", "admitted_scheduling", "get",
    "object_name", "pod_set_topology", "pod_spec", "pointer", "recorded_originals", "restore_ops", "signature",
    "to_workload", "topology_request",
]
