"""Recovery on a complete view, end to end on both control planes: a controller that restarts
while the API server fails some of its lists waits for every list to succeed, and never stops a
running gang because it could not read its ClusterQueue."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clusters import ControllerFaults
from tests.operator.helpers import (
    Cluster,
    FakeJobSetRunner,
    admitted,
    apply,
    cluster_queue,
    condition,
    finished,
    flavor,
    get,
    install,
    jobset,
    local_queue,
    operator_thread,
    start_operator,
    wait_for,
    workload_status,
)


@pytest.fixture
def faulty(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> Iterator[tuple[Cluster, ControllerFaults]]:
    sb = cluster_factory(cluster=False)
    faults = ControllerFaults(sb, tmp_path)
    try:
        yield sb, faults
    finally:
        faults.close()


@pytest.mark.parametrize("resource", ["clusterqueues.gangq.io", "resourceflavors.gangq.io"])
def test_a_restart_during_failing_lists_keeps_the_running_gang_running(
    faulty: tuple[Cluster, ControllerFaults], resource: str
) -> None:
    """The list of ClusterQueues (or flavors) answers 503 while the new leader recovers: before,
    recovery went on without them, found the admitted JobSet's queue missing and suspended it —
    its pods terminated by a blip. Now it retries until it has every list, then restores."""
    sb, faults = faulty
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 4}, admission_mode="QuotaOnly"), local_queue("q", "cq")])
    with FakeJobSetRunner(sb, pods=False) as runner:
        first = start_operator(sb, identity="first")
        apply(sb, [jobset("training", "q", requests={"cpu": 4}, run_seconds=120)])
        wait_for(lambda: admitted(sb, "training"), 15, "the gang to be admitted")
        first.kill()  # a crash: the Lease stays until it expires
        faults.add_rule("list", resource, error_rate=1.0, code=503)
        second = operator_thread(sb, identity="second", kubeconfig=faults.kubeconfig)
        try:
            wait_for(lambda: second.controller is not None, 20, "the new replica to be elected")
            # longer than one request's own retries (6 attempts over about 6 s): recovery itself must wait
            wait_for(lambda: faults.requests("list", resource, 503) >= 7, 30, "the failing list to be retried")
            assert not second.leading, "recovered without the failing list"
            assert admitted(sb, "training")
            faults.clear()
            wait_for(lambda: second.leading, 20, "recovery once the list succeeds")
            assert second.controller is not None
            view = second.call(lambda: second.controller.engine.workload("default/training"))
            assert view is not None and view.state == "Admitted"
            time.sleep(1.0)  # a suspension would be written right after recovery
            js = get(sb, "JobSet", "training")
            assert js is not None and js["spec"]["suspend"] is False
            assert runner.unsuspends == {"default/training": 1}  # never suspended and unsuspended again
        finally:
            second.stop()


def test_a_failing_scheduling_cycle_crashes_the_leader_and_the_standby_takes_over(
    cluster_factory: Callable[..., Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crash-only: an exception inside a cycle ends the leader (it does not go on with a
    half-changed engine); it gives its Lease up, the standby recovers from the API, keeps the
    running gang as it was, and admits the next one."""
    from gangq.operator.operator import ControllerCrashed
    from gangq.operator.state import ControllerState

    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 4}, admission_mode="QuotaOnly"), local_queue("q", "cq")])
    schedule = ControllerState.schedule
    fail_once: list[str] = []

    def failing(self: ControllerState, now: float) -> object:
        if fail_once:
            fail_once.pop()
            raise RuntimeError("a bug in the engine")
        return schedule(self, now)

    monkeypatch.setattr(ControllerState, "schedule", failing)
    with FakeJobSetRunner(sb, pods=False) as runner:
        first = start_operator(sb, identity="first")
        second = operator_thread(sb, identity="second")
        try:
            apply(sb, [jobset("running", "q", requests={"cpu": 2}, run_seconds=120)])
            wait_for(lambda: admitted(sb, "running"), 15, "the first gang to be admitted")
            fail_once.append("next cycle")
            apply(sb, [jobset("next", "q", requests={"cpu": 2}, run_seconds=120)])  # wakes a cycle
            wait_for(lambda: first.error is not None, 15, "the leader to crash")
            assert isinstance(first.error, ControllerCrashed)
            wait_for(lambda: second.leading, 10, "the standby to take over at once (the Lease was released)")
            wait_for(lambda: admitted(sb, "next"), 15, "the new leader to admit the next gang")
            wait_for(lambda: "default/next" in runner.unsuspends, 5, "the runner to see it run")
            assert runner.unsuspends == {"default/running": 1, "default/next": 1}
        finally:
            second.stop()
            first.stop()


