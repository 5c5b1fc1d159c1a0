"""What a new user meets first, end to end on both control planes: Kueue's getting-started
ResourceFlavor (no ``spec`` at all) is applied, and a queued JobSet shows its Workload within
seconds with the default configuration."""

from __future__ import annotations

from collections.abc import Callable

from tests.operator.helpers import (
    Cluster,
    FakeJobSetRunner,
    admitted,
    apply,
    cluster_queue,
    condition,
    get,
    install,
    jobset,
    local_queue,
    operator_config,
    start_operator,
    wait_for,
    workload_status,
)


def test_a_resource_flavor_without_spec_is_applied(cluster_factory: Callable[..., Cluster]) -> None:
    """Kueue's getting-started flavor is ``kind: ResourceFlavor`` with a name and nothing else; its
    ClusterQueue must become active and admit, not wait for ever on "flavor not found"."""
    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [{"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
               cluster_queue("cq", {"cpu": 4}, flavor="default-flavor", admission_mode="QuotaOnly"),
               local_queue("lq", "cq")])
    op = start_operator(sb)
    try:
        with FakeJobSetRunner(sb, pods=False):
            apply(sb, [jobset("first", "lq", requests={"cpu": 2}, run_seconds=30)])
            wait_for(lambda: admitted(sb, "first"), 15, "the JobSet to be admitted")
            cq = wait_for(lambda: (c := get(sb, "ClusterQueue", "cq", None)) and condition(
                c.get("status") or {}, "Active") and c, 10, "the ClusterQueue's status")
            assert condition(cq["status"], "Active")["status"] == "True"
    finally:
        op.stop()


def test_a_queued_jobset_has_its_workload_within_seconds_by_default(cluster_factory: Callable[..., Cluster]) -> None:
    """With the default status timing, a gang that waits for quota shows a Workload with its reason
    in ≤ 5 s (``kubectl get workloads`` is where a researcher looks first)."""
    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [{"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "default"},
                "spec": {"nodeLabels": {}}},
               cluster_queue("cq", {"cpu": 2}, admission_mode="QuotaOnly"), local_queue("lq", "cq")])
    defaults = operator_config()
    defaults = defaults.model_copy(update={"status": type(defaults.status)()})  # the shipped status timing
    op = start_operator(sb, defaults)
    try:
        with FakeJobSetRunner(sb, pods=False):
            apply(sb, [jobset("running", "lq", requests={"cpu": 2}, run_seconds=60)])
            wait_for(lambda: admitted(sb, "running"), 15, "the first JobSet to be admitted")
            apply(sb, [jobset("queued", "lq", requests={"cpu": 2}, run_seconds=1)])
            status = wait_for(lambda: (s := workload_status(sb, "queued")) and s, 5 + 3, "the queued gang's Workload")
            assert status["state"] == "Pending"
            assert condition(status, "QuotaReserved")["status"] == "False"
    finally:
        op.stop()


def test_a_changed_reason_reaches_the_workload_promptly(cluster_factory: Callable[..., Cluster]) -> None:
    """Two gangs wait on a ClusterQueue whose flavor is missing; the admin creates it: one is
    admitted, and the other's Workload stops saying ClusterQueueInactive within
    workloadDelaySeconds, not after pendingMinIntervalSeconds (a minute here, as by default)."""
    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [cluster_queue("cq", {"cpu": 2}, flavor="later", admission_mode="QuotaOnly"), local_queue("lq", "cq")])
    config = operator_config(status={"workloadDelaySeconds": 0.5, "pendingDelaySeconds": 0.1,
                                     "pendingMinIntervalSeconds": 60})
    op = start_operator(sb, config)
    try:
        with FakeJobSetRunner(sb, pods=False):
            apply(sb, [jobset("one", "lq", requests={"cpu": 2}, run_seconds=60),
                       jobset("two", "lq", requests={"cpu": 2}, run_seconds=60)])
            for name in ("one", "two"):
                wait_for(lambda n=name: workload_status(sb, n).get("reason") == "ClusterQueueInactive", 10,
                         f"{name}'s Workload to say why it waits")
            apply(sb, [{"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "later"},
                        "spec": {"nodeLabels": {}}}])
            wait_for(lambda: admitted(sb, "one") or admitted(sb, "two"), 10, "one gang to be admitted")
            waiting = "two" if admitted(sb, "one") else "one"
            status = wait_for(lambda: (s := workload_status(sb, waiting)).get("reason") != "ClusterQueueInactive"
                              and s, 5, "the waiting gang's new reason")
            assert status["reason"] == "InsufficientQuota", status
    finally:
        op.stop()


def test_the_gang_that_becomes_next_says_so_promptly(cluster_factory: Callable[..., Cluster]) -> None:
    """The gang ahead leaves the queue: the one behind it shows position 1 within
    workloadDelaySeconds, though its reason (InsufficientQuota) did not change and a pending
    write is otherwise due only every pendingMinIntervalSeconds (a minute here, as by default)."""
    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [{"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "default"},
                "spec": {"nodeLabels": {}}},
               cluster_queue("cq", {"cpu": 2}, admission_mode="QuotaOnly"), local_queue("lq", "cq")])
    config = operator_config(status={"workloadDelaySeconds": 0.5, "pendingDelaySeconds": 0.1,
                                     "pendingMinIntervalSeconds": 60})
    op = start_operator(sb, config)
    try:
        with FakeJobSetRunner(sb, pods=False):
            apply(sb, [jobset("running", "lq", requests={"cpu": 2}, run_seconds=600)])
            wait_for(lambda: admitted(sb, "running"), 15, "the first gang to be admitted")
            apply(sb, [jobset("ahead", "lq", requests={"cpu": 2}, run_seconds=1)])
            wait_for(lambda: workload_status(sb, "ahead").get("position") == 1, 10, "ahead's Workload")
            apply(sb, [jobset("behind", "lq", requests={"cpu": 2}, run_seconds=1)])
            status = wait_for(lambda: (s := workload_status(sb, "behind")).get("position") and s, 10,
                              "behind's Workload")
            assert status["position"] == 2 and status["reason"] == "InsufficientQuota", status
            sb.call(sb.store.delete, "jobset.x-k8s.io", "jobsets", "default", "ahead")
            status = wait_for(lambda: (s := workload_status(sb, "behind")).get("position") == 1 and s, 0.5 + 4,
                              "behind's Workload to say it is next")
            assert status["reason"] == "InsufficientQuota" and "position 1 of 1" in status["message"], status
    finally:
        op.stop()
