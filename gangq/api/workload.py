"""A JobSet as the gang the engine admits, and the pod-template changes an admission makes.

:func:`jobset_to_workload` maps a queued JobSet to a core :class:`~gangq.core.model.WorkloadSpec`
(one pod set per replicatedJob). :func:`admission_patch` / :func:`restore_patch` inject an
admission's flavors into the pod templates and undo exactly that on eviction. Every malformed input
raises :class:`~gangq.core.errors.SpecError` ``("JobSet", "<ns>/<name>", <field>, <message>)``;
the operator puts its text on the Workload's status. See docs/api.md, "JobSets and gangs".
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Final

from gangq.api.jobset import (
    KIND,
    JobSet,
    ReplicatedJob,
    dump,
    effective_replicas,
    parse_jobset,
    plain_json,
    pod_template_path,
)
from gangq.api.jobset import Toleration as TolerationModel
from gangq.api.pods import FieldContext, exact_quantity, pod_requests, to_canonical
from gangq.core.decisions import Admission
from gangq.core.errors import SpecError
from gangq.core.model import FlavorSpec, PodSetSpec, WorkloadSpec
from gangq.core.selectors import NodeAffinity, NodeSelectorRequirement, Toleration

log = logging.getLogger(__name__)

QUEUE_LABEL: Final = "gangq.io/queue-name"
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL: Final = "gangq.io/priority-class"
KUEUE_PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
MIN_MEMBER_ANNOTATION: Final = "gangq.io/min-member"
MIN_RESOURCES_ANNOTATION: Final = "gangq.io/min-resources"
RUNTIME_LIMIT_ANNOTATION: Final = "gangq.io/runtime-limit"
ORIGINAL_SCHEDULING_ANNOTATION: Final = "gangq.io/original-pod-scheduling"
"""Set at admission: per replicatedJob the pod template's nodeSelector and tolerations before the
flavors were injected (``null`` when the field was absent); :func:`restore_patch` puts them back."""

_INT = re.compile(r"^[0-9]+$")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_RESOURCE_NAME = re.compile(rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS: Final = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),
    "μs": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}
MAX_DURATION_SECONDS: Final = 9_223_372_036
"""The longest runtime limit: Go's ``time.Duration`` (int64 nanoseconds) holds about 292 years, so
a longer value is no duration Kubernetes tooling could write, and an unbounded one
(``1e999999999``) would take the controller forever to turn into an exact number."""
_MAX_MIN_MEMBER_DIGITS: Final = 10
"""A min-member longer than this is out of range anyway (a gang has at most 2^31 pods per
replicatedJob); checking the length first keeps ``int()`` away from 100,000-digit strings, which
Python refuses (ValueError) and which would otherwise escape as a crash instead of a field error."""
_IGNORE_MAX_RESTARTS = ("RestartJobSetAndIgnoreMaxRestarts", "RestartJobAndIgnoreMaxRestarts")


class NotQueuedError(SpecError):
    """The JobSet carries no queue label: gangq does not manage it (the operator ignores it)."""


def _label_path(key: str) -> str:
    return f"metadata.labels[{key}]"


def _annotation_path(key: str) -> str:
    return f"metadata.annotations[{key}]"


# --- small parsers (public: the operator and the docs use them) -------------------------------


def queue_name(obj: Mapping[str, Any] | JobSet) -> str | None:
    """The LocalQueue a JobSet asks for: label ``gangq.io/queue-name``, else
    ``kueue.x-k8s.io/queue-name``; ``None`` (not managed by gangq) when neither is set or empty."""
    if isinstance(obj, JobSet):
        labels: Mapping[str, Any] = obj.metadata.labels or {}
    else:
        meta = obj.get("metadata")
        raw = meta.get("labels") if isinstance(meta, Mapping) else None
        labels = raw if isinstance(raw, Mapping) else {}
    for key in (QUEUE_LABEL, KUEUE_QUEUE_LABEL):
        value = labels.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def parse_min_resources(text: str) -> dict[str, int]:
    """``nvidia.com/gpu=16,cpu=32`` → ``{"nvidia.com/gpu": 16, "cpu": 32000}`` (cpu in millicores).

    Comma-separated ``resource=quantity`` pairs; spaces around items are ignored; each resource at
    most once. Raises ValueError with what is wrong.
    """
    out: dict[str, int] = {}
    items = text.split(",")
    if not text.strip():
        raise ValueError("is empty; expected comma-separated resource=quantity pairs, e.g. nvidia.com/gpu=16,cpu=32")
    for raw in items:
        item = raw.strip()
        if not item:
            raise ValueError(f"has an empty item in {text!r}; expected resource=quantity pairs separated by commas")
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ValueError(f"item {item!r} is not resource=quantity (e.g. nvidia.com/gpu=16)")
        if not _RESOURCE_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid resource name")
        if name in out:
            raise ValueError(f"resource {name!r} is listed twice")
        ctx = FieldContext(KIND, "", "")
        try:
            amount = exact_quantity(value, ctx, name)
        except SpecError as err:
            raise ValueError(f"{name}: {err.message}") from err
        out[name] = to_canonical(name, amount)
    return out


def parse_min_member(kind: str, name: str, text: str, total: int) -> int:
    """Annotation ``gangq.io/min-member`` of an object of ``kind`` whose gang has ``total`` pods."""
    value = text.strip()
    if not _INT.match(value) or len(value) > _MAX_MIN_MEMBER_DIGITS or not 1 <= int(value) <= total:
        raise SpecError(kind, name, _annotation_path(MIN_MEMBER_ANNOTATION),
                        f"must be an integer between 1 and the gang's {total} pods, got {text!r}")
    return int(value)


def parse_duration(text: str) -> float:
    """Seconds from a number of seconds (``5400``, ``90.5``) or a Go duration (``90m``, ``2h30m``,
    ``45s``, ``1.5h``, ``300ms``). Must be positive. Raises ValueError."""
    s = text.strip()
    if not s:
        raise ValueError("is empty; expected seconds (e.g. 5400) or a duration (e.g. 90m, 2h30m, 45s)")
    try:
        number: Decimal | None = Decimal(s)
    except InvalidOperation:
        number = None
    if number is not None:
        if not number.is_finite():
            raise ValueError(f"{text!r} is not a finite number of seconds")
        if number > MAX_DURATION_SECONDS:  # before Fraction: Fraction(Decimal("1e999999999")) never ends
            raise ValueError(f"{text!r} is too long (at most {MAX_DURATION_SECONDS} seconds, Go's longest duration)")
        seconds = Fraction(number)
    else:
        pos = 0
        seconds = Fraction(0)
        for m in _DURATION_PART.finditer(s):
            if m.start() != pos:
                break
            seconds += Fraction(Decimal(m.group(1))) * _DURATION_UNITS[m.group(2)]
            pos = m.end()
        if pos != len(s) or pos == 0:
            raise ValueError(
                f"{text!r} is not a duration; expected seconds (e.g. 5400) or a Go duration such as 90m, 2h30m, 45s"
            )
    if seconds <= 0:
        raise ValueError(f"must be positive, got {text!r}")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{text!r} is too long (at most {MAX_DURATION_SECONDS} seconds, Go's longest duration)")
    return float(seconds)


def parse_timestamp(text: str) -> float:
    """An RFC 3339 timestamp (``2026-11-22T23:00:00Z``) as epoch seconds. Raises ValueError."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError as err:
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp (e.g. 2026-11-22T23:00:00Z)") from err
    if when.tzinfo is None or ("T" not in text.upper() and " " not in text):
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp with a time zone (e.g. 2026-11-22T23:00:00Z)")
    return when.timestamp()


