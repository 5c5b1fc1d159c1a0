"""Preemption without churn: the rules that keep the same gangs from being evicted over and over
(docs/engine.md, Preemption)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from gangq.core import Engine, EngineConfig, PreemptionSpec
from gangq.core.placement import Placement

from .builders import add_nodes, add_queue, admitted, engine, evicted, gang, quota, use_placement


def _grace_run(grace: float) -> list[str]:
    e = engine(EngineConfig(preemption_delay=0, pods_ready_timeout=None, preemption_grace=grace))
    add_nodes(e, "a100", 2)
    add_queue(e, "q", [quota("a100", 64, 16)], preemption=PreemptionSpec(within_cluster_queue="LowerPriority"))
    e.submit(gang("old", "q", 1, 8, priority=1, t=0), 0)
    e.submit(gang("again", "q", 1, 8, priority=1, t=1), 0)
    assert admitted(e.schedule(0)) == ["old", "again"]
    e.submit(gang("high1", "q", 1, 8, priority=9, t=2), 1)
    assert evicted(e.schedule(1)) == ["again"]  # the later-submitted of two admitted together
    e.eviction_done("ns/again", 2)
    assert admitted(e.schedule(2)) == ["high1"]
    e.finish("ns/high1", 10)
    assert admitted(e.schedule(10)) == ["again"]  # re-admitted after its eviction
    e.submit(gang("high2", "q", 1, 8, priority=9, t=20), 20)
    return evicted(e.schedule(20))


def test_a_gang_readmitted_within_the_grace_is_not_preempted_again_while_another_victim_will_do() -> None:
    """Most recently admitted goes first (least work lost), so a re-admitted gang was always the
    next victim: the same gang was evicted again and again while older ones ran on."""
    assert _grace_run(0) == ["again"]
    assert _grace_run(300) == ["old"]


def test_a_gang_readmitted_within_the_grace_is_preempted_when_no_other_victim_will_do() -> None:
    e = engine()
    add_nodes(e, "a100", 1)
    add_queue(e, "q", [quota("a100", 64, 8)], preemption=PreemptionSpec(within_cluster_queue="LowerPriority"))
    e.submit(gang("low", "q", 1, 8, priority=1, t=0), 0)
    assert admitted(e.schedule(0)) == ["low"]
    e.submit(gang("high1", "q", 1, 8, priority=9, t=1), 1)
    assert evicted(e.schedule(1)) == ["low"]
    e.eviction_done("ns/low", 2)
    assert admitted(e.schedule(2)) == ["high1"]
    e.finish("ns/high1", 3)
    assert admitted(e.schedule(3)) == ["low"]
    e.submit(gang("high2", "q", 1, 8, priority=9, t=4), 4)
    assert evicted(e.schedule(4)) == ["low"]


def _two_running(first: tuple[str, int], second: tuple[str, int]) -> Engine:
    """Two nodes of 8 GPUs, queue q (16 GPUs, preempts lower priorities) running two 8-GPU gangs
    (name, priority), submitted in that order."""
    e = engine()
    add_nodes(e, "a100", 2)
    add_queue(e, "q", [quota("a100", 64, 16)], preemption=PreemptionSpec(within_cluster_queue="LowerPriority"))
    for t, (name, priority) in enumerate((first, second)):
        e.submit(gang(name, "q", 1, 8, priority=priority, t=t), 0)
    assert sorted(admitted(e.schedule(0))) == sorted([first[0], second[0]])
    return e


def test_a_stopping_victim_of_one_preemptor_is_not_taken_by_another() -> None:
    """p1 chose v; p2, which comes first, took v too (gangs being evicted are the first victims).
    Once v stopped one of them found its victims short and preempted again."""
    e = _two_running(("v", 1), ("w", 2))
    e.submit(gang("p1", "q", 1, 8, priority=5, t=2), 1)
    assert evicted(e.schedule(1)) == ["v"]
    e.submit(gang("p2", "q", 1, 8, priority=9, t=3), 2)
    assert evicted(e.schedule(2)) == ["w"]
    e.eviction_done("ns/v", 3)
    e.eviction_done("ns/w", 3)
    decisions = e.schedule(3)
    assert sorted(admitted(decisions)) == ["p1", "p2"]
    assert evicted(decisions) == []


def test_a_preemptor_is_admitted_into_its_victims_room_before_gangs_that_come_first() -> None:
    """p (a, 10 GPUs: a's 8 and 2 of c's) preempts v. b's older g (6 GPUs, borrows) came first
    in the cycle once v stopped: it borrowed 6 of the 8 GPUs v freed, p was short again, and v,
    requeued, waited for room p could not use."""
    e = engine()
    add_nodes(e, "a100", 3)
    policy = PreemptionSpec(within_cluster_queue="LowerPriority")
    add_queue(e, "a", [quota("a100", 64, 8)], cohort="pool", preemption=policy, mode="QuotaOnly")
    add_queue(e, "b", [quota("a100", 64, 0)], cohort="pool", mode="QuotaOnly")
    add_queue(e, "c", [quota("a100", 64, 8)], cohort="pool", mode="QuotaOnly")
    e.submit(gang("v", "a", 1, 8, priority=0, t=0), 0)
    e.submit(gang("c0", "c", 1, 6, t=0.5), 0)
    assert admitted(e.schedule(0)) == ["v", "c0"]
    e.submit(gang("g", "b", 1, 6, priority=9, t=1), 1)
    assert admitted(e.schedule(1)) == []  # 2 GPUs free in the cohort
    e.submit(gang("p", "a", 1, 10, priority=5, t=2), 2)
    decisions = e.schedule(2)
    assert evicted(decisions) == ["v"]
    assert admitted(decisions) == []
    e.eviction_done("ns/v", 3)
    decisions = e.schedule(3)
    assert admitted(decisions) == ["p"]
    assert evicted(decisions) == []


def lending_pool() -> Engine:
    """Queues a and b (8 GPUs each, preempting lower priorities) each running a gang of 8, and c
    running 6 of its 8: c lends 2 to the cohort."""
    e = engine()
    add_nodes(e, "a100", 4)
    policy = PreemptionSpec(within_cluster_queue="LowerPriority")
    add_queue(e, "a", [quota("a100", 64, 8)], cohort="pool", preemption=policy, mode="QuotaOnly")
    add_queue(e, "b", [quota("a100", 64, 8)], cohort="pool", preemption=policy, mode="QuotaOnly")
    add_queue(e, "c", [quota("a100", 64, 8)], cohort="pool", mode="QuotaOnly")
    e.submit(gang("va", "a", 1, 8, t=0), 0)
    e.submit(gang("vb", "b", 1, 8, t=0.1), 0)
    e.submit(gang("c0", "c", 1, 6, t=0.2), 0)
    assert sorted(admitted(e.schedule(0))) == ["c0", "va", "vb"]
    return e


def test_a_preemptor_does_not_count_on_free_quota_another_preemptor_chose_its_victims_for() -> None:
    """pa and pb (10 GPUs each: their queue's 8 and 2 that c lends) both preempted, counting on
    the same 2 free GPUs. Once their victims stopped, pa took them, pb was short, vb was admitted
    again into b's quota, and pb preempted it again."""
    e = lending_pool()
    e.submit(gang("pa", "a", 1, 10, priority=5, t=1), 1)
    e.submit(gang("pb", "b", 1, 10, priority=5, t=2), 1)
    decisions = e.schedule(1)
    assert evicted(decisions) == ["va"]
    e.eviction_done("ns/va", 2)
    decisions = e.schedule(2)
    assert admitted(decisions) == ["pa"]
    assert evicted(decisions) == []


def test_a_gang_does_not_pass_a_preemptor_into_free_quota_another_preemptor_chose_its_victims_for() -> None:
    """pb (b, 10 GPUs: b's 8 and the 2 that c lends) preempted vb; pa (a, 8 GPUs) preempted va.
    g (a, 2 GPUs, behind pa, ahead of pb) passed pa: pa's reservation counted the 2 free GPUs as
    room, while pa chose va with pb's claim on them counted. With g admitted pa's victims no
    longer sufficed, and pa took g, admitted in that call, as a further victim."""
    e = lending_pool()
    e.submit(gang("pb", "b", 1, 10, priority=1, t=1), 1)
    assert evicted(e.schedule(1)) == ["vb"]
    e.submit(gang("pa", "a", 1, 8, priority=5, t=2), 2)
    e.submit(gang("g", "a", 1, 2, priority=2, t=2.1), 2)
    decisions = e.schedule(2)
    assert evicted(decisions) == ["va"]
    assert admitted(decisions) == []
    assert evicted(e.schedule(3)) == []
    e.eviction_done("ns/va", 4)
    decisions = e.schedule(4)
    assert admitted(decisions) == ["pa", "g"]  # g comes before pb, still waiting for vb
    assert evicted(decisions) == []


def test_a_gang_admitted_at_a_time_is_no_victim_at_that_time() -> None:
    """b's g borrowed the GPUs that a lends; a's l, tried after it in the same call, reclaimed
    them and preempted g: its pods were started and stopped in the same instant. l preempts at
    the next call, with no other event."""
    e = engine()
    add_nodes(e, "a100", 1)
    add_queue(e, "a", [quota("a100", 64, 8)], cohort="pool", preemption=PreemptionSpec(reclaim_within_cohort="Any"))
    add_queue(e, "b", [quota("a100", 64, 0)], cohort="pool")
    e.submit(gang("g", "b", 1, 8, t=0), 0)
    e.submit(gang("l", "a", 1, 8, t=1), 0)
    decisions = e.schedule(0)
    assert admitted(decisions) == ["g"]
    assert evicted(decisions) == []
    assert evicted(e.schedule(1)) == ["g"]
    e.eviction_done("ns/g", 2)
    assert admitted(e.schedule(2)) == ["l"]


def _preemptor_outpaced_by_a_lender(e: Engine) -> None:
    """p (a, 16 GPUs: a's 8 and the 8 b lends) preempts v and w; before they stop, b's own gang l
    takes 4 of b's GPUs. Once v and w have stopped, p is 4 short and waits for l to end."""
    add_nodes(e, "a100", 4)
    add_queue(e, "a", [quota("a100", 64, 8)], cohort="pool",
              preemption=PreemptionSpec(within_cluster_queue="LowerPriority"), mode="QuotaOnly")
    add_queue(e, "b", [quota("a100", 64, 8)], cohort="pool", mode="QuotaOnly")
    e.submit(gang("v", "a", 1, 8, priority=1, t=0), 0)
    e.submit(gang("w", "a", 1, 4, priority=1, t=0.1), 0)
    assert sorted(admitted(e.schedule(0))) == ["v", "w"]
    e.submit(gang("p", "a", 1, 16, priority=9, t=1), 1)
    assert sorted(evicted(e.schedule(1))) == ["v", "w"]
    e.submit(gang("l", "b", 1, 4, t=2), 2)
    assert admitted(e.schedule(2)) == ["l"]
    e.eviction_done("ns/v", 3)
    e.eviction_done("ns/w", 3)
    assert admitted(e.schedule(3)) == []


def test_a_victim_is_not_admitted_again_into_the_room_its_preemptor_waits_for() -> None:
    """v fit a's 8 GPUs again while p waited for l: it was admitted, and p preempted it again as
    soon as l ended (its work lost twice for one preemptor)."""
    e = engine()
    _preemptor_outpaced_by_a_lender(e)
    assert admitted(e.schedule(4)) == []
    view = e.workload("ns/v")
    assert view is not None and view.reason == "BlockedByReservation" and "ns/p" in view.message
    e.finish("ns/l", 5)
    decisions = e.schedule(5)
    assert admitted(decisions) == ["p"]
    assert evicted(decisions) == []
    e.finish("ns/p", 6)
    assert sorted(admitted(e.schedule(6))) == ["v", "w"]


def test_victims_waiting_for_their_preemptor_go_when_it_leaves() -> None:
    e = engine()
    _preemptor_outpaced_by_a_lender(e)
    e.finish("ns/p", 4)  # deleted while it waited
    assert sorted(admitted(e.schedule(4))) == ["v", "w"]


def test_victims_wait_for_their_preemptor_at_most_the_starvation_timeout() -> None:
    """After that, p (waiting since t=1) starves, and its reservation holds back its queue: v
    waits for it as any gang behind a starving head does."""
    e = engine(EngineConfig(preemption_delay=0, pods_ready_timeout=None, starvation_timeout=100))
    _preemptor_outpaced_by_a_lender(e)
    assert admitted(e.schedule(50)) == []
    assert e.next_wakeup() == 103
    assert admitted(e.schedule(103)) == []
    view = e.workload("ns/v")
    assert view is not None and view.reason == "BlockedByReservation"
    assert "preempted for" not in view.message and "ns/p has waited longer than the starvation timeout" in view.message


def _twice_preempted(shelter: int | None, starvation_timeout: float = 1800.0) -> Engine:
    """low (a, 4 GPUs) is preempted by hi1 (a, 4 GPUs; y fills the rest of a's 8); hi2 (8 GPUs)
    then waits for a's whole quota."""
    e = engine(
        EngineConfig(
            preemption_delay=0,
            pods_ready_timeout=None,
            preemption_shelter=shelter,
            starvation_timeout=starvation_timeout,
        )
    )
    add_nodes(e, "a100", 2)
    add_queue(e, "a", [quota("a100", 64, 8)], cohort="pool",
              preemption=PreemptionSpec(within_cluster_queue="LowerPriority"), mode="QuotaOnly")
    add_queue(e, "b", [quota("a100", 64, 8)], cohort="pool", mode="QuotaOnly")
    e.submit(gang("busy", "b", 1, 8, t=0), 0)
    e.submit(gang("low", "a", 1, 4, priority=0, t=0.1), 0)
    e.submit(gang("y", "a", 1, 4, priority=5, t=0.2), 0)
    assert sorted(admitted(e.schedule(0))) == ["busy", "low", "y"]
    e.submit(gang("hi1", "a", 1, 4, priority=5, t=1), 1)
    assert evicted(e.schedule(1)) == ["low"]
    e.eviction_done("ns/low", 2)
    assert admitted(e.schedule(2)) == ["hi1"]
    e.submit(gang("hi2", "a", 1, 8, priority=5, t=3), 3)
    assert admitted(e.schedule(3)) == []
    e.finish("ns/y", 4)
    return e


def test_a_gang_preempted_often_enough_waits_while_a_gang_that_would_preempt_it_again_waits() -> None:
    """In a saturated queue with several priorities, low fit every hole that came free and was
    preempted by the next higher-priority gang that wanted the room, again and again."""
    assert admitted(_twice_preempted(None).schedule(4)) == ["low"]
    e = _twice_preempted(1)
    assert admitted(e.schedule(4)) == []
    view = e.workload("ns/low")
    assert view is not None and view.reason == "BlockedByReservation" and "preempted 1 times" in view.message
    e.finish("ns/hi1", 5)
    assert admitted(e.schedule(5)) == ["hi2"]
    e.finish("ns/hi2", 6)
    assert admitted(e.schedule(6)) == ["low"]


def test_a_sheltered_gang_goes_when_the_gang_it_was_sheltered_from_leaves() -> None:
    e = _twice_preempted(1)
    assert admitted(e.schedule(4)) == []
    e.finish("ns/hi2", 5)  # deleted while it waited
    assert admitted(e.schedule(5)) == ["low"]


def test_a_sheltered_gang_does_not_borrow() -> None:
    """A lender takes borrowed quota back by preemption: a sheltered gang runs only on its own
    queue's quota."""
    for shelter, expected in ((None, ["hi2", "low"]), (1, ["hi2"])):
        e = _twice_preempted(shelter)
        e.finish("ns/hi1", 4)
        e.finish("ns/busy", 4)  # b's 8 GPUs idle: low could borrow 4 of them
        assert admitted(e.schedule(4)) == expected
    e.finish("ns/hi2", 5)
    assert admitted(e.schedule(5)) == ["low"]  # a's own quota


def test_the_preempting_benchmark_case_meets_the_churn_targets() -> None:
    """``benchmarks/engine_scaling.py --preemption``'s 1,000-gang case (10 ClusterQueues that
    preempt lower priorities and reclaim in their cohort, gangs of 4 priorities all queued at
    once): no gang evicted more than 3 times, evictions at most half the admissions, every gang
    finished. Without the victim and shelter rules one gang is evicted 10 times."""
    spec = importlib.util.spec_from_file_location(
        "engine_scaling", Path(__file__).resolve().parents[2] / "benchmarks" / "engine_scaling.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.run_case(1_000, 10, 100, 3_600.0, preemption=True)
    assert result["finished"] == 1_000 and result["capped_at_seconds"] is None
    assert result["max_evictions_per_gang"] <= 3
    assert 2 * result["evictions"] <= result["admitted"]


def test_a_sheltered_gang_is_a_victim_only_of_a_starving_preemptor() -> None:
    """hi3 waits for low (preempted once, sheltered) to end, until it has waited the starvation
    timeout: then it preempts low, with no other event."""
    e = _twice_preempted(1, starvation_timeout=100)
    assert admitted(e.schedule(4)) == []
    e.finish("ns/hi1", 5)
    assert admitted(e.schedule(5)) == ["hi2"]
    e.finish("ns/hi2", 6)
    assert admitted(e.schedule(6)) == ["low"]
    e.submit(gang("hi3", "a", 1, 8, priority=5, t=7), 7)
    assert evicted(e.schedule(7)) == []
    assert e.next_wakeup() == 107
    assert evicted(e.schedule(107)) == ["low"]


def test_a_sheltered_gang_does_not_hold_back_the_gangs_of_its_shape() -> None:
    """A retry skips the gangs of a shape that one of them showed to fail; a sheltered gang fails
    for what only it has done, and low2, of the same shape, fits the room low may not take."""
    e = _twice_preempted(1)
    e.submit(gang("low2", "a", 1, 4, priority=0, t=3.9), 4)
    assert admitted(e.schedule(4)) == ["low2"]


class ReleaseCounting(Placement):
    """Counts the trial releases of preemption candidates (Placement.release_in_statement)."""

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement.s)
        self.releases = 0

    def release_in_statement(self, victim: Any) -> None:
        self.releases += 1
        super().release_in_statement(victim)


def test_a_search_that_no_victim_set_can_satisfy_in_quota_makes_no_what_if() -> None:
    """On a saturated cluster nearly every preemptor's search fails; the quota that all its
    candidates hold, with what is free, is checked before any trial release."""
    e = _two_running(("low", 1), ("mid", 5))
    counting = ReleaseCounting(e.placement)
    use_placement(e, counting)
    e.submit(gang("wide", "q", 2, 8, priority=3, t=2), 1)  # 16 GPUs; only "low" (8) is below it
    assert evicted(e.schedule(1)) == []
    assert counting.releases == 0
    e.submit(gang("top", "q", 2, 8, priority=9, t=3), 2)  # both are below it: 16 GPUs
    assert sorted(evicted(e.schedule(2))) == ["low", "mid"]
    assert counting.releases > 0
