"""Structural-schema handling for custom resources, and server-side Tables for ``kubectl get``.

* ``prune`` drops fields unknown to a structural ``openAPIV3Schema`` (honouring
  ``x-kubernetes-preserve-unknown-fields``, ``x-kubernetes-embedded-resource``, ``additionalProperties``
  and ``items``); ``apiVersion``, ``kind`` and ``metadata`` at the root are always kept, untouched.
* ``apply_defaults`` fills ``default`` values top-down (a default object receives its own nested
  defaults) and, like the real server, drops ``null`` values of non-nullable fields first.
* ``validate`` returns ``(field path, message)`` pairs worded like the kube-apiserver's.
* ``printer_columns_table`` renders a ``meta.k8s.io/v1`` Table from a CRD's ``additionalPrinterColumns``;
  ``builtin_table`` renders the default columns of built-in kinds (Pod, Job, Node, Namespace...).

Everything is pure: inputs are never mutated.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Final

from gangq.sandbox.patching import copy_json

log = logging.getLogger(__name__)

__all__ = [
    "JSONPathError",
    "SchemaError",
    "apply_defaults",
    "builtin_table",
    "error_cause_reason",
    "human_duration",
    "invalid_status",
    "jsonpath_all",
    "jsonpath_error",
    "jsonpath_first",
    "printer_columns_table",
    "prune",
    "table_for",
    "validate",
]


class SchemaError(Exception):
    """An object that does not satisfy its schema (the API server answers 422 Invalid)."""

    def __init__(self, field: str, message: str, errors: list[tuple[str, str]] | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message
        self.errors: list[tuple[str, str]] = errors if errors is not None else [(field, message)]

    @classmethod
    def from_errors(cls, errors: list[tuple[str, str]]) -> SchemaError:
        """One exception carrying every ``validate`` error (the first one as ``field``/``message``)."""
        if not errors:
            raise ValueError("SchemaError.from_errors needs at least one error")
        field, message = errors[0]
        return cls(field, message, list(errors))


_ROOT_KEYS: Final = ("apiVersion", "kind", "metadata")


# --------------------------------------------------------------------------------------------------
# Pruning
# --------------------------------------------------------------------------------------------------


def prune(obj: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """Drop the fields of ``obj`` that the structural ``schema`` does not specify.

    A ``None`` schema prunes nothing (CRDs served without a schema keep every field).
    """
    if schema is None:
        return copy_json(obj)  # type: ignore[no-any-return]
    return _prune_object(obj, schema, embedded=True)


def _is_object_schema(schema: Mapping[str, Any]) -> bool:
    t = schema.get("type")
    if t == "object":
        return True
    return t is None and not schema.get("x-kubernetes-int-or-string")


def _prune_object(value: Mapping[str, Any], schema: Mapping[str, Any], *, embedded: bool) -> dict[str, Any]:
    props: Mapping[str, Any] = schema.get("properties") or {}
    addl = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    out: dict[str, Any] = {}
    for key, sub in value.items():
        if embedded and key in _ROOT_KEYS:  # type meta and metadata of (embedded) objects are never pruned
            out[key] = copy_json(sub)
            continue
        if key in props:
            out[key] = _prune_value(sub, props[key])
        elif isinstance(addl, dict):
            out[key] = _prune_value(sub, addl)
        elif addl is True or preserve:
            out[key] = copy_json(sub)
        # else: unknown field, pruned
    return out


def _prune_value(value: Any, schema: Mapping[str, Any]) -> Any:
    if isinstance(value, dict):
        if _is_object_schema(schema):
            return _prune_object(value, schema, embedded=schema.get("x-kubernetes-embedded-resource") is True)
        return copy_json(value)
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            return [_prune_value(x, items) for x in value]
        return copy_json(value)
    return value


# --------------------------------------------------------------------------------------------------
# Defaulting
# --------------------------------------------------------------------------------------------------


def apply_defaults(obj: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """Apply the schema's ``default`` values to absent fields, top-down; drop non-nullable nulls."""
    out: dict[str, Any] = copy_json(obj)
    if schema is not None:
        _default_in_place(out, schema, root=True)
    return out