# --- JobSet → gang ----------------------------------------------------------------------------


def pods_per_job(rjob: ReplicatedJob, error: FieldContext) -> int:
    """Pods one child Job runs at once, as the Job controller defaults it.

    parallelism defaults to 1; completions unset means "parallelism pods" (a work queue), which
    batch/v1 allows only for NonIndexed Jobs; completions below parallelism caps the count.
    """
    job = rjob.template.spec
    for field, value in (("parallelism", job.parallelism), ("completions", job.completions)):
        if value is not None and value < 0:  # batch/v1 rejects it; the JobSet CRD does not check it
            raise error.error(f"template.spec.{field}", f"must not be negative, got {value}")
    parallelism = 1 if job.parallelism is None else job.parallelism
    if job.completions is None:
        mode = job.completion_mode or "Indexed"  # JobSet's webhook default
        if job.parallelism is not None and mode == "Indexed":
            raise error.error(
                "template.spec.completions",
                "is required when completionMode is Indexed (JobSet's default) and parallelism is set; "
                "set completions (usually equal to parallelism) or completionMode: NonIndexed",
            )
        return parallelism
    return min(parallelism, job.completions)


def node_affinity(affinity: Mapping[str, Any] | None, ctx: FieldContext) -> NodeAffinity:
    """The pod's required node affinity (``requiredDuringSchedulingIgnoredDuringExecution``):
    its ``nodeSelectorTerms``' ``matchExpressions``. ``matchFields`` (node names) are left to the
    kube-scheduler: the node check cannot see them."""
    if not affinity:
        return ()
    base = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    node_affinity = affinity.get("nodeAffinity") or {}
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, Mapping)
        else None
    )
    if not required:
        return ()
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list):
        raise ctx.error(f"{base}.nodeSelectorTerms", "must be a list of node selector terms")
    out: list[tuple[NodeSelectorRequirement, ...]] = []
    for t, term in enumerate(terms):
        if not isinstance(term, Mapping):
            raise ctx.error(f"{base}.nodeSelectorTerms[{t}]", "must be an object")
        expressions = term.get("matchExpressions") or []
        if not isinstance(expressions, list):
            raise ctx.error(f"{base}.nodeSelectorTerms[{t}].matchExpressions", "must be a list")
        reqs = []
        for e, expr in enumerate(expressions):
            field = f"{base}.nodeSelectorTerms[{t}].matchExpressions[{e}]"
            if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str) or not expr.get("key"):
                raise ctx.error(field, "must have a key")
            values = expr.get("values") or []
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise ctx.error(f"{field}.values", "must be a list of strings")
            try:
                reqs.append(NodeSelectorRequirement(expr["key"], str(expr.get("operator", "")), values))
            except ValueError as err:
                raise ctx.error(f"{field}.operator", str(err)) from err
        if term.get("matchFields") and not reqs:
            # Only node names: the node check cannot tell which nodes; any node may do.
            return ()
        out.append(tuple(reqs))
    return tuple(out)


