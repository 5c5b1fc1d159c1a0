"""Workload traces: the native format (YAML or JSON Lines) and CSV with a column mapping.

A trace is a list of :class:`TraceJob` — one gang each: when it is submitted, how long it runs once
all its pods run, which LocalQueue it goes to, its priority class and its pod sets. Bad input raises
:class:`TraceError` naming the file, the line and the field.

Native format (``docs/simulate.md``; example in ``examples/traces/``)::

    nodes:                                   # optional: the cluster (or pass --cluster)
      - {name: gpu, count: 4, allocatable: {cpu: 64, memory: 512Gi, nvidia.com/gpu: 8}, labels: {pool: a100}}
    namespaces: {team-a: {team: a}}          # optional: namespace labels (for namespaceSelector)
    workloads:
      - name: train-1
        namespace: team-a                    # default: "default"
        queue: team-a                        # LocalQueue name in the namespace
        submit: 0                            # seconds from the start of the trace
        duration: 3600                       # run time once every pod runs
        priorityClass: high                  # a WorkloadPriorityClass of the queue config
        podSets: [{name: worker, count: 4, requests: {cpu: 8, nvidia.com/gpu: 8}}]

JSON Lines: one workload object per line, same fields.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from gangq.api.quantity import QuantityError, parse_quantity
from gangq.core.model import NodeSpec, TopologySpec
from gangq.core.selectors import Taint
from gangq.core.units import format_amount
from gangq.sim.topology import parse_topology

GPU = "nvidia.com/gpu"


class TraceError(ValueError):
    """Bad trace input: ``source``, ``line`` (1-based, 0 if unknown), the field and what is wrong."""

    def __init__(self, source: str, line: int, field: str, message: str) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.message = message
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {field}: {message}")


class TracePodSet:
    """``count`` identical pods, each requesting ``requests`` (canonical integers)."""

    __slots__ = ("count", "name", "node_selector", "requests")

    def __init__(
        self, name: str, count: int, requests: Mapping[str, int], node_selector: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.count = count
        self.requests: dict[str, int] = {k: v for k, v in requests.items() if v}
        self.node_selector: dict[str, str] = dict(node_selector or {})


class TraceJob:
    """One gang of a trace (immutable input; the simulator keeps run state elsewhere)."""

    __slots__ = (
        "cls",
        "duration",
        "fails",
        "line",
        "local_queue",
        "min_member",
        "name",
        "namespace",
        "pod_sets",
        "priority_class",
        "runtime_limit",
        "submit",
    )

    def __init__(
        self,
        name: str,
        submit: float,
        duration: float,
        local_queue: str,
        pod_sets: Iterable[TracePodSet],
        namespace: str = "default",
        priority_class: str = "",
        cls: str = "",
        min_member: int | None = None,
        runtime_limit: float | None = None,
        fails: bool = False,
        line: int = 0,
    ) -> None:
        self.name = name
        self.submit = submit
        self.duration = duration
        self.namespace = namespace
        self.local_queue = local_queue
        self.pod_sets = tuple(pod_sets)
        self.priority_class = priority_class
        self.cls = cls or priority_class or "default"
        self.min_member = min_member
        self.runtime_limit = runtime_limit
        self.fails = fails
        self.line = line

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def total_pods(self) -> int:
        return sum(ps.count for ps in self.pod_sets)

    def demand(self) -> dict[str, int]:
        """Total requests of the gang per resource."""
        out: dict[str, int] = {}
        for ps in self.pod_sets:
            for r, v in ps.requests.items():
                out[r] = out.get(r, 0) + v * ps.count
        return out


# ----------------------------------------------------------------------------------------------
# Native format
# ----------------------------------------------------------------------------------------------

_LINE = "__line__"
_LINES = "__lines__"


class _LineLoader(yaml.SafeLoader):
    """A safe loader that records each mapping's 1-based start line under ``__line__``."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[str, Any]:
    mapping: dict[str, Any] = {str(k): v for k, v in loader.construct_mapping(node, deep=True).items()}
    mapping[_LINE] = node.start_mark.line + 1
    mapping[_LINES] = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

