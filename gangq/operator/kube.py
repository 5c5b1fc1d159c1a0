"""A small asyncio REST client for the Kubernetes API (aiohttp), used for the operator's writes.

kopf owns the watches; this client does the initial LISTs of a restart, the writes the scheduling
loop decides on (the queued objects' patches, Workload creates and status patches, queue statuses, Events,
Leases) and the CRD install. It reads credentials from a kubeconfig or the in-cluster service
account through the ``kubernetes`` package, limits requests with a token bucket (``qps``,
``burst``) and counts its writes by resource (tests and metrics read ``writes``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import aiohttp

from gangq import __version__
from gangq.api.meta import Meta
from gangq.observability.kubeconfig import load_incluster_config, load_kube_config

log = logging.getLogger(__name__)

JSON_PATCH: Final = "application/json-patch+json"
MERGE_PATCH: Final = "application/merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer: ``status`` (HTTP code), ``reason`` (Status.reason) and the message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def resource_path(
    group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    """``/api/v1/...`` or ``/apis/{group}/{version}/...`` for a resource, object or subresource."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    if name:
        base += f"/{name}"
        if sub:
            base += f"/{sub}"
    return base


CONNECTIONS: Final = 72
USER_AGENT: Final = f"gangq/{__version__} (python aiohttp)"
"""Connections to the API server at most: the controller's write lanes (32 + 16) and eviction
reads (4, of two requests each) leave room for the Lease's renewal and other reads."""


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up (client-go's QPS / Burst)."""

    __slots__ = ("burst", "rate", "tokens", "updated")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self.tokens = float(self.burst)
        self.updated = time.monotonic()

    async def take(self) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.rate)


class Credentials:
    """Where the API server is and how to authenticate (from a kubeconfig or in-cluster)."""

    __slots__ = ("ca_path", "cert_path", "insecure", "key_path", "namespace", "server", "token")

    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        ca_path: str | None = None,
        cert_path: str | None = None,
        key_path: str | None = None,
        insecure: bool = False,
        namespace: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.ca_path = ca_path
        self.cert_path = cert_path
        self.key_path = key_path
        self.insecure = insecure
        self.namespace = namespace

    @classmethod
    def load(cls, kubeconfig: str | Path | None = None, context: str | None = None) -> Credentials:
        """From ``kubeconfig`` (or $KUBECONFIG / ~/.kube/config), else the in-cluster service
        account. Raises ``kubernetes.config.ConfigException`` when neither is available."""
        from kubernetes import client, config

        cfg = client.Configuration()
        try:
            load_kube_config(
                config_file=str(kubeconfig) if kubeconfig else None, context=context, client_configuration=cfg
            )
        except (config.ConfigException, FileNotFoundError, TypeError):
            if kubeconfig:
                raise
            load_incluster_config(client_configuration=cfg)
        token = None
        auth = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
        if auth:
            token = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else auth
        return cls(
            cfg.host,
            token=token,
            ca_path=cfg.ssl_ca_cert,
            cert_path=cfg.cert_file,
            key_path=cfg.key_file,
            insecure=not cfg.verify_ssl,
        )

    def kopf_connection(self) -> Any:
        """The same credentials as kopf's ``ConnectionInfo`` (for an ``@kopf.on.login`` handler)."""
        import kopf

        return kopf.ConnectionInfo(
            server=self.server,
            token=self.token,
            ca_path=self.ca_path,
            certificate_path=self.cert_path,
            private_key_path=self.key_path,
            insecure=self.insecure or None,
            default_namespace=self.namespace,
        )


