"""The event loop: batching, determinism, wakeups, evictions, checkpoints."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.api.loader import parse_queue_config
from gangq.core import EngineConfig, NodeSpec
from gangq.sim.policies import Admit, Evict, JobRun, Policy, make_policy
from gangq.sim.report import summarize
from gangq.sim.scenario import Scenario
from gangq.sim.simulator import Simulator
from gangq.sim.trace import GPU, TraceJob, TracePodSet
from tests.sim.helpers import contended_jobs, gpu_config, gpu_scenario, job


class Recording(Policy):
    """Admits everything at once and records what the loop calls, in order."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, str]] = []
        self.pending: list[JobRun] = []

    def submit(self, run: JobRun, now: float) -> None:
        self.calls.append(("submit", now, run.job.name))
        self.pending.append(run)

    def schedule(self, now: float) -> tuple[list[Admit], list[Evict]]:
        self.calls.append(("schedule", now, ""))
        admits = [Admit(r, r.cq, dict(r.demand)) for r in self.pending]
        self.pending = []
        return admits, []

    def finish(self, run: JobRun, now: float) -> None:
        self.calls.append(("finish", now, run.job.name))


def test_events_at_one_timestamp_are_batched_into_one_schedule_call() -> None:
    jobs = [job("a", 0, 10, 1, 1), job("b", 0, 10, 1, 1), job("c", 5, 5, 1, 1), job("d", 10, 1, 1, 1)]
    policy = Recording()
    result = Simulator(gpu_scenario(jobs), policy).run()
    assert policy.calls == [
        ("submit", 0.0, "a"),
        ("submit", 0.0, "b"),
        ("schedule", 0.0, ""),
        ("submit", 5.0, "c"),
        ("schedule", 5.0, ""),
        # finishes before arrivals at the same time, then one cycle
        ("finish", 10.0, "a"),
        ("finish", 10.0, "b"),
        ("finish", 10.0, "c"),
        ("submit", 10.0, "d"),
        ("schedule", 10.0, ""),
        ("finish", 11.0, "d"),
        ("schedule", 11.0, ""),
    ]
    assert result.schedule_calls == 4
    assert result.end == 11.0


def test_no_schedule_call_without_events_even_over_long_idle_gaps() -> None:
    jobs = [job("a", 0, 1, 1, 1), job("b", 1_000_000, 1, 1, 1)]
    for name in ("gangq", "fifo"):
        result = Simulator(gpu_scenario(jobs), make_policy(name)).run()
        assert result.schedule_calls == 4  # two arrivals, two finishes


@pytest.mark.parametrize("policy", ["gangq", "fifo", "sjf", "pod-by-pod"])
def test_same_input_same_result(policy: str) -> None:
    def outcome() -> list[tuple[str, float, float | None, float | None]]:
        result = Simulator(gpu_scenario(contended_jobs(seed=5, n=120)), make_policy(policy)).run()
        return [(r.key, r.submit, r.first_admit, r.end) for r in result.runs]

    first = outcome()
    assert first == outcome()
    # the input is contended: the comparison is not between two trivially empty runs
    assert sum(1 for _, submit, admit, _ in first if admit is not None and admit > submit) > 10


def test_pods_ready_timeout_fires_through_the_engine_wakeup() -> None:
    """Pods take 100 s to start but the engine gives them 50 s: evicted by the engine's timer
    (no other event happens at t=50), requeued after backoff, deactivated past the limit."""
    sc = gpu_scenario(
        [job("slow", 0, 10, 2, 8)],
        engine=EngineConfig(pods_ready_timeout=50, backoff_base=10, backoff_max=10, backoff_limit=1),
    )
    sc.pod_start_latency = 100.0
    result = Simulator(sc, make_policy("gangq")).run()
    run = result.runs[0]
    assert result.evicted == {("team", "PodsReadyTimeout"): 2}
    assert run.admit_count == 2 and run.outcome == "Deactivated" and run.end is None
    s = summarize(result)
    assert s["pods_ready_timeouts"] == 2 and s["cluster_queues"]["team"]["pods_ready_timeouts"] == 2
    assert s["deactivated"] == 1


