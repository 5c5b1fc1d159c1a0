"""The sandbox's in-memory object store: Kubernetes object semantics without the HTTP.

One `Store` holds every object of every served resource, hands out copies, and implements what a
real kube-apiserver + etcd + garbage collector do to objects: uid, one global monotonic
resourceVersion carried by each write's watch event, generation, generateName, namespaces that must
exist, AlreadyExists / Conflict, status-subresource semantics, finalizers and deletionTimestamp,
graceful pod deletion, ownerReference garbage collection (background, foreground, orphan),
namespace and CRD deletion cascades, watches with a bounded history (410 Gone when too old) and
bookmarks, list with limit/continue.

It is synchronous and single-threaded: every call happens on one asyncio loop (the HTTP server's
and the simulated cluster's). Stored objects are never mutated in place: every write builds a new
dict, serializes it once, and keeps the JSON text next to it, so reads are a `json.loads` and watch
events are written to HTTP clients without re-serializing.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import json
import logging
import random
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from gangq.sandbox.builtin import BUILTIN_RESOURCES, ResourceInfo

__all__ = ["ApiError", "ResourceInfo", "Store", "Watch", "WatchEvent"]

log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
_PATCH_ALIASES = {
    "merge": MERGE,
    MERGE: MERGE,
    "json": JSON_PATCH,
    JSON_PATCH: JSON_PATCH,
    "strategic": STRATEGIC,
    STRATEGIC: STRATEGIC,
    "apply": APPLY,
    APPLY: APPLY,
    "application/apply-patch+json": APPLY,
}

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_GEN_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
def _loads(text: str) -> dict[str, Any]:
    """A stored object from its JSON text (the store only ever stores objects)."""
    obj: dict[str, Any] = json.loads(text)
    return obj

FOREGROUND = "foregroundDeletion"
CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"


# ------------------------------------------------------------------------------------------- errors


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


def _details(info: ResourceInfo, name: str | None, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": info.plural}
    if name:
        d["name"] = name
    if info.group:
        d["group"] = info.group
    d.update(extra)
    return d


def not_found(info: ResourceInfo, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(info)} "{name}" not found', details=_details(info, name))


def conflict(info: ResourceInfo, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    msg = f'Operation cannot be fulfilled on {_qualified(info)} "{name}": {why}'
    return ApiError(409, "Conflict", msg, details=_details(info, name))


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


# ------------------------------------------------------------------------------------------ helpers


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _ts(offset: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset))


def _copy_in(value: Any, what: str) -> Any:
    """A private deep copy of caller input that is also guaranteed to be plain JSON."""
    try:
        return json.loads(_dumps(value))
    except (TypeError, ValueError) as e:
        raise bad_request(f"{what} is not valid JSON: {e}") from None


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class _Entry:
    __slots__ = ("obj", "raw")

    def __init__(self, obj: dict[str, Any], raw: str) -> None:
        self.obj = obj
        self.raw = raw


class WatchEvent:
    """One watch event. `obj` is shared and must not be mutated; `raw` is the object's JSON text."""

    __slots__ = ("_line", "info", "ns", "obj", "old", "raw", "rv", "type")

    def __init__(
        self,
        rv: int,
        type: str,
        info: ResourceInfo | None,
        ns: str,
        obj: dict[str, Any],
        raw: str,
        old: dict[str, Any] | None = None,
    ) -> None:
        self.rv = rv
        self.type = type
        self.info = info
        self.ns = ns
        self.obj = obj
        self.raw = raw
        self.old = old
        self._line: bytes | None = None

    def line(self) -> bytes:
        """The newline-terminated JSON watch frame, serialized once and cached."""
        ln = self._line
        if ln is None:
            ln = self._line = ('{"type":"' + self.type + '","object":' + self.raw + "}\n").encode()
        return ln

    def retyped(self, type: str) -> WatchEvent:
        return WatchEvent(self.rv, type, self.info, self.ns, self.obj, self.raw, self.old)

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "object": _loads(self.raw)}


def _selectors(info: ResourceInfo, label_selector: str | None, field_selector: str | None) -> tuple[Any, Any]:
    """Parsed (label matcher | None, field matcher | None); 400 on a bad or unsupported selector."""
    from gangq.sandbox import selection

    lm = fm = None
    try:
        if label_selector and label_selector.strip():
            lm = selection.parse_label_selector(label_selector)
        if field_selector and field_selector.strip():
            fm = selection.parse_field_selector(field_selector, kind=info.kind)
    except selection.SelectorError as e:
        raise bad_request(str(e)) from None
    return lm, fm


def _matches(lm: Any, fm: Any, obj: dict[str, Any]) -> bool:
    if lm is not None and not lm.matches((obj.get("metadata") or {}).get("labels") or {}):
        return False
    return fm is None or fm.matches(obj)


# -------------------------------------------------------------------------------------------- watch


