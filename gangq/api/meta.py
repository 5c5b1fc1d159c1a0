"""Read-only typed views of a Kubernetes object's dict: its metadata, owner references, conditions,
resourceVersion and timestamps.

The rule: code outside the engine reads an object's metadata through :class:`Meta` (and its
conditions through :func:`conditions`, :func:`find_condition`, :func:`condition_true`), never by
walking ``obj.get("metadata") or {}`` by hand. Each field then has one reading: a missing name is
``""``, a missing namespace ``""`` (the caller says what a cluster-scoped object means), a
resourceVersion that is absent or not an integer is ``0``, an owner reference that is not an
object is skipped. Hand-written walks had drifted apart on exactly these cases.

The views are for reading. An object being built or patched is a plain dict, written as such.
They sit on the controller's hot paths (every watch event), so they copy nothing: a ``Meta``
holds the metadata mapping and reads a field when asked.

Timestamps: :func:`rfc3339` is the one formatter of the times gangq writes (conditions, records,
Lease times), :func:`parse_timestamp` the one parser of the times it reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal

_EMPTY: Final[Mapping[str, Any]] = {}


class OwnerReference:
    """One entry of ``metadata.ownerReferences``."""

    __slots__ = ("api_version", "controller", "kind", "name", "uid")

    def __init__(self, ref: Mapping[str, Any]) -> None:
        self.api_version = str(ref.get("apiVersion") or "")
        self.kind = str(ref.get("kind") or "")
        self.name = str(ref.get("name") or "")
        self.uid = str(ref.get("uid") or "")
        self.controller = bool(ref.get("controller"))

    def __repr__(self) -> str:
        return (f"OwnerReference({self.api_version}, {self.kind}, {self.name!r}, uid={self.uid!r}, "
                f"controller={self.controller})")


class Meta:
    """The metadata of ``obj`` (a Kubernetes object or list as a dict), read-only.

    ``Meta(obj).name``, ``.namespace``, ``.uid``, ``.labels`` ... An object with no metadata reads
    as one with every field absent.
    """

    __slots__ = ("raw",)

    def __init__(self, obj: Mapping[str, Any] | None) -> None:
        raw = obj.get("metadata") if obj else None
        self.raw: Mapping[str, Any] = raw if type(raw) is dict or isinstance(raw, Mapping) else _EMPTY
        """The metadata mapping itself (not a copy); empty when absent or not an object."""

    @property
    def name(self) -> str:
        """``metadata.name``; ``""`` when absent."""
        name = self.raw.get("name")
        return "" if name is None else str(name)

    @property
    def namespace(self) -> str:
        """``metadata.namespace``; ``""`` when absent (a cluster-scoped object)."""
        return str(self.raw.get("namespace") or "")

    @property
    def namespace_or_default(self) -> str:
        """``metadata.namespace``, ``default`` when absent (as the API server defaults a
        namespaced object's)."""
        return str(self.raw.get("namespace") or "default")

    @property
    def key(self) -> str:
        """``namespace/name``, or ``name`` for a cluster-scoped object."""
        ns = self.raw.get("namespace")
        return f"{ns}/{self.name}" if ns else self.name

    @property
    def uid(self) -> str:
        """``metadata.uid``; ``""`` when absent."""
        return str(self.raw.get("uid") or "")

    @property
    def labels(self) -> Mapping[str, Any]:
        """``metadata.labels``; empty when absent."""
        labels = self.raw.get("labels")
        return labels if isinstance(labels, Mapping) else _EMPTY

    @property
    def annotations(self) -> Mapping[str, Any]:
        """``metadata.annotations``; empty when absent."""
        annotations = self.raw.get("annotations")
        return annotations if isinstance(annotations, Mapping) else _EMPTY

    @property
    def finalizers(self) -> list[Any]:
        """``metadata.finalizers``; empty when absent."""
        finalizers = self.raw.get("finalizers")
        return finalizers if isinstance(finalizers, list) else []

    @property
    def owner_references(self) -> list[OwnerReference]:
        """``metadata.ownerReferences``, skipping entries that are not objects."""
        return [OwnerReference(r) for r in self.raw.get("ownerReferences") or () if isinstance(r, Mapping)]

    @property
    def controller_reference(self) -> OwnerReference | None:
        """The owner reference with ``controller: true`` (at most one by the API's rule), if any."""
        for ref in self.raw.get("ownerReferences") or ():
            if isinstance(ref, Mapping) and ref.get("controller"):
                return OwnerReference(ref)
        return None

    @property
    def resource_version(self) -> int:
        """``metadata.resourceVersion`` as an integer: ``0`` when absent or not an integer (an
        opaque version, which no integer comparison can order)."""
        return _int(self.raw.get("resourceVersion"))

    @property
    def resource_version_text(self) -> str:
        """``metadata.resourceVersion`` as written (what a watch or a precondition sends back);
        ``""`` when absent."""
        return str(self.raw.get("resourceVersion") or "")

    @property
    def continue_token(self) -> str:
        """A list's ``metadata.continue``: where its next page starts; ``""`` on the last page."""
        return str(self.raw.get("continue") or "")

    @property
    def generation(self) -> int:
        """``metadata.generation``; ``0`` when absent or not an integer."""
        return _int(self.raw.get("generation"))

    @property
    def creation_timestamp(self) -> str:
        """``metadata.creationTimestamp`` as written (RFC 3339); ``""`` when absent."""
        return str(self.raw.get("creationTimestamp") or "")

    @property
    def deletion_timestamp(self) -> str:
        """``metadata.deletionTimestamp`` as written (RFC 3339); ``""`` when absent."""
        return str(self.raw.get("deletionTimestamp") or "")

    @property
    def deleting(self) -> bool:
        """The object has a ``deletionTimestamp``: it is being deleted (finalizers pending)."""
        return bool(self.raw.get("deletionTimestamp"))


def _int(value: Any) -> int:
    if not value:
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def resource_version(obj: Mapping[str, Any]) -> int:
    """``metadata.resourceVersion`` as an integer (0 when absent or not an integer)."""
    return Meta(obj).resource_version


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object (the engine's keys)."""
    return Meta(obj).key


def object_name(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (namespace ``default`` when absent, name ``?``), for messages."""
    m = Meta(obj)
    return f"{m.namespace_or_default}/{m.name or '?'}"


# --- conditions -----------------------------------------------------------------------------------


def conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``status.conditions`` of ``obj``, skipping entries that are not objects."""
    return [c for c in (obj.get("status") or _EMPTY).get("conditions") or () if isinstance(c, Mapping)]


def find_condition(conds: Iterable[Mapping[str, Any]] | None, ctype: str) -> Mapping[str, Any] | None:
    """The first condition of type ``ctype`` in ``conds`` (a ``status.conditions`` list), if any."""
    for cond in conds or ():
        if isinstance(cond, Mapping) and cond.get("type") == ctype:
            return cond
    return None


def condition_true(conds: Iterable[Mapping[str, Any]] | None, ctype: str) -> bool:
    """``conds`` has a condition of type ``ctype`` with status ``"True"``."""
    cond = find_condition(conds, ctype)
    return cond is not None and cond.get("status") == "True"


# --- timestamps -----------------------------------------------------------------------------------

TimeSpec = Literal["seconds", "milliseconds", "microseconds"]


def rfc3339(t: float, timespec: TimeSpec = "seconds") -> str:
    """Epoch seconds as an RFC 3339 UTC time: ``2026-11-22T23:00:00Z`` (``metav1.Time``, whole
    seconds), or with ``timespec`` ``milliseconds`` / ``microseconds`` (``metav1.MicroTime``)."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec=timespec)[:-6] + "Z"


def parse_timestamp(text: str) -> float:
    """An RFC 3339 timestamp (``2026-11-22T23:00:00Z``) as epoch seconds. Raises ValueError."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError as err:
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp (e.g. 2026-11-22T23:00:00Z)") from err
    if when.tzinfo is None or ("T" not in text.upper() and " " not in text):
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp with a time zone (e.g. 2026-11-22T23:00:00Z)")
    return when.timestamp()


__all__ = [
    "Meta",
    "OwnerReference",
    "TimeSpec",
    "condition_true",
    "conditions",
    "find_condition",
    "object_key",
    "object_name",
    "parse_timestamp",
    "resource_version",
    "rfc3339",
]
