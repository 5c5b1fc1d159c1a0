"""Small scenarios shared by the simulator tests."""

from __future__ import annotations

import random
from typing import Any

from gangq.api.loader import parse_queue_config
from gangq.core import EngineConfig, NodeSpec
from gangq.sim.scenario import Scenario, gpu_queue_documents
from gangq.sim.trace import GPU, TraceJob, TracePodSet


def gpu_config(gpus: int, cq: str = "team", strategy: str = "BestEffortFIFO") -> list[dict[str, Any]]:
    return gpu_queue_documents(gpus, cq, "team", "jobs", strategy)


def job(name: str, submit: float, duration: float, pods: int, gpus: int, **kw: Any) -> TraceJob:
    return TraceJob(name, submit, duration, "jobs", [TracePodSet("w", pods, {GPU: gpus})], namespace="team", **kw)


def gpu_scenario(jobs: list[TraceJob], nodes: int = 4, engine: EngineConfig | None = None) -> Scenario:
    config = parse_queue_config(gpu_config(nodes * 8))
    node_specs = [NodeSpec(f"n{i}", {"cpu": 96_000, GPU: 8}) for i in range(nodes)]
    return Scenario("test", config, node_specs, jobs, engine or EngineConfig(pods_ready_timeout=None))


def contended_jobs(seed: int = 3, n: int = 300) -> list[TraceJob]:
    """A stream of small GPU jobs with occasional whole-cluster gangs, more work than the cluster
    can do while it arrives (4 nodes x 8 GPUs). Every job declares a runtime limit of 1.5 x its
    duration (like activeDeadlineSeconds): the engine's reservations and backfill use it; the
    comparison policies ignore it."""
    rnd = random.Random(seed)
    out = []
    t = 0.0
    for i in range(n):
        t += rnd.expovariate(1 / 120)
        if i % 25 == 10:
            duration = rnd.uniform(1800, 3600)
            out.append(job(f"big-{i}", t, duration, 4, 8, cls="big", runtime_limit=1.5 * duration))
        else:
            duration = rnd.uniform(300, 2400)
            gpus = rnd.choice([1, 2, 4])
            out.append(job(f"small-{i}", t, duration, 1, gpus, cls="small", runtime_limit=1.5 * duration))
    return out