class KubeClient:
    """Async JSON requests against one API server, rate limited, with write counters."""

    def __init__(self, credentials: Credentials, *, qps: float = 500.0, burst: int = 1000) -> None:
        self.credentials = credentials
        self.bucket = TokenBucket(qps, burst)
        self.writes: Counter[str] = Counter()  # "verb resource" -> count
        self.observer: Callable[[str, str, int | str], None] | None = None  # (verb, resource, code), e.g. metrics
        self._session: aiohttp.ClientSession | None = None

    async def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            creds = self.credentials
            ctx: ssl.SSLContext | bool = True  # aiohttp's default (it reads ssl=None as True)
            if creds.server.startswith("https"):
                if creds.insecure:
                    ctx = False
                else:
                    ctx = ssl.create_default_context(cafile=creds.ca_path)
                    if creds.cert_path and creds.key_path:
                        ctx.load_cert_chain(creds.cert_path, creds.key_path)
            # names gangq in the API server's audit log, as client-go's clients name themselves
            headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
            if creds.token:
                headers["Authorization"] = f"Bearer {creds.token}"
            self._session = aiohttp.ClientSession(
                base_url=None,
                headers=headers,
                connector=aiohttp.TCPConnector(ssl=ctx, limit=CONNECTIONS),
                timeout=aiohttp.ClientTimeout(total=60),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        want_body: bool = True,
        attempts: int = 6,
    ) -> dict[str, Any]:
        """One request; returns the decoded JSON body (``{}`` with ``want_body=False``: a write whose
        answer nobody reads is not decoded); raises :class:`ApiError` on a non-2xx code.
        Makes up to ``attempts`` tries: 429 / 5xx / connection errors are retried with backoff
        (honouring Retry-After). A caller with a deadline of its own (the Lease's renewal) asks
        for one and retries on its own schedule."""
        session = await self.session()
        url = self.credentials.server + path
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        is_write = method != "GET"
        delay = 0.2
        last = max(1, attempts) - 1
        for attempt in range(last + 1):
            await self.bucket.take()
            try:
                async with session.request(
                    method, url, data=data, params=params, headers={"Content-Type": content_type}
                ) as resp:
                    text = await resp.text()
                    status = resp.status
                    retry_after = resp.headers.get("Retry-After")
            except (aiohttp.ClientError, TimeoutError) as err:
                if attempt == last:
                    raise ApiError(0, "ConnectionError", str(err)) from err
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            if is_write:
                self.writes[f"{method} {_resource_of(path)}"] += 1
            if self.observer is not None:
                try:
                    self.observer(method.lower(), _resource_of(path), status)
                except Exception:  # metrics never break a write
                    log.debug("request observer failed", exc_info=True)
            if status < 300:
                return json.loads(text) if text and want_body else {}
            if (status == 429 or status >= 500) and attempt < last:
                wait = float(retry_after) if retry_after and retry_after.isdigit() else delay
                await asyncio.sleep(wait)
                delay = min(delay * 2, 5.0)
                continue
            try:
                doc = json.loads(text)
                raise ApiError(status, str(doc.get("reason", "")), str(doc.get("message", text)))
            except ValueError:
                raise ApiError(status, "", text) from None
        raise ApiError(0, "Retries", f"{method} {path} failed")  # pragma: no cover

    async def get(self, path: str, *, attempts: int = 6) -> dict[str, Any]:
        return await self.request("GET", path, attempts=attempts)

    async def list(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        """All items of a list, following ``continue`` tokens (500 per page)."""
        query = dict(params or {})
        query["limit"] = "500"
        items: list[dict[str, Any]] = []
        result: dict[str, Any] = {}
        while True:
            result = await self.request("GET", path, params=query)
            items.extend(result.get("items") or [])
            token = Meta(result).continue_token
            if not token:
                break
            query["continue"] = token
        result["items"] = items
        return result

    async def create(
        self, path: str, body: dict[str, Any], *, want_body: bool = True, attempts: int = 6
    ) -> dict[str, Any]:
        return await self.request("POST", path, body=body, want_body=want_body, attempts=attempts)

    async def replace(self, path: str, body: dict[str, Any], *, attempts: int = 6) -> dict[str, Any]:
        return await self.request("PUT", path, body=body, attempts=attempts)

    async def patch(
        self, path: str, body: Any, content_type: str = MERGE_PATCH, *, want_body: bool = True
    ) -> dict[str, Any]:
        return await self.request("PATCH", path, body=body, content_type=content_type, want_body=want_body)


def _resource_of(path: str) -> str:
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts and parts[0] == "api":
        parts = parts[2:]
    elif parts and parts[0] == "apis":
        parts = parts[3:]
    if len(parts) >= 2 and parts[0] == "namespaces":
        parts = parts[2:]
    if not parts:
        return "namespaces"
    resource = parts[0]
    if len(parts) >= 3:
        resource += "/" + parts[2]
    return resource
