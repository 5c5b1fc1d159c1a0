"""The metric families, filled by driving a real Engine."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from gangq.core import Engine, EngineConfig, PodInfo
from gangq.observability.metrics import METRIC_NAMES, GangqMetrics
from tests.observability.helpers import GPU, gang, world


def val(m: GangqMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def run(e: Engine, m: GangqMetrics, now: float) -> list[object]:
    decisions = e.schedule(now)
    m.observe_decisions(e, decisions)
    m.refresh(e, now)
    return decisions


@pytest.fixture
def m() -> GangqMetrics:
    return GangqMetrics(CollectorRegistry())


def test_quota_usage_borrowing_and_pending_gauges(m: GangqMetrics) -> None:
    e = world()
    for name, gpus in (("big1", 8), ("big2", 4), ("big3", 8)):
        e.submit(gang(name, "a", 1, gpus, priority_class="high"), now=0.0)
    run(e, m, 10.0)
    m.refresh(e, 100.0)
    labels = {"cluster_queue": "a", "flavor": "a100", "resource": GPU}
    assert val(m, "gangq_cluster_queue_nominal_quota", **labels) == 8
    assert val(m, "gangq_cluster_queue_resource_usage", **labels) == 12
    assert val(m, "gangq_cluster_queue_resource_reservation", **labels) == 12
    assert val(m, "gangq_cluster_queue_borrowed_quota", **labels) == 4
    assert val(m, "gangq_cluster_queue_borrowing_limit", **labels) == 4
    # cpu is exported in cores (the engine counts millicores)
    assert val(m, "gangq_cluster_queue_nominal_quota", cluster_queue="a", flavor="a100", resource="cpu") == 64
    assert val(m, "gangq_cluster_queue_resource_usage", cluster_queue="a", flavor="a100", resource="cpu") == 2
    # absent limit = unlimited: no series
    assert val(m, "gangq_cluster_queue_lending_limit", **labels) is None
    assert val(m, "gangq_cluster_queue_lending_limit", cluster_queue="b", flavor="a100", resource=GPU) == 2
    assert val(m, "gangq_pending_workloads", cluster_queue="a", status="inadmissible") == 1
    assert val(m, "gangq_pending_workloads", cluster_queue="a", status="active") == 0
    assert val(m, "gangq_admitted_active_workloads", cluster_queue="a") == 2
    # the head (big3, submitted at 0) has waited 100 s at the refresh at t=100
    assert val(m, "gangq_cluster_queue_head_age_seconds", cluster_queue="a") == 100
    assert val(m, "gangq_cluster_queue_head_age_seconds", cluster_queue="b") == 0
    # cohort subtree: its own 2 GPUs plus 8 + 8 nominal; usage is a's 12
    assert val(m, "gangq_cohort_subtree_quota", cohort="pool", flavor="a100", resource=GPU) == 18
    assert val(m, "gangq_cohort_subtree_resource_usage", cohort="pool", flavor="a100", resource=GPU) == 12
    assert val(m, "gangq_cluster_queue_info", cluster_queue="a", cohort="pool") == 1
    assert val(m, "gangq_cluster_queue_status", cluster_queue="a", status="active") == 1
    assert val(m, "gangq_cluster_queue_status", cluster_queue="a", status="inactive") == 0


def test_admissions_waits_and_local_queue_counters(m: GangqMetrics) -> None:
    e = world()
    e.submit(gang("one", "a", 1, 8, priority_class="high"), now=0.0)
    e.submit(gang("two", "a", 1, 4), now=4.0)
    run(e, m, 10.0)
    assert val(m, "gangq_admitted_workloads_total", cluster_queue="a") == 2
    assert val(m, "gangq_admission_wait_time_seconds_count", cluster_queue="a") == 2
    assert val(m, "gangq_admission_wait_time_seconds_sum", cluster_queue="a") == 10 + 6
    assert val(m, "gangq_admission_wait_time_seconds_bucket", cluster_queue="a", le="8.0") == 1
    lq = {"namespace": "ns", "local_queue": "a"}
    assert val(m, "gangq_local_queue_admitted_workloads_total", **lq, priority_class="high") == 1
    assert val(m, "gangq_local_queue_admitted_workloads_total", **lq, priority_class="") == 1


def test_reclaim_counts_eviction_and_preemption_by_preempting_queue(m: GangqMetrics) -> None:
    e = world()
    e.submit(gang("big1", "a", 1, 8), now=0.0)
    e.submit(gang("big2", "a", 1, 4), now=0.0)
    run(e, m, 1.0)
    e.submit(gang("x", "b", 1, 8), now=2.0)
    decisions = run(e, m, 3.0)
    assert any(type(d).__name__ == "Eviction" for d in decisions)
    assert val(m, "gangq_evicted_workloads_total", cluster_queue="a", reason="Preempted") == 1
    assert val(m, "gangq_local_queue_evicted_workloads_total", namespace="ns", local_queue="a", reason="Preempted") == 1
    assert val(m, "gangq_preempted_workloads_total", preempting_cluster_queue="b", reason="InCohortReclamation") == 1
    assert val(m, "gangq_pending_reason_changes_total", cluster_queue="b", reason="WaitingForPreemption") == 1
    e.eviction_done("ns/big2", 4.0)
    run(e, m, 5.0)
    assert val(m, "gangq_admitted_workloads_total", cluster_queue="b") == 1
    # x waited from its submission (2) to its admission (5)
    assert val(m, "gangq_admission_wait_time_seconds_sum", cluster_queue="b") == 3


def test_preemption_within_a_queue_is_in_cluster_queue(m: GangqMetrics) -> None:
    from gangq.core import PreemptionSpec

    e = world()
    spec = e.cluster_queues["a"].spec
    spec.preemption = PreemptionSpec(within_cluster_queue="LowerPriority")
    e.upsert_cluster_queue(spec)
    e.submit(gang("low", "a", 1, 8, priority=0), now=0.0)
    e.submit(gang("low2", "a", 1, 4, priority=0), now=0.0)
    run(e, m, 1.0)
    e.submit(gang("high", "a", 1, 8, priority=10), now=2.0)
    run(e, m, 3.0)
    # the minimal victim set is low (8 GPUs): low2 can stay
    assert val(m, "gangq_preempted_workloads_total", preempting_cluster_queue="a", reason="InClusterQueue") == 1
    assert val(m, "gangq_evicted_workloads_total", cluster_queue="a", reason="Preempted") == 1


def test_pods_ready_time_and_pods_ready_timeout(m: GangqMetrics) -> None:
    e = world(EngineConfig(pods_ready_timeout=60, backoff_base=10, backoff_max=10))
    e.submit(gang("ok", "a", 2, 4), now=0.0)
    e.submit(gang("stuck", "b", 1, 8), now=0.0)
    run(e, m, 1.0)
    for i in range(2):
        e.update_pod(PodInfo(f"ns/ok-{i}", "n0", {"cpu": 1000, GPU: 4}, workload="ns/ok", pod_set="w", running=True))
    run(e, m, 31.0)
    assert val(m, "gangq_admitted_until_ready_wait_time_seconds_count", cluster_queue="a") == 1
    assert val(m, "gangq_admitted_until_ready_wait_time_seconds_sum", cluster_queue="a") == 30
    run(e, m, 62.0)
    assert val(m, "gangq_evicted_workloads_total", cluster_queue="b", reason="PodsReadyTimeout") == 1
    # the evicted gang never became ready: no observation for b
    assert val(m, "gangq_admitted_until_ready_wait_time_seconds_count", cluster_queue="b") == 0
    m.observe_finished(e, "ns/ok")
    e.finish("ns/ok", 70.0)
    m.observe_finished(e, "ns/never-existed")
    assert val(m, "gangq_finished_workloads_total", cluster_queue="a") == 1


def test_explicit_pods_ready_is_counted_once(m: GangqMetrics) -> None:
    e = world()
    e.submit(gang("g", "a", 1, 8), now=0.0)
    run(e, m, 5.0)
    m.observe_pods_ready("ns/g", 12.0)
    m.observe_pods_ready("ns/g", 20.0)
    e.pods_ready("ns/g")
    m.refresh(e, 30.0)
    assert val(m, "gangq_admitted_until_ready_wait_time_seconds_count", cluster_queue="a") == 1
    assert val(m, "gangq_admitted_until_ready_wait_time_seconds_sum", cluster_queue="a") == 7


def test_deleted_queue_series_disappear(m: GangqMetrics) -> None:
    e = world()
    m.refresh(e, 0.0)
    assert val(m, "gangq_pending_workloads", cluster_queue="b", status="active") == 0
    e.delete_cluster_queue("b")
    m.refresh(e, 1.0)
    assert val(m, "gangq_pending_workloads", cluster_queue="b", status="active") is None
    assert val(m, "gangq_cluster_queue_lending_limit", cluster_queue="b", flavor="a100", resource=GPU) is None
    assert val(m, "gangq_cohort_subtree_quota", cohort="pool", flavor="a100", resource=GPU) == 10
    assert val(m, "gangq_pending_workloads", cluster_queue="a", status="active") == 0


def test_stopped_queue_status() -> None:
    m = GangqMetrics(CollectorRegistry())
    e = world()
    spec = e.cluster_queues["a"].spec
    spec.stop_policy = "Hold"
    e.upsert_cluster_queue(spec)
    m.refresh(e, 0.0)
    assert val(m, "gangq_cluster_queue_status", cluster_queue="a", status="stopped") == 1
    assert val(m, "gangq_cluster_queue_status", cluster_queue="a", status="active") == 0


def test_controller_metrics(m: GangqMetrics) -> None:
    m.observe_cycle(0.003, 5)
    m.observe_cycle(0.2, 0)
    assert val(m, "gangq_scheduling_cycle_duration_seconds_count") == 2
    assert val(m, "gangq_scheduling_cycle_duration_seconds_bucket", le="0.004") == 1
    assert val(m, "gangq_scheduling_cycle_admissions_sum") == 5
    m.api_request("patch", "jobsets", 200)
    m.api_request("patch", "jobsets", 409)
    m.api_request("get", "pods", 0)
    assert val(m, "gangq_api_requests_total", verb="patch", resource="jobsets", code="409") == 1
    assert val(m, "gangq_api_requests_total", verb="get", resource="pods", code="error") == 1
    assert val(m, "gangq_api_request_errors_total", verb="patch", resource="jobsets") == 1
    assert val(m, "gangq_api_request_errors_total", verb="get", resource="pods") == 1
    m.admission_error("a", "Conflict")
    assert val(m, "gangq_admission_errors_total", cluster_queue="a", reason="Conflict") == 1
    assert val(m, "gangq_leader") == 0
    m.set_leader(True)
    assert val(m, "gangq_leader") == 1
    import gangq

    samples = [s for f in m.registry.collect() if f.name == "gangq_build_info" for s in f.samples]
    assert samples[0].labels["version"] == gangq.__version__


def test_metric_names_cover_histogram_series_and_counters() -> None:
    assert "gangq_admission_wait_time_seconds_bucket" in METRIC_NAMES
    assert "gangq_admitted_workloads_total" in METRIC_NAMES
    assert "gangq_pending_workloads" in METRIC_NAMES
    assert all(n.startswith("gangq_") for n in METRIC_NAMES)


def test_counters_of_a_new_queue_start_at_zero(m: GangqMetrics) -> None:
    """increase()/rate() need a 0 sample before the first event."""
    e = world()
    m.refresh(e, 0.0)
    assert val(m, "gangq_evicted_workloads_total", cluster_queue="a", reason="PodsReadyTimeout") == 0
    assert val(m, "gangq_preempted_workloads_total", preempting_cluster_queue="b", reason="InClusterQueue") == 0
    assert val(m, "gangq_admitted_workloads_total", cluster_queue="b") == 0
    assert val(m, "gangq_finished_workloads_total", cluster_queue="a") == 0
    assert val(m, "gangq_admission_wait_time_seconds_count", cluster_queue="a") == 0
    assert val(m, "gangq_admitted_until_ready_wait_time_seconds_count", cluster_queue="b") == 0


def test_controller_summary_reads_the_registry_and_a_scraped_page_alike(m: GangqMetrics) -> None:
    """The controller's stop log reads its registry, the Kueue baseline benchmark its /metrics page."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gangq.observability.metrics import controller_summary

    m.observe_cycle(0.002, 3)
    m.observe_cycle(0.004, 1)
    m.admitted_workloads_total.labels("a").inc(3)
    m.admitted_workloads_total.labels("b").inc()
    m.evicted_workloads_total.labels("a", "Preempted").inc()
    m.api_request("patch", "jobsets", 200)
    m.api_request("patch", "jobsets", 409)
    m.api_request("post", "events", 201)
    m.api_request("get", "jobsets", 200)  # a read: not a write
    m.workload_status_writes_total.labels("Finished").inc(2)
    m.event_queue_wait_seconds.observe(0.010)
    m.event_queue_wait_seconds.observe(0.030)
    m.gc_pause_seconds_total.labels("2").inc(0.5)
    m.eviction_confirmations_total.labels("streams").inc(3)
    m.eviction_confirmations_total.labels("read").inc()
    m.eviction_stop_duration_seconds.observe(1.5)

    summary = controller_summary(m.registry.collect())
    assert summary["cycles"] == 2
    assert summary["admissions"] == 4
    assert summary["evictions"] == 1
    assert summary["api_writes"] == {"patch jobsets": 2, "post events": 1}
    assert summary["workload_status_writes"] == {"Finished": 2}
    assert summary["mean_ms"]["event_queue_wait"] == pytest.approx(20.0)
    assert summary["mean_ms"]["scheduling_cycle"] == pytest.approx(3.0)
    assert summary["mean_ms"]["admission_patch"] is None  # nothing observed
    assert summary["admissions_per_cycle"] == pytest.approx(2.0)
    assert summary["gc_seconds_by_generation"] == {"2": 0.5}
    assert summary["eviction_confirmations"] == {"read": 1, "streams": 3}
    assert summary["mean_ms"]["eviction_stop"] == pytest.approx(1500.0)
    scraped = controller_summary(text_string_to_metric_families(generate_latest(m.registry).decode()))
    assert scraped == summary


def test_engine_retries_are_counted_per_reason(m: GangqMetrics) -> None:
    """A finish gives quota back: its queue and the rest of its cohort tree are retried, and the
    counter says so under the reason's name; every reason is exported, zeros too."""
    e = world()
    e.submit(gang("first", "a", 1, 8), now=0.0)
    e.submit(gang("second", "a", 1, 8), now=0.0)
    e.submit(gang("third", "a", 1, 8), now=0.0)
    run(e, m, 1.0)
    assert val(m, "gangq_engine_retries_total", reason="quota_released") == 0
    assert val(m, "gangq_engine_retries_total", reason="preemptors_first") == 0
    e.finish("ns/first", 5.0)
    run(e, m, 5.0)
    released = val(m, "gangq_engine_retries_total", reason="quota_released")
    assert released is not None and released >= 1
    assert released == e.retry_counts()["quota_released"]
    # A new engine (the controller rebuilt its state) counts from zero: the counter never goes back.
    fresh = world()
    m.refresh(fresh, 6.0)
    assert val(m, "gangq_engine_retries_total", reason="quota_released") == released