def tolerations(models: Iterable[TolerationModel], ctx: FieldContext) -> list[Toleration]:
    out = []
    for i, t in enumerate(models):
        try:
            out.append(Toleration(t.key or "", t.operator or "Equal", t.value or "", t.effect or ""))
        except ValueError as err:
            raise ctx.error(f"tolerations[{i}]", str(err)) from err
    return out


def _priority(
    js: JobSet, key: str, priority_classes: Mapping[str, int], workload_priority_classes: Mapping[str, int]
) -> tuple[int, str]:
    labels = js.metadata.labels or {}
    for label in (PRIORITY_CLASS_LABEL, KUEUE_PRIORITY_CLASS_LABEL):
        name = labels.get(label)
        if name:
            if name not in workload_priority_classes:
                raise SpecError(KIND, key, _label_path(label), f"WorkloadPriorityClass {name!r} does not exist")
            return workload_priority_classes[name], name
    rjobs = js.replicated_jobs()
    for i, rjob in enumerate(rjobs):
        pod = rjob.template.spec.template.spec
        if pod is not None and pod.priority_class_name:
            name = pod.priority_class_name
            if name not in priority_classes:
                raise SpecError(
                    KIND, key, f"{pod_template_path(i)}.priorityClassName", f"PriorityClass {name!r} does not exist"
                )
            return priority_classes[name], name
    for rjob in rjobs:
        pod = rjob.template.spec.template.spec
        if pod is not None and pod.priority is not None:
            return pod.priority, ""
    return 0, ""


