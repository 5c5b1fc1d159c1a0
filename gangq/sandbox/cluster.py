"""The simulated cluster: nodes, the default scheduler, the Job controller and the kubelet, wired to the Store.

Everything runs as asyncio tasks on the loop that serves the API. The components learn about changes from
``Store.subscribe`` callbacks, which only update caches and enqueue keys; one work queue per component (deduplicated
keys, a key is never processed by two workers at once, a key added while it is processed is processed again
afterwards: client-go's workqueue semantics) is drained by worker tasks, and durations (kubelet timings,
activeDeadlineSeconds, failure back-off) are ``loop.call_later`` timers that enqueue a key. Writes go through the
Store's public verbs exactly as the real components make them (pods/binding, the status subresource, create, delete),
so watchers see realistic event sequences.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gangq.sandbox.builtin import ResourceInfo
from gangq.sandbox.errors import ApiError
from gangq.sandbox.jobcontroller import (
    TRACKING_FINALIZER,
    JobSpecError,
    controller_owner,
    random_suffix,
    reconcile,
)
from gangq.sandbox.kubelet import Kubelet, KubeletConfig
from gangq.sandbox.scheduler import (
    LEAST_ALLOCATED,
    MSG_GATED,
    SchedulerState,
    is_gated,
    needs_scheduling,
)
from gangq.sandbox.store import Store

__all__ = ["KubeletConfig", "SimulatedCluster", "WorkQueue"]

log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"
CREATE_RETRY_SECONDS = 1.0  # a Job whose pod creation failed is synced again after this long
_ORPHAN_PREFIX = "pod|"  # work-queue keys of orphan pods (Job keys never contain "|")
SIMULATED_ANNOTATION = "sandbox.gangq.io/simulated"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _priority(pod: dict[str, Any]) -> int:
    try:
        return int((pod.get("spec") or {}).get("priority") or 0)
    except (TypeError, ValueError):
        return 0


class WorkQueue:
    """A deduplicating asyncio work queue (client-go semantics: dirty set + processing set)."""

    __slots__ = ("_dirty", "_processing", "_queue", "_shutdown", "_wake")

    def __init__(self) -> None:
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._wake = asyncio.Event()
        self._shutdown = False

    def add(self, key: str) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._wake.set()

    async def get(self) -> str | None:
        """The next key (mark it processing), or None once shut down."""
        while not self._queue:
            if self._shutdown:
                return None
            self._wake.clear()
            await self._wake.wait()
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._wake.set()

    def shutdown(self) -> None:
        self._shutdown = True
        self._wake.set()

    def __len__(self) -> int:
        return len(self._queue)


class _EventRecorder:
    """core/v1 Events like the real components' recorders write them (no aggregation)."""

    def __init__(self, store: Store, enabled: bool) -> None:
        self.store = store
        self.enabled = enabled
        self._seq = itertools.count()

    def emit(self, component: str, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        if not self.enabled:
            return
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        now = _now()
        unique = f"{time.time_ns() + next(self._seq):x}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name', 'object')}.{unique}", "namespace": ns},
            "involvedObject": {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", ""),
                               "name": meta.get("name", ""), "namespace": ns, "uid": meta.get("uid", ""),
                               "resourceVersion": meta.get("resourceVersion", "")},
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": component,
            "reportingInstance": "",
        }
        try:
            self.store.create("", "events", event, namespace=ns)
        except ApiError as exc:  # e.g. the namespace is being deleted
            log.debug("event %s/%s not recorded: %s", ns, reason, exc.message)


