"""The controller: the parts that turn cluster events into engine decisions and decisions into writes.

- :mod:`~gangq.operator.translate` — Kubernetes objects → engine specs, keys, quantities (pure);
- :mod:`~gangq.operator.state` — the engine and what is held beside it, shared by the parts below;
- :mod:`~gangq.operator.kinds` — one handler per watched kind, in an explicit table;
- :mod:`~gangq.operator.gangs` — the life of a queued workload: submitted, admitted, evicted, finished;
- :mod:`~gangq.operator.writer` — the write lanes, the patches of the queued objects and Events;
- :mod:`~gangq.operator.status` — Workload, ClusterQueue and LocalQueue status, and when it is written;
- :mod:`~gangq.operator.recovery` — the restart: rebuild the engine from the API;
- :mod:`~gangq.operator.loop` — the scheduling loop that owns the engine.

:class:`Controller` wires them; :mod:`gangq.operator.operator` runs it under the Lease with kopf.
docs/operator.md describes the flow and the write budget.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Final

from gangq.operator.config import OperatorConfig
from gangq.operator.gangs import Gangs
from gangq.operator.kinds import Kinds
from gangq.operator.kube import KubeClient
from gangq.operator.loop import SchedulingLoop
from gangq.operator.recovery import recover, resync_queued
from gangq.operator.state import ControllerState
from gangq.operator.status import Statuses
from gangq.operator.writer import Writer

if TYPE_CHECKING:
    from gangq.observability.telemetry import Telemetry

log = logging.getLogger(__name__)

STOP_WAIT_SECONDS: Final = 10.0
"""How long stopping waits for the writes in flight."""


class Controller:
    """Owns the engine (``.engine``; read it on the controller's loop, under ``.lock``) and the
    parts of the module docstring."""

    def __init__(self, client: KubeClient, config: OperatorConfig) -> None:
        self.client = client
        self.config = config
        self.state = ControllerState(client, config)
        self.engine = self.state.engine
        self.lock = self.state.lock
        self.entries = self.state.entries
        self.recovered = self.state.recovered
        self.writer = Writer(self.state, self._report)  # outcomes go to the loop's inbox
        self.statuses = Statuses(self.state, self.writer)
        self.gangs = Gangs(self.state, self.writer, self.statuses)
        self.kinds = Kinds(self.state, self.gangs, self.statuses)
        self.loop = SchedulingLoop(self.state, self.kinds, self.gangs, self.statuses)
        self.stopping = self.loop.stopping

    @property
    def telemetry(self) -> Telemetry | None:
        return self.state.telemetry

    @telemetry.setter
    def telemetry(self, telemetry: Telemetry | None) -> None:
        self.state.telemetry = telemetry

    def enqueue(self, plural: str, event_type: str | None, obj: dict[str, Any]) -> None:
        """A watch event, from kopf's handlers (on the same event loop)."""
        self.loop.enqueue(plural, event_type, obj)

    def _report(self, outcome: str, payload: dict[str, Any]) -> None:
        self.loop.enqueue(outcome, "", payload)

    async def recover(self) -> None:
        await recover(self.state, self.kinds, self.gangs, self.statuses)

    async def resync_queued(self) -> None:
        await resync_queued(self.state, lambda plural, obj: self.enqueue(plural, "DELETED", obj))

    async def run(self) -> None:
        """Recover if not done yet, then run the scheduling loop until :meth:`stop`."""
        if not self.recovered.is_set():
            await self.recover()
        await self.loop.run()

    async def abandon(self) -> None:
        """Stop the loop and cancel every write not yet answered (the Lease is lost)."""
        log.warning("controller stopping without its writes in flight: the Lease is lost")
        self.stopping.set()
        await self.writer.cancel()

    async def stop(self, timeout: float = STOP_WAIT_SECONDS) -> None:
        """Stop the loop and wait (at most ``timeout`` seconds) for the writes in flight."""
        telemetry = self.state.telemetry
        if telemetry is not None:
            from gangq.observability.metrics import controller_summary

            log.info("controller stopping: %s", json.dumps(controller_summary(telemetry.metrics.registry.collect())))
        else:
            log.info("controller stopping")
        self.stopping.set()
        await self.writer.drain(timeout)