def _default_in_place(value: Any, schema: Mapping[str, Any], *, root: bool = False) -> None:
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties") or {}
        for key, sub in props.items():
            if root and key in _ROOT_KEYS:
                continue
            if not isinstance(sub, Mapping):
                continue
            if key in value:
                if value[key] is None and not sub.get("nullable"):
                    if "default" in sub:
                        value[key] = copy_json(sub["default"])
                    else:
                        del value[key]
                        continue
            elif "default" in sub:
                value[key] = copy_json(sub["default"])
            else:
                continue
            _default_in_place(value[key], sub)
        addl = schema.get("additionalProperties")
        if isinstance(addl, Mapping):
            for key in list(value):
                if key in props or (root and key in _ROOT_KEYS):
                    continue
                if value[key] is None and not addl.get("nullable"):
                    if "default" in addl:
                        value[key] = copy_json(addl["default"])
                    else:
                        del value[key]
                        continue
                _default_in_place(value[key], addl)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                if item is None and not items.get("nullable") and "default" in items:
                    value[i] = copy_json(items["default"])
                _default_in_place(value[i], items)


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def _type_ok(value: Any, t: str) -> bool:
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return _is_int(value)
    if t == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if t == "boolean":
        return isinstance(value, bool)
    return True


def _render(value: Any) -> str:
    """A value as the apiserver prints it in ``Invalid value: ...``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    return text if len(text) <= 200 else text[:197] + "..."


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality (``True != 1``, ``1 == 1.0``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


_PATTERN_CACHE: dict[str, re.Pattern[str] | None] = {}


def _compile(pattern: str) -> re.Pattern[str] | None:
    if pattern not in _PATTERN_CACHE:
        try:
            _PATTERN_CACHE[pattern] = re.compile(pattern)
        except re.error:
            log.warning("schema pattern %r is not a valid regular expression; not enforced", pattern)
            _PATTERN_CACHE[pattern] = None
    return _PATTERN_CACHE[pattern]


def validate(obj: dict[str, Any], schema: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Validate ``obj`` against an openAPIV3Schema; ``[]`` when valid.

    Checks type (incl. ``nullable`` and ``x-kubernetes-int-or-string``), enum, required,
    minimum/maximum (and exclusive bounds), multipleOf, minLength/maxLength, pattern,
    minItems/maxItems, uniqueItems, ``x-kubernetes-list-type`` set/map uniqueness,
    minProperties/maxProperties, allOf/anyOf/oneOf/not. Root ``apiVersion``/``kind``/``metadata``
    are not validated against the schema.
    """
    errors: list[tuple[str, str]] = []
    if schema is not None:
        _validate(obj, schema, "", errors, root=True)
    return errors


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _validate(value: Any, s: Mapping[str, Any], path: str, errors: list[tuple[str, str]], root: bool = False) -> None:
    where = path or "<root>"
    t = s.get("type")
    if value is None:
        if s.get("nullable"):
            return
        if t is not None or s.get("x-kubernetes-int-or-string"):
            want = "integer or string" if s.get("x-kubernetes-int-or-string") else t
            errors.append((path, f'Invalid value: "null": {where} in body must be of type {want}: "null"'))
        return
    if s.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _is_int(value)):
            errors.append(
                (
                    path,
                    f'Invalid value: "{_type_name(value)}": {where} in body must be of type integer or string: '
                    f'"{_type_name(value)}"',
                )
            )
            return
    elif isinstance(t, str) and not _type_ok(value, t):
        tn = _type_name(value)
        errors.append((path, f'Invalid value: "{tn}": {where} in body must be of type {t}: "{tn}"'))
        return

    enum = s.get("enum")
    if isinstance(enum, list) and not any(_json_equal(value, e) for e in enum):
        supported = ", ".join(_render(e) for e in enum)
        errors.append((path, f"Unsupported value: {_render(value)}: supported values: {supported}"))

    if isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(value, s, path, where, errors)
    elif isinstance(value, str):
        _validate_string(value, s, path, where, errors)
    elif isinstance(value, list):
        _validate_array(value, s, path, where, errors)
    elif isinstance(value, dict):
        _validate_object(value, s, path, where, errors, root)

    for sub in s.get("allOf") or ():
        _validate(value, sub, path, errors)
    any_of = s.get("anyOf")
    if any_of and not any(_is_valid(value, sub, path) for sub in any_of):
        errors.append(
            (path, f"Invalid value: {_render(value)}: {where} in body must validate at least one schema (anyOf)")
        )
    one_of = s.get("oneOf")
    if one_of and sum(1 for sub in one_of if _is_valid(value, sub, path)) != 1:
        errors.append(
            (path, f"Invalid value: {_render(value)}: {where} in body must validate one and only one schema (oneOf)")
        )
    not_schema = s.get("not")
    if isinstance(not_schema, Mapping) and _is_valid(value, not_schema, path):
        errors.append((path, f"Invalid value: {_render(value)}: {where} in body must not validate the schema (not)"))


