"""The controller's HTTP endpoints and `gangq queue`, against aiohttp's test server and a real Engine.

The pending-workloads app is served here with a guard whose reviews accept one token and allow
everything (tests/observability/test_auth.py tests the guard itself)."""

from __future__ import annotations

import asyncio
import datetime
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry
from rich.console import Console
from typer.testing import CliRunner

from gangq.core import Engine, LocalQueueSpec
from gangq.observability.auth import TOKEN_REVIEWS, Guard
from gangq.observability.cli import format_wait, pending_url, queue, render
from gangq.observability.http import (
    PREFIX,
    PendingPage,
    PendingQuery,
    PendingSource,
    create_app,
    engine_source,
    visibility_app,
)
from gangq.observability.metrics import GangqMetrics
from tests.observability.helpers import gang, world

NOW = 1_800_000_000.0


def busy_engine() -> Engine:
    """ClusterQueue a: 3 admitted, then 5 pending from two LocalQueues (a and team2)."""
    e = world(nodes=4)
    e.upsert_local_queue(LocalQueueSpec("ns", "team2", "a"))
    e.submit(gang("run1", "a", 1, 8), now=NOW - 1000)
    e.submit(gang("run2", "a", 1, 4), now=NOW - 1000)
    e.schedule(NOW - 990)
    for i, (lq, prio) in enumerate((("a", 0), ("team2", 5), ("a", 0), ("team2", 0), ("a", 9))):
        spec = gang(f"p{i}", "a", 1, 8, t=NOW - 500 + i, priority=prio)
        spec.queue_name = lq
        e.submit(spec, now=NOW - 500 + i * 100)
    e.schedule(NOW - 50)
    return e


AppFactory = Callable[[], web.Application]
TOKEN = "researcher-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


