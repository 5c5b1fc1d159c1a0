"""The pending-workloads API's HTTPS server (``gangq run --visibility-port``; docs/observability.md,
"Visibility").

Every replica serves it, leader or standby, from before the leader election on, so that the
APIService ``v1alpha1.visibility.gangq.io`` stays available through a failover: the leader answers
from its engine, a standby with a 503 that says it does not lead (after authenticating and
authorizing the request, so that it tells nobody anything more).

What it serves is :func:`gangq.observability.http.visibility_app`; who may read it is decided by a
:class:`gangq.observability.auth.Guard` whose reviews are made with the controller's credentials
(``tokenreviews`` and ``subjectaccessreviews`` ``create`` in its ClusterRole) on a client of their
own (their requests are not the controller's write budget nor its API metrics).

Its certificate comes from ``visibility.certDir`` (files, reloaded when they change) or is kept by
gangq in the Secret ``visibility.secretName`` (:class:`VisibilityCertificates`: the webhook's
machinery of :mod:`gangq.operator.certs`, for the visibility Service's names), whose CA gangq writes
into the APIService's ``caBundle``. The front-proxy settings (the requestheader client CA, its
allowed names and user headers) are read from ``kube-system/extension-apiserver-authentication``,
as every aggregated API server reads them, every :data:`REQUESTHEADER_CHECK_SECONDS`; while it
cannot be read, front-proxy certificates are refused and bearer tokens still work.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from gangq.observability.auth import Guard, RequestHeader
from gangq.observability.http import PendingSource, visibility_app
from gangq.operator.certs import (
    Bundle,
    Certificates,
    DirCertificates,
    SecretCertificates,
    ServingContext,
    write_new_dir,
)
from gangq.operator.config import OperatorConfig, VisibilityConfig, WebhookConfig
from gangq.operator.kube import ApiError, KubeClient, resource_path

log = logging.getLogger(__name__)

REQUESTHEADER_CHECK_SECONDS: Final = 60.0
REQUESTHEADER_CONFIGMAP: Final = ("kube-system", "extension-apiserver-authentication")
REVIEW_QPS: Final = 50.0
STOP_SECONDS: Final = 0.5
STANDBY: Final = ("this gangq replica does not lead (another replica holds the Lease and answers): retry; "
                  "through the API server's Service a retry reaches the leader")


class VisibilityCertificates(SecretCertificates):
    """A CA and serving certificate for the visibility Service, kept in ``config.secretName`` as the
    webhook's are (:class:`gangq.operator.certs.SecretCertificates`); the CA is written into the
    ``caBundle`` of the APIService ``config.apiServiceName`` instead of the webhook configurations."""

    def __init__(self, client: KubeClient, config: VisibilityConfig, serving: ServingContext | None = None,
                 clock: Any = time.time) -> None:
        as_webhook = WebhookConfig.model_validate({
            "serviceName": config.service_name, "namespace": config.namespace, "secretName": config.secret_name,
            "hosts": list(config.hosts), "configurationName": config.api_service_name})
        super().__init__(client, as_webhook, serving, clock)
        self.api_service = config.api_service_name
        self._api_service_missing = False

    async def _write(self, secret: dict[str, Any] | None, bundle: Bundle) -> bool:
        try:
            return await super()._write(secret, bundle)
        except RuntimeError as err:
            cause = err.__cause__
            if isinstance(cause, ApiError) and cause.status == 403:
                raise RuntimeError(f"{self.secret_ref}: {cause.message} (deploy/base/visibility.yaml ships this "
                                   "Secret and the Role that lets gangq update it)") from cause
            raise

    async def _inject(self, ca_bundle: str) -> None:
        path = resource_path("apiregistration.k8s.io", "v1", "apiservices", name=self.api_service)
        try:
            current = await self.client.get(path, attempts=2)
        except ApiError as err:
            if err.status != 404:
                raise
            if not self._api_service_missing:
                self._api_service_missing = True
                log.info("visibility: APIService %r does not exist: the API is reached on its port only",
                         self.api_service)
            return
        self._api_service_missing = False
        if ((current.get("spec") or {}).get("caBundle") or "") != ca_bundle:
            await self.client.patch(path, {"spec": {"caBundle": ca_bundle}}, want_body=False)
            log.info("visibility: wrote the CA into the caBundle of APIService %r", self.api_service)


def certificates(client: KubeClient, config: VisibilityConfig) -> DirCertificates | VisibilityCertificates:
    """``certDir`` when set, else the Secret."""
    if config.cert_dir:
        return DirCertificates(config.cert_dir)
    return VisibilityCertificates(client, config)


class VisibilityServer:
    """The HTTPS server of the pending-workloads API (see the module docstring). :meth:`serve`
    gives it the leader's answers; until then (and after :meth:`withdraw`) it answers 503."""

    def __init__(self, config: OperatorConfig, client: KubeClient, certs: Certificates | None = None) -> None:
        self.config = config.visibility
        self.client = client
        self.certs: Certificates = certs or certificates(client, self.config)
        # Reviews on a client of their own: not counted as the controller's writes, not in its API
        # metrics, and not behind its rate limit (nor it behind theirs).
        self.reviewer = KubeClient(client.credentials, qps=REVIEW_QPS, burst=int(REVIEW_QPS * 2))

        async def reviews(path: str, body: dict[str, Any]) -> dict[str, Any]:
            return await self.reviewer.create(path, body, attempts=2)

        self.guard = Guard(reviews, ttl=self.config.cache_seconds, size=self.config.cache_size)
        self._source: PendingSource | None = None
        self._ready: Callable[[], bool] = lambda: True
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._requestheader_pem: str | None = None
        self._requestheader_note = ""
        self.ready = asyncio.Event()  # set once a certificate is served

    @property
    def port(self) -> int:
        return self.config.port

    def serve(self, source: PendingSource, ready: Callable[[], bool] = lambda: True) -> None:
        """Answer from ``source`` (the leader's engine) once ``ready()``."""
        self._source = source
        self._ready = ready

    def withdraw(self) -> None:
        self._source = None

    def _current(self) -> PendingSource | str:
        if self._source is None:
            return STANDBY
        if not self._ready():
            return "the gangq controller is reading the cluster's state after taking the lead: retry in a few seconds"
        return self._source

    async def start(self) -> None:
        cfg = self.config
        runner = web.AppRunner(visibility_app(self._current, self.guard), access_log=None,
                               shutdown_timeout=STOP_SECONDS)
        await runner.setup()
        try:
            site = web.TCPSite(runner, cfg.bind, cfg.port, ssl_context=self.certs.serving.context)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        log.info("visibility: serving the pending-workloads API on https://%s:%d", cfg.bind, cfg.port)
        self._tasks = [asyncio.ensure_future(self._keep(self.certs.refresh, self.certs.interval, "its certificate")),
                       asyncio.ensure_future(self._keep(self.refresh_requestheader, REQUESTHEADER_CHECK_SECONDS,
                                                        "the front-proxy settings"))]

    async def _keep(self, refresh: Callable[[], Any], interval: float, what: str) -> None:
        """``refresh()`` now, then every ``interval`` s (after an error: 1, 2, 5, 10 s)."""
        backoff = (1.0, 2.0, 5.0, 10.0)
        failures = 0
        while True:
            try:
                await refresh()
                failures = 0
                if self.certs.serving.loaded is not None:
                    self.ready.set()
                wait = interval
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.error("visibility: cannot load %s: %s", what, err)
                wait = backoff[min(failures, len(backoff) - 1)]
                failures += 1
            await asyncio.sleep(wait)

    async def refresh_requestheader(self) -> None:
        """Read the API server's front-proxy settings; accept its client certificates by them."""
        namespace, name = REQUESTHEADER_CONFIGMAP
        path = resource_path("", "v1", "configmaps", namespace, name)
        try:
            configmap = await self.client.get(path, attempts=2)
            setting = RequestHeader.from_configmap(configmap.get("data") or {})
            note = "" if setting is not None else "it names no requestheader client CA"
        except ApiError as err:
            if err.status not in (403, 404):
                raise
            setting, note = None, f"{err.status} {err.message}"
        except ValueError as err:
            setting, note = None, f"{namespace}/{name}: {err}"
        if setting is None:
            if note != self._requestheader_note:
                log.warning("visibility: no front-proxy client certificates accepted (ConfigMap %s/%s: %s); "
                            "bearer tokens still are", namespace, name, note)
            self._requestheader_note = note
            self.guard.requestheader = None
            return
        self._requestheader_note = ""
        pem = setting.ca_pem
        if pem != self._requestheader_pem:
            context = self.certs.serving.context
            # Handshakes accept a certificate of any CA loaded so far (a context's CAs can only be
            # added to); the guard checks it against the current ones.
            context.load_verify_locations(cadata=pem)
            context.verify_mode = ssl.CERT_OPTIONAL
            self._requestheader_pem = pem
            log.info("visibility: accepting the API server's front-proxy client certificates (allowed names: %s)",
                     ", ".join(setting.allowed_names) or "any")
        self.guard.requestheader = setting

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runner.cleanup(), timeout=STOP_SECONDS + 0.25)
        await self.reviewer.close()
        self.certs.serving.close()
        log.debug("visibility: stopped")