def _is_valid(value: Any, s: Mapping[str, Any], path: str) -> bool:
    errs: list[tuple[str, str]] = []
    _validate(value, s, path, errs)
    return not errs


def _iv(value: Any, where: str) -> str:
    """``Invalid value: <value>: <where>``, rendered only when there is an error to report."""
    return f"Invalid value: {_render(value)}: {where}"


def _validate_number(value: float, s: Mapping[str, Any], path: str, where: str, errors: list[tuple[str, str]]) -> None:
    minimum = s.get("minimum")
    if isinstance(minimum, int | float):
        if s.get("exclusiveMinimum") is True:
            if value <= minimum:
                errors.append((path, f"{_iv(value, where)} in body should be greater than {_render(minimum)}"))
        elif value < minimum:
            errors.append(
                (path, f"{_iv(value, where)} in body should be greater than or equal to {_render(minimum)}")
            )
    maximum = s.get("maximum")
    if isinstance(maximum, int | float):
        if s.get("exclusiveMaximum") is True:
            if value >= maximum:
                errors.append((path, f"{_iv(value, where)} in body should be less than {_render(maximum)}"))
        elif value > maximum:
            errors.append(
                (path, f"{_iv(value, where)} in body should be less than or equal to {_render(maximum)}")
            )
    multiple = s.get("multipleOf")
    if isinstance(multiple, int | float) and multiple > 0:
        q = value / multiple
        if not math.isclose(q, round(q), rel_tol=0, abs_tol=1e-9):
            errors.append((path, f"{_iv(value, where)} in body should be a multiple of {_render(multiple)}"))


def _validate_string(value: str, s: Mapping[str, Any], path: str, where: str, errors: list[tuple[str, str]]) -> None:
    min_length = s.get("minLength")
    if isinstance(min_length, int) and len(value) < min_length:
        errors.append((path, f"{_iv(value, where)} in body should be at least {min_length} chars long"))
    max_length = s.get("maxLength")
    if isinstance(max_length, int) and len(value) > max_length:
        errors.append((path, f"Too long: may not be longer than {max_length}"))
    pattern = s.get("pattern")
    if isinstance(pattern, str):
        compiled = _compile(pattern)
        if compiled is not None and compiled.search(value) is None:
            errors.append((path, f"{_iv(value, where)} in body should match '{pattern}'"))


def _validate_array(
    value: list[Any], s: Mapping[str, Any], path: str, where: str, errors: list[tuple[str, str]]
) -> None:
    min_items = s.get("minItems")
    if isinstance(min_items, int) and len(value) < min_items:
        errors.append((path, f"Invalid value: {len(value)}: {where} in body should have at least {min_items} items"))
    max_items = s.get("maxItems")
    if isinstance(max_items, int) and len(value) > max_items:
        errors.append((path, f"Too many: {len(value)}: must have at most {max_items} items"))
    list_type = s.get("x-kubernetes-list-type")
    if s.get("uniqueItems") is True or list_type == "set":
        for i, item in enumerate(value):
            if any(_json_equal(item, prev) for prev in value[:i]):
                errors.append((f"{path}[{i}]", f"Duplicate value: {_render(item)}"))
    elif list_type == "map":
        keys = s.get("x-kubernetes-list-map-keys") or []
        seen: list[tuple[Any, ...]] = []
        for i, item in enumerate(value):
            if isinstance(item, dict):
                ident = tuple(item.get(k) for k in keys)
                if ident in seen:
                    dup = {k: item.get(k) for k in keys}
                    errors.append((f"{path}[{i}]", f"Duplicate value: {_render(dup)}"))
                else:
                    seen.append(ident)
    items = s.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            _validate(item, items, f"{path}[{i}]", errors)


def _validate_object(
    value: dict[str, Any], s: Mapping[str, Any], path: str, where: str, errors: list[tuple[str, str]], root: bool
) -> None:
    for req in s.get("required") or ():
        if req not in value:
            errors.append((_join(path, req), "Required value"))
    min_props = s.get("minProperties")
    if isinstance(min_props, int) and len(value) < min_props:
        errors.append(
            (path, f"Invalid value: {len(value)}: {where} in body should have at least {min_props} properties")
        )
    max_props = s.get("maxProperties")
    if isinstance(max_props, int) and len(value) > max_props:
        errors.append((path, f"Too many: {len(value)}: must have at most {max_props} items"))
    props: Mapping[str, Any] = s.get("properties") or {}
    addl = s.get("additionalProperties")
    for key, sub in value.items():
        if root and key in _ROOT_KEYS:
            if key == "metadata" and key in props and isinstance(props[key], Mapping):
                _validate_metadata(sub, props[key], errors)
            continue
        if key in props:
            if isinstance(props[key], Mapping):
                _validate(sub, props[key], _join(path, key), errors)
        elif isinstance(addl, Mapping):
            _validate(sub, addl, _join(path, key), errors)


