"""Server-side Tables (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``) for ``kubectl get``.

``printer_columns_table`` renders a ``meta.k8s.io/v1`` Table from a CRD's ``additionalPrinterColumns``;
``builtin_table`` renders kubectl's default columns of built-in kinds (Pod, Job, Node, Namespace...);
``table_for`` picks one. Everything is pure: inputs are never mutated.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from gangq.sandbox.jsonpath import jsonpath_error, jsonpath_first
from gangq.sandbox.jsonvalues import is_int
from gangq.sandbox.patching import copy_json, copy_object

log = logging.getLogger(__name__)

__all__ = ["builtin_table", "human_duration", "printer_columns_table", "table_for"]

_NAME_DESCRIPTION: Final = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources may "
    "allow a client to request the generation of an appropriate name automatically. Name is primarily intended "
    "for creation idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DESCRIPTION: Final = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
    "guaranteed to be set in happens-before order across separate operations. Clients may not set this value. "
    "It is represented in RFC3339 form and is in UTC."
)


def _parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """A duration the way kubectl prints ages (``45s``, ``2m5s``, ``3h``, ``4d2h``, ``2y30d``)."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        sec = s % 60
        return f"{minutes}m{sec}s" if sec else f"{minutes}m"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h{m}m" if m else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d{h}h" if h else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        d = (hours // 24) % 365
        return f"{hours // 24 // 365}y{d}d" if d else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _age(timestamp: Any, now: float) -> str:
    t = _parse_time(timestamp)
    if t is None:
        return "<unknown>"
    return human_duration(now - t)


def _column(
    name: str, type_: str = "string", description: str = "", priority: int = 0, fmt: str = ""
) -> dict[str, Any]:
    return {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}


_NAME_COLUMN: Final = _column("Name", "string", _NAME_DESCRIPTION, 0, "name")
_AGE_COLUMN: Final = _column("Age", "date", _AGE_DESCRIPTION)


def _row_object(obj: Mapping[str, Any], include_object: str) -> dict[str, Any] | None:
    if include_object == "Object":
        return copy_object(obj)
    if include_object == "None":
        return None
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": copy_json(obj.get("metadata") or {}),
    }


