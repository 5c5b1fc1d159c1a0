"""The controller's HTTP endpoints and `gangq queue`, against aiohttp's test server and a real Engine."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import typer
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry
from rich.console import Console
from typer.testing import CliRunner

from gangq.core import Engine, LocalQueueSpec
from gangq.observability.cli import format_wait, pending_url, queue, render
from gangq.observability.http import PREFIX, PendingPage, PendingQuery, create_app, engine_source
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


def call(app: AppFactory, fn: Callable[[TestClient], Awaitable[Any]]) -> Any:
    """Run ``fn`` against a fresh app (an aiohttp app belongs to one event loop)."""

    async def main() -> Any:
        async with TestClient(TestServer(app())) as client:
            return await fn(client)

    return asyncio.run(main())


def get_json(app: AppFactory, path: str, *, text: bool = False) -> tuple[int, Any]:
    """GET ``path``: the status and the JSON body (``text``: the body as text)."""

    async def fn(client: TestClient) -> tuple[int, Any]:
        resp = await client.get(path)
        return resp.status, await (resp.text() if text else resp.json())

    result: tuple[int, Any] = call(app, fn)
    return result


def test_cluster_queue_pending_in_admission_order_with_paging() -> None:
    e = busy_engine()
    app = lambda: create_app(CollectorRegistry(), engine_source(e, clock=lambda: NOW))  # noqa: E731
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
    app = lambda: create_app(CollectorRegistry(), engine_source(e, clock=lambda: NOW))  # noqa: E731
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
    app = lambda: create_app(CollectorRegistry(), engine_source(e, clock=lambda: NOW))  # noqa: E731
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

    app = lambda: create_app(m.registry, source, ready=lambda: ready["ok"])  # noqa: E731

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
        resp = await client.get(PREFIX + "/clusterqueues/x/pendingworkloads")
        assert (await resp.json())["total"] == 0

    call(app, fn)


def test_without_a_source_there_is_no_visibility_api() -> None:
    app = lambda: create_app(CollectorRegistry())  # noqa: E731

    async def fn(client: TestClient) -> int:
        return (await client.get(PREFIX + "/clusterqueues/a/pendingworkloads")).status

    assert call(app, fn) == 404


# -- gangq queue ---------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[str]:
    """The app on a real port in a thread (the CLI uses a blocking HTTP client)."""
    app = create_app(CollectorRegistry(), engine_source(busy_engine(), clock=lambda: NOW))
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(runner.cleanup())
    loop.close()


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(queue)

    @app.callback()
    def _main() -> None:
        """gangq (test harness)."""

    return app


def test_gangq_queue_prints_the_cluster_queue_in_order(server: str) -> None:
    result = CliRunner().invoke(cli(), ["queue", "a", "--server", server], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "ClusterQueue a: 5 pending" in out
    order = [out.index(f"ns/p{i}") for i in (4, 1, 0, 2, 3)]
    assert order == sorted(order)
    assert "1m40s" in out  # p4 has waited 100 s
    assert "InsufficientQuota" in out or "BlockedBy" in out or "Insufficient" in out


def test_gangq_queue_local_queue_and_paging(server: str) -> None:
    result = CliRunner().invoke(
        cli(), ["queue", "-n", "ns", "team2", "--server", server, "--limit", "1"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "LocalQueue ns/team2: 2 pending" in result.output
    assert "ns/p1" in result.output and "ns/p3" not in result.output
    assert "next page: --offset 1" in result.output


def test_gangq_queue_json_and_errors(server: str) -> None:
    result = CliRunner().invoke(cli(), ["queue", "a", "--server", server, "-o", "json", "--limit", "2"])
    assert result.exit_code == 0, result.output
    assert '"positionInClusterQueue": 2' in result.output
    result = CliRunner().invoke(cli(), ["queue", "missing", "--server", server])
    assert result.exit_code == 1
    assert "ClusterQueue 'missing' not found" in result.output
    result = CliRunner().invoke(cli(), ["queue", "a", "--server", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert "cannot reach the gangq controller" in result.output


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
    status, body = get_json(t.app, PREFIX + "/clusterqueues/a/pendingworkloads")
    assert status == 200 and body["items"][0]["name"] == "g3" and body["items"][0]["waitSeconds"] == 40
