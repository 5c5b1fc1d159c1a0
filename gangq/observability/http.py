"""The controller's HTTP endpoints: ``/metrics`` and health probes (:func:`create_app`, plain HTTP on
the metrics port, naming no workload) and the pending-workloads list (:func:`visibility_app`,
served over HTTPS on its own port by :mod:`gangq.operator.visibility`, every request
authenticated and authorized through the API server: :mod:`gangq.observability.auth`).

The pending-workloads API follows Kueue's visibility API (``visibility.kueue.x-k8s.io``
``PendingWorkloadsSummary``), as JSON::

    GET /apis/visibility.gangq.io/v1alpha1/clusterqueues/{name}/pendingworkloads?limit=&offset=
    GET /apis/visibility.gangq.io/v1alpha1/namespaces/{ns}/localqueues/{name}/pendingworkloads?limit=&offset=

Items are in admission order, each with its position in the ClusterQueue and in its LocalQueue,
its priority, since when it waits and why. The app answers through a :data:`PendingSource`, a
callable the operator passes (it owns the engine); :func:`engine_source` builds one from an
:class:`~gangq.core.engine.Engine` for a shell that serves HTTP on the engine's event loop.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gangq.api.meta import rfc3339
from gangq.observability.auth import Attributes, Guard, Unauthorized, User

if TYPE_CHECKING:
    from gangq.core.engine import Engine

log = logging.getLogger(__name__)

API_GROUP = "visibility.gangq.io"
API_VERSION = f"{API_GROUP}/v1alpha1"
PREFIX = f"/apis/{API_VERSION}"
DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000


class PendingQuery:
    """Which list to answer: a ClusterQueue's, or a LocalQueue's (``namespace`` + ``local_queue``)."""

    __slots__ = ("cluster_queue", "limit", "local_queue", "namespace", "offset")

    def __init__(
        self,
        *,
        cluster_queue: str | None = None,
        namespace: str | None = None,
        local_queue: str | None = None,
        limit: int = DEFAULT_LIMIT,
        offset: int = 0,
    ) -> None:
        if (cluster_queue is None) == (local_queue is None):
            raise ValueError("PendingQuery: give either cluster_queue or namespace + local_queue")
        if local_queue is not None and not namespace:
            raise ValueError("PendingQuery: local_queue needs a namespace")
        self.cluster_queue = cluster_queue
        self.namespace = namespace
        self.local_queue = local_queue
        self.limit = limit
        self.offset = offset


class PendingItem:
    """One pending workload (a row of Kueue's ``PendingWorkload``)."""

    __slots__ = (
        "cluster_queue",
        "expected_runtime",
        "local_queue",
        "message",
        "name",
        "namespace",
        "pending_since",
        "position_in_cluster_queue",
        "position_in_local_queue",
        "priority",
        "reason",
        "runtime_estimated",
        "wait_seconds",
    )

    def __init__(
        self,
        *,
        name: str,
        namespace: str,
        local_queue: str,
        cluster_queue: str,
        priority: int,
        position_in_cluster_queue: int,
        position_in_local_queue: int | None,
        pending_since: float,
        wait_seconds: float,
        reason: str,
        message: str,
        expected_runtime: float | None = None,
        runtime_estimated: bool = False,
    ) -> None:
        self.name = name
        self.namespace = namespace
        self.local_queue = local_queue
        self.cluster_queue = cluster_queue
        self.priority = priority
        self.position_in_cluster_queue = position_in_cluster_queue
        self.position_in_local_queue = position_in_local_queue
        self.pending_since = pending_since
        self.wait_seconds = wait_seconds
        self.reason = reason
        self.message = message
        self.expected_runtime = expected_runtime
        self.runtime_estimated = runtime_estimated

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "localQueueName": self.local_queue,
            "clusterQueueName": self.cluster_queue,
            "priority": self.priority,
            "positionInClusterQueue": self.position_in_cluster_queue,
            "positionInLocalQueue": self.position_in_local_queue,
            "pendingSince": rfc3339(self.pending_since),
            "waitSeconds": round(self.wait_seconds, 3),
            "reason": self.reason,
            "message": self.message,
            # gangq's own: how long it is expected to run once admitted, and whether that was
            # declared (a runtime limit) or learned from finished gangs of its queue and shape
            "expectedRuntimeSeconds": round(self.expected_runtime) if self.expected_runtime is not None else None,
            "expectedRuntimeSource": (None if self.expected_runtime is None
                                      else "learned" if self.runtime_estimated else "declared"),
        }


