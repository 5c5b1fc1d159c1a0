"""Runtime estimates learned from finished gangs (never from the trace's future)."""

from __future__ import annotations

import pytest

from gangq.core.runtimes import RuntimeEstimator
from gangq.sim.policies import GangqPolicy
from gangq.sim.simulator import Simulator

from .helpers import gpu_scenario, job


def test_estimate_is_a_quantile_of_the_groups_recent_history() -> None:
    est = RuntimeEstimator(window=4, quantile=0.5, min_samples=2)
    assert est.estimate("a", 8) is None
    est.observe("a", 8, 100.0)
    assert est.estimate("a", 8) is None  # too few samples
    for seconds in (300.0, 200.0, 900.0, 400.0):
        est.observe("a", 8, seconds)
    # Window of 4: 300, 200, 900, 400 -> the median of the sorted window is 400.
    assert est.estimate("a", 8) == 400.0
    # Other sizes and other queues have their own history (none yet): no estimate.
    assert est.estimate("a", 1) is None
    assert est.estimate("b", 8) is None


def test_estimator_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="quantile"):
        RuntimeEstimator(quantile=1.5)
    with pytest.raises(ValueError, match="min_samples"):
        RuntimeEstimator(window=2, min_samples=3)


def test_gangq_submits_learned_estimates_and_never_enforces_them() -> None:
    # Three short gangs finish first; the fourth, alike, is submitted with their run time as its
    # expected run time, but runs its true (much longer) duration to completion.
    jobs = [job(f"s{i}", float(i), 10.0, 1, 8) for i in range(3)]
    jobs.append(job("long", 100.0, 5000.0, 1, 8))
    scenario = gpu_scenario(jobs, nodes=1)
    policy = GangqPolicy()
    result = Simulator(scenario, policy).run()
    assert policy.engine is not None
    spec = policy._specs[3]
    assert spec is not None and spec.runtime_limit == 10.0
    long_run = result.runs[3]
    assert long_run.outcome == "Succeeded" and long_run.end == 5100.0
    assert result.extra["jobs_submitted_with_estimate"] == 1

    scenario.runtime_estimates = False
    policy = GangqPolicy()
    Simulator(scenario, policy).run()
    assert all(s is not None and s.runtime_limit is None for s in policy._specs)


def test_memory_is_bounded_by_dropping_the_group_observed_least_recently() -> None:
    est = RuntimeEstimator(window=4, quantile=0.5, min_samples=1, max_groups=2)
    est.observe("cq", "a", 10.0)
    est.observe("cq", "b", 20.0)
    est.observe("cq", "a", 12.0)  # a is now the most recent
    est.observe("cq", "c", 30.0)  # b goes
    assert est.estimate("cq", "b") is None
    assert est.estimate("cq", "a") is not None and est.estimate("cq", "c") == 30.0
    again = RuntimeEstimator(window=4, quantile=0.5, min_samples=1, max_groups=2)
    again.load(est.export())
    assert again.samples("cq", "a") == 2 and again.estimate("cq", "c") == 30.0
