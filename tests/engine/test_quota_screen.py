"""A queue retried only because other queues of its cohort gave quota back is skipped while that
quota cannot make any of its gangs fit (Engine._still_short), and retried in full as soon as it
could; a head's reservation works out the older heads' reservations only for a flavor option
that fits (Engine._reservation)."""

from __future__ import annotations

from typing import Any

from gangq.core import EngineConfig
from gangq.core.engine import Engine

from .builders import add_nodes, add_queue, admitted, gang, quota


class CountingEngine(Engine):
    """Counts the retry screens (what a queue could take) per ClusterQueue."""

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.screens: dict[str, int] = {}

    def _candidate_bounds(self, cq: Any, ctx: Any) -> Any:
        self.screens[cq.name] = self.screens.get(cq.name, 0) + 1
        return super()._candidate_bounds(cq, ctx)


class UnscreenedEngine(CountingEngine):
    def _still_short(self, cq: Any, claims: Any) -> bool:
        return False


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
    e = _cohort(engine_class)
    log = []
    screens = []
    for t, key in ((3.0, "a0"), (4.0, "a1"), (5.0, "a2")):
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
    assert e.cluster_queues["b"].screen is not None
    before = e.screens["b"]
    e.finish("ns/b1", 4.0)  # b's own 8 cpus, plus the 1 that a lends: 9 of big's 12
    assert e.cluster_queues["b"].screen is None
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
    e._reservations.clear()
    return e, big


def test_a_head_that_a_lender_claims_back_from_does_not_work_out_older_heads_reservations() -> None:
    """old (16 cpus) fits a's own quota: a claims it back, so big cannot be admitted now and
    the older head's reservation, which matters only if it could, is not worked out."""
    e, big = _older_head(16)
    info = e._reservation(big, 3.0)
    assert info.time is None and not info.never
    assert set(e._reservations) == {"ns/big"}


def test_a_head_that_fits_works_out_older_heads_reservations() -> None:
    """old (17 cpus) is more than a's own quota, so a claims nothing back: big fits, and
    whether old's reservation holds it back is worked out."""
    e, big = _older_head(17)
    e._reservation(big, 3.0)
    assert "ns/old" in e._reservations