def _table(
    columns: list[dict[str, Any]],
    rows: list[tuple[list[Any], Mapping[str, Any]]],
    include_object: str,
    resource_version: str | None,
    continue_token: str | None,
) -> dict[str, Any]:
    if include_object not in ("None", "Metadata", "Object"):
        raise ValueError(f"includeObject must be None, Metadata or Object, got {include_object!r}")
    meta: dict[str, Any] = {}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    if continue_token:
        meta["continue"] = continue_token
    out_rows: list[dict[str, Any]] = []
    for cells, obj in rows:
        row: dict[str, Any] = {"cells": cells}
        ro = _row_object(obj, include_object)
        if ro is not None:
            row["object"] = ro
        out_rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns,
        "rows": out_rows,
    }


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _cell(value: Any, type_: str, now: float) -> Any:
    """A JSONPath result as a Table cell of the column's type (None prints as ``<none>``)."""
    if type_ == "date":
        if not isinstance(value, str):
            return None
        t = _parse_time(value)
        return "<invalid>" if t is None else human_duration(now - t)
    if type_ == "integer":
        if is_int(value):
            return int(value)
        return None
    if type_ == "number":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        return None
    if type_ == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def printer_columns_table(
    objs: list[dict[str, Any]],
    columns: list[dict[str, Any]] | None,
    kind: str,
    *,
    include_object: str = "Metadata",
    now: float | None = None,
    resource_version: str | None = None,
    continue_token: str | None = None,
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table for custom resources of ``kind`` from ``additionalPrinterColumns``.

    ``Name`` is always the first column; with no printer columns the table is ``Name``, ``Age``.
    ``include_object``: ``Metadata`` (rows carry PartialObjectMetadata, kubectl's default), ``Object``
    (full objects) or ``None``.
    """
    now = time.time() if now is None else now
    cols = [dict(_NAME_COLUMN)]
    paths: list[tuple[str | None, str]] = []
    if not columns:
        cols.append(dict(_AGE_COLUMN))
        paths.append((".metadata.creationTimestamp", "date"))
    else:
        for col in columns:
            name = col.get("name")
            path = col.get("jsonPath") or col.get("JSONPath")
            if not isinstance(name, str) or not name:
                log.warning("%s: additionalPrinterColumns entry without a name skipped: %r", kind, col)
                continue
            type_ = col.get("type") or "string"
            cols.append(
                _column(
                    name, type_, col.get("description") or "", int(col.get("priority") or 0), col.get("format") or ""
                )
            )
            problem = jsonpath_error(path) if isinstance(path, str) else "jsonPath must be a string"
            if problem is not None:
                log.warning(
                    "%s: printer column %r has an unusable jsonPath (%s); its cells are empty", kind, name, problem
                )
                paths.append((None, type_))
            else:
                paths.append((path, type_))
    rows: list[tuple[list[Any], Mapping[str, Any]]] = []
    for obj in objs:
        cells: list[Any] = [_meta(obj).get("name", "")]
        for path, type_ in paths:
            if path is None:
                cells.append(None)
                continue
            found, value = jsonpath_first(obj, path)
            cells.append(_cell(value, type_, now) if found and value is not None else None)
        rows.append((cells, obj))
    return _table(cols, rows, include_object, resource_version, continue_token)


# ---- built-in kinds -------------------------------------------------------------------------------


def _pod_status(pod: Mapping[str, Any]) -> tuple[str, int, int, int]:
    """(STATUS, ready containers, total containers, restarts) as ``kubectl get pods`` computes them."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    containers = spec.get("containers") or []
    total = len(containers)
    reason = status.get("reason") or status.get("phase") or ""
    restarts = 0
    ready = 0
    initializing = False
    init_specs = spec.get("initContainers") or []
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        restarts += int(cs.get("restartCount") or 0)
        state = cs.get("state") or {}
        term = state.get("terminated")
        waiting = state.get("waiting")
        if term is not None and term.get("exitCode", 0) == 0:
            continue
        initializing = True
        if term is not None:
            if term.get("reason"):
                reason = "Init:" + term["reason"]
            elif term.get("signal"):
                reason = f"Init:Signal:{term['signal']}"
            else:
                reason = f"Init:ExitCode:{term.get('exitCode', 0)}"
        elif waiting is not None and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        break
    if not initializing:
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount") or 0)
            state = cs.get("state") or {}
            waiting = state.get("waiting")
            term = state.get("terminated")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif term is not None and term.get("reason"):
                reason = term["reason"]
            elif term is not None:
                reason = f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode', 0)}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            ready_cond = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
            )
            reason = "Running" if ready_cond else "NotReady"
    else:
        for cs in status.get("containerStatuses") or []:
            restarts += int(cs.get("restartCount") or 0)
    meta = _meta(pod)
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason, ready, total, restarts


def _pod_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    cols = [
        dict(_NAME_COLUMN),
        _column("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
        _column("Status", description="The aggregate status of the containers in this pod."),
        _column("Restarts", description="The number of times the containers in this pod have been restarted."),
        _column("Age", description=_AGE_DESCRIPTION),
        _column("IP", description="IP address allocated to the pod. Routable at least within the cluster.", priority=1),
        _column("Node", description="Name of the node the pod is scheduled on.", priority=1),
        _column("Nominated Node", description="Nominated node name, for preemption.", priority=1),
        _column("Readiness Gates", description="Readiness gates of the pod.", priority=1),
    ]
    rows = []
    for pod in objs:
        reason, ready, total, restarts = _pod_status(pod)
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        gates = spec.get("readinessGates") or []
        if gates:
            conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
            true_gates = sum(1 for g in gates if conds.get(g.get("conditionType")) == "True")
            gate_cell = f"{true_gates}/{len(gates)}"
        else:
            gate_cell = "<none>"
        rows.append(
            [
                _meta(pod).get("name", ""),
                f"{ready}/{total}",
                reason,
                restarts,
                _age(_meta(pod).get("creationTimestamp"), now),
                status.get("podIP") or "<none>",
                spec.get("nodeName") or "<none>",
                status.get("nominatedNodeName") or "<none>",
                gate_cell,
            ]
        )
    return cols, rows


def _condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conds)


def _job_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    cols = [
        dict(_NAME_COLUMN),
        _column("Status", description="Status of the job."),
        _column(
            "Completions", description="The desired number of successfully finished pods the job should be run with."
        ),
        _column("Duration", description="Time required to complete the job."),
        _column("Age", description=_AGE_DESCRIPTION),
        _column("Containers", description="Names of each container in the template.", priority=1),
        _column("Images", description="Images referenced by each container in the template.", priority=1),
        _column("Selector", description="Query over pods that should match the replica count.", priority=1),
    ]
    rows = []
    for job in objs:
        spec = job.get("spec") or {}
        status = job.get("status") or {}
        succeeded = int(status.get("succeeded") or 0)
        if spec.get("completions") is not None:
            completions = f"{succeeded}/{spec['completions']}"
        else:
            parallelism = int(spec.get("parallelism") or 0)
            completions = f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"
        if _condition_true(job, "Complete"):
            state = "Complete"
        elif _condition_true(job, "Failed"):
            state = "Failed"
        elif _meta(job).get("deletionTimestamp"):
            state = "Terminating"
        elif _condition_true(job, "SuccessCriteriaMet"):
            state = "SuccessCriteriaMet"
        elif _condition_true(job, "FailureTarget"):
            state = "FailureTarget"
        elif _condition_true(job, "Suspended"):
            state = "Suspended"
        else:
            state = "Running"
        start = _parse_time(status.get("startTime"))
        end = _parse_time(status.get("completionTime"))
        duration = "" if start is None else human_duration((end if end is not None else now) - start)
        pod_spec = (spec.get("template") or {}).get("spec") or {}
        containers = pod_spec.get("containers") or []
        selector = spec.get("selector") or {}
        sel_text = ",".join(f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items()))
        rows.append(
            [
                _meta(job).get("name", ""),
                state,
                completions,
                duration,
                _age(_meta(job).get("creationTimestamp"), now),
                ",".join(c.get("name", "") for c in containers),
                ",".join(c.get("image", "") for c in containers),
                sel_text or "<none>",
            ]
        )
    return cols, rows


