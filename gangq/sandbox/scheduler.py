"""The sandbox's default scheduler: kube-scheduler's filters and scoring for one pod at a time, with no gang awareness.

Pure logic on plain dicts; :mod:`gangq.sandbox.cluster` wires it to the Store. Filters, in kube-scheduler's order (the
first failing filter is the node's reason, as in the real framework): NodeUnschedulable, TaintToleration (NoSchedule
and NoExecute taints; PreferNoSchedule is ignored), NodeAffinity (``nodeSelector`` and required node affinity), and
NodeResourcesFit (effective pod requests against allocatable minus the requests of the pods bound to the node and not
terminal; ``pods`` count). Scoring is NodeResourcesFit's ``LeastAllocated`` strategy (the kube-scheduler default) or
``MostAllocated``; ties go to the node whose name sorts first (natural order, ``node-2`` before ``node-10``) where
kube-scheduler picks at random.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from decimal import ROUND_CEILING, Decimal
from functools import lru_cache
from typing import Any, cast

from kubernetes.utils import parse_quantity as _untyped_parse_quantity

parse_quantity = cast(Callable[[str | int | float], Decimal], _untyped_parse_quantity)

log = logging.getLogger(__name__)

DEFAULT_SCHEDULER_NAME = "default-scheduler"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
# kube-scheduler scores a pod that requests no cpu/memory as if it asked for these (non-zero defaults)
_DEFAULT_MILLI_CPU = 100
_DEFAULT_MEMORY_MILLI = 200 * 1024 * 1024 * 1000

MSG_UNSCHEDULABLE = "node(s) were unschedulable"
MSG_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
MSG_TOO_MANY_PODS = "Too many pods"
MSG_GATED = "Scheduling is blocked due to non-empty scheduling gates"


class QuantityError(ValueError):
    """A resource quantity in a pod that cannot be parsed."""


@lru_cache(maxsize=4096)
def milli(quantity: str | int | float) -> int:
    """A Kubernetes quantity in thousandths, rounded up (kube-scheduler compares cpu in milli-units)."""
    try:
        value = Decimal(parse_quantity(quantity))
    except (ValueError, ArithmeticError) as exc:
        raise QuantityError(f"invalid quantity {quantity!r}") from exc
    return int((value * 1000).to_integral_value(rounding=ROUND_CEILING))


def _add(acc: dict[str, int], res: dict[str, int]) -> None:
    for k, v in res.items():
        acc[k] = acc.get(k, 0) + v


def _max_into(acc: dict[str, int], res: dict[str, int]) -> None:
    for k, v in res.items():
        if v > acc.get(k, 0):
            acc[k] = v


def _container_requests(container: dict[str, Any], where: str) -> dict[str, int]:
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    out: dict[str, int] = {}
    # the API server defaults requests to limits for resources that only have a limit
    for name, q in {**limits, **requests}.items():
        try:
            out[name] = milli(q)
        except QuantityError as exc:
            raise QuantityError(f"{where}: container {container.get('name')!r} resource {name!r}: {exc}") from exc
    return out


def pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """Effective requests (milli-units) = max(sum(containers) + sidecars, max(init container + earlier sidecars))
    + overhead, as kube-scheduler computes them."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    where = f"pod {meta.get('namespace', '')}/{meta.get('name', '')}"
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        _add(total, _container_requests(c, where))
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        req = _container_requests(c, where)
        if c.get("restartPolicy") == "Always":
            _add(sidecars, req)
        else:
            tmp = dict(req)
            _add(tmp, sidecars)
            _max_into(init_max, tmp)
    _add(total, sidecars)
    _max_into(total, init_max)
    overhead = spec.get("overhead") or {}
    if overhead:
        _add(total, {k: milli(v) for k, v in overhead.items()})
    return {k: v for k, v in total.items() if v > 0}


