"""The watch cache: the event history, the open watches, bookmarks, and 410 for a too-old resourceVersion.

Every committed write becomes one `WatchEvent` that the cache appends to a bounded history and
offers to the watches of its resource. A watch from a resourceVersion replays the history after
it; when the history no longer reaches back that far the watch gets one ERROR 410 event, as from a
compacted etcd, and the client re-lists. Each event's JSON frame is encoded once and shared by
every watcher.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from gangq.sandbox.builtin import ResourceInfo
from gangq.sandbox.entry import Entry, dumps, loads
from gangq.sandbox.selection import FieldSelectorMatcher, LabelSelectorMatcher, matches

__all__ = ["Watch", "WatchCache", "WatchEvent"]

log = logging.getLogger(__name__)


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

    def left_selection(self) -> WatchEvent:
        """What a watch whose selector the object no longer matches gets: DELETED with the object
        as it was (the last state the watch matched) at this event's resourceVersion, as
        kube-apiserver's watch cache sends it."""
        old = self.old or self.obj
        meta = dict(old.get("metadata") or {})
        meta["resourceVersion"] = str(self.rv)
        gone = {**old, "metadata": meta}
        return WatchEvent(self.rv, "DELETED", self.info, self.ns, gone, dumps(gone), self.old)

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "object": loads(self.raw)}


class Watch:
    """A watch on one resource: an async iterator of {"type", "object"} dicts; `.close()` ends it.

    The server uses `next_events()` instead, which returns the shared `WatchEvent`s (with their
    cached JSON lines) in batches.
    """

    __slots__ = (
        "_cache",
        "_closed",
        "_fm",
        "_last_sent",
        "_lm",
        "_q",
        "_waiter",
        "bookmark_interval",
        "bookmarks",
        "info",
        "namespace",
    )

    def __init__(
        self,
        cache: WatchCache,
        info: ResourceInfo,
        namespace: str | None,
        lm: LabelSelectorMatcher | None,
        fm: FieldSelectorMatcher | None,
        bookmarks: bool,
        bookmark_interval: float,
    ) -> None:
        self._cache = cache
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

    # called by the cache, synchronously, for every event of this resource
    def _offer(self, ev: WatchEvent) -> None:
        if self.namespace is not None and ev.ns != self.namespace:
            return
        lm, fm = self._lm, self._fm
        if lm is None and fm is None:
            self._put(ev)
            return
        new = matches(lm, fm, ev.obj)
        if ev.type == "MODIFIED":
            old = ev.old is not None and matches(lm, fm, ev.old)
            if new and old:
                self._put(ev)
            elif new:
                self._put(ev.retyped("ADDED"))
            elif old:
                self._put(ev.left_selection())
        elif new:
            self._put(ev)

    def _put(self, ev: WatchEvent) -> None:
        if self._closed:
            return
        q = self._q
        if len(q) >= self._cache.max_queue:
            # a consumer this far behind is cut off, as the real apiserver does; it re-lists and re-watches
            log.warning("sandbox watch on %s fell %d events behind; closing it", self.info.plural, len(q))
            self._cache.unregister(self)
            self._closed = True
            return
        q.append(ev)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _error(self, status: dict[str, Any]) -> None:
        """Queue an ERROR event and end the watch after it."""
        self._put(WatchEvent(0, "ERROR", None, "", status, dumps(status)))
        self._cache.unregister(self)
        self._closed = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def close(self) -> None:
        """Stop the watch (idempotent); pending events are dropped."""
        self._cache.unregister(self)
        self._closed = True
        self._q.clear()
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def drop(self) -> None:
        """End the watch silently, as a dropped connection does; queued events are still delivered."""
        self._cache.unregister(self)
        self._closed = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def bookmark(self) -> WatchEvent:
        """A BOOKMARK event carrying the current resourceVersion."""
        info = self.info
        rv = self._cache.current_rv()
        obj = {
            "kind": info.kind,
            "apiVersion": info.api_version,
            "metadata": {"resourceVersion": str(rv)},
        }
        return WatchEvent(rv, "BOOKMARK", info, "", obj, dumps(obj))

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