def _node_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    cols = [
        dict(_NAME_COLUMN),
        _column("Status", description="The status of the node"),
        _column("Roles", description="The roles of the node"),
        _column("Age", description=_AGE_DESCRIPTION),
        _column("Version", description="Kubelet Version reported by the node."),
        _column("Internal-IP", description="List of internal IPs in the node.", priority=1),
        _column("External-IP", description="List of external IPs in the node.", priority=1),
        _column("OS-Image", description="OS image reported by the node.", priority=1),
        _column("Kernel-Version", description="Kernel version reported by the node.", priority=1),
        _column("Container-Runtime", description="Container runtime and version reported by the node.", priority=1),
    ]
    rows = []
    for node in objs:
        status = node.get("status") or {}
        conds = status.get("conditions") or []
        ready = next((c for c in conds if c.get("type") == "Ready"), None)
        if ready is None:
            state = "Unknown"
        elif ready.get("status") == "True":
            state = "Ready"
        else:
            state = "NotReady"
        if (node.get("spec") or {}).get("unschedulable"):
            state += ",SchedulingDisabled"
        labels = _meta(node).get("labels") or {}
        roles = sorted(
            {k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k}
            | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set())
        )
        info = status.get("nodeInfo") or {}
        addrs = status.get("addresses") or []
        internal = next((a.get("address") for a in addrs if a.get("type") == "InternalIP"), None)
        external = next((a.get("address") for a in addrs if a.get("type") == "ExternalIP"), None)
        rows.append(
            [
                _meta(node).get("name", ""),
                state,
                ",".join(r for r in roles if r) or "<none>",
                _age(_meta(node).get("creationTimestamp"), now),
                info.get("kubeletVersion", ""),
                internal or "<none>",
                external or "<none>",
                info.get("osImage") or "<unknown>",
                info.get("kernelVersion") or "<unknown>",
                info.get("containerRuntimeVersion") or "<unknown>",
            ]
        )
    return cols, rows


def _namespace_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    status = _column("Status", description="The status of the namespace")
    return _name_age_rows(objs, now, [(status, lambda ns: (ns.get("status") or {}).get("phase") or "Active")])


def _service_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    cols = [
        dict(_NAME_COLUMN),
        _column("Type", description="The type of the service."),
        _column("Cluster-IP", description="The cluster IP of the service."),
        _column("External-IP", description="The external IPs of the service."),
        _column("Port(s)", description="The ports of the service."),
        _column("Age", description=_AGE_DESCRIPTION),
        _column("Selector", description="The selector of the service.", priority=1),
    ]
    rows = []
    for svc in objs:
        spec = svc.get("spec") or {}
        ports = []
        for p in spec.get("ports") or []:
            text = f"{p.get('port')}"
            if p.get("nodePort"):
                text += f":{p['nodePort']}"
            ports.append(f"{text}/{p.get('protocol') or 'TCP'}")
        selector = spec.get("selector") or {}
        rows.append(
            [
                _meta(svc).get("name", ""),
                spec.get("type") or "ClusterIP",
                spec.get("clusterIP") or "<none>",
                ",".join(spec.get("externalIPs") or []) or "<none>",
                ",".join(ports) or "<none>",
                _age(_meta(svc).get("creationTimestamp"), now),
                ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
            ]
        )
    return cols, rows


def _configmap_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    data = _column("Data", "string", "Number of data entries.")
    return _name_age_rows(objs, now, [(data, lambda cm: len(cm.get("data") or {}) + len(cm.get("binaryData") or {}))])


def _secret_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    return _name_age_rows(objs, now, [
        (_column("Type", description="The type of the secret."), lambda s: s.get("type") or "Opaque"),
        (_column("Data", "string", "Number of data entries."),
         lambda s: len(s.get("data") or {}) + len(s.get("stringData") or {})),
    ])


