"""gangq's Prometheus metric families and how the controller fills them.

Names follow Kueue's metric set where the concept is the same (``kueue_X`` → ``gangq_X``), units are
in the names, and the label sets are Kueue's (``cluster_queue``, ``local_queue`` + ``namespace``,
``cohort``, ``flavor``, ``resource``, ``priority_class``, ``reason``). ``docs/observability.md`` has
the reference table; :data:`METRIC_NAMES` is the list the dashboard and the alert tests check against.

The controller (one asyncio task owns the engine) calls, on the same task:

- :meth:`GangqMetrics.observe_decisions` with what ``Engine.schedule`` returned (counters, wait
  histograms, preemptions);
- :meth:`GangqMetrics.observe_cycle` with the cycle's duration and admissions;
- :meth:`GangqMetrics.observe_finished` before ``Engine.finish`` of an admitted gang;
- :meth:`GangqMetrics.refresh` after a cycle (gauges from the engine's views; it iterates
  ClusterQueues and cohorts, never pending workloads);
- :meth:`GangqMetrics.api_request`, :meth:`GangqMetrics.admission_error`,
  :meth:`GangqMetrics.set_leader` from the shell;
- the loop's own figures (event queue wait, loop cycle, event-loop lag, admission patch latency,
  Workload status writes, GC pauses) on their families directly.

:func:`controller_summary` condenses the families into the account the controller logs when it
stops and the Kueue baseline benchmark reports.

Quantities are exported in base units: ``cpu`` in cores (the engine counts millicores), memory in
bytes, everything else as counted.
"""

from __future__ import annotations

import contextlib
import logging
import platform
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

import gangq
from gangq.core.decisions import Admission, Eviction, EvictionReason, PendingUpdate

if TYPE_CHECKING:
    from gangq.core.engine import Engine
    from gangq.core.quota import QuotaNode

log = logging.getLogger(__name__)

# Kueue's admission-wait buckets: 1 s doubling up to ~36 h (the simulator uses the same).
WAIT_BUCKETS: tuple[float, ...] = tuple(float(2**i) for i in range(18))
# Scheduling-cycle duration and the controller loop's latencies: 0.5 ms .. ~16 s.
CYCLE_BUCKETS: tuple[float, ...] = tuple(0.0005 * 2**i for i in range(16))
# An eviction until its quota is back: 1 ms .. ~262 s.
STOP_BUCKETS: tuple[float, ...] = tuple(0.001 * 2**i for i in range(19))
# Admissions per cycle: 0, 1, 2, 4 .. 4096.
ADMISSIONS_BUCKETS: tuple[float, ...] = (0.0, *(float(2**i) for i in range(13)))

CQ = ("cluster_queue",)
CQ_FR = ("cluster_queue", "flavor", "resource")
COHORT_FR = ("cohort", "flavor", "resource")
LQ = ("namespace", "local_queue")

STATUSES = ("active", "inactive", "stopped")
EVICTION_REASONS = get_args(EvictionReason)
PREEMPTION_REASONS = ("InClusterQueue", "InCohortReclamation", "InCohortFairSharing")


def quantity(resource: str, amount: int) -> float:
    """An engine quantity in the exported unit (cpu millicores → cores)."""
    return amount / 1000 if resource == "cpu" else float(amount)


class _Series:
    """Label values written by the last refresh of one gauge, so vanished objects are removed."""

    __slots__ = ("current", "gauge", "previous")

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge
        self.previous: set[tuple[str, ...]] = set()
        self.current: set[tuple[str, ...]] = set()

    def set(self, labels: tuple[str, ...], value: float) -> None:
        self.gauge.labels(*labels).set(value)
        self.current.add(labels)

    def sweep(self) -> None:
        for labels in self.previous - self.current:
            with contextlib.suppress(KeyError):  # already gone
                self.gauge.remove(*labels)
        self.previous, self.current = self.current, set()


