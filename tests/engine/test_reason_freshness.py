"""Pending reasons stay true while the gangs they name change.

The retry shortcuts skip gangs that are known to fail, and a skipped gang keeps the reason of its
last try. A reason that names another gang (the head whose reservation holds it back, the
claimant whose lender's claim keeps it from borrowing, the head of a StrictFIFO queue) went
stale when that gang was admitted or stopped being its queue's head: before these rules, 97 of
100 random worlds showed such reasons, 36,936 times in all.
"""

from __future__ import annotations

import re

import pytest

from gangq.core import Engine, EngineConfig, PendingUpdate

from .builders import add_nodes, add_queue, admitted, engine, gang, hold_back_behind_starving_head, quota
from .test_properties import _after_each_scheduling_call

_HELD = re.compile(r"^(ns/\w+) has waited longer than the starvation timeout|^would delay the reservation of (ns/\w+)")
_CLAIM = re.compile(r"^cannot borrow: ClusterQueue '(\w+)' is reclaiming its lent quota for (ns/\w+)")
_STRICT_HEAD = re.compile(r"\(its head: (ns/\w+), (\w+)\)")


def _stale(e: Engine, key: str) -> str | None:
    """What is untrue about the reason of pending ``key``, or None."""
    view = e.workload(key)
    assert view is not None
    message = view.message
    named = _HELD.match(message)
    claim = _CLAIM.match(message)
    if named or claim:
        name = (named.group(1) or named.group(2)) if named else claim.group(2)  # type: ignore[union-attr]
        other = e.workloads.get(name)
        if other is None or other.state != "Pending" or other.cq is None:
            return f"{message!r}: {name} is not pending"
        if other.cq.head() is not other:
            return f"{message!r}: {name} is not its ClusterQueue's protected head"
        if claim and other.cq.name != claim.group(1):
            return f"{message!r}: {name} is queued in {other.cq.name}"
    strict = _STRICT_HEAD.search(message)
    if strict:
        queue = e.pending_workloads(view.cluster_queue or "", limit=1)
        if not queue or queue[0].key != strict.group(1) or queue[0].reason != strict.group(2):
            return f"{message!r}: the head is {queue[0].key if queue else None}"
    return None


@pytest.mark.parametrize(("seed", "cpu_only"), [(0, True), (1, True), (8, True), (3, True), (5, False), (6, False)])
def test_a_reason_that_names_a_gang_names_one_that_holds_it_back_now(seed: int, cpu_only: bool) -> None:
    """After every scheduling call, a pending reason that names a gang names a pending gang that
    is its queue's protected head (the one whose reservation or claim holds others back), and
    the head a StrictFIFO reason names is the queue's first gang, with its reason of now."""
    named = 0
    for w in _after_each_scheduling_call(seed, cpu_only):
        for key in w.specs:
            view = w.engine.workload(key)
            if view is None or view.state != "Pending":
                continue
            named += bool(_HELD.match(view.message) or _CLAIM.match(view.message) or "its head" in view.message)
            problem = _stale(w.engine, key)
            assert problem is None, (w.now, key, problem)
    assert named > 20  # the world has such reasons to check


def test_the_reason_of_a_gang_held_behind_a_starving_head_does_not_change_with_time() -> None:
    """"ns/head has waited 78s" was out of date at the next cycle, and stayed so for the gangs the
    retry shortcuts skipped; the reason now says what holds, without a figure that ages."""
    e = engine(EngineConfig(pods_ready_timeout=None, starvation_timeout=100))
    add_nodes(e, "a100", 2, gpu=8)
    add_queue(e, "q", [quota("a100", 256, 16)])
    e.submit(gang("running", "q", 1, 8), 0)
    assert admitted(e.schedule(0)) == ["running"]
    e.submit(gang("head", "q", 2, 8, t=1), 1)  # 16: waits for running
    e.submit(gang("small", "q", 1, 4, t=2), 1)  # fits: the head starves only from t=101
    assert admitted(e.schedule(1)) == ["small"]
    e.submit(gang("late", "q", 1, 2, t=3), 150)
    assert admitted(e.schedule(150)) == []
    late = e.workload("ns/late")
    assert late is not None and late.reason == "BlockedByReservation"
    assert late.message.startswith("ns/head has waited longer than the starvation timeout (100s)"), late.message
    # A node joins: every waiting gang is tried again, and says what it said.
    add_nodes(e, "a100", 1, prefix="extra")
    decisions = e.schedule(400)
    assert admitted(decisions) == []
    assert [d for d in decisions if isinstance(d, PendingUpdate)] == []


def test_a_gang_held_back_by_another_queues_head_is_retried_when_that_head_is_displaced() -> None:
    """b's g borrows 2 of a's GPUs, and a's starving head h holds it back. A gang of higher
    priority then takes h's place as a's head: h's reservation holds nothing back any more, and
    n's (it has not waited) does not hold g. The displacement retries the other queues of the
    cohort, in another cycle of the same scheduling call (within the cycle, h still holds g back):
    otherwise g would wait, its reason naming h, until some unrelated change retried b."""
    e = engine(EngineConfig(pods_ready_timeout=None, starvation_timeout=10))
    add_nodes(e, "a100", 2, gpu=8)
    add_queue(e, "a", [quota("a100", 64, 8)], cohort="pool")
    add_queue(e, "b", [quota("a100", 64, 0)], cohort="pool")
    hold_back_behind_starving_head(e)
    e.submit(gang("n", "a", 1, 8, priority=10, t=30), 30)
    assert admitted(e.schedule(30)) == ["g"]
    h = e.workload("ns/h")
    assert h is not None and h.state == "Pending"
