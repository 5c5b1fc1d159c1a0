"""How the store holds an object: the dict and its JSON text, side by side.

Stored objects are never mutated in place. Every write builds a new dict and serializes it once;
reads are a `json.loads` of the text, and list bodies and watch frames are assembled from it
without serializing again.
"""

from __future__ import annotations

import json
from typing import Any

from gangq.sandbox.errors import bad_request

__all__ = ["Entry", "copy_in", "dumps", "loads"]

dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def loads(text: str) -> dict[str, Any]:
    """A stored object from its JSON text (the store only ever stores objects)."""
    obj: dict[str, Any] = json.loads(text)
    return obj


def copy_in(value: Any, what: str) -> Any:
    """A private deep copy of caller input that is also guaranteed to be plain JSON."""
    try:
        return json.loads(dumps(value))
    except (TypeError, ValueError) as e:
        raise bad_request(f"{what} is not valid JSON: {e}") from None


class Entry:
    """One stored object: `obj` (shared, never mutated) and `raw`, its JSON text."""

    __slots__ = ("obj", "raw")

    def __init__(self, obj: dict[str, Any], raw: str) -> None:
        self.obj = obj
        self.raw = raw
