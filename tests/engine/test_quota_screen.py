"""A queue retried only because other queues of its cohort gave quota back (or ended a claim on
lent quota) is skipped while that cannot make any of its gangs fit (IncrementalRetry.still_short), and
retried in full as soon as it could; a head's reservation works out the older heads'
reservations only for a flavor option that fits (Reservations.reservation)."""

from __future__ import annotations

from typing import Any

from gangq.core import EngineConfig, PodSetSpec, WorkloadSpec
from gangq.core.engine import Engine
from gangq.core.retry import IncrementalRetry

from .builders import GPU, add_nodes, add_queue, admitted, gang, quota


class CountingRetry(IncrementalRetry):
    """Counts the retry screens (what a queue could take) per ClusterQueue."""

    def __init__(self) -> None:
        self.screens: dict[str, int] = {}

    def candidate_bounds(self, cq: Any, ctx: Any) -> Any:
        self.screens[cq.name] = self.screens.get(cq.name, 0) + 1
        return super().candidate_bounds(cq, ctx)


class UnscreenedRetry(CountingRetry):
    def still_short(self, cq: Any, claims: Any) -> bool:
        return False


class CountingEngine(Engine):
    """The engine with :class:`CountingRetry` as its retry policy."""

    policy_class: type[CountingRetry] = CountingRetry

    def __init__(self, config: EngineConfig) -> None:
        policy = self.policy_class()
        super().__init__(config, retry=policy)
        self.screens = policy.screens


class UnscreenedEngine(CountingEngine):
    policy_class = UnscreenedRetry


def _cohort(engine_class: type[CountingEngine]) -> CountingEngine:
    """Queues a (16 cpus) and b (8 cpus) in one cohort, nodes to spare. b runs b1 on its own quota
    and waits with ``big`` (12 cpus); a runs a0 (1 cpu), a1 (8) and a2 (7)."""
    e = engine_class(EngineConfig(pods_ready_timeout=None))
    e.upsert_namespace("ns", {})
    add_nodes(e, "cpu", 4, gpu=0)
    add_queue(e, "a", [quota("cpu", 16, 0)], cohort="pool")
    add_queue(e, "b", [quota("cpu", 8, 0)], cohort="pool")
    for key, queue, pods in (("a0", "a", 1), ("a1", "a", 8), ("a2", "a", 7), ("b1", "b", 8)):
        e.submit(gang(key, queue, pods, 0), 0.0)
    assert sorted(admitted(e.schedule(1.0))) == ["a0", "a1", "a2", "b1"]
    e.submit(gang("big", "b", 12, 0, t=1.0), 1.0)
    assert admitted(e.schedule(2.0)) == []
    assert e.workloads["ns/big"].reason == "InsufficientQuota"
    return e


def _run(engine_class: type[CountingEngine]) -> tuple[list[tuple[float, list[str]]], list[int]]:
    """Finish a0, a1, a2 one by one: what each cycle admits, and b's screens after each."""
    return _finish_in_turn(_cohort(engine_class), (3.0, "a0"), (4.0, "a1"), (5.0, "a2"))


def _finish_in_turn(e: CountingEngine, *steps: tuple[float, str]) -> tuple[list[tuple[float, list[str]]], list[int]]:
    """Finish each gang at its time and schedule: what each cycle admits, and b's screens after
    each."""
    log = []
    screens = []
    for t, key in steps:
        e.finish(f"ns/{key}", t)
        log.append((t, admitted(e.schedule(t))))
        screens.append(e.screens.get("b", 0))
        e.check_invariants()
    return log, screens


def test_a_retry_that_the_given_back_quota_cannot_help_is_skipped() -> None:
    log, screens = _run(CountingEngine)
    # a0's cpu leaves big 11 short: b is screened and found short. a1's 8 cannot make up for 11:
    # b is not even screened. a2's 7 could (15 given back since): b is retried and big, which
    # now fits the 16 cpus that a lends, is admitted.
    assert screens[0] > 0
    assert screens[1] == screens[0]
    assert screens[2] > screens[1]
    assert log == [(3.0, []), (4.0, []), (5.0, ["big"])]