_WORKLOAD_FIELDS = {
    "name",
    "namespace",
    "queue",
    "submit",
    "duration",
    "priorityClass",
    "class",
    "podSets",
    "minMember",
    "runtimeLimit",
    "fails",
    _LINE,
    _LINES,
}
_POD_SET_FIELDS = {"name", "count", "requests", "nodeSelector", _LINE, _LINES}
_NODE_FIELDS = {"name", "count", "allocatable", "labels", "taints", _LINE, _LINES}


class NativeTrace:
    """A parsed native trace: workloads and (optionally) the nodes of the cluster."""

    def __init__(
        self, jobs: list[TraceJob], nodes: list[NodeSpec], namespaces: dict[str, dict[str, str]] | None = None
    ) -> None:
        self.jobs = jobs
        self.nodes = nodes
        self.namespaces = namespaces or {}


def load_native(path: str | Path) -> NativeTrace:
    """Read a native trace (``.yaml``/``.yml`` or ``.jsonl``/``.json``)."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise TraceError(source, 0, "", f"cannot read: {err.strerror}") from err
    if path.suffix in (".jsonl", ".ndjson") or (path.suffix == ".json" and not text.lstrip().startswith("{\n")):
        return _load_jsonl(source, text)
    try:
        doc = yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise TraceError(source, mark.line + 1 if mark else 0, "", f"invalid YAML: {err}") from err
    if isinstance(doc, list):
        doc = {"workloads": doc, _LINE: 1}
    if not isinstance(doc, dict):
        raise TraceError(source, 1, "", "must be a mapping with 'workloads' (and optionally 'nodes') or a list")
    unknown = set(doc) - {"workloads", "nodes", "namespaces", _LINE, _LINES}
    if unknown:
        raise TraceError(
            source, 1, sorted(unknown)[0], "unknown top-level field (expected workloads, nodes, namespaces)"
        )
    workloads = doc.get("workloads") or []
    if not isinstance(workloads, list):
        raise TraceError(source, 1, "workloads", "must be a list")
    jobs = [_workload(source, f"workloads[{i}]", w, 0) for i, w in enumerate(workloads)]
    nodes_doc = doc.get("nodes") or []
    nodes = parse_nodes(source, nodes_doc)
    namespaces_doc = doc.get("namespaces") or {}
    if not isinstance(namespaces_doc, dict):
        raise TraceError(source, _line(namespaces_doc, 1), "namespaces", "must map namespace names to labels")
    namespaces = {
        str(ns): _str_map(source, _line(labels, 1), f"namespaces.{ns}", labels)
        for ns, labels in namespaces_doc.items()
        if ns not in (_LINE, _LINES)
    }
    _check_unique(source, jobs)
    return NativeTrace(jobs, nodes, namespaces)


def _load_jsonl(source: str, text: str) -> NativeTrace:
    jobs = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as err:
            raise TraceError(source, lineno, "", f"invalid JSON: {err.msg}") from err
        jobs.append(_workload(source, "workload", obj, lineno))
    _check_unique(source, jobs)
    return NativeTrace(jobs, [])


def _check_unique(source: str, jobs: list[TraceJob]) -> None:
    seen: dict[str, int] = {}
    for job in jobs:
        if job.key in seen:
            raise TraceError(
                source, job.line, "name", f"workload {job.key!r} is defined twice (first on line {seen[job.key]})"
            )
        seen[job.key] = job.line


def _line(obj: Any, default: int) -> int:
    return int(obj.get(_LINE, default)) if isinstance(obj, dict) else default


def _fline(obj: Any, key: str, default: int) -> int:
    """The line of ``key`` in a mapping read from YAML (``default`` for JSON or unknown)."""
    if isinstance(obj, dict):
        lines = obj.get(_LINES)
        if isinstance(lines, dict) and key in lines:
            return int(lines[key])
    return default


def _number(source: str, line: int, field: str, value: Any, minimum: float = 0.0, allow_equal: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceError(source, line, field, f"must be a number of seconds, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < minimum or (not allow_equal and v == minimum):
        op = ">=" if allow_equal else ">"
        raise TraceError(source, line, field, f"must be {op} {minimum:g}, got {value!r}")
    return v


def _requests(source: str, line: int, field: str, value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise TraceError(source, line, field, "must be a mapping of resource to quantity")
    out = {}
    for resource, q in value.items():
        if resource in (_LINE, _LINES):
            continue
        try:
            amount = parse_quantity(q, str(resource))
        except QuantityError as err:
            raise TraceError(source, line, f"{field}.{resource}", str(err)) from err
        if amount < 0:
            raise TraceError(source, line, f"{field}.{resource}", "must not be negative")
        out[str(resource)] = amount
    return out


def _str_map(source: str, line: int, field: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TraceError(source, line, field, "must be a mapping of strings")
    return {str(k): str(v) for k, v in value.items() if k not in (_LINE, _LINES)}


def _workload(source: str, base: str, obj: Any, line: int) -> TraceJob:
    line = _line(obj, line)
    if not isinstance(obj, dict):
        raise TraceError(source, line, base, "must be a mapping")
    unknown = set(obj) - _WORKLOAD_FIELDS
    if unknown:
        first = sorted(unknown)[0]
        raise TraceError(source, _fline(obj, first, line), f"{base}.{first}", "unknown field")
    for required in ("name", "queue", "submit", "duration", "podSets"):
        if required not in obj:
            raise TraceError(source, line, f"{base}.{required}", "is required")
    name = str(obj["name"])
    submit = _number(source, _fline(obj, "submit", line), f"{base}.submit", obj["submit"])
    duration = _number(source, _fline(obj, "duration", line), f"{base}.duration", obj["duration"])
    pod_sets_doc = obj["podSets"]
    if not isinstance(pod_sets_doc, list) or not pod_sets_doc:
        raise TraceError(source, _fline(obj, "podSets", line), f"{base}.podSets", "must be a non-empty list")
    pod_sets = []
    for i, ps in enumerate(pod_sets_doc):
        pline = _line(ps, line)
        pbase = f"{base}.podSets[{i}]"
        if not isinstance(ps, dict):
            raise TraceError(source, pline, pbase, "must be a mapping")
        unknown = set(ps) - _POD_SET_FIELDS
        if unknown:
            first = sorted(unknown)[0]
            raise TraceError(source, _fline(ps, first, pline), f"{pbase}.{first}", "unknown field")
        count = ps.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TraceError(
                source, _fline(ps, "count", pline), f"{pbase}.count", f"must be a positive integer, got {count!r}"
            )
        if "requests" not in ps:
            raise TraceError(source, pline, f"{pbase}.requests", "is required")
        pod_sets.append(
            TracePodSet(
                str(ps.get("name", f"ps{i}")),
                count,
                _requests(source, _fline(ps, "requests", pline), f"{pbase}.requests", ps["requests"]),
                _str_map(source, _fline(ps, "nodeSelector", pline), f"{pbase}.nodeSelector", ps.get("nodeSelector")),
            )
        )
    total = sum(ps.count for ps in pod_sets)
    min_member = obj.get("minMember")
    if min_member is not None and (
        isinstance(min_member, bool) or not isinstance(min_member, int) or not 1 <= min_member <= total
    ):
        raise TraceError(
            source,
            _fline(obj, "minMember", line),
            f"{base}.minMember",
            f"must be an integer in 1..{total}, got {min_member!r}",
        )
    runtime_limit = obj.get("runtimeLimit")
    if runtime_limit is not None:
        runtime_limit = _number(
            source, _fline(obj, "runtimeLimit", line), f"{base}.runtimeLimit", runtime_limit, 0.0, allow_equal=False
        )
    fails = obj.get("fails", False)
    if not isinstance(fails, bool):
        raise TraceError(source, _fline(obj, "fails", line), f"{base}.fails", "must be true or false")
    return TraceJob(
        name,
        submit,
        duration,
        str(obj["queue"]),
        pod_sets,
        namespace=str(obj.get("namespace", "default")),
        priority_class=str(obj.get("priorityClass", "") or ""),
        cls=str(obj.get("class", "") or ""),
        min_member=min_member,
        runtime_limit=runtime_limit,
        fails=fails,
        line=line,
    )


def parse_nodes(source: str, nodes_doc: Any) -> list[NodeSpec]:
    """Nodes of a cluster description: ``[{name, count, allocatable, labels, taints}]``; ``count``
    expands into ``name-0 .. name-(count-1)``."""
    if not isinstance(nodes_doc, list):
        raise TraceError(source, _line(nodes_doc, 1), "nodes", "must be a list")
    out: list[NodeSpec] = []
    for i, node in enumerate(nodes_doc):
        line = _line(node, 0)
        base = f"nodes[{i}]"
        if not isinstance(node, dict):
            raise TraceError(source, line, base, "must be a mapping")
        unknown = set(node) - _NODE_FIELDS
        if unknown:
            raise TraceError(source, line, f"{base}.{sorted(unknown)[0]}", "unknown field")
        if "name" not in node or "allocatable" not in node:
            raise TraceError(source, line, f"{base}.{'name' if 'name' not in node else 'allocatable'}", "is required")
        count = node.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TraceError(source, line, f"{base}.count", f"must be a positive integer, got {count!r}")
        allocatable = _requests(source, line, f"{base}.allocatable", node["allocatable"])
        labels = _str_map(source, line, f"{base}.labels", node.get("labels"))
        taints = []
        for ti, t in enumerate(node.get("taints") or []):
            if not isinstance(t, dict) or "key" not in t or t.get("effect") not in ("NoSchedule", "NoExecute"):
                raise TraceError(source, line, f"{base}.taints[{ti}]", "needs key and effect NoSchedule|NoExecute")
            taints.append(Taint(str(t["key"]), str(t.get("value", "")), t["effect"]))
        name = str(node["name"])
        for k in range(count):
            out.append(NodeSpec(name if count == 1 else f"{name}-{k}", allocatable, labels, taints))
    return out


def load_cluster(path: str | Path) -> list[NodeSpec]:
    """Nodes from a YAML file holding ``nodes: [...]`` (or the list itself)."""
    return load_cluster_file(path)[0]


def load_cluster_file(path: str | Path) -> tuple[list[NodeSpec], TopologySpec | None]:
    """Nodes and the optional Topology of a cluster file: ``{nodes: [...], topology: [LABEL, ...]}``
    (or ``topology: {name, levels}``; the nodes list alone has no topology)."""
    source = str(path)
    try:
        doc = yaml.load(Path(path).read_text(), Loader=_LineLoader)
    except OSError as err:
        raise TraceError(source, 0, "", f"cannot read: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise TraceError(source, 0, "", f"invalid YAML: {err}") from err
    topology: TopologySpec | None = None
    if isinstance(doc, dict):
        if doc.get("topology") is not None:
            try:
                topology = parse_topology(doc["topology"])
            except ValueError as err:
                line = _line(doc["topology"], _fline(doc, "topology", 0))
                raise TraceError(source, line, "topology", str(err)) from err
        doc = doc.get("nodes")
    return parse_nodes(source, doc), topology


def _quantity_text(resource: str, amount: int) -> str | int:
    text = format_amount(resource, amount)
    return int(text) if text.isdigit() else text


def dump_native(jobs: Iterable[TraceJob]) -> str:
    """Write jobs in the native YAML format (inverse of :func:`load_native` for workloads)."""
    out = []
    for j in jobs:
        w: dict[str, Any] = {
            "name": j.name,
            "namespace": j.namespace,
            "queue": j.local_queue,
            "submit": j.submit,
            "duration": j.duration,
            "podSets": [
                {
                    "name": ps.name,
                    "count": ps.count,
                    "requests": {r: _quantity_text(r, v) for r, v in ps.requests.items()},
                }
                | ({"nodeSelector": ps.node_selector} if ps.node_selector else {})
                for ps in j.pod_sets
            ],
        }
        if j.priority_class:
            w["priorityClass"] = j.priority_class
        if j.cls and j.cls != (j.priority_class or "default"):
            w["class"] = j.cls
        if j.min_member is not None:
            w["minMember"] = j.min_member
        if j.runtime_limit is not None:
            w["runtimeLimit"] = j.runtime_limit
        out.append(w)
    return yaml.safe_dump({"workloads": out}, sort_keys=False)


# ----------------------------------------------------------------------------------------------
# CSV with a column mapping
# ----------------------------------------------------------------------------------------------

CSV_FIELDS = {
    "submit": "submission time: seconds, or a timestamp parsed with time_format",
    "duration": "run time in seconds",
    "queue": "LocalQueue name",
    "namespace": "namespace (default: default, or the queue name with namespace_from_queue)",
    "name": "workload name (default: row number)",
    "gpus": "total GPUs of the gang (split into pods of gpus_per_pod)",
    "pods": "number of pods",
    "cpu": "cpu per pod",
    "memory": "memory per pod",
    "priority_class": "WorkloadPriorityClass name",
    "class": "workload class for the report",
}


class ColumnMapping:
    """Which CSV column holds which field (see :data:`CSV_FIELDS`), plus how to read them.

    ``gpus`` (total GPUs of the gang) becomes ``ceil(gpus / gpus_per_pod)`` pods: one pod of ``gpus``
    GPUs when ``gpus <= gpus_per_pod``, else pods of ``gpus_per_pod``. ``pods`` with ``cpu``/``memory``
    gives pods of those requests. ``defaults`` fills fields that have no column.
    """

    def __init__(
        self,
        columns: Mapping[str, str],
        time_format: str | None = None,
        gpus_per_pod: int = 8,
        defaults: Mapping[str, str] | None = None,
        namespace_from_queue: bool = False,
    ) -> None:
        unknown = set(columns) - set(CSV_FIELDS)
        if unknown:
            raise TraceError("column mapping", 0, sorted(unknown)[0], f"unknown field (known: {', '.join(CSV_FIELDS)})")
        self.columns = dict(columns)
        self.time_format = time_format
        self.gpus_per_pod = gpus_per_pod
        self.defaults = dict(defaults or {})
        self.namespace_from_queue = namespace_from_queue
        for required in ("submit", "duration"):
            if required not in self.columns:
                raise TraceError("column mapping", 0, required, "must be mapped to a column")
        if "queue" not in self.columns and "queue" not in self.defaults:
            raise TraceError(
                "column mapping", 0, "queue", "must be mapped to a column or given a default (--csv-default queue=NAME)"
            )

    @classmethod
    def parse(cls, text: str, defaults: str | Mapping[str, str] | None = None, **kwargs: Any) -> ColumnMapping:
        """``field=column,field=column`` (e.g. ``submit=timestamp,duration=duration,gpus=num_gpus``);
        ``defaults``, in the same form, gives values to fields that no column holds (e.g.
        ``queue=team-a``: most public traces have no queue column)."""
        columns = _pairs(text, "column mapping", "field=column")
        if isinstance(defaults, Mapping):
            values = dict(defaults)
        else:
            values = _pairs(defaults or "", "--csv-default", "field=value")
        unknown = set(values) - set(CSV_FIELDS)
        if unknown:
            raise TraceError("--csv-default", 0, sorted(unknown)[0], f"unknown field (known: {', '.join(CSV_FIELDS)})")
        return cls(columns, defaults=values, **kwargs)


def _pairs(text: str, where: str, form: str) -> dict[str, str]:
    """``a=b,c=d`` as a dict; ``where`` and ``form`` name the option in errors."""
    out = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise TraceError(where, 0, part.strip(), f"expected {form}")
        out[key.strip()] = value.strip()
    return out


def load_csv(
    path: str | Path,
    mapping: ColumnMapping,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[TraceJob]:
    """Read a CSV trace. With ``time_format``, submit times are timestamps; rows outside
    ``[start, end)`` are skipped and times are seconds since ``start`` (or the earliest row).
    ``time_format`` is a ``strptime`` format or ``iso`` (``YYYY-MM-DD HH:MM:SS``, fastest)."""
    source = str(path)
    try:
        handle = Path(path).open(newline="")  # noqa: SIM115 - closed by the with-block below
    except OSError as err:
        raise TraceError(source, 0, "", f"cannot read: {err.strerror}") from err
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise TraceError(source, 1, "", "empty file (expected a header row)")
        index = {name.strip(): i for i, name in enumerate(header)}
        cols: dict[str, int] = {}
        for field, column in mapping.columns.items():
            if column not in index:
                raise TraceError(source, 1, column, f"column for {field!r} not in header {list(index)}")
            cols[field] = index[column]
        rows = list(_csv_rows(source, reader, cols, mapping))
    if mapping.time_format:
        origin = naive_seconds(start) if start else min((r[0] for r in rows), default=0.0)
        lo = naive_seconds(start) if start else -math.inf
        hi = naive_seconds(end) if end else math.inf
        rows = [(t - origin, *rest) for t, *rest in rows if lo <= t < hi]  # type: ignore[misc]
    return [_csv_job(source, mapping, *r) for r in rows]


_EPOCH = datetime(1970, 1, 1)


def naive_seconds(dt: datetime) -> float:
    """Seconds since 1970-01-01 of a wall-clock timestamp, without any time-zone conversion."""
    return (dt.replace(tzinfo=None) - _EPOCH).total_seconds()


def _time_parser(fmt: str | None) -> Callable[[str], float]:
    if not fmt:
        return float
    if fmt == "iso":
        return lambda raw: (datetime.fromisoformat(raw) - _EPOCH).total_seconds()
    return lambda raw: (datetime.strptime(raw, fmt) - _EPOCH).total_seconds()


def _csv_rows(
    source: str, reader: Any, cols: dict[str, int], mapping: ColumnMapping
) -> Iterable[tuple[float, float, dict[str, str], int]]:
    to_seconds = _time_parser(mapping.time_format)
    submit_i = cols["submit"]
    duration_i = cols["duration"]
    extra = [(f, i) for f, i in cols.items() if f not in ("submit", "duration")]
    for lineno, row in enumerate(reader, 2):
        if not row:
            continue
        try:
            raw = row[submit_i]
            submit = to_seconds(raw)
        except (ValueError, IndexError) as err:
            raise TraceError(source, lineno, mapping.columns["submit"], f"bad submission time: {err}") from err
        try:
            duration = float(row[duration_i])
        except (ValueError, IndexError) as err:
            raise TraceError(source, lineno, mapping.columns["duration"], f"bad duration: {err}") from err
        if not math.isfinite(duration) or duration < 0:
            raise TraceError(source, lineno, mapping.columns["duration"], f"must be >= 0, got {row[duration_i]!r}")
        try:
            fields = {f: row[i].strip() for f, i in extra}
        except IndexError as err:
            raise TraceError(source, lineno, "", f"row has {len(row)} columns, header has more") from err
        yield submit, duration, fields, lineno


def _csv_int(source: str, mapping: ColumnMapping, fields: dict[str, str], field: str, lineno: int, default: str) -> int:
    raw = fields.get(field, mapping.defaults.get(field, default))
    try:
        value = int(float(raw))
    except ValueError as err:
        raise TraceError(source, lineno, mapping.columns.get(field, field), f"not a number: {raw!r}") from err
    if value < 0:
        raise TraceError(source, lineno, mapping.columns.get(field, field), f"must not be negative: {raw!r}")
    return value


def _csv_job(
    source: str, mapping: ColumnMapping, submit: float, duration: float, fields: dict[str, str], lineno: int
) -> TraceJob:
    d = mapping.defaults
    queue = fields.get("queue") or d.get("queue", "")
    namespace = fields.get("namespace") or d.get("namespace") or (queue if mapping.namespace_from_queue else "default")
    name = fields.get("name") or f"row-{lineno}"
    requests: dict[str, int] = {}
    if "gpus" in fields or "gpus" in d:
        gpus = _csv_int(source, mapping, fields, "gpus", lineno, "0")
        if gpus == 0:
            raise TraceError(source, lineno, mapping.columns.get("gpus", "gpus"), "a gang needs at least one GPU")
        per = mapping.gpus_per_pod
        pods = 1 if gpus <= per else math.ceil(gpus / per)
        requests[GPU] = gpus if gpus <= per else per
    else:
        pods = _csv_int(source, mapping, fields, "pods", lineno, "1")
        if pods < 1:
            raise TraceError(source, lineno, mapping.columns.get("pods", "pods"), "must be at least 1")
    for resource, field in (("cpu", "cpu"), ("memory", "memory")):
        raw = fields.get(field) or d.get(field)
        if raw:
            try:
                requests[resource] = parse_quantity(raw, resource)
            except QuantityError as err:
                raise TraceError(source, lineno, mapping.columns.get(field, field), str(err)) from err
    if not requests:
        raise TraceError(source, lineno, "", "row requests nothing (map gpus, cpu or memory)")
    priority_class = fields.get("priority_class") or d.get("priority_class", "")
    cls = fields.get("class") or d.get("class", "")
    return TraceJob(
        name,
        submit,
        duration,
        queue,
        [TracePodSet("main", pods, requests)],
        namespace=namespace,
        priority_class=priority_class,
        cls=cls,
        line=lineno,
    )