async def accept_one_token(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The API server's reviews, as a test double: TOKEN is user ``alice``, who may do anything."""
    if path == TOKEN_REVIEWS:
        ok = body["spec"]["token"] == TOKEN
        return {"status": {"authenticated": ok, "user": {"username": "alice"} if ok else {}}}
    return {"status": {"allowed": True}}


def pending_app(source: PendingSource) -> AppFactory:
    return lambda: visibility_app(lambda: source, Guard(accept_one_token))


def call(app: AppFactory, fn: Callable[[TestClient], Awaitable[Any]]) -> Any:
    """Run ``fn`` against a fresh app (an aiohttp app belongs to one event loop)."""

    async def main() -> Any:
        async with TestClient(TestServer(app())) as client:
            return await fn(client)

    return asyncio.run(main())


def get_json(app: AppFactory, path: str, *, text: bool = False) -> tuple[int, Any]:
    """GET ``path``: the status and the JSON body (``text``: the body as text)."""

    async def fn(client: TestClient) -> tuple[int, Any]:
        resp = await client.get(path, headers=HEADERS)
        return resp.status, await (resp.text() if text else resp.json())

    result: tuple[int, Any] = call(app, fn)
    return result


def test_cluster_queue_pending_in_admission_order_with_paging() -> None:
    e = busy_engine()
    app = pending_app(engine_source(e, clock=lambda: NOW))
    status, body = get_json(app, PREFIX + "/clusterqueues/a/pendingworkloads")
    assert status == 200
    assert body["kind"] == "PendingWorkloadsSummary"
    assert body["total"] == 5
    names = [i["name"] for i in body["items"]]
    # priority first (p4: 9, p1: 5), then queue time
    assert names == ["p4", "p1", "p0", "p2", "p3"]
    first = body["items"][0]
    assert first["positionInClusterQueue"] == 1
    assert first["priority"] == 9
    assert first["namespace"] == "ns"
    assert first["localQueueName"] == "a"
    assert first["waitSeconds"] == 100  # submitted at NOW-100
    assert first["pendingSince"] == "2027-01-15T07:58:20Z"
    assert first["reason"] and first["message"]
    status, body = get_json(app, PREFIX + "/clusterqueues/a/pendingworkloads?limit=2&offset=1")
    assert status == 200
    assert [i["name"] for i in body["items"]] == ["p1", "p0"]
    assert [i["positionInClusterQueue"] for i in body["items"]] == [2, 3]
    assert body["total"] == 5 and body["limit"] == 2 and body["offset"] == 1


def test_local_queue_pending_has_both_positions() -> None:
    e = busy_engine()
    app = pending_app(engine_source(e, clock=lambda: NOW))
    status, body = get_json(app, PREFIX + "/namespaces/ns/localqueues/team2/pendingworkloads")
    assert status == 200
    assert body["namespace"] == "ns" and body["localQueue"] == "team2"
    assert body["total"] == 2
    rows = [(i["name"], i["positionInLocalQueue"], i["positionInClusterQueue"]) for i in body["items"]]
    assert rows == [("p1", 1, 2), ("p3", 2, 5)]
    status, body = get_json(app, PREFIX + "/namespaces/ns/localqueues/team2/pendingworkloads?offset=1&limit=5")
    assert [(i["name"], i["positionInLocalQueue"]) for i in body["items"]] == [("p3", 2)]
    assert body["total"] == 2


@pytest.mark.parametrize(
    ("path", "status", "needle"),
    [
        ("/clusterqueues/nope/pendingworkloads", 404, "ClusterQueue 'nope' not found"),
        ("/namespaces/ns/localqueues/nope/pendingworkloads", 404, "LocalQueue ns/nope not found"),
        ("/clusterqueues/a/pendingworkloads?limit=x", 400, "limit='x' is not an integer"),
        ("/clusterqueues/a/pendingworkloads?offset=-1", 400, "offset=-1 must not be negative"),
        ("/clusterqueues/a/pendingworkloads?limit=10001", 400, "maximum of 10000"),
    ],
)
def test_bad_requests_say_what_is_wrong(path: str, status: int, needle: str) -> None:
    e = busy_engine()
    app = pending_app(engine_source(e, clock=lambda: NOW))
    got, body = get_json(app, PREFIX + path)
    assert got == status
    assert needle in body["message"]


def test_async_source_and_metrics_and_probes() -> None:
    m = GangqMetrics(CollectorRegistry())
    m.set_leader(True)
    ready = {"ok": False}

    async def source(q: PendingQuery) -> PendingPage | None:
        await asyncio.sleep(0)
        return PendingPage(q, 0, [])

    app = lambda: create_app(m.registry, ready=lambda: ready["ok"])  # noqa: E731

    async def fn(client: TestClient) -> None:
        resp = await client.get("/metrics")
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
        assert "gangq_leader 1.0" in text
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/readyz")).status == 503
        ready["ok"] = True
        assert (await client.get("/readyz")).status == 200
        # the metrics port names no workload: the pending-workloads API is served apart
        assert (await client.get(PREFIX + "/clusterqueues/x/pendingworkloads", headers=HEADERS)).status == 404

    call(app, fn)
    status, body = get_json(pending_app(source), PREFIX + "/clusterqueues/x/pendingworkloads")
    assert status == 200 and body["total"] == 0


def test_the_pending_api_serves_its_discovery_documents_and_says_when_it_does_not_lead() -> None:
    e = busy_engine()
    status, group = get_json(pending_app(engine_source(e)), "/apis/visibility.gangq.io")
    assert status == 200 and group["kind"] == "APIGroup"
    assert group["preferredVersion"] == {"groupVersion": "visibility.gangq.io/v1alpha1", "version": "v1alpha1"}
    status, resources = get_json(pending_app(engine_source(e)), PREFIX)
    assert status == 200 and resources["kind"] == "APIResourceList"
    assert {(r["name"], r["namespaced"], tuple(r["verbs"])) for r in resources["resources"]} == {
        ("clusterqueues/pendingworkloads", False, ("get",)), ("localqueues/pendingworkloads", True, ("get",))}
    standby = lambda: visibility_app(lambda: "this replica does not lead", Guard(accept_one_token))  # noqa: E731
    status, body = get_json(standby, PREFIX + "/clusterqueues/a/pendingworkloads")
    assert status == 503 and body["message"] == "this replica does not lead" and body["reason"] == "ServiceUnavailable"

    async def anonymous(client: TestClient) -> list[int]:
        return [(await client.get(path)).status for path in ("/apis/visibility.gangq.io", PREFIX,
                                                              PREFIX + "/clusterqueues/a/pendingworkloads")]

    assert call(pending_app(engine_source(e)), anonymous) == [401, 401, 401]


# -- gangq queue ---------------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """The pending-workloads app over HTTPS on a real port in a thread (the CLI uses a blocking HTTP
    client); the test's kubeconfig (``$KUBECONFIG``) holds TOKEN, and the CA is in ``ca.crt``."""
    from gangq.operator import certs
    from gangq.sandbox.runtime import write_kubeconfig

    bundle = certs.plan(None, ["127.0.0.1"], datetime.datetime.now(datetime.UTC))
    assert bundle is not None
    serving = certs.ServingContext()
    serving.load(bundle.serving.cert_pem, bundle.serving.key_pem)
    (tmp_path / "ca.crt").write_bytes(bundle.ca_bundle)
    write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9", token=TOKEN)
    app = pending_app(engine_source(busy_engine(), clock=lambda: NOW))()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=serving.context)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(runner.cleanup())
    loop.close()
    serving.close()


