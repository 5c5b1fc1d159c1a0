"""Evictions that wait too long for their pods are checked against the API server.

An evicted gang keeps its quota until its last pod (and, for a JobSet, its last child Job that
could still start pods) is gone, as seen through the watches. A watch that expires is listed again,
and an object deleted meanwhile sends no DELETED event: the gang would wait for a pod that no
longer exists, holding its quota, for ever. So a gang still stopping :data:`RESYNC_SECONDS` after
its eviction (and every :data:`RESYNC_SECONDS` after that) has its pods and child Jobs read from the
API server; what is gone there is gone here (:meth:`Gangs.resynced`).

And a gang whose watches say it has stopped is read once more before its quota is given back
(:meth:`EvictionResync.confirm`): pods and Jobs come through separate watch streams, and a pod
that a Job controller created just before it saw the suspension can reach the controller after
the Job's suspended state does; the API server's list is consistent. That read also waits for
each Job's controller to be done with it (:func:`quiet`), and for the embedded JobSet controller
to have seen the suspension with nothing of the JobSet in hand
(:attr:`ControllerState.child_controller_settled`): a reconcile that began on the running JobSet
creates its child Jobs after the read has found none, and their pods start on quota the next gang
was given.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping
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
SETTLE_RETRY_SECONDS: Final = 0.2
"""How soon a gang is read again when its JobSet controller was still busy with it."""
RESYNCED: Final = "_resynced"
"""Outcome of a resync read (``{"key", "pods": [pod keys], "jobs": [live child Job names]}``)."""


JOB_CONTROLLER: Final = "kubernetes.io/job-controller"
"""``spec.managedBy`` of a Job that Kubernetes' own Job controller runs (also when it is unset)."""


def quiet(job: Mapping[str, Any]) -> bool:
    """Can this batch/v1 Job start no more pods? Finished, or suspended with no pod active and its
    controller done with it: Kubernetes' Job controller says so with the condition ``Suspended``.
    ``spec.suspend`` alone is not enough: the Job controller may create a pod just before it reads
    the suspension, and that pod runs (on quota given to the next gang) until the controller
    deletes it again. A Job another controller manages (``spec.managedBy``) is judged by its
    active count only: that controller need not write the condition."""
    if JOB.terminal(job) is not None:
        return True
    spec = job.get("spec") or {}
    if not spec.get("suspend"):
        return False
    status = job.get("status") or {}
    if status.get("active"):
        return False
    if (spec.get("managedBy") or JOB_CONTROLLER) != JOB_CONTROLLER:
        return True
    return any(isinstance(c, Mapping) and c.get("type") == "Suspended" and c.get("status") == "True"
               for c in status.get("conditions") or [])


class EvictionResync:
    """When each stopping gang is next read from the API server (a heap by time)."""

    def __init__(self, state: ControllerState, writer: Writer) -> None:
        self.state = state
        self.writer = writer
        self.due: list[tuple[float, str]] = []

    def started(self, key: str, now: float) -> None:
        heapq.heappush(self.due, (now + RESYNC_SECONDS, key))

    def confirm(self, entry: Entry, now: float) -> None:
        """Read the gang's pods and Jobs now: its watches say it has stopped (see :func:`quiet`)."""
        if not self._settled(entry, now):
            return
        self.writer.spawn(f"resync:{entry.key}", self._reader(entry))

    def _settled(self, entry: Entry, now: float) -> bool:
        """Is the controller of the gang's child Jobs done with it? If not, read it again soon."""
        if not entry.kind.has_child_jobs or self.state.child_controller_settled(entry.key):
            return True
        heapq.heappush(self.due, (now + SETTLE_RETRY_SECONDS, entry.key))
        return False

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
            if self._settled(entry, now):
                self.writer.spawn(f"resync:{key}", self._reader(entry))

    def _reader(self, entry: Entry) -> Any:
        key = entry.key
        ns = entry.namespace
        client = self.state.client
        selector = entry.kind.pod_selector(entry.name)
        child_jobs = entry.kind.has_child_jobs
        own_job = entry.kind is JOB
        path = entry.kind.path(ns, entry.name)

        async def read() -> None:
            try:
                pods = await client.list(resource_path("", "v1", "pods", ns), {"labelSelector": selector})
                jobs: list[str] = []
                if child_jobs:
                    listed = await client.list(resource_path("batch", "v1", "jobs", ns), {"labelSelector": selector})
                    jobs = [str(j["metadata"]["name"]) for j in listed.get("items") or [] if not quiet(j)]
                elif own_job:
                    try:
                        job = await client.get(path)
                    except ApiError as err:
                        if err.status != 404:
                            raise
                    else:
                        jobs = [] if quiet(job) else [entry.name]
            except ApiError as err:
                log.warning("resync of stopping %s %s failed: %s", entry.kind.kind, key, err)
                return
            live = [object_key(p) for p in pods.get("items") or []
                    if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
            self.writer.report(RESYNCED, {"key": key, "pods": live, "jobs": jobs})

        return read
