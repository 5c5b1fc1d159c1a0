"""When an evicted gang has stopped: its watches show it, and either the watch streams prove it or a
read from the API server confirms it.

An evicted gang keeps its quota until its last pod (and, for a JobSet, its last child Job that
could still start pods) is gone, as seen through the watches. A watch that expires is listed again,
and an object deleted meanwhile sends no DELETED event: the gang would wait for a pod that no
longer exists, holding its quota, for ever. So a gang still stopping :data:`RESYNC_SECONDS` after
its eviction (and every :data:`RESYNC_SECONDS` after that) has its pods and child Jobs read from the
API server; what is gone there is gone here (:meth:`Gangs.resynced`).

A gang whose watches say it has stopped needs more before its quota is given back
(:meth:`EvictionResync.confirm`). Pods and Jobs come through separate watch streams, and a pod
that a Job controller created just before it saw the suspension can reach the controller after
the Job's suspended state does. Each Job must be done with the suspension (:func:`quiet`), the
embedded JobSet controller must have seen it with nothing of the JobSet in hand
(:attr:`ControllerState.child_controller_settled`: a reconcile that began on the running JobSet
creates child Jobs after the suspension), and then one of:

- the watch streams prove it (:meth:`EvictionResync.proof`): resourceVersions of one etcd are
  ordered, so once the pod stream has handed the controller every event up to a resourceVersion
  at or past the one at which the object was suspended and each of its Jobs was seen quiet, every
  pod created before has come through it (:mod:`gangq.operator.streams`). For a JobSet the Job
  stream must have shown every child Job: with the embedded controller, it must have passed each
  child Job in that controller's cache (which holds every one it made, as last written or seen;
  the pod stream must pass those too); with an external one, it must have passed the suspension.
  This costs no request. Or
- a read from the API server (:meth:`EvictionResync.read`): its child Jobs (or the Job itself),
  then its pods in a list no older than the newest quiet Job. One round trip, two when the pods'
  list came back older than a Job's quiet state.

A gang waits at most :data:`STREAM_WAIT_SECONDS` for its streams to pass those resourceVersions;
it is read at once when a stream it needs has no position (a resourceVersion that is not an
integer), and as soon as one short of it has sent nothing for :data:`STREAM_IDLE_SECONDS` (an
idle stream's next bookmark may be a minute away).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from gangq.api.meta import Meta, condition_true, conditions, object_key, resource_version
from gangq.integrations.job import JOB
from gangq.integrations.jobset import JOBSET
from gangq.integrations.registry import pod_gang
from gangq.jobset import constants as js
from gangq.operator.entry import EntryState
from gangq.operator.kube import ApiError, resource_path
from gangq.operator.state import ControllerState
from gangq.operator.writer import Writer

if TYPE_CHECKING:
    from gangq.operator.entry import Entry

log = logging.getLogger(__name__)

RESYNC_SECONDS: Final = 10.0
SETTLE_RETRY_SECONDS: Final = 0.2
"""How soon a gang is checked again when its JobSet controller was still busy with it."""
STREAM_WAIT_SECONDS: Final = 1.0
"""How long a gang whose watches say it has stopped waits at most for its watch streams to prove
it before it is read from the API server."""
STREAM_IDLE_SECONDS: Final = 0.2
"""A stream short of what a gang needs that has sent nothing for this long is not waited for: in
a quiet cluster the next event may be the preemptor's own pods, which wait for this quota."""
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
    return condition_true(conditions(job), "Suspended")


