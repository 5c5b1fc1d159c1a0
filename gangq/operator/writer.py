"""The controller's API writes: two lanes of tasks, and the patches of queued objects (every kind
of :mod:`gangq.integrations`) and Events.

Writes run as tasks, ordered per key (a gang's eviction never overtakes its admission), in two
lanes so a burst of status writes never delays an admission or an eviction:

- critical: admission and eviction patches of queued objects, at most :data:`CRITICAL_IN_FLIGHT`;
- background: everything else (Workload creates and status, Events), at most
  :data:`BACKGROUND_IN_FLIGHT`, and only while at most :data:`CRITICAL_QUIET` critical writes wait
  or are in flight (or after :data:`BACKGROUND_MAX_WAIT_SECONDS`): on a busy API server they would
  queue ahead of the writes that start gangs.

ClusterQueue, LocalQueue and Cohort status writes have a lane of their own, at most
:data:`QUEUES_IN_FLIGHT`, beside the admissions: a few per ``status.queueIntervalSeconds``
whatever the load, they are what an admin reads to see a queue's usage, and behind the
background writes of a busy controller they showed usage minutes old.

The reads that confirm an eviction (:mod:`gangq.operator.evictions`) have a lane of their own, at
most :data:`READS_IN_FLIGHT`: the evicted gang's quota, and the preemptor waiting for it, wait for
the read, which behind the background writes of a busy controller waited for minutes.

A write's outcome goes back to the scheduling loop through ``report`` (the inbox), never to the
engine directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

from gangq.api.meta import Meta, rfc3339
from gangq.core.decisions import Admission
from gangq.core.errors import SpecError
from gangq.integrations.interface import ObjectWrite
from gangq.operator.entry import Entry
from gangq.operator.kube import JSON_PATCH, ApiError, resource_path
from gangq.operator.state import ControllerState
from gangq.operator.translate import (
    ADMISSION_ANNOTATION,
    CQ_FINALIZER,
    EVICTION_ANNOTATION,
    GROUP,
    VERSION,
    admission_json,
    eviction_record,
    recorded_admission,
)

log = logging.getLogger(__name__)

CRITICAL_IN_FLIGHT: Final = 32
BACKGROUND_IN_FLIGHT: Final = 16
CRITICAL_QUIET: Final = 4
BACKGROUND_MAX_WAIT_SECONDS: Final = 2.0
READS_IN_FLIGHT: Final = 4
QUEUES_IN_FLIGHT: Final = 4

WRITTEN: Final = "_written"
"""Outcome of a queued object's patch (``{"key", "object"?}``: the patched object, absent when it is gone)."""
ADMISSION_FAILED: Final = "_admission_failed"
"""An admission patch the API server refused (``{"key", "error"}``): the gang is requeued."""
STOPPED_RETRY_DELAYS: Final = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 30.0, 30.0, 30.0, 30.0)
"""Pauses between the attempts of :meth:`Writer.write_stopped` (the JobSet controller may take a
while to count a suspended Job inactive on a busy cluster)."""
OUTCOME_READ_DELAYS: Final = (1.0, 2.0, 4.0)
"""Pauses between the reads (each retried by the client) that learn a patch's unknown outcome."""

_ADMISSION_PATH: Final = "/metadata/annotations/" + ADMISSION_ANNOTATION.replace("/", "~1")

Lane = Literal["critical", "background", "queues", "read"]
"""The lanes of the module docstring; ``read`` is the eviction reads'."""
Report = Callable[[str, dict[str, Any]], None]
Write = Callable[[], Awaitable[None]]