class PendingPage:
    """A page of a pending list: ``total`` pending in the queue, ``items`` from ``offset``."""

    __slots__ = ("items", "query", "total")

    def __init__(self, query: PendingQuery, total: int, items: list[PendingItem]) -> None:
        self.query = query
        self.total = total
        self.items = items

    def to_json(self) -> dict[str, Any]:
        q = self.query
        body: dict[str, Any] = {"kind": "PendingWorkloadsSummary", "apiVersion": API_VERSION}
        if q.cluster_queue is not None:
            body["clusterQueue"] = q.cluster_queue
        else:
            body["namespace"] = q.namespace
            body["localQueue"] = q.local_queue
        body.update(total=self.total, limit=q.limit, offset=q.offset, items=[i.to_json() for i in self.items])
        return body


PendingSource = Callable[[PendingQuery], "PendingPage | Awaitable[PendingPage | None] | None"]
"""Answers a query, or None when the queue does not exist (HTTP 404). May be a coroutine function."""


def engine_source(engine: Engine, clock: Callable[[], float] = time.time) -> PendingSource:
    """A :data:`PendingSource` reading ``engine`` directly. Call it only on the task (event loop)
    that drives the engine: the engine is not thread-safe. ``clock`` gives the engine's ``now``."""

    def answer(q: PendingQuery) -> PendingPage | None:
        now = clock()
        if q.cluster_queue is not None:
            view = engine.cluster_queue(q.cluster_queue)
            if view is None:
                return None
            items = [
                _item(row, q.cluster_queue, None, now)
                for row in engine.pending_workloads(q.cluster_queue, limit=q.limit, offset=q.offset)
            ]
            return PendingPage(q, view.pending, items)
        lq = engine.local_queues.get(f"{q.namespace}/{q.local_queue}")
        if lq is None:
            return None
        total = 0
        page: list[PendingItem] = []
        # The LocalQueue's gangs are interleaved with others in its ClusterQueue: filter in order.
        for row in engine.pending_workloads(lq.cluster_queue):
            if row.namespace != q.namespace or row.local_queue != q.local_queue:
                continue
            total += 1
            if total > q.offset and len(page) < q.limit:
                page.append(_item(row, lq.cluster_queue, total, now))
        return PendingPage(q, total, page)

    return answer


def _item(row: Any, cluster_queue: str, lq_position: int | None, now: float) -> PendingItem:
    name = row.key.split("/", 1)[1] if "/" in row.key else row.key
    return PendingItem(
        name=name,
        namespace=row.namespace,
        local_queue=row.local_queue,
        cluster_queue=cluster_queue,
        priority=row.priority,
        position_in_cluster_queue=row.position,
        position_in_local_queue=lq_position,
        pending_since=row.pending_since,
        wait_seconds=max(0.0, now - row.pending_since),
        reason=row.reason,
        message=row.message,
        expected_runtime=getattr(row, "expected_runtime", None),
        runtime_estimated=bool(getattr(row, "runtime_estimated", False)),
    )


_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 503: "ServiceUnavailable"}


def _error(status: int, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": _REASONS.get(status, ""), "code": status}
    return web.json_response(body, status=status)


def _int_param(request: web.Request, name: str, default: int, maximum: int | None) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(reason=f"query parameter {name}={raw!r} is not an integer") from None
    if value < 0:
        raise web.HTTPBadRequest(reason=f"query parameter {name}={value} must not be negative")
    if maximum is not None and value > maximum:
        raise web.HTTPBadRequest(reason=f"query parameter {name}={value} exceeds the maximum of {maximum}")
    return value


def create_app(
    registry: CollectorRegistry,
    *,
    ready: Callable[[], bool] | None = None,
    before_scrape: Callable[[], None] | None = None,
) -> web.Application:
    """The controller's plain-HTTP app on the metrics port: ``/metrics`` (``registry``, after
    ``before_scrape()``, which brings computed gauges up to date), ``/healthz``, ``/readyz``
    (``ready()``, e.g. "caches synced"; always ready when not given). No workload is named here:
    the pending-workloads API is :func:`visibility_app`, on its own port, behind authentication."""
    app = web.Application()

    async def metrics(_: web.Request) -> web.Response:
        if before_scrape is not None:
            before_scrape()
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if ready is not None and not ready():
            return web.Response(status=503, text="not ready")
        return web.Response(text="ok")

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


RESOURCES = (("clusterqueues", False), ("localqueues", True))
"""The queue kinds whose ``pendingworkloads`` subresource the API serves, and whether namespaced."""


def api_group() -> dict[str, Any]:
    """The discovery document of ``/apis/visibility.gangq.io`` (an APIGroup)."""
    version = {"groupVersion": API_VERSION, "version": API_VERSION.split("/")[1]}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": API_GROUP, "versions": [version],
            "preferredVersion": version}


