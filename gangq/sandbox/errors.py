"""The API's error type and the Status bodies it answers with.

`ApiError` carries an HTTP code, a Kubernetes `reason` and a message; `.status()` is the
`kind: Status` body the server writes. The constructors below word their messages and `details`
the way the kube-apiserver does, because clients (kubectl, kopf, the Python client) branch on them.
"""

from __future__ import annotations

from typing import Any

from gangq.sandbox.builtin import ResourceInfo

__all__ = ["ApiError", "already_exists", "bad_request", "conflict", "details", "invalid", "not_found"]


class ApiError(Exception):
    """An API error with an HTTP code, a Kubernetes `reason` and a message; `.status()` is its Status body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def _qualified(info: ResourceInfo) -> str:
    return f"{info.plural}.{info.group}" if info.group else info.plural


def details(info: ResourceInfo, name: str | None, **extra: Any) -> dict[str, Any]:
    """The `details` of a Status about one object of `info`'s resource."""
    d: dict[str, Any] = {"kind": info.plural}
    if name:
        d["name"] = name
    if info.group:
        d["group"] = info.group
    d.update(extra)
    return d


def not_found(info: ResourceInfo, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(info)} "{name}" not found', details=details(info, name))


def already_exists(info: ResourceInfo, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{_qualified(info)} "{name}" already exists', details=details(info, name))


def conflict(info: ResourceInfo, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    msg = f'Operation cannot be fulfilled on {_qualified(info)} "{name}": {why}'
    return ApiError(409, "Conflict", msg, details=details(info, name))


def invalid(info: ResourceInfo, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; causes are (field, reason, message), e.g. ("metadata.name", "FieldValueRequired", ...)."""
    text = ", ".join(f"{f}: {m}" if f else m for f, _, m in causes)
    if len(causes) > 1:
        text = "[" + text + "]"
    d: dict[str, Any] = {"kind": info.kind, "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]}
    if name:
        d["name"] = name
    if info.group:
        d["group"] = info.group
    qual = f"{info.kind}.{info.group}" if info.group else info.kind
    return ApiError(422, "Invalid", f'{qual} "{name}" is invalid: {text}', details=d)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)