def _validate_metadata(meta: Any, s: Mapping[str, Any], errors: list[tuple[str, str]]) -> None:
    """Only metadata.name and metadata.generateName may be constrained by a CRD schema."""
    if not isinstance(meta, dict):
        return
    props: Mapping[str, Any] = s.get("properties") or {}
    for key in ("name", "generateName"):
        if key in meta and isinstance(props.get(key), Mapping):
            _validate(meta[key], props[key], f"metadata.{key}", errors)


_REASON_PREFIXES: Final = (
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Duplicate value", "FieldValueDuplicate"),
)


def error_cause_reason(message: str) -> str:
    """The ``StatusCause.reason`` for a ``validate`` message (FieldValueRequired, FieldValueInvalid...)."""
    for prefix, reason in _REASON_PREFIXES:
        if message.startswith(prefix):
            return reason
    return "FieldValueInvalid"


def invalid_status(kind: str, group: str, name: str, errors: list[tuple[str, str]]) -> dict[str, Any]:
    """A ``kind: Status`` 422 Invalid body for ``validate`` errors, as the apiserver builds it."""
    qualified = f"{kind}.{group}" if group else kind
    parts = [f"{field}: {msg}" if field else msg for field, msg in errors]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": error_cause_reason(msg), "message": msg, "field": field} for field, msg in errors],
    }
    if group:
        details["group"] = group
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{qualified} "{name}" is invalid: {joined}',
        "reason": "Invalid",
        "details": details,
        "code": 422,
    }


# --------------------------------------------------------------------------------------------------
# JSONPath (the subset used by additionalPrinterColumns and kubectl custom columns)
# --------------------------------------------------------------------------------------------------


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
        return _json_equal(have, want)
    if op == "!=":
        return not _json_equal(have, want)
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


# --------------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------------

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
        return copy_json(obj)  # type: ignore[no-any-return]
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
        if _is_int(value):
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
    cols = [
        dict(_NAME_COLUMN),
        _column("Status", description="The status of the namespace"),
        _column("Age", description=_AGE_DESCRIPTION),
    ]
    rows = [
        [
            _meta(ns).get("name", ""),
            (ns.get("status") or {}).get("phase") or "Active",
            _age(_meta(ns).get("creationTimestamp"), now),
        ]
        for ns in objs
    ]
    return cols, rows


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
    cols = [
        dict(_NAME_COLUMN),
        _column("Data", "integer", "Number of data entries."),
        _column("Age", description=_AGE_DESCRIPTION),
    ]
    rows = [
        [
            _meta(cm).get("name", ""),
            len(cm.get("data") or {}) + len(cm.get("binaryData") or {}),
            _age(_meta(cm).get("creationTimestamp"), now),
        ]
        for cm in objs
    ]
    return cols, rows


def _secret_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    cols = [
        dict(_NAME_COLUMN),
        _column("Type", description="The type of the secret."),
        _column("Data", "integer", "Number of data entries."),
        _column("Age", description=_AGE_DESCRIPTION),
    ]
    rows = [
        [
            _meta(s).get("name", ""),
            s.get("type") or "Opaque",
            len(s.get("data") or {}) + len(s.get("stringData") or {}),
            _age(_meta(s).get("creationTimestamp"), now),
        ]
        for s in objs
    ]
    return cols, rows


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
        _column("Count", "integer", "The number of times this event has occurred.", priority=1),
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
    cols = [
        dict(_NAME_COLUMN),
        _column("Holder", description="The holder of the lease."),
        _column("Age", description=_AGE_DESCRIPTION),
    ]
    rows = [
        [
            _meta(lease).get("name", ""),
            (lease.get("spec") or {}).get("holderIdentity") or "",
            _age(_meta(lease).get("creationTimestamp"), now),
        ]
        for lease in objs
    ]
    return cols, rows


def _crd_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    cols = [dict(_NAME_COLUMN), _column("Created At", "date", _AGE_DESCRIPTION)]
    rows = [[_meta(crd).get("name", ""), _meta(crd).get("creationTimestamp") or ""] for crd in objs]
    return cols, rows


def _generic_rows(objs: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    cols = [dict(_NAME_COLUMN), _column("Age", description=_AGE_DESCRIPTION)]
    rows = [[_meta(o).get("name", ""), _age(_meta(o).get("creationTimestamp"), now)] for o in objs]
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