class Watch:
    """A watch on one resource: an async iterator of {"type", "object"} dicts; `.close()` ends it.

    The server uses `next_events()` instead, which returns the shared `WatchEvent`s (with their
    cached JSON lines) in batches.
    """

    __slots__ = (
        "_closed",
        "_fm",
        "_last_sent",
        "_lm",
        "_q",
        "_store",
        "_waiter",
        "bookmark_interval",
        "bookmarks",
        "info",
        "namespace",
    )

    def __init__(
        self,
        store: Store,
        info: ResourceInfo,
        namespace: str | None,
        lm: Any,
        fm: Any,
        bookmarks: bool,
        bookmark_interval: float,
    ) -> None:
        self._store = store
        self.info = info
        self.namespace = namespace
        self._lm = lm
        self._fm = fm
        self.bookmarks = bookmarks
        self.bookmark_interval = bookmark_interval
        self._q: deque[WatchEvent] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._last_sent = time.monotonic()

    # called by the store, synchronously, for every event of this resource
    def _offer(self, ev: WatchEvent) -> None:
        if self.namespace is not None and ev.ns != self.namespace:
            return
        lm, fm = self._lm, self._fm
        if lm is None and fm is None:
            self._put(ev)
            return
        new = _matches(lm, fm, ev.obj)
        if ev.type == "MODIFIED":
            old = ev.old is not None and _matches(lm, fm, ev.old)
            if new and old:
                self._put(ev)
            elif new:
                self._put(ev.retyped("ADDED"))
            elif old:
                self._put(ev.retyped("DELETED"))
        elif new:
            self._put(ev)

    def _put(self, ev: WatchEvent) -> None:
        if self._closed:
            return
        q = self._q
        if len(q) >= self._store.max_watch_queue:
            # a consumer this far behind is cut off, as the real apiserver does; it re-lists and re-watches
            log.warning("sandbox watch on %s fell %d events behind; closing it", self.info.plural, len(q))
            self._store._unregister(self)
            self._closed = True
            return
        q.append(ev)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _error(self, status: dict[str, Any]) -> None:
        """Queue an ERROR event and end the watch after it."""
        self._put(WatchEvent(0, "ERROR", None, "", status, _dumps(status)))
        self._store._unregister(self)
        self._closed = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    @property
    def closed(self) -> bool:
        return self._closed and not self._q

    def close(self) -> None:
        """Stop the watch (idempotent); pending events are dropped."""
        self._store._unregister(self)
        self._closed = True
        self._q.clear()
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def bookmark(self) -> WatchEvent:
        info = self.info
        obj = {
            "kind": info.kind,
            "apiVersion": info.api_version,
            "metadata": {"resourceVersion": str(self._store._rv)},
        }
        return WatchEvent(self._store._rv, "BOOKMARK", info, "", obj, _dumps(obj))

    async def next_events(self, timeout: float | None = None) -> list[WatchEvent] | None:
        """Queued events (at least one), a BOOKMARK when one is due, [] on timeout, None once the watch ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._q:
                out = list(self._q)
                self._q.clear()
                self._last_sent = time.monotonic()
                return out
            if self._closed:
                return None
            now = time.monotonic()
            wait = None if deadline is None else deadline - now
            if self.bookmarks:
                due = self._last_sent + self.bookmark_interval - now
                if due <= 0:
                    self._last_sent = now
                    return [self.bookmark()]
                wait = due if wait is None else min(wait, due)
            if wait is not None and wait <= 0:
                return []
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiter = fut
            try:
                if wait is None:
                    await fut
                else:
                    await asyncio.wait_for(fut, wait)
            except TimeoutError:
                pass
            finally:
                self._waiter = None

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self._q:
            got = await self.next_events(None)
            if got is None:
                raise StopAsyncIteration
            for e in reversed(got):
                self._q.appendleft(e)
        return self._q.popleft().as_dict()


# -------------------------------------------------------------------------------------------- store


class Store:
    """In-memory Kubernetes object store (see the module docstring)."""

    def __init__(self, *, history: int = 20000, bookmark_interval: float = 30.0,
                 max_watch_queue: int = 200_000) -> None:
        if history < 1:
            raise ValueError(f"Store history must be >= 1, got {history}")
        self.history = history
        self.bookmark_interval = bookmark_interval
        self.max_watch_queue = max_watch_queue
        self.dry_run = False  # set by dry_run(): writes are checked and answered but not stored
        self._rv = 0
        self._resources: dict[tuple[str, str], ResourceInfo] = {}
        self._data: dict[tuple[str, str], dict[str, dict[str, _Entry]]] = {}
        self._hist: list[WatchEvent] = []
        self._evicted_rv = 0
        self._watches: dict[tuple[str, str], list[Watch]] = {}
        self._subs: list[Callable[[str, ResourceInfo, dict[str, Any]], None]] = []
        self._by_uid: dict[str, tuple[tuple[str, str], str, str]] = {}
        self._dependents: dict[str, set[tuple[tuple[str, str], str, str]]] = {}
        self._ns_counts: dict[str, int] = {}
        self._crd_of: dict[tuple[str, str], str] = {}  # served resource -> CRD name
        self.resources_version = 0  # bumped whenever the set of served resources changes
        for info in BUILTIN_RESOURCES():
            self._register(info)
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create("", "namespaces", {"metadata": {"name": ns}})

    @contextlib.contextmanager
    def dry_run_mode(self) -> Iterator[None]:
        """Within this block, writes are validated and their would-be result returned, but nothing is
        stored, no resourceVersion is used and nothing cascades (dryRun=All)."""
        prev = self.dry_run
        self.dry_run = True
        try:
            yield
        finally:
            self.dry_run = prev

    # ------------------------------------------------------------------ resources
    def _register(self, info: ResourceInfo) -> None:
        self._resources[info.key] = info
        self._data.setdefault(info.key, {})
        self.resources_version += 1

    def resource(self, group: str, plural: str) -> ResourceInfo:
        info = self._resources.get((group, plural))
        if info is None:
            gv = f"{group}/" if group else ""
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({gv}{plural})",
                           details=_details(ResourceInfo(group, "v1", plural, "Unknown"), None))
        return info

    def resources(self) -> list[ResourceInfo]:
        return list(self._resources.values())

    def find_resource(self, group: str, version: str, plural: str) -> ResourceInfo:
        info = self.resource(group, plural)
        if info.version != version:
            return self.resource(group + "/" + version, plural)  # raises 404
        return info

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    # ------------------------------------------------------------------ reads
    def _entry(self, info: ResourceInfo, namespace: str | None, name: str) -> _Entry:
        ns = (namespace or "") if info.namespaced else ""
        e = self._data[info.key].get(ns, {}).get(name)
        if e is None:
            raise not_found(info, name)
        return e

    def get(self, group: str, plural: str, namespace: str | None, name: str) -> dict[str, Any]:
        info = self.resource(group, plural)
        return _loads(self._entry(info, namespace, name).raw)

    def get_raw(self, group: str, plural: str, namespace: str | None, name: str) -> str:
        """The stored JSON text of an object (no copy, for the HTTP server)."""
        return self._entry(self.resource(group, plural), namespace, name).raw

    def _iter(self, info: ResourceInfo, namespace: str | None) -> Iterator[tuple[str, str, _Entry]]:
        per_ns = self._data[info.key]
        if info.namespaced and namespace:
            for name, e in per_ns.get(namespace, {}).items():
                yield namespace, name, e
        else:
            for ns, d in per_ns.items():
                for name, e in d.items():
                    yield ns, name, e

    def _list_entries(
        self,
        info: ResourceInfo,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        limit: int | None,
        continue_token: str | None,
    ) -> tuple[list[_Entry], str, str | None, int | None]:
        lm, fm = _selectors(info, label_selector, field_selector)
        start: tuple[str, str] | None = None
        rv = self._rv
        if continue_token:
            try:
                tok = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                start = (tok["ns"], tok["name"])
                rv = int(tok["rv"])
            except (ValueError, KeyError, TypeError):
                raise bad_request("continue key is not valid: incorrect encoded start resourceVersion") from None
            if rv < self._evicted_rv:
                raise ApiError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. "
                    "You can start a new list without the continue parameter.",
                )
        items = sorted(self._iter(info, namespace), key=lambda t: (t[0], t[1]))
        if start is not None:
            i = bisect.bisect_right(items, start, key=lambda t: (t[0], t[1]))
            items = items[i:]
        out: list[_Entry] = []
        cont = None
        remaining = None
        last: tuple[str, str] = ("", "")
        for idx, (ns, name, e) in enumerate(items):
            if (lm is not None or fm is not None) and not _matches(lm, fm, e.obj):
                continue
            if limit and len(out) >= limit:
                tok = {"rv": rv, "ns": last[0], "name": last[1]}
                cont = base64.urlsafe_b64encode(json.dumps(tok).encode()).decode()
                if lm is None and fm is None:
                    remaining = len(items) - idx
                break
            out.append(e)
            last = (ns, name)
        return out, str(rv), cont, remaining

    def list_raw(
        self,
        group: str,
        plural: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> str:
        """The List object as JSON text, assembled from the stored texts."""
        info = self.resource(group, plural)
        entries, rv, cont, remaining = self._list_entries(
            info, namespace, label_selector, field_selector, limit, continue_token
        )
        meta: dict[str, Any] = {"resourceVersion": rv}
        if cont:
            meta["continue"] = cont
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        head = _dumps({"kind": info.list_kind, "apiVersion": info.api_version, "metadata": meta})
        return head[:-1] + ',"items":[' + ",".join(e.raw for e in entries) + "]}"

    def list(
        self,
        group: str,
        plural: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> dict[str, Any]:
        raw = self.list_raw(
            group,
            plural,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
        )
        return _loads(raw)

    def count(self, group: str, plural: str, namespace: str | None = None) -> int:
        info = self.resource(group, plural)
        per_ns = self._data[info.key]
        if info.namespaced and namespace:
            return len(per_ns.get(namespace, {}))
        return sum(len(d) for d in per_ns.values())

    # ------------------------------------------------------------------ commit
    def _commit(
        self,
        info: ResourceInfo,
        type_: str,
        ns: str,
        name: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> _Entry:
        """Stamp a new resourceVersion on `obj` (whose metadata dict must be private), store it, notify."""
        if self.dry_run:
            meta = obj["metadata"]
            if old is not None:
                meta["resourceVersion"] = old["metadata"]["resourceVersion"]
            else:
                meta.pop("resourceVersion", None)
            return _Entry(obj, _dumps(obj))
        self._rv += 1
        rv = self._rv
        meta = obj["metadata"]
        meta["resourceVersion"] = str(rv)
        raw = _dumps(obj)
        entry = _Entry(obj, raw)
        key = info.key
        if type_ == "DELETED":
            d = self._data[key].get(ns)
            if d is not None:
                d.pop(name, None)
                if not d:
                    del self._data[key][ns]
        else:
            self._data[key].setdefault(ns, {})[name] = entry
        # indexes
        uid = meta.get("uid")
        if type_ == "ADDED":
            if uid:
                self._by_uid[uid] = (key, ns, name)
            if ns:
                self._ns_counts[ns] = self._ns_counts.get(ns, 0) + 1
        elif type_ == "DELETED":
            if uid:
                self._by_uid.pop(uid, None)
            if ns:
                self._ns_counts[ns] = self._ns_counts.get(ns, 1) - 1
        old_owners = _owner_uids(old) if old is not None else ()
        new_owners = _owner_uids(obj) if type_ != "DELETED" else ()
        if old_owners != new_owners:
            ref = (key, ns, name)
            for o in old_owners:
                if o not in new_owners:
                    s = self._dependents.get(o)
                    if s is not None:
                        s.discard(ref)
                        if not s:
                            del self._dependents[o]
            for o in new_owners:
                self._dependents.setdefault(o, set()).add(ref)
        # history and watchers
        ev = WatchEvent(rv, type_, info, ns, obj, raw, old)
        hist = self._hist
        hist.append(ev)
        if len(hist) > 2 * self.history:
            cut = len(hist) - self.history
            self._evicted_rv = hist[cut - 1].rv
            del hist[:cut]
        for w in self._watches.get(key, ()):
            w._offer(ev)
        for cb in tuple(self._subs):
            try:
                cb(type_, info, _loads(raw))
            except Exception:
                log.exception("sandbox store subscriber %r failed on %s %s/%s", cb, type_, ns, name)
        return entry

    def subscribe(self, callback: Callable[[str, ResourceInfo, dict[str, Any]], None]) -> Callable[[], None]:
        """Call `callback(event_type, info, object_copy)` synchronously after every committed change."""
        self._subs.append(callback)

        def unsubscribe() -> None:
            if callback in self._subs:
                self._subs.remove(callback)

        return unsubscribe

    # ------------------------------------------------------------------ create
    def _check_type(self, info: ResourceInfo, obj: Any) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise bad_request(f"the body of a {info.kind} must be a JSON object, got {type(obj).__name__}")
        av = obj.get("apiVersion")
        kind = obj.get("kind")
        if av is not None and av != info.api_version:
            raise bad_request(
                f"the API version in the data ({av}) does not match the expected API version ({info.api_version})"
            )
        if kind is not None and kind != info.kind:
            raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({info.kind})")
        obj["apiVersion"] = info.api_version
        obj["kind"] = info.kind
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request(f"{info.kind}.metadata must be an object")
        return meta

    def _namespace_of(self, info: ResourceInfo, namespace: str | None, meta: dict[str, Any]) -> str:
        if not info.namespaced:
            meta.pop("namespace", None)
            return ""
        body_ns = meta.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        ns = namespace or body_ns
        if not ns:
            raise bad_request(f"a namespace is required to create a {info.kind}")
        meta["namespace"] = ns
        return str(ns)

    def create(self, group: str, plural: str, obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        info = self.resource(group, plural)
        return _loads(self._create(info, _copy_in(obj, info.kind), namespace).raw)

    def create_raw(self, group: str, plural: str, obj: dict[str, Any], *, namespace: str | None = None) -> str:
        """Like create() but takes ownership of `obj` (no copy) and returns the stored JSON text."""
        info = self.resource(group, plural)
        return self._create(info, obj, namespace).raw

    def _create(self, info: ResourceInfo, obj: Any, namespace: str | None) -> _Entry:
        meta = self._check_type(info, obj)
        ns = self._namespace_of(info, namespace, meta)
        name = meta.get("name")
        if not name:
            gen = meta.get("generateName")
            if not gen:
                raise invalid(info, "", [("metadata.name", "FieldValueRequired",
                                          "Required value: name or generateName is required")])
            for _ in range(10):
                name = str(gen) + "".join(random.choice(_GEN_CHARS) for _ in range(5))
                if name not in self._data[info.key].get(ns, {}):
                    break
            meta["name"] = name
        if not isinstance(name, str):
            raise invalid(info, str(name), [("metadata.name", "FieldValueInvalid", "Invalid value: must be a string")])
        self._validate_name(info, name)
        problems = _meta_problems(meta)
        if problems:
            raise invalid(info, name, problems)
        if ns:
            nse = self._data[("", "namespaces")].get("", {}).get(ns)
            if nse is None:
                raise not_found(self._resources[("", "namespaces")], ns)
            if nse.obj["metadata"].get("deletionTimestamp"):
                raise ApiError(
                    403,
                    "Forbidden",
                    f'{info.plural} "{name}" is forbidden: unable to create new content in namespace {ns} '
                    "because it is being terminated",
                    details=_details(info, name, causes=[{"reason": "NamespaceTerminating",
                                                          "message": f"namespace {ns} is being terminated",
                                                          "field": "metadata.namespace"}]),
                )
        if info.custom:
            crd = self._data[("apiextensions.k8s.io", "customresourcedefinitions")].get("", {}).get(
                self._crd_of.get(info.key, ""))
            if crd is not None and crd.obj["metadata"].get("deletionTimestamp"):
                raise ApiError(405, "MethodNotAllowed",
                               "create not allowed while custom resource definition is terminating")
        if name in self._data[info.key].get(ns, {}):
            raise ApiError(409, "AlreadyExists", f'{_qualified(info)} "{name}" already exists',
                           details=_details(info, name))
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        if info.generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if "status" in info.subresources:
            obj.pop("status", None)
        self._prepare_create(info, obj, ns, name)
        if info.custom and info.schema is not None:
            obj = self._apply_schema(info, obj, name)
        entry = self._commit(info, "ADDED", ns, name, obj, None)
        if info.key == ("apiextensions.k8s.io", "customresourcedefinitions") and not self.dry_run:
            self._crd_changed(entry.obj)
        return entry

    def _validate_name(self, info: ResourceInfo, name: str) -> None:
        if info.key == ("", "namespaces"):
            ok = len(name) <= 63 and _DNS_LABEL.match(name) is not None
            what = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"
        else:
            ok = len(name) <= 253 and _DNS_SUBDOMAIN.match(name) is not None
            what = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                    "'-' or '.', and must start and end with an alphanumeric character")
        if info.key in (("", "events"), ("events.k8s.io", "events"), ("", "nodes")):
            ok = ok or (len(name) <= 253 and re.match(r"^[A-Za-z0-9][-A-Za-z0-9_.]*$", name) is not None)
        if not ok:
            raise invalid(info, name, [("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {what}')])

    def _apply_schema(self, info: ResourceInfo, obj: dict[str, Any], name: str) -> dict[str, Any]:
        try:
            from gangq.sandbox import schema as sch
        except ImportError:  # pragma: no cover - only while the schema module is being written
            log.warning("gangq.sandbox.schema is not available: %s objects are not pruned", info.kind)
            return obj
        assert info.schema is not None
        obj = sch.prune(obj, info.schema)
        obj = sch.apply_defaults(obj, info.schema)
        errors = sch.validate(obj, info.schema)
        if errors:
            raise invalid(info, name, [(f, sch.error_cause_reason(m), m) for f, m in errors])
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            obj["metadata"] = dict(meta)
        return obj

    # ------------------------------------------------------------------ kind-specific
    def _prepare_create(self, info: ResourceInfo, obj: dict[str, Any], ns: str, name: str) -> None:
        key = info.key
        if key == ("", "pods"):
            _default_pod(info, obj, name)
        elif key == ("batch", "jobs"):
            _default_job(info, obj, name)
        elif key == ("", "namespaces"):
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
            labels = obj["metadata"].setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = name
        elif key == ("", "services"):
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            if spec.get("clusterIP") is None:
                n = self._rv + 1
                spec["clusterIP"] = f"10.96.{(n >> 8) & 255}.{n & 255}"
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
            spec.setdefault("sessionAffinity", "None")
            for p in spec.get("ports") or []:
                if isinstance(p, dict):
                    p.setdefault("protocol", "TCP")
                    p.setdefault("targetPort", p.get("port"))
            obj["status"] = {"loadBalancer": {}}
        elif key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._validate_crd(info, obj, name, creating=True)
            names = obj["spec"]["names"]
            accepted = dict(names)
            accepted.setdefault("singular", names["kind"].lower())
            accepted.setdefault("listKind", names["kind"] + "List")
            now = _now()
            obj["status"] = {
                "acceptedNames": accepted,
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                     "message": "no conflicts found", "lastTransitionTime": now},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                     "message": "the initial names have been accepted", "lastTransitionTime": now},
                ],
                "storedVersions": [v["name"] for v in obj["spec"]["versions"] if v.get("storage")],
            }
        elif key == ("", "nodes"):
            obj.setdefault("spec", {})

    def _validate_crd(self, info: ResourceInfo, obj: dict[str, Any], name: str, *, creating: bool) -> None:
        spec = obj.get("spec")
        causes: list[tuple[str, str, str]] = []
        if not isinstance(spec, dict):
            raise invalid(info, name, [("spec", "FieldValueRequired", "Required value")])
        group = spec.get("group")
        names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
        if not group:
            causes.append(("spec.group", "FieldValueRequired", "Required value"))
        for f in ("plural", "kind"):
            if not names.get(f):
                causes.append((f"spec.names.{f}", "FieldValueRequired", "Required value"))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            causes.append(("spec.scope", "FieldValueNotSupported",
                           'Unsupported value: supported values: "Cluster", "Namespaced"'))
        versions = spec.get("versions")
        if not isinstance(versions, list) or not versions:
            causes.append(("spec.versions", "FieldValueRequired", "Required value: must have at least one version"))
        else:
            storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
            if len(storage) != 1:
                causes.append(("spec.versions", "FieldValueInvalid",
                               "Invalid value: must have exactly one version marked as storage version"))
        if group and names.get("plural") and name != f"{names['plural']}.{group}":
            causes.append(("metadata.name", "FieldValueInvalid",
                           f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
        if causes:
            raise invalid(info, name, causes)
        if creating:
            key = (group, names["plural"])
            if key in self._resources and self._crd_of.get(key) != name:
                raise invalid(info, name, [("spec.names.plural", "FieldValueInvalid",
                                            f'Invalid value: "{names["plural"]}": is already served by the server')])

    def _crd_changed(self, crd: dict[str, Any]) -> None:
        """(Re)register the served resource of a CRD."""
        spec = crd["spec"]
        versions = [v for v in spec["versions"] if v.get("served", True)]
        if not versions:
            return
        v = next((v for v in versions if v.get("storage")), versions[0])
        names = spec["names"]
        subres = frozenset(k for k in (v.get("subresources") or {}) if k in ("status", "scale"))
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        info = ResourceInfo(
            spec["group"],
            v["name"],
            names["plural"],
            names["kind"],
            singular=names.get("singular") or names["kind"].lower(),
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            subresources=subres,
            schema=schema,
            printer_columns=v.get("additionalPrinterColumns") or [],
            custom=True,
        )
        if names.get("listKind"):
            info.list_kind = names["listKind"]
        old = self._resources.get(info.key)
        self._register(info)
        self._crd_of[info.key] = crd["metadata"]["name"]
        if old is not None:
            for w in list(self._watches.get(info.key, ())):
                w.info = info

    def _crd_removed(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        if self._crd_of.get(key) != crd["metadata"]["name"]:
            return
        for w in list(self._watches.get(key, ())):
            w.close()
        self._resources.pop(key, None)
        self._data.pop(key, None)
        self._crd_of.pop(key, None)
        self.resources_version += 1

    # ------------------------------------------------------------------ update
    def replace(
        self,
        group: str,
        plural: str,
        namespace: str | None,
        name: str,
        obj: dict[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        info = self.resource(group, plural)
        return _loads(self._replace(info, namespace, name, _copy_in(obj, info.kind), subresource).raw)

    def _replace(
        self, info: ResourceInfo, namespace: str | None, name: str, obj: Any, subresource: str | None
    ) -> _Entry:
        self._check_subresource(info, subresource)
        meta = self._check_type(info, obj)
        if meta.get("name") and meta["name"] != name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if info.namespaced and meta.get("namespace") and namespace and meta["namespace"] != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        old = self._entry(info, namespace, name)
        rv = meta.get("resourceVersion")
        if rv:
            if rv != old.obj["metadata"]["resourceVersion"]:
                raise conflict(info, name)
        elif info.custom:
            raise invalid(info, name, [("metadata.resourceVersion", "FieldValueInvalid",
                                        "Invalid value: 0x0: must be specified for an update")])
        return self._update(info, old, obj, subresource)

    def _check_subresource(self, info: ResourceInfo, subresource: str | None) -> None:
        if subresource is not None and subresource not in info.subresources:
            raise ApiError(404, "NotFound",
                           f"the server could not find the requested resource ({info.plural}/{subresource})")

    def _update(self, info: ResourceInfo, old_e: _Entry, new: dict[str, Any], subresource: str | None) -> _Entry:
        """Common tail of PUT and PATCH: `new` is a private candidate object (top level and metadata may be edited)."""
        old = old_e.obj
        ometa = old["metadata"]
        name = ometa["name"]
        ns = ometa.get("namespace", "") if info.namespaced else ""
        if subresource == "status":
            cand = dict(old)
            if "status" in new:
                cand["status"] = new["status"]
            else:
                cand.pop("status", None)
            cand["metadata"] = dict(ometa)
            new = cand
            meta = new["metadata"]
        else:
            meta = new.get("metadata")
            if not isinstance(meta, dict):
                raise bad_request(f"{info.kind}.metadata must be an object")
            meta = new["metadata"] = dict(meta)
            new["apiVersion"] = info.api_version
            new["kind"] = info.kind
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "name"):
                if k in ometa:
                    meta[k] = ometa[k]
                else:
                    meta.pop(k, None)
            if ns:
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            if "status" in info.subresources:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            if ometa.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or ()) - set(ometa.get("finalizers") or ())
                if added:
                    raise invalid(info, name, [("metadata.finalizers", "FieldValueForbidden",
                                                "Forbidden: no new finalizers can be added if the object is being "
                                                "deleted, "
                                                f"found new finalizers {sorted(added)}")])
            problems = _meta_problems(meta)
            if problems:
                raise invalid(info, name, problems)
            self._validate_update(info, old, new, name)
        if info.custom and info.schema is not None:
            new = self._apply_schema(info, new, name)
            meta = new["metadata"]
        if info.generation:
            gen = int(ometa.get("generation") or 1)
            if subresource is None and _spec_part(new) != _spec_part(old):
                gen += 1
            meta["generation"] = gen
        meta["resourceVersion"] = ometa["resourceVersion"]
        if meta.get("finalizers") == []:
            del meta["finalizers"]
        if new == old:
            return old_e  # a no-op write: no new resourceVersion, no event (like the real apiserver)
        if ometa.get("deletionTimestamp") and not meta.get("finalizers") and not self._pod_pending_grace(info, new):
            if info.key == ("", "namespaces"):  # goes when its content is gone, not on its own updates
                entry = self._commit(info, "MODIFIED", ns, name, new, old)
                if self.dry_run:
                    return entry
                self._maybe_finish_namespace(name)
                cur = self._data[info.key].get("", {}).get(name)
                return cur if cur is not None else entry
            return self._remove(info, ns, name, new, old)
        entry = self._commit(info, "MODIFIED", ns, name, new, old)
        if info.key == ("apiextensions.k8s.io", "customresourcedefinitions") and not self.dry_run:
            self._crd_changed(entry.obj)
        return entry

    def _pod_pending_grace(self, info: ResourceInfo, obj: dict[str, Any]) -> bool:
        """A pod whose deletion is graceful stays until the kubelet deletes it with grace 0."""
        return info.key == ("", "pods") and bool(obj["metadata"].get("deletionGracePeriodSeconds"))

    def _validate_update(self, info: ResourceInfo, old: dict[str, Any], new: dict[str, Any], name: str) -> None:
        key = info.key
        if key == ("", "pods"):
            _validate_pod_update(info, old, new, name)
        elif key == ("batch", "jobs"):
            os_, ns_ = old.get("spec") or {}, new.get("spec") or {}
            if os_.get("selector") != ns_.get("selector"):
                raise invalid(info, name, [("spec.selector", "FieldValueInvalid", "Invalid value: field is immutable")])
            if os_.get("completionMode") != ns_.get("completionMode"):
                raise invalid(info, name, [("spec.completionMode", "FieldValueInvalid",
                                            "Invalid value: field is immutable")])
        elif key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._validate_crd(info, new, name, creating=False)
            for f in ("group", "scope"):
                if (old.get("spec") or {}).get(f) != (new.get("spec") or {}).get(f):
                    raise invalid(info, name, [(f"spec.{f}", "FieldValueInvalid", "Invalid value: field is immutable")])
            if (old["spec"].get("names") or {}).get("plural") != (new["spec"].get("names") or {}).get("plural"):
                raise invalid(info, name, [("spec.names.plural", "FieldValueInvalid",
                                            "Invalid value: field is immutable")])
            if "status" in old:
                new["status"] = dict(old["status"], acceptedNames=dict(new["spec"]["names"]))

    # ------------------------------------------------------------------ patch
    def patch(
        self,
        group: str,
        plural: str,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        info = self.resource(group, plural)
        if isinstance(patch, (bytes, str)):
            patch = self._parse_patch(patch, patch_type)
        else:
            patch = _copy_in(patch, "the patch")
        return _loads(self._patch(info, namespace, name, patch, patch_type, subresource).raw)

    def _parse_patch(self, body: bytes | str, patch_type: str) -> Any:
        try:
            if _PATCH_ALIASES.get(patch_type) == APPLY:
                import yaml

                return yaml.safe_load(body)
            return json.loads(body)
        except Exception as e:
            raise bad_request(f"error decoding patch: {e}") from None

    def _patch(
        self,
        info: ResourceInfo,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str,
        subresource: str | None,
    ) -> _Entry:
        from gangq.sandbox import patching

        self._check_subresource(info, subresource)
        ptype = _PATCH_ALIASES.get(patch_type)
        if ptype is None:
            raise ApiError(415, "UnsupportedMediaType", f'the body of the request was in an unknown format - accepted '
                           f'media types include: {JSON_PATCH}, {MERGE}, {APPLY}'
                           + ("" if info.custom else f", {STRATEGIC}"))
        if ptype == STRATEGIC and info.custom:
            raise ApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format - accepted media types include: "
                           f"{JSON_PATCH}, {MERGE}, {APPLY}")
        if ptype == APPLY:
            if not isinstance(patch, dict):
                raise bad_request("apply patch must be an object")
            ns = (namespace or "") if info.namespaced else ""
            if name not in self._data[info.key].get(ns, {}) and subresource is None:
                body = dict(patch)
                meta = dict(body.get("metadata") or {})
                meta.setdefault("name", name)
                body["metadata"] = meta
                return self._create(info, body, namespace)
        old = self._entry(info, namespace, name)
        try:
            if ptype == MERGE or (ptype == APPLY and info.custom):
                merged = patching.apply_merge_patch(old.obj, patch)
            elif ptype == JSON_PATCH:
                if not isinstance(patch, list):
                    raise bad_request("json patch must be a JSON array of operations")
                merged = patching.apply_json_patch(old.obj, patch)
            else:
                merged = patching.apply_strategic_merge_patch(old.obj, patch, info.kind)
        except patching.PatchError as e:
            if e.code == 422:
                raise invalid(info, name, [("", "FieldValueInvalid", e.message)]) from None
            reason = {400: "BadRequest", 415: "UnsupportedMediaType"}.get(e.code, "BadRequest")
            raise ApiError(e.code, reason, e.message) from None
        if not isinstance(merged, dict):
            raise invalid(info, name, [("", "FieldValueInvalid", "the patch produced a non-object")])
        meta = merged.get("metadata")
        if not isinstance(meta, dict):
            raise invalid(info, name, [("metadata", "FieldValueRequired", "Required value")])
        rv = meta.get("resourceVersion")
        if rv and rv != old.obj["metadata"]["resourceVersion"]:
            raise conflict(info, name)
        if meta.get("name") != name:
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        return self._update(info, old, merged, subresource)

    # ------------------------------------------------------------------ binding
    def bind(self, namespace: str, pod_name: str, node_name: str) -> None:
        """pods/binding: set spec.nodeName and the PodScheduled condition (409 if already bound)."""
        info = self._resources[("", "pods")]
        old = self._entry(info, namespace, pod_name)
        spec = old.obj.get("spec") or {}
        if spec.get("nodeName"):
            raise conflict(info, pod_name, f"pod {pod_name} is already assigned to node \"{spec['nodeName']}\"")
        if old.obj["metadata"].get("deletionTimestamp"):
            raise conflict(info, pod_name, "pod is being deleted, cannot be assigned to a host")
        if spec.get("schedulingGates"):
            raise conflict(info, pod_name, "pod has scheduling gates, cannot be assigned to a host")
        new = dict(old.obj)
        new["spec"] = dict(spec, nodeName=node_name)
        status = dict(new.get("status") or {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": _now()})
        status["conditions"] = conds
        new["status"] = status
        new["metadata"] = dict(old.obj["metadata"])
        self._commit(info, "MODIFIED", namespace, pod_name, new, old.obj)

    # ------------------------------------------------------------------ delete
    def delete(
        self,
        group: str,
        plural: str,
        namespace: str | None,
        name: str,
        *,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
        preconditions: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        info = self.resource(group, plural)
        entry = self._delete(info, namespace, name, propagation_policy, grace_period_seconds, preconditions)
        return _loads(entry.raw)

    def _delete(
        self,
        info: ResourceInfo,
        namespace: str | None,
        name: str,
        policy: str | None,
        grace: int | None,
        preconditions: dict[str, Any] | None = None,
    ) -> _Entry:
        e = self._entry(info, namespace, name)
        obj = e.obj
        meta = obj["metadata"]
        ns = meta.get("namespace", "") if info.namespaced else ""
        if preconditions:
            puid = preconditions.get("uid")
            if puid and puid != meta.get("uid"):
                raise conflict(info, name, f"Precondition failed: UID in precondition: {puid}, "
                               f"UID in object meta: {meta.get('uid')}")
            prv = preconditions.get("resourceVersion")
            if prv and prv != meta.get("resourceVersion"):
                raise conflict(info, name, f"Precondition failed: ResourceVersion in precondition: {prv}, "
                               f"ResourceVersion in object meta: {meta.get('resourceVersion')}")
        if policy not in (None, "Foreground", "Background", "Orphan"):
            raise invalid(info, name, [("propagationPolicy", "FieldValueNotSupported",
                                        f'Unsupported value: "{policy}": supported values: "Foreground", '
                                        '"Background", "Orphan"')])
        if policy is None:
            policy = "Orphan" if info.key == ("batch", "jobs") else "Background"
        key = info.key
        if key == ("", "namespaces"):
            return self._delete_namespace(info, e)
        if key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            return self._delete_crd(info, e)
        # pods: graceful deletion
        pod_grace = 0
        if key == ("", "pods"):
            spec = obj.get("spec") or {}
            phase = (obj.get("status") or {}).get("phase")
            g = grace if grace is not None else spec.get("terminationGracePeriodSeconds", 30)
            g = max(0, int(g or 0))
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                g = 0
            pod_grace = g
        if meta.get("deletionTimestamp"):
            current = int(meta.get("deletionGracePeriodSeconds") or 0)
            if key == ("", "pods") and grace is not None and pod_grace < current:
                new = dict(obj)
                new["metadata"] = nm = dict(meta)
                nm["deletionGracePeriodSeconds"] = pod_grace
                nm["deletionTimestamp"] = _ts(pod_grace)
                if pod_grace == 0 and not nm.get("finalizers"):
                    return self._remove(info, ns, name, new, obj)
                return self._commit(info, "MODIFIED", ns, name, new, obj)
            return e
        if policy == "Orphan" and not self.dry_run:
            self._orphan(meta.get("uid"))
        finalizers = list(meta.get("finalizers") or ())
        if policy == "Foreground" and self._dependents.get(meta.get("uid", "")) and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        if finalizers or pod_grace > 0:
            new = dict(obj)
            new["metadata"] = nm = dict(meta)
            nm["deletionTimestamp"] = _ts(pod_grace)
            nm["deletionGracePeriodSeconds"] = pod_grace
            if finalizers:
                nm["finalizers"] = finalizers
            if info.generation:
                nm["generation"] = int(nm.get("generation") or 1) + 1
            entry = self._commit(info, "MODIFIED", ns, name, new, obj)
            if FOREGROUND in finalizers and not self.dry_run:
                self._delete_dependents(meta["uid"], "Foreground")
            return entry
        return self._remove(info, ns, name, dict(obj, metadata=dict(meta)), obj)

    def _remove(self, info: ResourceInfo, ns: str, name: str, final: dict[str, Any], old: dict[str, Any]) -> _Entry:
        """Remove an object for good (DELETED event), then run what its removal triggers."""
        entry = self._commit(info, "DELETED", ns, name, final, old)
        if self.dry_run:
            return entry
        meta = final["metadata"]
        uid = meta.get("uid")
        # background GC of dependents
        if uid and uid in self._dependents:
            self._delete_dependents(uid, "Background")
        # owners waiting in foreground deletion
        for ref in meta.get("ownerReferences") or ():
            self._maybe_finish_foreground(ref.get("uid"))
        if ns:
            self._maybe_finish_namespace(ns)
        if info.custom:
            crd_name = self._crd_of.get(info.key)
            if crd_name is not None:
                self._maybe_finish_crd(crd_name)
        if info.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_removed(final)
        return entry

    def _delete_dependents(self, owner_uid: str, policy: str) -> None:
        for key, ns, name in sorted(self._dependents.get(owner_uid, ())):
            info = self._resources.get(key)
            if info is None:
                continue
            e = self._data[key].get(ns, {}).get(name)
            if e is None:
                continue
            others = [r for r in e.obj["metadata"].get("ownerReferences") or ()
                      if r.get("uid") != owner_uid and r.get("uid") in self._by_uid]
            if others and policy == "Background":
                new = dict(e.obj)
                new["metadata"] = nm = dict(e.obj["metadata"])
                nm["ownerReferences"] = [r for r in nm.get("ownerReferences") or () if r.get("uid") != owner_uid]
                self._commit(info, "MODIFIED", ns, name, new, e.obj)
                continue
            try:
                self._delete(info, ns, name, "Foreground" if policy == "Foreground" else "Background", None)
            except ApiError:
                log.debug("garbage collection of %s %s/%s failed", key, ns, name, exc_info=True)

    def _orphan(self, owner_uid: str | None) -> None:
        if not owner_uid:
            return
        for key, ns, name in sorted(self._dependents.get(owner_uid, ())):
            info = self._resources.get(key)
            e = self._data.get(key, {}).get(ns, {}).get(name)
            if info is None or e is None:
                continue
            new = dict(e.obj)
            new["metadata"] = nm = dict(e.obj["metadata"])
            refs = [r for r in nm.get("ownerReferences") or () if r.get("uid") != owner_uid]
            if refs:
                nm["ownerReferences"] = refs
            else:
                nm.pop("ownerReferences", None)
            self._commit(info, "MODIFIED", ns, name, new, e.obj)

    def _maybe_finish_foreground(self, owner_uid: str | None) -> None:
        if not owner_uid or self._dependents.get(owner_uid):
            return
        loc = self._by_uid.get(owner_uid)
        if loc is None:
            return
        key, ns, name = loc
        e = self._data[key].get(ns, {}).get(name)
        if e is None or FOREGROUND not in (e.obj["metadata"].get("finalizers") or ()):
            return
        info = self._resources[key]
        new = dict(e.obj)
        new["metadata"] = nm = dict(e.obj["metadata"])
        nm["finalizers"] = [f for f in nm["finalizers"] if f != FOREGROUND]
        self._update(info, e, new, None)

    def _delete_namespace(self, info: ResourceInfo, e: _Entry) -> _Entry:
        obj = e.obj
        name = obj["metadata"]["name"]
        if not obj["metadata"].get("deletionTimestamp"):
            new = dict(obj)
            new["metadata"] = nm = dict(obj["metadata"])
            nm["deletionTimestamp"] = _now()
            nm["deletionGracePeriodSeconds"] = 0
            new["status"] = {"phase": "Terminating"}
            e = self._commit(info, "MODIFIED", "", name, new, obj)
            if self.dry_run:
                return e
            for rinfo in list(self._resources.values()):
                if not rinfo.namespaced:
                    continue
                for oname in sorted(self._data[rinfo.key].get(name, {})):
                    try:
                        self._delete(rinfo, name, oname, "Background", None)
                    except ApiError:
                        log.debug("namespace %s cleanup of %s failed", name, oname, exc_info=True)
        self._maybe_finish_namespace(name)
        cur = self._data[info.key].get("", {}).get(name)
        return cur if cur is not None else e

    def _maybe_finish_namespace(self, ns: str) -> None:
        if self._ns_counts.get(ns, 0) > 0:
            return
        info = self._resources[("", "namespaces")]
        e = self._data[info.key].get("", {}).get(ns)
        if e is None or not e.obj["metadata"].get("deletionTimestamp"):
            return
        if e.obj["metadata"].get("finalizers"):
            return
        self._ns_counts.pop(ns, None)
        final = dict(e.obj)
        final["metadata"] = dict(e.obj["metadata"])
        final["spec"] = {}
        self._remove(info, "", ns, final, e.obj)

    def _delete_crd(self, info: ResourceInfo, e: _Entry) -> _Entry:
        obj = e.obj
        name = obj["metadata"]["name"]
        if not obj["metadata"].get("deletionTimestamp"):
            new = dict(obj)
            new["metadata"] = nm = dict(obj["metadata"])
            nm["deletionTimestamp"] = _now()
            nm["deletionGracePeriodSeconds"] = 0
            nm["finalizers"] = [*(nm.get("finalizers") or ()), CRD_CLEANUP]
            e = self._commit(info, "MODIFIED", "", name, new, obj)
            if self.dry_run:
                return e
            key = next((k for k, v in self._crd_of.items() if v == name), None)
            if key is not None:
                rinfo = self._resources[key]
                for ns, oname, _ in list(self._iter(rinfo, None)):
                    try:
                        self._delete(rinfo, ns, oname, "Background", None)
                    except ApiError:
                        log.debug("CRD %s cleanup of %s failed", name, oname, exc_info=True)
        self._maybe_finish_crd(name)
        cur = self._data[info.key].get("", {}).get(name)
        return cur if cur is not None else e

    def _maybe_finish_crd(self, crd_name: str) -> None:
        info = self._resources[("apiextensions.k8s.io", "customresourcedefinitions")]
        e = self._data[info.key].get("", {}).get(crd_name)
        if e is None or not e.obj["metadata"].get("deletionTimestamp"):
            return
        key = next((k for k, v in self._crd_of.items() if v == crd_name), None)
        if key is not None and any(self._data.get(key, {}).values()):
            return
        new = dict(e.obj)
        new["metadata"] = nm = dict(e.obj["metadata"])
        nm["finalizers"] = [f for f in nm.get("finalizers") or () if f != CRD_CLEANUP]
        self._update(info, e, new, None)

    # ------------------------------------------------------------------ watch
    def watch(
        self,
        group: str,
        plural: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = False,
        bookmark_interval: float | None = None,
    ) -> Watch:
        """Start a watch. No resourceVersion (or "0"): synthetic ADDED events for the current state, then
        live events. A resourceVersion: every later event from the history, or one ERROR 410 event if
        the history no longer reaches back that far."""
        info = self.resource(group, plural)
        lm, fm = _selectors(info, label_selector, field_selector)
        ns = namespace if info.namespaced and namespace else None
        w = Watch(self, info, ns, lm, fm, allow_bookmarks,
                  self.bookmark_interval if bookmark_interval is None else bookmark_interval)
        if resource_version in (None, "", "0"):
            current_objs = sorted(self._iter(info, ns), key=lambda t: int(t[2].obj["metadata"]["resourceVersion"]))
            for ens, _name, e in current_objs:
                if (lm is None and fm is None) or _matches(lm, fm, e.obj):
                    w._put(WatchEvent(int(e.obj["metadata"]["resourceVersion"]), "ADDED", info, ens, e.obj, e.raw))
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise bad_request(f"invalid resource version: {resource_version!r}") from None
            if since < self._evicted_rv:
                self._watches.setdefault(info.key, []).append(w)
                w._error(self.gone_status(since))
                return w
            hist = self._hist
            i = bisect.bisect_right(hist, since, key=lambda ev: ev.rv)
            key = info.key
            for ev in hist[i:]:
                if ev.info is not None and ev.info.key == key:
                    w._offer(ev)
        self._watches.setdefault(info.key, []).append(w)
        return w

    def gone_status(self, since: int | str) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"too old resource version: {since} ({self._evicted_rv + 1})",
            "reason": "Expired",
            "code": 410,
        }

    def _unregister(self, w: Watch) -> None:
        lst = self._watches.get(w.info.key)
        if lst is not None and w in lst:
            lst.remove(w)

    def expire_watches(self, group: str | None = None, plural: str | None = None) -> int:
        """Fault injection: end matching watches with an ERROR 410 event. Returns how many."""
        n = 0
        for key, lst in list(self._watches.items()):
            if (group is None or key[0] == group) and (plural is None or key[1] == plural):
                for w in list(lst):
                    w._error(self.gone_status(self._rv))
                    n += 1
        return n

    def drop_watches(self, group: str | None = None, plural: str | None = None) -> int:
        """Fault injection: end matching watches silently (as a dropped connection). Returns how many."""
        n = 0
        for key, lst in list(self._watches.items()):
            if (group is None or key[0] == group) and (plural is None or key[1] == plural):
                for w in list(lst):
                    w._store._unregister(w)
                    w._closed = True
                    fut = w._waiter
                    if fut is not None and not fut.done():
                        fut.set_result(None)
                    n += 1
        return n

    def compact(self) -> None:
        """Forget all history (every watch from an older resourceVersion gets 410)."""
        self._hist.clear()
        self._evicted_rv = self._rv

    # ------------------------------------------------------------------ state
    def dump_state(self) -> dict[str, Any]:
        """Every object (CRDs first) and the resourceVersion counter, for --state-file."""
        crd_key = ("apiextensions.k8s.io", "customresourcedefinitions")
        keys = [crd_key] + [k for k in self._data if k != crd_key]
        objects = []
        for key in keys:
            for d in self._data.get(key, {}).values():
                for e in d.values():
                    objects.append({"group": key[0], "plural": key[1], "object": e.obj})
        return {"resourceVersion": self._rv, "objects": objects}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore a dump_state() snapshot into this (fresh) store, keeping uids and resourceVersions."""
        for item in state.get("objects", []):
            key = (item["group"], item["plural"])
            info = self._resources.get(key)
            if info is None:
                log.warning("state file: no resource %s/%s for a stored object; skipped", *key)
                continue
            obj = item["object"]
            meta = obj["metadata"]
            ns = meta.get("namespace", "") if info.namespaced else ""
            name = meta["name"]
            old = self._data[key].get(ns, {}).get(name)
            self._data[key].setdefault(ns, {})[name] = _Entry(obj, _dumps(obj))
            if old is None and ns:
                self._ns_counts[ns] = self._ns_counts.get(ns, 0) + 1
            if old is not None:
                self._by_uid.pop(old.obj["metadata"].get("uid", ""), None)
            if meta.get("uid"):
                self._by_uid[meta["uid"]] = (key, ns, name)
            for o in _owner_uids(obj):
                self._dependents.setdefault(o, set()).add((key, ns, name))
            if key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                self._crd_changed(obj)
        self._rv = max(self._rv, int(state.get("resourceVersion", 0)))
        self.compact()


