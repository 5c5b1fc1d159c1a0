"""A queue whose gangs wait for nodes is retried when capacity comes free in a pool those gangs
could use, not on every release anywhere in the cluster (IncrementalRetry.skips_node_wait)."""

from __future__ import annotations

from typing import Any

from gangq.core import EngineConfig, NodeSpec
from gangq.core.engine import Engine
from gangq.core.retry import IncrementalRetry

from .builders import GPU, add_nodes, add_queue, admitted, gang, quota


class NodeRetryCounting(IncrementalRetry):
    """Counts the retries of each ClusterQueue that only freed nodes asked for."""

    def __init__(self) -> None:
        self.node_retries: dict[str, int] = {}

    def node_retry(self, cq: Any, ctx: Any) -> bool:
        self.node_retries[cq.name] = self.node_retries.get(cq.name, 0) + 1
        return super().node_retry(cq, ctx)


class RetryCountingEngine(Engine):
    """The engine with :class:`NodeRetryCounting` as its retry policy."""

    def __init__(self, config: EngineConfig) -> None:
        policy = NodeRetryCounting()
        super().__init__(config, retry=policy)
        self.node_retries = policy.node_retries


def _cluster() -> RetryCountingEngine:
    """Queue g (GPU flavor, quota for 16 GPUs) runs g1 on the only GPU node's 8 GPUs and waits
    with g2 (4 GPUs): the nodes, not the quota, hold it back. Queue c runs c1 and c2 on the CPU
    nodes."""
    e = RetryCountingEngine(EngineConfig(pods_ready_timeout=None))
    e.upsert_namespace("ns", {})
    add_nodes(e, "gpu", 1, cpu=64, gpu=8)
    add_nodes(e, "cpu", 2, cpu=64, gpu=0)
    add_queue(e, "g", [quota("gpu", 64, 16)])
    add_queue(e, "c", [quota("cpu", 128, 0)])
    for key, queue, pods, gpu, cpu in (("g1", "g", 1, 8, 1), ("c1", "c", 64, 0, 1), ("c2", "c", 32, 0, 1)):
        e.submit(gang(key, queue, pods, gpu, cpu=cpu), 0.0)
    assert sorted(admitted(e.schedule(1.0))) == ["c1", "c2", "g1"]
    e.submit(gang("g2", "g", 1, 4, t=1.0), 1.0)
    assert admitted(e.schedule(2.0)) == []
    assert e.workloads["ns/g2"].reason == "InsufficientNodes"
    return e


def test_capacity_freed_in_another_pool_does_not_retry_the_queue() -> None:
    e = _cluster()
    e.finish("ns/c1", 3.0)  # a CPU node comes free: no use to g2
    assert admitted(e.schedule(3.0)) == []
    assert e.node_retries.get("g", 0) == 0
    assert e.workloads["ns/g2"].reason == "InsufficientNodes"
    e.finish("ns/g1", 4.0)  # the GPU node comes free
    assert admitted(e.schedule(4.0)) == ["g2"]


def test_capacity_freed_in_its_pool_retries_the_queue() -> None:
    e = _cluster()
    e.finish("ns/c1", 3.0)
    e.schedule(3.0)
    e.finish("ns/g1", 4.0)
    e.submit(gang("g3", "g", 1, 8, t=4.0), 4.0)  # behind g2 in the queue
    assert admitted(e.schedule(4.0)) == ["g2"]
    assert e.workloads["ns/g3"].reason == "InsufficientNodes"
    e.finish("ns/c2", 5.0)  # CPU capacity again: g3 waits on GPU nodes, g is not retried
    before = e.node_retries.get("g", 0)
    assert admitted(e.schedule(5.0)) == []
    assert e.node_retries.get("g", 0) == before
    e.finish("ns/g2", 6.0)
    assert admitted(e.schedule(6.0)) == ["g3"]


def test_a_new_node_retries_every_queue_waiting_on_nodes() -> None:
    """Nodes that join (or change) may form a pool the gangs' last node check did not know."""
    e = _cluster()
    e.upsert_node(NodeSpec("gpu-new", {"cpu": 64_000, GPU: 8}, {"pool": "gpu"}))
    assert admitted(e.schedule(3.0)) == ["g2"]


def _new_head_then_freed_nodes(engine_class: type[Engine]) -> tuple[Engine, list[str], list[str]]:
    """Queues q and o, no cohort, two 4-cpu nodes. o runs r1 (3 pods) and r2 (1). q's big (7
    pods) cannot fit and starves (timeout 60 s), so small (1 pod), queued at 70, is held back
    although it fits. At 80 urgent (priority 5, 6 pods) fails too and takes big's place as the
    protected head; it has not waited, so nothing behind it is held back any more. At 90 r2
    finishes: capacity freed on the nodes retries q. What is admitted at 80, and at 80 and 90."""
    e = engine_class(EngineConfig(pods_ready_timeout=None, starvation_timeout=60))
    e.upsert_namespace("ns", {})
    add_nodes(e, "x", 2, cpu=4, gpu=0)
    add_queue(e, "q", [quota("x", 100, 0)])
    add_queue(e, "o", [quota("x", 100, 0)])
    e.submit(gang("r1", "o", 3, 0), 0.0)
    e.submit(gang("r2", "o", 1, 0), 0.0)
    e.submit(gang("big", "q", 7, 0, t=0.5), 0.5)
    assert sorted(admitted(e.schedule(1.0))) == ["r1", "r2"]
    e.submit(gang("small", "q", 1, 0, t=70.0), 70.0)
    assert admitted(e.schedule(70.0)) == []
    assert e.workloads["ns/small"].reason == "BlockedByReservation"
    e.submit(gang("urgent", "q", 6, 0, priority=5, t=80.0), 80.0)
    at80 = admitted(e.schedule(80.0))
    assert e.cluster_queues["q"].head() is e.workloads["ns/urgent"]
    e.finish("ns/r2", 90.0)
    log = at80 + admitted(e.schedule(90.0))
    e.check_invariants()
    return e, at80, log


