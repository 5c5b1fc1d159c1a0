"""Admission policies the simulator can run: gangq's engine, and simple comparison schedulers.

- ``gangq``: the real :class:`gangq.core.Engine`, driven through its public API — the same code as
  the controller.
- ``fifo``: per ClusterQueue, strict arrival order; a head that does not fit blocks its queue.
- ``sjf``: per ClusterQueue, shortest known duration first; the shortest blocks its queue.
- ``pod-by-pod``: no gangs and no quota, like the default kube-scheduler: every pod is placed on its
  own (least-allocated node) as soon as it fits; a gang runs only once all its pods are bound, and
  a partly bound gang holds its GPUs meanwhile — with gangs arriving together this deadlocks.

The comparison schedulers ignore priorities and never preempt. ``fifo`` and ``sjf`` place whole
gangs (best-fit, like gangq's node check) under a simple quota model: a ClusterQueue may use its
nominal quota plus ``borrowingLimit`` while its cohort's total usage stays within the cohort's
summed nominal quota.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable

from gangq.core import Admission, Engine, Eviction, PodSetSpec, WorkloadSpec
from gangq.core.config import TopologyFit
from gangq.core.model import NodeSpec
from gangq.core.runtimes import RuntimeEstimator
from gangq.sim.scenario import Scenario
from gangq.sim.topology import TopologyMeter, _Head, with_hostname, with_topology
from gangq.sim.trace import TraceJob


class JobRun:
    """One trace job's state during one run."""

    __slots__ = (
        "admit_count",
        "admitted_at",
        "cls",
        "cq",
        "demand",
        "done",
        "end",
        "evictions",
        "first_admit",
        "index",
        "job",
        "key",
        "outcome",
        "pending_since",
        "preempted",
        "priority",
        "queued_total",
        "remaining",
        "started_at",
        "submit",
        "token",
        "usage",
    )

    def __init__(self, index: int, job: TraceJob, key: str, cq: str, priority: int, demand: dict[str, int]) -> None:
        self.index = index
        self.job = job
        self.key = key
        self.cq = cq
        self.cls = job.cls
        self.priority = priority
        self.submit = job.submit
        self.demand = demand
        self.remaining = job.duration
        self.token = 0  # bumps on every admission/eviction: stale events are ignored
        self.admit_count = 0
        self.first_admit: float | None = None
        self.admitted_at: float | None = None
        self.started_at: float | None = None
        self.end: float | None = None
        self.pending_since = job.submit
        self.queued_total = 0.0
        self.evictions = 0
        self.preempted = 0
        self.outcome = ""  # Succeeded | Failed | TimedOut | Deactivated | "" (never finished)
        self.usage: dict[str, int] = {}
        self.done = 0.0  # seconds of work kept (checkpoints) across restarts


class Admit:
    """A policy admitted ``run`` into ``cq`` charging ``usage`` (resource → amount)."""

    __slots__ = ("borrowing", "cq", "run", "usage")

    def __init__(self, run: JobRun, cq: str, usage: dict[str, int], borrowing: bool = False) -> None:
        self.run = run
        self.cq = cq
        self.usage = usage
        self.borrowing = borrowing


class Evict:
    """A policy evicted ``run`` (``reason``, preempting ClusterQueue if preempted)."""

    __slots__ = ("deactivated", "preemptor_cq", "reason", "run")

    def __init__(self, run: JobRun, reason: str, preemptor_cq: str | None, deactivated: bool) -> None:
        self.run = run
        self.reason = reason
        self.preemptor_cq = preemptor_cq
        self.deactivated = deactivated