def test_skipping_changes_no_decision() -> None:
    log, screens = _run(UnscreenedEngine)
    assert 0 < screens[0] < screens[1] < screens[2]  # without the skip, every release screens b
    assert log == _run(CountingEngine)[0]


def test_a_queue_that_released_quota_itself_is_screened_again() -> None:
    """Its own unused quota grew: the last screen no longer bounds what it could take."""
    e = _cohort(CountingEngine)
    e.finish("ns/a0", 3.0)
    assert admitted(e.schedule(3.0)) == []
    assert e.s.book.scratch["b"].screen is not None
    before = e.screens["b"]
    e.finish("ns/b1", 4.0)  # b's own 8 cpus, plus the 1 that a lends: 9 of big's 12
    assert e.s.book.scratch["b"].screen is None
    assert admitted(e.schedule(4.0)) == []
    assert e.screens["b"] > before
    e.finish("ns/a1", 5.0)  # 8 more given back by a: 17, and big fits
    assert admitted(e.schedule(5.0)) == ["big"]


def test_a_gang_joining_the_queue_ends_the_skip() -> None:
    """A new gang may need less than every gang the screen saw."""
    e = _cohort(CountingEngine)
    e.finish("ns/a0", 3.0)
    assert admitted(e.schedule(3.0)) == []
    e.submit(gang("small", "b", 1, 0, t=3.5), 3.5)
    assert admitted(e.schedule(3.5)) == ["small"]  # tried as a new gang: a0's cpu is free
    e.finish("ns/a1", 4.0)
    before = e.screens["b"]
    e.schedule(4.0)
    assert e.screens["b"] == before + 1  # screened again, not skipped


def _given_back_and_taken(engine_class: type[CountingEngine]) -> tuple[list[tuple[float, list[str]]], list[int]]:
    """After b's screen (a0's 1 cpu free, big short of 11), a gives back 8, then 7, and each time
    a gang of a that waited takes it again in the cycle that follows: b's big never fits until
    a3 and a4 finish with nobody to take their cpus. What each cycle admits, and b's screens."""
    e = _cohort(engine_class)
    e.finish("ns/a0", 3.0)
    assert admitted(e.schedule(3.0)) == []
    log = []
    screens = [e.screens["b"]]
    for t, submit, pods, finish in ((3.5, "a3", 8, "a1"), (4.5, "a4", 7, "a2")):
        e.submit(gang(submit, "a", pods, 0, t=t), t)
        assert admitted(e.schedule(t)) == []  # 1 cpu free in the cohort
        e.finish(f"ns/{finish}", t + 0.5)
        log.append((t + 0.5, admitted(e.schedule(t + 0.5))))
        screens.append(e.screens["b"])
        e.check_invariants()
    for t, finish in ((6.0, "a3"), (7.0, "a4")):
        e.finish(f"ns/{finish}", t)
        log.append((t, admitted(e.schedule(t))))
        screens.append(e.screens["b"])
    return log, screens


def test_quota_given_back_and_taken_again_does_not_retry_a_short_queue() -> None:
    """The cohort's usage, not only what was given back, bounds what b could take: after a2,
    15 cpus were given back since b's screen but only 7 are free, and 1 + 7 is short of 12."""
    log, screens = _given_back_and_taken(CountingEngine)
    assert log == [(4.0, ["a3"]), (5.0, ["a4"]), (6.0, []), (7.0, ["big"])]
    assert screens[0] == screens[1] == screens[2] == screens[3]  # skipped at 4, 5 and 6
    assert screens[4] > screens[3]  # a4's 7 more: 16 free, and big is admitted


def test_the_cohort_usage_bound_changes_no_decision() -> None:
    log, screens = _given_back_and_taken(UnscreenedEngine)
    assert screens[0] < screens[1] < screens[2]
    assert log == _given_back_and_taken(CountingEngine)[0]


