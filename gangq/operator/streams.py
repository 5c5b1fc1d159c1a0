"""How far each pod and Job watch stream has reached the controller, as a resourceVersion.

An evicted gang's quota comes back once its pods are gone and its Jobs' controller is done with
the suspension (:mod:`gangq.operator.evictions`). Pods and Jobs come through separate watch
streams, so a Job's stopped state at resourceVersion R can reach the controller before a pod its
controller created just before writing R. The streams prove the pod has come through once the pod
stream has delivered every event up to a resourceVersion ≥ R: resourceVersions of one etcd are
ordered, and a stream sends its events in that order.

kopf runs the watches and hands each object's events to a task of its own, so the events of one
stream reach the controller's handlers in an order of their own, not the stream's; and kopf drops
BOOKMARK events before any handler. So :func:`install` wraps kopf's stream
(``kopf._cogs.clients.watching.infinite_watch``) to note each event as it arrives, in stream
order, and the controller's handlers note each event as they hand it to the scheduling loop
(:meth:`StreamPositions.delivered`). A stream's position is the highest resourceVersion up to which
every event it sent has been handed over (a bookmark moves it with nothing to hand over). The loop
reads the positions right after it took every event waiting in its inbox
(:meth:`StreamPositions.settle`): once that batch is applied, the controller has seen everything
up to them.

The resourceVersion contract calls them opaque strings; kube-apiserver on etcd (and the sandbox)
writes etcd's revision, an integer that grows with every write. Positions rely on that: a stream
that sends a resourceVersion that is not an integer has no position, and every eviction on it is
confirmed by a read from the API server. So are streams kopf's code no longer lets us follow.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

from gangq.api.meta import Meta

log = logging.getLogger(__name__)

TRACKED: Final = frozenset({("", "pods"), ("batch", "jobs")})
"""(group, plural) of the streams whose positions are kept."""

CURRENT: contextvars.ContextVar[StreamPositions | None] = contextvars.ContextVar("gangq_stream_positions",
                                                                                 default=None)
"""The positions kopf's watch streams report to: set before kopf starts, inherited by its tasks."""


def _rv(obj: Mapping[str, Any]) -> int | None:
    """The object's resourceVersion; None when absent or not an integer (opaque: never ordered)."""
    return Meta(obj).resource_version or None


class StreamPosition:
    """One watch stream (one resource, cluster-wide or one namespace): what arrived, what was
    handed over, and the resourceVersion up to which both agree."""

    __slots__ = ("arrived_at", "by_uid", "listed", "listed_max", "listing", "opaque", "outstanding", "position",
                 "seen")

    def __init__(self) -> None:
        self.position = 0  # every event up to here has been handed over (monotonic)
        self.seen = 0  # the newest resourceVersion the watch sent (event or bookmark)
        self.outstanding: dict[tuple[str, int], bool] = {}  # (uid, rv) arrived, not handed over -> listed?
        self.by_uid: dict[str, deque[int]] = {}  # uid -> its outstanding resourceVersions, oldest first
        self.listing = False  # kopf lists the resource (after a start or a 410): positions wait for the list
        self.listed = 0  # objects of the last list not handed over yet
        self.listed_max = 0
        self.opaque = False  # a resourceVersion that is not an integer: no position
        self.arrived_at = 0.0  # time.monotonic() of the last event or bookmark

    def arrived(self, item: Any) -> None:
        """An item of kopf's stream, in stream order: an event, a bookmark, or the end of a list."""
        self.arrived_at = time.monotonic()
        if not isinstance(item, Mapping):  # kopf's Bookmark.LISTED: the list is over
            if self.listing:
                self.listing = False
                self.seen = max(self.seen, self.listed_max)
            return
        kind = item.get("type")
        obj = item.get("object")
        if not isinstance(obj, Mapping):
            return
        rv = _rv(obj)
        if rv is None:
            self.opaque = True
            return
        if kind == "BOOKMARK":
            self.seen = max(self.seen, rv)
            return
        listed = kind is None  # an object of kopf's list (type None)
        if listed and not self.listing:
            self.listing = True
            self.listed_max = 0
        uid = _uid(obj)
        if (uid, rv) in self.outstanding:
            return
        self.outstanding[(uid, rv)] = listed
        self.by_uid.setdefault(uid, deque()).append(rv)
        if listed:
            self.listed += 1
            self.listed_max = max(self.listed_max, rv)
        else:
            self.seen = max(self.seen, rv)

    def delivered(self, obj: Mapping[str, Any]) -> None:
        """The controller took this object's event (and any older one of it kopf skipped)."""
        rv = _rv(obj)
        uid = _uid(obj)
        queue = self.by_uid.get(uid)
        if rv is None or queue is None:
            return
        while queue and queue[0] <= rv:
            if self.outstanding.pop((uid, queue.popleft()), False):
                self.listed -= 1
        if not queue:
            del self.by_uid[uid]

    def current(self) -> int | None:
        """Every event of this stream up to the returned resourceVersion has been handed over
        (None: unknown, see the module docstring)."""
        if self.opaque:
            return None
        if self.listing or self.listed > 0:
            return self.position
        # watch events arrive in resourceVersion order: the first outstanding is the lowest
        first = next(iter(self.outstanding), None)
        candidate = self.seen if first is None else min(self.seen, first[1] - 1)
        if candidate > self.position:
            self.position = candidate
        return self.position


