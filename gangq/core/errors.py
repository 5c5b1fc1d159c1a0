"""Errors raised by the admission engine for invalid specs.

Every error names the object (kind and name) and the field, so that the operator can put it on the
object's status and the CLI can print it as is.
"""

from __future__ import annotations


class SpecError(ValueError):
    """An object's spec is invalid: ``kind/name``, the dotted ``field`` path and what is wrong."""

    def __init__(self, kind: str, name: str, field: str, message: str) -> None:
        self.kind = kind
        self.name = name
        self.field = field
        self.message = message
        super().__init__(f"{kind} {name!r}: {field}: {message}")
