"""A Workload's ``spec.active``, end to end on both control planes: a gang over the pods-ready
backoff limit is deactivated where an admin can see it and flip it back; an admin parks a queued
gang and stops a running one the same way; a restart keeps a deactivated gang out of its queue."""

from __future__ import annotations

import time
from collections.abc import Callable
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

WL_GROUP = "gangq.io"


def workload(sb: Cluster, name: str) -> dict[str, Any]:
    return get(sb, "Workload", f"jobset-{name}") or {}


def set_active(sb: Cluster, name: str, active: bool) -> None:
    sb.call(sb.store.patch, WL_GROUP, "workloads", "default", f"jobset-{name}", {"spec": {"active": active}}, "merge")


def test_a_gang_over_the_backoff_limit_is_deactivated_and_an_admin_brings_it_back(
        cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(nodes="2x{cpu:4,memory:16Gi}")
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 8}), local_queue("q", "cq")])
    pods_ready = {"enable": True, "timeoutSeconds": 1.0, "backoffBaseSeconds": 0.5, "backoffMaxSeconds": 0.5,
                  "backoffLimit": 1}
    op = start_operator(sb, operator_config(podsReady=pods_ready))
    try:
        with FakeJobSetRunner(sb) as runner:
            # its pods take a minute to start: never ready within 1 s; evicted twice, then deactivated
            apply(sb, [jobset("slow", "q", replicas=2, requests={"cpu": 1}, start_delay=60)])
            wl = wait_for(lambda: (w := workload(sb, "slow")) and w["spec"].get("active") is False and w, 20,
                          "the Workload's spec.active to turn false")
            status = wait_for(lambda: (s := workload_status(sb, "slow")).get("reason") == "Deactivated" and s, 10,
                              "the Workload to say it is deactivated")
            assert status["state"] == "Pending"
            assert "kubectl patch workload jobset-slow -n default" in status["message"], status
            assert "backoff limit" in status["message"], status
            unsuspends = runner.unsuspends["default/slow"]
            assert unsuspends == 2
            time.sleep(2)  # longer than the backoff: it stays out of its queue
            assert not admitted(sb, "slow") and runner.unsuspends["default/slow"] == unsuspends
            assert wl["metadata"]["name"] == "jobset-slow"

            set_active(sb, "slow", True)
            wait_for(lambda: runner.unsuspends["default/slow"] == unsuspends + 1, 10, "readmission after reactivation")
            wait_for(lambda: (condition(workload_status(sb, "slow"), "Admitted") or {}).get("status") == "True", 10,
                     "the Workload to say it is admitted again")
            assert workload(sb, "slow")["spec"]["active"] is True
    finally:
        op.stop()


def test_an_admin_parks_a_queued_gang_and_stops_a_running_one(cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 2}, admission_mode="QuotaOnly"),
               local_queue("q", "cq")])
    config = operator_config(status={"workloadDelaySeconds": 0.2, "pendingDelaySeconds": 0.1})
    op = start_operator(sb, config)
    try:
        with FakeJobSetRunner(sb, pods=False) as runner:
            apply(sb, [jobset("running", "q", requests={"cpu": 2}, run_seconds=600)])
            wait_for(lambda: admitted(sb, "running"), 15, "the first gang to be admitted")
            apply(sb, [jobset("parked", "q", requests={"cpu": 2}, run_seconds=0.5),
                       jobset("next", "q", requests={"cpu": 2}, run_seconds=0.5)])
            wait_for(lambda: workload_status(sb, "parked").get("position") == 1, 10, "parked to head its queue")

            set_active(sb, "parked", False)
            status = wait_for(lambda: (s := workload_status(sb, "parked")).get("reason") == "Deactivated" and s, 10,
                              "parked to be deactivated")
            assert status.get("position") is None
            wait_for(lambda: workload_status(sb, "next").get("position") == 1, 10, "next to move up")

            # Deactivating the running gang stops it and lets the next one in, not the parked one.
            set_active(sb, "running", False)
            wait_for(lambda: finished(sb, "next"), 15, "the next gang to run once the running one stopped")
            running = workload_status(sb, "running")
            assert running["reason"] == "Deactivated" and running["state"] == "Pending", running
            assert condition(running, "Evicted")["reason"] == "Deactivated"
            assert runner.unsuspends.get("default/parked") is None

            set_active(sb, "parked", True)
            wait_for(lambda: finished(sb, "parked"), 15, "the reactivated gang to run")
            assert runner.unsuspends["default/running"] == 1
    finally:
        op.stop()


def test_a_restart_keeps_a_deactivated_gang_out_of_its_queue(cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 2}, admission_mode="QuotaOnly"),
               local_queue("q", "cq")])
    config = operator_config(status={"workloadDelaySeconds": 0.2, "pendingDelaySeconds": 0.1})
    with FakeJobSetRunner(sb, pods=False) as runner:
        op = start_operator(sb, config)
        try:
            apply(sb, [jobset("blocker", "q", requests={"cpu": 2}, run_seconds=4)])
            wait_for(lambda: admitted(sb, "blocker"), 15, "the blocker to be admitted")
            apply(sb, [jobset("parked", "q", requests={"cpu": 2}, run_seconds=0.5)])
            wait_for(lambda: workload(sb, "parked"), 10, "parked's Workload")
            set_active(sb, "parked", False)
            wait_for(lambda: workload_status(sb, "parked").get("reason") == "Deactivated", 10, "parked deactivated")
        finally:
            op.stop()
        op = start_operator(sb, config, identity="op-2")
        try:
            wait_for(lambda: finished(sb, "blocker"), 15, "the blocker to finish")
            time.sleep(1.5)  # cycles after the blocker's quota came back
            assert runner.unsuspends.get("default/parked") is None
            assert workload_status(sb, "parked")["reason"] == "Deactivated"
            set_active(sb, "parked", True)
            wait_for(lambda: finished(sb, "parked"), 15, "the reactivated gang to run after the restart")
        finally:
            op.stop()