def test_a_new_head_that_displaces_a_starving_one_lets_the_gangs_it_held_back_pass_at_once() -> None:
    """The cycle in which urgent displaces big as q's head looks at the gangs behind urgent as a
    retry would: small, held back by big's reservation, is admitted at 80 instead of waiting for
    the next retry of q (here the freed node at 90, which would have to be a full node retry, since
    small never failed the node check)."""
    _, at80, log = _new_head_then_freed_nodes(RetryCountingEngine)
    assert at80 == ["small"]
    assert log == ["small"]


def test_the_retry_after_a_head_change_decides_as_trying_every_gang_does() -> None:
    from .test_properties import UnfilteredEngine

    assert _new_head_then_freed_nodes(UnfilteredEngine)[2] == _new_head_then_freed_nodes(RetryCountingEngine)[2]


def _nodes_in_one_flavor_quota_in_the_next(engine_class: type[Engine]) -> tuple[Engine, list[str]]:
    """Queue q has flavors a (quota 8 cpu) then b (quota 4 cpu); queue o (no cohort, flavor a)
    runs x on a's only node (4 cpu). q runs y (2 cpu) in b. g (3 cpu) fits a's quota but not its
    node, and b's node but not its quota (2 of 4 left: preemption would be needed, and q may not
    preempt). Then x finishes: a's node comes free, and only o's quota with it."""
    e = engine_class(EngineConfig(pods_ready_timeout=None))
    e.upsert_namespace("ns", {})
    add_nodes(e, "a", 1, cpu=4, gpu=0)
    add_nodes(e, "b", 1, cpu=4, gpu=0)
    add_queue(e, "q", [quota("a", 8, 0), quota("b", 4, 0)])
    add_queue(e, "o", [quota("a", 4, 0)])
    e.submit(gang("x", "o", 4, 0), 0.0)
    e.submit(gang("y", "q", 2, 0, t=0.5), 0.5)
    assert admitted(e.schedule(1.0)) == ["x", "y"]
    e.submit(gang("g", "q", 3, 0, t=1.0), 1.0)
    assert admitted(e.schedule(2.0)) == []
    assert e.workloads["ns/g"].reason == "InsufficientQuota"  # b's shortfall names the reason
    e.finish("ns/x", 3.0)
    log = admitted(e.schedule(3.0))
    e.check_invariants()
    return e, log


def test_a_gang_short_of_nodes_in_one_flavor_and_of_quota_in_the_next_waits_for_nodes() -> None:
    """Freed nodes alone let g in through flavor a: a gang short of nodes in one flavor and of
    quota in the next waits for nodes too, not only for the quota its reason names. Otherwise
    nothing retries its queue until an event in the queue's own quota; at benchmark scale (500
    nodes) gangs waited whenever no other gang of their queue waited on the same pool."""
    e, log = _nodes_in_one_flavor_quota_in_the_next(RetryCountingEngine)
    assert log == ["g"]
    assert e.workloads["ns/g"].state == "Admitted"


def test_the_wait_for_nodes_behind_a_quota_reason_decides_as_trying_every_gang_does() -> None:
    from .test_properties import UnfilteredEngine

    assert (
        _nodes_in_one_flavor_quota_in_the_next(UnfilteredEngine)[1]
        == _nodes_in_one_flavor_quota_in_the_next(RetryCountingEngine)[1]
    )


def _starving_head_deleted(engine_class: type[Engine]) -> list[str]:
    """Queue q (one 4-cpu node) runs r (3 pods); big (4 pods) waits and starves (timeout 60 s),
    so small (1 pod, queued at 70) is held back although it fits. At 80 big is deleted while it
    waits, and nothing else happens: what the next cycle admits."""
    e = engine_class(EngineConfig(pods_ready_timeout=None, starvation_timeout=60))
    e.upsert_namespace("ns", {})
    add_nodes(e, "x", 1, cpu=4, gpu=0)
    add_queue(e, "q", [quota("x", 100, 0)])
    e.submit(gang("r", "q", 3, 0), 0.0)
    e.submit(gang("big", "q", 4, 0, t=0.5), 0.5)
    assert admitted(e.schedule(1.0)) == ["r"]
    e.submit(gang("small", "q", 1, 0, t=70.0), 70.0)
    assert admitted(e.schedule(70.0)) == []
    assert e.workloads["ns/small"].reason == "BlockedByReservation"
    e.finish("ns/big", 80.0)  # deleted before it was admitted
    log = admitted(e.schedule(80.0))
    e.check_invariants()
    return log


def test_deleting_a_starving_head_lets_the_gangs_it_held_back_pass() -> None:
    """The held-back gangs were skipped without a retry of their own (IncrementalRetry.fails_again): the
    head's leaving retries its queue (Routing.unqueue), or small would wait for an unrelated
    event."""
    assert _starving_head_deleted(Engine) == ["small"]


def test_deleting_a_starving_head_decides_as_trying_every_gang_does() -> None:
    from .test_properties import UnfilteredEngine

    assert _starving_head_deleted(UnfilteredEngine) == _starving_head_deleted(Engine)
