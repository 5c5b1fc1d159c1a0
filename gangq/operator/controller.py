"""The scheduling loop: cluster events in, engine decisions out as API writes.

One asyncio task owns the :class:`~gangq.core.Engine` (it is not thread-safe). kopf's event
handlers only put ``(resource, event type, object)`` on :attr:`Controller.inbox`; the loop drains
the inbox in batches, applies the events to the engine and to its caches, calls
``engine.schedule(now)`` with the wall clock, starts the writes the decisions need, and sleeps
until the next event, the engine's next timer (``next_wakeup``) or the next due status write.

Writes run as tasks (ordered per JobSet, bounded in flight, rate limited by the client). Their
outcome comes back through the inbox, so only the loop ever touches the engine. docs/operator.md
describes the flow and the write budget.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import gc
import heapq
import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from gangq.api import queues
from gangq.api.quantity import QuantityError, parse_quantity
from gangq.api.workload import (
    admission_patch,
    jobset_to_workload,
    queue_name,
    restore_patch,
)
from gangq.core import Engine, NodeSpec, PodInfo, Taint, compiled
from gangq.core.decisions import Admission, Decision, Eviction, PendingUpdate
from gangq.core.errors import SpecError
from gangq.core.units import format_amount
from gangq.operator.config import OperatorConfig
from gangq.operator.kube import JSON_PATCH, ApiError, KubeClient, resource_path

log = logging.getLogger(__name__)

GROUP: Final = "gangq.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
JOBSET_GROUP: Final = "jobset.x-k8s.io"
JOBSET_VERSION: Final = "v1alpha2"
ADMISSION_ANNOTATION: Final = "gangq.io/admission"
"""On an admitted JobSet (written with the unsuspend): the ClusterQueue and flavors, JSON. A restart
recognises admitted JobSets by it together with ``spec.suspend: false``."""
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
RJOB_NAME_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
WORKLOAD_JOBSET_LABEL: Final = "gangq.io/jobset-name"
GPU: Final = "nvidia.com/gpu"

# (group, version, plural) of everything the controller watches, in the order a restart lists them.
WATCHED: Final = (
    (GROUP, VERSION, "resourceflavors"),
    (GROUP, VERSION, "cohorts"),
    (GROUP, VERSION, "clusterqueues"),
    (GROUP, VERSION, "localqueues"),
    (GROUP, VERSION, "workloadpriorityclasses"),
    ("scheduling.k8s.io", "v1", "priorityclasses"),
    ("", "v1", "namespaces"),
    ("", "v1", "nodes"),
    ("", "v1", "pods"),
    (JOBSET_GROUP, JOBSET_VERSION, "jobsets"),
)
NAMESPACED: Final = frozenset({"localqueues", "pods", "jobsets"})

BATCH_WINDOW_SECONDS: Final = 0.005
# Writes in flight: JobSet admission / eviction patches, and everything else (status, Events).
CRITICAL_IN_FLIGHT: Final = 32
BACKGROUND_IN_FLIGHT: Final = 16
CRITICAL_QUIET: Final = 4
BACKGROUND_MAX_WAIT_SECONDS: Final = 2.0

# Pending reasons that are plain queueing (written lazily); anything else is written promptly.
ORDINARY_PENDING: Final = frozenset(
    {"Pending", "InsufficientQuota", "InsufficientNodes", "InsufficientMinResources", "WaitingForPreemption",
     "BlockedByHead", "BlockedByReservation"}
)


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def jobset_terminal(obj: Mapping[str, Any]) -> str | None:
    """``Completed`` / ``Failed`` when the JobSet has finished, else None."""
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Completed", "Failed"):
            return str(cond["type"])
    state = status.get("terminalState")
    return str(state) if state in ("Completed", "Failed") else None


def workload_name(jobset: str) -> str:
    name = f"jobset-{jobset}"
    if len(name) > 253:
        name = name[:240] + "-" + secrets.token_hex(4)
    return name


def quantity_text(resource: str, value: int) -> str:
    """A quantity string for the API (``500m``, ``8``, ``16Gi``)."""
    return format_amount(resource, value)


def node_spec(obj: Mapping[str, Any]) -> NodeSpec:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable: dict[str, int] = {}
    for res, value in (status.get("allocatable") or status.get("capacity") or {}).items():
        try:
            allocatable[res] = parse_quantity(value, res)
        except QuantityError:
            log.warning("Node %s: status.allocatable[%s]: %r is not a quantity", meta.get("name"), res, value)
    taints = []
    for t in spec.get("taints") or []:
        with contextlib.suppress(ValueError, KeyError):
            taints.append(Taint(str(t["key"]), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule")))
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    ) or not status.get("conditions")
    return NodeSpec(
        str(meta.get("name")),
        allocatable,
        dict(meta.get("labels") or {}),
        taints,
        unschedulable=bool(spec.get("unschedulable")) or not ready,
    )


_SPEC_ONLY: Final = frozenset(
    {"resourceflavors", "cohorts", "clusterqueues", "localqueues", "workloadpriorityclasses", "priorityclasses",
     "namespaces", "nodes"}
)


def _relevant(plural: str, obj: Mapping[str, Any]) -> Any:
    """The part of a configuration object the engine depends on."""
    meta = obj.get("metadata") or {}
    if plural in ("workloadpriorityclasses", "priorityclasses"):
        return obj.get("value")
    if plural == "namespaces":
        return meta.get("labels")
    if plural == "nodes":
        status = obj.get("status") or {}
        ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
        return (meta.get("labels"), obj.get("spec"), status.get("allocatable"), status.get("capacity"), ready)
    return obj.get("spec")


class Stat:
    """Count, mean, maximum and a coarse histogram of a latency in seconds (``count=True``: of a count),
    logged when the controller stops."""

    __slots__ = ("buckets", "count", "n", "peak", "total")

    LATENCY_BOUNDS: Final = (0.01, 0.05, 0.1, 0.5)
    COUNT_BOUNDS: Final = (2, 10, 50, 200)

    def __init__(self, *, count: bool = False) -> None:
        self.count = count
        self.n = 0
        self.total = 0.0
        self.peak = 0.0
        self.buckets = [0] * 5

    def add(self, value: float) -> None:
        self.n += 1
        self.total += value
        if value > self.peak:
            self.peak = value
        self.buckets[bisect.bisect_right(self.COUNT_BOUNDS if self.count else self.LATENCY_BOUNDS, value)] += 1

    def summary(self) -> dict[str, Any]:
        mean = self.total / self.n if self.n else 0.0
        if self.count:
            return {"n": self.n, "mean": round(mean, 2), "max": self.peak, "buckets_2_10_50_200": self.buckets}
        return {"n": self.n, "mean_ms": round(1000 * mean, 2), "max_ms": round(1000 * self.peak, 1),
                "buckets_10_50_100_500ms": self.buckets}


class Entry:
    """What the controller knows about one queued JobSet and its Workload object."""

    __slots__ = (
        "admission",
        "cluster_queue",
        "conditions",
        "created",
        "due",
        "error",
        "evict_reason",
        "first_seen",
        "key",
        "last_pending_write",
        "last_written",
        "lq",
        "message",
        "name",
        "namespace",
        "obj",
        "pod_sets",
        "reason",
        "requeue",
        "running",
        "rv",
        "sig",
        "spec",
        "state",
        "status_queued",
        "uid",
        "wl_name",
        "writing",
    )

    def __init__(self, key: str, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        self.key = key
        self.namespace = str(meta.get("namespace") or "default")
        self.name = str(meta.get("name"))
        self.uid = str(meta.get("uid") or "")
        self.obj = obj
        self.rv = _rv(obj)
        self.sig: tuple[Any, ...] = ()
        self.lq = ""
        self.state = "Pending"  # Pending | Inadmissible | Admitted | Evicting | Finished
        self.spec: Any = None  # WorkloadSpec
        self.error: str | None = None
        self.admission: Admission | None = None
        self.cluster_queue: str | None = None
        self.reason = "Pending"
        self.message = "waiting for the first scheduling cycle"
        self.evict_reason: str | None = None
        self.requeue: dict[str, Any] | None = None
        self.conditions: dict[str, dict[str, Any]] = {}
        self.wl_name = workload_name(self.name)
        self.created = False
        self.due: float | None = None  # when the Workload status is next written (None: clean)
        self.first_seen = now
        self.last_written: dict[str, Any] | None = None
        self.last_pending_write = 0.0
        self.running = 0
        self.pod_sets: list[dict[str, Any]] = []
        self.writing = False
        self.status_queued = False  # a status writer is spawned and has not started yet


class Controller:
    """Owns the engine; see the module docstring. ``OperatorState`` for observability."""

    def __init__(self, client: KubeClient, config: OperatorConfig) -> None:
        self.client = client
        self.config = config
        self.engine = Engine(config.engine_config())
        self.lock = asyncio.Lock()  # held while the loop mutates the engine (readers on the same loop)
        self.inbox: asyncio.Queue[tuple[str, str, dict[str, Any], float]] = asyncio.Queue()
        self.entries: dict[str, Entry] = {}
        self.rvs: dict[tuple[str, str], int] = {}
        self._applied: dict[tuple[str, str], Any] = {}  # what the engine last got per config object
        self.finished: dict[str, None] = {}  # uids of finished JobSets already forgotten (bounded, FIFO)
        self.workload_priority_classes: dict[str, int] = {}
        self.priority_classes: dict[str, int] = {}
        self.pod_owner: dict[str, str | None] = {}  # pod key -> gang key (bound pods the engine knows)
        self.gang_pods: dict[str, set[str]] = {}  # gang key -> live pod keys (bound or not)
        self.queue_errors: dict[str, str] = {}  # "cq:<name>" / "lq:<ns/name>" -> spec error
        self.queue_status_written: dict[str, Any] = {}
        self.dirty: list[tuple[float, int, str]] = []  # heap of (due, seq, key): Workload writes
        self._dirty_seq = 0
        self.stopping = asyncio.Event()
        self.recovered = asyncio.Event()
        # Two lanes, so a burst of status writes never delays an admission or an eviction.
        self._sem_critical = asyncio.Semaphore(CRITICAL_IN_FLIGHT)
        self._sem_background = asyncio.Semaphore(BACKGROUND_IN_FLIGHT)
        # Background writes (status, Events) go out only while at most CRITICAL_QUIET admission or
        # eviction patches wait or are in flight (or after BACKGROUND_MAX_WAIT_SECONDS): on a busy
        # API server they would queue ahead of the writes that start gangs.
        self._critical_busy = 0
        self._critical_clear = asyncio.Event()
        self._critical_clear.set()
        self._chains: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._last_queue_status = 0.0
        self.wakeup = asyncio.Event()
        self.cycles = 0
        self.admissions = 0
        self.evictions = 0
        self.gc_seconds = [0.0, 0.0, 0.0]  # time in the cyclic garbage collector, per generation
        self.burst = Stat(count=True)  # admissions per cycle, of the cycles that admitted any
        self.status_writes: Counter[str] = Counter()  # Workload status writes by the state written
        # where the time goes: event queued -> applied by the loop; loop cycle (apply + schedule +
        # handle); admission decision -> JobSet patch answered
        self.latency: dict[str, Stat] = {"inbox_wait": Stat(), "cycle": Stat(), "admission_queued": Stat(),
                                       "admission_write": Stat(), "loop_lag": Stat()}
        self.telemetry: Any = None  # gangq.observability.telemetry.Telemetry, when attached

    # ------------------------------------------------------------------------------------------
    # Inbox (called by kopf handlers, on the same event loop)
    # ------------------------------------------------------------------------------------------

    def enqueue(self, plural: str, event_type: str | None, obj: dict[str, Any]) -> None:
        self.inbox.put_nowait((plural, event_type or "ADDED", obj, time.monotonic()))

    # ------------------------------------------------------------------------------------------
    # Restart: rebuild from the API
    # ------------------------------------------------------------------------------------------

    async def recover(self) -> None:
        """List everything, put admitted JobSets back into the engine first (nothing is admitted
        twice; one that no longer fits is suspended), then queue the rest."""
        listed: dict[str, list[dict[str, Any]]] = {}
        for group, version, plural in WATCHED:
            try:
                result = await self.client.list(resource_path(group, version, plural))
                listed[plural] = result.get("items") or []
            except ApiError as err:
                log.warning("recovery: cannot list %s (%s); continuing without them", plural, err)
                listed[plural] = []
        now = time.time()
        for plural in ("resourceflavors", "cohorts", "clusterqueues", "localqueues", "workloadpriorityclasses",
                       "priorityclasses", "namespaces", "nodes"):
            for obj in listed[plural]:
                self._apply(plural, "ADDED", obj, now)
        existing_workloads: dict[str, dict[str, Any]] = {}
        try:
            wls = await self.client.list(resource_path(GROUP, VERSION, "workloads"))
            existing_workloads = {_key(w): w for w in wls.get("items") or []}
        except ApiError as err:
            log.warning("recovery: cannot list workloads (%s)", err)
        jobsets = [j for j in listed["jobsets"] if self._watched_namespace(j)]
        admitted, rest = [], []
        for obj in jobsets:
            ann = (obj.get("metadata") or {}).get("annotations") or {}
            if (
                queue_name(obj) is not None
                and ADMISSION_ANNOTATION in ann
                and not (obj.get("spec") or {}).get("suspend")
                and jobset_terminal(obj) is None
            ):
                admitted.append(obj)
            else:
                rest.append(obj)
        recovering: set[str] = set()
        restored: set[str] = set()
        for obj in admitted:
            key = _key(obj)
            entry = self._new_entry(key, obj, now)
            self._adopt_workload(entry, existing_workloads)
            if self._submit(entry, now):
                if self._restore(entry, now):
                    restored.add(key)
                else:
                    recovering.add(key)  # not restorable as recorded: admit again if it fits, else suspend
        pods = listed["pods"]
        gang_pods = [p for p in pods if self._gang_of(p) in recovering]
        for pod in pods:
            if self._gang_of(pod) not in recovering:
                self._apply("pods", "ADDED", pod, now)
        decisions = self._schedule(now)
        readmitted: set[str] = set(restored)
        others: list[Decision] = []
        for d in decisions:
            if isinstance(d, Admission) and d.workload in recovering:
                entry = self.entries[d.workload]
                self._mark_admitted(entry, d, now)
                readmitted.add(d.workload)
                recorded = self._recorded_admission(entry.obj)
                if recorded is not None and recorded.get("clusterQueue") != d.cluster_queue:
                    log.warning("recovery: JobSet %s was admitted to %s, now charged to %s",
                                entry.key, recorded.get("clusterQueue"), d.cluster_queue)
            else:
                others.append(d)
        for key in recovering - readmitted:
            entry = self.entries[key]
            log.warning("recovery: admitted JobSet %s no longer fits its queue: suspending it", key)
            self._write_suspend(entry, restore=True)
        for pod in gang_pods:
            self._apply("pods", "ADDED", pod, now)
        self._handle(others, now)
        for obj in sorted(rest, key=lambda o: str((o.get("metadata") or {}).get("creationTimestamp") or "")):
            self._apply("jobsets", "ADDED", obj, now)
            entry = self.entries.get(_key(obj))
            if entry is not None:
                self._adopt_workload(entry, existing_workloads)
        self._list_rv = max((_rv(o) for o in jobsets), default=0)
        log.info(
            "recovered: %d JobSets (%d admitted), %d nodes, %d pods, %d ClusterQueues (engine: %s)",
            len(self.entries), len(readmitted), len(listed["nodes"]), len(pods), len(self.engine.cluster_queues),
            "mypyc-compiled" if compiled() else "pure Python",
        )
        self.recovered.set()

    def _adopt_workload(self, entry: Entry, existing: Mapping[str, dict[str, Any]]) -> None:
        """Carry over the conditions of the Workload written before a restart (no rewrite when
        nothing changed)."""
        wl = existing.get(f"{entry.namespace}/{entry.wl_name}")
        if wl is None:
            return
        entry.created = True
        status = wl.get("status") or {}
        for cond in status.get("conditions") or []:
            if isinstance(cond, dict) and cond.get("type"):
                entry.conditions.setdefault(str(cond["type"]), dict(cond))
        entry.requeue = entry.requeue or status.get("requeueState")
        entry.last_written = {k: v for k, v in status.items() if k not in ("position", "pendingInQueue")}

    async def resync_jobsets(self) -> None:
        """After the watches started: forget JobSets deleted between the recovery list and kopf's
        own initial list (no DELETED event reaches us for them)."""
        try:
            result = await self.client.list(resource_path(JOBSET_GROUP, JOBSET_VERSION, "jobsets"))
        except ApiError as err:
            log.warning("resync: cannot list jobsets (%s)", err)
            return
        present = {_key(o) for o in result.get("items") or []}
        list_rv = _rv(result)
        for key, entry in list(self.entries.items()):
            if key not in present and (entry.rv <= list_rv or not list_rv):
                self.enqueue("jobsets", "DELETED", entry.obj)

    # ------------------------------------------------------------------------------------------
    # The loop
    # ------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Drain events, schedule, write; until :attr:`stopping` is set."""
        if not self.recovered.is_set():
            await self.recover()
        probe = asyncio.ensure_future(self._lag_probe())
        gc_started: list[float] = []

        def gc_timer(phase: str, info: dict[str, int]) -> None:  # how long the cyclic GC stops the loop
            if phase == "start":
                gc_started[:] = [time.perf_counter()]
            elif gc_started:
                self.gc_seconds[info.get("generation", 0)] += time.perf_counter() - gc_started[0]

        gc.callbacks.append(gc_timer)
        try:
            await self._loop()
        finally:
            probe.cancel()
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(gc_timer)

    async def _lag_probe(self) -> None:
        """How late the event loop runs a 50 ms timer: the time every callback waits behind others."""
        stat = self.latency["loop_lag"]
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.05)
            stat.add(max(0.0, time.monotonic() - t - 0.05))

    async def _loop(self) -> None:
        while not self.stopping.is_set():
            now = time.time()
            timeout = self._sleep_for(now)
            if self.inbox.empty():
                getter = asyncio.ensure_future(self.inbox.get())
                stopper = asyncio.ensure_future(self.stopping.wait())
                waker = asyncio.ensure_future(self.wakeup.wait())
                try:
                    done, _ = await asyncio.wait({getter, stopper, waker}, timeout=timeout,
                                                 return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for fut in (getter, stopper, waker):
                        if not fut.done():
                            fut.cancel()
                if getter.cancelled():
                    done.discard(getter)
                self.wakeup.clear()
                batch = [getter.result()] if getter in done else []
                if batch and BATCH_WINDOW_SECONDS:
                    # Events come in bursts (a write's watch event, kopf's per-object workers): a few
                    # milliseconds more collects them into one scheduling cycle.
                    await asyncio.sleep(BATCH_WINDOW_SECONDS)
            else:
                batch = []
            while not self.inbox.empty() and len(batch) < 5000:
                batch.append(self.inbox.get_nowait())
            now = time.time()
            applied = time.monotonic()
            inbox_wait = self.latency["inbox_wait"]
            async with self.lock:
                for plural, event_type, obj, queued in batch:
                    inbox_wait.add(applied - queued)
                    try:
                        self._apply(plural, event_type, obj, now)
                    except Exception:  # bad input never stops the loop
                        log.exception("cannot apply %s %s %s", event_type, plural, _key(obj))
                try:
                    decisions = self._schedule(now)
                except Exception:
                    log.exception("scheduling cycle failed")
                    decisions = []
                self.cycles += 1
                self._handle(decisions, now)
                admitted = sum(1 for d in decisions if isinstance(d, Admission))
                if admitted:
                    self.burst.add(admitted)
            self.latency["cycle"].add(time.monotonic() - applied)
            self._flush_workloads(now)
            if now - self._last_queue_status >= self.config.status.queue_interval_seconds:
                self._last_queue_status = now
                self._flush_queue_status()

    def _schedule(self, now: float) -> list[Decision]:
        if self.telemetry is not None:
            decisions: list[Decision] = self.telemetry.schedule(now)
            return decisions
        return self.engine.schedule(now)

    def _finish_in_engine(self, key: str, now: float) -> None:
        if self.telemetry is not None:
            self.telemetry.finish(key, now)
        else:
            self.engine.finish(key, now)

    def _sleep_for(self, now: float) -> float:
        candidates = [self.config.status.queue_interval_seconds]
        wake = self.engine.next_wakeup()
        if wake is not None:
            candidates.append(wake - now)
        if self.dirty:
            candidates.append(self.dirty[0][0] - now)
        return max(0.01, min(candidates))

    async def stop(self) -> None:
        """Stop the loop and wait for the writes in flight."""
        log.info("controller stopping: %d cycles, %d admissions, %d evictions, writes %s, "
                 "Workload status writes by state %s, latency %s",
                 self.cycles, self.admissions, self.evictions, dict(self.client.writes), dict(self.status_writes),
                 json.dumps({**{k: v.summary() for k, v in self.latency.items()},
                             "admissions_per_cycle": self.burst.summary(),
                             "gc_seconds_by_generation": [round(x, 2) for x in self.gc_seconds]}))
        self.stopping.set()
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=10)

    # ------------------------------------------------------------------------------------------
    # Events -> engine
    # ------------------------------------------------------------------------------------------

    def _watched_namespace(self, obj: Mapping[str, Any]) -> bool:
        namespaces = self.config.namespaces
        return not namespaces or (obj.get("metadata") or {}).get("namespace") in namespaces

    def _apply(self, plural: str, event_type: str, obj: dict[str, Any], now: float) -> None:
        if plural.startswith("_"):
            self._internal(plural, obj, now)
            return
        if plural in NAMESPACED and not self._watched_namespace(obj):
            return  # `namespaces` is set and this one is not in it (the restart lists are cluster-wide)
        key = _key(obj)
        rv = _rv(obj)
        seen = self.rvs.get((plural, key), 0)
        if event_type != "DELETED" and rv and rv < seen:
            return  # older than what we already applied (e.g. kopf's initial list after ours)
        if event_type != "DELETED" and rv and rv == seen and plural != "jobsets":
            return
        if event_type == "DELETED":
            self.rvs.pop((plural, key), None)
        elif rv:
            self.rvs[(plural, key)] = rv
        if plural in _SPEC_ONLY:
            # Status writes (ours included) come back as MODIFIED events: only a change of what the
            # engine reads may reach it (an upsert re-routes every pending workload).
            relevant = _relevant(plural, obj)
            if event_type == "DELETED":
                self._applied.pop((plural, key), None)
            elif self._applied.get((plural, key)) == relevant:
                return
            else:
                self._applied[(plural, key)] = relevant
        handler = getattr(self, f"_on_{plural}")
        handler(event_type, obj, key, now)

    def _spec_problem(self, kind_key: str, err: SpecError | None) -> None:
        if err is None:
            self.queue_errors.pop(kind_key, None)
        else:
            log.warning("%s", err)
            self.queue_errors[kind_key] = str(err)

    def _on_resourceflavors(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        if event_type == "DELETED":
            self.engine.delete_flavor(key)
            return
        try:
            self.engine.upsert_flavor(queues.resource_flavor(key, obj.get("spec")))
        except SpecError as err:
            log.warning("ignoring invalid %s", err)

    def _on_cohorts(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        if event_type == "DELETED":
            self.engine.delete_cohort(key)
            return
        try:
            self.engine.upsert_cohort(queues.cohort(key, obj.get("spec")))
        except SpecError as err:
            log.warning("ignoring invalid %s", err)

    def _on_clusterqueues(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        if event_type == "DELETED":
            self.engine.delete_cluster_queue(key)
            self.queue_errors.pop(f"cq:{key}", None)
            self.queue_status_written.pop(f"cq:{key}", None)
            return
        try:
            spec = queues.cluster_queue(key, obj.get("spec"))
            self.engine.upsert_cluster_queue(spec)
            self._spec_problem(f"cq:{key}", None)
        except SpecError as err:
            self._spec_problem(f"cq:{key}", err)
            self.engine.delete_cluster_queue(key)
        self.queue_status_written.setdefault(f"cq:{key}", None)

    def _on_localqueues(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        ns, _, name = key.partition("/")
        if event_type == "DELETED":
            self.engine.delete_local_queue(ns, name)
            self.queue_errors.pop(f"lq:{key}", None)
            self.queue_status_written.pop(f"lq:{key}", None)
            return
        try:
            self.engine.upsert_local_queue(queues.local_queue(ns, name, obj.get("spec")))
            self._spec_problem(f"lq:{key}", None)
        except SpecError as err:
            self._spec_problem(f"lq:{key}", err)
            self.engine.delete_local_queue(ns, name)
        self.queue_status_written.setdefault(f"lq:{key}", None)

    def _on_workloadpriorityclasses(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        if event_type == "DELETED":
            self.workload_priority_classes.pop(key, None)
        else:
            value = obj.get("value")
            if isinstance(value, int) and not isinstance(value, bool):
                self.workload_priority_classes[key] = value
        self._retry_invalid(now)

    def _on_priorityclasses(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        if event_type == "DELETED":
            self.priority_classes.pop(key, None)
        else:
            value = obj.get("value")
            if isinstance(value, int) and not isinstance(value, bool):
                self.priority_classes[key] = value
        self._retry_invalid(now)

    def _retry_invalid(self, now: float) -> None:
        if not self.recovered.is_set():
            return
        for entry in list(self.entries.values()):
            if entry.state == "Inadmissible":
                self._submit(entry, now)

    def _on_namespaces(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        if event_type == "DELETED":
            self.engine.delete_namespace(key)
        else:
            self.engine.upsert_namespace(key, dict((obj.get("metadata") or {}).get("labels") or {}))

    def _on_nodes(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        if event_type == "DELETED":
            self.engine.delete_node(key)
        else:
            self.engine.upsert_node(node_spec(obj))

    def _gang_of(self, pod: Mapping[str, Any]) -> str | None:
        meta = pod.get("metadata") or {}
        name = (meta.get("labels") or {}).get(JOBSET_NAME_LABEL)
        return f"{meta.get('namespace')}/{name}" if name else None

    def _on_pods(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        gang = self._gang_of(obj)
        phase = (obj.get("status") or {}).get("phase")
        node = (obj.get("spec") or {}).get("nodeName")
        gone = event_type == "DELETED" or phase in ("Succeeded", "Failed")
        if gang is not None:  # the gang's live pods (an evicted gang is stopped when none is left)
            pods = self.gang_pods.setdefault(gang, set())
            if gone:
                pods.discard(key)
            else:
                pods.add(key)
            if not pods:
                del self.gang_pods[gang]
        if gone or not node:
            if key in self.pod_owner:
                del self.pod_owner[key]
                self.engine.delete_pod(key)
        else:
            try:
                requests = self._pod_requests(obj)
            except SpecError as err:
                log.warning("pod %s: %s", key, err)
                requests = {}
            labels = (obj.get("metadata") or {}).get("labels") or {}
            running = phase == "Running"
            self.engine.update_pod(
                PodInfo(key, node, requests, workload=gang, pod_set=labels.get(RJOB_NAME_LABEL), running=running)
            )
            self.pod_owner[key] = gang
        if gang is not None and gang in self.entries:
            entry = self.entries[gang]
            self._update_running(entry, now)
            if entry.state == "Evicting":
                self._maybe_eviction_done(entry, now)

    @staticmethod
    def _pod_requests(obj: Mapping[str, Any]) -> dict[str, int]:
        from gangq.api.pods import pod_requests

        return pod_requests(obj.get("spec") or {})

    def _update_running(self, entry: Entry, now: float) -> None:
        if entry.state != "Admitted" or entry.spec is None:
            return
        running = 0
        for pod_key in self.gang_pods.get(entry.key, ()):
            pod = self.engine.pods.get(pod_key)
            if pod is not None and pod.running:
                running += 1
        entry.running = running
        need = entry.spec.min_member or entry.spec.total_pods
        ready = running >= need
        current = entry.conditions.get("PodsReady", {}).get("status")
        if ready and current != "True":
            self._condition(entry, "PodsReady", True, "PodsReady", f"{running} of {need} pods running", now)
            if self.telemetry is not None:
                with contextlib.suppress(Exception):
                    self.telemetry.metrics.observe_pods_ready(entry.key, now)
            self._mark(entry, now, urgent=True)

    def _restore(self, entry: Entry, now: float) -> bool:
        """Put an admitted JobSet back into the engine with the ClusterQueue and flavors recorded
        when it was admitted (its pods run with those flavors' labels)."""
        recorded = self._recorded_admission(entry.obj)
        spec = entry.spec
        if recorded is None or spec is None or not isinstance(recorded.get("clusterQueue"), str):
            return False
        by_name = {
            a.get("name"): a.get("flavors") or {}
            for a in recorded.get("podSetAssignments") or []
            if isinstance(a, dict)
        }
        flavors = [dict(by_name.get(ps.name) or {}) for ps in spec.pod_sets]
        admission, why = self.engine.restore(spec, recorded["clusterQueue"], flavors, now)
        if admission is None:
            log.warning("recovery: JobSet %s cannot keep its recorded admission: %s", entry.key, why)
            return False
        self._mark_admitted(entry, admission, now)
        return True

    def _recorded_admission(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        text = ((obj.get("metadata") or {}).get("annotations") or {}).get(ADMISSION_ANNOTATION)
        if not text:
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def _new_entry(self, key: str, obj: dict[str, Any], now: float) -> Entry:
        entry = Entry(key, obj, now)
        self.entries[key] = entry
        return entry

    def _submit(self, entry: Entry, now: float) -> bool:
        """(Re)build the gang from the JobSet and queue it; a malformed JobSet is Inadmissible."""
        obj = entry.obj
        entry.lq = f"{entry.namespace}/{queue_name(obj)}"
        entry.sig = self._sig(obj)
        try:
            spec = jobset_to_workload(
                obj,
                priority_classes=self.priority_classes,
                workload_priority_classes=self.workload_priority_classes,
            )
        except SpecError as err:
            if entry.spec is not None and entry.key in self.engine.workloads:
                self._finish_in_engine(entry.key, now)
            entry.spec = None
            entry.state = "Inadmissible"
            entry.error = str(err)
            entry.reason, entry.message = "InvalidSpec", str(err)
            self._condition(entry, "QuotaReserved", False, "InvalidSpec", str(err), now)
            self._mark(entry, now, urgent=True)
            return False
        entry.spec = spec
        entry.error = None
        entry.pod_sets = [
            {"name": ps.name, "count": ps.count,
             "requests": {r: quantity_text(r, v) for r, v in ps.requests.items()}}
            for ps in spec.pod_sets
        ]
        if entry.state == "Inadmissible":
            entry.state = "Pending"
            entry.reason, entry.message = "Pending", "queued"
        self.engine.submit(spec, now)
        if entry.state == "Pending":
            self._mark(entry, now, urgent=False)
        return True

    @staticmethod
    def _sig(obj: Mapping[str, Any]) -> tuple[Any, ...]:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        ann = meta.get("annotations") or {}
        return (
            meta.get("generation"),
            tuple(sorted((k, v) for k, v in labels.items() if k.startswith(("gangq.io/", "kueue.x-k8s.io/")))),
            tuple(sorted(
                (k, v) for k, v in ann.items() if k.startswith("gangq.io/min") or k == "gangq.io/runtime-limit"
            )),
        )

    def _on_jobsets(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        entry = self.entries.get(key)
        if entry is not None and event_type != "DELETED":
            uid = (obj.get("metadata") or {}).get("uid")
            if uid and entry.uid and uid != entry.uid:  # deleted and recreated under the same name
                self._forget(entry, now)
                entry = None
        if event_type == "DELETED":
            if entry is not None and (not entry.uid or (obj.get("metadata") or {}).get("uid") in (None, entry.uid)):
                self._forget(entry, now)
            return
        if not self._watched_namespace(obj):
            return
        if queue_name(obj) is None:
            if entry is not None:  # the queue label was removed: no longer ours
                self._forget(entry, now)
            return
        rv = _rv(obj)
        if entry is not None:
            if rv and rv < entry.rv:
                return
            entry.obj = obj
            entry.rv = rv
        terminal = jobset_terminal(obj)
        suspended = bool((obj.get("spec") or {}).get("suspend"))
        if entry is None:
            if terminal is not None or (obj.get("metadata") or {}).get("uid") in self.finished:
                # Finished before we saw it (or before a restart), or a late event of one we finished
                # and forgot: nothing to hold, nothing to write.
                return
            entry = self._new_entry(key, obj, now)
            if not suspended:
                # Arrived running without an admission: suspend it before any child exists.
                self._write_suspend(entry, restore=False)
            self._submit(entry, now)
            return
        if entry.state == "Finished":
            return
        if terminal is not None:
            self._finish(entry, terminal, now)
            return
        if entry.state in ("Pending", "Inadmissible"):
            if not suspended and self._recorded_admission(obj) is None and not entry.writing:
                self._write_suspend(entry, restore=False)
            if self._sig(obj) != entry.sig:
                self._submit(entry, now)
        elif entry.state == "Admitted":
            if suspended and not entry.writing:
                # Someone else suspended an admitted JobSet: give its quota back and requeue it.
                log.info("JobSet %s was suspended from outside: requeueing it", key)
                self._finish_in_engine(key, now)
                entry.state = "Pending"
                entry.admission = None
                self._condition(entry, "Admitted", False, "Suspended", "the JobSet was suspended", now)
                self._condition(entry, "QuotaReserved", False, "Pending", "requeued after an outside suspend", now)
                self._submit(entry, now)
                self._mark(entry, now, urgent=True)
        elif entry.state == "Evicting":
            self._maybe_eviction_done(entry, now)

    def _forget(self, entry: Entry, now: float) -> None:
        self._finish_in_engine(entry.key, now)
        self.entries.pop(entry.key, None)
        entry.due = None

    def _finish(self, entry: Entry, terminal: str, now: float) -> None:
        self._finish_in_engine(entry.key, now)
        self.finished[entry.uid] = None
        if len(self.finished) > 200_000:
            del self.finished[next(iter(self.finished))]
        entry.state = "Finished"
        reason = "Succeeded" if terminal == "Completed" else "Failed"
        self._condition(entry, "Finished", True, reason, f"JobSet {terminal}", now)
        self._mark(entry, now, urgent=True)

    def _maybe_eviction_done(self, entry: Entry, now: float) -> None:
        if entry.writing or not (entry.obj.get("spec") or {}).get("suspend"):
            return
        if self.gang_pods.get(entry.key):
            return
        self.engine.eviction_done(entry.key, now)
        entry.state = "Pending"
        entry.admission = None
        entry.cluster_queue = None
        self._condition(entry, "QuotaReserved", False, "Pending", "evicted; back in the queue", now)
        view = self.engine.workload(entry.key)
        if view is not None:
            entry.reason, entry.message = view.reason or "Pending", view.message
        self._mark(entry, now, urgent=True)

    def _internal(self, kind: str, obj: dict[str, Any], now: float) -> None:
        key = obj["key"]
        entry = self.entries.get(key)
        if entry is None:
            return
        entry.writing = False
        if kind == "_written":
            new = obj.get("object")
            if new and _rv(new) >= entry.rv:
                entry.obj = new
                entry.rv = _rv(new)
                self.rvs[("jobsets", key)] = entry.rv
            if entry.state == "Evicting":
                self._maybe_eviction_done(entry, now)
        elif kind == "_admission_failed" and entry.state == "Admitted":
            log.warning("JobSet %s: admission write failed (%s); requeueing", key, obj.get("error"))
            if self.telemetry is not None and entry.cluster_queue:
                with contextlib.suppress(Exception):
                    self.telemetry.metrics.admission_error(entry.cluster_queue, "PatchFailed")
            self._finish_in_engine(key, now)
            entry.state = "Pending"
            entry.admission = None
            self._submit(entry, now)

    # ------------------------------------------------------------------------------------------
    # Decisions -> writes
    # ------------------------------------------------------------------------------------------

    def _handle(self, decisions: list[Decision], now: float) -> None:
        for d in decisions:
            entry = self.entries.get(d.workload)
            if entry is None:
                continue
            if isinstance(d, Admission):
                self.admissions += 1
                self._mark_admitted(entry, d, now)
                self._write_admission(entry, d)
            elif isinstance(d, Eviction):
                self.evictions += 1
                self._evict(entry, d, now)
            elif isinstance(d, PendingUpdate):
                reason_changed = d.reason != entry.reason or d.cluster_queue != entry.cluster_queue
                entry.reason, entry.message = d.reason, d.message
                entry.cluster_queue = d.cluster_queue
                self._condition(entry, "QuotaReserved", False, d.reason, d.message, now)
                if reason_changed or not entry.created:
                    # A new message with the same reason (the free quota moved) rides along with
                    # the next write; a new reason is written, rate-limited.
                    self._mark(entry, now, urgent=d.reason not in ORDINARY_PENDING)

    def _mark_admitted(self, entry: Entry, d: Admission, now: float) -> None:
        entry.state = "Admitted"
        entry.admission = d
        entry.cluster_queue = d.cluster_queue
        entry.reason, entry.message = "Admitted", f"admitted by ClusterQueue {d.cluster_queue}"
        entry.evict_reason = None
        if entry.requeue:  # Kueue keeps the count of pods-ready evictions; the requeue time is past
            entry.requeue = {"count": entry.requeue.get("count", 0)}
        self._condition(entry, "QuotaReserved", True, "QuotaReserved",
                        f"Quota reserved in ClusterQueue {d.cluster_queue}", now)
        self._condition(entry, "Admitted", True, "Admitted",
                        f"The workload is admitted by ClusterQueue {d.cluster_queue}", now)
        self._condition(entry, "Evicted", False, "Admitted", "admitted", now, only_if_present=True)
        self._condition(entry, "Preempted", False, "Admitted", "admitted", now, only_if_present=True)
        self._condition(entry, "PodsReady", False, "WaitForStart",
                        "waiting for the gang's pods to run", now)
        self._mark(entry, now, urgent=True)

    def _admission_json(self, d: Admission) -> dict[str, Any]:
        return {
            "clusterQueue": d.cluster_queue,
            "borrowing": d.borrowing,
            "podSetAssignments": [
                {"name": ps.name, "count": ps.count, "flavors": dict(ps.flavors),
                 "resourceUsage": {r: quantity_text(r, v * ps.count) for r, v in ps.requests.items()}}
                for ps in d.pod_sets
            ],
        }

    def _evict(self, entry: Entry, d: Eviction, now: float) -> None:
        entry.state = "Evicting"
        entry.evict_reason = d.reason
        entry.reason, entry.message = d.reason, d.message
        reason = d.reason
        if reason == "InactiveClusterQueue":
            reason = "ClusterQueueStopped"
        self._condition(entry, "Evicted", True, reason, d.message, now)
        self._condition(entry, "Admitted", False, "NoReservation", "evicted", now)
        self._condition(entry, "PodsReady", False, "Evicted", "the gang is stopped", now, only_if_present=True)
        if d.reason == "Preempted":
            preemptor = self.entries.get(d.preemptor or "")
            lq = self.engine.local_queues.get(preemptor.lq) if preemptor is not None else None
            same = lq is not None and lq.cluster_queue == d.cluster_queue
            self._condition(entry, "Preempted", True, "InClusterQueue" if same else "InCohortReclamation",
                            d.message, now)
        if d.requeue_at is not None:
            count = int((entry.requeue or {}).get("count", 0)) + 1
            entry.requeue = {"count": count, "requeueAt": rfc3339(d.requeue_at)}
        self._mark(entry, now, urgent=True)
        self._write_suspend(entry, restore=True, event=(d.reason, d.message))

    # ------------------------------------------------------------------------------------------
    # Write tasks
    # ------------------------------------------------------------------------------------------

    def _spawn(self, chain_key: str | None, fn: Callable[[], Awaitable[None]], *, critical: bool = False) -> None:
        prev = self._chains.get(chain_key) if chain_key else None
        sem = self._sem_critical if critical else self._sem_background

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
                    if not critical and not self._critical_clear.is_set():
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
        self._tasks.add(task)
        if chain_key:
            self._chains[chain_key] = task

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            if chain_key and self._chains.get(chain_key) is t:
                del self._chains[chain_key]

        task.add_done_callback(done)

    def _jobset_path(self, entry: Entry) -> str:
        return resource_path(JOBSET_GROUP, JOBSET_VERSION, "jobsets", entry.namespace, entry.name)

    def _write_admission(self, entry: Entry, d: Admission) -> None:
        obj = entry.obj
        flavors = dict(self.engine.flavors)
        recorded = json.dumps(self._admission_json(d), sort_keys=True, separators=(",", ":"))
        key = entry.key
        entry.writing = True

        def ops_for(current: Mapping[str, Any]) -> list[dict[str, Any]]:
            ops = [{"op": "test", "path": "/metadata/uid", "value": entry.uid}]
            ops += admission_patch(current, d, flavors)
            ann_exists = bool((current.get("metadata") or {}).get("annotations")) or any(
                o["path"] == "/metadata/annotations" for o in ops
            )
            if not ann_exists:
                ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
            ops.append({"op": "add", "path": "/metadata/annotations/gangq.io~1admission", "value": recorded})
            ops = [o for o in ops if o["path"] != "/spec/suspend"]
            ops.append({"op": "add", "path": "/spec/suspend", "value": False})  # even if `current` is stale
            return ops

        decided = time.monotonic()

        async def write() -> None:
            path = self._jobset_path(entry)
            current: Mapping[str, Any] = obj
            self.latency["admission_queued"].add(time.monotonic() - decided)
            for attempt in range(2):
                try:
                    new = await self.client.patch(path, ops_for(current), JSON_PATCH)
                    self.latency["admission_write"].add(time.monotonic() - decided)
                    self.enqueue("_written", "", {"key": key, "object": new})
                    if self.config.events.admission:
                        self._post_event(entry, "Normal", "Admitted",
                                         f"Admitted by ClusterQueue {d.cluster_queue}", new)
                    return
                except ApiError as err:
                    if err.status == 404:
                        self.enqueue("_written", "", {"key": key})
                        return
                    if attempt == 0 and err.status in (409, 422):
                        try:
                            current = await self.client.get(path)
                            continue
                        except ApiError:
                            pass
                    self.enqueue("_admission_failed", "", {"key": key, "error": str(err)})
                    return
                except SpecError as err:
                    self.enqueue("_admission_failed", "", {"key": key, "error": str(err)})
                    return

        self._spawn(key, write, critical=True)

    def _write_suspend(self, entry: Entry, *, restore: bool, event: tuple[str, str] | None = None) -> None:
        key = entry.key
        obj = entry.obj
        entry.writing = True

        def ops_for(current: Mapping[str, Any]) -> list[dict[str, Any]]:
            ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": entry.uid}]
            if restore:
                try:
                    ops += restore_patch(current)
                except SpecError as err:
                    log.warning("JobSet %s: cannot restore pod templates (%s); suspending only", key, err)
                    ops.append({"op": "add", "path": "/spec/suspend", "value": True})
                ann = (current.get("metadata") or {}).get("annotations") or {}
                removes_all = any(o["op"] == "remove" and o["path"] == "/metadata/annotations" for o in ops)
                if ADMISSION_ANNOTATION in ann and not removes_all:
                    if len(ann) == 1 or (len(ann) == 2 and any(
                        o["op"] == "remove" and o["path"].startswith("/metadata/annotations/") for o in ops
                    )):
                        ops = [o for o in ops if not o["path"].startswith("/metadata/annotations")]
                        ops.append({"op": "remove", "path": "/metadata/annotations"})
                    else:
                        ops.append({"op": "remove", "path": "/metadata/annotations/gangq.io~1admission"})
            if not any(o["path"] == "/spec/suspend" for o in ops):
                ops.append({"op": "add", "path": "/spec/suspend", "value": True})
            return ops

        async def write() -> None:
            path = self._jobset_path(entry)
            current: Mapping[str, Any] = obj
            for attempt in range(3):
                try:
                    new = await self.client.patch(path, ops_for(current), JSON_PATCH)
                    self.enqueue("_written", "", {"key": key, "object": new})
                    if event is not None and self.config.events.eviction:
                        reason, message = event
                        self._post_event(entry, "Warning" if reason != "Preempted" else "Normal",
                                         "Preempted" if reason == "Preempted" else "Evicted", message, new)
                    return
                except ApiError as err:
                    if err.status == 404:
                        break
                    if attempt < 2 and err.status in (409, 422):
                        try:
                            current = await self.client.get(path)
                            continue
                        except ApiError:
                            break
                    log.error("JobSet %s: cannot suspend: %s", key, err)
                    break
            self.enqueue("_written", "", {"key": key})

        self._spawn(key, write, critical=True)

    def _post_event(
        self, entry: Entry, event_type: str, reason: str, message: str, obj: Mapping[str, Any] | None = None
    ) -> None:
        async def post() -> None:
            await self._event(entry, event_type, reason, message, obj)

        self._spawn(None, post)

    async def _event(
        self, entry: Entry, event_type: str, reason: str, message: str, obj: Mapping[str, Any] | None = None
    ) -> None:
        now = rfc3339(time.time())
        meta = (obj or entry.obj).get("metadata") or {}
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{entry.name}.{secrets.token_hex(8)}", "namespace": entry.namespace},
            "involvedObject": {
                "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}", "kind": "JobSet", "name": entry.name,
                "namespace": entry.namespace, "uid": entry.uid, "resourceVersion": meta.get("resourceVersion"),
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
            await self.client.create(resource_path("", "v1", "events", entry.namespace), body, want_body=False)
        except ApiError as err:
            log.debug("event for %s not posted: %s", entry.key, err)

    # ------------------------------------------------------------------------------------------
    # Workload objects and their status (coalesced; docs/operator.md "write budget")
    # ------------------------------------------------------------------------------------------

    def _condition(
        self, entry: Entry, ctype: str, status: bool, reason: str, message: str, now: float,
        *, only_if_present: bool = False,
    ) -> None:
        old = entry.conditions.get(ctype)
        if old is None and only_if_present:
            return
        value = "True" if status else "False"
        since = old["lastTransitionTime"] if old is not None and old["status"] == value else rfc3339(now)
        entry.conditions[ctype] = {
            "type": ctype, "status": value, "reason": reason, "message": message[:32768],
            "lastTransitionTime": since,
        }

    def _mark(self, entry: Entry, now: float, *, urgent: bool) -> None:
        cfg = self.config.status
        if urgent:
            due = now + cfg.workload_delay_seconds
        else:
            due = max(now + cfg.pending_delay_seconds, entry.last_pending_write + cfg.pending_min_interval_seconds)
        if entry.due is None or due < entry.due:
            entry.due = due
            self._dirty_seq += 1
            heapq.heappush(self.dirty, (due, self._dirty_seq, entry.key))

    def workload_status(self, entry: Entry) -> dict[str, Any]:
        """The Workload's status as it would be written now."""
        state = entry.state
        shown = {"Evicting": "Evicted", "Inadmissible": "Inadmissible"}.get(state, state)
        position = pending = None
        if state == "Pending":
            pos = self.engine.position(entry.key)
            if pos is not None:
                position, pending = pos
        if state == "Admitted":
            reason, message = "Admitted", entry.message
        elif state == "Finished":
            cond = entry.conditions.get("Finished", {})
            reason, message = str(cond.get("reason", "Finished")), str(cond.get("message", ""))
        else:
            reason, message = entry.reason, entry.message
        if state == "Pending" and position is not None:
            message = f"{message}; position {position} of {pending}" if "position" not in message else message
        return {
            "state": shown,
            "clusterQueue": entry.cluster_queue,
            "position": position,
            "pendingInQueue": pending,
            "reason": reason,
            "message": message,
            "admission": self._admission_json(entry.admission) if entry.admission is not None else None,
            "requeueState": entry.requeue,
            "conditions": sorted(entry.conditions.values(), key=lambda c: c["type"]),
        }

    def _workload_body(self, entry: Entry) -> dict[str, Any]:
        spec: dict[str, Any]
        if entry.spec is not None:
            s = entry.spec
            spec = {"queueName": s.queue_name, "priority": s.priority, "podSets": entry.pod_sets}
            if s.priority_class:
                spec["priorityClassName"] = s.priority_class
            if s.min_member is not None:
                spec["minMember"] = s.min_member
            if s.min_resources:
                spec["minResources"] = {r: quantity_text(r, v) for r, v in s.min_resources.items()}
            if s.runtime_limit is not None:
                spec["runtimeLimitSeconds"] = s.runtime_limit
        else:
            names = [
                str(r.get("name")) for r in ((entry.obj.get("spec") or {}).get("replicatedJobs") or [])
                if isinstance(r, dict) and r.get("name")
            ] or ["main"]
            spec = {"queueName": queue_name(entry.obj) or "", "podSets": [{"name": n, "count": 0} for n in names]}
        return {
            "apiVersion": API_VERSION,
            "kind": "Workload",
            "metadata": {
                "name": entry.wl_name,
                "namespace": entry.namespace,
                "labels": {WORKLOAD_JOBSET_LABEL: entry.name[:63]},
                "ownerReferences": [{
                    "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}", "kind": "JobSet", "name": entry.name,
                    "uid": entry.uid, "controller": True, "blockOwnerDeletion": True,
                }],
            },
            "spec": spec,
        }

    def _flush_workloads(self, now: float) -> None:
        while self.dirty and self.dirty[0][0] <= now:
            due, _, key = heapq.heappop(self.dirty)
            entry = self.entries.get(key)
            if entry is None or entry.due != due:
                continue  # forgotten, or superseded by an earlier due time
            entry.due = None
            if entry.status_queued:
                continue  # a writer is queued already; it writes the status as it is when it goes out
            entry.status_queued = True
            self._spawn(f"wl:{key}", self._status_writer(entry))

    def _status_writer(self, entry: Entry) -> Callable[[], Awaitable[None]]:
        """The Workload's status write, computed when it goes out (not when it was due): a writer that
        waited behind admissions writes the latest state, and the states in between are never sent."""
        key = entry.key
        base = resource_path(GROUP, VERSION, "workloads", entry.namespace)
        path = resource_path(GROUP, VERSION, "workloads", entry.namespace, entry.wl_name, "status")

        async def write() -> None:
            entry.status_queued = False
            if self.entries.get(key) is not entry:
                return  # forgotten meanwhile (deleted, recreated, no longer queued)
            status = self.workload_status(entry)
            comparable = {k: v for k, v in status.items() if k not in ("position", "pendingInQueue")}
            finished = entry.state == "Finished"
            if finished:  # its last write: forget it (later events of the JobSet are ignored)
                self.entries.pop(key, None)
                self.rvs.pop(("jobsets", key), None)
            if entry.created and (
                comparable == entry.last_written
                or (entry.state == "Pending" and _significant(comparable) == _significant(entry.last_written))
            ):
                # Nothing changed, or a queued gang whose reason is back to the one written (or
                # whose message alone moved): that rides along with its next write.
                return
            entry.last_written = comparable
            self.status_writes[status["state"]] += 1
            if entry.state == "Pending":
                entry.last_pending_write = time.time()
            create = None if entry.created else self._workload_body(entry)
            entry.created = True
            await self._send_status(entry, base, path, status, create)

        return write

    async def _send_status(
        self, entry: Entry, base: str, path: str, status: dict[str, Any], create: dict[str, Any] | None
    ) -> None:
        body = create
        for _ in range(2):
            if body is not None:
                try:
                    await self.client.create(base, body, want_body=False)
                except ApiError as err:
                    if err.status == 404:  # the namespace or the JobSet is gone
                        return
                    if err.status != 409:
                        raise
            try:
                await self.client.patch(path, {"status": status}, want_body=False)
                return
            except ApiError as err:
                if err.status != 404 or body is not None:
                    raise
                if entry.key not in self.entries:
                    return
                body = self._workload_body(entry)  # deleted from outside: create it again

    def _flush_queue_status(self) -> None:
        lq_counts: dict[str, list[int]] = {}
        for entry in self.entries.values():
            if entry.state in ("Pending", "Inadmissible", "Admitted", "Evicting"):
                counts = lq_counts.setdefault(entry.lq, [0, 0])
                counts[0 if entry.state in ("Pending", "Inadmissible") else 1] += 1
        for kind_key in list(self.queue_status_written):
            kind, _, name = kind_key.partition(":")
            status = self._cq_status(name) if kind == "cq" else self._lq_status(name, lq_counts.get(name, [0, 0]))
            if status == self.queue_status_written.get(kind_key):
                continue
            self.queue_status_written[kind_key] = status
            if kind == "cq":
                path = resource_path(GROUP, VERSION, "clusterqueues", None, name, "status")
            else:
                ns, _, lq = name.partition("/")
                path = resource_path(GROUP, VERSION, "localqueues", ns, lq, "status")
            self._spawn(kind_key, self._queue_writer(path, status))

    def _queue_writer(self, path: str, status: dict[str, Any]) -> Callable[[], Awaitable[None]]:
        async def write() -> None:
            try:
                await self.client.patch(path, {"status": status}, want_body=False)
            except ApiError as err:
                if err.status != 404:
                    raise

        return write

    def _active_condition(self, active: bool, reason: str, message: str, old: Any) -> dict[str, Any]:
        value = "True" if active else "False"
        since = rfc3339(time.time())
        if isinstance(old, dict):
            for cond in old.get("conditions") or []:
                if cond.get("type") == "Active" and cond.get("status") == value:
                    since = cond["lastTransitionTime"]
        return {"type": "Active", "status": value, "reason": reason, "message": message, "lastTransitionTime": since}

    def _cq_status(self, name: str) -> dict[str, Any]:
        old = self.queue_status_written.get(f"cq:{name}")
        error = self.queue_errors.get(f"cq:{name}")
        view = self.engine.cluster_queue(name)
        if view is None:
            cond = self._active_condition(False, "InvalidSpec", error or "not known to the engine", old)
            return {"pendingWorkloads": 0, "admittedWorkloads": 0, "conditions": [cond]}
        usage: dict[str, list[dict[str, Any]]] = {}
        gpu_used = gpu_nominal = 0
        has_gpu = False
        for (flavor, resource), total in sorted(view.usage.items()):
            usage.setdefault(flavor, []).append({
                "name": resource, "total": quantity_text(resource, total),
                "borrowed": quantity_text(resource, view.borrowed.get((flavor, resource), 0)),
            })
            if resource == GPU:
                has_gpu = True
                gpu_used += total
                gpu_nominal += view.nominal.get((flavor, resource), 0)
        if view.active:
            cond = self._active_condition(True, "Ready", "Can admit new workloads", old)
        else:
            reason = "Stopped" if view.inactive_reason.startswith("stopped") else "FlavorNotFound"
            if "flavor" not in view.inactive_reason.lower() and reason != "Stopped":
                reason = "Inactive"
            cond = self._active_condition(False, reason, view.inactive_reason, old)
        return {
            "pendingWorkloads": view.pending,
            "admittedWorkloads": view.admitted,
            "reservingWorkloads": view.admitted,
            "flavorsUsage": [{"name": f, "resources": r} for f, r in usage.items()],
            "gpu": f"{gpu_used}/{gpu_nominal}" if has_gpu else None,
            "conditions": [cond],
        }

    def _lq_status(self, key: str, counts: list[int]) -> dict[str, Any]:
        old = self.queue_status_written.get(f"lq:{key}")
        error = self.queue_errors.get(f"lq:{key}")
        lq = self.engine.local_queues.get(key)
        if lq is None:
            cond = self._active_condition(False, "InvalidSpec", error or "not known", old)
        else:
            view = self.engine.cluster_queue(lq.cluster_queue)
            if view is None:
                cond = self._active_condition(False, "ClusterQueueDoesNotExist",
                                              f"ClusterQueue {lq.cluster_queue} does not exist", old)
            elif not view.active:
                cond = self._active_condition(False, "ClusterQueueIsInactive", view.inactive_reason, old)
            elif lq.stop_policy != "None":
                cond = self._active_condition(False, "Stopped", f"LocalQueue is stopped ({lq.stop_policy})", old)
            else:
                cond = self._active_condition(True, "Ready", "Can submit new workloads to ClusterQueue", old)
        return {"pendingWorkloads": counts[0], "admittedWorkloads": counts[1], "reservingWorkloads": counts[1],
                "conditions": [cond]}


def _significant(status: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """What a status write is for, without messages and times: state, reason, ClusterQueue,
    admission, requeue state and each condition's type, status and reason."""
    if status is None:
        return None
    return (
        status.get("state"), status.get("reason"), status.get("clusterQueue"), status.get("admission"),
        status.get("requeueState"),
        tuple((c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or ()),
    )


OperatorState = Controller
"""What observability reads: ``.engine`` (touch it on the controller's loop, under ``.lock``)."""
