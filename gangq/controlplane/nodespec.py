"""The short node-spec syntax of ``--nodes`` and the Node objects it describes, for both control
planes: the emulator's simulated nodes (:mod:`gangq.sandbox.runtime`) and the real control plane's
kwok nodes (:mod:`gangq.controlplane.launcher`).

Syntax (whitespace is ignored)::

    spec   := group ((";" | "+") group)*
    group  := [prefix "@"] [count "x"] "{" res ("," res)* "}" ["[" label ("," label)* "]"] ["(" taint ("," taint)* ")"]
    res    := resource-name ":" quantity          e.g. cpu:64, memory:512Gi, nvidia.com/gpu:8, pods:250
    label  := key "=" value                       e.g. gpu=a100, topology.kubernetes.io/zone=a
    taint  := key ["=" value] ":" effect          effect is NoSchedule | PreferNoSchedule | NoExecute

Examples::

    4x{cpu:64,memory:512Gi,nvidia.com/gpu:8}
    2x{cpu:64,nvidia.com/gpu:8}[gpu=a100,zone=a](nvidia.com/gpu=present:NoSchedule);4x{cpu:32,memory:128Gi}
    gpu@2x{nvidia.com/gpu:8} + cpu@3x{cpu:16}

Nodes are named ``<prefix>-<i>`` (prefix defaults to ``node``; ``i`` counts per prefix across groups). Quantities are
parsed with ``kubernetes.utils.parse_quantity`` and written back in Kubernetes' canonical form (``1.5`` -> ``1500m``,
``1000`` -> ``1k``, ``1024Mi`` -> ``1Gi``). ``pods`` defaults to 110 like the kubelet.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from decimal import ROUND_CEILING, Decimal
from typing import Any, cast

from kubernetes.utils import parse_quantity as _untyped_parse_quantity

parse_quantity = cast(Callable[[str], Decimal], _untyped_parse_quantity)

log = logging.getLogger(__name__)

DEFAULT_NODE_SPEC = "4x{cpu:64,memory:512Gi,nvidia.com/gpu:8}"
DEFAULT_MAX_PODS = 110
KUBELET_VERSION = "v1.31.0-sandbox"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_GROUP_RE = re.compile(
    r"^(?:(?P<prefix>[a-z0-9]([-a-z0-9]*[a-z0-9])?)@)?"
    r"(?:(?P<count>[0-9]+)x)?"
    r"\{(?P<res>[^{}]*)\}"
    r"(?:\[(?P<labels>[^\[\]]*)\])?"
    r"(?:\((?P<taints>[^()]*)\))?$"
)
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_QUALIFIED_NAME_RE = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME_PART}$")
_LABEL_VALUE_RE = re.compile(rf"^({_NAME_PART})?$")
_QUANTITY_RE = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


class NodeSpecError(ValueError):
    """A node spec that cannot be parsed; the message names the group and the offending token."""


def canonical_quantity(text: str) -> str:
    """Kubernetes' canonical string for a quantity (binary suffixes stay binary, decimal stay decimal)."""
    value = Decimal(parse_quantity(text))
    binary = text.strip().endswith(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))
    return format_quantity(value, binary=binary)


def format_quantity(value: Decimal | int, *, binary: bool = False) -> str:
    """Format a quantity canonically: the largest suffix that keeps the number an integer."""
    value = Decimal(value)
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value == value.to_integral_value():
        n = int(value)
        table = _BINARY if binary else _DECIMAL
        for suffix, mult in table:
            if n % mult == 0:
                return f"{sign}{n // mult}{suffix}"
        if binary:  # not a whole multiple of 1024: Kubernetes falls back to the decimal form
            for suffix, mult in _DECIMAL:
                if n % mult == 0:
                    return f"{sign}{n // mult}{suffix}"
        return f"{sign}{n}"
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{sign}{int(milli)}m"
    micro = value * 1_000_000
    if micro == micro.to_integral_value():
        return f"{sign}{int(micro)}u"
    nano = (value * 1_000_000_000).to_integral_value(rounding=ROUND_CEILING)
    return f"{sign}{int(nano)}n"


def _split(text: str, sep: str) -> list[str]:
    return [p.strip() for p in text.split(sep)] if text.strip() else []


