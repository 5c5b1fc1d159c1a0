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



def _head_in_its_delay():  # type: ignore[no-untyped-def]
    """Queue q (8 GPUs, one node) runs r1 and r2 (4 GPUs each, priority 1); ``high`` (8 GPUs,
    priority 9) waits from t=10, its delay ending at 15; ``low`` (4 GPUs, priority 0) from t=11."""
    e = engine(EngineConfig(pods_ready_timeout=None, preemption_delay=5))
    add_nodes(e, "a100", 1)
    add_queue(e, "q", [quota("a100", 64, 8)], preemption=PreemptionSpec(within_cluster_queue="LowerPriority"))
    e.submit(gang("r1", "q", 1, 4, priority=1, t=0), 0)
    e.submit(gang("r2", "q", 1, 4, priority=1, t=0.5), 0)
    assert sorted(admitted(e.schedule(0))) == ["r1", "r2"]
    e.submit(gang("high", "q", 1, 8, priority=9, t=10), 10)
    e.submit(gang("low", "q", 1, 4, priority=0, t=11), 11)
    assert admitted(e.schedule(11)) == []
    return e


def test_a_gang_the_waiting_head_could_preempt_does_not_take_the_room_that_comes_free_in_its_delay() -> None:
    """Taken, the head would preempt it when its delay ends: a start and a kill for nothing."""
    e = _head_in_its_delay()
    e.finish("ns/r1", 12)
    assert admitted(e.schedule(12)) == []  # low fits the 4 GPUs r1 freed, and waits
    low = e.workload("ns/low")
    assert low is not None and low.reason == "BlockedByReservation"
    assert low.message.startswith("ns/high (priority 9) waits for capacity"), low.message
    e.finish("ns/r2", 13)
    decisions = e.schedule(13)
    assert admitted(decisions) == ["high"] and evicted(decisions) == []


def test_the_gang_held_for_the_head_goes_when_the_delay_ends() -> None:
    """The head then preempts if it must; the held gang takes what the head does not need."""
    e = _head_in_its_delay()
    e.finish("ns/r1", 12)
    assert admitted(e.schedule(12)) == []
    assert e.next_wakeup() == 15
    decisions = e.schedule(15)
    assert evicted(decisions) == ["r2"]  # the head preempts r2 (4 GPUs) for the 8 it needs
    assert admitted(decisions) == []  # low would take the room high chose r2 for: it waits
    e.eviction_done("ns/r2", 16)
    assert admitted(e.schedule(16)) == ["high"]


def test_a_gang_the_head_could_not_preempt_is_not_held() -> None:
    e = _head_in_its_delay()
    e.submit(gang("peer", "q", 1, 4, priority=9, t=11.5), 11.5)
    e.finish("ns/r1", 12)
    assert admitted(e.schedule(12)) == ["peer"]  # same priority as the head: no victim of it
