"""In a saturated cluster a retry looks at a few gangs per shape, not at every waiting gang that
fits the quota given back (CandidateWalk), and decides as FullRetry does."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from gangq.core import Admission, EngineConfig, Eviction
from gangq.core.engine import Engine
from gangq.core.retry import FullRetry, IncrementalRetry

from .builders import add_nodes, add_queue, gang, quota


class LookCounting(IncrementalRetry):
    """Counts the gangs that each retry's walk hands to the cycle (tried, or screened by
    fails_again)."""

    def __init__(self) -> None:
        self.looked = 0

    def cursor(self, cq: Any, retry: bool, ctx: Any, start: Any = None) -> Iterator[Any]:
        for key in super().cursor(cq, retry, ctx, start):
            self.looked += 1
            yield key


SIZES = (1, 2, 4, 8)


def _saturated(depth: int, policy: Any, queues: int = 1, seed: int = 7) -> tuple[Engine, list[str]]:
    """A cluster of 4 nodes x 8 GPUs, quota = cluster, filled with runners of known runtime; a
    32-GPU gang waits at the head of each queue, then ``depth`` gangs of 1-8 GPUs (four shapes,
    runtime limits from a few values). Returns the engine and the decision log."""
    rnd = random.Random(seed)
    e = Engine(EngineConfig(pods_ready_timeout=None), retry=policy)
    e.upsert_namespace("ns", {})
    add_nodes(e, "gpu", 4, cpu=256, gpu=8)
    names = [f"q{i}" for i in range(queues)]
    for name in names:
        add_queue(e, name, [quota("gpu", 1024, 32)], cohort="all" if queues > 1 else None)
    log: list[str] = []

    def schedule(now: float) -> None:
        for d in e.schedule(now):
            if isinstance(d, (Admission, Eviction)):
                log.append(f"{type(d).__name__} {d.workload} {now}")

    for i in range(4):
        e.submit(gang(f"run{i}", names[0], 1, 8, t=0.0, runtime=1000.0 + 100 * i), 0.0)
    schedule(0.0)
    for name in names:
        e.submit(gang(f"head-{name}", name, 4, 8, t=1.0, runtime=500.0), 1.0)
    for i in range(depth):
        gpus = rnd.choice(SIZES)
        e.submit(gang(f"g{i}", names[i % queues], 1, gpus, t=2.0 + i, runtime=rnd.choice((600.0, 900.0, 3000.0))), 2.0)
    schedule(2.0)
    return e, log


def _finish_one(e: Engine, key: str, now: float, log: list[str]) -> None:
    e.finish(key, now)
    for d in e.schedule(now):
        if isinstance(d, (Admission, Eviction)):
            log.append(f"{type(d).__name__} {d.workload} {now}")


def test_a_retry_looks_at_a_few_gangs_whatever_the_depth() -> None:
    """A finish gives back 8 GPUs: most waiting gangs fit them in quota, yet all would delay the
    32-GPU head's reservation; the retry looks at a handful of them, as many at 2,000 waiting
    gangs as at 100."""
    looked = {}
    for depth in (100, 2000):
        policy = LookCounting()
        e, log = _saturated(depth, policy)
        policy.looked = 0
        _finish_one(e, "ns/run0", 1000.0, log)
        looked[depth] = policy.looked
    assert looked[2000] <= looked[100] + 4, looked
    assert looked[2000] <= 4 * len(SIZES) + 4, looked


def _replay(depth: int, policy: Any, queues: int, seed: int) -> list[str]:
    """The saturated cluster, then its runners and admitted gangs finishing one by one in order
    of their runtime limit, each finish followed by a scheduling call."""
    e, log = _saturated(depth, policy, queues, seed)
    rnd = random.Random(seed)
    now = 2.0
    for _ in range(depth // 2):
        running = sorted(
            (wl.end_time or 0.0, key)
            for key, wl in e.s.world.workloads.items()
            if wl.state == "Admitted" and wl.end_time is not None
        )
        if not running:
            break
        end, key = running[min(len(running) - 1, rnd.randrange(2))]  # mostly in order, sometimes not
        now = max(now, min(end, now + rnd.choice((1.0, 50.0, 400.0))))
        _finish_one(e, key, now, log)
    return log


def test_decisions_equal_full_retry_in_a_saturated_queue() -> None:
    for seed in (1, 2, 3):
        assert _replay(300, IncrementalRetry(), 1, seed) == _replay(300, FullRetry(), 1, seed)


def test_decisions_equal_full_retry_in_saturated_queues_of_one_cohort() -> None:
    """Three queues of one cohort retried in one cycle: a gang admitted in one queue changes the
    state before the turn of gangs another queue's walk skipped (SchedulingCycle.restart_walks)."""
    for seed in (4, 5):
        assert _replay(120, IncrementalRetry(), 3, seed) == _replay(120, FullRetry(), 3, seed)