def parse_node_spec(spec: str) -> list[dict[str, Any]]:
    """Parse a node spec into core/v1 Node objects (plain dicts, ready to be created in the Store)."""
    if not isinstance(spec, str) or not spec.strip():
        raise NodeSpecError("node spec is empty; expected e.g. " + DEFAULT_NODE_SPEC)
    compact = re.sub(r"\s+", "", spec)
    groups = re.split(r"[;+]", compact)
    nodes: list[dict[str, Any]] = []
    counters: dict[str, int] = {}
    for gi, group in enumerate(groups, start=1):
        where = f"node spec group {gi} {group!r}"
        if not group:
            raise NodeSpecError(f"node spec group {gi} is empty (stray ';' or '+' in {spec!r})")
        m = _GROUP_RE.match(group)
        if m is None:
            raise NodeSpecError(
                f"{where}: cannot parse; expected "
                "[prefix@][COUNTx]{{res:qty,...}}[key=value,...](key[=value]:Effect,...)"
            )
        count = int(m.group("count")) if m.group("count") is not None else 1
        if count < 1:
            raise NodeSpecError(f"{where}: node count must be at least 1, got {m.group('count')!r}")
        allocatable = _parse_resources(m.group("res"), where)
        labels = _parse_labels(m.group("labels") or "", where)
        taints = _parse_taints(m.group("taints") or "", where)
        prefix = m.group("prefix") or "node"
        for _ in range(count):
            index = counters.get(prefix, 0)
            counters[prefix] = index + 1
            nodes.append(make_node(f"{prefix}-{index}", allocatable, labels, taints, internal_ip=node_ip(len(nodes))))
    names = [n["metadata"]["name"] for n in nodes]
    if len(set(names)) != len(names):  # cannot happen with per-prefix counters, kept as a guard
        raise NodeSpecError(f"node spec {spec!r} yields duplicate node names")
    log.debug("parsed node spec %r into %d nodes", spec, len(nodes))
    return nodes


def _parse_resources(text: str, where: str) -> dict[str, str]:
    tokens = _split(text, ",")
    if not tokens:
        raise NodeSpecError(f"{where}: no resources between '{{' and '}}'")
    out: dict[str, str] = {}
    for tok in tokens:
        name, sep, qty = tok.rpartition(":")
        if not sep or not name:
            raise NodeSpecError(f"{where}: resource {tok!r} must be written name:quantity")
        if not _QUALIFIED_NAME_RE.match(name):
            raise NodeSpecError(f"{where}: resource name {name!r} is not a valid Kubernetes resource name")
        if name in out:
            raise NodeSpecError(f"{where}: resource {name!r} given twice")
        if not _QUANTITY_RE.match(qty):
            raise NodeSpecError(f"{where}: quantity {qty!r} of resource {name!r} is not a valid quantity")
        try:
            out[name] = canonical_quantity(qty)
        except (ValueError, ArithmeticError) as exc:
            raise NodeSpecError(f"{where}: quantity {qty!r} of resource {name!r} is not a valid quantity") from exc
    out.setdefault("pods", str(DEFAULT_MAX_PODS))
    return out


def _parse_labels(text: str, where: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for tok in _split(text, ","):
        key, sep, value = tok.partition("=")
        if not sep:
            raise NodeSpecError(f"{where}: label {tok!r} must be written key=value")
        if not _QUALIFIED_NAME_RE.match(key) or len(key.rpartition("/")[2]) > 63:
            raise NodeSpecError(f"{where}: label key {key!r} is not a valid label key")
        if not _LABEL_VALUE_RE.match(value) or len(value) > 63:
            raise NodeSpecError(f"{where}: label value {value!r} of {key!r} is not a valid label value")
        labels[key] = value
    return labels


def _parse_taints(text: str, where: str) -> list[dict[str, str]]:
    taints: list[dict[str, str]] = []
    for tok in _split(text, ","):
        kv, sep, effect = tok.rpartition(":")
        if not sep or not kv:
            raise NodeSpecError(f"{where}: taint {tok!r} must be written key[=value]:Effect")
        if effect not in TAINT_EFFECTS:
            raise NodeSpecError(
                f"{where}: taint {tok!r} has effect {effect!r}; expected one of {', '.join(TAINT_EFFECTS)}"
            )
        key, _, value = kv.partition("=")
        if not _QUALIFIED_NAME_RE.match(key):
            raise NodeSpecError(f"{where}: taint key {key!r} is not a valid key")
        if not _LABEL_VALUE_RE.match(value) or len(value) > 63:
            raise NodeSpecError(f"{where}: taint value {value!r} of {key!r} is not a valid value")
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        taints.append(taint)
    return taints


def node_ip(i: int) -> str:
    """The InternalIP of the i-th simulated node."""
    return f"10.0.{i // 250}.{i % 250 + 2}"


def make_node(name: str, allocatable: dict[str, str], labels: dict[str, str], taints: list[dict[str, str]],
              *, internal_ip: str | None = None) -> dict[str, Any]:
    """A Ready core/v1 Node object as a kubelet would register it (capacity == allocatable)."""
    node_labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": "sandbox",
    }
    node_labels.update(labels)
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]

    def cond(ctype: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {"type": ctype, "status": status, "reason": reason, "message": message}

    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels, "annotations": {"sandbox.gangq.io/simulated": "true"}},
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": dict(allocatable),
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory",
                     "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": ([{"type": "InternalIP", "address": internal_ip}] if internal_ip else [])
            + [{"type": "Hostname", "address": name}],
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "sandbox://1.0",
                "osImage": "gangq sandbox",
                "kernelVersion": "sandbox",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }
