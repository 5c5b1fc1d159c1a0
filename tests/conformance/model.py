"""What a conformance case is made of: setup steps, then the request under test.

Strings in paths and bodies may name variables in braces: ``{ns}`` is the case's own namespace
(also the prefix of the names of its cluster-scoped objects), and any name a step saved with
``save`` (for example the resourceVersion of an earlier write) is available to later steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


@dataclass(frozen=True)
class Watch:
    """Read a watch stream until ``events`` events other than BOOKMARKs arrived, the server ended
    it, or ``seconds`` passed. ``unordered``: the events are compared as a set (sorted by type and
    name), for a watch's synthetic initial events, whose order no server promises: a real server's
    watch cache sends them in key order, or in another when it serves them from elsewhere; the
    sandbox in creation order."""

    events: int
    seconds: float = 5.0
    unordered: bool = False


@dataclass(frozen=True)
class Edit:
    """A request body made from the whole object an earlier step saved (``save={var: ""}``) with
    ``changes`` merged in as a JSON merge patch (None removes): a client's GET, modify, PUT."""

    var: str
    changes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Req:
    """One HTTP request. ``save`` maps a variable to a dotted path into the response body (the
    empty path saves the whole body, for an :class:`Edit`)."""

    method: str
    path: str
    body: Any = None
    content_type: str | None = None
    accept: str | None = None
    save: Mapping[str, str] = field(default_factory=dict)
    watch: Watch | None = None


@dataclass(frozen=True)
class Wait:
    """Poll ``GET path`` until it answers ``status`` and, when ``field`` is given, until that dotted
    path of the body is present (``present=True``) or absent: what the real server's controllers
    (the garbage collector, the namespace controller) do some time after the request that asked."""

    path: str
    status: int = 200
    field: str | None = None
    present: bool = True
    seconds: float = 30.0


@dataclass(frozen=True)
class Pause:
    """Let ``seconds`` pass: a real server's garbage collector learns of new dependents from its
    watches, and an owner deleted before it has seen them is handled as if it had none (orphaning
    then turns into collecting the dependent as dangling). Not part of the transcript."""

    seconds: float = 1.0


Step = Req | Wait | Pause


@dataclass(frozen=True)
class Case:
    """A named scenario: ``setup`` runs first (each answer's status is compared), then ``test``
    (its whole answer is compared). ``managed_fields`` keeps the managers and operations of
    ``metadata.managedFields`` in the comparison (dropped otherwise)."""

    name: str
    setup: tuple[Step, ...]
    test: Req
    managed_fields: bool = False
