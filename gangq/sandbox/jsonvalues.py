"""JSON value helpers shared by schema validation, JSONPath filters and Table cells."""

from __future__ import annotations

from typing import Any

__all__ = ["is_int", "json_equal"]


def is_int(value: Any) -> bool:
    """An integer in JSON terms: an int (not a bool) or an integral float."""
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality (``True != 1``, ``1 == 1.0``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b
