"""The controller's write lanes (gangq/operator/writer.py): admissions first, background writes
behind them, queue status beside them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from gangq.operator import writer as w


def test_queue_status_is_written_while_admissions_hold_back_the_background() -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        lanes = w.Writer(cast(Any, SimpleNamespace(metrics=None)), lambda *_: None)
        release = asyncio.Event()
        done: list[str] = []

        def write(name: str, gate: asyncio.Event | None = None) -> w.Write:
            async def fn() -> None:
                if gate is not None:
                    await gate.wait()
                done.append(name)

            return fn

        for i in range(w.CRITICAL_QUIET + 1):  # more admissions in flight than the background waits for
            lanes.spawn(f"jobset-{i}", write(f"admission-{i}", release), lane="critical")
        lanes.spawn("wl:a", write("workload-status"))
        lanes.spawn("cq:a", write("cluster-queue-status"), lane="queues")
        await asyncio.sleep(0.3)  # well within BACKGROUND_MAX_WAIT_SECONDS
        while_busy = list(done)
        release.set()
        await lanes.drain(5.0)
        return while_busy, done

    while_busy, done = asyncio.run(scenario())
    assert while_busy == ["cluster-queue-status"]
    admissions = {f"admission-{i}" for i in range(w.CRITICAL_QUIET + 1)}
    assert set(done) == {"cluster-queue-status", "workload-status", *admissions}
    assert done.index("workload-status") > done.index("admission-0")