def test_a_gang_over_a_quota_that_shrank_during_a_restart_keeps_running_and_is_reported(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """The admin lowers the quota while the controller is down: the running gang is restored over
    quota (its pods use those resources), not suspended, and its Workload and an Event say so."""
    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 4}, admission_mode="QuotaOnly"), local_queue("q", "cq")])
    with FakeJobSetRunner(sb, pods=False) as runner:
        first = start_operator(sb, identity="first")
        apply(sb, [jobset("training", "q", requests={"cpu": 4}, run_seconds=120)])
        wait_for(lambda: admitted(sb, "training"), 15, "the gang to be admitted")
        first.stop()
        lowered = cluster_queue("cq", {"cpu": 2}, admission_mode="QuotaOnly")["spec"]
        sb.call(sb.store.patch, "gangq.io", "clusterqueues", None, "cq", {"spec": lowered}, "merge")
        second = start_operator(sb, identity="second")
        try:
            status = wait_for(lambda: (s := workload_status(sb, "training")) and condition(s, "OverQuota") and s,
                              10, "the Workload to say it runs over quota")
            over = condition(status, "OverQuota")
            assert over["status"] == "True" and over["reason"] == "RestoredOverQuota"
            assert "4 cpu in flavor default" in over["message"], over
            assert status["state"] == "Admitted"
            events = sb.call(sb.store.list, "", "events", "default")["items"]
            assert any(e["reason"] == "RestoredOverQuota" and e["involvedObject"]["name"] == "training"
                       for e in events)
            apply(sb, [jobset("small", "q", requests={"cpu": 1}, run_seconds=1)])
            time.sleep(1.0)
            assert not admitted(sb, "small")  # the queue is over its quota: nothing more until it is within
            js = get(sb, "JobSet", "training")
            assert js is not None and js["spec"]["suspend"] is False
            assert runner.unsuspends == {"default/training": 1}
        finally:
            second.stop()


def test_a_cluster_queue_deleted_with_a_running_gang_stays_until_it_is_done(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Deleting a ClusterQueue while a gang runs in it: the queue stays (deleting, admitting
    nothing) until the gang is done, also across a restart of the controller, which therefore
    still finds the queue the gang's admission names and keeps it running; then it goes."""
    from gangq.operator.translate import CQ_FINALIZER

    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 4}, admission_mode="QuotaOnly"), local_queue("q", "cq")])

    def queue() -> dict[str, Any] | None:
        return get(sb, "ClusterQueue", "cq", None)

    with FakeJobSetRunner(sb, pods=False) as runner:
        first = start_operator(sb, identity="first")
        try:
            wait_for(lambda: CQ_FINALIZER in ((queue() or {}).get("metadata", {}).get("finalizers") or []), 10,
                     "the finalizer on the ClusterQueue")
            apply(sb, [jobset("training", "q", requests={"cpu": 2}, run_seconds=8)])
            wait_for(lambda: admitted(sb, "training"), 15, "the gang to be admitted")
            sb.call(sb.store.delete, "gangq.io", "clusterqueues", None, "cq")
            apply(sb, [jobset("late", "q", requests={"cpu": 1}, run_seconds=1)])
            time.sleep(1.0)
            assert (queue() or {}).get("metadata", {}).get("deletionTimestamp"), "the queue went at once"
            assert not admitted(sb, "late")  # a deleting queue admits nothing
        finally:
            first.stop()
        second = start_operator(sb, identity="second")  # recovers while the queue is deleting
        try:
            time.sleep(1.0)
            assert admitted(sb, "training") and queue() is not None
            wait_for(lambda: queue() is None, 20, "the queue to go once its gang is done")
            assert finished(sb, "training") and not admitted(sb, "late")
            assert runner.unsuspends == {"default/training": 1}  # never suspended
        finally:
            second.stop()


