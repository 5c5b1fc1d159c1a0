"""The admission webhook: suspend queued workloads at creation, refuse what would break the queue.

Two decisions, pure functions of the AdmissionReview (``admission.k8s.io/v1``), and an HTTPS
server that answers the API server with them (``gangq run --webhook-port``; docs/operator.md,
"Admission webhook"):

- :func:`mutate` (``POST /mutate``): the CREATE of a kind gangq queues (:data:`BY_KIND`, matched on
  the request's group and kind) that is gangq's (not a JobSet's child Job), is not suspended, and
  has a queue label — or lives in a namespace whose workloads without one go to its ``default``
  LocalQueue (``manageJobsWithoutQueueName``) — is patched to suspended (the adapter's
  ``suspend_ops``). So no pod starts before gangq admits it; without the webhook gangq suspends it
  on first sight, after its pods may have started.
- :func:`validate` (``POST /validate``): an UPDATE that changes a queue label of an admitted object
  (annotation ``gangq.io/admission``, not suspended) is refused — it runs on its ClusterQueue's
  quota, and the label would then name a queue it does not run in; and a CREATE or UPDATE whose
  gangq annotations or labels are malformed is refused, naming the field (the adapter's
  ``to_workload`` finds them). Whether a named priority class exists is not judged here: it may be
  created after the workload, and the controller reports it on the Workload. An UPDATE is refused
  only for an error the old object did not have: an object that was already malformed (created
  before the webhook was installed) can still be suspended, have finalizers removed and be deleted.

Denials answer 403 ``Forbidden`` (as controller-runtime's ``Denied``, which Kueue's webhooks use);
a review that cannot be read gets a 400 (controller-runtime's ``Errored(400, …)``) and is logged.
A decision never raises: an unexpected error refuses a mutation (500: a queued workload must never
slip past unsuspended) and allows an update (the controller reports what the webhook missed).
``GET /healthz`` answers ``ok``.

The server runs on every replica, leader or standby, from before the leader election on: a
standby has no watches, so the namespaces' labels are read through the client, cached for
:data:`NAMESPACE_TTL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from gangq.api.meta import Meta
from gangq.api.workload import (
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    NotQueuedError,
    queue_name,
)
from gangq.core.errors import SpecError
from gangq.integrations import podgroup
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.podgroup import PODGROUP
from gangq.integrations.registry import BY_KIND, pod_gang
from gangq.operator.certs import Certificates, certificates
from gangq.operator.config import OperatorConfig
from gangq.operator.kube import ApiError, KubeClient, resource_path
from gangq.operator.state import DEFAULT_QUEUE
from gangq.operator.translate import ADMISSION_ANNOTATION, recorded_admission

log = logging.getLogger(__name__)

API_VERSION: Final = "admission.k8s.io/v1"
NAMESPACE_TTL_SECONDS: Final = 10.0
MAX_REVIEW_BYTES: Final = 8 * 1024 * 1024  # an UPDATE carries two objects of up to 1.5 MiB each
STOP_SECONDS: Final = 0.5  # answers in flight at shutdown get this long
QUEUE_LABELS: Final = (QUEUE_LABEL, KUEUE_QUEUE_LABEL)
_PRIORITY_LABELS: Final = frozenset({PRIORITY_CLASS_LABEL, KUEUE_PRIORITY_CLASS_LABEL})
_WEBHOOK_FIELDS: Final = ("metadata.annotations[gangq.io/", "metadata.labels[")


class ReviewError(ValueError):
    """The body is not an AdmissionReview this webhook can answer (HTTP 400)."""

    def __init__(self, message: str, uid: str = "") -> None:
        super().__init__(message)
        self.uid = uid


@dataclass(frozen=True)
class Request:
    """What the decisions read of an AdmissionRequest. ``kind`` is None for a kind gangq does not queue."""

    uid: str
    operation: str
    kind: WorkloadKind | None
    namespace: str
    obj: Mapping[str, Any]
    old: Mapping[str, Any] | None
    pod: bool = False  # a core/v1 Pod (a pod group's member is gated at creation)

    @property
    def ref(self) -> str:
        """``Kind 'namespace/name'``, as gangq's field errors name an object."""
        meta = Meta(self.obj)
        name = meta.name or meta.raw.get("generateName") or ""
        return f"{self.kind.kind if self.kind else 'object'} '{self.namespace}/{name}'"


