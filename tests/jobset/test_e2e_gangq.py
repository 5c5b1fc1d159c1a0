"""gangq's admission with the embedded JobSet controller (``gangq run --jobset-controller embedded``): a queued
JobSet has no children; admission → Jobs → Completed → quota released → the next gang runs; preemption suspends the
Jobs and the JobSet later resumes with its flavor's template."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gangq.jobset import constants as c
from gangq.sandbox.kubelet import KubeletConfig
from gangq.sandbox.runtime import Sandbox
from tests.clusters import RealCluster, controller_kubeconfig
from tests.operator.helpers import (
    apply,
    cluster_queue,
    flavor,
    install,
    jobset,
    local_queue,
    operator_config,
    operator_thread,
    wait_for,
)

from .conftest import Cluster


@pytest.fixture
def gangq(cluster_factory: Callable[..., Sandbox | RealCluster], monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[Cluster]:
    sb = cluster_factory(nodes="2x{cpu:8,memory:32Gi}[pool=a]", kubelet=KubeletConfig(max_grace_seconds=0.2))
    monkeypatch.setenv("KUBECONFIG", str(controller_kubeconfig(sb)))
    install(sb)
    # Preempting at once: the gang preempted here would end on its own within the default delay.
    op = operator_thread(sb, operator_config(preemption={"delaySeconds": 0}), identity="op-js",
                         jobset_controller="embedded")
    try:
        wait_for(lambda: op.leading or op.error, 20, "the operator to lead")
        assert op.error is None, op.error
        yield Cluster(sb)
    finally:
        op.stop()
    assert op.error is None, op.error


def _running(cl: Cluster, name: str) -> list[dict[str, object]]:
    return [p for p in cl.pods(name) if (p.get("status") or {}).get("phase") == "Running"]  # type: ignore[union-attr]


def test_admission_runs_jobs_completion_releases_quota_for_the_next_gang(gangq: Cluster) -> None:
    cl = gangq
    apply(cl.sb, [flavor("a", {"pool": "a"}), cluster_queue("cq", {"cpu": 4}, flavor="a"), local_queue("lq", "cq")])
    apply(cl.sb, [jobset("first", "lq", replicas=2, requests={"cpu": 2}, run_seconds=1.0),
                  jobset("second", "lq", replicas=2, requests={"cpu": 2}, run_seconds=0.5)])
    jobs = wait_for(lambda: len(cl.jobs("first")) == 2 and cl.jobs("first"), 15, "the Jobs of the admitted gang")
    assert all(j["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "a"} for j in jobs.values())
    # the second gang waits for quota, with no Jobs and no Service (jobset#535)
    assert cl.jobs("second") == {}
    assert not cl.list("", "services", f"{c.JOBSET_NAME_KEY}=second")
    assert cl.condition("second", "Suspended") is not None
    done = cl.wait_condition("first", "Completed", 20)
    cl.wait_condition("second", "Completed", 20)
    second = cl.jobs("second")
    assert sorted(second) == ["second-worker-0", "second-worker-1"]
    # the second gang's Jobs were created only once the first had finished and released its quota
    assert all(j["metadata"]["creationTimestamp"] >= done["lastTransitionTime"] for j in second.values())


def test_preemption_suspends_jobs_and_the_jobset_resumes_later(gangq: Cluster) -> None:
    cl = gangq
    apply(cl.sb, [
        flavor("a", {"pool": "a"}),
        cluster_queue("cq", {"cpu": 4}, flavor="a", preemption={"withinClusterQueue": "LowerPriority"}),
        local_queue("lq", "cq"),
        {"apiVersion": "gangq.io/v1alpha1", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
         "value": 1000},
        {"apiVersion": "gangq.io/v1alpha1", "kind": "WorkloadPriorityClass", "metadata": {"name": "low"},
         "value": 10},
    ])
    apply(cl.sb, [jobset("low", "lq", replicas=2, requests={"cpu": 2}, run_seconds=2.0, priority_class="low")])
    wait_for(lambda: len(_running(cl, "low")) == 2, 15, "the low-priority gang running")
    apply(cl.sb, [jobset("high", "lq", replicas=1, requests={"cpu": 4}, run_seconds=0.5, priority_class="high")])
    # eviction: the JobSet is suspended and its (kept) Jobs are suspended, their pods deleted
    wait_for(lambda: (j := cl.jobs("low")) and all(x["spec"].get("suspend") for x in j.values()), 15,
             "the evicted gang's Jobs suspended")
    cl.wait_condition("low", "Suspended", 10)
    cl.wait_condition("high", "Completed", 20)
    # re-admitted: the same Jobs resume (restart-attempt unchanged) with the flavor's nodeSelector, then complete
    cl.wait_condition("low", "Completed", 30)
    jobs = cl.jobs("low")
    assert sorted(jobs) == ["low-worker-0", "low-worker-1"]
    assert all(j["metadata"]["labels"][c.RESTARTS_KEY] == "0" for j in jobs.values())
    assert all(j["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "a"} for j in jobs.values())
    reasons = [e["reason"] for e in cl.events("low")]
    assert "SuspendedJobs" in reasons and "ResumeJobs" in reasons
