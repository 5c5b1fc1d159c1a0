"""The fault proxy (``gangq.controlplane.faultproxy``) in front of an API server (the sandbox here):
rules fail requests; ``dropWatches`` cuts watch streams; ``expireWatches`` ends them as a real API
server ends a watch whose resourceVersion is too old, with an ERROR 410 event after whole events."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from gangq.controlplane.faultproxy import FaultProxy
from gangq.sandbox.runtime import Sandbox


@pytest.fixture
def proxied() -> Iterator[tuple[Sandbox, FaultProxy]]:
    sb = Sandbox(cluster=False).start()
    proxy = FaultProxy(sb.url).start()
    try:
        yield sb, proxy
    finally:
        proxy.stop()
        sb.stop()


def post(url: str, body: Any) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"x": "y" * 5000}}


class WatchReader:
    """A watch on ConfigMaps through the proxy, read line by line in a thread."""

    def __init__(self, proxy: FaultProxy) -> None:
        host, port = proxy.url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=20)
        self.conn.request("GET", "/api/v1/namespaces/default/configmaps?watch=1")
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200
        self.lines: list[dict[str, Any]] = []
        self.closed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self.resp:
                if line.strip():
                    self.lines.append(json.loads(line))  # a torn event would raise here
        finally:
            self.closed.set()

    def wait(self, cond: Any, what: str) -> None:
        deadline = time.monotonic() + 10
        while not cond():
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.lines}"
            time.sleep(0.02)


def test_expire_watches_ends_each_stream_with_an_error_410_event_after_whole_events(
        proxied: tuple[Sandbox, FaultProxy]) -> None:
    sb, proxy = proxied
    watch = WatchReader(proxy)
    for i in range(20):  # events larger than one chunk: forwarded whole, never torn by the ERROR event
        assert post(f"{sb.url}/api/v1/namespaces/default/configmaps", configmap(f"c{i}"))[0] == 201
    watch.wait(lambda: len(watch.lines) == 20, "20 ADDED events")
    assert post(f"{proxy.url}/debug/faults", {"expireWatches": True})[0] == 200
    watch.wait(watch.closed.is_set, "the stream to end")
    assert [e["type"] for e in watch.lines] == ["ADDED"] * 20 + ["ERROR"]
    assert watch.lines[-1]["object"]["code"] == 410 and watch.lines[-1]["object"]["reason"] == "Expired"


def test_drop_watches_closes_the_stream_and_rules_fail_requests(proxied: tuple[Sandbox, FaultProxy]) -> None:
    _sb, proxy = proxied
    watch = WatchReader(proxy)
    assert post(f"{proxy.url}/debug/faults", {"dropWatches": True})[0] == 200
    watch.wait(watch.closed.is_set, "the stream to be cut")
    assert watch.lines == []
    rule = {"verb": "create", "resource": "configmaps", "errorRate": 1.0, "code": 503}
    assert post(f"{proxy.url}/debug/faults", {"rules": [rule]})[0] == 200
    code, body = post(f"{proxy.url}/api/v1/namespaces/default/configmaps", configmap("refused"))
    assert code == 503 and body["code"] == 503
    assert post(f"{proxy.url}/debug/faults", {"rules": []})[0] == 200
    assert post(f"{proxy.url}/api/v1/namespaces/default/configmaps", configmap("taken"))[0] == 201


def test_a_compressed_answer_reaches_the_client_as_the_api_server_sent_it() -> None:
    """kube-apiserver gzips large answers to a client that accepts it: the proxy must pass the
    body and its Content-Encoding together, and not ask for gzip for a client that did not."""
    import asyncio
    import gzip

    from aiohttp import web

    from gangq.controlplane.processes import free_port

    big = {"kind": "ConfigMapList", "items": [{"data": {"x": "y" * 1000}}] * 200}
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Accept-Encoding", ""))
        resp = web.json_response(big)
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            resp.enable_compression(web.ContentCoding.gzip)
        return resp

    port = free_port()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_get("/api/v1/configmaps", handler)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    proxy = FaultProxy(f"http://127.0.0.1:{port}").start()
    try:
        plain = urllib.request.urlopen(f"{proxy.url}/api/v1/configmaps", timeout=10)  # no Accept-Encoding
        assert plain.headers.get("Content-Encoding") is None and json.loads(plain.read()) == big
        req = urllib.request.Request(f"{proxy.url}/api/v1/configmaps", headers={"Accept-Encoding": "gzip"})
        zipped = urllib.request.urlopen(req, timeout=10)
        assert zipped.headers.get("Content-Encoding") == "gzip"
        assert json.loads(gzip.decompress(zipped.read())) == big
        assert seen == ["identity", "gzip"]
    finally:
        proxy.stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