def _runtime_limit(js: JobSet, counts: Mapping[str, int]) -> float | None:
    """An upper bound of the JobSet's run time from its Jobs' activeDeadlineSeconds, or None.

    A Job ends (succeeds or fails) within its deadline, and a failure ends the JobSet (or restarts
    it). successPolicy All: the JobSet ends when the last targeted Job has ended → the largest
    deadline of the targeted replicatedJobs (all must have one). Any: it ends when the first
    targeted Job ends → the smallest deadline among them. With startupPolicy InOrder or dependsOn
    replicatedJobs start one after the other → the sum over all of them. Restarts multiply it by
    (1 + maxRestarts); a rule that ignores maxRestarts makes it unbounded.
    """
    rjobs = [r for r in js.replicated_jobs() if counts.get(r.name, 0) > 0]
    if not rjobs:
        return None
    deadlines = {r.name: r.template.spec.active_deadline_seconds for r in rjobs}
    spec = js.spec
    sequential = (spec.startup_policy is not None and spec.startup_policy.startup_policy_order == "InOrder") or any(
        r.depends_on for r in rjobs
    )
    policy = spec.success_policy
    operator = policy.operator if policy is not None else "All"
    targets = [n for n in (policy.target_replicated_jobs or []) if n in deadlines] if policy is not None else []
    targeted = targets or list(deadlines)
    bound: float | None
    if sequential:
        values = list(deadlines.values())
        bound = None if any(v is None for v in values) else float(sum(v for v in values if v is not None))
    elif operator == "All":
        values = [deadlines[n] for n in targeted]
        bound = None if any(v is None for v in values) else float(max(v for v in values if v is not None))
    else:
        present = [v for v in (deadlines[n] for n in targeted) if v is not None]
        bound = float(min(present)) if present else None
    if bound is None:
        return None
    fp = spec.failure_policy
    if fp is not None:
        if any(rule.action in _IGNORE_MAX_RESTARTS for rule in fp.rules or []):
            return None
        bound *= 1 + (fp.max_restarts or 0)
    return bound


def jobset_to_workload(
    obj: Mapping[str, Any] | JobSet,
    *,
    priority_classes: Mapping[str, int] | None = None,
    workload_priority_classes: Mapping[str, int] | None = None,
    default_queue: str | None = None,
) -> WorkloadSpec:
    """The gang a queued JobSet asks the engine to admit.

    Raises :class:`NotQueuedError` when the JobSet has no queue label and no ``default_queue``
    (the LocalQueue of a namespace that queues workloads without one; check :func:`queue_name`
    first to skip such JobSets), and :class:`SpecError` naming the field for anything malformed.
    ``priority_classes``: PriorityClass name → value; ``workload_priority_classes``:
    WorkloadPriorityClass name → value.
    """
    js = parse_jobset(obj)
    key = js.key
    meta = js.metadata
    if not meta.name:
        raise SpecError(KIND, key, "metadata.name", "is required")
    namespace = meta.namespace or "default"
    queue = queue_name(js) or default_queue
    if queue is None:
        raise NotQueuedError(
            KIND, key, _label_path(QUEUE_LABEL), f"is not set (nor {KUEUE_QUEUE_LABEL}): the JobSet is not queued"
        )
    rjobs = js.replicated_jobs()
    if not rjobs:
        raise SpecError(KIND, key, "spec.replicatedJobs", "must list at least one replicatedJob")

    pod_sets: list[PodSetSpec] = []
    counts: dict[str, int] = {}
    for i, rjob in enumerate(rjobs):
        base = f"spec.replicatedJobs[{i}]"
        if rjob.name in counts:
            raise SpecError(KIND, key, f"{base}.name", f"duplicate replicatedJob name {rjob.name!r}")
        count = effective_replicas(rjob) * pods_per_job(rjob, FieldContext(KIND, key, base))
        counts[rjob.name] = count
        pod = rjob.template.spec.template.spec
        ctx = FieldContext(KIND, key, pod_template_path(i))
        if pod is None:
            raise SpecError(KIND, key, pod_template_path(i), "is required (the pod template has no spec)")
        if not pod.containers:
            raise ctx.error("containers", "must list at least one container")
        pod_sets.append(
            PodSetSpec(
                rjob.name,
                count,
                pod_requests(pod, ctx),
                pod.node_selector,
                tolerations(pod.tolerations or [], ctx),
                node_affinity(pod.affinity, ctx),
            )
        )
    total = sum(counts.values())
    if total == 0:
        raise SpecError(KIND, key, "spec.replicatedJobs", "the gang has no pods (every replicatedJob runs 0 pods)")

    annotations = meta.annotations or {}
    min_member: int | None = None
    if MIN_MEMBER_ANNOTATION in annotations:
        min_member = parse_min_member(KIND, key, annotations[MIN_MEMBER_ANNOTATION], total)
    min_resources: dict[str, int] | None = None
    if MIN_RESOURCES_ANNOTATION in annotations:
        try:
            min_resources = parse_min_resources(annotations[MIN_RESOURCES_ANNOTATION])
        except ValueError as err:
            raise SpecError(KIND, key, _annotation_path(MIN_RESOURCES_ANNOTATION), str(err)) from err
    runtime_limit: float | None
    if RUNTIME_LIMIT_ANNOTATION in annotations:
        try:
            runtime_limit = parse_duration(annotations[RUNTIME_LIMIT_ANNOTATION])
        except ValueError as err:
            raise SpecError(KIND, key, _annotation_path(RUNTIME_LIMIT_ANNOTATION), str(err)) from err
    else:
        runtime_limit = _runtime_limit(js, counts)

    creation_time = 0.0
    if meta.creation_timestamp is not None:
        try:
            creation_time = parse_timestamp(meta.creation_timestamp)
        except ValueError as err:
            raise SpecError(KIND, key, "metadata.creationTimestamp", str(err)) from err

    priority, priority_class = _priority(js, key, priority_classes or {}, workload_priority_classes or {})
    spec = WorkloadSpec(
        key,
        namespace,
        queue,
        pod_sets,
        priority=priority,
        creation_time=creation_time,
        min_member=min_member,
        min_resources=min_resources,
        runtime_limit=runtime_limit,
        priority_class=priority_class,
    )
    spec.validate()
    return spec