class _SchedulerLoop:
    """kube-scheduler's queueing: an active queue ordered by (priority desc, arrival), an unschedulable pool that is
    moved back when resources are released or nodes change, and gated pods that wait for their gates to go."""

    PODS_PER_TURN = 16

    def __init__(self, store: Store, state: SchedulerState, events: _EventRecorder) -> None:
        self.store = store
        self.state = state
        self.events = events
        self._heap: list[tuple[int, int, str]] = []
        self._queued: set[str] = set()
        # key -> (the spec it was found unschedulable or gated with, priority, gated)
        self._parked: dict[str, tuple[Any, int, bool]] = {}
        self._messages: dict[str, str] = {}  # key -> last FailedScheduling message
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self.attempts = 0

    def _push(self, key: str, priority: int) -> None:
        self._parked.pop(key, None)
        if key in self._queued:
            return
        heapq.heappush(self._heap, (-priority, next(self._seq), key))
        self._queued.add(key)
        self._wake.set()

    def flush_unschedulable(self) -> None:
        """Move the unschedulable (not the gated) pods back to the active queue."""
        if not self._parked:
            return
        for key, (_spec, priority, gated) in list(self._parked.items()):
            if not gated:
                self._push(key, priority)

    def on_pod(self, etype: str, pod: dict[str, Any]) -> None:
        key = _key(pod)
        if etype == "DELETED":
            self._parked.pop(key, None)
            self._messages.pop(key, None)
            self._queued.discard(key)
            if self.state.remove_pod(pod):
                self.flush_unschedulable()
            return
        if self.state.update_pod(pod):
            self.flush_unschedulable()
        if not needs_scheduling(pod):
            self._parked.pop(key, None)
            return
        parked = self._parked.get(key)
        if parked is not None and parked[0] == pod.get("spec"):
            return  # e.g. our own status update: nothing new to try
        self._push(key, _priority(pod))

    def on_node(self, etype: str, node: dict[str, Any]) -> None:
        if etype == "DELETED":
            self.state.remove_node(node["metadata"]["name"])
        else:
            self.state.upsert_node(node)
        self.flush_unschedulable()

    async def run(self) -> None:
        while True:
            while not self._heap:
                self._wake.clear()
                await self._wake.wait()
            # one pod at a time, in queue order; other components get the loop every few pods
            for _ in range(self.PODS_PER_TURN):
                if not self._heap:
                    break
                _, _, key = heapq.heappop(self._heap)
                if key not in self._queued:
                    continue  # deleted while queued
                self._queued.discard(key)
                try:
                    self._schedule_one(key)
                except Exception:
                    log.exception("sandbox scheduler failed on pod %s", key)
            await asyncio.sleep(0)

    def _schedule_one(self, key: str) -> None:
        ns, _, name = key.partition("/")
        try:
            pod = self.store.get("", "pods", ns, name)
        except ApiError:
            return
        if not needs_scheduling(pod):
            return
        self.attempts += 1
        if is_gated(pod):
            self._parked[key] = (pod.get("spec"), _priority(pod), True)
            self._set_condition(pod, "SchedulingGated", MSG_GATED)
            return
        result = self.state.schedule(pod)
        if result.node_name is not None:
            try:
                self.store.bind(ns, name, result.node_name)
            except ApiError as exc:
                log.info("sandbox scheduler: binding %s to %s failed: %s", key, result.node_name, exc.message)
                return
            self._messages.pop(key, None)
            self.events.emit("default-scheduler", pod, "Normal", "Scheduled",
                             f"Successfully assigned {key} to {result.node_name}")
            return
        self._parked[key] = (pod.get("spec"), _priority(pod), False)
        self._set_condition(pod, "Unschedulable", result.message)
        if self._messages.get(key) != result.message:
            self._messages[key] = result.message
            self.events.emit("default-scheduler", pod, "Warning", "FailedScheduling", result.message)

    def _set_condition(self, pod: dict[str, Any], reason: str, message: str) -> None:
        status = pod.get("status") or {}
        conds = list(status.get("conditions") or [])
        old = next((c for c in conds if c.get("type") == "PodScheduled"), None)
        if old is not None and old.get("status") == "False" and old.get("reason") == reason \
                and old.get("message") == message:
            return
        new = {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
               "lastTransitionTime": old.get("lastTransitionTime") if old and old.get("status") == "False"
               else _now(), "reason": reason, "message": message}
        conds = [c for c in conds if c.get("type") != "PodScheduled"] + [new]
        meta = pod["metadata"]
        try:
            self.store.patch("", "pods", meta.get("namespace"), meta["name"], {"status": {"conditions": conds}},
                             MERGE, subresource="status")
        except ApiError as exc:
            log.debug("sandbox scheduler: status of %s not updated: %s", _key(pod), exc.message)


