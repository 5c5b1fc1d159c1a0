"""The labels and annotations every queued kind shares (queue, priority class, min-member,
min-resources, runtime limit), their parsers, and the pod-spec parts the gang rules read (node
affinity, tolerations); the JobSet's own rules: pods per child Job and the runtime bound of its
Jobs' deadlines. The gang rules themselves are :mod:`gangq.integrations.podsets`. Every malformed
input raises :class:`~gangq.core.errors.SpecError` naming the kind, the object and the field.
See docs/api.md, "JobSets and gangs".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Final

from gangq.api.jobset import (
    KIND,
    JobSet,
    ReplicatedJob,
)
from gangq.api.jobset import Toleration as TolerationModel
from gangq.api.meta import Meta, parse_timestamp
from gangq.api.pods import FieldContext, exact_quantity
from gangq.api.quantity import to_canonical
from gangq.core.errors import SpecError
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
flavors were injected (``null`` when the field was absent); an eviction puts them back
(:mod:`gangq.integrations.podsets`)."""

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
        labels = Meta(obj).labels
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


def jobset_runtime_limit(js: JobSet, counts: Mapping[str, int]) -> float | None:
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
    "jobset_runtime_limit",
    "node_affinity",
    "parse_duration",
    "parse_min_member",
    "parse_min_resources",
    "parse_timestamp",
    "pods_per_job",
    "queue_name",
    "tolerations",
]