class GangqMetrics:
    """All gangq metric families, created on one registry.

    The attribute names of the families the simulator also writes (``gangq simulate --metrics``)
    are the same as in ``gangq.sim.metrics``, so either module can fill either object.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry

        # -- queues --------------------------------------------------------------------------------
        self.pending_workloads = Gauge(
            "gangq_pending_workloads",
            "Pending workloads per ClusterQueue and status (active: will be tried; inadmissible: waits for a change)",
            ["cluster_queue", "status"],
            registry=r,
        )
        self.cluster_queue_head_age_seconds = Gauge(
            "gangq_cluster_queue_head_age_seconds",
            "Seconds the first workload in a ClusterQueue's admission order has been pending (starvation signal)",
            CQ,
            registry=r,
        )
        self.cluster_queue_status = Gauge(
            "gangq_cluster_queue_status",
            "1 for the ClusterQueue's current status (active, inactive, stopped), 0 for the others",
            ["cluster_queue", "status"],
            registry=r,
        )
        self.cluster_queue_info = Gauge(
            "gangq_cluster_queue_info",
            "Always 1; labels give the ClusterQueue's cohort ('' when none) for joins and dashboard variables",
            ["cluster_queue", "cohort"],
            registry=r,
        )
        self.admitted_active_workloads = Gauge(
            "gangq_admitted_active_workloads",
            "Workloads admitted and not finished per ClusterQueue (evicting ones included)",
            CQ,
            registry=r,
        )
        # -- workload counters ----------------------------------------------------------------------
        self.admitted_workloads_total = Counter(
            "gangq_admitted_workloads",
            "Admissions per ClusterQueue (a re-admission after eviction counts again)",
            CQ,
            registry=r,
        )
        self.local_queue_admitted_workloads_total = Counter(
            "gangq_local_queue_admitted_workloads",
            "Admissions per LocalQueue and priority class ('' when none)",
            [*LQ, "priority_class"],
            registry=r,
        )
        self.restored_over_quota_total = Counter(
            "gangq_restored_over_quota_workloads",
            "Admitted gangs a restart kept running although they take more than their ClusterQueue's "
            "quota now (it shrank meanwhile), per ClusterQueue",
            CQ,
            registry=r,
        )
        self.started_before_admission_total = Counter(
            "gangq_started_before_admission_workloads",
            "Queued workloads whose pods had started before gangq could suspend them (no admission "
            "webhook suspended them at creation), per kind",
            ("kind",),
            registry=r,
        )
        self.finished_workloads_total = Counter(
            "gangq_finished_workloads",
            "Admitted workloads that finished or were deleted, per ClusterQueue",
            CQ,
            registry=r,
        )
        self.evicted_workloads_total = Counter(
            "gangq_evicted_workloads",
            "Evictions per ClusterQueue and reason (Preempted, PodsReadyTimeout, ClusterQueueStopped, ...)",
            ["cluster_queue", "reason"],
            registry=r,
        )
        self.local_queue_evicted_workloads_total = Counter(
            "gangq_local_queue_evicted_workloads",
            "Evictions per LocalQueue and reason",
            [*LQ, "reason"],
            registry=r,
        )
        self.preempted_workloads_total = Counter(
            "gangq_preempted_workloads",
            "Preempted workloads per preempting ClusterQueue and reason "
            "(InClusterQueue, InCohortReclamation, InCohortFairSharing)",
            ["preempting_cluster_queue", "reason"],
            registry=r,
        )
        self.pending_reason_changes_total = Counter(
            "gangq_pending_reason_changes",
            "Changes of a pending workload's reason or message, per ClusterQueue and new reason",
            ["cluster_queue", "reason"],
            registry=r,
        )
        self.admission_errors_total = Counter(
            "gangq_admission_errors",
            "Admissions or evictions the controller failed to apply to the cluster, per ClusterQueue and reason",
            ["cluster_queue", "reason"],
            registry=r,
        )
        # -- latencies ------------------------------------------------------------------------------
        self.admission_wait_time_seconds = Histogram(
            "gangq_admission_wait_time_seconds",
            "Time from a workload's creation or requeue to its admission",
            CQ,
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.admitted_until_ready_wait_time_seconds = Histogram(
            "gangq_admitted_until_ready_wait_time_seconds",
            "Time from admission until minMember pods of the gang run (PodsReady)",
            CQ,
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        # -- quota ----------------------------------------------------------------------------------
        self.cluster_queue_nominal_quota = Gauge(
            "gangq_cluster_queue_nominal_quota",
            "Nominal quota per ClusterQueue, flavor and resource (cpu in cores, memory in bytes)",
            CQ_FR,
            registry=r,
        )
        self.cluster_queue_borrowing_limit = Gauge(
            "gangq_cluster_queue_borrowing_limit",
            "Borrowing limit per ClusterQueue, flavor and resource (absent: unlimited)",
            CQ_FR,
            registry=r,
        )
        self.cluster_queue_lending_limit = Gauge(
            "gangq_cluster_queue_lending_limit",
            "Lending limit per ClusterQueue, flavor and resource (absent: unlimited)",
            CQ_FR,
            registry=r,
        )
        self.cluster_queue_resource_usage = Gauge(
            "gangq_cluster_queue_resource_usage",
            "Quota in use by admitted workloads per ClusterQueue, flavor and resource",
            CQ_FR,
            registry=r,
        )
        self.cluster_queue_resource_reservation = Gauge(
            "gangq_cluster_queue_resource_reservation",
            "Quota reserved by admitted workloads (Kueue's QuotaReserved); equal to usage in gangq, "
            "which has no admission checks",
            CQ_FR,
            registry=r,
        )
        self.cluster_queue_borrowed_quota = Gauge(
            "gangq_cluster_queue_borrowed_quota",
            "Usage above nominal quota (borrowed from the cohort) per ClusterQueue, flavor and resource",
            CQ_FR,
            registry=r,
        )
        self.cohort_subtree_quota = Gauge(
            "gangq_cohort_subtree_quota",
            "Nominal quota of a cohort and every ClusterQueue and cohort below it, per flavor and resource",
            COHORT_FR,
            registry=r,
        )
        self.cohort_subtree_resource_usage = Gauge(
            "gangq_cohort_subtree_resource_usage",
            "Usage of every ClusterQueue below a cohort, per flavor and resource",
            COHORT_FR,
            registry=r,
        )
        self.cluster_queue_weighted_share = Gauge(
            "gangq_cluster_queue_weighted_share",
            "Fair sharing: borrowed share of the cohort's pool (dominant resource) divided by the weight",
            CQ,
            registry=r,
        )
        # -- controller -----------------------------------------------------------------------------

        def duration(name: str, documentation: str) -> Histogram:
            return Histogram(name, documentation, buckets=CYCLE_BUCKETS, registry=r)

        self.scheduling_cycle_duration_seconds = duration(
            "gangq_scheduling_cycle_duration_seconds", "Wall time of one Engine.schedule call"
        )
        self.engine_retries_total = Counter(
            "gangq_engine_retries",
            "Retries of ClusterQueues and repeated scheduling cycles the engine asked for, per reason "
            "(docs/engine.md, Retry reasons)",
            ["reason"],
            registry=r,
        )
        self._retries_seen: dict[str, int] = {}
        self.scheduling_cycle_admissions = Histogram(
            "gangq_scheduling_cycle_admissions",
            "Admissions per scheduling cycle",
            buckets=ADMISSIONS_BUCKETS,
            registry=r,
        )
        self.loop_cycle_duration_seconds = duration(
            "gangq_loop_cycle_duration_seconds",
            "Wall time of one controller loop cycle: apply a batch of watch events, schedule, start the writes",
        )
        self.event_queue_wait_seconds = duration(
            "gangq_event_queue_wait_seconds", "Time from a watch event's arrival to the controller loop applying it"
        )
        self.event_loop_lag_seconds = duration(
            "gangq_event_loop_lag_seconds",
            "How late the controller's event loop runs a 50 ms timer: the time every callback waits behind others",
        )
        self.admission_patch_wait_seconds = duration(
            "gangq_admission_patch_wait_seconds",
            "Time from an admission decision to its patch of the queued object being sent (behind the object's earlier "
            "writes and the write lane's limit)",
        )
        self.admission_patch_duration_seconds = duration(
            "gangq_admission_patch_duration_seconds",
            "Time from an admission decision to the API server's answer to its patch of the queued object",
        )
        self.workload_status_writes_total = Counter(
            "gangq_workload_status_writes",
            "Workload status writes by the state written (Pending, Admitted, Evicted, Finished, Inadmissible)",
            ["state"],
            registry=r,
        )
        self.eviction_stop_duration_seconds = Histogram(
            "gangq_eviction_stop_duration_seconds",
            "Time from an eviction to the quota it gives back: the gang's pods gone, and that confirmed",
            buckets=STOP_BUCKETS,
            registry=r,
        )
        self.eviction_confirmations_total = Counter(
            "gangq_eviction_confirmations",
            "Evicted gangs whose quota came back, by what confirmed they had stopped: their watch "
            "streams ('streams') or a read from the API server ('read')",
            ["by"],
            registry=r,
        )
        self.gc_pause_seconds_total = Counter(
            "gangq_gc_pause_seconds",
            "Time the controller's event loop stood still in CPython's cyclic garbage collector, per generation",
            ["generation"],
            registry=r,
        )
        self.api_requests_total = Counter(
            "gangq_api_requests",
            "Kubernetes API requests by verb, resource and HTTP status code ('error': no response)",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.api_request_errors_total = Counter(
            "gangq_api_request_errors",
            "Kubernetes API requests that failed (status >= 400 or no response) by verb and resource",
            ["verb", "resource"],
            registry=r,
        )
        self.writes_in_flight = Gauge(
            "gangq_api_writes_in_flight",
            "The controller's API writes started and not yet answered (admissions, evictions, status, "
            "Events): a backlog that grows while the API server is slower than the decisions",
            registry=r,
        )
        self.leader = Gauge(
            "gangq_leader",
            "1 while this replica holds the leader lease and runs the scheduler, else 0",
            registry=r,
        )
        self.build_info = Gauge(
            "gangq_build_info",
            "Always 1; labels give the gangq version and the Python runtime",
            ["version", "python_version", "platform"],
            registry=r,
        )
        self.build_info.labels(gangq.__version__, platform.python_version(), platform.machine()).set(1)
        self.leader.set(0)

        self._refreshed = [
            _Series(g)
            for g in (
                self.pending_workloads,
                self.cluster_queue_head_age_seconds,
                self.cluster_queue_status,
                self.cluster_queue_info,
                self.admitted_active_workloads,
                self.cluster_queue_nominal_quota,
                self.cluster_queue_borrowing_limit,
                self.cluster_queue_lending_limit,
                self.cluster_queue_resource_usage,
                self.cluster_queue_resource_reservation,
                self.cluster_queue_borrowed_quota,
                self.cohort_subtree_quota,
                self.cohort_subtree_resource_usage,
                self.cluster_queue_weighted_share,
            )
        ]
        # Admitted gangs not yet PodsReady: key -> (ClusterQueue, admission time).
        self._awaiting_ready: dict[str, tuple[str, float]] = {}
        # ClusterQueues whose counters exist at 0 (so rate()/increase() see their first event).
        self._initialized: set[str] = set()

    # ----------------------------------------------------------------------------------------------
    # Decisions and cycles
    # ----------------------------------------------------------------------------------------------

    def observe_decisions(self, engine: Engine, decisions: Iterable[Admission | Eviction | PendingUpdate]) -> None:
        """Count what one ``engine.schedule(now)`` returned. Call it right after ``schedule``,
        before the engine sees further events (it reads the workloads' queue times and queues)."""
        for d in decisions:
            if isinstance(d, Admission):
                self._admitted(engine, d)
            elif isinstance(d, Eviction):
                self._evicted(engine, d)
            elif isinstance(d, PendingUpdate):
                self.pending_reason_changes_total.labels(d.cluster_queue or "", d.reason).inc()

    def _admitted(self, engine: Engine, adm: Admission) -> None:
        cq = adm.cluster_queue
        self.admitted_workloads_total.labels(cq).inc()
        wl = engine.workloads.get(adm.workload)
        if wl is not None:
            self.admission_wait_time_seconds.labels(cq).observe(max(0.0, adm.time - wl.pending_since))
            spec = wl.spec
            self.local_queue_admitted_workloads_total.labels(spec.namespace, spec.queue_name, spec.priority_class).inc()
        self._awaiting_ready[adm.workload] = (cq, adm.time)

    def _evicted(self, engine: Engine, ev: Eviction) -> None:
        self._awaiting_ready.pop(ev.workload, None)
        self.evicted_workloads_total.labels(ev.cluster_queue, ev.reason).inc()
        wl = engine.workloads.get(ev.workload)
        if wl is not None:
            self.local_queue_evicted_workloads_total.labels(wl.spec.namespace, wl.spec.queue_name, ev.reason).inc()
        if ev.reason == "Preempted":
            preemptor_cq = ev.cluster_queue
            if ev.preemptor is not None:
                view = engine.workload(ev.preemptor)
                if view is not None and view.cluster_queue is not None:
                    preemptor_cq = view.cluster_queue
            if preemptor_cq == ev.cluster_queue:
                reason = "InClusterQueue"
            elif engine.config.fair_sharing:
                reason = "InCohortFairSharing"
            else:
                reason = "InCohortReclamation"
            self.preempted_workloads_total.labels(preemptor_cq, reason).inc()

    def observe_cycle(self, seconds: float, admissions: int) -> None:
        """One scheduling cycle took ``seconds`` of wall time and admitted ``admissions`` gangs."""
        self.scheduling_cycle_duration_seconds.observe(seconds)
        self.scheduling_cycle_admissions.observe(admissions)

    def observe_pods_ready(self, key: str, now: float) -> None:
        """The gang ``key`` has minMember pods running (``refresh`` also notices this by itself)."""
        entry = self._awaiting_ready.pop(key, None)
        if entry is not None:
            self.admitted_until_ready_wait_time_seconds.labels(entry[0]).observe(max(0.0, now - entry[1]))

    def observe_finished(self, engine: Engine, key: str) -> None:
        """Call before ``engine.finish(key, now)``: counts the finish of an admitted gang."""
        self._awaiting_ready.pop(key, None)
        view = engine.workload(key)
        if view is not None and view.state in ("Admitted", "Evicting") and view.cluster_queue is not None:
            self.finished_workloads_total.labels(view.cluster_queue).inc()

    # ----------------------------------------------------------------------------------------------
    # Shell events
    # ----------------------------------------------------------------------------------------------

    def api_request(self, verb: str, resource: str, code: int | str) -> None:
        """One Kubernetes API request; ``code`` is the HTTP status, or 0 / "error" when none came."""
        label = str(code) if code not in (0, "", None) else "error"
        self.api_requests_total.labels(verb, resource, label).inc()
        if label == "error" or (label.isdigit() and int(label) >= 400):
            self.api_request_errors_total.labels(verb, resource).inc()

    def admission_error(self, cluster_queue: str, reason: str) -> None:
        """Applying an admission or eviction to the cluster failed (e.g. the patch of the object was rejected)."""
        self.admission_errors_total.labels(cluster_queue, reason).inc()

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)

    # ----------------------------------------------------------------------------------------------
    # Gauges from the engine's views
    # ----------------------------------------------------------------------------------------------

    def refresh(self, engine: Engine, now: float) -> None:
        """Set every gauge from the engine's current state. Cost: O(ClusterQueues × flavors ×
        resources × cohort depth) plus the gangs admitted and not yet PodsReady; it never walks
        the pending workloads. Series of deleted ClusterQueues and cohorts disappear."""
        (
            pending,
            head_age,
            status,
            info,
            admitted_active,
            nominal,
            borrowing_limit,
            lending_limit,
            usage,
            reservation,
            borrowed,
            cohort_quota,
            cohort_usage,
            share,
        ) = self._refreshed
        subtree_quota: dict[tuple[str, str, str], int] = {}
        subtree_usage: dict[tuple[str, str, str], int] = {}
        for name, state in engine.cluster_queues.items():
            view = engine.cluster_queue(name)
            if view is None:
                continue
            cq = (name,)
            if name not in self._initialized:
                self._init_counters(name)
            pending.set((name, "active"), view.pending_active)
            pending.set((name, "inadmissible"), view.pending_inadmissible)
            current = "active" if view.active else ("stopped" if state.spec.stop_policy != "None" else "inactive")
            for s in STATUSES:
                status.set((name, s), 1.0 if s == current else 0.0)
            info.set((name, view.cohort or ""), 1.0)
            admitted_active.set(cq, view.admitted)
            share.set(cq, view.share if view.share != float("inf") else 1e9)
            head = engine.pending_workloads(name, limit=1)
            head_age.set(cq, max(0.0, now - head[0].pending_since) if head else 0.0)
            for group in state.spec.resource_groups:
                for flavor in group.flavors:
                    for q in flavor.resources:
                        labels = (name, flavor.name, q.name)
                        if q.borrowing_limit is not None:
                            borrowing_limit.set(labels, quantity(q.name, q.borrowing_limit))
                        if q.lending_limit is not None:
                            lending_limit.set(labels, quantity(q.name, q.lending_limit))
            for (flavor_name, resource), amount in view.nominal.items():
                labels = (name, flavor_name, resource)
                nominal.set(labels, quantity(resource, amount))
                used = view.usage.get((flavor_name, resource), 0)
                usage.set(labels, quantity(resource, used))
                reservation.set(labels, quantity(resource, used))
                borrowed.set(labels, quantity(resource, view.borrowed.get((flavor_name, resource), 0)))
            _add_up(state.node.parent, view.nominal, subtree_quota)
            _add_up(state.node.parent, view.usage, subtree_usage)
        for cohort in engine.quota.cohorts.values():
            _add_up(cohort, cohort.nominal, subtree_quota)
        for key, amount in subtree_quota.items():
            cohort_quota.set(key, quantity(key[2], amount))
            cohort_usage.set(key, quantity(key[2], subtree_usage.get(key, 0)))
        for series in self._refreshed:
            series.sweep()
        self._check_ready(engine, now)
        self._count_retries(engine)

    def _count_retries(self, engine: Engine) -> None:
        """Add the retries the engine asked for since the last refresh to their counters."""
        seen = self._retries_seen
        for reason, count in engine.retry_counts().items():
            before = seen.get(reason)
            if before is None:
                self.engine_retries_total.labels(reason).inc(0)  # every reason is exported, zeros too
                before = 0
            elif count < before:
                before = 0  # a new engine (the controller restarted its state): counted from zero
            if count > before:
                self.engine_retries_total.labels(reason).inc(count - before)
            seen[reason] = count

    def _init_counters(self, cluster_queue: str) -> None:
        """Create a new ClusterQueue's counter and histogram series at 0: Prometheus' ``increase``
        cannot see the first event of a series that appears with value 1, and a wait-time panel
        would show nothing for a queue's first admissions."""
        self._initialized.add(cluster_queue)
        self.admission_wait_time_seconds.labels(cluster_queue)
        self.admitted_until_ready_wait_time_seconds.labels(cluster_queue)
        self.admitted_workloads_total.labels(cluster_queue)
        self.finished_workloads_total.labels(cluster_queue)
        for reason in EVICTION_REASONS:
            self.evicted_workloads_total.labels(cluster_queue, reason)
        for reason in PREEMPTION_REASONS:
            self.preempted_workloads_total.labels(cluster_queue, reason)

    def _check_ready(self, engine: Engine, now: float) -> None:
        done: list[str] = []
        for key, (cq, admitted_at) in self._awaiting_ready.items():
            wl = engine.workloads.get(key)
            if wl is None or wl.state != "Admitted":
                done.append(key)
            elif wl.pods_ready:
                self.admitted_until_ready_wait_time_seconds.labels(cq).observe(max(0.0, now - admitted_at))
                done.append(key)
        for key in done:
            del self._awaiting_ready[key]