def parse_review(body: Any) -> Request:
    """The request of an AdmissionReview; :class:`ReviewError` when it is not one."""
    if not isinstance(body, dict) or body.get("kind") != "AdmissionReview":
        raise ReviewError("the body is not an AdmissionReview")
    req = body.get("request")
    if not isinstance(req, dict):
        raise ReviewError("the AdmissionReview has no request")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid is missing")
    if body.get("apiVersion") != API_VERSION:
        raise ReviewError(f"apiVersion {body.get('apiVersion')!r} is not {API_VERSION} "
                          "(the configuration must list admissionReviewVersions: [v1])", uid)
    operation = req.get("operation")
    if not isinstance(operation, str):
        raise ReviewError("request.operation is missing", uid)
    raw_kind = req.get("kind")
    gvk: dict[str, Any] = raw_kind if isinstance(raw_kind, dict) else {}
    kind = BY_KIND.get(str(gvk.get("kind")))
    if kind is not None and gvk.get("group", "") != kind.group:
        kind = None
    obj = req.get("object")
    old = req.get("oldObject")
    if operation in ("CREATE", "UPDATE") and not isinstance(obj, dict):
        raise ReviewError(f"request.object of a {operation} is not an object", uid)
    if operation == "UPDATE" and not isinstance(old, dict):
        raise ReviewError("request.oldObject of an UPDATE is not an object", uid)
    obj = obj if isinstance(obj, dict) else {}
    namespace = req.get("namespace") or Meta(obj).namespace_or_default
    pod = gvk.get("group", "") == "" and gvk.get("kind") == "Pod"
    return Request(uid, operation, kind, str(namespace), obj, old if isinstance(old, dict) else None, pod)


def allowed(uid: str) -> dict[str, Any]:
    return {"uid": uid, "allowed": True}


def denied(uid: str, message: str, code: int = 403) -> dict[str, Any]:
    reason = {400: "BadRequest", 403: "Forbidden", 500: "InternalError"}.get(code, "")
    return {"uid": uid, "allowed": False,
            "status": {"status": "Failure", "code": code, "reason": reason, "message": message}}


