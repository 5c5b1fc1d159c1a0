"""The sandbox's generic object store: Kubernetes CRUD semantics without the HTTP.

One `Store` holds every object of every served resource, hands out copies, and does what a real
kube-apiserver's generic registry store + etcd do to objects: one global monotonic
resourceVersion carried by each write's watch event, namespaces that must exist, AlreadyExists /
Conflict, status-subresource semantics, no-op writes that keep their resourceVersion, finalizers
and deletionTimestamp, list with limit/continue, dryRun. What is not generic lives beside it:

- metadata.py: the body, name and metadata checks; uid, generation and timestamps;
- strategies.py: each kind's defaulting and validation (create, update, delete grace);
- gc.py: ownerReference garbage collection, foreground/orphan, namespace and CRD cascades;
- watch.py: the event history, watches, bookmarks and 410 Gone;
- persistence.py: the --state-file format; errors.py: ApiError and Status bodies.

It is synchronous and single-threaded: every call happens on one asyncio loop (the HTTP server's
and the simulated cluster's). Stored objects are never mutated in place (see entry.py).
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from gangq.sandbox import patching, persistence, selection
from gangq.sandbox.builtin import BUILTIN_RESOURCES, ResourceInfo
from gangq.sandbox.entry import Entry, copy_in, dumps, loads
from gangq.sandbox.errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    details,
    invalid,
    not_found,
)
from gangq.sandbox.gc import FOREGROUND, GarbageCollector
from gangq.sandbox.metadata import (
    check_body,
    check_update,
    generate_name,
    meta_problems,
    namespace_of,
    next_generation,
    now,
    stamp_create,
    stamp_update,
    timestamp_in,
    validate_name,
)
from gangq.sandbox.selection import FieldSelectorMatcher, LabelSelectorMatcher, matches
from gangq.sandbox.strategies import CRDS, NAMESPACES, PODS, served_resource, strategy_for
from gangq.sandbox.watch import Watch, WatchCache, WatchEvent

__all__ = ["APPLY", "ApiError", "ResourceInfo", "Store", "Watch", "WatchEvent", "bad_request"]

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


def _selectors(
    info: ResourceInfo, label_selector: str | None, field_selector: str | None
) -> tuple[LabelSelectorMatcher | None, FieldSelectorMatcher | None]:
    """Parsed (label matcher | None, field matcher | None); 400 on a bad or unsupported selector."""
    lm = fm = None
    try:
        if label_selector and label_selector.strip():
            lm = selection.parse_label_selector(label_selector)
        if field_selector and field_selector.strip():
            fm = selection.parse_field_selector(field_selector, kind=info.kind, extra_fields=info.selectable_fields)
    except selection.SelectorError as e:
        raise bad_request(str(e)) from None
    return lm, fm


class Store:
    """In-memory Kubernetes object store (see the module docstring)."""

    def __init__(self, *, history: int = 20000, bookmark_interval: float = 30.0,
                 max_watch_queue: int = 200_000) -> None:
        self.dry_run = False  # set by dry_run_mode(): writes are checked and answered but not stored
        self._rv = 0
        self._watch = WatchCache(history, bookmark_interval, max_watch_queue, lambda: self._rv)
        self._resources: dict[tuple[str, str], ResourceInfo] = {}
        self._data: dict[tuple[str, str], dict[str, dict[str, Entry]]] = {}
        self._subs: list[Callable[[str, ResourceInfo, dict[str, Any]], None]] = []
        self._crd_of: dict[tuple[str, str], str] = {}  # served resource -> CRD name
        self._gc = GarbageCollector(self, self._resources, self._data, self._crd_of)
        self.resources_version = 0  # bumped whenever the set of served resources changes
        for info in BUILTIN_RESOURCES():
            self._register(info)
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create("", "namespaces", {"metadata": {"name": ns}})

    @property
    def bookmark_interval(self) -> float:
        """Seconds between BOOKMARK events of a quiet watch that asked for them."""
        return self._watch.bookmark_interval

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
                           details=details(ResourceInfo(group, "v1", plural, "Unknown"), None))
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

    def _crd_changed(self, crd: dict[str, Any]) -> None:
        """(Re)register the served resource of a CRD."""
        info = served_resource(crd)
        if info is None:
            return
        old = self._resources.get(info.key)
        self._register(info)
        self._crd_of[info.key] = crd["metadata"]["name"]
        if old is not None:
            self._watch.rebind(info)

    def _crd_removed(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        if self._crd_of.get(key) != crd["metadata"]["name"]:
            return
        self._watch.close_resource(key)
        self._resources.pop(key, None)
        self._data.pop(key, None)
        self._crd_of.pop(key, None)
        self.resources_version += 1

    # StrategyContext
    def upcoming_resource_version(self) -> int:
        return self._rv + 1

    def served_elsewhere(self, key: tuple[str, str], crd_name: str) -> bool:
        return key in self._resources and self._crd_of.get(key) != crd_name

    # ------------------------------------------------------------------ reads
    def _entry(self, info: ResourceInfo, namespace: str | None, name: str) -> Entry:
        ns = (namespace or "") if info.namespaced else ""
        e = self._data[info.key].get(ns, {}).get(name)
        if e is None:
            raise not_found(info, name)
        return e

    def current_entry(self, info: ResourceInfo, namespace: str | None, name: str) -> Entry | None:
        """The stored entry of an object, or None (also when its resource is no longer served)."""
        ns = (namespace or "") if info.namespaced else ""
        per_ns = self._data.get(info.key)
        return None if per_ns is None else per_ns.get(ns, {}).get(name)

    def stored_objects(self, group: str, plural: str) -> list[dict[str, Any]]:
        """The stored objects of a resource, by namespace and name: shared, never to be modified."""
        info = self.resource(group, plural)
        return [e.obj for _, _, e in sorted(self._iter(info, None), key=lambda t: (t[0], t[1]))]

    def get(self, group: str, plural: str, namespace: str | None, name: str) -> dict[str, Any]:
        info = self.resource(group, plural)
        return loads(self._entry(info, namespace, name).raw)

    def get_raw(self, group: str, plural: str, namespace: str | None, name: str) -> str:
        """The stored JSON text of an object (no copy, for the HTTP server)."""
        return self._entry(self.resource(group, plural), namespace, name).raw

    def _iter(self, info: ResourceInfo, namespace: str | None) -> Iterator[tuple[str, str, Entry]]:
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
    ) -> tuple[list[Entry], str, str | None, int | None]:
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
            if rv < self._watch.evicted_rv:
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
        out: list[Entry] = []
        cont = None
        remaining = None
        last: tuple[str, str] = ("", "")
        for idx, (ns, name, e) in enumerate(items):
            if (lm is not None or fm is not None) and not matches(lm, fm, e.obj):
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
        head = dumps({"kind": info.list_kind, "apiVersion": info.api_version, "metadata": meta})
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
        return loads(raw)

    def count(self, group: str, plural: str, namespace: str | None = None) -> int:
        info = self.resource(group, plural)
        per_ns = self._data[info.key]
        if info.namespaced and namespace:
            return len(per_ns.get(namespace, {}))
        return sum(len(d) for d in per_ns.values())

    # ------------------------------------------------------------------ commit
    def commit_entry(
        self,
        info: ResourceInfo,
        type_: str,
        ns: str,
        name: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> Entry:
        """Stamp a new resourceVersion on `obj` (whose metadata dict must be private), store it, notify."""
        if self.dry_run:
            meta = obj["metadata"]
            if old is not None:
                meta["resourceVersion"] = old["metadata"]["resourceVersion"]
            else:
                meta.pop("resourceVersion", None)
            return Entry(obj, dumps(obj))
        self._rv += 1
        rv = self._rv
        obj["metadata"]["resourceVersion"] = str(rv)
        raw = dumps(obj)
        entry = Entry(obj, raw)
        key = info.key
        if type_ == "DELETED":
            d = self._data[key].get(ns)
            if d is not None:
                d.pop(name, None)
                if not d:
                    del self._data[key][ns]
        else:
            self._data[key].setdefault(ns, {})[name] = entry
        self._gc.index(type_, key, ns, name, obj, old)
        self._watch.publish(key, WatchEvent(rv, type_, info, ns, obj, raw, old))
        for cb in tuple(self._subs):
            try:
                cb(type_, info, loads(raw))
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
    def create(self, group: str, plural: str, obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        info = self.resource(group, plural)
        return loads(self._create(info, copy_in(obj, info.kind), namespace).raw)

    def create_raw(self, group: str, plural: str, obj: dict[str, Any], *, namespace: str | None = None) -> str:
        """Like create() but takes ownership of `obj` (no copy) and returns the stored JSON text."""
        info = self.resource(group, plural)
        return self._create(info, obj, namespace).raw

    def _create(self, info: ResourceInfo, obj: Any, namespace: str | None) -> Entry:
        ns, name, obj = self.prepare_create(info, obj, namespace)
        return self.commit_create(info, ns, name, obj)

    def admission_create_input(self, info: ResourceInfo, obj: Any, namespace: str | None) -> tuple[str, dict[str, Any]]:
        """The object of a create as admission webhooks see it, and its namespace: the body checked (kind,
        namespace, a namespace that exists and is not being deleted), the system fields a client may not
        set removed, and the kind's decode defaults applied (see admission.py)."""
        meta = check_body(info, obj)
        ns = namespace_of(info, namespace, meta)
        if ns:
            self._check_namespace_open(info, ns, str(meta.get("name") or ""))
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(k, None)
        return ns, strategy_for(info).decode_defaults(info, obj, create=True)

    def decode_defaults(self, info: ResourceInfo, obj: dict[str, Any], *, create: bool) -> dict[str, Any]:
        """`obj` with the defaults the real server applies when it decodes a body of `info`'s kind."""
        return strategy_for(info).decode_defaults(info, obj, create=create)

    def prepare_create(self, info: ResourceInfo, obj: Any, namespace: str | None) -> tuple[str, str, dict[str, Any]]:
        """Everything a create does before it stores: checks, name, defaults, validation. Returns the
        namespace, the name and the object as it would be stored; nothing is written."""
        meta = check_body(info, obj)
        ns = namespace_of(info, namespace, meta)
        name = generate_name(info, meta, self._data[info.key].get(ns, {}))
        validate_name(info, name)
        problems = meta_problems(meta)
        if problems:
            raise invalid(info, name, problems)
        if ns:
            self._check_namespace_open(info, ns, name)
        if info.custom:
            crd = self._data[CRDS].get("", {}).get(self._crd_of.get(info.key, ""))
            if crd is not None and crd.obj["metadata"].get("deletionTimestamp"):
                raise ApiError(405, "MethodNotAllowed",
                               "create not allowed while custom resource definition is terminating")
        if name in self._data[info.key].get(ns, {}):
            raise already_exists(info, name)
        stamp_create(info, meta)
        if "status" in info.subresources:
            obj.pop("status", None)
        strategy = strategy_for(info)
        strategy.prepare_for_create(self, info, obj, name)
        obj = strategy.apply_schema(info, obj, name)
        return ns, name, obj

    def commit_create(self, info: ResourceInfo, ns: str, name: str, obj: dict[str, Any], *,
                      recheck: bool = False) -> Entry:
        """Store a prepared new object. `recheck`: the store may have changed since prepare_create (an
        admission webhook was awaited), so the resource, the namespace and the name are checked again."""
        if recheck:
            if self._resources.get(info.key) is None:
                raise not_found(info, name)
            if ns:
                self._check_namespace_open(info, ns, name)
            if name in self._data[info.key].get(ns, {}):
                raise already_exists(info, name)
        entry = self.commit_entry(info, "ADDED", ns, name, obj, None)
        if info.key == CRDS and not self.dry_run:
            self._crd_changed(entry.obj)
        return entry

    def _check_namespace_open(self, info: ResourceInfo, ns: str, name: str) -> None:
        """404 when namespace `ns` does not exist, 403 when it is being deleted."""
        nse = self._data[NAMESPACES].get("", {}).get(ns)
        if nse is None:
            raise not_found(self._resources[NAMESPACES], ns)
        if nse.obj["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f'{info.plural} "{name}" is forbidden: unable to create new content in namespace {ns} '
                "because it is being terminated",
                details=details(info, name, causes=[{"reason": "NamespaceTerminating",
                                                     "message": f"namespace {ns} is being terminated",
                                                     "field": "metadata.namespace"}]),
            )

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
        return loads(self._replace(info, namespace, name, copy_in(obj, info.kind), subresource).raw)

    def _replace(
        self, info: ResourceInfo, namespace: str | None, name: str, obj: Any, subresource: str | None
    ) -> Entry:
        old, new = self.replace_input(info, namespace, name, obj, subresource)
        return self.update_entry(info, old, new, subresource)

    def replace_input(
        self, info: ResourceInfo, namespace: str | None, name: str, obj: Any, subresource: str | None
    ) -> tuple[Entry, dict[str, Any]]:
        """The checks of a PUT: the stored entry it replaces and the checked body (nothing is written)."""
        self._check_subresource(info, subresource)
        meta = check_body(info, obj)
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
        return old, obj

    def _check_subresource(self, info: ResourceInfo, subresource: str | None) -> None:
        if subresource is not None and subresource not in info.subresources:
            raise ApiError(404, "NotFound",
                           f"the server could not find the requested resource ({info.plural}/{subresource})")

    def update_entry(self, info: ResourceInfo, old_e: Entry, new: dict[str, Any], subresource: str | None) -> Entry:
        """Common tail of PUT and PATCH: `new` is a private candidate object (top level and metadata may be edited)."""
        return self.commit_update(info, old_e, self.prepare_update(info, old_e, new, subresource))

    def prepare_update(
        self, info: ResourceInfo, old_e: Entry, new: dict[str, Any], subresource: str | None
    ) -> dict[str, Any]:
        """An update's candidate as it would be stored: server-owned fields kept, validated, defaulted,
        generation and resourceVersion set. Nothing is written."""
        old = old_e.obj
        ometa = old["metadata"]
        name = ometa["name"]
        ns = ometa.get("namespace", "") if info.namespaced else ""
        strategy = strategy_for(info)
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
            stamp_update(ometa, meta, ns)
            if "status" in info.subresources:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            check_update(info, name, ometa, meta)
            strategy.validate_update(self, info, old, new, name)
            strategy.prepare_for_update(old, new)
        new = strategy.apply_schema(info, new, name)
        meta = new["metadata"]
        if info.generation:
            meta["generation"] = next_generation(ometa, old, new, subresource)
        meta["resourceVersion"] = ometa["resourceVersion"]
        if meta.get("finalizers") == []:
            del meta["finalizers"]
        return new

    def commit_update(self, info: ResourceInfo, old_e: Entry, new: dict[str, Any]) -> Entry:
        """Store a candidate from prepare_update (which `old_e` must still be the stored entry for)."""
        old = old_e.obj
        ometa = old["metadata"]
        meta = new["metadata"]
        name = ometa["name"]
        ns = ometa.get("namespace", "") if info.namespaced else ""
        strategy = strategy_for(info)
        if new == old:
            return old_e  # a no-op write: no new resourceVersion, no event (like the real apiserver)
        if ometa.get("deletionTimestamp") and not meta.get("finalizers") and not strategy.pending_grace(new):
            if info.key == NAMESPACES:  # goes when its content is gone, not on its own updates
                entry = self.commit_entry(info, "MODIFIED", ns, name, new, old)
                if self.dry_run:
                    return entry
                self._gc.finish_namespace(name)
                cur = self._data[info.key].get("", {}).get(name)
                return cur if cur is not None else entry
            return self.remove_entry(info, ns, name, new, old)
        entry = self.commit_entry(info, "MODIFIED", ns, name, new, old)
        if info.key == CRDS and not self.dry_run:
            self._crd_changed(entry.obj)
        return entry

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
        patch = self._parse_patch(patch, patch_type) if isinstance(patch, (bytes, str)) else copy_in(patch, "the patch")
        return loads(self._patch(info, namespace, name, patch, patch_type, subresource).raw)

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
    ) -> Entry:
        old, new = self.patch_input(info, namespace, name, patch, patch_type, subresource)
        if old is None:  # server-side apply to an object that does not exist: a create
            return self._create(info, new, namespace)
        return self.update_entry(info, old, new, subresource)

    def patch_input(
        self,
        info: ResourceInfo,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str,
        subresource: str | None,
    ) -> tuple[Entry | None, dict[str, Any]]:
        """The checks of a PATCH and the patched object, with the entry it updates; (None, body) when a
        server-side apply creates the object. Nothing is written; `patch` is not modified."""
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
                apply_meta = dict(body.get("metadata") or {})
                apply_meta.setdefault("name", name)
                body["metadata"] = apply_meta
                return None, body
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
        return old, merged

    # ------------------------------------------------------------------ binding
    def bind(self, namespace: str, pod_name: str, node_name: str) -> None:
        """pods/binding: set spec.nodeName and the PodScheduled condition (409 if already bound)."""
        info = self._resources[PODS]
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
        conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now()})
        status["conditions"] = conds
        new["status"] = status
        new["metadata"] = dict(old.obj["metadata"])
        self.commit_entry(info, "MODIFIED", namespace, pod_name, new, old.obj)

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
        entry = self.delete_entry(info, namespace, name, propagation_policy, grace_period_seconds, preconditions)
        return loads(entry.raw)

    def delete_entry(
        self,
        info: ResourceInfo,
        namespace: str | None,
        name: str,
        policy: str | None,
        grace: int | None,
        preconditions: dict[str, Any] | None = None,
    ) -> Entry:
        """DELETE: preconditions, then mark for deletion (finalizers, grace) or remove at once."""
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
        strategy = strategy_for(info)
        if policy is None:
            policy = strategy.default_propagation
        key = info.key
        if key == NAMESPACES:
            return self._gc.delete_namespace(info, e)
        if key == CRDS:
            return self._gc.delete_crd(info, e)
        grace_s = strategy.deletion_grace(obj, grace)
        if meta.get("deletionTimestamp"):
            current = int(meta.get("deletionGracePeriodSeconds") or 0)
            if grace is not None and grace_s < current:  # a shorter grace period overrides a longer one
                new = dict(obj)
                new["metadata"] = nm = dict(meta)
                nm["deletionGracePeriodSeconds"] = grace_s
                nm["deletionTimestamp"] = timestamp_in(grace_s)
                if grace_s == 0 and not nm.get("finalizers"):
                    return self.remove_entry(info, ns, name, new, obj)
                return self.commit_entry(info, "MODIFIED", ns, name, new, obj)
            return e
        if policy == "Orphan" and not self.dry_run:
            self._gc.orphan(meta.get("uid"))
        finalizers = list(meta.get("finalizers") or ())
        if policy == "Foreground" and self._gc.has_dependents(meta.get("uid", "")) and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        if finalizers or grace_s > 0:
            new = dict(obj)
            new["metadata"] = nm = dict(meta)
            nm["deletionTimestamp"] = timestamp_in(grace_s)
            nm["deletionGracePeriodSeconds"] = grace_s
            if finalizers:
                nm["finalizers"] = finalizers
            if info.generation:
                nm["generation"] = int(nm.get("generation") or 1) + 1
            entry = self.commit_entry(info, "MODIFIED", ns, name, new, obj)
            if FOREGROUND in finalizers and not self.dry_run:
                self._gc.delete_dependents(meta["uid"], "Foreground")
            return entry
        return self.remove_entry(info, ns, name, dict(obj, metadata=dict(meta)), obj)

    def remove_entry(
        self, info: ResourceInfo, ns: str, name: str, final: dict[str, Any], old: dict[str, Any]
    ) -> Entry:
        """Remove an object for good (DELETED event), then run what its removal triggers."""
        entry = self.commit_entry(info, "DELETED", ns, name, final, old)
        if self.dry_run:
            return entry
        self._gc.after_remove(info, ns, final["metadata"])
        if info.key == CRDS:
            self._crd_removed(final)
        return entry

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
        since: int | None = None
        if resource_version and resource_version != "0":
            try:
                since = int(resource_version)
            except ValueError:
                raise bad_request(f"invalid resource version: {resource_version!r}") from None
        return self._watch.start(info, ns, lm, fm, allow_bookmarks, bookmark_interval, since, self._iter(info, ns))

    def gone_status(self, since: int | str) -> dict[str, Any]:
        """The 410 Expired Status for a watch from `since`, older than the history."""
        return self._watch.gone_status(since)

    def expire_watches(self, group: str | None = None, plural: str | None = None) -> int:
        """Fault injection: end matching watches with an ERROR 410 event. Returns how many."""
        return self._watch.expire(group, plural)

    def drop_watches(self, group: str | None = None, plural: str | None = None) -> int:
        """Fault injection: end matching watches silently (as a dropped connection). Returns how many."""
        return self._watch.drop(group, plural)

    def compact(self) -> None:
        """Forget all history (every watch from an older resourceVersion gets 410)."""
        self._watch.compact(self._rv)

    # ------------------------------------------------------------------ state
    def dump_state(self) -> dict[str, Any]:
        """Every object (CRDs first) and the resourceVersion counter, for --state-file."""
        return persistence.snapshot(self._rv, self._data)

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore a dump_state() snapshot into this (fresh) store, keeping uids and resourceVersions."""
        for info, ns, name, obj in persistence.restored_objects(state, self._resources):
            key = info.key
            old = self._data[key].get(ns, {}).get(name)
            self._data[key].setdefault(ns, {})[name] = Entry(obj, dumps(obj))
            self._gc.index_restored(key, ns, name, obj, old)
            if key == CRDS:
                self._crd_changed(obj)
        self._rv = max(self._rv, persistence.state_resource_version(state))
        self.compact()