def api_resources() -> dict[str, Any]:
    """The discovery document of ``/apis/visibility.gangq.io/v1alpha1`` (an APIResourceList): only
    the subresources, so that ``kubectl get clusterqueues`` keeps naming gangq.io's."""
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION, "resources": [
        {"name": f"{plural}/pendingworkloads", "singularName": "", "namespaced": namespaced,
         "kind": "PendingWorkloadsSummary", "verbs": ["get"]} for plural, namespaced in RESOURCES]}


SourceOf = Callable[[], "PendingSource | str"]
"""The source to answer from now, or why there is none (a standby replica: HTTP 503)."""


def visibility_app(source: SourceOf, guard: Guard) -> web.Application:
    """The pending-workloads API (served over HTTPS by :mod:`gangq.operator.visibility`): the two
    pending-workloads paths and the discovery documents of the group, each request authenticated
    by ``guard``; the pending lists also authorized, with a SubjectAccessReview for verb ``get`` on
    subresource ``pendingworkloads`` of the queue (:mod:`gangq.observability.auth`). Other paths
    (``/openapi/...`` among them) answer 404."""
    app = web.Application()

    async def user_of(request: web.Request) -> User:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        peer = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        return await guard.authenticate(request.headers, request.headers.getall, peer or None)

    async def discovery(request: web.Request) -> web.Response:
        try:
            await user_of(request)
        except Unauthorized as err:
            return _error(err.status, err.message)
        return web.json_response(api_group() if request.path.rstrip("/") == f"/apis/{API_GROUP}" else api_resources())

    async def answer(request: web.Request, query: PendingQuery, attributes: Attributes) -> web.Response:
        try:
            user = await user_of(request)
            await guard.authorize(user, attributes)
        except Unauthorized as err:
            return _error(err.status, err.message)
        pending = source()
        if isinstance(pending, str):
            return _error(503, pending)
        result = pending(query)
        if inspect.isawaitable(result):
            result = await result
        if result is None:
            what = (
                f"ClusterQueue {query.cluster_queue!r}"
                if query.cluster_queue is not None
                else f"LocalQueue {query.namespace}/{query.local_queue}"
            )
            return _error(404, f"{what} not found")
        log.debug("visibility: %s read %s", user.name, attributes.describe())
        return web.json_response(result.to_json())

    def paging(request: web.Request) -> tuple[int, int]:
        return _int_param(request, "limit", DEFAULT_LIMIT, MAX_LIMIT), _int_param(request, "offset", 0, None)

    async def by_cluster_queue(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        attributes = Attributes("get", API_GROUP, "clusterqueues", "pendingworkloads", name=name)
        try:
            limit, offset = paging(request)
        except web.HTTPBadRequest as err:
            return _error(400, err.reason)
        return await answer(request, PendingQuery(cluster_queue=name, limit=limit, offset=offset), attributes)

    async def by_local_queue(request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        attributes = Attributes("get", API_GROUP, "localqueues", "pendingworkloads", namespace, name)
        try:
            limit, offset = paging(request)
        except web.HTTPBadRequest as err:
            return _error(400, err.reason)
        query = PendingQuery(namespace=namespace, local_queue=name, limit=limit, offset=offset)
        return await answer(request, query, attributes)

    app.router.add_get(f"/apis/{API_GROUP}", discovery)
    app.router.add_get(f"/apis/{API_GROUP}/", discovery)
    app.router.add_get(PREFIX, discovery)
    app.router.add_get(PREFIX + "/", discovery)
    app.router.add_get(PREFIX + "/clusterqueues/{name}/pendingworkloads", by_cluster_queue)
    app.router.add_get(PREFIX + "/namespaces/{namespace}/localqueues/{name}/pendingworkloads", by_local_queue)
    return app


def standby_app() -> web.Application:
    """What a standby replica serves on the metrics port until it leads: ``/healthz`` and
    ``/readyz`` answer ok (it is alive, serves the admission webhook and is ready to take over: a
    Deployment whose probes failed on standbys would restart them and drop them from the webhook
    Service), ``/metrics`` has ``gangq_leader 0``."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    Gauge("gangq_leader", "1 while this replica holds the leader lease and runs the scheduler, else 0",
          registry=registry).set(0)
    return create_app(registry)


async def start_server(app: web.Application, host: str = "0.0.0.0", port: int = 8080) -> web.AppRunner:
    """Serve ``app`` on the running event loop; ``await runner.cleanup()`` stops it."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    log.info("serving /metrics, /healthz and /readyz on %s:%d", host, port)
    return runner