class Writer:
    """The write lanes, and the patches of queued objects (admission, suspend) and Events built on them."""

    def __init__(self, state: ControllerState, report: Report) -> None:
        self.state = state
        self.report = report
        self._lanes: dict[Lane, asyncio.Semaphore] = {
            "critical": asyncio.Semaphore(CRITICAL_IN_FLIGHT),
            "background": asyncio.Semaphore(BACKGROUND_IN_FLIGHT),
            "queues": asyncio.Semaphore(QUEUES_IN_FLIGHT),
            "read": asyncio.Semaphore(READS_IN_FLIGHT),
        }
        self._critical_busy = 0
        self._critical_clear = asyncio.Event()
        self._critical_clear.set()
        self._chains: dict[str, asyncio.Task[None]] = {}
        self.tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------------------------------
    # Lanes
    # ------------------------------------------------------------------------------------------

    def spawn(self, chain_key: str | None, fn: Write, *, lane: Lane = "background") -> None:
        """Run ``fn`` as a task in its lane, after the previous task of ``chain_key``."""
        prev = self._chains.get(chain_key) if chain_key else None
        critical = lane == "critical"
        sem = self._lanes[lane]

        async def run() -> None:
            if critical:
                self._critical_busy += 1
                if self._critical_busy > CRITICAL_QUIET:
                    self._critical_clear.clear()
            try:
                if prev is not None:
                    with contextlib.suppress(BaseException):
                        await prev
                async with sem:
                    if lane == "background" and not self._critical_clear.is_set():
                        # behind the admissions, but never starved (a slow API server keeps patches in flight)
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._critical_clear.wait(), BACKGROUND_MAX_WAIT_SECONDS)
                    try:
                        await fn()
                    except ApiError as err:
                        log.warning("write for %s failed: %s", chain_key, err)
                    except Exception:
                        log.exception("write for %s failed", chain_key)
            finally:
                if critical:
                    self._critical_busy -= 1
                    if self._critical_busy <= CRITICAL_QUIET:
                        self._critical_clear.set()

        task = asyncio.ensure_future(run())
        self.tasks.add(task)
        if chain_key:
            self._chains[chain_key] = task
        metrics = self.state.metrics
        if metrics is not None:
            metrics.writes_in_flight.set(len(self.tasks))

        def done(t: asyncio.Task[None]) -> None:
            self.tasks.discard(t)
            if chain_key and self._chains.get(chain_key) is t:
                del self._chains[chain_key]
            if metrics is not None:
                metrics.writes_in_flight.set(len(self.tasks))

        task.add_done_callback(done)

    async def cancel(self) -> None:
        """Cancel every write task (queued or in flight)."""
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for the writes in flight."""
        tasks = list(self.tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    # ------------------------------------------------------------------------------------------
    # patches of queued objects
    # ------------------------------------------------------------------------------------------

    def write_admission(self, entry: Entry, d: Admission) -> None:
        """Unsuspend the queued object with the flavors' node labels and tolerations and the recorded
        admission; an object changed meanwhile is re-read and patched once more. A kind admitted by
        several patches of itself (a TrainJob: its flavors while suspended, then the unsuspension)
        has them written in order, each once the one before went through, all computed again from
        the re-read object on a conflict; a kind admitted through other objects (a pod group's
        pods) has them written by :meth:`_write_objects`."""
        obj = entry.obj
        flavors = dict(self.state.engine.flavors)
        recorded = json.dumps(admission_json(d), sort_keys=True, separators=(",", ":"))
        key = entry.key
        entry.writing = True
        path = entry.kind.path(entry.namespace, entry.name)
        try:
            writes = entry.kind.admission_writes(obj, d, flavors, recorded)
        except SpecError as err:
            self.report(ADMISSION_FAILED, {"key": key, "error": str(err)})
            return
        if writes is not None and not _own_patches(writes, path):
            self._write_objects(entry, writes, admission=d)
            return

        def patches_for(current: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
            """The patches of the object that admit it, in order, computed from ``current``: the
            kind's own (a TrainJob's two), else one (:func:`ops_for`)."""
            if writes is None:
                return [ops_for(current)]
            own = writes if current is obj else entry.kind.admission_writes(current, d, flavors, recorded)
            return [w.patch for w in own or () if w.patch is not None]

        def ops_for(current: Mapping[str, Any]) -> list[dict[str, Any]]:
            ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": entry.uid}]
            ops += entry.kind.admission_ops(current, d, flavors)
            ann_exists = bool(Meta(current).annotations) or any(
                o["path"] == "/metadata/annotations" for o in ops
            )
            if not ann_exists:
                ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
            ops.append({"op": "add", "path": _ADMISSION_PATH, "value": recorded})
            suspend = entry.kind.suspend_path
            ops = [o for o in ops if o["path"] != suspend]
            # Only a suspended object is admitted: a second admission of a running one (its first
            # patch went through, its answer was lost) would rewrite the record under running pods.
            ops.append({"op": "test", "path": suspend, "value": True})
            ops.append({"op": "add", "path": suspend, "value": False})
            return ops

        decided = time.monotonic()

        async def write() -> None:
            current: Mapping[str, Any] = obj
            metrics = self.state.metrics
            if metrics is not None:
                metrics.admission_patch_wait_seconds.observe(time.monotonic() - decided)
            for attempt in range(2):
                try:
                    new: Mapping[str, Any] = current
                    for ops in patches_for(current):  # each after the one before has gone through
                        new = await self.state.client.patch(path, ops, JSON_PATCH)
                    if metrics is not None:
                        metrics.admission_patch_duration_seconds.observe(time.monotonic() - decided)
                    self.report(WRITTEN, {"key": key, "object": new})
                    if self.state.config.events.admission:
                        self.post_event(entry, "Normal", "Admitted", f"Admitted by ClusterQueue {d.cluster_queue}", new)
                    return
                except ApiError as err:
                    if err.status == 404:
                        self.report(WRITTEN, {"key": key})
                        return
                    # A conflict, a failed test, or no answer at all (an API-server restart): read
                    # the object to learn what happened — the patch may have gone through.
                    read = await self._read_outcome(path)
                    if read is None:
                        self.report(ADMISSION_FAILED, {"key": key, "error": str(err)})
                        return
                    current = read
                    if _admitted_as(entry.kind.suspended(current), current, d):
                        log.info("%s %s: the admission went through (%s)", entry.kind.kind, key, err)
                        self.report(WRITTEN, {"key": key, "object": current})
                        return
                    if attempt == 0 and err.status in (409, 422) and entry.kind.suspended(current):
                        continue
                    self.report(ADMISSION_FAILED, {"key": key, "error": str(err), "object": current})
                    return
                except SpecError as err:
                    self.report(ADMISSION_FAILED, {"key": key, "error": str(err)})
                    return

        self.spawn(key, write, lane="critical")

    def write_stopped(self, entry: Entry) -> None:
        """The kind's writes once its evicted gang has stopped (:meth:`WorkloadKind.stopped_ops`:
        a TrainJob's ``podSpecOverrides`` put back), computed from the object as each attempt
        reads it, after the writes of the same gang before it. A refused attempt (the
        Trainer's webhook refuses while its JobSet's status still counts active Jobs; a conflict)
        is tried again after :data:`STOPPED_RETRY_DELAYS`, the object read anew, and no write is
        left once the object runs again or has nothing to restore (the kind returns no
        operations). Background lane, no pause inside a write slot. The loop learns of the
        outcome from the object's watch event: a report would end an admission's write in flight."""
        key = entry.key
        path = entry.kind.path(entry.namespace, entry.name)

        def attempt(n: int) -> None:
            async def write() -> None:
                current = await self._read_outcome(path)  # the object as it is, not as the loop last saw it
                if current is None:
                    return  # gone, or unreadable through the retries: nothing to restore
                try:
                    ops = entry.kind.stopped_ops(current)
                except SpecError as err:
                    log.warning("%s %s: not restored once stopped: %s", entry.kind.kind, key, err)
                    return
                if not ops:
                    return
                uid = Meta(current).uid or entry.uid
                try:
                    await self.state.client.patch(path, [{"op": "test", "path": "/metadata/uid", "value": uid},
                                                         *ops], JSON_PATCH, want_body=False)
                except ApiError as err:
                    if err.status == 404:
                        return
                    if n >= len(STOPPED_RETRY_DELAYS):
                        log.error("%s %s: not restored once stopped, after %d attempts: %s", entry.kind.kind,
                                  key, n + 1, err)
                        return
                    log.info("%s %s: not restored once stopped yet (%s): again in %.0f s", entry.kind.kind, key,
                             err, STOPPED_RETRY_DELAYS[n])
                    asyncio.get_running_loop().call_later(STOPPED_RETRY_DELAYS[n], attempt, n + 1)
            self.spawn(key, write)

        attempt(0)

    async def _read_outcome(self, path: str) -> Mapping[str, Any] | None:
        """The object after a patch whose outcome is unknown, read again through a short outage
        (None: still unreadable). Until it is known, the gang keeps the quota it was admitted
        with: had the patch gone through unseen, its pods would start on quota given to others."""
        for delay in OUTCOME_READ_DELAYS:
            try:
                return await self.state.client.get(path)
            except ApiError as err:
                if err.status == 404 or not (err.status in (0, 429) or err.status >= 500):
                    return None
            await asyncio.sleep(delay)
        return None

    def write_suspend(
        self, entry: Entry, *, restore: bool, event: tuple[str, str] | None = None,
        eviction: tuple[str, str] | None = None,
    ) -> None:
        """Suspend the queued object; with ``restore`` also put back its pod templates and drop the recorded
        admission (an eviction). ``event``: (reason, message) of the Event to post; an eviction
        (``restore``) records ``eviction`` or ``event`` — (reason, message) — in the annotation
        ``gangq.io/eviction`` in the same patch: the Event is a separate write that a crash
        between the two loses, and a researcher whose job stopped must find out why."""
        key = entry.key
        obj = entry.obj
        entry.writing = True
        record = eviction or event
        writes = entry.kind.eviction_writes(obj) if restore else None
        if writes is not None:
            self._write_objects(entry, writes, event=event)
            return

        def ops_for(current: Mapping[str, Any]) -> list[dict[str, Any]]:
            ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": entry.uid}]
            if restore:
                try:
                    ops += entry.kind.eviction_ops(current)
                except SpecError as err:
                    log.warning("%s %s: cannot restore pod templates (%s); suspending only", entry.kind.kind, key, err)
                    ops += entry.kind.suspend_ops(current)
                ann = Meta(current).annotations
                removes_all = any(o["op"] == "remove" and o["path"] == "/metadata/annotations" for o in ops)
                kept = dict(ann)  # the annotations as they are to be
                for o in ops:
                    if o["op"] == "remove" and o["path"].startswith("/metadata/annotations/"):
                        kept.pop(o["path"].removeprefix("/metadata/annotations/").replace("~1", "/"), None)
                kept.pop(ADMISSION_ANNOTATION, None)
                if record is not None:
                    kept[EVICTION_ANNOTATION] = eviction_record(record[0], record[1], time.time(),
                                                                recorded_admission(current))
                if removes_all:
                    kept = {k: v for k, v in kept.items() if k == EVICTION_ANNOTATION}
                ops = [o for o in ops if not o["path"].startswith("/metadata/annotations")]
                ops += _annotation_ops(ann, kept)
            if not any(o["path"] == entry.kind.suspend_path for o in ops):
                ops += entry.kind.suspend_ops(current)
            return ops

        async def write() -> None:
            path = entry.kind.path(entry.namespace, entry.name)
            current: Mapping[str, Any] = obj
            for attempt in range(3):
                try:
                    new = await self.state.client.patch(path, ops_for(current), JSON_PATCH)
                    self.report(WRITTEN, {"key": key, "object": new})
                    if event is not None and self.state.config.events.eviction:
                        reason, message = event
                        self.post_event(entry, "Warning" if reason != "Preempted" else "Normal",
                                        "Preempted" if reason == "Preempted" else "Evicted", message, new)
                    return
                except ApiError as err:
                    if err.status == 404:
                        break
                    if attempt < 2 and err.status in (409, 422):
                        try:
                            current = await self.state.client.get(path)
                            continue
                        except ApiError:
                            break
                    log.error("%s %s: cannot suspend: %s", entry.kind.kind, key, err)
                    break
            self.report(WRITTEN, {"key": key})

        self.spawn(key, write, lane="critical")

    def _write_objects(self, entry: Entry, writes: list[ObjectWrite], *, admission: Admission | None = None,
                       event: tuple[str, str] | None = None) -> None:
        """The writes of a kind that is admitted or evicted object by object (a pod group: a patch
        or a deletion per pod), in the critical lane. An object gone meanwhile is skipped; an
        admission patch the API server refuses fails the admission (the gang is requeued; its
        pods still gated stay so); an eviction's failed deletion is logged and resynced by the
        eviction's reads. The patched objects go back with the outcome (``objects``), so the
        loop sees them before their watch events."""
        key = entry.key

        async def one(w: ObjectWrite) -> Mapping[str, Any] | None:
            if w.patch is None:
                body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
                if w.uid:
                    body["preconditions"] = {"uid": w.uid}
                await self.state.client.request("DELETE", w.path, body=body)
                return None
            return await self.state.client.patch(w.path, w.patch, JSON_PATCH)

        async def write() -> None:
            results = await asyncio.gather(*(one(w) for w in writes), return_exceptions=True)
            objects = [r for r in results if isinstance(r, Mapping)]
            errors = [r for r in results if isinstance(r, BaseException)
                      and not (isinstance(r, ApiError) and r.status == 404)]
            if errors and admission is not None:
                self.report(ADMISSION_FAILED, {"key": key, "error": "; ".join(map(str, errors)), "objects": objects})
                return
            for err in errors:
                log.warning("%s %s: eviction write failed: %s", entry.kind.kind, key, err)
            self.report(WRITTEN, {"key": key, "objects": objects})
            if admission is not None and self.state.config.events.admission:
                self.post_event(entry, "Normal", "Admitted", f"Admitted by ClusterQueue {admission.cluster_queue}")
            if event is not None and self.state.config.events.eviction:
                reason, message = event
                self.post_event(entry, "Warning" if reason != "Preempted" else "Normal",
                                "Preempted" if reason == "Preempted" else "Evicted", message)

        self.spawn(key, write, lane="critical")

    def write_status(self, entry: Entry, writes: list[ObjectWrite]) -> None:
        """Status writes of the queued object itself (a PodGroup's phase and counts), in the
        background lane; a failed one is logged (the next change writes it again)."""
        self.write_objects(f"status:{entry.key}", f"{entry.kind.kind} {entry.key}", writes)

    def write_objects(self, name: str, what: str, writes: list[ObjectWrite]) -> None:
        """JSON Patches of objects no admission or eviction waits for, in the background lane
        (``name`` the task's, ``what`` for the log); a failed one is logged at debug level: the
        next change of what they were computed from writes them again."""

        async def write() -> None:
            for w in writes:
                if w.patch is None:
                    continue
                try:
                    await self.state.client.patch(f"{w.path}/{w.subresource}" if w.subresource else w.path,
                                                  w.patch, JSON_PATCH, want_body=False)
                except ApiError as err:
                    log.debug("%s: not written: %s", what, err)

        self.spawn(name, write)

    # ------------------------------------------------------------------------------------------
    # ClusterQueues
    # ------------------------------------------------------------------------------------------

    def write_cq_finalizer(self, name: str, obj: Mapping[str, Any], *, add: bool) -> None:
        """Put ``CQ_FINALIZER`` on a ClusterQueue, or take it off. The JSON patch tests the finalizer
        list it was computed from, so one another controller changed meanwhile is not lost; on
        such a conflict the queue is read again and the patch computed anew."""
        path = resource_path(GROUP, VERSION, "clusterqueues", None, name)

        async def write() -> None:
            current = obj
            for attempt in range(3):
                ops = _finalizer_ops(current, add)
                if ops is None:
                    return  # already as wanted
                try:
                    await self.state.client.patch(path, ops, JSON_PATCH, want_body=False)
                    return
                except ApiError as err:
                    if err.status == 404:
                        return
                    if err.status not in (409, 422) or attempt == 2:
                        log.warning("ClusterQueue %s: finalizer not %s: %s", name, "added" if add else "removed", err)
                        return
                current = await self.state.client.get(path)

        self.spawn(f"cq:{name}", write)

    # ------------------------------------------------------------------------------------------
    # Events
    # ------------------------------------------------------------------------------------------

    def post_event(
        self, entry: Entry, event_type: str, reason: str, message: str, obj: Mapping[str, Any] | None = None
    ) -> None:
        """An Event on the queued object (background lane; a failure is only logged)."""

        async def post() -> None:
            now = rfc3339(time.time())
            meta = Meta(obj or entry.obj)
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{entry.name}.{secrets.token_hex(8)}", "namespace": entry.namespace},
                "involvedObject": {
                    "apiVersion": entry.kind.api_version, "kind": entry.kind.kind, "name": entry.name,
                    "namespace": entry.namespace, "uid": entry.uid,
                    "resourceVersion": meta.resource_version_text or None,
                },
                "reason": reason,
                "message": message[:1024],
                "type": event_type,
                "source": {"component": "gangq-controller"},
                "reportingComponent": "gangq-controller",
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
            try:
                await self.state.client.create(resource_path("", "v1", "events", entry.namespace), body,
                                               want_body=False)
            except ApiError as err:
                log.debug("event for %s not posted: %s", entry.key, err)

        self.spawn(None, post)


def _own_patches(writes: list[ObjectWrite], path: str) -> bool:
    """Are ``writes`` patches of the queued object itself (at ``path``), written in order (a
    TrainJob's), rather than writes of other objects (a pod group's pods)?"""
    return bool(writes) and all(w.path == path and w.patch is not None and not w.subresource for w in writes)


def _admitted_as(suspended: bool, obj: Mapping[str, Any], d: Admission) -> bool:
    """Does ``obj`` (``suspended`` or not) run with an admission record of ``d``'s ClusterQueue and flavors?"""
    if suspended:
        return False
    recorded = recorded_admission(obj)
    if recorded is None or recorded.get("clusterQueue") != d.cluster_queue:
        return False
    flavors = {a.get("name"): a.get("flavors") for a in recorded.get("podSetAssignments") or [] if isinstance(a, dict)}
    return all(flavors.get(ps.name) == dict(ps.flavors) for ps in d.pod_sets)


def _annotation_ops(old: Mapping[str, str], new: Mapping[str, str]) -> list[dict[str, Any]]:
    """JSON Patch operations from annotations ``old`` to ``new``, key by key (an annotation
    another controller set meanwhile is left alone), the map itself only when it appears or goes."""
    if not new:
        return [{"op": "remove", "path": "/metadata/annotations"}] if old else []
    if not old:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(new)}]
    ops: list[dict[str, Any]] = [
        {"op": "remove", "path": "/metadata/annotations/" + k.replace("~", "~0").replace("/", "~1")}
        for k in old if k not in new
    ]
    ops += [
        {"op": "add", "path": "/metadata/annotations/" + k.replace("~", "~0").replace("/", "~1"), "value": v}
        for k, v in new.items() if old.get(k) != v
    ]
    return ops


def _finalizer_ops(obj: Mapping[str, Any], add: bool) -> list[dict[str, Any]] | None:
    """The JSON patch that puts ``CQ_FINALIZER`` on ``obj`` (``add``) or takes it off, testing the
    list it read; None when there is nothing to do."""
    finalizers = list(Meta(obj).finalizers)
    if add == (CQ_FINALIZER in finalizers):
        return None
    if not add:
        index = finalizers.index(CQ_FINALIZER)
        return [{"op": "test", "path": f"/metadata/finalizers/{index}", "value": CQ_FINALIZER},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"}]
    if not finalizers:
        return [{"op": "add", "path": "/metadata/finalizers", "value": [CQ_FINALIZER]}]
    return [{"op": "test", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "add", "path": "/metadata/finalizers/-", "value": CQ_FINALIZER}]
