"""Structural schemas of custom resources: pruning, defaulting and validation.

* ``prune`` drops fields unknown to a structural ``openAPIV3Schema`` (honouring
  ``x-kubernetes-preserve-unknown-fields``, ``x-kubernetes-embedded-resource``, ``additionalProperties``
  and ``items``); ``apiVersion``, ``kind`` and ``metadata`` at the root are always kept, untouched.
* ``apply_defaults`` fills ``default`` values top-down (a default object receives its own nested
  defaults) and, like the real server, drops ``null`` values of non-nullable fields first.
* ``validate`` returns ``(field path, message)`` pairs worded like the kube-apiserver's;
  ``error_cause_reason`` gives the 422 Status cause's reason for each.

Everything is pure: inputs are never mutated.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from gangq.sandbox.jsonvalues import is_int, json_equal
from gangq.sandbox.patching import copy_json, copy_object

log = logging.getLogger(__name__)

__all__ = [
    "apply_defaults",
    "error_cause_reason",
    "prune",
    "validate",
]


_ROOT_KEYS: Final = ("apiVersion", "kind", "metadata")


# --------------------------------------------------------------------------------------------------
# Pruning
# --------------------------------------------------------------------------------------------------


def prune(obj: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """Drop the fields of ``obj`` that the structural ``schema`` does not specify.

    A ``None`` schema prunes nothing (CRDs served without a schema keep every field).
    """
    if schema is None:
        return copy_object(obj)
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


def _type_ok(value: Any, t: str) -> bool:
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return is_int(value)
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
        if not (isinstance(value, str) or is_int(value)):
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
    if isinstance(enum, list) and not any(json_equal(value, e) for e in enum):
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
            if any(json_equal(item, prev) for prev in value[:i]):
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