class EvictionResync:
    """The gangs whose watches say they have stopped, until the streams or a read confirm it; and
    when each stopping gang is next read from the API server (a heap by time)."""

    def __init__(self, state: ControllerState, writer: Writer) -> None:
        self.state = state
        self.writer = writer
        self.due: list[tuple[float, str]] = []
        self.waiting: dict[str, float] = {}  # gang key -> when it is read unless its streams prove it first
        self.quiet_rvs: dict[str, int] = {}  # JobSet gang key -> newest resourceVersion a child Job was seen quiet at
        self.evicted_at: dict[str, float] = {}  # gang key -> when it was evicted (or found stopping by a restart)
        self.last_run = 0.0
        self.reads: dict[str, dict[str, Entry]] = {}  # namespace -> gangs due for a read
        self.reading: set[str] = set()  # namespaces with a read in flight
        # set by Gangs: do the watches still say the gang has stopped; the gang's stop is confirmed
        self.stopped: Callable[[Entry], bool] = lambda entry: True
        self.confirmed: Callable[[Entry, float], None] = lambda entry, now: None

    def started(self, key: str, now: float) -> None:
        heapq.heappush(self.due, (now + RESYNC_SECONDS, key))
        self.evicted_at[key] = now

    def released(self, key: str, by: str, now: float) -> None:
        """The gang's quota is given back, its stop confirmed ``by`` its streams or a read."""
        metrics = self.state.metrics
        started = self.evicted_at.get(key)
        if metrics is not None:
            metrics.eviction_confirmations_total.labels(by).inc()
            if started is not None:
                metrics.eviction_stop_duration_seconds.observe(max(0.0, now - started))
        self.forget(key)

    def confirm(self, entry: Entry, now: float) -> None:
        """The watches say the gang has stopped: wait for its streams to prove it, or read it now
        when they cannot (see the module docstring). Called while a batch of events is being
        applied, so it never takes the streams' word here: :meth:`run` does, after the batch."""
        if entry.key in self.waiting:
            return
        if self._settled(entry) and self.proof(entry) is None:
            self._read(entry)
            return
        self.waiting[entry.key] = now + STREAM_WAIT_SECONDS

    def _settled(self, entry: Entry) -> bool:
        """Is the controller of the gang's child Jobs done with it?"""
        return not entry.kind.has_child_jobs or self.state.child_controller_settled(entry.key)

    def needs(self, entry: Entry) -> dict[str, int] | None:
        """The resourceVersion each watch stream (``pods``, ``jobs``) must have passed for the
        streams to prove the gang has stopped; None when they cannot (a resourceVersion that is
        not an integer), {} when its own Job is not quiet yet (its watch will say when it is)."""
        suspended = entry.rv
        if suspended <= 0:
            return None
        if entry.kind is JOB:
            return {"pods": suspended} if quiet(entry.obj) else {}
        if not entry.kind.has_child_jobs:
            return {"pods": suspended}
        quiet_at = self.quiet_rvs.get(entry.key, 0)
        child_jobs_rv = self.state.child_jobs_rv
        if child_jobs_rv is None:  # an external JobSet controller: any child Job made before the suspension
            return {"jobs": suspended, "pods": max(suspended, quiet_at)}
        # the embedded one: every child Job it made is in its cache, each as last written or seen
        written = child_jobs_rv(entry.key)
        if written is None:
            return None
        return {"jobs": max(1, written), "pods": max(suspended, written, quiet_at)}

    def proof(self, entry: Entry) -> bool | None:
        """Have the watch streams passed what :meth:`needs` says? None: they cannot tell (no
        position, or a stream short of it that has sent nothing for :data:`STREAM_IDLE_SECONDS`)."""
        needs = self.needs(entry)
        if needs is None:
            return None
        if not needs:
            return False
        streams = self.state.streams
        proven = True
        for plural, rv in needs.items():
            position = streams.position(plural, entry.namespace)
            if position is None:
                return None
            if position < rv:
                if streams.idle_for(plural, entry.namespace) >= STREAM_IDLE_SECONDS:
                    return None
                proven = False
        return proven

    def next_due(self) -> float | None:
        dues = [due for due in (self.due[0][0] if self.due else None, min(self.waiting.values(), default=None))
                if due is not None]
        if self.waiting:  # whether a stream it waits for has gone idle
            dues.append(self.last_run + STREAM_IDLE_SECONDS)
        return min(dues) if dues else None

    def run(self, now: float) -> None:
        """After a batch of events is applied: confirm the waiting gangs the streams prove stopped,
        read those they do not prove in time, and read every gang still stopping when its resync
        is due."""
        self.last_run = now
        entries = self.state.entries
        for key, due in list(self.waiting.items()):
            entry = entries.get(key)
            if entry is None or entry.state != EntryState.EVICTING or not self.stopped(entry):
                del self.waiting[key]
                continue
            if not self._settled(entry):  # its JobSet controller is busy with it: check again soon
                self.waiting[key] = now + SETTLE_RETRY_SECONDS
                continue
            proof = self.proof(entry)
            if proof:
                del self.waiting[key]
                self.confirmed(entry, now)
            elif proof is None or now >= due:
                del self.waiting[key]
                self._read(entry)
        while self.due and self.due[0][0] <= now:
            _, key = heapq.heappop(self.due)
            entry = entries.get(key)
            if entry is None or entry.state != EntryState.EVICTING:
                continue
            heapq.heappush(self.due, (now + RESYNC_SECONDS, key))
            if self._settled(entry):
                self._read(entry)

    def forget(self, key: str) -> None:
        self.waiting.pop(key, None)
        self.quiet_rvs.pop(key, None)
        self.evicted_at.pop(key, None)

    def _read(self, entry: Entry) -> None:
        """Read the gang soon: the gangs of a namespace due for a read while one is in flight
        are read together by the next (one list of the namespace's pods and Jobs for them all)."""
        ns = entry.namespace
        self.reads.setdefault(ns, {})[entry.key] = entry
        if ns not in self.reading:
            self.reading.add(ns)
            self.writer.spawn(f"resync:{ns}", self._namespace_reader(ns), lane="read")

    def _namespace_reader(self, ns: str) -> Any:
        async def read() -> None:
            try:
                while gangs := list(self.reads.pop(ns, {}).values()):
                    await (self.read(gangs[0]) if len(gangs) == 1 else self.read_many(ns, gangs))()
            finally:
                self.reading.discard(ns)
                if self.reads.get(ns):  # a failure left some: read them in a new task
                    self._read(next(iter(self.reads[ns].values())))

        return read

    def read_many(self, ns: str, gangs: list[Entry]) -> Any:
        """:meth:`read` for several gangs of namespace ``ns`` at once: its pods and Jobs listed
        whole, then told apart by gang."""
        client = self.state.client
        pods_path = resource_path("", "v1", "pods", ns)
        keys = {entry.key for entry in gangs}
        with_jobs = any(entry.kind.has_child_jobs or entry.kind is JOB for entry in gangs)

        async def jobs_read() -> tuple[dict[str, list[str]], int]:
            live: dict[str, list[str]] = {}
            newest = 0
            if not with_jobs:
                return live, newest
            for job in (await client.list(resource_path("batch", "v1", "jobs", ns))).get("items") or []:
                meta = Meta(job)
                name = meta.name
                owner = meta.labels.get(js.JOBSET_NAME_KEY)
                gang = JOBSET.key(ns, owner) if owner else JOB.key_of(job)
                if gang not in keys:
                    continue
                if not quiet(job):
                    live.setdefault(gang, []).append(name)
                    continue
                rv = resource_version(job)
                newest = -1 if rv <= 0 or newest < 0 else max(newest, rv)
            return live, newest

        async def read() -> None:
            try:
                pods, (jobs, newest) = await asyncio.gather(client.list(pods_path), jobs_read())
                if newest and (newest < 0 or resource_version(pods) < newest):
                    pods = await client.list(pods_path)
            except ApiError as err:
                log.warning("resync of %d stopping gangs in namespace %s failed: %s", len(gangs), ns, err)
                return
            live: dict[str, list[str]] = {}
            for p in pods.get("items") or []:
                owner = pod_gang(p)
                if owner is not None and owner[0] in keys and (p.get("status") or {}).get("phase") not in (
                        "Succeeded", "Failed"):
                    live.setdefault(owner[0], []).append(object_key(p))
            for entry in gangs:
                self.writer.report(RESYNCED, {"key": entry.key, "pods": live.get(entry.key, []),
                                              "jobs": jobs.get(entry.key, [])})

        return read

    def read(self, entry: Entry) -> Any:
        """The gang's child Jobs (or its own Job) and pods as the API server has them. The pods are
        listed with the Jobs, and listed again when their list is older than a Job's quiet state:
        a pod created before the Job controller wrote that state must be in it."""
        key = entry.key
        ns = entry.namespace
        client = self.state.client
        selector = entry.kind.pod_selector(entry.name)
        pod_query = entry.kind.pod_query(entry.obj)
        child_jobs = entry.kind.has_child_jobs
        own_job = entry.kind is JOB
        path = entry.kind.path(ns, entry.name)
        pods_path = resource_path("", "v1", "pods", ns)

        async def jobs_read() -> tuple[list[str], int]:
            """(names of the Jobs that may still start pods, newest resourceVersion of a quiet one:
            0 when none is quiet, -1 when one's is not an integer)"""
            if child_jobs:
                listed = await client.list(resource_path("batch", "v1", "jobs", ns), {"labelSelector": selector})
                live: list[str] = []
                newest = 0
                for job in listed.get("items") or []:
                    if not quiet(job):
                        live.append(str(job["metadata"]["name"]))
                        continue
                    rv = resource_version(job)
                    newest = -1 if rv <= 0 or newest < 0 else max(newest, rv)
                return live, newest
            if own_job:
                try:
                    job = await client.get(path)
                except ApiError as err:
                    if err.status != 404:
                        raise
                    return [], 0
                return ([], resource_version(job) or -1) if quiet(job) else ([entry.name], 0)
            return [], 0

        async def read() -> None:
            try:
                pods, (jobs, newest) = await asyncio.gather(
                    client.list(pods_path, pod_query), jobs_read())
                listed_at = resource_version(pods)
                if newest and (newest < 0 or listed_at < newest):
                    pods = await client.list(pods_path, pod_query)
            except ApiError as err:
                log.warning("resync of stopping %s %s failed: %s", entry.kind.kind, key, err)
                return
            live = [object_key(p) for p in pods.get("items") or []
                    if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
            self.writer.report(RESYNCED, {"key": key, "pods": live, "jobs": jobs})

        return read