class _JobControllerLoop:
    def __init__(self, store: Store, events: _EventRecorder, *, workers: int, failure_backoff_seconds: float,
                 batch_seconds: float) -> None:
        self.store = store
        self.batch_seconds = batch_seconds
        self._batch_timers: dict[str, asyncio.TimerHandle] = {}
        self._job_seen: dict[str, tuple[Any, ...]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.events = events
        self.queue = WorkQueue()
        self.workers = workers
        self.failure_backoff_seconds = failure_backoff_seconds
        self._pods: dict[str, dict[str, dict[str, Any]]] = {}  # owner job uid -> pod key -> pod
        self._owner_of: dict[str, str] = {}  # pod key -> owner job uid
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._bad_spec: dict[str, str] = {}
        self._suffix_seq = itertools.count()

    def on_job(self, etype: str, job: dict[str, Any]) -> None:
        key = _key(job)
        meta = job.get("metadata") or {}
        seen = (meta.get("uid"), meta.get("generation"), meta.get("deletionTimestamp"), bool(meta.get("finalizers")))
        if etype == "DELETED":
            self._job_seen.pop(key, None)
        elif etype == "MODIFIED" and self._job_seen.get(key) == seen:
            return  # only status or labels changed (e.g. our own status write): nothing to reconcile
        else:
            self._job_seen[key] = seen
        self.queue.add(key)

    def _enqueue_batched(self, key: str) -> None:
        """Pod changes are batched per Job like the real controller's syncJobBatchPeriod: one sync per period."""
        if self.batch_seconds <= 0 or self.loop is None:
            self.queue.add(key)
            return
        if key not in self._batch_timers:
            self._batch_timers[key] = self.loop.call_later(self.batch_seconds, self._fire_batch, key)

    def _fire_batch(self, key: str) -> None:
        self._batch_timers.pop(key, None)
        self.queue.add(key)

    def on_pod(self, etype: str, pod: dict[str, Any]) -> None:
        key = _key(pod)
        owner = controller_owner(pod)
        old_uid = self._owner_of.pop(key, None)
        if old_uid is not None:
            bucket = self._pods.get(old_uid)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self._pods[old_uid]
        if owner is None or owner.get("kind") != "Job":
            if etype != "DELETED" and TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                self.queue.add(_ORPHAN_PREFIX + key)  # e.g. its Job was deleted with propagationPolicy=Orphan
            return
        if etype != "DELETED":
            uid = owner.get("uid", "")
            self._pods.setdefault(uid, {})[key] = pod
            self._owner_of[key] = uid
        self._enqueue_batched(f"{pod['metadata'].get('namespace', '')}/{owner.get('name', '')}")

    def stop(self) -> None:
        self.queue.shutdown()
        for t in [*self._timers.values(), *self._batch_timers.values()]:
            t.cancel()
        self._timers.clear()
        self._batch_timers.clear()

    async def worker(self) -> None:
        while True:
            key = await self.queue.get()
            if key is None:
                return
            try:
                await self.sync(key)
            except Exception:
                log.exception("sandbox job controller failed on Job %s", key)
            finally:
                self.queue.done(key)

    def _suffix(self, seed: str) -> str:
        return random_suffix(f"{seed}/{next(self._suffix_seq)}")

    async def sync(self, key: str) -> None:
        if key.startswith(_ORPHAN_PREFIX):
            self._sync_orphan_pod(key[len(_ORPHAN_PREFIX):])
            return
        ns, _, name = key.partition("/")
        try:
            job = self.store.get("batch", "jobs", ns, name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            self._release_orphans(ns, name)
            return
        uid = job["metadata"].get("uid", "")
        pods = list(self._pods.get(uid, {}).values())
        try:
            acts = reconcile(job, pods, datetime.now(UTC), suffix=self._suffix,
                             failure_backoff_seconds=self.failure_backoff_seconds)
        except JobSpecError as exc:
            if self._bad_spec.get(key) != str(exc):
                self._bad_spec[key] = str(exc)
                log.warning("sandbox job controller: %s", exc)
                self.events.emit("job-controller", job, "Warning", "InvalidJobSpec", str(exc))
            return
        self._bad_spec.pop(key, None)
        untrack = {_key(p): p for p in [*acts.untrack, *acts.delete]}
        for p in untrack.values():
            self._remove_finalizer(p)
        for p in acts.delete:
            try:
                self.store.delete("", "pods", ns, p["metadata"]["name"])
            except ApiError as exc:
                if exc.code != 404:
                    log.info("sandbox job controller: deleting pod %s failed: %s", _key(p), exc.message)
        created_ok = await self._create_pods(job, acts.create)
        not_created = len(acts.create) - len(created_ok)
        if not_created and acts.status is not None:
            active = int(acts.status.get("active") or 0) - not_created
            if active > 0:
                acts.status["active"] = active
            else:
                acts.status.pop("active", None)
            acts.requeue_after = min(acts.requeue_after or CREATE_RETRY_SECONDS, CREATE_RETRY_SECONDS)
        if acts.status is not None:
            old = job.get("status") or {}
            patch = dict(acts.status)
            for k in old:
                if k not in patch:
                    patch[k] = None
            try:
                self.store.patch("batch", "jobs", ns, name, {"status": patch}, MERGE, subresource="status")
            except ApiError as exc:
                if exc.code != 404:
                    raise
        for type_, reason, message in acts.events:
            if reason == "SuccessfulCreate" and message.split(": ", 1)[-1] not in created_ok:
                continue
            self.events.emit("job-controller", job, type_, reason, message)
        old_timer = self._timers.pop(key, None)
        if old_timer is not None:
            old_timer.cancel()
        if acts.requeue_after is not None:
            loop = asyncio.get_running_loop()
            self._timers[key] = loop.call_later(max(0.0, acts.requeue_after) + 0.001, self.queue.add, key)

    async def _create_pods(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> set[str]:
        """Create in slow-start batches (1, 2, 4, ...), yielding between batches like the real controller's
        concurrent creates do."""
        created: set[str] = set()
        i = 0
        batch = 1
        while i < len(pods):
            for pod in pods[i:i + batch]:
                ns = pod["metadata"]["namespace"]
                try:
                    self.store.create("", "pods", pod, namespace=ns)
                    created.add(pod["metadata"]["name"])
                except ApiError as exc:
                    log.info("sandbox job controller: creating pod %s failed: %s", _key(pod), exc.message)
                    self.events.emit("job-controller", job, "Warning", "FailedCreate",
                                     f"Error creating: {exc.message}")
                    return created
            i += batch
            batch *= 2
            if i < len(pods):
                await asyncio.sleep(0)
        return created

    def _remove_finalizer(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            current = self.store.get("", "pods", meta.get("namespace"), meta["name"])
        except ApiError:
            return
        fins = (current["metadata"].get("finalizers") or [])
        if TRACKING_FINALIZER not in fins:
            return
        rest = [f for f in fins if f != TRACKING_FINALIZER]
        try:
            self.store.patch("", "pods", meta.get("namespace"), meta["name"],
                             {"metadata": {"finalizers": rest or None,
                                           "resourceVersion": current["metadata"]["resourceVersion"]}}, MERGE)
        except ApiError as exc:
            if exc.code == 409:
                self.queue.add(_key(pod))
            elif exc.code != 404:
                log.info("sandbox job controller: removing finalizer of %s failed: %s", _key(pod), exc.message)

    def _sync_orphan_pod(self, key: str) -> None:
        """A pod with the tracking finalizer whose controlling Job is gone (or that lost its controller)."""
        ns, _, name = key.partition("/")
        try:
            pod = self.store.get("", "pods", ns, name)
        except ApiError:
            return
        owner = controller_owner(pod)
        if owner is not None and owner.get("kind") == "Job":
            try:
                job = self.store.get("batch", "jobs", ns, owner.get("name", ""))
                if job["metadata"].get("uid") == owner.get("uid"):
                    return  # it has a live controller after all
            except ApiError:
                pass
        self._remove_finalizer(pod)

    def _release_orphans(self, ns: str, name: str) -> None:
        """The Job is gone: its pods must not keep the tracking finalizer forever."""
        for uid, pods in list(self._pods.items()):
            for pod in list(pods.values()):
                owner = controller_owner(pod) or {}
                if pod["metadata"].get("namespace") == ns and owner.get("name") == name \
                        and TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                    log.debug("releasing orphan pod %s of deleted Job %s/%s (uid %s)", _key(pod), ns, name, uid)
                    self._remove_finalizer(pod)


class SimulatedCluster:
    """Nodes + default scheduler + Job controller + kubelet on the running asyncio loop, talking to ``store``."""

    def __init__(self, store: Store, nodes: list[dict[str, Any]], *, kubelet: KubeletConfig | None = None,
                 scheduler: bool = True, job_controller: bool = True, events: bool = True,
                 scoring: str = LEAST_ALLOCATED, job_workers: int = 5, failure_backoff_seconds: float = 0.0,
                 job_sync_batch_seconds: float = 0.05) -> None:
        if job_workers < 1:
            raise ValueError(f"SimulatedCluster job_workers must be >= 1, got {job_workers}")
        self.store = store
        self.nodes = [dict(n) for n in nodes]
        self.kubelet_config = kubelet or KubeletConfig()
        self.events = _EventRecorder(store, events)
        self.scheduler_state = SchedulerState(scoring)
        self._scheduler = _SchedulerLoop(store, self.scheduler_state, self.events) if scheduler else None
        self._jobs = _JobControllerLoop(store, self.events, workers=job_workers,
                                        failure_backoff_seconds=failure_backoff_seconds,
                                        batch_seconds=job_sync_batch_seconds) if job_controller else None
        self._kubelet_queue: WorkQueue | None = None
        self.kubelet: Kubelet | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._unsubscribe: Callable[[], None] | None = None
        self._started = False

    @property
    def scheduling_attempts(self) -> int:
        return self._scheduler.attempts if self._scheduler is not None else 0

    async def start(self) -> None:
        if self._started:
            raise RuntimeError("SimulatedCluster already started")
        self._started = True
        self._kubelet_queue = WorkQueue()
        queue = self._kubelet_queue
        if self._jobs is not None:
            self._jobs.loop = asyncio.get_running_loop()
        names = [n["metadata"]["name"] for n in self.nodes]
        self.kubelet = Kubelet(self.store, names, self.kubelet_config, queue.add, self._kubelet_event)
        self._register_nodes()
        self._unsubscribe = self.store.subscribe(self._on_event)
        # prime the caches from what the store already holds (e.g. a loaded state file)
        for node in self.store.list("", "nodes")["items"]:
            self._on_node("ADDED", node)
        for pod in self.store.list("", "pods")["items"]:
            self._on_pod("ADDED", pod)
        if self._jobs is not None:
            for job in self.store.list("batch", "jobs")["items"]:
                self._jobs.on_job("ADDED", job)
        if self._scheduler is not None:
            self._tasks.append(asyncio.create_task(self._scheduler.run(), name="sandbox-scheduler"))
        if self._jobs is not None:
            for i in range(self._jobs.workers):
                self._tasks.append(asyncio.create_task(self._jobs.worker(), name=f"sandbox-job-controller-{i}"))
        self._tasks.append(asyncio.create_task(self._kubelet_worker(), name="sandbox-kubelet"))
        log.info("simulated cluster started: %d nodes, scheduler=%s, job controller=%s", len(names),
                 self._scheduler is not None, self._jobs is not None)

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._jobs is not None:
            self._jobs.stop()
        if self._kubelet_queue is not None:
            self._kubelet_queue.shutdown()
        if self.kubelet is not None:
            self.kubelet.stop()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()

    async def __aenter__(self) -> SimulatedCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ internals
    def _register_nodes(self) -> None:
        now = _now()
        for node in self.nodes:
            obj = {**node, "metadata": dict(node["metadata"]), "status": dict(node.get("status") or {})}
            ann = dict(obj["metadata"].get("annotations") or {})
            ann.setdefault(SIMULATED_ANNOTATION, "true")
            obj["metadata"]["annotations"] = ann
            obj["status"]["conditions"] = [dict(c, lastHeartbeatTime=now, lastTransitionTime=now)
                                           for c in obj["status"].get("conditions") or []]
            name = obj["metadata"]["name"]
            try:
                created = self.store.create("", "nodes", obj)
            except ApiError as exc:
                if exc.code != 409:
                    raise
                log.info("node %s already exists (loaded state); keeping it", name)
                continue
            if created.get("status") != obj["status"]:
                # the kubelet posts its node status through the status subresource
                self.store.patch("", "nodes", None, name, {"status": obj["status"]}, MERGE, subresource="status")

    def _on_event(self, etype: str, info: ResourceInfo, obj: dict[str, Any]) -> None:
        key = (info.group, info.plural)
        if key == ("", "pods"):
            self._on_pod(etype, obj)
        elif key == ("batch", "jobs"):
            if self._jobs is not None:
                self._jobs.on_job(etype, obj)
        elif key == ("", "nodes"):
            self._on_node(etype, obj)

    def _on_pod(self, etype: str, pod: dict[str, Any]) -> None:
        if self._scheduler is not None:
            self._scheduler.on_pod(etype, pod)
        else:
            # without the scheduler, still keep the accounting current
            if etype == "DELETED":
                self.scheduler_state.remove_pod(pod)
            else:
                self.scheduler_state.update_pod(pod)
        if self._jobs is not None:
            self._jobs.on_pod(etype, pod)
        kubelet = self.kubelet
        if kubelet is not None and self._kubelet_queue is not None:
            if etype == "DELETED":
                kubelet.forget(_key(pod))
            elif kubelet.wants(pod):
                self._kubelet_queue.add(_key(pod))

    def _on_node(self, etype: str, node: dict[str, Any]) -> None:
        if self._scheduler is not None:
            self._scheduler.on_node(etype, node)
        elif etype == "DELETED":
            self.scheduler_state.remove_node(node["metadata"]["name"])
        else:
            self.scheduler_state.upsert_node(node)
        if etype != "DELETED" and self.kubelet is not None and \
                ((node.get("metadata") or {}).get("annotations") or {}).get(SIMULATED_ANNOTATION) == "true":
            ip = next((a.get("address") for a in (node.get("status") or {}).get("addresses") or []
                       if a.get("type") == "InternalIP"), None)
            self.kubelet.add_node(node["metadata"]["name"], ip)

    def _kubelet_event(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.emit("kubelet", pod, type_, reason, message)

    async def _kubelet_worker(self) -> None:
        queue = self._kubelet_queue
        kubelet = self.kubelet
        assert queue is not None and kubelet is not None
        while True:
            key = await queue.get()
            if key is None:
                return
            try:
                kubelet.sync(key)
            except Exception:
                log.exception("sandbox kubelet failed on pod %s", key)
            finally:
                queue.done(key)
