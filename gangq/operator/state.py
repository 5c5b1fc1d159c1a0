"""What every part of the controller shares: the engine, the queued objects held, the client, the metrics.

Only the scheduling loop's task touches the engine and the entries (kopf's handlers and the write
tasks report through the inbox), so nothing here is locked; :attr:`ControllerState.lock` is held
while the loop mutates the engine, for readers on the same event loop (observability).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gangq.api.meta import Meta
from gangq.core import Engine
from gangq.core.decisions import Decision
from gangq.core.selectors import LabelRequirement, LabelSelector
from gangq.operator.config import OperatorConfig
from gangq.operator.entry import Entry
from gangq.operator.kube import KubeClient
from gangq.operator.streams import StreamPositions

DEFAULT_QUEUE = "default"
"""The LocalQueue of a namespace that workloads without a queue label go to (manageJobsWithoutQueueName)."""

if TYPE_CHECKING:
    from gangq.observability.metrics import GangqMetrics
    from gangq.observability.telemetry import Telemetry


class ControllerState:
    """The engine and what the controller holds beside it.

    ``entries``: queued objects by key; ``rvs``: the resourceVersion last applied per
    ``(plural, key)`` (stale events are dropped); ``telemetry``: metrics and endpoints when
    observability is on (then the engine's ``schedule`` and ``finish`` go through it, timed and
    counted).
    """

    __slots__ = ("_managed", "child_controller_settled", "child_jobs_rv", "client", "config", "engine", "entries",
                 "lock", "namespace_labels", "recovered", "rvs", "streams", "telemetry")

    def __init__(self, client: KubeClient, config: OperatorConfig) -> None:
        self.client = client
        self.config = config
        self.engine = Engine(config.engine_config())
        self.entries: dict[str, Entry] = {}
        self.rvs: dict[tuple[str, str], int] = {}
        self.lock = asyncio.Lock()
        self.recovered = asyncio.Event()
        self.telemetry: Telemetry | None = None
        self.namespace_labels: dict[str, dict[str, str]] = {}  # kept by the Namespace handler
        # Is the controller of a JobSet's child Jobs done with it (no reconcile under way, the
        # suspension seen)? The embedded one answers (JobSetController.settled); an external one
        # cannot be asked.
        self.child_controller_settled: Callable[[str], bool] = lambda key: True
        # The newest resourceVersion of the child Jobs of a JobSet as the embedded controller wrote
        # or saw them (None: not an integer): its cache holds every child Job it made, so once the
        # Job stream has passed it the controller has seen them all. An external controller
        # cannot be asked (None here).
        self.child_jobs_rv: Callable[[str], int | None] | None = None
        self.streams = StreamPositions()  # how far the pod and Job watch streams have been applied
        sel = config.managed_jobs_namespace_selector
        requirements = [LabelRequirement(r.key, r.operator, list(r.values)) for r in sel.match_expressions]
        self._managed = LabelSelector(dict(sel.match_labels), requirements)

    @property
    def metrics(self) -> GangqMetrics | None:
        return self.telemetry.metrics if self.telemetry is not None else None

    def schedule(self, now: float) -> list[Decision]:
        if self.telemetry is not None:
            return self.telemetry.schedule(now)
        return self.engine.schedule(now)

    def finish(self, key: str, now: float) -> None:
        """Take a gang out of the engine (finished, deleted, or to be resubmitted). Its pods keep
        their nodes until their own deletion is seen (the pod handler reports every pod's end)."""
        if self.telemetry is not None:
            self.telemetry.finish(key, now, keep_pods=True)
        else:
            self.engine.finish(key, now, keep_pods=True)

    def default_queue(self, obj: Mapping[str, Any]) -> str | None:
        """The LocalQueue a workload without a queue label goes to: ``default`` in the namespaces
        ``managedJobsNamespaceSelector`` picks when ``manageJobsWithoutQueueName`` is on, else None
        (not queued)."""
        if not self.config.manage_jobs_without_queue_name:
            return None
        labels = self.namespace_labels.get(Meta(obj).namespace_or_default)
        return DEFAULT_QUEUE if labels is not None and self._managed.matches(labels) else None

    def watched_namespace(self, obj: Mapping[str, Any]) -> bool:
        """False when ``namespaces`` is configured and the object's namespace is not in it."""
        namespaces = self.config.namespaces
        return not namespaces or Meta(obj).namespace in namespaces
