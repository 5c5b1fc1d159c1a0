"""What legitimately differs between two API servers, made equal, and the structural diff of what
is left.

A case's transcript becomes ``{"setup": [...], "test": {...}}``: each setup step's status code
(and for a wait, whether it came true), and the whole answer of the request under test, with:

- uids replaced by ``<uid1>``, ``<uid2>`` ... in order of first appearance, wherever they occur
  (ownerReferences, labels such as a Job's ``controller-uid``, Status details), so that who points
  at whom is still compared;
- the resourceVersions of objects replaced by their rank among those of the case (equal stays
  equal, later stays later); those of lists and bookmarks by ``<rv>`` (they count other clients'
  writes too); continue tokens by ``<continue>``, and an empty one (the last page, which a real
  server sometimes spells ``""`` and sometimes leaves out) is dropped;
- every timestamp by ``<time>``, a Table's Age cells by ``<age>``;
- a watch's events sorted, for a case whose events come in no promised order (``Watch.unordered``);
- uids inside strings (a Job's selector in a Table cell) by their stand-ins;
- the five random characters of a generated name by ``<suffix1>`` ...;
- ``metadata.managedFields`` dropped, or, for a case that compares them, reduced to their managers,
  operations and subresources;
- a Status reduced to ``kind``, ``status``, ``code``, ``reason`` and ``details`` (name, group,
  kind and the fields of its causes): its message is free text;
- ``selfLink`` dropped, and so is a key whose value is null: a Go field without ``omitempty``
  serialises its nil as null where another server leaves the key out, and every client reads both
  the same;
- the fields of :data:`ALLOCATED` (picked by the server from a pool, such as a Service's cluster
  IP) replaced by ``<allocated>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from tests.conformance.model import Case
from tests.conformance.runner import Transcript

_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
# A generated name's suffix: five characters of the alphabet Kubernetes picks them from.
_GENERATED = re.compile(r"^(.*-)[bcdfghjklmnpqrstvwxz2456789]{5}$")
_AGE_COLUMNS = {"Age", "Last Seen", "First Seen"}
_ALLOCATED_COLUMNS = {"Cluster-IP"}
# Values a server allocates from a pool: equal in kind, not in value.
ALLOCATED = {("spec", "clusterIP"), ("spec", "clusterIPs")}


def _walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def _bodies(transcript: Transcript) -> Iterator[Any]:
    for entry in transcript:
        yield entry.answer.body
        yield from entry.answer.events


def _is_list(obj: dict[str, Any]) -> bool:
    kind = obj.get("kind")
    return "items" in obj or (isinstance(kind, str) and (kind.endswith("List") or kind == "Table"))


class Aliases:
    """The uids, object resourceVersions and generated names of one transcript, and their stand-ins."""

    def __init__(self, transcript: Transcript) -> None:
        self.strings: dict[str, str] = {}
        self._uid_count = 0
        self._generated = 0
        rvs: set[int] = set()
        for body in _bodies(transcript):
            for node in _walk(body):
                if not isinstance(node, dict):
                    continue
                meta = node.get("metadata")
                if isinstance(meta, dict):
                    self._uid(meta.get("uid"))
                    self._generated_name(meta.get("generateName"), meta.get("name"))
                    rv = meta.get("resourceVersion")
                    if isinstance(rv, str) and rv.isdigit() and not _is_list(node) and node.get("kind") != "Status":
                        rvs.add(int(rv))
                details = node.get("details") if node.get("kind") == "Status" else None
                if isinstance(details, dict):
                    self._uid(details.get("uid"))
        self.ranks = {rv: f"<rv{i + 1}>" for i, rv in enumerate(sorted(rvs))}
        self._uid_aliases = {k: v for k, v in self.strings.items() if v.startswith("<uid")}
        self._uids = re.compile("|".join(map(re.escape, self._uid_aliases))) if self._uid_aliases else None

    def _uid(self, uid: Any) -> None:
        if isinstance(uid, str) and uid not in self.strings:
            self._uid_count += 1
            self.strings[uid] = f"<uid{self._uid_count}>"

    def _generated_name(self, prefix: Any, name: Any) -> None:
        if (isinstance(prefix, str) and isinstance(name, str) and name.startswith(prefix) and name != prefix
                and name not in self.strings):
            self._generated += 1
            self.strings[name] = f"{prefix}<suffix{self._generated}>"

    def within(self, text: str) -> str:
        """``text`` with the uids it contains (a Job's selector in a Table cell) replaced."""
        if self._uids is None:
            return text
        return self._uids.sub(lambda m: self._uid_aliases[m.group(0)], text)


class Normaliser:
    """One case's answers made comparable (see the module's docstring for what changes)."""

    def __init__(self, case: Case, aliases: Aliases) -> None:
        self.case = case
        self.aliases = aliases

    def value(self, value: Any, key: str | None = None) -> Any:
        """``value``, found under ``key``, normalised."""
        if isinstance(value, dict):
            return self.mapping(value, key)
        if isinstance(value, list):
            return [self.value(v, key) for v in value]
        if isinstance(value, str):
            if value in self.aliases.strings:
                return self.aliases.strings[value]
            if _TIME.match(value):
                return "<time>"
            return self.aliases.within(value)
        return value

    def mapping(self, obj: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        if obj.get("kind") == "Status" and "code" in obj:
            return self.status(obj)
        if obj.get("kind") == "Table":
            return self.table(obj)
        out: dict[str, Any] = {}
        for child, val in obj.items():
            if child == "selfLink" or val is None:
                continue
            if child == "metadata" and isinstance(val, dict):
                out[child] = self.metadata(val, listing=_is_list(obj))
            elif (key, child) in ALLOCATED:
                out[child] = "<allocated>"
            else:
                out[child] = self.value(val, child)
        return out

    def metadata(self, meta: dict[str, Any], *, listing: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, val in meta.items():
            if key == "selfLink":
                continue
            if key == "resourceVersion" and isinstance(val, str):
                out[key] = "<rv>" if listing or not val.isdigit() else self.aliases.ranks.get(int(val), "<rv>")
            elif key == "continue":
                if val:
                    out[key] = "<continue>"
            elif key == "managedFields":
                if self.case.managed_fields:
                    out[key] = sorted(
                        ({k: f[k] for k in ("manager", "operation", "subresource") if k in f} for f in val),
                        key=lambda f: (f.get("manager", ""), f.get("operation", ""), f.get("subresource", "")))
            else:
                out[key] = self.value(val, key)
        return out

    def status(self, obj: dict[str, Any]) -> dict[str, Any]:
        out = {k: obj[k] for k in ("kind", "status", "code", "reason") if k in obj}
        details = obj.get("details")
        if isinstance(details, dict):
            d = {k: self.value(details[k]) for k in ("name", "group", "kind") if details.get(k)}
            if isinstance(d.get("name"), str):
                d["name"] = _GENERATED.sub(r"\1<suffix>", d["name"])
            causes = sorted({c.get("field", "") for c in details.get("causes", [])})
            if causes:
                d["causes"] = causes
            if d:
                out["details"] = d
        return out

    def table(self, obj: dict[str, Any]) -> dict[str, Any]:
        columns = obj.get("columnDefinitions", [])
        ages = {i for i, c in enumerate(columns) if c.get("name") in _AGE_COLUMNS}
        allocated = {i for i, c in enumerate(columns) if c.get("name") in _ALLOCATED_COLUMNS}
        out = {k: self.value(v) for k, v in obj.items() if k not in ("rows", "metadata", "columnDefinitions")}
        out["metadata"] = self.metadata(obj.get("metadata", {}), listing=True)
        out["columnDefinitions"] = [{k: c.get(k) for k in ("name", "type", "format", "priority")} for c in columns]
        rows = []
        for row in obj.get("rows", []):
            cells = ["<age>" if i in ages else "<allocated>" if i in allocated else self.value(c)
                     for i, c in enumerate(row.get("cells", []))]
            rows.append({**{k: self.value(v) for k, v in row.items() if k != "cells" and v is not None},
                         "cells": cells})
        out["rows"] = rows
        return out


def _events(events: list[dict[str, Any]], norm: Normaliser) -> list[dict[str, Any]]:
    """Watch events, normalised; consecutive BOOKMARKs are one (how often they come is the server's
    choice), and a bookmark's object is its resourceVersion only."""
    out: list[dict[str, Any]] = []
    for event in events:
        if event.get("type") == "BOOKMARK":
            if not out or out[-1]["type"] != "BOOKMARK":
                out.append({"type": "BOOKMARK"})
            continue
        out.append({"type": event.get("type"), "object": norm.value(event.get("object"))})
    return out


def normalise(case: Case, transcript: Transcript) -> dict[str, Any]:
    """The comparable form of ``case``'s transcript."""
    norm = Normaliser(case, Aliases(transcript))
    setup: list[Any] = []
    for entry in transcript[:-1]:
        setup.append(entry.answer.status if entry.reached is None else {"wait": entry.reached})
    last = transcript[-1].answer
    test: dict[str, Any] = {"status": last.status}
    if case.test.watch is not None and last.status == 200:
        test["events"] = _events(last.events, norm)
        if case.test.watch.unordered:
            test["events"].sort(key=lambda e: (str(e["type"]), json.dumps(e.get("object"), sort_keys=True)))
    else:
        test["body"] = norm.value(last.body)
    return {"setup": setup, "test": test}


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    """The paths at which ``a`` and ``b`` differ. A list of another length differs as a whole, and
    so do two objects of different kinds (an object and a Status): their fields do not compare."""
    if isinstance(a, dict) and isinstance(b, dict):
        if "kind" in a and "kind" in b and a["kind"] != b["kind"]:
            return [path]
        out: list[str] = []
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                out.append(sub)
            else:
                out.extend(diff(a[key], b[key], sub))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out.extend(diff(x, y, f"{path}[{i}]"))
        return out
    return [] if a == b else [path]