def _priority_scenario(checkpoint: float) -> Scenario:
    docs: list[dict[str, Any]] = gpu_config(8)
    docs[1]["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    docs.append(
        {"apiVersion": "gangq.io/v1alpha1", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 100}
    )
    config = parse_queue_config(docs)
    jobs = [
        TraceJob("low", 0, 1000, "jobs", [TracePodSet("w", 1, {GPU: 8})], namespace="team"),
        TraceJob("high", 600, 100, "jobs", [TracePodSet("w", 1, {GPU: 8})], namespace="team", priority_class="high"),
    ]
    return Scenario(
        "prio",
        config,
        [NodeSpec("n0", {GPU: 8})],
        jobs,
        EngineConfig(pods_ready_timeout=None, preemption_delay=0),
        eviction_latency=5.0,
        checkpoint=checkpoint,
    )


@pytest.mark.parametrize(("checkpoint", "low_end"), [(0.0, 705 + 1000), (0.25, 705 + 500)])
def test_preempted_gang_restarts_from_scratch_or_from_its_checkpoint(checkpoint: float, low_end: float) -> None:
    result = Simulator(_priority_scenario(checkpoint), make_policy("gangq")).run()
    low, high = result.runs
    # high preempts low at 600; low stops 5 s later; high runs 605..705; low restarts at 705
    assert high.first_admit == 605.0 and high.end == 705.0
    assert low.evictions == 1 and low.preempted == 1 and low.end == low_end
    assert result.preempted == {("team", "InClusterQueue"): 1}
    s = summarize(result)
    assert s["preemptions"] == 1 and s["cluster_queues"]["team"]["evictions"] == 1
    # quota is held until the victim stopped: usage integral counts 0..605 for low, then both runs
    assert s["cluster_queues"]["team"]["usage_pct"] == pytest.approx(100.0)


def test_runtime_limit_times_out_and_failures_are_counted() -> None:
    jobs = [job("long", 0, 100, 1, 1, runtime_limit=30), job("bad", 0, 10, 1, 1, fails=True)]
    result = Simulator(gpu_scenario(jobs), make_policy("gangq")).run()
    by = {r.job.name: r for r in result.runs}
    assert (by["long"].end, by["long"].outcome) == (30.0, "TimedOut")
    assert (by["bad"].end, by["bad"].outcome) == (10.0, "Failed")
    s = summarize(result)
    assert (s["timed_out"], s["failed"]) == (1, 1)


class PingPong(Policy):
    """The newest pending job always preempts the running one, which preempts it back once it
    has stopped: decisions at one instant, forever."""

    name = "ping-pong"

    def __init__(self) -> None:
        self.pending: list[JobRun] = []
        self.running: JobRun | None = None

    def submit(self, run: JobRun, now: float) -> None:
        self.pending.append(run)

    def schedule(self, now: float) -> tuple[list[Admit], list[Evict]]:
        if not self.pending:
            return [], []
        run = self.pending.pop()
        evicts = [Evict(self.running, "Preempted", "team", False)] if self.running else []
        self.running = run
        return [Admit(run, "team", dict(run.demand))], evicts

    def eviction_done(self, run: JobRun, now: float) -> None:
        self.pending.append(run)

    def finish(self, run: JobRun, now: float) -> None:
        raise AssertionError("never finishes")


def test_a_livelock_at_one_instant_is_an_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    import gangq.sim.simulator as simulator

    monkeypatch.setattr(simulator, "MAX_CYCLES_AT_ONE_TIME", 50)
    with pytest.raises(simulator.LivelockError, match=r"51 scheduling cycles at t=3\.0 .*team/"):
        Simulator(gpu_scenario([job("x", 0, 10, 1, 1), job("y", 3, 10, 1, 1)]), PingPong()).run()