def is_terminal(pod: dict[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed")


def is_gated(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("schedulingGates"))


def responsible_for(pod: dict[str, Any], scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> bool:
    return ((pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER_NAME) == scheduler_name


def needs_scheduling(pod: dict[str, Any], scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> bool:
    """Unbound, not being deleted, not terminal, and ours."""
    spec = pod.get("spec") or {}
    return (
        not spec.get("nodeName")
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
        and not is_terminal(pod)
        and responsible_for(pod, scheduler_name)
    )


def tolerates(tolerations: Iterable[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        op = tol.get("operator") or "Equal"
        key = tol.get("key") or ""
        if op == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _expr_matches(expr: dict[str, Any], value: str | None) -> bool:
    op = expr.get("operator")
    values = expr.get("values") or []
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term_matches(term: dict[str, Any], labels: dict[str, str], node_name: str) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    for e in exprs:
        if not _expr_matches(e, labels.get(e.get("key", ""))):
            return False
    for f in fields:
        value = node_name if f.get("key") == "metadata.name" else None
        if not _expr_matches(f, value):
            return False
    return True


def node_affinity_matches(pod: dict[str, Any], labels: dict[str, str], node_name: str) -> bool:
    spec = pod.get("spec") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(_term_matches(t, labels, node_name) for t in terms)


def _natural_key(name: str) -> tuple[int | str, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


class NodeState:
    """The scheduler's cached view of one node: its allocatable and what bound, non-terminal pods request."""

    __slots__ = ("allocatable", "labels", "max_pods", "name", "pod_count", "requested", "sort_key", "taints",
                 "unschedulable")

    def __init__(self, node: dict[str, Any]) -> None:
        self.name: str = node["metadata"]["name"]
        self.sort_key = _natural_key(self.name)
        self.requested: dict[str, int] = {}
        self.pod_count = 0
        self.update(node)

    def update(self, node: dict[str, Any]) -> None:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        self.labels: dict[str, str] = dict(meta.get("labels") or {})
        taints = spec.get("taints") or []
        self.taints: list[dict[str, Any]] = [t for t in taints if t.get("effect") in ("NoSchedule", "NoExecute")]
        self.unschedulable = bool(spec.get("unschedulable"))
        alloc = status.get("allocatable") or status.get("capacity") or {}
        self.allocatable: dict[str, int] = {}
        for k, v in alloc.items():
            try:
                self.allocatable[k] = milli(v)
            except QuantityError:
                log.warning("node %s: ignoring allocatable %s=%r (not a quantity)", self.name, k, v)
        self.max_pods = self.allocatable.pop("pods", 110_000) // 1000

    def filter(self, pod: dict[str, Any], requests: dict[str, int]) -> list[str]:
        """Reasons this node cannot take the pod (empty list: it fits)."""
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        if self.unschedulable and not tolerates(tolerations, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}):
            return [MSG_UNSCHEDULABLE]
        for taint in self.taints:
            if not tolerates(tolerations, taint):
                return [f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"]
        if not node_affinity_matches(pod, self.labels, self.name):
            return [MSG_AFFINITY]
        reasons: list[str] = []
        if self.pod_count + 1 > self.max_pods:
            reasons.append(MSG_TOO_MANY_PODS)
        for r, want in requests.items():
            if self.allocatable.get(r, 0) - self.requested.get(r, 0) < want:
                reasons.append(f"Insufficient {r}")
        return reasons

    def score(self, requests: dict[str, int], strategy: str) -> float:
        resources = {"cpu", "memory"} | {r for r in requests if r in self.allocatable}
        total = 0.0
        n = 0
        for r in sorted(resources):
            cap = self.allocatable.get(r, 0)
            if cap <= 0:
                continue
            want = requests.get(r, 0)
            if want == 0 and r == "cpu":
                want = _DEFAULT_MILLI_CPU
            elif want == 0 and r == "memory":
                want = _DEFAULT_MEMORY_MILLI
            used = min(cap, self.requested.get(r, 0) + want)
            frac = (cap - used) / cap if strategy == LEAST_ALLOCATED else used / cap
            total += frac * 100
            n += 1
        return total / n if n else 0.0


class ScheduleResult:
    __slots__ = ("message", "node_name")

    def __init__(self, node_name: str | None, message: str) -> None:
        self.node_name = node_name
        self.message = message

    def __repr__(self) -> str:
        return f"ScheduleResult({self.node_name!r}, {self.message!r})"


def fit_error_message(num_nodes: int, reasons: dict[str, int]) -> str:
    """kube-scheduler's FitError text: '0/4 nodes are available: 2 Insufficient cpu, 4 Insufficient nvidia.com/gpu.'"""
    msg = f"0/{num_nodes} nodes are available"
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    if parts:
        return f"{msg}: {', '.join(parts)}."
    return f"{msg}."


class SchedulerState:
    """Node cache plus pod accounting (which pod's requests sit on which node). Feed it every node and pod change."""

    __slots__ = ("_assigned", "_fail_cache", "nodes", "strategy", "version")

    def __init__(self, strategy: str = LEAST_ALLOCATED) -> None:
        if strategy not in (LEAST_ALLOCATED, MOST_ALLOCATED):
            raise ValueError(f"scheduler scoring strategy {strategy!r}: expected {LEAST_ALLOCATED} or {MOST_ALLOCATED}")
        self.strategy = strategy
        self.nodes: dict[str, NodeState] = {}
        self._assigned: dict[str, tuple[str, dict[str, int]]] = {}  # pod uid -> (node, requests)
        # bumped on every change that can alter a scheduling decision; failures are cached per pod signature and
        # version, so a flush of many identical unschedulable pods costs one evaluation
        self.version = 0
        self._fail_cache: dict[str, tuple[int, str]] = {}

    # --- nodes
    def upsert_node(self, node: dict[str, Any]) -> None:
        self.version += 1
        name = node["metadata"]["name"]
        state = self.nodes.get(name)
        if state is None:
            state = NodeState(node)
            self.nodes[name] = state
            for _uid, (node_name, req) in self._assigned.items():  # pods that were bound before the node showed up
                if node_name == name:
                    _add(state.requested, req)
                    state.pod_count += 1
        else:
            state.update(node)

    def remove_node(self, name: str) -> None:
        self.version += 1
        self.nodes.pop(name, None)

    # --- pods
    def update_pod(self, pod: dict[str, Any]) -> bool:
        """Account a pod change; True when resources were released (unschedulable pods should be retried)."""
        uid = (pod.get("metadata") or {}).get("uid") or _pod_key(pod)
        node_name: str = (pod.get("spec") or {}).get("nodeName") or ""
        holds = bool(node_name) and not is_terminal(pod)
        if uid in self._assigned:
            if holds:
                return False
            self._release(uid)
            return True
        if holds:
            try:
                req = pod_requests(pod)
            except QuantityError as exc:
                log.warning("%s; accounting it as requesting nothing", exc)
                req = {}
            self._assigned[uid] = (node_name, req)
            self.version += 1
            state = self.nodes.get(node_name)
            if state is not None:
                _add(state.requested, req)
                state.pod_count += 1
        return False

    def remove_pod(self, pod: dict[str, Any]) -> bool:
        uid = (pod.get("metadata") or {}).get("uid") or _pod_key(pod)
        if uid in self._assigned:
            self._release(uid)
            return True
        return False

    def _release(self, uid: str) -> None:
        self.version += 1
        node_name, req = self._assigned.pop(uid)
        state = self.nodes.get(node_name)
        if state is None:
            return
        for k, v in req.items():
            state.requested[k] = state.requested.get(k, 0) - v
        state.pod_count -= 1

    # --- scheduling
    def schedule(self, pod: dict[str, Any]) -> ScheduleResult:
        """Pick a node for the pod (filters, then score; ties by natural node-name order). Does not assume it."""
        try:
            requests = pod_requests(pod)
        except QuantityError as exc:
            return ScheduleResult(None, str(exc))
        spec = pod.get("spec") or {}
        sig = repr((sorted(requests.items()), spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")))
        cached = self._fail_cache.get(sig)
        if cached is not None and cached[0] == self.version:
            return ScheduleResult(None, cached[1])
        reasons: dict[str, int] = {}
        best: NodeState | None = None
        best_score = -1.0
        for state in self.nodes.values():
            failed = state.filter(pod, requests)
            if failed:
                for r in failed:
                    reasons[r] = reasons.get(r, 0) + 1
                continue
            score = state.score(requests, self.strategy)
            if best is None or score > best_score or (score == best_score and state.sort_key < best.sort_key):
                best, best_score = state, score
        if best is None:
            message = fit_error_message(len(self.nodes), reasons)
            if len(self._fail_cache) > 4096:
                self._fail_cache.clear()
            self._fail_cache[sig] = (self.version, message)
            return ScheduleResult(None, message)
        return ScheduleResult(best.name, "")


def _pod_key(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
