"""Working out a head's reservation places it on the nodes once when the older heads in its scope
have their reservations at hand (Reservations.fits_and_held_back), and answers as the longer way does."""

from __future__ import annotations

import random
from typing import Any

from gangq.core import EngineConfig
from gangq.core.engine import Engine
from gangq.core.placement import Placement

from .builders import add_nodes, add_queue, admitted, gang, quota, use_placement


class WhatIfCounting(Placement):
    """Records the gang of every what-if node placement (outside a scheduling cycle's tries)."""

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement.s)
        self.whatifs: list[str] = []

    def place(self, wl: Any, a: Any, ctx: Any) -> Any:
        if ctx is None:
            self.whatifs.append(wl.key)
        return super().place(wl, a, ctx)


class WhatIfCountingEngine(Engine):
    """The engine with :class:`WhatIfCounting` as the placement its rule modules ask."""

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        counting = WhatIfCounting(self.placement)
        use_placement(self, counting)
        self.whatifs = counting.whatifs


def _cohort() -> WhatIfCountingEngine:
    """ha (queue a, 12 GPUs) waits for quota and starves after 10 s; hb (queue b, 8 GPUs) fits
    the 10 free GPUs of the cohort's quota only by borrowing 4, so ha is in its scope and holds
    it back."""
    e = WhatIfCountingEngine(EngineConfig(pods_ready_timeout=None, starvation_timeout=10))
    e.upsert_namespace("ns", {})
    add_nodes(e, "a100", 4)
    add_queue(e, "a", [quota("a100", 256, 8)], cohort="pool")
    add_queue(e, "b", [quota("a100", 256, 4)], cohort="pool")
    add_queue(e, "c", [quota("a100", 256, 4)], cohort="pool")
    e.submit(gang("c1", "c", 1, 6, t=0), 0)
    assert admitted(e.schedule(0)) == ["c1"]
    e.submit(gang("ha", "a", 2, 6, t=1), 1)
    assert admitted(e.schedule(1)) == []
    e.submit(gang("hb", "b", 1, 8, t=20), 20)
    assert admitted(e.schedule(20)) == []
    hb = e.workloads["ns/hb"]
    assert hb.reason == "BlockedByReservation" and "ns/ha" in hb.message
    return e


def test_a_head_with_the_older_reservations_at_hand_is_placed_once() -> None:
    e = _cohort()
    # hb became its queue's protected head after ha's reservation was worked out, so that one is
    # out of date (a reservation is cached until capacity or a protected head changes): at hand
    # again once worked out anew.
    assert e.reservations.cached(e.workloads["ns/ha"], 20) is None
    e.reservations.reservation(e.workloads["ns/ha"], 20)
    assert e.reservations.cached(e.workloads["ns/ha"], 20) is not None
    e.reservations.cache.pop("ns/hb", None)
    e.whatifs.clear()
    info = e.reservations.reservation(e.workloads["ns/hb"], 20)
    assert e.whatifs == ["ns/hb"]  # fits, and is held back by ha: one placement for both
    assert info.time is None and not info.never


def test_a_head_whose_older_reservations_must_be_worked_out_answers_the_same() -> None:
    e = _cohort()
    e.reservations.cache.clear()
    e.whatifs.clear()
    info = e.reservations.reservation(e.workloads["ns/hb"], 20)
    # hb placed to learn that it fits, ha's reservation worked out (ha does not fit the quota, so
    # it is never placed), then hb placed again to hold its place while ha's is checked.
    assert e.whatifs == ["ns/hb", "ns/hb"]
    assert info.time is None and not info.never


class FitCounting(Placement):
    """Counts the what-if fit tests of a reservation's end-time search (Placement.fit_test)."""

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement.s)
        self.fit_tests = 0

    def fit_test(self, *args: Any) -> tuple[bool, int]:
        self.fit_tests += 1
        return super().fit_test(*args)


