"""Kueue's scheduler performance test ("baseline") at a reduced scale."""

from __future__ import annotations

import pytest

from gangq.sim.policies import make_policy
from gangq.sim.report import summarize
from gangq.sim.scenario import KUEUE_BASELINE_CONFIG, kueue_baseline
from gangq.sim.simulator import Simulator


def test_scenario_follows_the_published_setup() -> None:
    sc = kueue_baseline(1.0)
    assert len(sc.config.cluster_queues) == 30
    assert {cq.cohort for cq in sc.config.cluster_queues.values()} == {f"cohort-{i}" for i in range(5)}
    assert all(cq.admission_mode == "QuotaOnly" for cq in sc.config.cluster_queues.values())
    assert sc.nodes == [] and sc.resource == "cpu"
    assert len(sc.jobs) == 15_000
    per_class = {c: sum(1 for j in sc.jobs if j.cls == c) for c in ("small", "medium", "large")}
    assert per_class == {"small": 10_500, "medium": 3_000, "large": 1_500}
    large = [j for j in sc.jobs if j.cls == "large" and j.local_queue == "cq-0-0"]
    assert [j.submit for j in large[:3]] == [0.0, 1.2, 2.4]
    assert (large[0].duration, large[0].demand(), sc.priority_of(large[0])) == (1.0, {"cpu": 20_000}, 200)
    assert sc.info["quota_bound_makespan_s"] == pytest.approx(66.0)
    assert KUEUE_BASELINE_CONFIG.name == "kueue-baseline.yaml"


def test_reduced_scale_run_reports_kueue_measures() -> None:
    sc = kueue_baseline(0.1)
    s = summarize(Simulator(sc, make_policy("gangq")).run())
    assert list(s["classes"]) == ["small", "medium", "large"]
    assert s["jobs"] == 30 * (35 + 10 + 5) and s["finished"] == s["jobs"]
    bound = sc.info["quota_bound_makespan_s"]
    assert bound <= s["makespan_s"] <= 1.3 * bound
    # priorities order the classes: large (200) before medium (100) before small (50)
    waits = {c: v["avg_wait_s"] for c, v in s["classes"].items()}
    assert waits["large"] < waits["medium"] < waits["small"]
    # Kueue's usage measure: cpu used x 100 / (nominal x makespan), for each of the 30 queues
    assert len(s["cluster_queues"]) == 30
    assert s["min_cq_usage_pct"] >= 85.0
    assert s["min_cq_usage_pct"] == min(v["usage_pct"] for v in s["cluster_queues"].values())


def test_large_gangs_wait_for_capacity_that_comes_free_instead_of_preempting() -> None:
    """Medium and small gangs end within a second; with the default preemption delay a large gang
    is admitted into the room they leave instead of killing them (Kueue's own run evicts, gangq
    preempted every medium gang in the gaps between large ones)."""
    sc = kueue_baseline(0.1)
    assert sc.engine_config.preemption_delay == 5.0 and sc.engine_config.preemption_budget is None
    s = summarize(Simulator(sc, make_policy("gangq")).run())
    assert s["evictions"] == 0
    assert s["classes"]["large"]["max_wait_s"] < 1.0


def test_without_a_delay_a_budget_of_one_lets_no_gang_lose_its_work_twice() -> None:
    """Preempting at once, the same medium gangs were re-admitted into the 0.2 s gaps between a
    queue's large gangs and preempted again; a budget of 1 preempts each at most once."""
    sc = kueue_baseline(0.1)
    sc.engine_config.preemption_delay = 0
    sc.engine_config.preemption_budget = 1
    result = Simulator(sc, make_policy("gangq")).run()
    assert max(r.preempted for r in result.runs) == 1
    # Preemption by priority still happens, once per gang.
    assert summarize(result)["preempted_by_reason"]["InClusterQueue"] == sum(r.preempted for r in result.runs) > 0
    mediums = [r for r in result.runs if r.cls == "medium"]
    assert all(r.end is not None for r in mediums)
