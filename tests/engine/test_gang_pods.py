"""What an admitted gang holds on nodes (``Workload.held``: its planned pods and the pods bound
while it is admitted, a gone pod's slot planned again until the gang finishes) is what a
preemption what-if frees when it picks the gang as a victim. A pod
of the gang bound before its admission (a JobSet that arrived unsuspended, before gangq suspended
it) uses its node like any other pod but is not part of that: its deletion must not take
anything from what the gang holds."""

from __future__ import annotations

from gangq.core import Engine, PodInfo, PreemptionSpec

from .builders import GPU, add_nodes, add_queue, admitted, engine, evicted, gang, quota


def _gang_with_an_early_pod() -> Engine:
    """One node of 8 GPUs. Gang g (2 pods of 2 GPUs) has a pod bound before it is admitted; then
    it is admitted with both its pods planned on the node: 2 + 4 GPUs in use, 2 free."""
    e = engine()
    add_nodes(e, "a100", 1, cpu=64, gpu=8)
    add_queue(e, "q", [quota("a100", 64, 16)], preemption=PreemptionSpec(within_cluster_queue="LowerPriority"))
    e.submit(gang("g", "q", 2, 2), 0.0)
    e.update_pod(PodInfo("ns/g-early", "a100-0", {"cpu": 1000, GPU: 2}, workload="ns/g", pod_set="w"))
    assert admitted(e.schedule(1.0)) == ["g"]
    return e


def test_deleting_a_pod_bound_before_admission_leaves_what_the_gang_holds() -> None:
    e = _gang_with_an_early_pod()
    g = e.workloads["ns/g"]
    assert g.held == {"a100-0": {"cpu": 2000, GPU: 4}}  # its two planned pods
    e.delete_pod("ns/g-early")
    assert g.held == {"a100-0": {"cpu": 2000, GPU: 4}}
    e.check_invariants()


def test_a_preemptor_sees_all_that_the_victim_holds() -> None:
    """After the early pod is gone, g's two planned pods are all that uses the node: a gang of
    higher priority that needs the whole node preempts g. Counting the early pod's deletion
    against g, the what-if freed 2 GPUs of g's 4, found 6 of 8, and preempted nothing."""
    e = _gang_with_an_early_pod()
    e.delete_pod("ns/g-early")
    e.submit(gang("big", "q", 1, 8, priority=10, t=2.0), 2.0)
    assert evicted(e.schedule(2.0)) == ["g"]
    e.check_invariants()


def test_pods_bound_while_admitted_still_count_for_the_gang() -> None:
    """The gang's own pods, bound after admission, take the place of its planned ones in what it
    holds; once one is gone its slot is the gang's again (planned), until the gang finishes."""
    e = _gang_with_an_early_pod()
    g = e.workloads["ns/g"]
    e.update_pod(PodInfo("ns/g-0", "a100-0", {"cpu": 1000, GPU: 2}, workload="ns/g", pod_set="w"))
    assert g.held == {"a100-0": {"cpu": 2000, GPU: 4}}  # one planned, one bound
    e.delete_pod("ns/g-early")
    assert g.held == {"a100-0": {"cpu": 2000, GPU: 4}}
    e.delete_pod("ns/g-0")
    assert g.held == {"a100-0": {"cpu": 2000, GPU: 4}}  # both planned again
    e.check_invariants()
    e.finish("ns/g", 2.0)
    assert e.nodes.nodes["a100-0"].free[GPU] == 8
    e.check_invariants()


def test_a_gang_whose_pods_end_one_by_one_keeps_its_nodes_until_it_finishes() -> None:
    """Two gangs of 3 pods × 8 GPUs on 4 nodes of 8: the second fits the quota but not the nodes
    beside the first. When two of the first's pods have ended and its last still runs, the second
    still waits, and so when all have ended (the first is admitted and released as a whole); it is
    admitted once the first finishes."""
    e = engine()
    add_nodes(e, "a100", 4, cpu=64, gpu=8)
    add_queue(e, "q", [quota("a100", 256, 64)])
    e.submit(gang("a", "q", 3, 8), 0.0)
    e.submit(gang("b", "q", 3, 8, t=0.5), 0.5)
    assert admitted(e.schedule(1.0)) == ["a"]
    for i in range(3):
        e.update_pod(PodInfo(f"ns/a-{i}", f"a100-{i}", {"cpu": 1000, GPU: 8}, workload="ns/a", pod_set="w",
                             running=True))
    e.delete_pod("ns/a-0")
    e.delete_pod("ns/a-1")
    assert admitted(e.schedule(2.0)) == []
    e.check_invariants()
    e.delete_pod("ns/a-2")  # all ended, not yet finished (its object's status is not written yet)
    assert admitted(e.schedule(3.0)) == []
    e.finish("ns/a", 4.0, keep_pods=True)
    assert admitted(e.schedule(4.0)) == ["b"]
    e.check_invariants()
