"""Restarts and high availability: state rebuilt from the API, nothing admitted twice, one leader."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable

from gangq.sandbox.runtime import free_port
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
    lease_namespace,
    local_queue,
    operator_config,
    operator_thread,
    start_operator,
    wait_for,
)


def setup(sb: Cluster, cpu: int) -> None:
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": cpu}, admission_mode="QuotaOnly"),
               local_queue("q", "cq")])


def test_restart_in_the_middle_of_a_burst(cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(cluster=False)
    setup(sb, 4)
    names = [f"burst-{i:02d}" for i in range(24)]
    with FakeJobSetRunner(sb, pods=False) as runner:
        op = start_operator(sb, identity="first")
        apply(sb, [jobset(n, "q", run_seconds=4.0 if i < 4 else 0.3) for i, n in enumerate(names[:12])])
        wait_for(lambda: sum(admitted(sb, n) for n in names) >= 4, 10, "the first admissions")
        op.kill()  # crash: keeps the Lease until it expires
        apply(sb, [jobset(n, "q", run_seconds=0.3) for n in names[12:]])  # arrive while no controller runs
        before = {n for n in names if admitted(sb, n)}
        assert before and len(before) <= 4
        op2 = start_operator(sb, identity="second")
        try:
            assert op2.controller is not None
            still = [n for n in before if not finished(sb, n)]
            assert still, "the restart should happen while gangs run"
            states = op2.call(lambda: {n: op2.controller.engine.workload(f"default/{n}").state for n in still})
            assert set(states.values()) == {"Admitted"}  # recognised from the API, quota kept
            wait_for(lambda: all(finished(sb, n) for n in names), 40, "every JobSet of the burst to finish")
            assert runner.concurrent_peak <= 4  # the quota held across the restart
            assert runner.unsuspends == {f"default/{n}": 1 for n in names}  # nobody admitted twice
            # the JobSets that were running at the crash kept their quota: admitted once, by the first
            for n in before:
                js = get(sb, "JobSet", n)
                assert js is not None and "gangq.io/admission" in js["metadata"]["annotations"]
        finally:
            op2.stop()


def test_two_replicas_one_leader(cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(cluster=False)
    setup(sb, 8)
    with FakeJobSetRunner(sb, pods=False):
        first = start_operator(sb, identity="replica-a")
        second = operator_thread(sb, identity="replica-b")
        try:
            apply(sb, [jobset("one", "q", run_seconds=0.3)])
            wait_for(lambda: finished(sb, "one"), 10, "the leader to admit")
            assert first.leading and not second.leading and second.controller is None
            lease = sb.call(sb.store.get, "coordination.k8s.io", "leases", lease_namespace(sb), "gangq-controller")
            assert lease["spec"]["holderIdentity"] == "replica-a"
            first.kill()  # the standby takes over once the lease expires (2 s)
            wait_for(lambda: second.leading, 10, "the standby to lead")
            apply(sb, [jobset("two", "q", run_seconds=0.3)])
            wait_for(lambda: finished(sb, "two"), 10, "the new leader to admit")
            lease = sb.call(sb.store.get, "coordination.k8s.io", "leases", lease_namespace(sb), "gangq-controller")
            assert lease["spec"]["holderIdentity"] == "replica-b"
            assert lease["spec"]["leaseTransitions"] == 1
        finally:
            second.stop()
            first.stop()


def test_a_standby_answers_its_probes_and_says_it_does_not_lead(cluster_factory: Callable[..., Cluster]) -> None:
    """A Deployment probes every replica: a standby that did not answer /healthz would be
    restarted over and over, and one that was not ready would be dropped from the webhook's
    Service. It answers both, with ``gangq_leader 0``; once it leads, the full metrics."""
    sb = cluster_factory(cluster=False)
    setup(sb, 8)
    ports = [free_port(), free_port()]
    first = start_operator(sb, operator_config(metricsPort=ports[0]), identity="replica-a")
    second = operator_thread(sb, operator_config(metricsPort=ports[1]), identity="replica-b")
    try:
        def read(port: int, path: str) -> tuple[int, str]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                    return resp.status, resp.read().decode()
            except urllib.error.HTTPError as err:
                return err.code, ""
            except OSError:
                return 0, ""

        wait_for(lambda: read(ports[1], "/healthz")[0] == 200, 10, "the standby's /healthz")
        assert read(ports[1], "/readyz")[0] == 200
        status, metrics = read(ports[1], "/metrics")
        assert status == 200 and "gangq_leader 0.0" in metrics and "gangq_cluster_queue" not in metrics
        assert "gangq_leader 1.0" in read(ports[0], "/metrics")[1]
        first.kill()
        wait_for(lambda: second.leading, 10, "the standby to lead")
        wait_for(lambda: "gangq_leader 1.0" in read(ports[1], "/metrics")[1], 10, "the new leader's metrics")
    finally:
        second.stop()
        first.stop()


def test_a_restart_keeps_each_admitted_gang_in_the_flavor_it_was_given(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Re-choosing flavors after a restart would charge "second" to flavor a (free again by
    then) although it was admitted to, and runs on, flavor b."""
    sb = cluster_factory(cluster=False)
    install(sb)
    cq = cluster_queue("cq", {"cpu": 2}, admission_mode="QuotaOnly")
    cq["spec"]["resourceGroups"][0]["flavors"] = [
        {"name": f, "resources": [{"name": "cpu", "nominalQuota": 2}]} for f in ("a", "b")
    ]
    apply(sb, [flavor("a"), flavor("b"), cq, local_queue("q", "cq")])
    with FakeJobSetRunner(sb, pods=False):
        op = start_operator(sb, identity="first")
        apply(sb, [jobset("first", "q", requests={"cpu": 2}, run_seconds=0.5)])
        wait_for(lambda: admitted(sb, "first"), 10, "first to be admitted")
        apply(sb, [jobset("second", "q", requests={"cpu": 2}, run_seconds=30)])
        wait_for(lambda: admitted(sb, "second") and finished(sb, "first"), 15, "second admitted, first done")
        op.kill()
        op2 = start_operator(sb, identity="second")
        try:
            assert op2.controller is not None
            view = op2.call(lambda: op2.controller.engine.workload("default/second"))
            assert view.state == "Admitted" and view.admission is not None
            assert view.admission.pod_sets[0].flavors == {"cpu": "b"}
            apply(sb, [jobset("third", "q", requests={"cpu": 2}, run_seconds=0.3)])
            wait_for(lambda: finished(sb, "third"), 15, "third to run in flavor a")
            record = get(sb, "JobSet", "third")
            assert record is not None
            assert '"a"' in record["metadata"]["annotations"]["gangq.io/admission"]
        finally:
            op2.stop()