def _claimed_then_admitted(engine_class: type[CountingEngine]) -> tuple[CountingEngine, list[list[str]], int]:
    """Cohort of a (16 cpus), b (8) and c (4). b runs b1 (8) and b2 (12, borrowed), c runs c1
    (4): 4 cpus are free, too few for b's ``big`` (12) and a's ``wide`` (8). wide fits a's
    unused quota, so a claims back what it lent. c1 finishes: b's turn comes first (big is
    older), and b may take none of the 8 free under the claim: it is screened short. Then wide
    is admitted, and its claim ends. Returns the engine, what the two schedules admit, and b's
    screens after the first one."""
    e = engine_class(EngineConfig(pods_ready_timeout=None))
    e.upsert_namespace("ns", {})
    add_nodes(e, "cpu", 4, gpu=0)
    add_queue(e, "a", [quota("cpu", 16, 0)], cohort="pool")
    add_queue(e, "b", [quota("cpu", 8, 0)], cohort="pool")
    add_queue(e, "c", [quota("cpu", 4, 0)], cohort="pool")
    for key, queue, pods in (("b1", "b", 8), ("b2", "b", 12), ("c1", "c", 4)):
        e.submit(gang(key, queue, pods, 0), 0.0)
    assert sorted(admitted(e.schedule(1.0))) == ["b1", "b2", "c1"]
    e.submit(gang("big", "b", 12, 0, t=0.5), 1.0)
    e.submit(gang("wide", "a", 8, 0, t=1.0), 1.0)
    log = [admitted(e.schedule(2.0))]
    assert e.workloads["ns/wide"].reason == "InsufficientQuota"
    assert e.cluster_queues["a"].protected_head is e.workloads["ns/wide"]
    screens = e.screens.get("b", 0)
    e.finish("ns/c1", 3.0)
    log.append(admitted(e.schedule(3.0)))
    e.check_invariants()
    return e, log, screens


def test_a_claim_that_ends_does_not_retry_a_queue_still_short_without_it() -> None:
    """Without the claim b could have taken 8 cpus at its screen, and the cohort's usage has not
    dropped since (wide took 8 more): 8 is short of big's 12, so b is not retried in full when
    wide's admission ends the claim."""
    e, log, screens = _claimed_then_admitted(CountingEngine)
    assert log == [[], ["wide"]]
    assert e.screens["b"] == screens + 1  # the screen under the claim, then none
    big = e.workloads["ns/big"]
    assert big.state == "Pending" and big.reason == "InsufficientQuota"
    e.finish("ns/b2", 4.0)  # b's own release: 12 free, and big fits
    assert admitted(e.schedule(4.0)) == ["big"]


def test_the_ended_claim_bound_changes_no_decision() -> None:
    e, log, screens = _claimed_then_admitted(UnscreenedEngine)
    assert e.screens["b"] == screens + 2  # retried again when the claim ended
    assert log == _claimed_then_admitted(CountingEngine)[1]


def _older_head(pods: int) -> tuple[CountingEngine, Any]:
    """b's head big would borrow from a, whose older head ``old`` waits: a's gangs are gone and
    b1 still runs, so big fits the quota only by borrowing a's idle cpus."""
    e = _cohort(CountingEngine)
    e.submit(gang("old", "a", pods, 0, t=0.5), 0.5)
    assert admitted(e.schedule(2.5)) == []
    for key in ("a0", "a1", "a2"):
        e.finish(f"ns/{key}", 3.0)
    old, big = e.workloads["ns/old"], e.workloads["ns/big"]
    assert e.cluster_queues["a"].head() is old and e.cluster_queues["b"].head() is big
    e.reservations.cache.clear()
    return e, big


def test_a_head_that_a_lender_claims_back_from_does_not_work_out_older_heads_reservations() -> None:
    """old (16 cpus) fits a's own quota: a claims it back, so big cannot be admitted now and
    the older head's reservation, which matters only if it could, is not worked out."""
    e, big = _older_head(16)
    info = e.reservations.reservation(big, 3.0)
    assert info.time is None and not info.never
    assert set(e.reservations.cache) == {"ns/big"}


def test_a_head_that_fits_works_out_older_heads_reservations() -> None:
    """old (17 cpus) is more than a's own quota, so a claims nothing back: big fits, and
    whether old's reservation holds it back is worked out."""
    e, big = _older_head(17)
    e.reservations.reservation(big, 3.0)
    assert "ns/old" in e.reservations.cache


