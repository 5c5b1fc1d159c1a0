"""The slow tier: the engine's property tests on fresh random worlds, and a sweep of the seeded
liveness worlds. Marked ``slow_tier``: the README's test command leaves them out (addopts), and
``.ci/run`` runs them after it (``python -m pytest -m slow_tier``).

The property tests of ``test_properties`` are derandomized: they see the same worlds at every
run, so a rule they never exercised stays unchecked. Here hypothesis draws new worlds at every
run; a failure prints the world (``@reproduce_failure``) to add to the fixed tests. The liveness
sweep checks every twentieth of the seeded worlds 0–599 of both kinds (``GANGQ_SWEEP_START``
shifts the sample, to walk the others by hand).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from . import test_properties as properties
from .test_liveness import _admitted_by_a_full_retry
from .test_properties import _after_each_scheduling_call, world_st

pytestmark = [pytest.mark.slow_tier, pytest.mark.interpreted_only]

SWEEP_WORLDS = 600
SWEEP_STRIDE = 20
"""One seeded world in this many is swept (each costs a deep copy of the engine per scheduling call)."""


def sweep_seeds() -> list[int]:
    """The seeded worlds of the sweep: every ``SWEEP_STRIDE``-th from ``GANGQ_SWEEP_START`` (0)."""
    start = int(os.environ.get("GANGQ_SWEEP_START") or 0)
    return [(start + i) % SWEEP_WORLDS for i in range(0, SWEEP_WORLDS, SWEEP_STRIDE)]


@settings(max_examples=300, deadline=None, derandomize=False, suppress_health_check=[HealthCheck.too_slow])
@given(world_st)
def test_invariants_hold_on_fresh_random_worlds(
    world: tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]],
) -> None:
    properties.test_invariants_hold_after_every_event.hypothesis.inner_test(world)  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None, derandomize=False, suppress_health_check=[HealthCheck.too_slow])
@given(world_st)
def test_retry_shortcuts_change_no_decision_on_fresh_random_worlds(
    world: tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]],
) -> None:
    properties.test_retry_shortcuts_change_no_decision.hypothesis.inner_test(world)  # type: ignore[attr-defined]


@pytest.mark.parametrize("cpu_only", [False, True], ids=["plain", "cpu-only"])
@pytest.mark.parametrize("slot", range(SWEEP_WORLDS // SWEEP_STRIDE))
def test_a_full_retry_after_any_scheduling_call_admits_nothing_in_sampled_worlds(slot: int, cpu_only: bool) -> None:
    seed = sweep_seeds()[slot]
    for w in _after_each_scheduling_call(seed, cpu_only):
        missed = _admitted_by_a_full_retry(w.engine, w.now)
        assert missed == [], f"world {seed} (cpu_only={cpu_only}) at t={w.now}: a retry of every queue admits {missed}"
