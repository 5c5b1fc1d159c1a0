"""The scheduling loop: the one task that owns the engine.

kopf's handlers and the write tasks only put ``(kind, event type, object, when queued)`` on the
inbox. The loop drains it in batches, applies the events (:class:`~gangq.operator.kinds.Kinds`),
calls ``engine.schedule(now)`` with the wall clock, turns the decisions into writes
(:class:`~gangq.operator.gangs.Gangs`), starts the status writes that are due, and sleeps until the
next event, the engine's next timer (``next_wakeup``) or the next due status write.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from typing import Any, Final

from gangq.api.meta import object_key
from gangq.operator.gangs import Gangs
from gangq.operator.kinds import Kinds
from gangq.operator.state import ControllerState
from gangq.operator.status import Statuses

log = logging.getLogger(__name__)

BATCH_WINDOW_SECONDS: Final = 0.005
"""Events come in bursts (a write's watch event, kopf's per-object workers): after the first event
of a quiet spell the loop waits this long more to apply them in one scheduling cycle."""
MAX_BATCH: Final = 5000
LAG_PROBE_SECONDS: Final = 0.05

Event = tuple[str, str, dict[str, Any], float]
"""(kind, event type, object, ``time.monotonic()`` when queued)."""


class SchedulingLoop:
    """The inbox and the loop that drains it; see the module docstring."""

    def __init__(self, state: ControllerState, kinds: Kinds, gangs: Gangs, statuses: Statuses) -> None:
        self.state = state
        self.kinds = kinds
        self.gangs = gangs
        self.statuses = statuses
        self.inbox: asyncio.Queue[Event] = asyncio.Queue()
        self.stopping = asyncio.Event()

    def enqueue(self, plural: str, event_type: str | None, obj: dict[str, Any]) -> None:
        self.inbox.put_nowait((plural, event_type or "ADDED", obj, time.monotonic()))

    async def run(self) -> None:
        """Drain events, schedule, write; until :attr:`stopping` is set."""
        probe = asyncio.ensure_future(self._lag_probe())
        gc_started: list[float] = []

        def gc_timer(phase: str, info: dict[str, int]) -> None:  # how long the cyclic GC stops the loop
            if phase == "start":
                gc_started[:] = [time.perf_counter()]
            elif gc_started:
                metrics = self.state.metrics
                if metrics is not None:
                    metrics.gc_pause_seconds_total.labels(str(info.get("generation", 0))).inc(
                        time.perf_counter() - gc_started[0]
                    )

        gc.callbacks.append(gc_timer)
        try:
            await self._loop()
        finally:
            probe.cancel()
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(gc_timer)

    async def _lag_probe(self) -> None:
        """How late the event loop runs a timer: the time every callback waits behind others."""
        while True:
            t = time.monotonic()
            await asyncio.sleep(LAG_PROBE_SECONDS)
            metrics = self.state.metrics
            if metrics is not None:
                metrics.event_loop_lag_seconds.observe(max(0.0, time.monotonic() - t - LAG_PROBE_SECONDS))

    async def _next_batch(self, timeout: float) -> list[Event]:
        batch: list[Event] = []
        if self.inbox.empty():
            getter = asyncio.ensure_future(self.inbox.get())
            stopper = asyncio.ensure_future(self.stopping.wait())
            try:
                done, _ = await asyncio.wait({getter, stopper}, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                for fut in (getter, stopper):
                    if not fut.done():
                        fut.cancel()
            if getter.cancelled():
                done.discard(getter)
            if getter in done:
                batch.append(getter.result())
                if BATCH_WINDOW_SECONDS:
                    await asyncio.sleep(BATCH_WINDOW_SECONDS)
        while not self.inbox.empty() and len(batch) < MAX_BATCH:
            batch.append(self.inbox.get_nowait())
        if self.inbox.empty():
            # every event the watch streams handed over is in this batch or applied before it
            self.state.streams.settle()
        return batch

    async def _loop(self) -> None:
        state = self.state
        while not self.stopping.is_set():
            batch = await self._next_batch(self._sleep_for(time.time()))
            now = time.time()
            applied = time.monotonic()
            metrics = state.metrics
            async with state.lock:
                for plural, event_type, obj, queued in batch:
                    if metrics is not None:
                        metrics.event_queue_wait_seconds.observe(applied - queued)
                    try:
                        self.kinds.apply(plural, event_type, obj, now)
                    except Exception:  # bad input never stops the loop
                        log.exception("cannot apply %s %s %s", event_type, plural, object_key(obj))
                # Crash-only: an exception inside a cycle leaves the engine half-changed, and going on
                # would admit or evict from a state nobody can vouch for. It ends the loop, and
                # run_operator exits; a restart's recovery rebuilds the state exactly from the API.
                decisions = state.schedule(now)
                self.gangs.handle(decisions, now)
                self.gangs.mark_new_fronts(now)
                self.gangs.resync.run(now)
                self.kinds.release_deleted_queues()
            if metrics is not None:
                metrics.loop_cycle_duration_seconds.observe(time.monotonic() - applied)
            self.statuses.flush(now)
            self.gangs.runtimes.save_if_due()

    def _sleep_for(self, now: float) -> float:
        candidates = [self.state.config.status.queue_interval_seconds]
        wake = self.state.engine.next_wakeup()
        if wake is not None:
            candidates.append(wake - now)
        for due in (self.statuses.next_due(), self.gangs.resync.next_due()):
            if due is not None:
                candidates.append(due - now)
        return max(0.01, min(candidates))