def _add_up(node: QuotaNode | None, amounts: dict[tuple[str, str], int], into: dict[tuple[str, str, str], int]) -> None:
    """Add ``amounts`` (flavor, resource → quantity) to ``node`` and every cohort above it."""
    while node is not None:
        for (flavor, resource), amount in amounts.items():
            key = (node.name, flavor, resource)
            into[key] = into.get(key, 0) + amount
        node = node.parent


def metric_names(metrics: GangqMetrics | None = None) -> list[str]:
    """The exported metric family names (as Prometheus sees them: counters end in ``_total``)."""
    m = metrics or GangqMetrics()
    names: list[str] = []
    for family in m.registry.collect():
        if family.type == "counter":
            names.append(family.name + "_total")
        else:
            names.append(family.name)
    return sorted(names)


def sample_names(metrics: GangqMetrics | None = None) -> Sequence[str]:
    """Every series name a query may use: families plus histogram ``_bucket/_sum/_count``."""
    m = metrics or GangqMetrics()
    out: set[str] = set()
    for family in m.registry.collect():
        if family.type == "counter":
            out.add(family.name + "_total")
        elif family.type == "histogram":
            out.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
        else:
            out.add(family.name)
    return sorted(out)


_MEAN_MS = {
    "event_queue_wait": "gangq_event_queue_wait_seconds",
    "loop_cycle": "gangq_loop_cycle_duration_seconds",
    "scheduling_cycle": "gangq_scheduling_cycle_duration_seconds",
    "admission_patch_wait": "gangq_admission_patch_wait_seconds",
    "admission_patch": "gangq_admission_patch_duration_seconds",
    "event_loop_lag": "gangq_event_loop_lag_seconds",
    "eviction_stop": "gangq_eviction_stop_duration_seconds",
}
_READS = frozenset({"get", "list", "watch"})