class WatchCache:
    """The bounded event history and the open watches of every resource.

    `history` events are always retained; the history is trimmed in halves (at twice that) so a
    write does not pay for the trim. `evicted_rv` is the newest resourceVersion no longer in it.
    """

    __slots__ = ("_hist", "_watches", "bookmark_interval", "current_rv", "evicted_rv", "history", "max_queue")

    def __init__(
        self, history: int, bookmark_interval: float, max_queue: int, current_rv: Callable[[], int]
    ) -> None:
        if history < 1:
            raise ValueError(f"Store history must be >= 1, got {history}")
        self.history = history
        self.bookmark_interval = bookmark_interval
        self.max_queue = max_queue
        self.current_rv = current_rv
        self.evicted_rv = 0
        self._hist: list[WatchEvent] = []
        self._watches: dict[tuple[str, str], list[Watch]] = {}

    def publish(self, key: tuple[str, str], ev: WatchEvent) -> None:
        """Record a committed write's event and offer it to the watches of its resource `key`."""
        hist = self._hist
        hist.append(ev)
        if len(hist) > 2 * self.history:
            cut = len(hist) - self.history
            self.evicted_rv = hist[cut - 1].rv
            del hist[:cut]
        for w in self._watches.get(key, ()):
            w._offer(ev)

    def start(
        self,
        info: ResourceInfo,
        namespace: str | None,
        lm: LabelSelectorMatcher | None,
        fm: FieldSelectorMatcher | None,
        bookmarks: bool,
        bookmark_interval: float | None,
        since: int | None,
        current: Iterable[tuple[str, str, Entry]],
    ) -> Watch:
        """A new watch. `since` None: ADDED events for the `current` objects, then live events. Otherwise
        every later event from the history, or one ERROR 410 event if the history no longer reaches back
        that far."""
        w = Watch(self, info, namespace, lm, fm, bookmarks,
                  self.bookmark_interval if bookmark_interval is None else bookmark_interval)
        if since is None:
            current_objs = sorted(current, key=lambda t: int(t[2].obj["metadata"]["resourceVersion"]))
            for ens, _name, e in current_objs:
                if (lm is None and fm is None) or matches(lm, fm, e.obj):
                    w._put(WatchEvent(int(e.obj["metadata"]["resourceVersion"]), "ADDED", info, ens, e.obj, e.raw))
        else:
            if since < self.evicted_rv:
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
        """The 410 Expired Status for a watch from `since`, older than the history."""
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"too old resource version: {since} ({self.evicted_rv + 1})",
            "reason": "Expired",
            "code": 410,
        }

    def unregister(self, w: Watch) -> None:
        lst = self._watches.get(w.info.key)
        if lst is not None and w in lst:
            lst.remove(w)

    def _matching(self, group: str | None, plural: str | None) -> list[Watch]:
        return [w for key, lst in list(self._watches.items())
                if (group is None or key[0] == group) and (plural is None or key[1] == plural)
                for w in list(lst)]

    def expire(self, group: str | None = None, plural: str | None = None) -> int:
        """End matching watches with an ERROR 410 event. Returns how many."""
        watches = self._matching(group, plural)
        for w in watches:
            w._error(self.gone_status(self.current_rv()))
        return len(watches)

    def drop(self, group: str | None = None, plural: str | None = None) -> int:
        """End matching watches silently (as a dropped connection). Returns how many."""
        watches = self._matching(group, plural)
        for w in watches:
            w.drop()
        return len(watches)

    def compact(self, rv: int) -> None:
        """Forget all history up to `rv` (every watch from an older resourceVersion gets 410)."""
        self._hist.clear()
        self.evicted_rv = rv

    def rebind(self, info: ResourceInfo) -> None:
        """The resource at `info.key` is served anew (its CRD changed): its open watches carry on with it."""
        for w in list(self._watches.get(info.key, ())):
            w.info = info

    def close_resource(self, key: tuple[str, str]) -> None:
        """The resource at `key` is no longer served: end its watches."""
        for w in list(self._watches.get(key, ())):
            w.close()