# ------------------------------------------------------------------------------------ metadata checks

_QNAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QNAME_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
              "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
              "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
_MAX_ANNOTATIONS = 256 * 1024


def _qualified_name_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            return ("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                    "'-' or '.', and must start and end with an alphanumeric character")
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QNAME.match(name):
        return _QNAME_MSG
    return None


def _meta_problems(meta: dict[str, Any]) -> list[tuple[str, str, str]]:
    """422 causes for labels, annotations, finalizers and ownerReferences, as the apiserver reports them."""
    causes: list[tuple[str, str, str]] = []
    labels = meta.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            causes.append(("metadata.labels", "FieldValueInvalid", "Invalid value: must be a map of strings"))
        else:
            for k, v in labels.items():
                why = _qualified_name_problem(k)
                if why:
                    causes.append(("metadata.labels", "FieldValueInvalid", f'Invalid value: "{k}": {why}'))
                if not isinstance(v, str):
                    causes.append((f"metadata.labels.{k}", "FieldValueInvalid",
                                   f"Invalid value: {v!r}: label values must be strings"))
                elif v and (len(v) > 63 or not _QNAME.match(v)):
                    msg = ("must be no more than 63 characters" if len(v) > 63 else
                           "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
                           "or '.', and must start and end with an alphanumeric character")
                    causes.append(("metadata.labels", "FieldValueInvalid", f'Invalid value: "{v}": {msg}'))
    ann = meta.get("annotations")
    if ann is not None:
        if not isinstance(ann, dict):
            causes.append(("metadata.annotations", "FieldValueInvalid", "Invalid value: must be a map of strings"))
        else:
            size = 0
            for k, v in ann.items():
                why = _qualified_name_problem(k)
                if why:
                    causes.append(("metadata.annotations", "FieldValueInvalid", f'Invalid value: "{k}": {why}'))
                if not isinstance(v, str):
                    causes.append((f"metadata.annotations.{k}", "FieldValueInvalid",
                                   f"Invalid value: {v!r}: annotation values must be strings"))
                else:
                    size += len(k) + len(v)
            if size > _MAX_ANNOTATIONS:
                causes.append(("metadata.annotations", "FieldValueTooLong",
                               f"Too long: must have at most {_MAX_ANNOTATIONS} bytes"))
    fins = meta.get("finalizers")
    if fins is not None:
        if not isinstance(fins, list) or not all(isinstance(f, str) for f in fins):
            causes.append(("metadata.finalizers", "FieldValueInvalid", "Invalid value: must be a list of strings"))
        else:
            for f in fins:
                why = _qualified_name_problem(f)
                if why:
                    causes.append(("metadata.finalizers", "FieldValueInvalid", f'Invalid value: "{f}": {why}'))
    refs = meta.get("ownerReferences")
    if refs is not None:
        if not isinstance(refs, list):
            causes.append(("metadata.ownerReferences", "FieldValueInvalid", "Invalid value: must be a list"))
        else:
            controllers = 0
            for r in refs:
                if not isinstance(r, dict):
                    causes.append(("metadata.ownerReferences", "FieldValueInvalid", "Invalid value: must be objects"))
                    continue
                for f, what in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"), ("uid", "uid")):
                    if not r.get(f):
                        causes.append((f"metadata.ownerReferences.{f}", "FieldValueInvalid",
                                       f'Invalid value: "": {what} must not be empty'))
                if r.get("controller"):
                    controllers += 1
            if controllers > 1:
                causes.append(("metadata.ownerReferences", "FieldValueInvalid",
                               "Invalid value: Only one reference can have Controller set to true"))
    return causes


# ------------------------------------------------------------------------------------ built-in kinds


def _owner_uids(obj: dict[str, Any] | None) -> tuple[str, ...]:
    if obj is None:
        return ()
    refs = obj["metadata"].get("ownerReferences")
    if not refs:
        return ()
    return tuple(r.get("uid") for r in refs if isinstance(r, dict) and r.get("uid"))


def _qos(spec: dict[str, Any]) -> str:
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or str(req.get(r, lim[r])) != str(lim[r]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _default_pod(info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise invalid(info, name, [("spec", "FieldValueRequired", "Required value")])
    containers = spec.get("containers")
    causes: list[tuple[str, str, str]] = []
    if not isinstance(containers, list) or not containers:
        causes.append(("spec.containers", "FieldValueRequired", "Required value"))
    else:
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or not c.get("name"):
                causes.append((f"spec.containers[{i}].name", "FieldValueRequired", "Required value"))
                continue
            if not c.get("image"):
                causes.append((f"spec.containers[{i}].image", "FieldValueRequired", "Required value"))
    if spec.get("restartPolicy", "Always") not in ("Always", "OnFailure", "Never"):
        causes.append(("spec.restartPolicy", "FieldValueNotSupported",
                       'Unsupported value: supported values: "Always", "OnFailure", "Never"'))
    if causes:
        raise invalid(info, name, causes)
    for c in [*containers, *(spec.get("initContainers") or [])]:
        if isinstance(c, dict):
            image = str(c.get("image") or "")
            tag = image.rsplit("/", 1)[-1]
            c.setdefault("imagePullPolicy", "Always" if ":" not in tag or tag.endswith(":latest") else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            res = c["resources"]
            if isinstance(res, dict) and res.get("limits") and not res.get("requests"):
                res["requests"] = dict(res["limits"])
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    spec.setdefault("serviceAccountName", "default")
    tols = spec.setdefault("tolerations", [])
    have = {t.get("key") for t in tols if isinstance(t, dict)}
    for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if k not in have:
            tols.append({"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    status: dict[str, Any] = {"phase": "Pending", "qosClass": _qos(spec)}
    if spec.get("schedulingGates"):
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                 "message": "Scheduling is blocked due to non-empty scheduling gates",
                                 "lastProbeTime": None, "lastTransitionTime": _now()}]
    obj["status"] = status


_POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds")


def _validate_pod_update(info: ResourceInfo, old: dict[str, Any], new: dict[str, Any], name: str) -> None:
    os_ = old.get("spec") or {}
    ns_ = new.get("spec") or {}
    if os_ == ns_:
        return

    def strip(spec: dict[str, Any]) -> dict[str, Any]:
        s = {k: v for k, v in spec.items() if k not in _POD_MUTABLE}
        s["containers"] = [{k: v for k, v in c.items() if k != "image"} for c in spec.get("containers") or []]
        s["initContainers"] = [{k: v for k, v in c.items() if k != "image"} for c in spec.get("initContainers") or []]
        return s

    if strip(os_) != strip(ns_):
        raise invalid(info, name, [("spec", "FieldValueForbidden",
                                    "Forbidden: pod updates may not change fields other than "
                                    "`spec.containers[*].image`,"
                                    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                                    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                                    "(allow it to be set to 1 if it was previously negative)")])
    old_gates = {g.get("name") for g in os_.get("schedulingGates") or ()}
    new_gates = {g.get("name") for g in ns_.get("schedulingGates") or ()}
    if new_gates - old_gates:
        raise invalid(info, name, [("spec.schedulingGates", "FieldValueForbidden",
                                    "Forbidden: only deletion is allowed, but found new scheduling gate")])


def _default_job(info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise invalid(info, name, [("spec", "FieldValueRequired", "Required value")])
    template = spec.get("template")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise invalid(info, name, [("spec.template.spec", "FieldValueRequired", "Required value")])
    tspec = template["spec"]
    if tspec.get("restartPolicy") not in ("OnFailure", "Never"):
        raise invalid(info, name, [("spec.template.spec.restartPolicy", "FieldValueRequired",
                                    "Required value: valid values: \"OnFailure\", \"Never\"")])
    if not tspec.get("containers"):
        raise invalid(info, name, [("spec.template.spec.containers", "FieldValueRequired", "Required value")])
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("completionMode", "NonIndexed")
    if spec["completionMode"] == "Indexed" and spec.get("completions") is None:
        raise invalid(info, name, [("spec.completions", "FieldValueRequired",
                                    "Required value: when completion mode is Indexed")])
    spec.setdefault("backoffLimit", 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6)
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    uid = obj["metadata"]["uid"]
    labels = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }
    if not spec.get("manualSelector"):
        if spec.get("selector") is not None:
            raise invalid(info, name, [("spec.selector", "FieldValueInvalid",
                                        "Invalid value: `selector` will be auto-generated")])
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), **labels}
    obj["status"] = {}
    if not obj["metadata"].get("labels"):
        tlabels = (template.get("metadata") or {}).get("labels")
        if tlabels:
            obj["metadata"]["labels"] = dict(tlabels)