class Policy:
    """What the event loop drives. ``schedule`` is called only after something happened."""

    name = "policy"

    def setup(self, scenario: Scenario, runs: list[JobRun]) -> None:
        self.scenario = scenario

    def submit(self, run: JobRun, now: float) -> None:
        raise NotImplementedError

    def schedule(self, now: float) -> tuple[list[Admit], list[Evict]]:
        raise NotImplementedError

    def started(self, run: JobRun, now: float) -> None:
        """Every pod of the admitted gang runs."""

    def finish(self, run: JobRun, now: float) -> None:
        raise NotImplementedError

    def eviction_done(self, run: JobRun, now: float) -> None:
        """An evicted gang has stopped (only policies that evict get this)."""

    def next_wakeup(self) -> float | None:
        return None

    def pending_by_status(self, cq: str) -> dict[str, int]:
        """Pending workloads of a ClusterQueue by Kueue status (``active``/``inadmissible``)."""
        return {}

    def extra(self, end: float) -> dict[str, object]:
        """Policy-specific figures for the report."""
        return {}

    def topology(self, end: float) -> dict[str, object] | None:
        """Locality and fragmentation figures (:mod:`gangq.sim.topology`; None: not measured)."""
        return None


# ----------------------------------------------------------------------------------------------
# gangq: the real engine
# ----------------------------------------------------------------------------------------------


class GangqPolicy(Policy):
    """gangq's admission engine, driven through its public API.

    With the scenario's ``runtime_estimates`` on (the default), a gang without a declared runtime
    limit is submitted with the run time learned from similar gangs that finished before it
    (:mod:`gangq.core.runtimes`) as its expected run time: the engine's reservations and backfill
    use it. It is never enforced: the simulator ends a gang only at its true duration or at a
    declared limit.
    """

    name = "gangq"
    topology_fit: TopologyFit | None = None  # None: the scenario's engine setting

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.by_key: dict[str, JobRun] = {}
        self.estimator: RuntimeEstimator | None = None
        self.estimated = 0
        self.meter: TopologyMeter | None = None

    def setup(self, scenario: Scenario, runs: list[JobRun]) -> None:
        super().setup(scenario, runs)
        cfg = scenario.config
        config = scenario.engine_config
        if self.topology_fit is not None:
            config = config.replace(topology_fit=self.topology_fit)
        engine = Engine(config)
        for flavor in cfg.flavors.values():
            engine.upsert_flavor(with_topology(flavor, scenario.topology))
        for cohort in cfg.cohorts.values():
            engine.upsert_cohort(cohort)
        for cq in cfg.cluster_queues.values():
            engine.upsert_cluster_queue(cq)
        for lq in cfg.local_queues.values():
            engine.upsert_local_queue(lq)
        for ns, labels in scenario.namespaces.items():
            engine.upsert_namespace(ns, labels)
        measured = scenario.measured_topology()
        nodes = [with_hostname(node, measured) for node in scenario.nodes]
        for node in nodes:
            engine.upsert_node(node)
        self.engine = engine
        self.meter = None
        if measured is not None:
            self.meter = TopologyMeter(
                nodes,
                measured,
                {cq: scenario.nodes_of(cq) for cq in cfg.cluster_queues},
                scenario.topology_request,
                scenario.resource,
                runs[0].submit if runs else 0.0,
                scenario.topology_sample_every,
            )
        self.by_key = {r.key: r for r in runs}
        self.estimator = RuntimeEstimator(quantile=scenario.estimate_quantile) if scenario.runtime_estimates else None
        self.estimated = 0
        # Workload specs are built once per job (the trace is immutable).
        self._specs: list[WorkloadSpec | None] = [None] * len(runs)

    def _spec(self, run: JobRun) -> WorkloadSpec:
        spec = self._specs[run.index]
        if spec is None:
            job = run.job
            limit = job.runtime_limit
            if limit is None and self.estimator is not None:
                limit = self.estimator.estimate(run.cq, _group(run))
                if limit is not None:
                    self.estimated += 1
            spec = WorkloadSpec(
                run.key,
                job.namespace,
                job.local_queue,
                [
                    PodSetSpec(
                        ps.name,
                        ps.count,
                        ps.requests,
                        ps.node_selector,
                        topology=self.scenario.topology_request if ps.count > 1 else None,
                    )
                    for ps in job.pod_sets
                ],
                priority=run.priority,
                creation_time=job.submit,
                min_member=job.min_member,
                runtime_limit=limit,
                priority_class=job.priority_class,
            )
            self._specs[run.index] = spec
        return spec

    def _head(self, cq: str) -> _Head | None:
        assert self.engine is not None and self.meter is not None
        pending = self.engine.pending_workloads(cq, limit=1)
        if not pending:
            return None
        run = self.by_key.get(pending[0].key)
        if run is None:
            return None
        return self.meter.head([(ps.count, ps.requests) for ps in run.job.pod_sets])

    def _sample(self, now: float) -> None:
        """Fragmentation samples due before ``now``, taken before the events at ``now`` change
        the engine's state."""
        meter = self.meter
        if meter is not None and now > meter.last:
            meter.sample(now, self._head)

    def submit(self, run: JobRun, now: float) -> None:
        assert self.engine is not None
        self._sample(now)
        self.engine.submit(self._spec(run), now)

    def schedule(self, now: float) -> tuple[list[Admit], list[Evict]]:
        assert self.engine is not None
        self._sample(now)
        admits: list[Admit] = []
        evicts: list[Evict] = []
        by_key = self.by_key
        meter = self.meter
        for d in self.engine.schedule(now):
            if type(d) is Admission:
                if meter is not None:
                    meter.admitted(d.workload, [(ps.requests, ps.placement) for ps in d.pod_sets])
                usage: dict[str, int] = {}
                for (_, resource), amount in d.usage.items():
                    usage[resource] = usage.get(resource, 0) + amount
                admits.append(Admit(by_key[d.workload], d.cluster_queue, usage, d.borrowing))
            elif type(d) is Eviction:
                preemptor = None
                if d.preemptor is not None:
                    p = by_key.get(d.preemptor)
                    preemptor = p.cq if p is not None else None
                evicts.append(Evict(by_key[d.workload], d.reason, preemptor, d.deactivated))
        return admits, evicts

    def started(self, run: JobRun, now: float) -> None:
        assert self.engine is not None
        self.engine.pods_ready(run.key)

    def finish(self, run: JobRun, now: float) -> None:
        assert self.engine is not None
        self._sample(now)
        if self.meter is not None:
            self.meter.released(run.key)
        self.engine.finish(run.key, now)
        if self.estimator is not None and run.started_at is not None and run.outcome == "Succeeded":
            self.estimator.observe(run.cq, _group(run), now - run.started_at)

    def eviction_done(self, run: JobRun, now: float) -> None:
        assert self.engine is not None
        self._sample(now)
        if self.meter is not None:
            self.meter.released(run.key)
        self.engine.eviction_done(run.key, now)

    def extra(self, end: float) -> dict[str, object]:
        if self.estimator is None:
            return {}
        return {"runtime_estimates": "learned", "jobs_submitted_with_estimate": self.estimated}

    def topology(self, end: float) -> dict[str, object] | None:
        meter = self.meter
        if meter is None:
            return None
        if end >= meter.last and not meter.fragmented:
            meter.sample(end, self._head, final=True)
        elif end > meter.last:
            meter.sample(end, self._head)
        return meter.figures()

    def next_wakeup(self) -> float | None:
        assert self.engine is not None
        return self.engine.next_wakeup()

    def pending_by_status(self, cq: str) -> dict[str, int]:
        assert self.engine is not None
        view = self.engine.cluster_queue(cq)
        if view is None:
            return {}
        return {"active": view.pending_active, "inadmissible": view.pending_inadmissible}


