"""Each policy's basic behaviour on small inputs, and gangq against the baselines."""

from __future__ import annotations

import pytest

from gangq.core import EngineConfig
from gangq.sim.policies import make_policy
from gangq.sim.report import summarize
from gangq.sim.scenario import gang_deadlock
from gangq.sim.simulator import Simulator
from gangq.sim.trace import GPU
from tests.sim.helpers import contended_jobs, gpu_scenario, job


def _admits(policy: str, jobs: list, nodes: int = 4) -> dict[str, float | None]:  # type: ignore[type-arg]
    result = Simulator(gpu_scenario(jobs, nodes=nodes), make_policy(policy)).run()
    return {r.job.name: r.first_admit for r in result.runs}


HEAD_BLOCKS = [job("a", 0, 100, 3, 8), job("b", 1, 100, 2, 8), job("c", 2, 50, 1, 1)]


def test_fifo_is_strict_arrival_order() -> None:
    # b (16 GPUs) does not fit beside a (24 of 32); c (1 GPU) would, but waits behind b
    assert _admits("fifo", HEAD_BLOCKS) == {"a": 0.0, "b": 100.0, "c": 100.0}


def test_gangq_lets_a_small_gang_pass_a_blocked_head() -> None:
    assert _admits("gangq", HEAD_BLOCKS) == {"a": 0.0, "b": 100.0, "c": 2.0}


def test_sjf_runs_the_shortest_known_job_first() -> None:
    jobs = [
        job("running", 0, 100, 4, 8),
        job("long", 1, 500, 4, 8),
        job("short", 2, 100, 4, 8),
        job("mid", 3, 300, 4, 8),
    ]
    assert _admits("sjf", jobs) == {"running": 0.0, "short": 100.0, "mid": 200.0, "long": 500.0}
    assert _admits("fifo", jobs) == {"running": 0.0, "long": 100.0, "short": 600.0, "mid": 700.0}


def test_pod_by_pod_deadlocks_partial_gangs_and_gangq_does_not() -> None:
    sc = gang_deadlock()
    pbp = Simulator(sc, make_policy("pod-by-pod")).run()
    s = summarize(pbp)
    figures = s["policy_figures"]
    # gangs' pods interleave: every GPU is held by a gang that never gets all its pods
    assert s["admitted"] == 0 and s["not_admitted"] == 24
    assert figures["partial_gangs_at_end"] == 4
    assert figures["resource_held_by_partial_gangs_at_end"] == 32
    assert figures["partial_gang_resource_hours"] > 0
    # measured over a longer horizon, the held GPU-hours grow with it (32 GPUs x 1 h)
    later = pbp.policy.extra(pbp.end + 3600)
    assert later["partial_gang_resource_hours"] == pytest.approx(figures["partial_gang_resource_hours"] + 32)
    g = summarize(Simulator(sc, make_policy("gangq")).run())
    assert g["admitted"] == 24 and g["finished"] == 24 and g["not_admitted"] == 0


def test_pod_by_pod_without_contention_runs_every_gang() -> None:
    jobs = [job("a", 0, 10, 2, 8), job("b", 100, 10, 4, 8)]
    result = Simulator(gpu_scenario(jobs), make_policy("pod-by-pod")).run()
    # pods are created 1 s apart: a gang starts when its last pod is bound
    assert [(r.first_admit, r.end) for r in result.runs] == [(1.0, 11.0), (103.0, 113.0)]
    assert summarize(result)["policy_figures"]["partial_gang_resource_hours"] == pytest.approx(
        (8 * 1 + 8 + 16 + 24) / 3600
    )


def test_gangq_admits_whole_gangs_within_capacity() -> None:
    sc = gpu_scenario(contended_jobs(seed=3))
    result = Simulator(sc, make_policy("gangq")).run()
    for r in result.runs:
        assert r.first_admit is not None
    assert max(result.utilisation.values) <= sc.capacity()
    for cq, wait in result.admission_waits:
        assert cq == "team" and wait >= 0


@pytest.mark.parametrize("seed", [3, 4])
def test_gangq_beats_fifo_on_average_without_a_worse_maximum(seed: int) -> None:
    fifo = summarize(Simulator(gpu_scenario(contended_jobs(seed)), make_policy("fifo")).run())
    gangq = summarize(Simulator(gpu_scenario(contended_jobs(seed)), make_policy("gangq")).run())
    assert gangq["avg_wait_s"] < 0.6 * fifo["avg_wait_s"]
    assert gangq["max_wait_s"] <= fifo["max_wait_s"]
    assert gangq["utilization"] > fifo["utilization"]
    # the big gangs are not starved by the stream of small ones
    assert gangq["classes"]["big"]["max_wait_s"] <= fifo["max_wait_s"]


def test_quota_only_policies_share_a_cohort() -> None:
    from gangq.sim.scenario import kueue_baseline

    sc = kueue_baseline(0.02)
    s = summarize(Simulator(sc, make_policy("fifo")).run())
    assert s["admitted"] == s["jobs"] == 30 * (7 + 2 + 1)
    # borrowing within the cohort: some queue used more than its nominal quota at some point
    assert s["cluster_queues"]["cq-0-0"]["usage_pct"] > 0


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown policy 'lifo'"):
        make_policy("lifo")


def test_engine_config_reaches_the_engine() -> None:
    sc = gpu_scenario(HEAD_BLOCKS, engine=EngineConfig(pods_ready_timeout=None, starvation_timeout=0))
    result = Simulator(sc, make_policy("gangq")).run()
    # with no starvation allowance the blocked head holds its queue: c waits for b
    assert {r.job.name: r.first_admit for r in result.runs}["c"] == 100.0
    assert sc.resource == GPU