def _uid(obj: Mapping[str, Any]) -> str:
    meta = Meta(obj)
    return meta.uid or f"{meta.namespace or None}/{meta.name}"


class StreamPositions:
    """The positions of the tracked streams, and the ones the scheduling loop has applied."""

    __slots__ = ("applied", "streams")

    def __init__(self) -> None:
        self.streams: dict[tuple[str, str | None], StreamPosition] = {}  # (plural, namespace or None)
        self.applied: dict[tuple[str, str | None], int | None] = {}

    def stream(self, plural: str, namespace: str | None) -> StreamPosition:
        key = (plural, namespace)
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = StreamPosition()
        return stream

    def _find(self, plural: str, namespace: str | None) -> tuple[str, str | None] | None:
        for key in ((plural, namespace), (plural, None)):
            if key in self.streams:
                return key
        return None

    def delivered(self, plural: str, obj: Mapping[str, Any]) -> None:
        """A kopf handler has handed this event to the controller (called for every event of a
        tracked stream, whether or not the controller wants it)."""
        key = self._find(plural, Meta(obj).namespace or None)
        if key is not None:
            self.streams[key].delivered(obj)

    def settle(self) -> None:
        """The scheduling loop has taken every event handed over so far: once it has applied them,
        it has seen each stream up to its current position."""
        for key, stream in self.streams.items():
            self.applied[key] = stream.current()

    def position(self, plural: str, namespace: str | None) -> int | None:
        """The resourceVersion up to which the loop has applied the stream of ``plural`` that
        carries ``namespace`` (None: no such stream, or no position)."""
        key = self._find(plural, namespace)
        return self.applied.get(key) if key is not None else None

    def idle_for(self, plural: str, namespace: str | None) -> float:
        """Seconds since the stream sent anything (an idle stream's next bookmark may be a minute away)."""
        key = self._find(plural, namespace)
        if key is None:
            return float("inf")
        return time.monotonic() - self.streams[key].arrived_at


_OBSERVED: set[Callable[..., AsyncIterator[Any]]] = set()
"""The wrappers :func:`install` put in place (installed once per process)."""


def install() -> bool:
    """Wrap kopf's watch stream so the streams of :data:`TRACKED` report to :data:`CURRENT`
    (once per process; the positions of another operator in the process are its own context's).
    False when kopf's code is not what this wraps: no positions, evictions are read."""
    try:
        from kopf._cogs.clients import watching
    except ImportError:
        log.warning("kopf's watch stream cannot be followed: evictions are confirmed by reads")
        return False
    original = getattr(watching, "infinite_watch", None)
    if original is None:
        log.warning("kopf's watch stream cannot be followed: evictions are confirmed by reads")
        return False
    if original in _OBSERVED:
        return True
    observed = _observed(original)
    _OBSERVED.add(observed)
    watching.infinite_watch = observed
    return True


def _observed(original: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    async def infinite_watch(*, resource: Any, namespace: Any, **kwargs: Any) -> AsyncIterator[Any]:
        positions = CURRENT.get()
        stream: StreamPosition | None = None
        if positions is not None and (getattr(resource, "group", None), getattr(resource, "plural", None)) in TRACKED:
            stream = positions.stream(resource.plural, namespace)
        async for item in original(resource=resource, namespace=namespace, **kwargs):
            if stream is not None:
                stream.arrived(item)
            yield item

    return infinite_watch