def test_a_gang_evicted_just_before_a_restart_keeps_its_quota_until_its_pods_are_gone(
        cluster_factory: Callable[..., Cluster]) -> None:
    """The leader suspends a preempted gang and dies before its pods are gone. Before, the new
    leader saw a suspended JobSet without an admission, queued it and gave its quota to the
    preemptor while the victim's pods still ran; now the eviction record names the admission and
    the quota stays held until the pods end."""
    import json

    sb = cluster_factory(nodes="1x{cpu:8,memory:32Gi}")
    install(sb)
    pre = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Never"}
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 4}, preemption=pre), local_queue("q", "cq"),
               {"apiVersion": "gangq.io/v1alpha1", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
                "value": 100}])

    def pods_running(name: str) -> int:
        pods = sb.call(sb.store.list, "", "pods", "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
        return sum(1 for p in pods["items"] if p["status"].get("phase") == "Running")

    first = start_operator(sb, identity="first")
    try:
        with FakeJobSetRunner(sb):
            apply(sb, [jobset("victim", "q", replicas=2, requests={"cpu": 2}, run_seconds=600)])
            wait_for(lambda: pods_running("victim") == 2, 20, "the victim's pods to run")
        # nothing stops the victim's pods from here on: they outlive the controller that evicts it
        apply(sb, [jobset("urgent", "q", replicas=2, requests={"cpu": 2}, run_seconds=1, priority_class="high")])
        victim = wait_for(lambda: (j := get(sb, "JobSet", "victim")) and j["spec"].get("suspend") and j, 15,
                          "the victim to be suspended")
        record = json.loads(victim["metadata"]["annotations"]["gangq.io/eviction"])
        assert record["reason"] == "Preempted" and record["admission"]["clusterQueue"] == "cq", record
    finally:
        first.stop()
    second = start_operator(sb, identity="second")
    try:
        time.sleep(3)  # recovery, then cycles: the victim's quota must stay held while its pods run
        assert pods_running("victim") == 2
        assert not admitted(sb, "urgent")
        with FakeJobSetRunner(sb):  # stops the suspended victim's pods
            wait_for(lambda: admitted(sb, "urgent"), 20, "the preemptor once the victim's pods are gone")
    finally:
        second.stop()


def test_a_leader_that_cannot_renew_its_lease_stops_and_says_so(faulty: tuple[Cluster, ControllerFaults]) -> None:
    """Renewals answered 503: the leader stops within its renew deadline (two thirds of the Lease),
    before another replica may take the Lease, and ends with an error (``gangq run`` exits
    non-zero: a restart an SRE sees, not a clean exit)."""
    from gangq.operator.operator import LeadershipLost

    sb, faults = faulty
    install(sb)
    op = operator_thread(sb, identity="renewer", kubeconfig=faults.kubeconfig)
    wait_for(lambda: op.leading, 20, "the replica to lead")
    failing_since = time.monotonic()
    for verb in ("get", "update"):
        faults.add_rule(verb, "leases.coordination.k8s.io", error_rate=1.0, code=503)
    try:
        wait_for(lambda: op.error is not None, 10, "the leader to stop")
        stopped_after = time.monotonic() - failing_since
        assert isinstance(op.error, LeadershipLost), repr(op.error)
        # Lease of 2 s, renewed every 0.5 s: stopped before a standby could take it over (2 s after
        # the last renewal), with room for the thread's own shutdown
        assert stopped_after < 2.0 + 1.5, stopped_after
    finally:
        faults.clear()
        op.stop()