def invoke(args: list[str], server: str, **kwargs: Any) -> Any:
    """``gangq queue ARGS --url SERVER`` with the fixture's kubeconfig and CA."""
    directory = Path(kwargs.pop("directory"))
    extra = ["--url", server, "--kubeconfig", str(directory / "kubeconfig"),
             "--certificate-authority", str(directory / "ca.crt")]
    return CliRunner().invoke(cli(), ["queue", *args, *extra], **kwargs)


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(queue)

    @app.callback()
    def _main() -> None:
        """gangq (test harness)."""

    return app


def test_gangq_queue_prints_the_cluster_queue_in_order(server: str, tmp_path: Path) -> None:
    result = invoke(["a"], server, directory=tmp_path, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "ClusterQueue a: 5 pending" in out
    order = [out.index(f"ns/p{i}") for i in (4, 1, 0, 2, 3)]
    assert order == sorted(order)
    assert "1m40s" in out  # p4 has waited 100 s
    assert "InsufficientQuota" in out or "BlockedBy" in out or "Insufficient" in out


def test_gangq_queue_local_queue_and_paging(server: str, tmp_path: Path) -> None:
    result = invoke(["-n", "ns", "team2", "--limit", "1"], server, directory=tmp_path, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "LocalQueue ns/team2: 2 pending" in result.output
    assert "ns/p1" in result.output and "ns/p3" not in result.output
    assert "next page: --offset 1" in result.output


def test_gangq_queue_json_and_errors(server: str, tmp_path: Path) -> None:
    result = invoke(["a", "-o", "json", "--limit", "2"], server, directory=tmp_path)
    assert result.exit_code == 0, result.output
    assert '"positionInClusterQueue": 2' in result.output
    result = invoke(["missing"], server, directory=tmp_path)
    assert result.exit_code == 1
    assert "ClusterQueue 'missing' not found" in result.output
    result = invoke(["a"], "https://127.0.0.1:9", directory=tmp_path)
    assert result.exit_code == 1
    assert "cannot reach the gangq controller" in result.output


def test_gangq_queue_sends_the_kubeconfig_token_over_https_only(server: str, tmp_path: Path) -> None:
    from gangq.sandbox.runtime import write_kubeconfig

    write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9", token="someone-else")
    result = invoke(["a"], server, directory=tmp_path)
    assert result.exit_code == 1 and "401" in result.output and "not accepted" in result.output
    result = invoke(["a"], server.replace("https://", "http://"), directory=tmp_path)
    assert result.exit_code == 1 and "refusing to send credentials over plain HTTP" in result.output
    wrong = certs_of_another_ca(tmp_path)
    result = CliRunner().invoke(cli(), ["queue", "a", "--url", server, "--kubeconfig", str(tmp_path / "kubeconfig"),
                                        "--certificate-authority", str(wrong)])
    assert result.exit_code == 1 and "CERTIFICATE_VERIFY_FAILED" in result.output


def certs_of_another_ca(tmp_path: Path) -> Path:
    from gangq.operator import certs

    bundle = certs.plan(None, ["127.0.0.1"], datetime.datetime.now(datetime.UTC))
    assert bundle is not None
    path = tmp_path / "other-ca.crt"
    path.write_bytes(bundle.ca_bundle)
    return path


def test_format_wait_and_url() -> None:
    assert [format_wait(s) for s in (5, 65, 3725, 2 * 86400 + 4 * 3600)] == ["5s", "1m05s", "1h02m", "2d04h"]
    assert pending_url("http://h:1/", "ns a", "team", 3, 4) == (
        "http://h:1" + PREFIX + "/namespaces/team/localqueues/ns%20a/pendingworkloads?limit=3&offset=4"
    )


def test_render_empty_page() -> None:
    console = Console(record=True, width=120)
    render({"clusterQueue": "a", "total": 0, "offset": 0, "items": []}, console)
    assert "nothing pending" in console.export_text()


def test_telemetry_wraps_schedule_finish_and_serves() -> None:
    from gangq.observability.telemetry import Telemetry

    e = world()
    t = Telemetry(e, clock=lambda: 50.0, refresh_interval=10.0)
    e.submit(gang("g1", "a", 1, 8), now=0.0)
    e.submit(gang("g2", "a", 1, 8), now=0.0)
    decisions = t.schedule(1.0)
    reg = t.metrics.registry
    assert len(decisions) == 2
    assert reg.get_sample_value("gangq_scheduling_cycle_admissions_sum") == 1
    assert reg.get_sample_value("gangq_scheduling_cycle_duration_seconds_count") == 1
    assert reg.get_sample_value("gangq_pending_workloads", {"cluster_queue": "a", "status": "inadmissible"}) == 1
    t.finish("ns/g1", 2.0)
    assert reg.get_sample_value("gangq_finished_workloads_total", {"cluster_queue": "a"}) == 1
    assert t.schedule(3.0)  # admits g2, within the interval: the gauges are not recomputed yet
    assert reg.get_sample_value("gangq_pending_workloads", {"cluster_queue": "a", "status": "inadmissible"}) == 1
    status, text = get_json(t.app, "/metrics", text=True)  # a scrape recomputes them first
    assert status == 200
    assert 'gangq_pending_workloads{cluster_queue="a",status="inadmissible"} 0.0' in text
    assert 'gangq_admitted_active_workloads{cluster_queue="a"} 1.0' in text
    t.finish("ns/g2", 4.0)
    t.schedule(55.0)  # the scrape at 50 (the clock) reset the interval: not yet
    assert reg.get_sample_value("gangq_admitted_active_workloads", {"cluster_queue": "a"}) == 1
    t.schedule(60.5)  # the interval has passed
    assert reg.get_sample_value("gangq_admitted_active_workloads", {"cluster_queue": "a"}) == 0

    e.submit(gang("g3", "a", 1, 16), now=10.0)
    status, body = get_json(pending_app(t.pending_source()), PREFIX + "/clusterqueues/a/pendingworkloads")
    assert status == 200 and body["items"][0]["name"] == "g3" and body["items"][0]["waitSeconds"] == 40


def test_the_metrics_port_names_no_workload() -> None:
    """/metrics carries queue, namespace and flavor names, never a workload's: the pending
    workloads' names are served only behind authentication."""
    from gangq.observability.telemetry import Telemetry

    e = busy_engine()
    t = Telemetry(e, clock=lambda: NOW)
    t.schedule(NOW)
    status, text = get_json(t.app, "/metrics", text=True)
    assert status == 200 and 'cluster_queue="a"' in text
    for workload in ("run1", "run2", "p0", "p1", "p2", "p3", "p4"):
        assert f'"{workload}"' not in text and f"/{workload}" not in text, workload
