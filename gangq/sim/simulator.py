"""The discrete-event loop: a virtual clock, a heap of events, one policy.

Events: arrivals (the trace, already sorted), pods started (admission + pod start latency), finishes,
evictions done (eviction + eviction latency) and the policy's own wakeups (the engine's
``next_wakeup()``: pods-ready timeouts, backoffs). Every event at one timestamp is applied, then the
policy's ``schedule(now)`` runs once — only if something that can change admissions happened; there
is no fixed tick. Same input, same order, same result: ties are broken by kind, then by sequence.
"""

from __future__ import annotations

import gc
import heapq
import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gangq.sim.policies import Admit, Evict, JobRun, Policy
from gangq.sim.scenario import Scenario

log = logging.getLogger(__name__)

# Event kinds, in the order they are applied at one timestamp.
FINISH = 0
EVICTED = 1
START = 2
WAKEUP = 3

ProgressFn = Callable[[int, int, float], None]

MAX_CYCLES_AT_ONE_TIME = 1_000


class LivelockError(RuntimeError):
    """The policy keeps deciding at one instant without the clock advancing (e.g. gangs that
    preempt each other back and forth with a zero eviction latency)."""


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: a run allocates many long-lived objects, and the
    collector's repeated full passes over them cost about a third of the run time. Memory held by
    cycles is reclaimed when it is switched back on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Series:
    """A step function sampled on change: ``times[i]`` → ``values[i]``."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.values: list[float] = []

    def add(self, t: float, value: float) -> None:
        times = self.times
        if times and times[-1] == t:
            self.values[-1] = value
        else:
            times.append(t)
            self.values.append(value)


class SimResult:
    """The raw outcome of one run; :mod:`gangq.sim.report` turns it into figures."""

    def __init__(self, scenario: Scenario, policy: Policy, label: str) -> None:
        self.scenario = scenario
        self.policy = policy
        self.label = label
        self.runs: list[JobRun] = []
        self.start = 0.0
        self.end = 0.0
        self.wall_seconds = 0.0
        self.schedule_calls = 0
        self.events = 0
        self.cq_area: dict[str, float] = {}  # resource-seconds of quota usage (scenario.resource)
        self.used_area = 0.0  # resource-seconds used by running gangs
        self.depth: dict[str, Series] = {}
        self.utilisation = Series()
        self.evicted: dict[tuple[str, str], int] = {}  # (cq, reason) -> count
        self.preempted: dict[tuple[str, str], int] = {}  # (preempting cq, reason) -> count
        self.admission_waits: list[tuple[str, float]] = []  # (cq, seconds queued before this admission)
        self.cq_usage_end: dict[str, dict[str, int]] = {}
        self.pending_end: dict[str, dict[str, int]] = {}
        self.extra: dict[str, object] = {}
        self.topology: dict[str, object] | None = None  # locality and fragmentation (gangq.sim.topology)


class Simulator:
    """Replays a scenario's trace through one policy."""

    def __init__(self, scenario: Scenario, policy: Policy, label: str | None = None) -> None:
        self.scenario = scenario
        self.policy = policy
        self.label = label or policy.name

    def _runs(self) -> list[JobRun]:
        sc = self.scenario
        cq_of = {lq.key: lq.cluster_queue for lq in sc.config.local_queues.values()}
        prio = sc.config.priority_classes
        runs = []
        for i, job in enumerate(sc.jobs):
            cq = cq_of[f"{job.namespace}/{job.local_queue}"]
            runs.append(JobRun(i, job, job.key, cq, prio.get(job.priority_class, 0), job.demand()))
        return runs

    def run(self, progress: ProgressFn | None = None, progress_every: int = 2000) -> SimResult:
        with no_gc():
            return self._run(progress, progress_every)

    def _run(self, progress: ProgressFn | None, progress_every: int) -> SimResult:
        t0 = time.perf_counter()
        sc = self.scenario
        policy = self.policy
        result = SimResult(sc, policy, self.label)
        runs = self._runs()
        result.runs = runs
        policy.setup(sc, runs)
        res = sc.resource
        latency = sc.pod_start_latency
        evict_latency = sc.eviction_latency
        checkpoint = sc.checkpoint
        cq_names = list(sc.config.cluster_queues)
        depth = dict.fromkeys(cq_names, 0)
        depth_series = {name: Series() for name in cq_names}
        cq_used = dict.fromkeys(cq_names, 0)
        cq_area = dict.fromkeys(cq_names, 0.0)
        cq_last = dict.fromkeys(cq_names, 0.0)
        util = result.utilisation
        used = 0
        used_area = 0.0
        used_last = runs[0].submit if runs else 0.0
        heap: list[tuple[float, int, int, JobRun | None, int]] = []
        push = heapq.heappush
        pop = heapq.heappop
        seq = 0
        n = len(runs)
        ai = 0
        next_wake = math.inf
        inf = math.inf
        calls = 0
        events = 0
        evicted = result.evicted
        preempted = result.preempted
        waits = result.admission_waits
        finished = 0
        next_progress = progress_every
        same_time = -inf
        same_count = 0
        admits: list[Admit] = []
        evicts: list[Evict] = []
        last_event = runs[0].submit if runs else 0.0

        def release(run: JobRun, now: float) -> None:
            nonlocal used, used_area, used_last
            amount = run.usage.get(res, 0)
            if amount:
                cq = run.cq
                cq_area[cq] += cq_used[cq] * (now - cq_last[cq])
                cq_last[cq] = now
                cq_used[cq] -= amount
                used_area += used * (now - used_last)
                used_last = now
                used -= amount
                util.add(now, used)
            run.usage = {}

        while True:
            t_arr = runs[ai].submit if ai < n else inf
            now = heap[0][0] if heap else inf
            if t_arr < now:
                now = t_arr
            if now == inf:
                break
            need = False
            while heap and heap[0][0] <= now:
                _, kind, _, run, token = pop(heap)
                events += 1
                if kind == WAKEUP:
                    need = True
                    if next_wake <= now:
                        next_wake = inf
                    continue
                assert run is not None
                if token != run.token:
                    continue
                last_event = now
                if kind == FINISH:
                    run.end = now
                    run.token += 1
                    finished += 1
                    release(run, now)
                    policy.finish(run, now)
                    need = True
                elif kind == START:
                    run.started_at = now
                    policy.started(run, now)
                    seq += 1
                    push(heap, (now + _run_for(run), FINISH, seq, run, run.token))
                else:  # EVICTED: the gang has stopped
                    release(run, now)
                    policy.eviction_done(run, now)
                    run.pending_since = now
                    need = True  # its quota is free
                    if run.outcome == "Deactivated":
                        continue
                    depth[run.cq] += 1
                    depth_series[run.cq].add(now, depth[run.cq])
            while ai < n and runs[ai].submit <= now:
                run = runs[ai]
                ai += 1
                events += 1
                last_event = now
                policy.submit(run, now)
                depth[run.cq] += 1
                depth_series[run.cq].add(now, depth[run.cq])
                need = True
            if need:
                calls += 1
                if now == same_time:
                    same_count += 1
                    if same_count > MAX_CYCLES_AT_ONE_TIME:
                        raise LivelockError(
                            f"{self.label}: {same_count} scheduling cycles at t={now} without the clock advancing; "
                            f"last cycle admitted {[a.run.key for a in admits][:5]} and evicted "
                            f"{[(e.run.key, e.reason) for e in evicts][:5]}"
                        )
                else:
                    same_time = now
                    same_count = 0
                admits, evicts = policy.schedule(now)
                for adm in admits:
                    _admit(adm, now, waits)
                    run = adm.run
                    cq = run.cq
                    depth[cq] -= 1
                    depth_series[cq].add(now, depth[cq])
                    amount = adm.usage.get(res, 0)
                    if amount:
                        cq_area[cq] += cq_used[cq] * (now - cq_last[cq])
                        cq_last[cq] = now
                        cq_used[cq] += amount
                        used_area += used * (now - used_last)
                        used_last = now
                        used += amount
                        util.add(now, used)
                    seq += 1
                    if latency > 0:
                        push(heap, (now + latency, START, seq, run, run.token))
                    else:
                        run.started_at = now
                        policy.started(run, now)
                        push(heap, (now + _run_for(run), FINISH, seq, run, run.token))
                for ev in evicts:
                    _evict(ev, now, checkpoint, evicted, preempted)
                    seq += 1
                    push(heap, (now + evict_latency, EVICTED, seq, ev.run, ev.run.token))
            wake = policy.next_wakeup()
            if wake is not None and now < wake < next_wake:
                next_wake = wake
                seq += 1
                push(heap, (wake, WAKEUP, seq, None, 0))
            if progress is not None and calls >= next_progress:
                next_progress = calls + progress_every
                progress(ai, n, now)
        end = last_event
        for cq in cq_names:
            cq_area[cq] += cq_used[cq] * (end - cq_last[cq])
        used_area += used * (end - used_last)
        result.start = runs[0].submit if runs else 0.0
        result.end = end
        result.cq_area = cq_area
        result.used_area = used_area
        result.depth = depth_series
        result.schedule_calls = calls
        result.events = events
        result.pending_end = {cq: policy.pending_by_status(cq) for cq in cq_names}
        result.extra = policy.extra(end)
        result.topology = policy.topology(end)
        result.wall_seconds = time.perf_counter() - t0
        if progress is not None:
            progress(n, n, end)
        log.info(
            "simulated %d jobs with %s in %.2fs (%d schedule calls, %d finished)",
            n,
            self.label,
            result.wall_seconds,
            calls,
            finished,
        )
        return result


