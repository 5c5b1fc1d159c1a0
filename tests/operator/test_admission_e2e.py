"""End to end on the sandbox: queues + a JobSet → admitted whole → unsuspended, Workload status."""

from __future__ import annotations

import gc
from collections.abc import Callable

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


def test_jobset_is_admitted_unsuspended_and_finished_with_workload_status(
    cluster_factory: Callable[..., Cluster],
) -> None:
    sb = cluster_factory(nodes="2x{cpu:8,memory:32Gi,nvidia.com/gpu:4}")
    install(sb)
    apply(sb, [flavor("gpu", {"sandbox.gangq.io/pool": "gpu"}),
               cluster_queue("cq", {"cpu": 16, "nvidia.com/gpu": 8}, flavor="gpu"),
               local_queue("lq", "cq")])
    # nodes carry no such label: label them so the flavor's nodeLabels match
    for i in range(2):
        node = sb.call(sb.store.list, "", "nodes")["items"][i]["metadata"]["name"]
        sb.call(sb.store.patch, "", "nodes", None, node, {"metadata": {"labels": {"sandbox.gangq.io/pool": "gpu"}}},
                "merge")
    op = start_operator(sb)
    try:
        with FakeJobSetRunner(sb) as runner:
            apply(sb, [jobset("train", "lq", replicas=2, requests={"cpu": 2, "nvidia.com/gpu": 4}, run_seconds=0.5)])
            wait_for(lambda: admitted(sb, "train"), 10, "admission")
            js = get(sb, "JobSet", "train")
            assert js is not None
            pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
            assert pod["nodeSelector"] == {"sandbox.gangq.io/pool": "gpu"}
            status = wait_for(lambda: (s := workload_status(sb, "train")) and s.get("state") in ("Admitted", "Finished")
                              and s, 10, "Workload status")
            assert condition(status, "QuotaReserved")["status"] == "True"
            assert condition(status, "Admitted")["status"] == "True"
            assert status["admission"]["clusterQueue"] == "cq"
            assert status["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": "gpu", "nvidia.com/gpu": "gpu"}
            wl = get(sb, "Workload", "jobset-train")
            assert wl is not None and wl["metadata"]["ownerReferences"][0]["uid"] == js["metadata"]["uid"]
            assert wl["spec"]["podSets"] == [{"name": "worker", "count": 2,
                                              "requests": {"cpu": "2", "nvidia.com/gpu": "4"}}]
            wait_for(lambda: finished(sb, "train"), 15, "the JobSet to finish")
            assert runner.max_running["default/train"] == 2
            status = wait_for(lambda: (s := workload_status(sb, "train")) and s.get("state") == "Finished" and s,
                              10, "Finished status")
            assert condition(status, "Finished")["reason"] == "Succeeded"
            assert condition(status, "PodsReady")["status"] == "True"
            cq = wait_for(lambda: (c := get(sb, "ClusterQueue", "cq", None)) and (c.get("status") or {}).get(
                "admittedWorkloads") == 0 and c, 5, "ClusterQueue status")
            assert condition(cq["status"], "Active")["status"] == "True"
            assert cq["status"]["gpu"] == "0/8"
    finally:
        op.stop()


