"""gangq's Prometheus metrics (names after Kueue's where the concept is the same).

:func:`create_metrics` defines the families (``gangq.observability.metrics.GangqMetrics``, the very
ones the controller exports) on a given registry; :func:`export_run` fills them with a simulated
run's end state and :func:`write_metrics` writes the text exposition format.

| gangq metric | Kueue's | labels |
|---|---|---|
| ``gangq_pending_workloads`` | ``kueue_pending_workloads`` | cluster_queue, status (active, inadmissible) |
| ``gangq_admitted_workloads_total`` | ``kueue_admitted_workloads_total`` | cluster_queue |
| ``gangq_admitted_active_workloads`` | ``kueue_admitted_active_workloads`` | cluster_queue |
| ``gangq_admission_wait_time_seconds`` | ``kueue_admission_wait_time_seconds`` | cluster_queue |
| ``gangq_evicted_workloads_total`` | ``kueue_evicted_workloads_total`` | cluster_queue, reason |
| ``gangq_preempted_workloads_total`` | ``kueue_preempted_workloads_total`` | preempting_cluster_queue, reason |
| ``gangq_cluster_queue_resource_usage`` | ``kueue_cluster_queue_resource_usage`` | cluster_queue, flavor, resource |
| ``gangq_cluster_queue_nominal_quota`` | ``kueue_cluster_queue_nominal_quota`` | cluster_queue, flavor, resource |
| ``gangq_cluster_queue_borrowing_limit`` | ``kueue_cluster_queue_borrowing_limit`` | cluster_queue, flavor, resource |
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, disable_created_metrics, write_to_textfile

from gangq.observability.metrics import GangqMetrics
from gangq.sim.simulator import SimResult


def create_metrics(registry: CollectorRegistry | None = None) -> GangqMetrics:
    """Define gangq's metric families on ``registry`` (a private one if not given)."""
    return GangqMetrics(registry if registry is not None else CollectorRegistry(auto_describe=True))


def _value(resource: str, amount: int) -> float:
    return amount / 1000 if resource == "cpu" else float(amount)


def export_run(result: SimResult, metrics: GangqMetrics | None = None) -> GangqMetrics:
    """The metrics the controller would have exported at the end of the run."""
    m = metrics or create_metrics()
    sc = result.scenario
    config = sc.config
    for cq_name, spec in config.cluster_queues.items():
        for group in spec.resource_groups:
            for flavor in group.flavors:
                for q in flavor.resources:
                    m.cluster_queue_nominal_quota.labels(cq_name, flavor.name, q.name).set(_value(q.name, q.nominal))
                    if q.borrowing_limit is not None:
                        m.cluster_queue_borrowing_limit.labels(cq_name, flavor.name, q.name).set(
                            _value(q.name, q.borrowing_limit)
                        )
                    m.cluster_queue_resource_usage.labels(cq_name, flavor.name, q.name).set(0.0)
        pending = result.pending_end.get(cq_name, {})
        for status in ("active", "inadmissible"):
            m.pending_workloads.labels(cq_name, status).set(pending.get(status, 0))
        m.admitted_workloads_total.labels(cq_name)
        m.admitted_active_workloads.labels(cq_name).set(0)
    first_flavor: dict[tuple[str, str], str] = {}
    for cq_name, spec in config.cluster_queues.items():
        for group in spec.resource_groups:
            for resource in group.covered_resources:
                if group.flavors:
                    first_flavor[(cq_name, resource)] = group.flavors[0].name
    for run in result.runs:
        if run.usage and run.end is None:
            m.admitted_active_workloads.labels(run.cq).inc()
            for resource, amount in run.usage.items():
                flavor_name = first_flavor.get((run.cq, resource), "")
                m.cluster_queue_resource_usage.labels(run.cq, flavor_name, resource).inc(_value(resource, amount))
    for cq_name, wait in result.admission_waits:
        m.admitted_workloads_total.labels(cq_name).inc()
        m.admission_wait_time_seconds.labels(cq_name).observe(wait)
    for (cq_name, reason), n in result.evicted.items():
        m.evicted_workloads_total.labels(cq_name, reason).inc(n)
    for (cq_name, reason), n in result.preempted.items():
        m.preempted_workloads_total.labels(cq_name, reason).inc(n)
    return m


def write_metrics(result: SimResult, path: str | Path) -> None:
    """Write the end-of-run metrics in the Prometheus text format (without ``*_created`` series,
    which mean nothing on a virtual clock; this switch is process-wide in prometheus_client)."""
    disable_created_metrics()  # type: ignore[no-untyped-call]
    metrics = export_run(result)
    write_to_textfile(str(path), metrics.registry)
