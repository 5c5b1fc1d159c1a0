"""JSONPath, the subset that CRD ``additionalPrinterColumns`` and kubectl's custom columns use.

``jsonpath_all(obj, ".spec.containers[*].name")`` returns every value an expression selects;
``jsonpath_first`` the first; ``jsonpath_error`` why an expression is not supported (the API server
rejects such a CRD). Supported: ``.field``, ``['field']``, ``[n]``, ``[*]`` and ``.*``, optionally in
``{...}`` and after ``$``; filters ``[?(@.a.b == 'x')]`` with ``== != < <= > >=`` or bare existence.
Recursive descent (``..``) is not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from gangq.sandbox.jsonvalues import json_equal

__all__ = ["JSONPathError", "jsonpath_all", "jsonpath_error", "jsonpath_first"]


class JSONPathError(ValueError):
    """An unsupported or malformed JSONPath expression."""


_Step = tuple[Any, ...]
_JSONPATH_CACHE: dict[str, list[_Step]] = {}
_FILTER_RE: Final = re.compile(r"^\s*@((?:\.[^\s=!<>]+)*)\s*(?:(==|!=|<=|>=|<|>)\s*(.+?))?\s*$")


def _parse_name(expr: str, i: int) -> tuple[str, int]:
    out: list[str] = []
    while i < len(expr) and expr[i] not in ".[":
        if expr[i] == "\\" and i + 1 < len(expr):
            out.append(expr[i + 1])
            i += 2
            continue
        out.append(expr[i])
        i += 1
    return "".join(out), i


def _parse_literal(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise JSONPathError(f"unsupported filter literal {text!r}") from None


def _parse_jsonpath(expr: str) -> list[_Step]:
    cached = _JSONPATH_CACHE.get(expr)
    if cached is not None:
        return cached
    text = expr.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text.startswith("$"):
        text = text[1:]
    steps: list[_Step] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == ".":
            if i + 1 < n and text[i + 1] == ".":
                raise JSONPathError(f"{expr!r}: recursive descent '..' is not supported")
            name, i = _parse_name(text, i + 1)
            if not name:
                if i >= n:
                    break
                raise JSONPathError(f"{expr!r}: empty field name at offset {i}")
            steps.append(("*",) if name == "*" else ("field", name))
        elif c == "[":
            close = text.find("]", i)
            if text.startswith("[?(", i):
                close = text.find(")]", i)
                if close < 0:
                    raise JSONPathError(f"{expr!r}: unterminated filter")
                m = _FILTER_RE.match(text[i + 3 : close])
                if m is None:
                    raise JSONPathError(f"{expr!r}: unsupported filter {text[i + 3 : close]!r}")
                sub = [p for p in m.group(1).split(".") if p]
                literal = _parse_literal(m.group(3)) if m.group(2) else None
                steps.append(("filter", tuple(sub), m.group(2), literal))
                i = close + 2
                continue
            if close < 0:
                raise JSONPathError(f"{expr!r}: unterminated '['")
            inner = text[i + 1 : close].strip()
            if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
                steps.append(("field", inner[1:-1]))
            elif inner == "*":
                steps.append(("*",))
            else:
                try:
                    steps.append(("index", int(inner)))
                except ValueError:
                    raise JSONPathError(f"{expr!r}: unsupported subscript [{inner}]") from None
            i = close + 1
        else:
            name, i = _parse_name(text, i)  # a leading bare name ("spec.x")
            steps.append(("field", name))
    _JSONPATH_CACHE[expr] = steps
    return steps


def _get_path(value: Any, parts: Iterable[str]) -> tuple[bool, Any]:
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _compare(have: Any, op: str, want: Any) -> bool:
    if op == "==":
        return json_equal(have, want)
    if op == "!=":
        return not json_equal(have, want)
    try:
        if op == "<":
            return bool(have < want)
        if op == ">":
            return bool(have > want)
        if op == "<=":
            return bool(have <= want)
        return bool(have >= want)
    except TypeError:
        return False


def jsonpath_all(obj: Any, expr: str) -> list[Any]:
    """Every value the (simple) JSONPath ``expr`` selects in ``obj``."""
    current = [obj]
    for step in _parse_jsonpath(expr):
        kind = step[0]
        nxt: list[Any] = []
        for value in current:
            if kind == "field":
                if isinstance(value, dict) and step[1] in value:
                    nxt.append(value[step[1]])
            elif kind == "index":
                if isinstance(value, list) and -len(value) <= step[1] < len(value):
                    nxt.append(value[step[1]])
            elif kind == "*":
                if isinstance(value, list):
                    nxt.extend(value)
                elif isinstance(value, dict):
                    nxt.extend(value.values())
            else:  # filter
                _, sub, op, literal = step
                elements = value if isinstance(value, list) else [value]
                for element in elements:
                    found, have = _get_path(element, sub)
                    if found and (op is None or _compare(have, op, literal)):
                        nxt.append(element)
        current = nxt
        if not current:
            break
    return current


def jsonpath_error(expr: str) -> str | None:
    """``None`` if ``expr`` is a JSONPath this module evaluates, else the reason (for CRD validation)."""
    try:
        _parse_jsonpath(expr)
    except JSONPathError as exc:
        return str(exc)
    return None


def jsonpath_first(obj: Any, expr: str) -> tuple[bool, Any]:
    """``(found, value)`` for the first value ``expr`` selects in ``obj``."""
    values = jsonpath_all(obj, expr)
    return (True, values[0]) if values else (False, None)
