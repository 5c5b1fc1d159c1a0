"""batch/v1 Jobs through the queue, end to end on both control planes (the sandbox's Job controller
and kubelet; kube-controller-manager's Job controller and kwok): a labelled Job is a gang of its
parallel pods, held suspended until the whole gang fits its ClusterQueue's quota, and one that
arrived unsuspended is suspended on first sight — reported when its pods had already started."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.operator.helpers import (
    Cluster,
    apply,
    cluster_queue,
    flavor,
    get,
    install,
    local_queue,
    namespace,
    operator_config,
    start_operator,
    wait_for,
)

GPU = "nvidia.com/gpu"


def job(name: str, queue: str | None, *, pods: int = 2, gpus: int = 4, run_seconds: float = 2.0,
        suspend: bool = True, ns: str = "default") -> dict[str, Any]:
    labels = {"gangq.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "suspend": suspend, "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"sandbox.gangq.io/run-seconds": str(run_seconds)}},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "train", "image": "trainer",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)},
                                  "limits": {GPU: str(gpus)}}}]},
            },
        },
    }


def jobs(sb: Cluster, ns: str = "default") -> dict[str, dict[str, Any]]:
    return {j["metadata"]["name"]: j for j in sb.call(sb.store.list, "batch", "jobs", ns)["items"]}


def running_pods(sb: Cluster) -> dict[str, int]:
    out: dict[str, int] = {}
    for pod in sb.call(sb.store.list, "", "pods", "default")["items"]:
        name = (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")
        if name and pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"):
            out[name] = out.get(name, 0) + 1
    return out


def complete(j: dict[str, Any]) -> bool:
    return any(c.get("type") == "Complete" and c.get("status") == "True"
               for c in (j.get("status") or {}).get("conditions") or [])


def test_three_jobs_share_a_quota_for_two_and_the_third_runs_after_one_finishes(
        cluster_factory: Callable[..., Cluster]) -> None:
    """2 pods × 4 GPUs each in a 16-GPU ClusterQueue on 32 GPUs of nodes: the quota, not the
    nodes, binds; at most two Jobs run at any time, each as a whole gang."""
    sb = cluster_factory(nodes="4x{cpu:16,memory:64Gi,nvidia.com/gpu:8}")
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 32, "memory": "128Gi", GPU: 16}),
               local_queue("q", "cq")])
    op = start_operator(sb, operator_config())
    try:
        apply(sb, [job(f"train-{i}", "q", run_seconds=4) for i in range(3)])
        most_running, gang_sizes, finished_at, started_at = 0, set(), {}, {}
        deadline = time.monotonic() + 90
        while len(finished_at) < 3 and time.monotonic() < deadline:
            running = running_pods(sb)
            current = jobs(sb)
            unsuspended = [n for n, j in current.items() if not j["spec"].get("suspend") and not complete(j)]
            most_running = max(most_running, len(unsuspended))
            gang_sizes.update(running.values())
            now = time.monotonic()
            for name in unsuspended:
                started_at.setdefault(name, now)
            for name, j in current.items():
                if complete(j):
                    finished_at.setdefault(name, now)
            time.sleep(0.1)
        assert len(finished_at) == 3, (finished_at, {n: j.get("status") for n, j in jobs(sb).items()})
        assert most_running == 2
        last = max(started_at, key=lambda n: started_at[n])
        assert started_at[last] >= min(finished_at.values()) - 0.5, (started_at, finished_at)
        assert gang_sizes <= {1, 2}
        admission = jobs(sb)[last]["metadata"]["annotations"]["gangq.io/admission"]
        assert '"clusterQueue": "cq"' in admission or '"clusterQueue":"cq"' in admission
        workload = get(sb, "Workload", f"job-{last}")
        assert workload is not None and workload["spec"]["podSets"][0]["name"] == "main"
        assert workload["spec"]["podSets"][0]["count"] == 2
        owner = workload["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Job", last)
    finally:
        op.stop()


def test_an_unsuspended_job_is_suspended_on_first_sight_and_a_started_one_reported(
        cluster_factory: Callable[..., Cluster]) -> None:
    """Without the webhook a labelled Job may start before gangq sees it: gangq suspends it, says on
    the Job (Event) and in /metrics that it ran outside the quota, charges its queue until its pods
    are gone, and then queues it."""
    sb = cluster_factory(nodes="2x{cpu:16,memory:64Gi,nvidia.com/gpu:8}")
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 32, "memory": "128Gi", GPU: 4}),
               local_queue("q", "cq")])
    # Starts before the controller runs: its pods run outside every quota (8 GPUs, the queue has 4).
    apply(sb, [job("early", "q", pods=2, gpus=4, run_seconds=600, suspend=False)])
    wait_for(lambda: running_pods(sb).get("early") == 2, 30, "the early Job's pods to run")
    op = start_operator(sb, operator_config())
    try:
        wait_for(lambda: jobs(sb)["early"]["spec"].get("suspend") is True, 15, "gangq to suspend the early Job")
        wait_for(lambda: not running_pods(sb).get("early"), 30, "its pods to stop")
        def reported() -> bool:  # an Event is a background write: it may follow the suspension
            events = sb.call(sb.store.list, "", "events", "default")["items"]
            return any(e.get("reason") == "StartedBeforeAdmission" and e["involvedObject"]["name"] == "early"
                       and e["involvedObject"]["kind"] == "Job" for e in events)

        wait_for(reported, 15, "the StartedBeforeAdmission Event")
        # charged to its queue until its pods are gone, then queued: it never fits the 4-GPU queue
        wait_for(lambda: ((get(sb, "Workload", "job-early") or {}).get("status") or {}).get("reason") == "NeverFits",
                 30, "the early Job's Workload to say NeverFits once its pods are gone")
        assert not [p for p in sb.call(sb.store.list, "", "pods", "default")["items"]
                    if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == "early"
                    and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        # queued like any other: admitted as one gang once it fits
        bigger = cluster_queue("cq", {"cpu": 32, "memory": "128Gi", GPU: 8})
        sb.call(sb.store.patch, "gangq.io", "clusterqueues", None, "cq",
                {"spec": {"resourceGroups": bigger["spec"]["resourceGroups"]}}, "merge")
        wait_for(lambda: running_pods(sb).get("early") == 2 and "gangq.io/admission" in (
            jobs(sb)["early"]["metadata"].get("annotations") or {}), 30, "the Job to be admitted and run again")
        # a Job of a JobSet, and a Job without a queue label, are left alone
        apply(sb, [job("unqueued", None, pods=1, gpus=0, run_seconds=1, suspend=False)])
        wait_for(lambda: complete(jobs(sb)["unqueued"]), 30, "the unqueued Job to run as it is")
        assert "gangq.io/admission" not in (jobs(sb)["unqueued"]["metadata"].get("annotations") or {})
    finally:
        op.stop()


def test_a_job_without_a_queue_label_goes_to_its_namespaces_default_queue(
        cluster_factory: Callable[..., Cluster]) -> None:
    """manageJobsWithoutQueueName: a forgotten label is no way around the queue. In a namespace
    with a LocalQueue ``default`` the Job is queued there; in one without, it waits, suspended,
    saying how to submit it."""
    sb = cluster_factory(nodes="2x{cpu:16,memory:64Gi,nvidia.com/gpu:8}")
    install(sb)
    namespace(sb, "team")
    namespace(sb, "lab")
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 32, "memory": "128Gi", GPU: 16}),
               local_queue("default", "cq", ns="team")])
    op = start_operator(sb, operator_config(manageJobsWithoutQueueName=True))
    try:
        apply(sb, [job("plain", None, run_seconds=1, suspend=False, ns="team"),
                   job("stray", None, run_seconds=1, suspend=False, ns="lab")])
        wait_for(lambda: complete(jobs(sb, "team").get("plain") or {}), 30,
                 "the unlabelled Job to run through 'default'")
        admission = (jobs(sb, "team")["plain"]["metadata"].get("annotations") or {}).get("gangq.io/admission") or ""
        assert "cq" in admission, jobs(sb, "team")["plain"]["metadata"]
        workload = wait_for(lambda: get(sb, "Workload", "job-plain", "team"), 10, "its Workload")
        assert workload["spec"]["queueName"] == "default"
        status = wait_for(lambda: ((get(sb, "Workload", "job-stray", "lab") or {}).get("status") or {}).get(
            "reason") == "LocalQueueNotFound" and get(sb, "Workload", "job-stray", "lab")["status"], 15,
            "the stray Job's reason")
        assert "gangq.io/queue-name" in status["message"] and "LocalQueue 'default'" in status["message"], status
        assert jobs(sb, "lab")["stray"]["spec"]["suspend"] is True
    finally:
        op.stop()