def _run_for(run: JobRun) -> float:
    """Seconds until the gang ends: its remaining work, cut at its runtime limit."""
    limit = run.job.runtime_limit
    remaining = run.remaining
    if limit is not None and remaining > limit:
        run.outcome = "TimedOut"
        return limit
    run.outcome = "Failed" if run.job.fails else "Succeeded"
    return remaining


def _admit(adm: Admit, now: float, waits: list[tuple[str, float]]) -> None:
    run = adm.run
    run.token += 1
    run.admit_count += 1
    if run.first_admit is None:
        run.first_admit = now
    run.admitted_at = now
    run.started_at = None
    run.usage = adm.usage
    queued = now - run.pending_since
    run.queued_total += queued
    waits.append((run.cq, queued))


def _evict(
    ev: Evict,
    now: float,
    checkpoint: float,
    evicted: dict[tuple[str, str], int],
    preempted: dict[tuple[str, str], int],
) -> None:
    run = ev.run
    run.token += 1
    run.evictions += 1
    key = (run.cq, ev.reason)
    evicted[key] = evicted.get(key, 0) + 1
    if ev.reason == "Preempted":
        run.preempted += 1
        pkey = (ev.preemptor_cq or run.cq, "InClusterQueue" if ev.preemptor_cq == run.cq else "InCohortReclamation")
        preempted[pkey] = preempted.get(pkey, 0) + 1
    if run.started_at is not None and checkpoint > 0:
        ran = now - run.started_at
        step = checkpoint * run.job.duration
        kept = math.floor(ran / step) * step if step > 0 else 0.0
        run.remaining = max(0.0, run.remaining - kept)
    run.started_at = None
    run.outcome = "Deactivated" if ev.deactivated else ""