# --- admission: inject flavors into pod templates, and undo it ---------------------------------

_MISSING: Final = object()


def _as_json(obj: Mapping[str, Any] | JobSet) -> dict[str, Any]:
    if isinstance(obj, JobSet):
        return dump(obj)
    doc: dict[str, Any] = plain_json(obj)
    parse_jobset(doc)  # validates; the JSON itself is kept as given
    return doc


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


def _pod_spec(doc: dict[str, Any], index: int, key: str) -> dict[str, Any]:
    try:
        pod = doc["spec"]["replicatedJobs"][index]["template"]["spec"]["template"]["spec"]
    except (KeyError, IndexError, TypeError):
        pod = None
    if not isinstance(pod, dict):
        raise SpecError(KIND, key, pod_template_path(index), "is required (the pod template has no spec)")
    return pod


def _rjob_indexes(doc: Mapping[str, Any]) -> dict[str, int]:
    return {r["name"]: i for i, r in enumerate(doc.get("spec", {}).get("replicatedJobs") or [])}


def _originals(doc: Mapping[str, Any], key: str) -> dict[str, dict[str, Any]] | None:
    text = ((doc.get("metadata") or {}).get("annotations") or {}).get(ORIGINAL_SCHEDULING_ANNOTATION)
    if text is None:
        return None
    field = _annotation_path(ORIGINAL_SCHEDULING_ANNOTATION)
    try:
        data: Any = json.loads(text)
    except ValueError as err:
        raise SpecError(KIND, key, field, f"is not JSON ({err}); it is written by gangq, do not edit it") from err
    ok = isinstance(data, dict) and all(
        isinstance(v, dict)
        and isinstance(v.get("nodeSelector"), dict | type(None))
        and isinstance(v.get("tolerations"), list | type(None))
        for v in data.values()
    )
    if not ok:
        raise SpecError(
            KIND, key, field, "must map replicatedJob names to {nodeSelector, tolerations}; written by gangq"
        )
    originals: dict[str, dict[str, Any]] = data
    return originals


def _set_annotation(doc: dict[str, Any], value: str | None) -> None:
    meta = doc.setdefault("metadata", {})
    annotations = meta.get("annotations") or {}
    if value is None:
        annotations.pop(ORIGINAL_SCHEDULING_ANNOTATION, None)
    else:
        annotations[ORIGINAL_SCHEDULING_ANNOTATION] = value
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)  # the API server never returns an empty map


def _put(pod: dict[str, Any], field: str, value: Any) -> None:
    if value is None:
        pod.pop(field, None)
    else:
        pod[field] = copy.deepcopy(value)