def _cpu_gang(key: str, queue: str, cpus: int, t: float = 0.0) -> WorkloadSpec:
    """A gang of 1-cpu pods that requests no GPUs at all (not even 0): its own demand group."""
    return WorkloadSpec(f"ns/{key}", "ns", queue, [PodSetSpec("w", cpus, {"cpu": 1000})], creation_time=t)


def _mixed(engine_class: type[CountingEngine]) -> tuple[list[tuple[float, list[str]]], list[int]]:
    """One flavor; a (16 cpus, 4 GPUs) and b (8 cpus) in a cohort. b runs b1 (8 cpus) and waits
    with ``wide`` (10 cpus, no GPUs) and ``gpus`` (1 cpu, 2 GPUs); a runs a0 (4 cpus, 4 GPUs),
    a1 (4), a2 (2) and a3 (6). a1 finishes: 4 cpus free, more than the 1 that every gang of b
    needs at least, yet wide is short of cpus and gpus of GPUs. a2's 2 cpus cannot change that;
    a0's 4 cpus and 4 GPUs can. What each cycle admits, and b's screens after each."""
    e = engine_class(EngineConfig(pods_ready_timeout=None))
    e.upsert_namespace("ns", {})
    add_nodes(e, "x", 4)
    add_queue(e, "a", [quota("x", 16, 4)], cohort="pool")
    add_queue(e, "b", [quota("x", 8, 0)], cohort="pool")
    e.submit(gang("a0", "a", 4, 1), 0.0)
    for key, queue, cpus in (("a1", "a", 4), ("a2", "a", 2), ("a3", "a", 6), ("b1", "b", 8)):
        e.submit(_cpu_gang(key, queue, cpus), 0.0)
    assert sorted(admitted(e.schedule(1.0))) == ["a0", "a1", "a2", "a3", "b1"]
    e.submit(_cpu_gang("wide", "b", 10, t=1.0), 1.0)
    e.submit(gang("gpus", "b", 1, 2, t=1.5), 1.0)
    assert admitted(e.schedule(2.0)) == []
    return _finish_in_turn(e, (3.0, "a1"), (4.0, "a2"), (5.0, "a0"))


def test_gangs_short_of_different_resources_are_screened_per_group() -> None:
    """After a1, no one resource rules out every gang of b (both need at least 1 cpu, and 4
    are free), but each group is short of one: wide of cpus, gpus of GPUs. a2's 2 cpus leave
    both short, so b is not retried; a0's release is retried, and wide fits."""
    log, screens = _mixed(CountingEngine)
    assert log == [(3.0, []), (4.0, []), (5.0, ["wide"])]
    assert 0 < screens[0] == screens[1] < screens[2]  # screened, skipped, retried


def test_screening_per_group_changes_no_decision() -> None:
    log, screens = _mixed(UnscreenedEngine)
    assert 0 < screens[0] < screens[1] < screens[2]
    assert log == _mixed(CountingEngine)[0]