class GangqFirstFitPolicy(GangqPolicy):
    """gangq's engine with ``topology_fit="FirstFit"``: a pod set with a topology request goes to
    the first domain by label values that can hold it. The baseline best fit is compared with."""

    name = "gangq-firstfit"
    topology_fit: TopologyFit | None = "FirstFit"


def _group(run: JobRun) -> tuple[tuple[str, int], ...]:
    """Which gangs are "similar" for runtime estimates: the same total request vector."""
    return tuple(sorted(run.demand.items()))


# ----------------------------------------------------------------------------------------------
# Shared pieces of the comparison schedulers: a quota model and a node model
# ----------------------------------------------------------------------------------------------


class _Quota:
    """Per ClusterQueue: nominal, max (nominal + borrowing limit), usage; per cohort: pool and usage."""

    __slots__ = ("cohort", "cohort_used", "limit", "nominal", "pool", "used")

    def __init__(self, scenario: Scenario, cq_name: str, cohort_pools: dict[str, dict[str, int]]) -> None:
        spec = scenario.config.cluster_queues[cq_name]
        self.nominal: dict[str, int] = {}
        self.limit: dict[str, float] = {}
        for group in spec.resource_groups:
            for flavor in group.flavors:
                for q in flavor.resources:
                    self.nominal[q.name] = self.nominal.get(q.name, 0) + q.nominal
                    extra = math.inf if q.borrowing_limit is None else q.borrowing_limit
                    self.limit[q.name] = self.limit.get(q.name, 0) + q.nominal + extra
        self.cohort = spec.cohort
        if self.cohort is None:
            self.limit = {r: float(v) for r, v in self.nominal.items()}
            self.pool: dict[str, int] = self.nominal
            self.cohort_used: dict[str, int] = {}
        else:
            self.pool = cohort_pools.setdefault(self.cohort, {})
            for r, v in self.nominal.items():
                self.pool[r] = self.pool.get(r, 0) + v
            self.cohort_used = cohort_pools.setdefault("\0used/" + self.cohort, {})
        self.used: dict[str, int] = {}

    def fits(self, demand: dict[str, int]) -> bool:
        for r, v in demand.items():
            if r not in self.nominal:
                continue
            if self.used.get(r, 0) + v > self.limit[r]:
                return False
            if self.cohort is not None and self.cohort_used.get(r, 0) + v > self.pool[r]:
                return False
        return True

    def charge(self, demand: dict[str, int], sign: int) -> dict[str, int]:
        charged = {}
        for r, v in demand.items():
            if r not in self.nominal:
                continue
            self.used[r] = self.used.get(r, 0) + sign * v
            if self.cohort is not None:
                self.cohort_used[r] = self.cohort_used.get(r, 0) + sign * v
            charged[r] = v
        return charged


