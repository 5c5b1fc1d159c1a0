"""Whole gangs on nodes, preemption and reclaim, pods-ready timeout: end to end on the sandbox with
its scheduler and kubelet running the gangs' pods."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

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
    operator_config,
    start_operator,
    wait_for,
    workload_status,
)


@contextmanager
def gang_cluster(
    cluster_factory: Callable[..., Cluster], nodes: str, docs: list[dict[str, Any]], **config: Any
) -> Iterator[tuple[Cluster, FakeJobSetRunner]]:
    sb = cluster_factory(nodes=nodes)
    install(sb)
    apply(sb, [flavor("default"), *docs])
    op = start_operator(sb, operator_config(**config))
    try:
        with FakeJobSetRunner(sb) as runner:
            yield sb, runner
    finally:
        op.stop()


def running_pods(sb: Cluster, name: str) -> int:
    pods = sb.call(sb.store.list, "", "pods", "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
    return sum(1 for p in pods["items"] if p["status"].get("phase") == "Running")


def test_fragmented_nodes_wait_instead_of_half_running(cluster_factory: Callable[..., Cluster]) -> None:
    docs = [cluster_queue("cq", {"cpu": 8}), local_queue("q", "cq")]
    with gang_cluster(cluster_factory, "2x{cpu:4,memory:16Gi}", docs) as (sb, runner):
        apply(sb, [jobset("first", "q", replicas=2, requests={"cpu": 3}, run_seconds=1.5)])
        wait_for(lambda: running_pods(sb, "first") == 2, 10, "the first gang to run, one pod per node")
        # quota has 2 cpu left and each node 1: a 2-pod gang of 1 cpu fits the quota and the nodes,
        # a 1-pod gang of 2 cpu fits the quota but no node: it must wait, not run half-placed
        apply(sb, [jobset("wide", "q", replicas=1, requests={"cpu": 2}, run_seconds=0.3)])
        status = wait_for(lambda: (s := workload_status(sb, "wide")) and s.get("reason") == "InsufficientNodes" and s,
                          10, "wide to wait for nodes")
        assert status["state"] == "Pending"
        assert not admitted(sb, "wide")
        wait_for(lambda: finished(sb, "wide"), 15, "wide to run after first")
        assert runner.order == ["default/first", "default/wide"]


def test_oversubscribed_two_gangs_run_one_then_the_other(cluster_factory: Callable[..., Cluster]) -> None:
    # Quota for both, nodes for one: kube-scheduler alone binds half of each gang and both hang.
    docs = [cluster_queue("cq", {"cpu": 64, "nvidia.com/gpu": 16}), local_queue("q", "cq")]
    with gang_cluster(cluster_factory, "2x{cpu:16,memory:64Gi,nvidia.com/gpu:4}", docs) as (sb, runner):
        req = {"cpu": 2, "nvidia.com/gpu": 4}
        apply(sb, [jobset("gang-a", "q", replicas=2, requests=req, run_seconds=1.0),
                   jobset("gang-b", "q", replicas=2, requests=req, run_seconds=1.0)])
        wait_for(lambda: finished(sb, "gang-a") and finished(sb, "gang-b"), 20, "both gangs to complete")
        assert runner.max_running == {"default/gang-a": 2, "default/gang-b": 2}
        assert runner.pods_peak == 2  # never pods of both gangs at once
        assert runner.unsuspends == {"default/gang-a": 1, "default/gang-b": 1}


def test_preemption_within_queue_and_reclaim_within_cohort(cluster_factory: Callable[..., Cluster]) -> None:
    pre = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    docs = [
        cluster_queue("a", {"cpu": 4}, cohort="pool", preemption=pre, borrowing_limit={"cpu": 4}),
        cluster_queue("b", {"cpu": 4}, cohort="pool", preemption=pre, borrowing_limit={"cpu": 4}),
        local_queue("qa", "a"), local_queue("qb", "b"),
        {"apiVersion": "gangq.io/v1alpha1", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
         "value": 100},
    ]
    # Preempting at once: the gangs preempted here would end on their own within the default delay.
    with gang_cluster(cluster_factory, "2x{cpu:4,memory:16Gi}", docs, preemption={"delaySeconds": 0}) as (sb, runner):
        # b borrows a's idle quota with a low-priority gang; then a wants its quota back
        apply(sb, [jobset("borrower", "qb", replicas=2, requests={"cpu": 3}, run_seconds=2.0)])
        wait_for(lambda: running_pods(sb, "borrower") == 2, 10, "the borrower to run")
        apply(sb, [jobset("owner", "qa", replicas=1, requests={"cpu": 3}, run_seconds=0.5)])
        status = wait_for(lambda: (s := workload_status(sb, "borrower")) and condition(s, "Preempted") and s,
                          10, "the borrower to be reclaimed")
        assert condition(status, "Preempted")["reason"] == "InCohortReclamation"
        assert condition(status, "Evicted")["reason"] == "Preempted"
        # the suspending patch itself says why: no Event or status write can be lost in between
        record = json.loads((get(sb, "JobSet", "borrower") or {})["metadata"]["annotations"]["gangq.io/eviction"])
        assert record["reason"] == "Preempted" and "owner" in record["message"], record
        wait_for(lambda: finished(sb, "owner"), 10, "the owner to run")
        wait_for(lambda: finished(sb, "borrower"), 20, "the borrower to resume and finish")
        assert runner.unsuspends["default/borrower"] == 2
        borrower = get(sb, "JobSet", "borrower")
        assert borrower is not None

        # within a queue: a high-priority gang preempts a low-priority one of the same queue
        # (b's own gang uses b's quota, so a cannot borrow it)
        apply(sb, [jobset("low", "qa", replicas=2, requests={"cpu": 1}, run_seconds=2.0),
                   jobset("filler", "qb", replicas=2, requests={"cpu": 2}, run_seconds=2.0)])
        wait_for(lambda: running_pods(sb, "low") == 2 and running_pods(sb, "filler") == 2, 10, "low and filler")
        apply(sb, [jobset("urgent", "qa", replicas=2, requests={"cpu": 2}, run_seconds=0.3, priority_class="high")])
        status = wait_for(lambda: (s := workload_status(sb, "low")) and condition(s, "Preempted") and s, 10,
                          "low to be preempted")
        assert condition(status, "Preempted")["reason"] == "InClusterQueue", status
        wait_for(lambda: all(finished(sb, n) for n in ("urgent", "low", "filler")), 25, "all to finish")
        assert runner.order.index("default/urgent") < len(runner.order)
        assert runner.unsuspends["default/low"] == 2 and runner.unsuspends["default/urgent"] == 1
        events = sb.call(sb.store.list, "", "events", "default", field_selector="reason=Preempted")["items"]
        assert {e["involvedObject"]["name"] for e in events} >= {"borrower", "low"}


def test_pods_ready_timeout_evicts_and_requeues_after_backoff(cluster_factory: Callable[..., Cluster]) -> None:
    docs = [cluster_queue("cq", {"cpu": 8}), local_queue("q", "cq")]
    pods_ready = {"enable": True, "timeoutSeconds": 1.0, "backoffBaseSeconds": 1.0, "backoffMaxSeconds": 2.0}
    with gang_cluster(cluster_factory, "2x{cpu:4,memory:16Gi}", docs, podsReady=pods_ready) as (sb, runner):
        # its pods take 30 s to start: never ready within 1 s
        apply(sb, [jobset("slow", "q", replicas=2, requests={"cpu": 1}, start_delay=30)])
        status = wait_for(lambda: (s := workload_status(sb, "slow")) and (s.get("requeueState") or {}).get(
            "count", 0) >= 1 and s, 10, "a pods-ready timeout")
        assert condition(status, "Evicted")["reason"] == "PodsReadyTimeout"
        wait_for(lambda: runner.unsuspends.get("default/slow", 0) >= 2, 10, "readmission after the backoff")
        status = wait_for(lambda: (s := workload_status(sb, "slow")) and (s.get("requeueState") or {}).get(
            "count", 0) >= 2 and s, 10, "a second timeout")
        # a gang whose pods run is not evicted
        apply(sb, [jobset("fast", "q", replicas=2, requests={"cpu": 1}, run_seconds=2.0)])
        wait_for(lambda: finished(sb, "fast"), 10, "the fast gang")
        fast = workload_status(sb, "fast")
        assert condition(fast, "PodsReady")["status"] == "True" and condition(fast, "Evicted") is None
        assert runner.unsuspends["default/fast"] == 1
