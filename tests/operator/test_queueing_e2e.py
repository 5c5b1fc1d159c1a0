"""Quota, cohort borrowing, priority order, StrictFIFO vs BestEffortFIFO, namespace isolation, bad
input: end to end through the controller on the sandbox (quota only: no nodes, no pods)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gangq.operator.operator import OperatorThread
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
    namespace,
    start_operator,
    wait_for,
    workload_status,
)


@contextmanager
def quota_cluster(cluster_factory: Callable[..., Cluster]) -> Iterator[tuple[Cluster, FakeJobSetRunner]]:
    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [flavor("default")])
    op: OperatorThread = start_operator(sb)
    try:
        with FakeJobSetRunner(sb, pods=False) as runner:
            yield sb, runner
    finally:
        op.stop()


def pending_reason(sb: Cluster, name: str, ns: str = "default") -> str | None:
    return workload_status(sb, name, ns).get("reason")


def test_quota_and_cohort_borrowing(cluster_factory: Callable[..., Cluster]) -> None:
    with quota_cluster(cluster_factory) as (sb, runner):
        apply(sb, [
            cluster_queue("a", {"cpu": 4}, cohort="pool", admission_mode="QuotaOnly"),
            cluster_queue("b", {"cpu": 4}, cohort="pool", admission_mode="QuotaOnly"),
            cluster_queue("solo", {"cpu": 4}, admission_mode="QuotaOnly"),
            local_queue("qa", "a"), local_queue("qsolo", "solo"),
        ])
        # a borrows b's idle quota: 3 + 3 cpu fit in 4 + 4, the third does not
        for name in ("a1", "a2", "a3"):
            apply(sb, [jobset(name, "qa", requests={"cpu": 3}, run_seconds=3.0 if name != "a3" else 0.3)])
        # a queue without a cohort cannot borrow: only one of two fits
        for name in ("s1", "s2"):
            apply(sb, [jobset(name, "qsolo", requests={"cpu": 3}, run_seconds=1.5)])
        wait_for(lambda: admitted(sb, "a1") and admitted(sb, "a2") and admitted(sb, "s1"), 10, "admissions")
        wait_for(lambda: pending_reason(sb, "a3") == "InsufficientQuota", 10, "a3's pending reason")
        assert not admitted(sb, "a3") and not admitted(sb, "s2")
        status = workload_status(sb, "a3")
        assert status["state"] == "Pending" and status["clusterQueue"] == "a"
        assert "cpu" in status["message"] and status["position"] == 1
        assert condition(status, "QuotaReserved")["status"] == "False"
        wait_for(lambda: pending_reason(sb, "s2") == "InsufficientQuota", 10, "s2's pending reason")
        cq = wait_for(lambda: (c := get(sb, "ClusterQueue", "a", None)) and (c.get("status") or {}).get(
            "admittedWorkloads") == 2 and c["status"].get("pendingWorkloads") == 1 and c, 5, "ClusterQueue a status")
        usage = cq["status"]["flavorsUsage"][0]["resources"][0]
        assert usage == {"name": "cpu", "total": "6", "borrowed": "2"}
        assert cq["status"]["pendingWorkloads"] == 1
        wait_for(lambda: all(finished(sb, n) for n in ("a1", "a2", "a3", "s1", "s2")), 20, "all to finish")
        assert runner.unsuspends == {f"default/{n}": 1 for n in ("a1", "a2", "a3", "s1", "s2")}


def test_priority_order(cluster_factory: Callable[..., Cluster]) -> None:
    with quota_cluster(cluster_factory) as (sb, runner):
        apply(sb, [
            cluster_queue("cq", {"cpu": 1}, admission_mode="QuotaOnly"), local_queue("q", "cq"),
            {"apiVersion": "gangq.io/v1alpha1", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
             "value": 1000},
            {"apiVersion": "gangq.io/v1alpha1", "kind": "WorkloadPriorityClass", "metadata": {"name": "low"},
             "value": 10},
        ])
        apply(sb, [jobset("blocker", "q", run_seconds=1.0)])
        wait_for(lambda: admitted(sb, "blocker"), 10, "blocker")
        apply(sb, [jobset("low-1", "q", priority_class="low", run_seconds=0.2)])
        apply(sb, [jobset("low-2", "q", priority_class="low", run_seconds=0.2)])
        apply(sb, [jobset("high", "q", priority_class="high", run_seconds=0.2)])
        wait_for(lambda: all(finished(sb, n) for n in ("blocker", "low-1", "low-2", "high")), 20, "all to finish")
        assert runner.order == ["default/blocker", "default/high", "default/low-1", "default/low-2"]
        wl = get(sb, "Workload", "jobset-high")
        assert wl is not None and wl["spec"]["priority"] == 1000 and wl["spec"]["priorityClassName"] == "high"


def test_strict_fifo_blocks_best_effort_lets_small_pass(cluster_factory: Callable[..., Cluster]) -> None:
    with quota_cluster(cluster_factory) as (sb, runner):
        apply(sb, [
            cluster_queue("strict", {"cpu": 4}, strategy="StrictFIFO", admission_mode="QuotaOnly"),
            cluster_queue("besteffort", {"cpu": 4}, strategy="BestEffortFIFO", admission_mode="QuotaOnly"),
            local_queue("qs", "strict"), local_queue("qb", "besteffort"),
        ])
        for q, prefix in (("qs", "s"), ("qb", "b")):
            apply(sb, [jobset(f"{prefix}-blocker", q, requests={"cpu": 3}, run_seconds=1.5)])
        wait_for(lambda: admitted(sb, "s-blocker") and admitted(sb, "b-blocker"), 10, "blockers")
        for q, prefix in (("qs", "s"), ("qb", "b")):
            apply(sb, [jobset(f"{prefix}-big", q, requests={"cpu": 4}, run_seconds=0.2)])
            apply(sb, [jobset(f"{prefix}-small", q, requests={"cpu": 1}, run_seconds=0.2)])
        wait_for(lambda: admitted(sb, "b-small") or finished(sb, "b-small"), 10, "best effort: small passes")
        assert not admitted(sb, "s-small") and not finished(sb, "s-small")
        assert not finished(sb, "s-blocker")
        status = wait_for(lambda: workload_status(sb, "s-small"), 10, "strict: small's Workload")
        assert status["state"] == "Pending" and status["position"] == 2  # behind the big head
        wait_for(lambda: all(finished(sb, f"{p}-{n}") for p in "sb" for n in ("blocker", "big", "small")), 20,
                 "all to finish")
        order = runner.order
        assert order.index("default/s-big") < order.index("default/s-small")
        assert order.index("default/b-small") < order.index("default/b-big")


def test_namespace_isolation_and_bad_input(cluster_factory: Callable[..., Cluster]) -> None:
    with quota_cluster(cluster_factory) as (sb, _runner):
        namespace(sb, "team-a", {"team": "a"})
        namespace(sb, "team-b", {"team": "b"})
        apply(sb, [
            cluster_queue("cq-a", {"cpu": 8}, admission_mode="QuotaOnly",
                          namespace_selector={"matchLabels": {"team": "a"}}),
            local_queue("q", "cq-a", "team-a"), local_queue("q", "cq-a", "team-b"),
            cluster_queue("broken", {"cpu": 8}, flavor="no-such-flavor"), local_queue("qbroken", "broken"),
            cluster_queue("tiny", {"cpu": 1}, admission_mode="QuotaOnly"), local_queue("qtiny", "tiny"),
        ])
        apply(sb, [jobset("ok", "q", ns="team-a"), jobset("sneaky", "q", ns="team-b", run_seconds=0.2)])
        apply(sb, [jobset("lost", "no-such-queue"), jobset("too-big", "qtiny", requests={"cpu": 2}),
                   jobset("inactive", "qbroken"),
                   jobset("malformed", "qtiny", annotations={"gangq.io/min-member": "many"}),
                   jobset("eager", "qtiny", suspend=False, run_seconds=0.2),
                   jobset("eager-waits", "qbroken", suspend=False)])
        wait_for(lambda: finished(sb, "ok", "team-a"), 10, "team-a's JobSet")
        wait_for(lambda: pending_reason(sb, "sneaky", "team-b") == "NamespaceNotSelected", 10, "isolation")
        wait_for(lambda: pending_reason(sb, "lost") == "LocalQueueNotFound", 10, "unknown queue")
        wait_for(lambda: pending_reason(sb, "too-big") == "NeverFits", 10, "gang bigger than the queue")
        wait_for(lambda: pending_reason(sb, "inactive") == "ClusterQueueInactive", 10, "inactive queue")
        status = wait_for(lambda: (s := workload_status(sb, "malformed")) and s.get("state") == "Inadmissible" and s,
                          10, "malformed annotation reported")
        assert "metadata.annotations[gangq.io/min-member]" in status["message"]
        wait_for(lambda: finished(sb, "eager"), 10, "the JobSet that arrived unsuspended")
        js = get(sb, "JobSet", "eager")
        assert js is not None and "gangq.io/admission" in js["metadata"]["annotations"]
        # arrived unsuspended into a queue that cannot admit it: gangq suspends it
        wait_for(lambda: (j := get(sb, "JobSet", "eager-waits")) and j["spec"]["suspend"] is True, 10,
                 "the unsuspended arrival to be suspended")
        cq = wait_for(lambda: (c := get(sb, "ClusterQueue", "broken", None)) and (c.get("status") or {}).get(
            "conditions") and c, 5, "inactive ClusterQueue status")
        active = condition(cq["status"], "Active")
        assert active["status"] == "False" and "no-such-flavor" in active["message"]
        assert not admitted(sb, "sneaky", "team-b")