async def start_visibility(config: OperatorConfig, client: KubeClient,
                           certs: Certificates | None = None) -> VisibilityServer:
    server = VisibilityServer(config, client, certs)
    await server.start()
    return server




QUICKSTART_PORT: Final = 8443


def quickstart_cert_dir(kubeconfig: Path) -> Path:
    """Where a quick start keeps the visibility API's certificate (``tls.crt``, ``tls.key``) and its
    CA (``ca.crt``, which ``gangq queue`` trusts for that kubeconfig): beside its kubeconfig."""
    return kubeconfig.with_name(f"{kubeconfig.stem}-visibility")


def quickstart(cfg: OperatorConfig, kubeconfig: Path) -> OperatorConfig:
    """The quick start's visibility API: on :data:`QUICKSTART_PORT` unless a port was set, on
    loopback, with a certificate for 127.0.0.1 and localhost made anew in
    :func:`quickstart_cert_dir` (unless a certificate directory was given)."""
    vis = cfg.visibility
    update: dict[str, object] = {}
    if not vis.port:
        update["port"] = QUICKSTART_PORT
    if not vis.cert_dir:
        directory = quickstart_cert_dir(kubeconfig)
        write_new_dir(directory, ["127.0.0.1", "localhost", *vis.hosts], datetime.datetime.now(datetime.UTC))
        update["cert_dir"] = str(directory)
    return cfg.model_copy(update={"visibility": vis.model_copy(update=update)}) if update else cfg


__all__ = ["QUICKSTART_PORT", "VisibilityCertificates", "VisibilityServer", "certificates",
           "quickstart", "quickstart_cert_dir", "start_visibility"]