def _event_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    cols = [
        _column("Last Seen", description="Time since the event was last seen."),
        _column("Type", description="Type of this event (Normal, Warning)."),
        _column("Reason", description="Why the action was taken."),
        _column("Object", description="The object that this event is about."),
        _column("Subobject", description="The field of the object this event is about.", priority=1),
        _column("Source", description="The component reporting this event.", priority=1),
        _column("Message", description="A human-readable description of the status of this operation."),
        _column("First Seen", description="Time since the event was first seen.", priority=1),
        _column("Count", "string", "The number of times this event has occurred.", priority=1),
        _column("Name", description=_NAME_DESCRIPTION, priority=1, fmt="name"),
    ]
    rows = []
    for ev in objs:
        involved = ev.get("involvedObject") or ev.get("regarding") or {}
        last = ev.get("lastTimestamp") or ev.get("eventTime") or _meta(ev).get("creationTimestamp")
        first = ev.get("firstTimestamp") or ev.get("eventTime") or _meta(ev).get("creationTimestamp")
        source = ev.get("source") or {}
        src = source.get("component") or ev.get("reportingComponent") or ev.get("reportingController") or ""
        if source.get("host"):
            src += f", {source['host']}"
        obj_kind = str(involved.get("kind") or "").lower()
        rows.append(
            [
                _age(last, now),
                ev.get("type") or "",
                ev.get("reason") or "",
                f"{obj_kind}/{involved.get('name', '')}",
                involved.get("fieldPath") or "",
                src,
                ev.get("message") or ev.get("note") or "",
                _age(first, now),
                int(ev.get("count") or (ev.get("series") or {}).get("count") or 1),
                _meta(ev).get("name", ""),
            ]
        )
    return cols, rows


def _lease_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    holder = _column("Holder", description="The holder of the lease.")
    return _name_age_rows(objs, now, [(holder, lambda lease: (lease.get("spec") or {}).get("holderIdentity") or "")])


def _crd_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    cols = [dict(_NAME_COLUMN), _column("Created At", "date", _AGE_DESCRIPTION)]
    rows = [[_meta(crd).get("name", ""), _meta(crd).get("creationTimestamp") or ""] for crd in objs]
    return cols, rows


def _generic_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    return _name_age_rows(objs, now, [])


def _name_age_rows(
    objs: list[dict[str, Any]], now: float, middle: list[tuple[dict[str, Any], Callable[[dict[str, Any]], Any]]]
) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """Columns NAME, then each (column, cell of an object) of `middle`, then AGE."""
    cols = [dict(_NAME_COLUMN), *(col for col, _ in middle), _column("Age", description=_AGE_DESCRIPTION)]
    rows = [
        [_meta(o).get("name", ""), *(cell(o) for _, cell in middle), _age(_meta(o).get("creationTimestamp"), now)]
        for o in objs
    ]
    return cols, rows


_BUILTIN: Final[dict[str, Callable[[list[dict[str, Any]], float], tuple[list[dict[str, Any]], list[list[Any]]]]]] = {
    "Pod": _pod_rows,
    "Job": _job_rows,
    "Node": _node_rows,
    "Namespace": _namespace_rows,
    "Service": _service_rows,
    "ConfigMap": _configmap_rows,
    "Secret": _secret_rows,
    "Event": _event_rows,
    "Lease": _lease_rows,
    "CustomResourceDefinition": _crd_rows,
}


def builtin_table(
    objs: list[dict[str, Any]],
    kind: str,
    *,
    include_object: str = "Metadata",
    now: float | None = None,
    resource_version: str | None = None,
    continue_token: str | None = None,
) -> dict[str, Any]:
    """A Table with ``kubectl get``'s default columns for a built-in ``kind`` (NAME/AGE for others)."""
    now = time.time() if now is None else now
    cols, cell_rows = _BUILTIN.get(kind, _generic_rows)(objs, now)
    return _table(cols, list(zip(cell_rows, objs, strict=True)), include_object, resource_version, continue_token)


def table_for(
    objs: list[dict[str, Any]],
    kind: str,
    printer_columns: list[dict[str, Any]] | None = None,
    *,
    custom: bool = False,
    include_object: str = "Metadata",
    now: float | None = None,
    resource_version: str | None = None,
    continue_token: str | None = None,
) -> dict[str, Any]:
    """Dispatch: custom resources (``custom=True`` or printer columns given) use the CRD's printer
    columns (Name/Age when none); built-in kinds use ``builtin_table``."""
    kwargs: dict[str, Any] = {
        "include_object": include_object,
        "now": now,
        "resource_version": resource_version,
        "continue_token": continue_token,
    }
    if custom or printer_columns:
        return printer_columns_table(objs, printer_columns, kind, **kwargs)
    return builtin_table(objs, kind, **kwargs)