def test_embedded_jobset_controller_runs_the_admitted_gang(cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(nodes="2x{cpu:8,memory:32Gi}")
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 8}), local_queue("lq", "cq")])
    op = operator_thread(sb, identity="embedded", jobset_controller="embedded")
    try:
        wait_for(lambda: op.leading, 20, "the controller to lead")
        apply(sb, [jobset("first", "lq", replicas=2, requests={"cpu": 3}, run_seconds=0.5),
                   jobset("second", "lq", replicas=2, requests={"cpu": 3}, run_seconds=0.5)])
        wait_for(lambda: finished(sb, "first") and finished(sb, "second"), 30, "both JobSets to complete")
        for name in ("first", "second"):
            status = wait_for(lambda n=name: (s := workload_status(sb, n)) and s.get("state") == "Finished" and s,
                              10, "Finished status")
            assert condition(status, "Finished")["reason"] == "Succeeded"
            assert condition(status, "PodsReady")["status"] == "True"
        jobs = sb.call(sb.store.list, "batch", "jobs", "default")["items"]
        assert {j["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] for j in jobs} == {"first", "second"}
    finally:
        op.stop()


def test_write_budget_of_a_short_gang(cluster_factory: Callable[..., Cluster]) -> None:
    """Admitted at once and finished within the status window: the unsuspend, the Admitted Event,
    the Workload's create and one status write with QuotaReserved, Admitted and Finished."""
    from tests.operator.helpers import operator_config

    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 8}, admission_mode="QuotaOnly"),
               local_queue("lq", "cq")])
    config = operator_config(status={"workloadDelaySeconds": 2.0, "pendingDelaySeconds": 10.0})
    op = start_operator(sb, config)
    try:
        with FakeJobSetRunner(sb, pods=False):
            apply(sb, [jobset("quick", "lq", run_seconds=0.3)])
            status = wait_for(lambda: (s := workload_status(sb, "quick")) and s, 10, "the Workload")
            assert status["state"] == "Finished"
            assert {c["type"]: c["status"] for c in status["conditions"]} == {
                "QuotaReserved": "True", "Admitted": "True", "PodsReady": "False", "Finished": "True"}
        assert op.controller is not None
        # per queue, not per workload: queue status, and the ClusterQueue's finalizer put on once;
        # per controller: the learned run times' ConfigMap, at most once every 30 s (checked apart)
        every = op.controller.client.writes
        assert sum(v for k, v in every.items() if k.endswith(" configmaps")) <= 1, every
        writes = {k: v for k, v in every.items() if "leases" not in k and "queues/status" not in k
                  and k != "PATCH clusterqueues" and not k.endswith(" configmaps")}
        assert writes == {"PATCH jobsets": 1, "POST events": 1, "POST workloads": 1, "PATCH workloads/status": 1}
    finally:
        op.stop()


def test_metrics_and_readiness_are_served_when_observability_is_on(cluster_factory: Callable[..., Cluster]) -> None:
    import urllib.request

    from gangq.sandbox.runtime import free_port
    from tests.operator.helpers import operator_config

    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 8}, admission_mode="QuotaOnly"),
               local_queue("lq", "cq")])
    port = free_port()
    op = start_operator(sb, operator_config(metricsPort=port))
    try:
        with FakeJobSetRunner(sb, pods=False):
            apply(sb, [jobset("measured", "lq", run_seconds=0.2)])
            wait_for(lambda: finished(sb, "measured"), 10, "the JobSet to finish")

            def scrape() -> str:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return r.read().decode()

            text = wait_for(lambda: (t := scrape()) and 'gangq_admitted_workloads_total{cluster_queue="cq"} 1.0' in t
                            and t, 10, "the admission counted")
            assert 'verb="patch"' in text  # the controller's API requests are counted
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                assert r.status == 200
        # The loop's own figures are Prometheus series too: one admission patch, the one status
        # write of a gang that finished within the status window, events waited for in the inbox.
        assert op.controller is not None and op.controller.telemetry is not None
        registry = op.controller.telemetry.metrics.registry
        wait_for(lambda: registry.get_sample_value("gangq_workload_status_writes_total", {"state": "Finished"}) == 1,
                 10, "the Finished status write counted")
        assert registry.get_sample_value("gangq_admission_patch_duration_seconds_count") == 1
        assert registry.get_sample_value("gangq_admission_patch_wait_seconds_count") == 1
        assert (registry.get_sample_value("gangq_event_queue_wait_seconds_count") or 0) > 0
        assert (registry.get_sample_value("gangq_loop_cycle_duration_seconds_count") or 0) > 0
        op.call(lambda: gc.collect(2))  # on the loop's thread: its collector callback times it
        assert (registry.get_sample_value("gangq_gc_pause_seconds_total", {"generation": "2"}) or 0) > 0
    finally:
        op.stop()