class _Node:
    __slots__ = ("free", "labels", "name")

    def __init__(self, spec: NodeSpec) -> None:
        self.name = spec.name
        self.free = dict(spec.allocatable)
        self.labels = spec.labels


def _fits(free: dict[str, int], req: dict[str, int]) -> bool:
    for r, v in req.items():
        if free.get(r, 0) < v:
            return False
    return True


def _alloc(free: dict[str, int], req: dict[str, int], sign: int) -> None:
    for r, v in req.items():
        free[r] = free.get(r, 0) - sign * v


class _Simple(Policy):
    """Per ClusterQueue queues over the quota and node models; subclasses order and place."""

    check_nodes_default = True

    def setup(self, scenario: Scenario, runs: list[JobRun]) -> None:
        super().setup(scenario, runs)
        cfg = scenario.config
        pools: dict[str, dict[str, int]] = {}
        self.quota = {name: _Quota(scenario, name, pools) for name in cfg.cluster_queues}
        self.resource = scenario.resource
        self.nodes = [_Node(n) for n in scenario.nodes if not n.unschedulable]
        self.cq_nodes: dict[str, list[_Node]] = {}
        self.check_nodes: dict[str, bool] = {}
        node_users: dict[str, set[str]] = {}
        for name, spec in cfg.cluster_queues.items():
            labels = [
                cfg.flavors[f.name].node_labels
                for g in spec.resource_groups
                for f in g.flavors
                if f.name in cfg.flavors
            ]
            eligible = [
                n for n in self.nodes if any(all(n.labels.get(k) == v for k, v in sel.items()) for sel in labels)
            ]
            self.cq_nodes[name] = eligible
            self.check_nodes[name] = spec.admission_mode != "QuotaOnly"
            for n in eligible:
                node_users.setdefault(n.name, set()).add(name)
        # ClusterQueues that compete with each other (a cohort or shared nodes): a release in one
        # may let another admit.
        self.related: dict[str, tuple[str, ...]] = {}
        for name, spec in cfg.cluster_queues.items():
            rel = {name}
            if spec.cohort is not None:
                rel |= {n for n, s in cfg.cluster_queues.items() if s.cohort == spec.cohort}
            if self.check_nodes[name]:
                for n in self.cq_nodes[name]:
                    rel |= node_users[n.name]
            self.related[name] = tuple(sorted(rel))
        self.dirty: dict[str, None] = {}
        self.placements: dict[int, list[tuple[_Node, dict[str, int]]]] = {}

    def _place_gang(self, run: JobRun) -> list[tuple[_Node, dict[str, int]]] | None:
        """Best-fit every pod of the gang (largest first) on the ClusterQueue's nodes, or None."""
        nodes = self.cq_nodes[run.cq]
        res = self.resource
        done: list[tuple[_Node, dict[str, int]]] = []
        pods = sorted(((ps.requests, ps.count) for ps in run.job.pod_sets), key=lambda p: -p[0].get(res, 0))
        for req, count in pods:
            for _ in range(count):
                best = None
                best_left = math.inf
                for n in nodes:
                    if _fits(n.free, req):
                        left = n.free.get(res, 0)
                        if left < best_left:
                            best, best_left = n, left
                if best is None:
                    for n, r in done:
                        _alloc(n.free, r, -1)
                    return None
                _alloc(best.free, req, 1)
                done.append((best, req))
        return done

    def _release(self, run: JobRun) -> None:
        for n, r in self.placements.pop(run.index, ()):
            _alloc(n.free, r, -1)
        self.quota[run.cq].charge(run.demand, -1)
        for name in self.related[run.cq]:
            self.dirty[name] = None

    def finish(self, run: JobRun, now: float) -> None:
        self._release(run)

    def _try(self, run: JobRun) -> Admit | None:
        quota = self.quota[run.cq]
        if not quota.fits(run.demand):
            return None
        if self.check_nodes[run.cq]:
            placed = self._place_gang(run)
            if placed is None:
                return None
            self.placements[run.index] = placed
        usage = quota.charge(run.demand, 1)
        borrowing = any(quota.used.get(r, 0) > quota.nominal[r] for r in usage)
        return Admit(run, run.cq, usage, borrowing)


