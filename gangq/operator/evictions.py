"""Evictions that wait too long for their pods are checked against the API server.

An evicted gang keeps its quota until its last pod (and, for a JobSet, its last child Job that
could still start pods) is gone, as seen through the watches. A watch that expires is listed again,
and an object deleted meanwhile sends no DELETED event: the gang would wait for a pod that no
longer exists, holding its quota, for ever. So a gang still stopping :data:`RESYNC_SECONDS` after
its eviction (and every :data:`RESYNC_SECONDS` after that) has its pods and child Jobs read from the
API server; what is gone there is gone here (:meth:`Gangs.resynced`).
"""

from __future__ import annotations

import heapq
import logging
from typing import TYPE_CHECKING, Any, Final

from gangq.operator.adapters import JOB
from gangq.operator.kube import ApiError, resource_path
from gangq.operator.state import ControllerState
from gangq.operator.translate import object_key
from gangq.operator.writer import Writer

if TYPE_CHECKING:
    from gangq.operator.entry import Entry

log = logging.getLogger(__name__)

RESYNC_SECONDS: Final = 10.0
RESYNCED: Final = "_resynced"
"""Outcome of a resync read (``{"key", "pods": [pod keys], "jobs": [live child Job names]}``)."""


class EvictionResync:
    """When each stopping gang is next read from the API server (a heap by time)."""

    def __init__(self, state: ControllerState, writer: Writer) -> None:
        self.state = state
        self.writer = writer
        self.due: list[tuple[float, str]] = []

    def started(self, key: str, now: float) -> None:
        heapq.heappush(self.due, (now + RESYNC_SECONDS, key))

    def next_due(self) -> float | None:
        return self.due[0][0] if self.due else None

    def run(self, now: float) -> None:
        """Read the pods and child Jobs of every gang that is still stopping when its time is up."""
        while self.due and self.due[0][0] <= now:
            _, key = heapq.heappop(self.due)
            entry = self.state.entries.get(key)
            if entry is None or entry.state != "Evicting":
                continue
            heapq.heappush(self.due, (now + RESYNC_SECONDS, key))
            self.writer.spawn(f"resync:{key}", self._reader(entry))

    def _reader(self, entry: Entry) -> Any:
        key = entry.key
        ns = entry.namespace
        client = self.state.client
        selector = entry.kind.pod_selector(entry.name)
        child_jobs = entry.kind.has_child_jobs

        async def read() -> None:
            try:
                pods = await client.list(resource_path("", "v1", "pods", ns), {"labelSelector": selector})
                jobs: list[str] = []
                if child_jobs:
                    listed = await client.list(resource_path("batch", "v1", "jobs", ns), {"labelSelector": selector})
                    jobs = [str(j["metadata"]["name"]) for j in listed.get("items") or []
                            if not (j.get("spec") or {}).get("suspend") and JOB.terminal(j) is None]
            except ApiError as err:
                log.warning("resync of stopping %s %s failed: %s", entry.kind.kind, key, err)
                return
            live = [object_key(p) for p in pods.get("items") or []
                    if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
            self.writer.report(RESYNCED, {"key": key, "pods": live, "jobs": jobs})

        return read