def _two_flavors(engine_class: type[CountingEngine]) -> tuple[list[tuple[float, list[str]]], list[int]]:
    """Flavors x (cpus) and y (cpus and GPUs). a owns x: 8 cpus and y: 4 cpus, 4 GPUs; b owns
    x: 8 cpus. a runs a0 in y (4 cpus, 2 GPUs) and a1, a2 in x (4 cpus each); b runs b1 in x
    (8 cpus). b waits with ``gpus`` (1 cpu, 2 GPUs). a1 finishes: in x 4 cpus are free but no
    GPU, in y 2 GPUs but no cpu. The most of each resource over both flavors would fit gpus;
    each flavor alone does not. a2's cpus in x cannot change that; a0's release in y can."""
    e = engine_class(EngineConfig(pods_ready_timeout=None))
    e.upsert_namespace("ns", {})
    add_nodes(e, "x", 2, gpu=0)
    add_nodes(e, "y", 2)
    add_queue(e, "a", [quota("x", 8, 0), quota("y", 4, 4)], cohort="pool")
    add_queue(e, "b", [quota("x", 8, 0), quota("y", 0, 0)], cohort="pool")
    e.submit(
        WorkloadSpec("ns/a0", "ns", "a", [PodSetSpec("w", 2, {"cpu": 2000, GPU: 1})], creation_time=0.0),
        0.0,
    )
    for key, queue, cpus in (("a1", "a", 4), ("a2", "a", 4), ("b1", "b", 8)):
        e.submit(_cpu_gang(key, queue, cpus), 0.0)
    assert sorted(admitted(e.schedule(1.0))) == ["a0", "a1", "a2", "b1"]
    assert e.workloads["ns/a0"].admission is not None
    assert {fr[0] for fr in e.workloads["ns/a0"].usage} == {"y"}
    e.submit(gang("gpus", "b", 1, 2, t=1.0), 1.0)
    assert admitted(e.schedule(2.0)) == []
    return _finish_in_turn(e, (3.0, "a1"), (4.0, "a2"), (5.0, "a0"))


def test_gangs_short_in_every_flavor_of_a_different_resource_are_screened_per_flavor() -> None:
    log, screens = _two_flavors(CountingEngine)
    assert log == [(3.0, []), (4.0, []), (5.0, ["gpus"])]
    assert 0 < screens[0] == screens[1] < screens[2]  # screened, skipped, retried


def test_screening_per_flavor_changes_no_decision() -> None:
    log, screens = _two_flavors(UnscreenedEngine)
    assert 0 < screens[0] < screens[1] < screens[2]
    assert log == _two_flavors(CountingEngine)[0]


def _taken_in_the_same_cycle(engine_class: type[CountingEngine]) -> tuple[list[str], int]:
    """a (16 cpus), b (8) and c (none of its own) in a cohort. b runs b1 (8) and waits with big
    (12); a runs a0 (1), a1 (8) and a2 (7). a0 finishes: b is screened, big short of 11. c
    queues c3 (8) and c4 (7), both older than big, which it can only borrow for (so it claims
    nothing back). Then a1 and a2 give 15 cpus back at once: enough for big as the cycle starts,
    but c's turn comes first and c3 and c4 take them all. What the cycle admits, and b's screens
    in it."""
    e = engine_class(EngineConfig(pods_ready_timeout=None))
    e.upsert_namespace("ns", {})
    add_nodes(e, "cpu", 4, gpu=0)
    for name, cpus in (("a", 16), ("b", 8), ("c", 0)):
        add_queue(e, name, [quota("cpu", cpus, 0)], cohort="pool")
    for key, queue, pods in (("a0", "a", 1), ("a1", "a", 8), ("a2", "a", 7), ("b1", "b", 8)):
        e.submit(gang(key, queue, pods, 0), 0.0)
    assert sorted(admitted(e.schedule(1.0))) == ["a0", "a1", "a2", "b1"]
    e.submit(gang("big", "b", 12, 0, t=1.0), 1.0)
    assert admitted(e.schedule(2.0)) == []
    e.finish("ns/a0", 3.0)
    assert admitted(e.schedule(3.0)) == []
    e.submit(gang("c3", "c", 8, 0, t=0.3), 3.5)
    e.submit(gang("c4", "c", 7, 0, t=0.4), 3.5)
    assert admitted(e.schedule(3.5)) == []
    before = e.screens["b"]
    e.finish("ns/a1", 4.0)
    e.finish("ns/a2", 4.0)
    log = sorted(admitted(e.schedule(4.0)))
    e.check_invariants()
    return log, e.screens["b"] - before


def test_quota_taken_earlier_in_the_cycle_is_screened_again_at_the_queue_s_turn() -> None:
    assert _taken_in_the_same_cycle(CountingEngine) == (["c3", "c4"], 0)


def test_screening_at_the_queue_s_turn_changes_no_decision() -> None:
    log, screens = _taken_in_the_same_cycle(UnscreenedEngine)
    assert screens > 0
    assert log == _taken_in_the_same_cycle(CountingEngine)[0]