class FifoPolicy(_Simple):
    """Strict arrival order per ClusterQueue: a head that does not fit blocks its queue."""

    name = "fifo"

    def setup(self, scenario: Scenario, runs: list[JobRun]) -> None:
        super().setup(scenario, runs)
        self.queues: dict[str, deque[JobRun]] = {name: deque() for name in scenario.config.cluster_queues}

    def submit(self, run: JobRun, now: float) -> None:
        self.queues[run.cq].append(run)
        self.dirty[run.cq] = None

    def schedule(self, now: float) -> tuple[list[Admit], list[Evict]]:
        admits: list[Admit] = []
        for name in self.dirty:
            q = self.queues[name]
            while q:
                admit = self._try(q[0])
                if admit is None:
                    break
                q.popleft()
                admits.append(admit)
        self.dirty.clear()
        return admits, []

    def pending_by_status(self, cq: str) -> dict[str, int]:
        return {"active": len(self.queues[cq])}


class SjfPolicy(_Simple):
    """Shortest job first (known durations) per ClusterQueue; the shortest blocks its queue."""

    name = "sjf"

    def setup(self, scenario: Scenario, runs: list[JobRun]) -> None:
        super().setup(scenario, runs)
        self.queues: dict[str, list[tuple[float, int, JobRun]]] = {name: [] for name in scenario.config.cluster_queues}

    def submit(self, run: JobRun, now: float) -> None:
        heapq.heappush(self.queues[run.cq], (run.remaining, run.index, run))
        self.dirty[run.cq] = None

    def schedule(self, now: float) -> tuple[list[Admit], list[Evict]]:
        admits: list[Admit] = []
        for name in self.dirty:
            q = self.queues[name]
            while q:
                admit = self._try(q[0][2])
                if admit is None:
                    break
                heapq.heappop(q)
                admits.append(admit)
        self.dirty.clear()
        return admits, []

    def pending_by_status(self, cq: str) -> dict[str, int]:
        return {"active": len(self.queues[cq])}