def controller_summary(families: Iterable[Metric]) -> dict[str, Any]:
    """A run's account from gangq's metric families (``registry.collect()``, or a /metrics page
    parsed with ``prometheus_client.parser.text_string_to_metric_families``): scheduling cycles,
    admissions, evictions, what confirmed evicted gangs had stopped, API writes by verb and
    resource, Workload status writes by state, mean latencies in milliseconds, admissions per
    cycle, seconds in the cyclic GC by generation."""
    totals: dict[str, float] = {}
    writes: dict[str, float] = {}
    status_writes: dict[str, float] = {}
    gc_seconds: dict[str, float] = {}
    confirmations: dict[str, int] = {}
    for family in families:
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == "gangq_api_requests_total" and labels.get("verb") not in _READS:
                key = f"{labels.get('verb')} {labels.get('resource')}"
                writes[key] = writes.get(key, 0) + value
            elif name == "gangq_workload_status_writes_total":
                status_writes[labels["state"]] = value
            elif name == "gangq_gc_pause_seconds_total":
                gc_seconds[labels["generation"]] = round(value, 3)
            elif name == "gangq_eviction_confirmations_total":
                confirmations[labels["by"]] = int(value)
            elif name.endswith(("_total", "_sum", "_count")):
                totals[name] = totals.get(name, 0.0) + value

    def mean(histogram: str, scale: float = 1.0) -> float | None:
        count = totals.get(histogram + "_count", 0.0)
        return round(scale * totals.get(histogram + "_sum", 0.0) / count, 3) if count else None

    return {
        "cycles": int(totals.get("gangq_scheduling_cycle_duration_seconds_count", 0)),
        "admissions": int(totals.get("gangq_admitted_workloads_total", 0)),
        "evictions": int(totals.get("gangq_evicted_workloads_total", 0)),
        "eviction_confirmations": dict(sorted(confirmations.items())),
        "api_writes": {k: int(v) for k, v in sorted(writes.items())},
        "workload_status_writes": {k: int(v) for k, v in sorted(status_writes.items())},
        "mean_ms": {k: mean(h, 1000.0) for k, h in _MEAN_MS.items()},
        "admissions_per_cycle": mean("gangq_scheduling_cycle_admissions"),
        "gc_seconds_by_generation": dict(sorted(gc_seconds.items())),
    }


METRIC_NAMES: tuple[str, ...] = tuple(sample_names())
"""Every series name gangq exports (histograms as ``_bucket``, ``_sum``, ``_count``)."""