def _full_queue(gpu_quota: int, pods: int) -> tuple[Engine, FitCounting]:
    """32 runners of 1 GPU fill 4 nodes of 8 GPUs, 8 to a node in order of admission (best fit),
    r<i> ending at 10 + i; then a head of ``pods`` pods of 8 GPUs waits in their queue, whose
    quota is ``gpu_quota`` GPUs. Its reservation is not cached and no fit test counted yet."""
    e = Engine(EngineConfig(pods_ready_timeout=None))
    counting = FitCounting(e.placement)
    use_placement(e, counting)
    e.upsert_namespace("ns", {})
    add_nodes(e, "a100", 4)
    add_queue(e, "q", [quota("a100", 256, gpu_quota)])
    for i in range(32):
        e.submit(gang(f"r{i}", "q", 1, 1, t=i, runtime=10 + i), 0)
    assert len(admitted(e.schedule(0))) == 32
    assert all(len(e.workloads[f"ns/r{i}"].held) == 1 for i in range(32))
    nodes_of = [next(iter(e.workloads[f"ns/r{i}"].held)) for i in range(32)]
    assert all(nodes_of[i] == nodes_of[i - i % 8] for i in range(32)), nodes_of
    e.submit(gang("big", "q", pods, 8, t=100), 1)
    assert admitted(e.schedule(1)) == []
    e.reservations.cache.clear()
    counting.fit_tests = 0
    return e, counting


def test_a_reservation_tries_the_head_only_once_the_released_quota_could_cover_it() -> None:
    """A head that needs the whole queue waits for 32 runners to end: it is placed once, after
    the last, not after each (a reservation's cost grew with the number of runners)."""
    e, counting = _full_queue(gpu_quota=32, pods=4)
    info = e.reservations.reservation(e.workloads["ns/big"], 1)
    assert info.time == 41  # the last runner's expected end
    assert counting.fit_tests == 1


def test_a_head_the_nodes_keep_out_is_tried_again_only_once_released_nodes_could_take_its_pods() -> None:
    """The quota lets the head in at once and the nodes do not: it is placed after the first
    runner ends (it is 1 pod short), then not again until a whole node is free (r0 to r7 ended)."""
    e, counting = _full_queue(gpu_quota=64, pods=1)
    info = e.reservations.reservation(e.workloads["ns/big"], 1)
    assert info.time == 17
    assert counting.fit_tests == 2


def test_a_gang_that_needs_every_node_is_tried_after_the_first_release_and_the_last() -> None:
    e, counting = _full_queue(gpu_quota=64, pods=4)
    info = e.reservations.reservation(e.workloads["ns/big"], 1)
    assert info.time == 41
    assert counting.fit_tests == 2


class NoNodeBound(FitCounting):
    """The end-time search without its node bound: an option is tried after every release once
    the quota could cover it."""

    def single_pod_set(self, a: Any) -> None:
        return None


SHAPES = ((1, 1), (1, 2), (2, 4), (1, 8), (3, 8), (4, 8))  # (pods, GPUs per pod)


def _nodes_bound_replay(placement: type[FitCounting], seed: int) -> tuple[list[str], int]:
    """A queue whose quota (64 GPUs) is twice its nodes (4 x 8 GPUs), so that the nodes are what
    the waiting gangs lack: 120 gangs of random shapes and runtime limits, then the running
    gangs finishing in order of their limit, each finish followed by a scheduling call. Returns
    every decision and the fit tests of the reservations' end-time searches."""
    rnd = random.Random(seed)
    e = Engine(EngineConfig(pods_ready_timeout=None, starvation_timeout=30))
    counting = placement(e.placement)
    use_placement(e, counting)
    e.upsert_namespace("ns", {})
    add_nodes(e, "gpu", 4, cpu=256)
    add_queue(e, "q", [quota("gpu", 1024, 64)])
    log: list[str] = []
    for i in range(120):
        pods, gpus = rnd.choice(SHAPES)
        e.submit(gang(f"g{i}", "q", pods, gpus, t=float(i), runtime=rnd.choice((60.0, 300.0, 900.0))), 0.0)
    log += map(repr, e.schedule(0.0))
    now = 0.0
    while True:
        running = sorted(
            (wl.end_time or 0.0, key) for key, wl in e.s.world.workloads.items() if wl.state == "Admitted"
        )
        if not running:
            break
        now, key = running[0]
        e.finish(key, now)
        log += map(repr, e.schedule(now))
    return log, counting.fit_tests


def test_the_node_bound_decides_as_the_search_without_it() -> None:
    for seed in (1, 2, 3):
        bounded, bounded_tests = _nodes_bound_replay(FitCounting, seed)
        unbounded, unbounded_tests = _nodes_bound_replay(NoNodeBound, seed)
        assert bounded == unbounded
        assert sum(line.startswith("Admission") for line in bounded) == 120
        assert bounded_tests < 0.7 * unbounded_tests, (bounded_tests, unbounded_tests)
