"""A gang whose pods started before its admission (created unsuspended, no webhook): charged to its
queue until its pods are gone, then queued like any other (Engine.hold_started)."""

from __future__ import annotations

from gangq.core import LocalQueueSpec, PodSetSpec, WorkloadSpec

from .builders import GPU, add_nodes, add_queue, admitted, engine, gang, quota


def test_a_gang_that_started_early_holds_its_queue_until_its_pods_are_gone_then_queues() -> None:
    e = engine()
    add_nodes(e, "a100", 4)
    add_queue(e, "q", [quota("a100", 256, 16)])
    for i, key in enumerate(("a", "b", "c")):  # three 8-GPU gangs started at once: 24 GPUs > 16
        admission, why = e.hold_started(gang(key, "q", 2, 4, t=i), 0)
        assert admission is not None and admission.cluster_queue == "q"
        assert admission.pod_sets[0].flavors == {"cpu": "a100", GPU: "a100"}
        assert ("over quota" in why) == (key == "c"), why  # charged all the same: its pods run
        assert e.workload(f"ns/{key}").state == "Evicting"  # type: ignore[union-attr]
    e.submit(gang("late", "q", 1, 4, t=5), 1)
    assert admitted(e.schedule(1)) == []  # 24 GPUs of early pods still run on a 16-GPU quota
    e.eviction_done("ns/a", 2)
    assert admitted(e.schedule(2)) == []  # 16 still held
    e.eviction_done("ns/b", 3)
    e.eviction_done("ns/c", 3)
    # queued again in creation order, the late gang last: two fit the quota
    assert admitted(e.schedule(3)) == ["a", "b"]
    assert e.workload("ns/c").state == "Pending"  # type: ignore[union-attr]


def test_a_gang_that_started_early_with_no_queue_or_flavor_to_charge_is_left_to_be_queued() -> None:
    e = engine()
    add_nodes(e, "a100", 1)
    add_queue(e, "q", [quota("a100", 64, 8)])
    admission, why = e.hold_started(gang("lost", "missing", 1, 4), 0)
    assert admission is None and "LocalQueue ns/missing does not exist" in why
    assert e.workload("ns/lost") is None  # nothing held: the shell queues it, and it waits unrouted
    e.upsert_local_queue(LocalQueueSpec("ns", "tpus", "q"))
    tpu = WorkloadSpec("ns/tpu", "ns", "tpus", [PodSetSpec("w", 1, {"google.com/tpu": 4})])
    admission, why = e.hold_started(tpu, 0)
    assert admission is None and "google.com/tpu" in why  # q has no flavor for it
    assert e.workload("ns/tpu") is None
