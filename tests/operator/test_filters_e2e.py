"""The ``namespaces`` configuration filter and pods' PriorityClass ordering, end to end through the
controller on the sandbox (quota only: no nodes, no pods)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from gangq.operator.operator import OperatorThread
from tests.operator.helpers import (
    Cluster,
    FakeJobSetRunner,
    admitted,
    apply,
    cluster_queue,
    finished,
    flavor,
    get,
    install,
    jobset,
    local_queue,
    namespace,
    operator_config,
    start_operator,
    wait_for,
)


def with_pod_priority_class(doc: dict[str, Any], name: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for rjob in doc["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["template"]["spec"]["priorityClassName"] = name
    return doc


def test_namespaces_filter_ignores_jobsets_elsewhere(cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(cluster=False)
    install(sb)
    namespace(sb, "team-a")
    namespace(sb, "team-b")
    apply(sb, [
        flavor("default"),
        cluster_queue("cq", {"cpu": 8}, admission_mode="QuotaOnly"),
        local_queue("q", "cq", ns="team-a"),
        local_queue("q", "cq", ns="team-b"),
    ])
    op: OperatorThread = start_operator(sb, operator_config(namespaces=["team-a"]))
    try:
        with FakeJobSetRunner(sb, pods=False) as runner:
            # Arrives suspended elsewhere: never admitted. Arrives unsuspended elsewhere: not ours to
            # suspend. Neither gets a Workload.
            apply(sb, [jobset("other", "q", ns="team-b", run_seconds=0.2)])
            apply(sb, [jobset("other-running", "q", ns="team-b", suspend=False, run_seconds=30.0)])
            apply(sb, [jobset("mine", "q", ns="team-a", run_seconds=0.2)])
            wait_for(lambda: finished(sb, "mine", "team-a"), 15, "team-a's JobSet to finish")
            wait_for(lambda: get(sb, "Workload", "jobset-mine", "team-a"), 10, "team-a's Workload")
            # The same scheduling cycles saw the team-b JobSets' events, had they been delivered: give
            # the controller time to (wrongly) act on them before checking it did not.
            time.sleep(1.0)
            other = get(sb, "JobSet", "other", "team-b")
            assert other is not None and other["spec"]["suspend"] is True
            assert "gangq.io/admission" not in (other["metadata"].get("annotations") or {})
            running = get(sb, "JobSet", "other-running", "team-b")
            assert running is not None and running["spec"]["suspend"] is False
            assert get(sb, "Workload", "jobset-other", "team-b") is None
            assert get(sb, "Workload", "jobset-other-running", "team-b") is None
            assert "team-b/other" not in runner.order
            # The controller never took them in, and team-b's LocalQueue is not one of its queues.
            keys = op.call(lambda: sorted(op.controller.entries) if op.controller else None)
            assert keys is not None and not any(k.startswith("team-b/") for k in keys)
            assert op.call(lambda: "team-b/q" in op.controller.engine.local_queues) is False
    finally:
        op.stop()


def test_pod_priority_class_admits_newer_higher_priority_first(cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 1}, admission_mode="QuotaOnly"), local_queue("q", "cq")])
    sb.call(sb.store.create, "scheduling.k8s.io", "priorityclasses", {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"}, "value": 1000})
    op: OperatorThread = start_operator(sb)
    try:
        wait_for(lambda: op.call(lambda: op.controller.gangs.priority_classes.get("urgent")) == 1000, 10,
                 "the controller to know PriorityClass urgent")
        with FakeJobSetRunner(sb, pods=False) as runner:
            apply(sb, [jobset("blocker", "q", run_seconds=1.0)])
            wait_for(lambda: admitted(sb, "blocker"), 10, "blocker")
            apply(sb, [jobset("older-default", "q", run_seconds=0.2)])
            time.sleep(0.2)  # strictly older
            apply(sb, [with_pod_priority_class(jobset("newer-urgent", "q", run_seconds=0.2), "urgent")])
            wait_for(lambda: all(finished(sb, n) for n in ("blocker", "older-default", "newer-urgent")), 20,
                     "all to finish")
            assert runner.order == ["default/blocker", "default/newer-urgent", "default/older-default"]
        wl = get(sb, "Workload", "jobset-newer-urgent")
        assert wl is not None and wl["spec"]["priority"] == 1000
        older = get(sb, "Workload", "jobset-older-default")
        assert older is not None and older["spec"]["priority"] == 0
    finally:
        op.stop()