def review(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def wants_namespace(req: Request) -> bool:
    """Whether the decision depends on the namespace's labels (a workload of ours without a queue
    label, under ``manageJobsWithoutQueueName``)."""
    return req.kind is not None and req.operation in ("CREATE", "UPDATE") and queue_name(req.obj) is None


def _queued(req: Request, default_queue: str | None) -> bool:
    return req.kind is not None and req.kind.ours(req.obj) and (queue_name(req.obj) or default_queue) is not None


def mutate(req: Request, default_queue: str | None = None) -> dict[str, Any]:
    """The answer to ``/mutate`` (see the module docstring). ``default_queue``: the LocalQueue the
    object goes to without a queue label (its namespace's, under manageJobsWithoutQueueName), else None."""
    kind = req.kind
    if req.pod and req.operation == "CREATE":
        return mutate_pod(req)
    if req.operation != "CREATE" or kind is None or not _queued(req, default_queue) or kind.suspended(req.obj):
        return allowed(req.uid)
    ops = kind.suspend_ops(req.obj)
    if not isinstance(req.obj.get("spec"), dict):
        ops = [{"op": "add", "path": "/spec", "value": {}}, *ops]
    log.debug("webhook: suspending %s at creation (queue %s)", req.ref, queue_name(req.obj) or default_queue)
    return {**allowed(req.uid), "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()}


def mutate_pod(req: Request) -> dict[str, Any]:
    """A pod created in a pod group (a PodGroup's, a Kueue group's) or alone with a queue label
    gets the scheduling gate ``gangq.io/admission``: it waits for its group's admission. A pod of
    any other queued kind (a Job's, a JobSet's …) is never gated: that kind is suspended as a
    whole, and its pods come only once it is admitted."""
    pod = req.obj
    owner = pod_gang(pod)
    if owner is None or PODGROUP.pod_owner(pod) != owner or podgroup.gated(pod):
        return allowed(req.uid)
    gate = {"name": podgroup.GATE}
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        ops: list[dict[str, Any]] = [{"op": "add", "path": "/spec", "value": {"schedulingGates": [gate]}}]
    elif isinstance(spec.get("schedulingGates"), list):
        ops = [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]
    else:
        ops = [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}]
    log.debug("webhook: gating pod %s/%s of gang %s", req.namespace,
              Meta(pod).name or Meta(pod).raw.get("generateName"), owner[0])
    return {**allowed(req.uid), "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()}


def admitted(kind: WorkloadKind, obj: Mapping[str, Any]) -> bool:
    return ADMISSION_ANNOTATION in Meta(obj).annotations and not kind.suspended(obj)


def _field(pointer: str) -> str:
    return pointer.lstrip("/").replace("/", ".")


def spec_error(kind: WorkloadKind, obj: Mapping[str, Any]) -> SpecError | None:
    """The webhook's error of ``obj``: a malformed gangq annotation or label, else None.

    The priority-class labels are left out (whether the class exists is the controller's to say),
    and the gang is built as if queued (the queue itself is not judged here either)."""
    meta = dict(Meta(obj).raw)  # a copy to build the object the gang is built from
    labels = Meta(obj).labels
    if _PRIORITY_LABELS & labels.keys():
        meta["labels"] = {k: v for k, v in labels.items() if k not in _PRIORITY_LABELS}
    try:
        kind.to_workload({**obj, "metadata": meta}, {}, {}, default_queue=DEFAULT_QUEUE)
    except NotQueuedError:
        return None
    except SpecError as err:
        return err if err.field.startswith(_WEBHOOK_FIELDS) else None
    return None


def validate(req: Request, default_queue: str | None = None) -> dict[str, Any]:
    """The answer to ``/validate`` (see the module docstring)."""
    kind = req.kind
    if kind is None or req.operation not in ("CREATE", "UPDATE"):
        return allowed(req.uid)
    deleting = Meta(req.obj).deleting
    if req.operation == "UPDATE" and req.old is not None and not deleting and admitted(kind, req.old):
        old, new = Meta(req.old).labels, Meta(req.obj).labels
        changed = [key for key in QUEUE_LABELS if old.get(key) != new.get(key)]
        if changed:
            key = changed[0]
            queue = (recorded_admission(req.old) or {}).get("clusterQueue")
            runs = f" (it runs on ClusterQueue {queue}'s quota)" if isinstance(queue, str) else ""
            message = (f"{req.ref}: metadata.labels[{key}]: cannot change from {old.get(key)!r} to "
                       f"{new.get(key)!r} while the {kind.kind} is admitted{runs}; suspend it first "
                       f"({_field(kind.suspend_path)}: true) and change the label then, or delete it and "
                       "create it again")
            log.info("webhook: refused a queue change: %s", message)
            return denied(req.uid, message)
    if deleting or not kind.ours(req.obj) or not _queued(req, default_queue):
        return allowed(req.uid)
    err = spec_error(kind, req.obj)
    if err is None:
        return allowed(req.uid)
    if req.operation == "UPDATE" and req.old is not None:
        before = spec_error(kind, req.old)
        if before is not None and (before.field, before.message) == (err.field, err.message):
            return allowed(req.uid)  # malformed before this update: not this update's doing
    log.info("webhook: refused a malformed %s: %s", req.ref, err)
    return denied(req.uid, str(err))


class NamespaceLabels:
    """Namespaces' labels read through the client, each kept :data:`NAMESPACE_TTL_SECONDS`
    (a standby replica has no Namespace watch)."""

    def __init__(self, client: KubeClient, ttl: float = NAMESPACE_TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.ttl = ttl
        self.clock = clock
        self._cache: dict[str, tuple[float, dict[str, str] | None]] = {}

    async def get(self, name: str) -> dict[str, str] | None:
        """The namespace's labels; None when it does not exist. Raises :class:`ApiError` when it
        cannot be read."""
        now = self.clock()
        hit = self._cache.get(name)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        try:
            obj = await self.client.get(resource_path("", "v1", "namespaces", name=name))
            labels: dict[str, str] | None = dict(Meta(obj).labels)
        except ApiError as err:
            if err.status != 404:
                raise
            labels = None
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[name] = (now, labels)
        return labels


Decision = Callable[[Request, str | None], dict[str, Any]]


class WebhookServer:
    """The HTTPS server of :func:`mutate` and :func:`validate`; :meth:`start` binds it (a port in
    use is an error at once) and keeps its certificate (:mod:`gangq.operator.certs`) in a task:
    until the first certificate is loaded, TLS handshakes fail and the API server applies the
    configuration's failurePolicy."""

    def __init__(self, config: OperatorConfig, client: KubeClient, certs: Certificates | None = None) -> None:
        self.config = config
        self.certs: Certificates = certs or certificates(client, config.webhook)
        self.namespaces = NamespaceLabels(client)
        self.selector = config.managed_jobs_namespace_selector.selector()
        self.port = config.webhook.port
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()  # set once a certificate is served

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REVIEW_BYTES)

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def mutating(request: web.Request) -> web.Response:
            return await self._answer(request, mutate, fail_closed=True)

        async def validating(request: web.Request) -> web.Response:
            return await self._answer(request, validate, fail_closed=False)

        app.router.add_post("/mutate", mutating)
        app.router.add_post("/validate", validating)
        app.router.add_get("/healthz", healthz)
        return app

    async def default_queue(self, req: Request) -> str | None:
        """``default`` when the request's namespace queues workloads without a queue label."""
        if not self.config.manage_jobs_without_queue_name or not wants_namespace(req):
            return None
        labels = await self.namespaces.get(req.namespace)
        return DEFAULT_QUEUE if labels is not None and self.selector.matches(labels) else None

    async def _answer(self, request: web.Request, decide: Decision, *, fail_closed: bool) -> web.Response:
        body: Any = None
        try:
            body = await request.json()
            req = parse_review(body)
        except ValueError as err:  # ReviewError, or JSON that does not parse
            uid = err.uid if isinstance(err, ReviewError) else ""
            log.warning("webhook %s: malformed AdmissionReview from %s: %s", request.path, request.remote, err)
            return web.json_response(review(denied(uid, f"malformed AdmissionReview: {err}", 400)), status=400)
        try:
            response = decide(req, await self.default_queue(req))
        except ApiError as err:
            log.warning("webhook %s: %s: cannot read Namespace %s: %s", request.path, req.ref, req.namespace, err)
            response = (denied(req.uid, f"{req.ref}: cannot read Namespace {req.namespace!r} to know whether gangq "
                                        f"queues it ({err}); retry", 500) if fail_closed else allowed(req.uid))
        except Exception:
            log.exception("webhook %s: %s: the decision failed", request.path, req.ref)
            response = denied(req.uid, f"{req.ref}: gangq's webhook failed; retry", 500) if fail_closed \
                else allowed(req.uid)
        return web.json_response(review(response))

    async def start(self) -> None:
        cfg = self.config.webhook
        runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=STOP_SECONDS)
        await runner.setup()
        try:
            site = web.TCPSite(runner, cfg.bind, cfg.port, ssl_context=self.certs.serving.context)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        log.info("webhook: serving /mutate and /validate on https://%s:%d", cfg.bind, cfg.port)
        self._task = asyncio.ensure_future(self._keep_certificate())

    async def _keep_certificate(self) -> None:
        """Load the certificate, then check it again every ``certs.interval`` (errors: 1, 2, 5, 10 s)."""
        backoff = (1.0, 2.0, 5.0, 10.0)
        failures = 0
        while True:
            try:
                await self.certs.refresh()
                failures = 0
                if self.certs.serving.loaded is not None:
                    self.ready.set()
                wait = self.certs.interval
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.error("webhook: cannot load its certificate: %s", err)
                wait = backoff[min(failures, len(backoff) - 1)]
                failures += 1
            await asyncio.sleep(wait)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runner.cleanup(), timeout=STOP_SECONDS + 0.25)
        self.certs.serving.close()
        log.debug("webhook: stopped")


async def start_webhook(config: OperatorConfig, client: KubeClient,
                        certs: Certificates | None = None) -> WebhookServer:
    server = WebhookServer(config, client, certs)
    await server.start()
    return server


__all__ = ["Request", "ReviewError", "WebhookServer", "allowed", "denied", "mutate", "parse_review",
           "review", "spec_error", "start_webhook", "validate"]
