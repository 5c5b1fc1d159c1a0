"""Garbage collection: ownerReferences, finalizers, and the namespace and CRD cascades.

The `GarbageCollector` keeps the ownership indexes up to date on every commit (owner uid ->
dependents, uid -> object, objects per namespace), so deleting an owner never scans the store. It
decides what a deletion does to others, and writes through the store:

- Background: once the owner is gone, its dependents are deleted (recursively); a dependent with
  another live owner only loses the reference to this one.
- Foreground: the owner keeps the `foregroundDeletion` finalizer until its dependents are gone.
- Orphan: the dependents lose their references to the owner and stay.
- A namespace being deleted deletes its contents and goes once they are all gone; a CRD being
  deleted deletes its custom resources (honouring their finalizers), then goes.

Collection is synchronous (dependents go in the request that removes their owner), because the
tests and the controller under test expect a real cluster's end state without waiting for a GC
controller's resync.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from gangq.sandbox.builtin import ResourceInfo
from gangq.sandbox.entry import Entry
from gangq.sandbox.errors import ApiError
from gangq.sandbox.metadata import now, owner_uids

__all__ = ["CRD_CLEANUP", "FOREGROUND", "GarbageCollector", "ObjectWriter"]

log = logging.getLogger(__name__)

FOREGROUND = "foregroundDeletion"
CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"
_NAMESPACES = ("", "namespaces")
_CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")

Ref = tuple[tuple[str, str], str, str]  # (resource key, namespace, name)


class ObjectWriter(Protocol):
    """The store's write paths the collector goes through, so its writes are ordinary writes."""

    dry_run: bool

    def commit_entry(
        self, info: ResourceInfo, type_: str, ns: str, name: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> Entry: ...

    def delete_entry(
        self,
        info: ResourceInfo,
        namespace: str | None,
        name: str,
        policy: str | None,
        grace: int | None,
        preconditions: dict[str, Any] | None = None,
    ) -> Entry: ...

    def update_entry(self, info: ResourceInfo, old_e: Entry, new: dict[str, Any], subresource: str | None) -> Entry: ...

    def remove_entry(
        self, info: ResourceInfo, ns: str, name: str, final: dict[str, Any], old: dict[str, Any]
    ) -> Entry: ...


class GarbageCollector:
    """The ownership indexes and the cascades of deletion (see the module docstring).

    `resources`, `data` and `crd_of` are the store's own tables, shared, not copied.
    """

    __slots__ = ("_crd_of", "_data", "_resources", "_store", "by_uid", "dependents", "ns_counts")

    def __init__(
        self,
        store: ObjectWriter,
        resources: dict[tuple[str, str], ResourceInfo],
        data: dict[tuple[str, str], dict[str, dict[str, Entry]]],
        crd_of: dict[tuple[str, str], str],
    ) -> None:
        self._store = store
        self._resources = resources
        self._data = data
        self._crd_of = crd_of
        self.by_uid: dict[str, Ref] = {}
        self.dependents: dict[str, set[Ref]] = {}
        self.ns_counts: dict[str, int] = {}

    # ------------------------------------------------------------------ indexes
    def index(
        self, type_: str, key: tuple[str, str], ns: str, name: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        """Update the indexes for a committed ADDED, MODIFIED or DELETED object."""
        uid = obj["metadata"].get("uid")
        if type_ == "ADDED":
            if uid:
                self.by_uid[uid] = (key, ns, name)
            if ns:
                self.ns_counts[ns] = self.ns_counts.get(ns, 0) + 1
        elif type_ == "DELETED":
            if uid:
                self.by_uid.pop(uid, None)
            if ns:
                self.ns_counts[ns] = self.ns_counts.get(ns, 1) - 1
        old_owners = owner_uids(old) if old is not None else ()
        new_owners = owner_uids(obj) if type_ != "DELETED" else ()
        if old_owners != new_owners:
            ref = (key, ns, name)
            for o in old_owners:
                if o not in new_owners:
                    s = self.dependents.get(o)
                    if s is not None:
                        s.discard(ref)
                        if not s:
                            del self.dependents[o]
            for o in new_owners:
                self.dependents.setdefault(o, set()).add(ref)

    def index_restored(
        self, key: tuple[str, str], ns: str, name: str, obj: dict[str, Any], replaced: Entry | None
    ) -> None:
        """Index an object restored from a state file (it replaced `replaced`, if any)."""
        meta = obj["metadata"]
        if replaced is None and ns:
            self.ns_counts[ns] = self.ns_counts.get(ns, 0) + 1
        if replaced is not None:
            self.by_uid.pop(replaced.obj["metadata"].get("uid", ""), None)
        if meta.get("uid"):
            self.by_uid[meta["uid"]] = (key, ns, name)
        for o in owner_uids(obj):
            self.dependents.setdefault(o, set()).add((key, ns, name))

    def has_dependents(self, owner_uid: str) -> bool:
        return bool(self.dependents.get(owner_uid))

    # ------------------------------------------------------------------ owners and dependents
    def after_remove(self, info: ResourceInfo, ns: str, meta: dict[str, Any]) -> None:
        """What an object's removal triggers: its dependents' collection, and owners, a namespace or a
        CRD that were waiting for it."""
        uid = meta.get("uid")
        if uid and uid in self.dependents:
            self.delete_dependents(uid, "Background")
        for ref in meta.get("ownerReferences") or ():
            self._finish_foreground(ref.get("uid"))
        if ns:
            self.finish_namespace(ns)
        if info.custom:
            crd_name = self._crd_of.get(info.key)
            if crd_name is not None:
                self._finish_crd(crd_name)

    def delete_dependents(self, owner_uid: str, policy: str) -> None:
        """Delete the dependents of `owner_uid` with `policy`; one with another live owner only loses this one."""
        store = self._store
        for key, ns, name in sorted(self.dependents.get(owner_uid, ())):
            info = self._resources.get(key)
            if info is None:
                continue
            e = self._data[key].get(ns, {}).get(name)
            if e is None:
                continue
            others = [r for r in e.obj["metadata"].get("ownerReferences") or ()
                      if r.get("uid") != owner_uid and r.get("uid") in self.by_uid]
            if others and policy == "Background":
                new = dict(e.obj)
                new["metadata"] = nm = dict(e.obj["metadata"])
                nm["ownerReferences"] = [r for r in nm.get("ownerReferences") or () if r.get("uid") != owner_uid]
                store.commit_entry(info, "MODIFIED", ns, name, new, e.obj)
                continue
            try:
                store.delete_entry(info, ns, name, "Foreground" if policy == "Foreground" else "Background", None)
            except ApiError:
                log.debug("garbage collection of %s %s/%s failed", key, ns, name, exc_info=True)

    def orphan(self, owner_uid: str | None) -> None:
        """Strip the references to `owner_uid` from its dependents."""
        if not owner_uid:
            return
        for key, ns, name in sorted(self.dependents.get(owner_uid, ())):
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
            self._store.commit_entry(info, "MODIFIED", ns, name, new, e.obj)

    def _finish_foreground(self, owner_uid: str | None) -> None:
        """Drop the foreground finalizer of an owner whose last dependent went."""
        if not owner_uid or self.dependents.get(owner_uid):
            return
        loc = self.by_uid.get(owner_uid)
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
        self._store.update_entry(info, e, new, None)

    # ------------------------------------------------------------------ namespaces and CRDs
    def _delete_with_contents(
        self,
        info: ResourceInfo,
        e: Entry,
        mark: Callable[[dict[str, Any]], None],
        contents: Callable[[str], Iterator[tuple[ResourceInfo, str, str]]],
        finish: Callable[[str], None],
    ) -> Entry:
        """Mark a container (namespace, CRD) deleted with `mark`, delete its `contents`, then `finish` it
        (it goes once they are gone). Answers the container as it is after that."""
        store = self._store
        obj = e.obj
        name = obj["metadata"]["name"]
        if not obj["metadata"].get("deletionTimestamp"):
            new = dict(obj)
            new["metadata"] = nm = dict(obj["metadata"])
            nm["deletionTimestamp"] = now()
            nm["deletionGracePeriodSeconds"] = 0
            mark(new)
            e = store.commit_entry(info, "MODIFIED", "", name, new, obj)
            if store.dry_run:
                return e
            for rinfo, ns, oname in contents(name):
                try:
                    store.delete_entry(rinfo, ns, oname, "Background", None)
                except ApiError:
                    log.debug("%s %s cleanup of %s failed", info.kind, name, oname, exc_info=True)
        finish(name)
        cur = self._data[info.key].get("", {}).get(name)
        return cur if cur is not None else e

    def delete_namespace(self, info: ResourceInfo, e: Entry) -> Entry:
        """Mark a namespace Terminating, delete its contents; it goes once they are all gone."""

        def terminating(ns: dict[str, Any]) -> None:
            ns["metadata"].pop("deletionGracePeriodSeconds", None)
            ns["status"] = {"phase": "Terminating"}

        return self._delete_with_contents(info, e, terminating, self._namespace_contents, self.finish_namespace)

    def _namespace_contents(self, ns: str) -> Iterator[tuple[ResourceInfo, str, str]]:
        """The objects in namespace `ns`, resource by resource (each listed when it is reached)."""
        for rinfo in list(self._resources.values()):
            if rinfo.namespaced:
                for oname in sorted(self._data[rinfo.key].get(ns, {})):
                    yield rinfo, ns, oname

    def finish_namespace(self, ns: str) -> None:
        """Remove a Terminating namespace with no content and no finalizers left."""
        if self.ns_counts.get(ns, 0) > 0:
            return
        info = self._resources[_NAMESPACES]
        e = self._data[info.key].get("", {}).get(ns)
        if e is None or not e.obj["metadata"].get("deletionTimestamp"):
            return
        if e.obj["metadata"].get("finalizers"):
            return
        self.ns_counts.pop(ns, None)
        final = dict(e.obj)
        final["metadata"] = dict(e.obj["metadata"])
        final["spec"] = {}
        self._store.remove_entry(info, "", ns, final, e.obj)

    def delete_crd(self, info: ResourceInfo, e: Entry) -> Entry:
        """Mark a CRD deleted with the cleanup finalizer and delete its custom resources."""

        def cleanup(crd: dict[str, Any]) -> None:
            meta = crd["metadata"]
            meta["finalizers"] = [*(meta.get("finalizers") or ()), CRD_CLEANUP]

        return self._delete_with_contents(info, e, cleanup, self._crd_contents, self._finish_crd)

    def _crd_contents(self, crd_name: str) -> Iterator[tuple[ResourceInfo, str, str]]:
        """The custom resources a CRD serves."""
        key = next((k for k, v in self._crd_of.items() if v == crd_name), None)
        if key is None:
            return
        rinfo = self._resources[key]
        yield from [(rinfo, ns, oname) for ns, d in self._data[key].items() for oname in d]

    def _finish_crd(self, crd_name: str) -> None:
        """Drop the cleanup finalizer of a CRD being deleted once none of its custom resources is left."""
        info = self._resources[_CRDS]
        e = self._data[info.key].get("", {}).get(crd_name)
        if e is None or not e.obj["metadata"].get("deletionTimestamp"):
            return
        key = next((k for k, v in self._crd_of.items() if v == crd_name), None)
        if key is not None and any(self._data.get(key, {}).values()):
            return
        new = dict(e.obj)
        new["metadata"] = nm = dict(e.obj["metadata"])
        nm["finalizers"] = [f for f in nm.get("finalizers") or () if f != CRD_CLEANUP]
        self._store.update_entry(info, e, new, None)