def apply_admission(
    obj: Mapping[str, Any] | JobSet,
    admission: Admission,
    flavors: Mapping[str, FlavorSpec],
    *,
    unsuspend: bool = True,
) -> dict[str, Any]:
    """The JobSet's JSON after admission (the input is not changed).

    For each pod set of ``admission`` (named after its replicatedJob) the assigned flavors'
    nodeLabels are merged into the pod template's nodeSelector and their tolerations appended
    (skipping ones already there); the template's nodeSelector and tolerations as they were are
    kept in annotation ``gangq.io/original-pod-scheduling``; ``spec.suspend`` becomes false
    unless ``unsuspend`` is false. Re-admitting an admitted JobSet starts from the recorded
    originals, so flavors never pile up. A nodeSelector that contradicts a flavor's nodeLabels
    (the engine does not assign such a flavor) raises SpecError.
    """
    return _admit(_as_json(obj), admission, flavors, unsuspend)


def _admit(
    doc: dict[str, Any], admission: Admission, flavors: Mapping[str, FlavorSpec], unsuspend: bool
) -> dict[str, Any]:
    key = _raw_key_of(doc)
    indexes = _rjob_indexes(doc)
    originals = _originals(doc, key) or {}
    recorded: dict[str, dict[str, Any]] = {}
    for ps in admission.pod_sets:
        if ps.name not in indexes:
            raise SpecError(KIND, key, "spec.replicatedJobs", f"has no replicatedJob {ps.name!r} (admitted pod set)")
        index = indexes[ps.name]
        pod = _pod_spec(doc, index, key)
        if ps.name in originals:
            before = originals[ps.name]
        else:
            before = {
                "nodeSelector": copy.deepcopy(pod.get("nodeSelector")),
                "tolerations": copy.deepcopy(pod.get("tolerations")),
            }
        recorded[ps.name] = before
        selector: dict[str, str] = dict(before.get("nodeSelector") or {})
        tolerations: list[dict[str, Any]] = [dict(t) for t in before.get("tolerations") or []]
        seen = {toleration_identity(t) for t in tolerations}
        for flavor_name in dict.fromkeys(ps.flavors.values()):
            flavor = flavors.get(flavor_name)
            if flavor is None:
                raise SpecError(
                    KIND, key, pod_template_path(index), f"assigned ResourceFlavor {flavor_name!r} is not known"
                )
            for label, value in flavor.node_labels.items():
                if selector.get(label, value) != value:
                    raise SpecError(
                        KIND,
                        key,
                        f"{pod_template_path(index)}.nodeSelector[{label}]",
                        f"is {selector[label]!r} but ResourceFlavor {flavor_name!r} needs {value!r}",
                    )
                selector[label] = value
            for tol in flavor.tolerations:
                as_json = toleration_json(tol)
                ident = toleration_identity(as_json)
                if ident not in seen:
                    seen.add(ident)
                    tolerations.append(as_json)
        _put(pod, "nodeSelector", selector if selector or before.get("nodeSelector") is not None else None)
        _put(pod, "tolerations", tolerations if tolerations or before.get("tolerations") is not None else None)
    for name, before in originals.items():  # recorded by an earlier admission, not assigned now
        if name not in recorded and name in indexes:
            recorded[name] = before
    _set_annotation(doc, json.dumps(recorded, sort_keys=True, separators=(",", ":")) if recorded else None)
    if unsuspend:
        doc.setdefault("spec", {})["suspend"] = False
    return doc


def restore(obj: Mapping[str, Any] | JobSet, *, suspend: bool = True) -> dict[str, Any]:
    """The JobSet's JSON with the pod templates' nodeSelector and tolerations as they were before
    admission (from annotation ``gangq.io/original-pod-scheduling``, which is removed), and
    ``spec.suspend: true`` unless ``suspend`` is false. Without the annotation only ``suspend``
    changes. replicatedJobs that no longer exist are skipped."""
    return _restore(_as_json(obj), suspend)


