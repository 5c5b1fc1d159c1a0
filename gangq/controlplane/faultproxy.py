"""A fault-injecting proxy in front of the real kube-apiserver: the emulator's faults on a real
control plane.

A client (the controller under test) talks plain HTTP to the proxy on loopback with its own bearer
token; the proxy forwards every request to kube-apiserver over TLS, streaming the answer (watches
included), unless a fault rule says otherwise. The rules, their JSON form and the request counters
are the emulator's (:mod:`gangq.controlplane.faults`): the same ``Faults.add_rule(...)`` or ``POST
/debug/faults`` fails the same requests on both control planes. ``{"dropWatches": true}`` closes
every watch stream open through the proxy, as a broken connection does; ``{"expireWatches": true}``
ends each with an ERROR 410 event, as the API server ends a watch whose resourceVersion is too old.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from gangq.controlplane.faults import Faults, FaultsError
from gangq.controlplane.processes import free_port

log = logging.getLogger(__name__)
T = TypeVar("T")

# Hop-by-hop and framing headers are the proxy's own on each side. The body passes through as the
# API server sent it, so its Content-Encoding goes back with it, and the API server is asked for
# the encoding the client asked for (without Accept-Encoding, none: aiohttp would ask for gzip).
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host", "accept-encoding",
                  "upgrade", "proxy-connection", "te", "trailer"})
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def classify(method: str, path: str, query: dict[str, str]) -> tuple[str, str, str | None]:
    """(verb, resource, namespace) of an API request, as the sandbox names them: resource is
    ``plural`` for the core group, ``plural.group`` otherwise, ``/subresource`` appended; a
    request outside the resource API is ``("get", "other", None)``."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return method.lower() if method != "GET" else "get", "other", None
    namespace = None
    watch_prefix = False
    if rest[:1] == ["watch"]:
        watch_prefix, rest = True, rest[1:]
    if len(rest) > 2 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return "get", "discovery", None
    plural, name = rest[0], rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    resource = (f"{plural}.{group}" if group else plural) + (f"/{subresource}" if subresource else "")
    if method == "GET":
        verb = "watch" if watch_prefix or query.get("watch") in ("1", "true") else ("get" if name else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return verb, resource, namespace


class _Watch:
    """One watch stream through the proxy, forwarded event by event (whole lines), so that the
    proxy can end it with an event of its own."""

    def __init__(self, request: web.Request, stream: web.StreamResponse) -> None:
        self.request = request
        self.stream = stream
        self.partial = b""  # the start of an event whose end has not arrived yet
        self.lock = asyncio.Lock()
        self.ended = False

    async def forward(self, chunk: bytes) -> bool:
        """Write the complete events of ``chunk``; False once the proxy ended the stream."""
        async with self.lock:
            if self.ended:
                return False
            data = self.partial + chunk
            end = data.rfind(b"\n") + 1
            self.partial = data[end:]
            if end:
                await self.stream.write(data[:end])
            return True

    async def expire(self) -> None:
        async with self.lock:
            if self.ended:
                return
            self.ended = True
            status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": "too old resource version (fault proxy: expireWatches)", "reason": "Expired",
                      "code": 410}
            with contextlib.suppress(ConnectionResetError, RuntimeError):
                await self.stream.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
                await self.stream.write_eof()
            self.drop()

    def drop(self) -> None:
        self.ended = True
        if self.request.transport is not None:
            self.request.transport.close()


