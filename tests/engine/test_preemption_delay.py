"""The preemption delay: a gang preempts only once it has waited ``preemption_delay`` seconds
(docs/engine.md, Preemption)."""

from __future__ import annotations

from gangq.core import EngineConfig, PreemptionSpec

from .builders import add_nodes, add_queue, admitted, engine, evicted, gang, quota


def _full_queue(delay: float):  # type: ignore[no-untyped-def]
    """One 8-GPU node, a queue of 8 GPUs that preempts lower priorities, filled by ``low``."""
    e = engine(EngineConfig(pods_ready_timeout=None, preemption_delay=delay))
    add_nodes(e, "a100", 1)
    add_queue(e, "q", [quota("a100", 64, 8)], preemption=PreemptionSpec(within_cluster_queue="LowerPriority"))
    e.submit(gang("low", "q", 1, 8, priority=1, t=0), 0)
    assert admitted(e.schedule(0)) == ["low"]
    return e


def test_capacity_that_comes_free_within_the_delay_admits_the_preemptor_without_an_eviction() -> None:
    e = _full_queue(5)
    e.submit(gang("high", "q", 1, 8, priority=9, t=10), 10)
    assert evicted(e.schedule(10)) == []
    assert e.workload("ns/high").state == "Pending"  # type: ignore[union-attr]
    e.finish("ns/low", 12)
    decisions = e.schedule(12)
    assert admitted(decisions) == ["high"] and evicted(decisions) == []


def test_the_preemptor_preempts_when_its_delay_ends_without_any_other_event() -> None:
    e = _full_queue(5)
    e.submit(gang("high", "q", 1, 8, priority=9, t=10), 10)
    assert evicted(e.schedule(10)) == []
    assert e.next_wakeup() == 15
    assert evicted(e.schedule(14.9)) == []
    assert evicted(e.schedule(15)) == ["low"]


def test_without_a_delay_the_preemptor_preempts_at_once() -> None:
    e = _full_queue(0)
    e.submit(gang("high", "q", 1, 8, priority=9, t=10), 10)
    assert evicted(e.schedule(10)) == ["low"]

