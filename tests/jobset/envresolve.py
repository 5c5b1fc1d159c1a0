"""Resolve a container's env the way the kubelet does: downward-API fieldRefs on annotations and labels, then
``$(VAR)`` references to variables defined earlier in the list."""

from __future__ import annotations

import re
from typing import Any

_FIELD = re.compile(r"^metadata\.(annotations|labels)\['([^']+)'\]$")
_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def resolve_env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    meta = pod.get("metadata") or {}
    for var in container.get("env") or []:
        if "valueFrom" in var:
            ref = var["valueFrom"].get("fieldRef", {}).get("fieldPath", "")
            m = _FIELD.match(ref)
            assert m, f"unsupported fieldRef {ref}"
            out[var["name"]] = (meta.get(m.group(1)) or {})[m.group(2)]
        else:
            out[var["name"]] = _REF.sub(lambda m: out.get(m.group(1), m.group(0)), var.get("value", ""))
    return out