def _restore(doc: dict[str, Any], suspend: bool) -> dict[str, Any]:
    key = _raw_key_of(doc)
    originals = _originals(doc, key)
    if originals is not None:
        indexes = _rjob_indexes(doc)
        for name, before in originals.items():
            if name not in indexes:
                log.warning("JobSet %s: replicatedJob %r recorded at admission no longer exists", key, name)
                continue
            pod = _pod_spec(doc, indexes[name], key)
            _put(pod, "nodeSelector", before.get("nodeSelector"))
            _put(pod, "tolerations", before.get("tolerations"))
        _set_annotation(doc, None)
    if suspend:
        doc.setdefault("spec", {})["suspend"] = True
    return doc


def admission_patch(
    obj: Mapping[str, Any] | JobSet,
    admission: Admission,
    flavors: Mapping[str, FlavorSpec],
    *,
    unsuspend: bool = True,
) -> list[dict[str, Any]]:
    """:func:`apply_admission` as an RFC 6902 JSON Patch (``application/json-patch+json``).

    Each touched replicatedJob is guarded by a ``test`` of its name, so the patch fails instead of
    writing into the wrong template if the list changed meanwhile.
    """
    old = _as_json(obj)
    return json_patch(old, _admit(plain_json(old), admission, flavors, unsuspend))


def restore_patch(obj: Mapping[str, Any] | JobSet, *, suspend: bool = True) -> list[dict[str, Any]]:
    """:func:`restore` as an RFC 6902 JSON Patch (empty when nothing changes)."""
    old = _as_json(obj)
    return json_patch(old, _restore(plain_json(old), suspend))


def _raw_key_of(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"


def _pointer(parts: Iterable[str | int]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _get(doc: Any, parts: tuple[str | int, ...]) -> Any:
    for p in parts:
        if isinstance(p, int):
            if not isinstance(doc, list) or p >= len(doc):
                return _MISSING
            doc = doc[p]
        else:
            if not isinstance(doc, dict) or p not in doc:
                return _MISSING
            doc = doc[p]
    return doc


def _diff(old: Any, new: Any, parts: tuple[str | int, ...], ops: list[dict[str, Any]]) -> None:
    a, b = _get(old, parts), _get(new, parts)
    if a == b:
        return
    if b is _MISSING:
        ops.append({"op": "remove", "path": _pointer(parts)})
    else:
        ops.append({"op": "add", "path": _pointer(parts), "value": copy.deepcopy(b)})


def json_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON Patch from ``old`` to ``new`` for the fields admission and restore change: the
    gangq annotation, ``spec.suspend`` and each replicatedJob's pod nodeSelector / tolerations."""
    ops: list[dict[str, Any]] = []
    old_ann = _get(old, ("metadata", "annotations"))
    new_ann = _get(new, ("metadata", "annotations"))
    if old_ann is _MISSING or new_ann is _MISSING:
        _diff(old, new, ("metadata", "annotations"), ops)
    else:
        _diff(old, new, ("metadata", "annotations", ORIGINAL_SCHEDULING_ANNOTATION), ops)
    _diff(old, new, ("spec", "suspend"), ops)
    for i, rjob in enumerate(_get(new, ("spec", "replicatedJobs")) or []):
        base: tuple[str | int, ...] = ("spec", "replicatedJobs", i, "template", "spec", "template", "spec")
        changes: list[dict[str, Any]] = []
        for field in ("nodeSelector", "tolerations"):
            _diff(old, new, (*base, field), changes)
        if changes:
            ops.append({"op": "test", "path": _pointer(("spec", "replicatedJobs", i, "name")), "value": rjob["name"]})
            ops.extend(changes)
    return ops


__all__ = [
    "KUEUE_PRIORITY_CLASS_LABEL",
    "KUEUE_QUEUE_LABEL",
    "MIN_MEMBER_ANNOTATION",
    "MIN_RESOURCES_ANNOTATION",
    "ORIGINAL_SCHEDULING_ANNOTATION",
    "PRIORITY_CLASS_LABEL",
    "QUEUE_LABEL",
    "RUNTIME_LIMIT_ANNOTATION",
    "NotQueuedError",
    "admission_patch",
    "apply_admission",
    "jobset_to_workload",
    "json_patch",
    "node_affinity",
    "parse_duration",
    "parse_min_member",
    "parse_min_resources",
    "parse_timestamp",
    "pods_per_job",
    "queue_name",
    "restore",
    "restore_patch",
    "toleration_identity",
    "toleration_json",
    "tolerations",
]