class FaultProxy:
    """The proxy on ``127.0.0.1:port``, on its own event loop in a background thread."""

    def __init__(self, upstream: str, ca_file: Path | None = None, *, port: int = 0,
                 faults: Faults | None = None) -> None:
        """``upstream``: the API server's URL (https with ``ca_file``; plain http, e.g. the sandbox's)."""
        self.upstream = upstream.rstrip("/")
        self.ca_file = ca_file
        self.port = port or free_port()
        self.faults = faults or Faults()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._watches: dict[int, _Watch] = {}  # the watch streams open through the proxy
        self._started = threading.Event()
        self._error: BaseException | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        def main() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as err:  # reported to start()
                self._error = err
                self._started.set()
                return
            self._started.set()
            loop.run_forever()
            loop.run_until_complete(self._close())
            loop.close()

        self._thread = threading.Thread(target=main, name="gangq-fault-proxy", daemon=True)
        self._thread.start()
        self._started.wait(30)
        if self._error is not None:
            raise RuntimeError(f"the fault proxy did not start: {self._error}") from self._error
        return self

    def stop(self) -> None:
        if self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        self.loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` on the proxy's loop (e.g. ``proxy.call(proxy.faults.add_rule, ...)``)."""
        assert self.loop is not None, "the fault proxy is not running"

        async def run() -> T:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def drop_watches(self) -> None:
        """Close every watch stream open through the proxy."""
        self.call(self._drop_watches)

    # -- serving -------------------------------------------------------------------------------
    async def _serve(self) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file is not None else False
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=0), auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/debug/faults", self._debug_faults)
        app.router.add_route("*", "/debug/requests", self._debug_requests)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # Stopped means gone: requests in flight are cut at once, as when a real API server dies
        # (aiohttp would otherwise wait up to a minute for them, watches included).
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _close(self) -> None:
        self._drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _drop_watches(self) -> None:
        for watch in list(self._watches.values()):
            watch.drop()
        self._watches.clear()

    async def _expire_watches(self) -> None:
        """End every watch stream as a real API server ends one whose resourceVersion is too old:
        an ERROR event with a 410 ``Expired`` Status, at an event boundary."""
        watches = list(self._watches.values())
        self._watches.clear()
        for watch in watches:
            await watch.expire()

    async def _debug_faults(self, request: web.Request) -> web.Response:
        if request.method == "DELETE":
            self.faults.clear()
        elif request.method == "POST":
            try:
                config = await request.json()
                if isinstance(config, dict) and config.pop("dropWatches", False):
                    self._drop_watches()
                if isinstance(config, dict) and config.pop("expireWatches", False):
                    await self._expire_watches()
                self.faults.configure(config)
            except (ValueError, FaultsError, AttributeError) as err:
                return web.json_response({"kind": "Status", "status": "Failure", "code": 400,
                                          "message": f"fault configuration: {err}"}, status=400)
        return web.json_response(self.faults.to_dict())

    async def _debug_requests(self, request: web.Request) -> web.Response:
        if request.method == "DELETE":
            self.faults.reset_counters()
        return web.json_response(self.faults.requests())

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        verb, resource, namespace = classify(request.method, request.path, dict(request.query))
        code = 502
        try:
            latency, failing = self.faults.decide(verb, resource, namespace)
            if latency:
                await asyncio.sleep(latency)
            if failing is not None:
                code = failing.code
                headers = {}
                if failing.retry_after is not None:
                    headers["Retry-After"] = str(int(max(1, round(failing.retry_after))))
                body = json.dumps(Faults.error_body(failing, verb, resource))
                return web.Response(status=code, text=body, content_type="application/json", headers=headers)
            assert self._session is not None
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
            headers["Accept-Encoding"] = request.headers.get("Accept-Encoding", "identity")
            payload = await request.read() if request.can_read_body else None
            async with self._session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                             data=payload) as upstream:
                code = upstream.status
                stream = web.StreamResponse(status=upstream.status, headers={
                    k: v for k, v in upstream.headers.items() if k.lower() not in _HOP})
                await stream.prepare(request)
                watch = _Watch(request, stream) if verb == "watch" and upstream.status == 200 else None
                if watch is not None:
                    self._watches[id(watch)] = watch
                try:
                    async for chunk in upstream.content.iter_any():
                        if watch is None:
                            await stream.write(chunk)
                        elif not await watch.forward(chunk):
                            break
                    if watch is not None and watch.partial and not watch.ended:
                        await stream.write(watch.partial)
                    await stream.write_eof()
                except (ConnectionResetError, aiohttp.ClientError, asyncio.CancelledError):
                    pass  # the client or the proxy (dropWatches) closed the stream
                finally:
                    if watch is not None:
                        self._watches.pop(id(watch), None)
                return stream
        except ConnectionResetError:  # the client went away mid-request (a controller killed)
            return web.Response(status=499)
        except aiohttp.ClientError as err:
            log.info("fault proxy: %s %s: upstream failed: %s", request.method, request.path, err)
            return web.Response(status=502, text=json.dumps({"kind": "Status", "status": "Failure", "code": 502,
                                                             "message": f"upstream: {err}"}),
                                content_type="application/json")
        finally:
            self.faults.count(verb, resource, code)

    # -- kubeconfigs ---------------------------------------------------------------------------
    def kubeconfig(self, path: Path, token: str, *, name: str = "gangq-fault-proxy") -> Path:
        """A kubeconfig for the proxy with ``token`` (the identity the proxy passes on)."""
        import yaml

        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": name, "cluster": {"server": self.url}}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        }))
        return path