class PodByPodPolicy(_Simple):
    """No gang awareness and no quota: pods are placed one by one (least-allocated node) in pod
    creation order; a gang starts once all its pods are bound. The pods of a gang are created
    ``pod_create_interval`` seconds apart (a controller creating them one after another)."""

    name = "pod-by-pod"

    def __init__(self, pod_create_interval: float = 1.0) -> None:
        self.pod_create_interval = pod_create_interval

    def setup(self, scenario: Scenario, runs: list[JobRun]) -> None:
        super().setup(scenario, runs)
        self.future: list[tuple[float, int, int, JobRun, dict[str, int]]] = []  # pods not created yet
        self.pending: dict[str, list[tuple[JobRun, dict[str, int]]]] = {n: [] for n in scenario.config.cluster_queues}
        self.bound: dict[int, list[tuple[_Node, dict[str, int]]]] = {}
        self.held: dict[int, tuple[int, float]] = {}  # run index -> (primary units bound, since)
        self.partial_seconds = 0.0  # primary-resource-seconds held by gangs not fully bound
        self.total_pods: dict[int, int] = {}
        self._seq = 0

    def submit(self, run: JobRun, now: float) -> None:
        total = 0
        for ps in run.job.pod_sets:
            for _ in range(ps.count):
                self._seq += 1
                heapq.heappush(
                    self.future, (now + total * self.pod_create_interval, self._seq, total, run, ps.requests)
                )
                total += 1
        self.total_pods[run.index] = total
        self.bound[run.index] = []

    def next_wakeup(self) -> float | None:
        return self.future[0][0] if self.future else None

    def _account(self, run: JobRun, now: float, delta: int) -> None:
        held, since = self.held.get(run.index, (0, now))
        self.partial_seconds += held * (now - since)
        self.held[run.index] = (held + delta, now)

    def schedule(self, now: float) -> tuple[list[Admit], list[Evict]]:
        while self.future and self.future[0][0] <= now:
            _, _, _, run, req = heapq.heappop(self.future)
            self.pending[run.cq].append((run, req))
            self.dirty[run.cq] = None
        admits: list[Admit] = []
        res = self.resource
        for name in self.dirty:
            queue = self.pending[name]
            if not queue:
                continue
            nodes = self.cq_nodes[name]
            keep = []
            for run, req in queue:
                best = None
                best_free = -1
                for n in nodes:
                    if _fits(n.free, req):
                        free = n.free.get(res, 0)
                        if free > best_free:
                            best, best_free = n, free
                if best is None:
                    keep.append((run, req))
                    continue
                _alloc(best.free, req, 1)
                bound = self.bound[run.index]
                bound.append((best, req))
                if len(bound) == self.total_pods[run.index]:
                    self._account(run, now, 0)
                    self.held.pop(run.index, None)
                    self.placements[run.index] = bound
                    admits.append(Admit(run, run.cq, dict(run.demand)))
                else:
                    self._account(run, now, req.get(res, 0))
            self.pending[name] = keep
        self.dirty.clear()
        return admits, []

    def _release(self, run: JobRun) -> None:
        for n, r in self.placements.pop(run.index, ()):
            _alloc(n.free, r, -1)
        self.bound.pop(run.index, None)
        for name in self.related[run.cq]:
            self.dirty[name] = None

    def pending_by_status(self, cq: str) -> dict[str, int]:
        return {"active": len({r.index for r, _ in self.pending[cq]})}

    def extra(self, end: float) -> dict[str, object]:
        held_seconds = self.partial_seconds
        deadlocked = 0
        held_now = 0
        for index, (held, since) in self.held.items():
            held_seconds += held * (end - since)
            if held > 0 and index in self.bound:
                deadlocked += 1
                held_now += held
        unit = 3600.0
        return {
            "partial_gang_resource_hours": held_seconds / unit,
            "partial_gangs_at_end": deadlocked,
            "resource_held_by_partial_gangs_at_end": held_now,
        }


POLICIES: dict[str, type[Policy]] = {
    "gangq": GangqPolicy,
    "gangq-firstfit": GangqFirstFitPolicy,
    "fifo": FifoPolicy,
    "sjf": SjfPolicy,
    "pod-by-pod": PodByPodPolicy,
}


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})") from None


def policy_names() -> Iterable[str]:
    return POLICIES.keys()
