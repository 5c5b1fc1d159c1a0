"""One object the controller holds for all of its observability: metrics, the HTTP endpoints.

    telemetry = Telemetry(engine)
    runner = await telemetry.serve(port=config.metrics_port)     # /metrics, /healthz, /readyz
    ...
    decisions = telemetry.schedule(now)          # instead of engine.schedule(now): timed and counted
    telemetry.finish(key, now)                   # instead of engine.finish(key, now)
    telemetry.metrics.api_request("patch", "jobsets", 200)
    telemetry.metrics.set_leader(True)

Everything runs on the event loop that drives the engine (the engine is not thread-safe).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry

from gangq.core.decisions import Admission, Decision
from gangq.observability.http import PendingSource, create_app, engine_source, start_server
from gangq.observability.metrics import GangqMetrics

if TYPE_CHECKING:
    from gangq.core.engine import Engine


class Telemetry:
    """Metrics and HTTP endpoints of a controller that drives ``engine``.

    ``clock`` gives the engine's ``now`` for the pending-workloads API and the scrapes (wall-clock
    seconds by default). The gauges computed from the engine's state are recomputed on every
    scrape of ``/metrics``, and after cycles at most every ``refresh_interval`` seconds: a busy
    controller runs a cycle for every small batch of events, and recomputing every gauge after
    each was a large share of its CPU, spent on values nobody read before they changed again.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        ready: Callable[[], bool] | None = None,
        refresh_interval: float = 1.0,
    ) -> None:
        self.engine = engine
        self.metrics = GangqMetrics(registry)
        self.clock = clock
        self.ready = ready
        self.refresh_interval = refresh_interval
        self._last_refresh = float("-inf")

    def schedule(self, now: float) -> list[Decision]:
        """``engine.schedule(now)``, timed, with its decisions counted and the gauges refreshed
        when ``refresh_interval`` has passed."""
        start = time.perf_counter()
        decisions = self.engine.schedule(now)
        elapsed = time.perf_counter() - start
        self.metrics.observe_decisions(self.engine, decisions)
        self.metrics.observe_cycle(elapsed, sum(1 for d in decisions if isinstance(d, Admission)))
        self.refresh(now)
        return decisions

    def finish(self, key: str, now: float, *, keep_pods: bool = False) -> None:
        """``engine.finish(key, now, keep_pods=…)``, counting the finish of an admitted gang."""
        self.metrics.observe_finished(self.engine, key)
        self.engine.finish(key, now, keep_pods=keep_pods)

    def refresh(self, now: float, *, force: bool = False) -> None:
        """Recompute the gauges (at most every ``refresh_interval`` seconds unless ``force``)."""
        if force or now - self._last_refresh >= self.refresh_interval or now < self._last_refresh:
            self.metrics.refresh(self.engine, now)
            self._last_refresh = now

    def app(self) -> web.Application:
        """The metrics port's HTTP app: ``/metrics``, ``/healthz``, ``/readyz``."""
        return create_app(self.metrics.registry, ready=self.ready,
                          before_scrape=lambda: self.refresh(self.clock(), force=True))

    def pending_source(self) -> PendingSource:
        """The pending-workloads API's answers, read from the engine (on the engine's loop only)."""
        return engine_source(self.engine, self.clock)

    async def serve(self, host: str = "0.0.0.0", port: int = 8080) -> web.AppRunner:
        """Serve :meth:`app` on the running loop; ``await runner.cleanup()`` stops it."""
        return await start_server(self.app(), host, port)
