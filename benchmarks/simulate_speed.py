"""Speed of ``gangq simulate`` on the Philly window (68,503 jobs) with the full engine.

    python benchmarks/simulate_speed.py --trace-dir ../shared/traces/philly --json OUT.json [--fractions 0.1,0.5,1.0]

For each fraction of the window's jobs (first N by submission time; 10 %, 50 %, 100 % by default)
and capacity scale 1.0: load the trace (timed separately, ``load_seconds``), then replay it with
gangq's engine (``wall_seconds``: the event loop and the engine, as reported by the simulator).
``jobs_per_s`` = jobs / wall_seconds. Baseline, measured in the same run on the same input: the
``fifo`` comparison policy (the same event loop, a trivial scheduler), so ``gangq_over_fifo`` shows
what the engine costs relative to the loop. ``linearity`` = jobs/s at the largest fraction / jobs/s
at the smallest (1.0 = cost grows linearly with the number of jobs). Target: the whole window
(load + replay) in <= 15 s. These machines are shared and noisy: compare ratios across runs.

    python benchmarks/simulate_speed.py --saturated --json OUT.json [--jobs 20000] [--seed 1]

``--saturated``: a seeded synthetic GPU trace on a cluster that stays saturated (no trace
directory needed): ``--jobs`` gangs (20,000) of 1-64 GPUs (1, 2, 4, 8 GPUs as one pod; 16, 32,
64 as pods of 8 GPUs), lognormal run times (mean one hour), submitted to one ClusterQueue whose
quota is the cluster (64 nodes x 8 GPUs) at ``--load`` (6) times its capacity, the first 2 % at
once; queues pass 10,000 waiting gangs and stay above 5,000 for most of the run. Replayed with
gangq's engine and, in the same run, the ``fifo`` policy. Each scheduling event (one
``schedule`` call, with the ``submit``/``finish`` calls of the events applied before it) is
timed with the number of gangs waiting when it is called; ``us_per_event`` by queue depth
(buckets around 100, 1,000 and 10,000: [70, 140), [700, 1,400), [7,000, 14,000)) gives
``depth_cost_ratio`` (mean at ~10,000 / mean at ~100). Targets: ratio <= 2, whole replay <= 10 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

TARGET_SECONDS = 15.0

# --saturated
SATURATED_TARGET_SECONDS = 10.0
SATURATED_TARGET_RATIO = 2.0
DEPTH_BUCKETS = {"100": (70, 140), "1000": (700, 1400), "10000": (7000, 14000)}
GPU_SIZES = ((1, 0.40), (2, 0.10), (4, 0.15), (8, 0.20), (16, 0.08), (32, 0.05), (64, 0.02))


def measure(trace_dir: Path, fraction: float, policy: str, capacity_scale: float) -> dict[str, Any]:
    from gangq.sim.philly import load_philly
    from gangq.sim.policies import make_policy
    from gangq.sim.report import summarize
    from gangq.sim.simulator import Simulator

    t0 = time.perf_counter()
    scenario = load_philly(trace_dir, capacity_scale=capacity_scale, fraction=fraction)
    load = time.perf_counter() - t0
    result = Simulator(scenario, make_policy(policy)).run()
    summary = summarize(result)
    return {
        "policy": policy,
        "jobs": summary["jobs"],
        "load_seconds": load,
        "wall_seconds": result.wall_seconds,
        "total_seconds": load + result.wall_seconds,
        "jobs_per_s": summary["jobs"] / result.wall_seconds if result.wall_seconds else 0.0,
        "schedule_calls": result.schedule_calls,
        "avg_wait_s": summary["avg_wait_s"],
    }


def saturated_scenario(jobs: int, seed: int, load: float, nodes: int = 64, mean_runtime: float = 3600.0) -> Any:
    """The ``--saturated`` trace: one ClusterQueue whose GPU quota is the cluster, arrivals at
    ``load`` times its capacity (the first 2 % at once), so that the queue only grows until the
    arrivals stop and then drains at the cluster's pace."""
    import math
    import random

    from gangq.api.loader import parse_queue_config
    from gangq.core.config import EngineConfig
    from gangq.core.model import NodeSpec
    from gangq.sim.scenario import Scenario, gpu_queue_documents
    from gangq.sim.trace import GPU, TraceJob, TracePodSet

    rng = random.Random(seed)
    capacity = nodes * 8
    docs = gpu_queue_documents(capacity, "research", "research", "research")
    sizes = [g for g, _ in GPU_SIZES]
    weights = [w for _, w in GPU_SIZES]
    mean_gpus = sum(g * w for g, w in GPU_SIZES)
    rate = load * capacity / (mean_gpus * mean_runtime)  # gangs per second
    sigma = 1.5
    mu = math.log(mean_runtime) - sigma * sigma / 2
    burst = jobs // 50
    out = []
    t = 0.0
    for i in range(jobs):
        if i >= burst:
            t += rng.expovariate(rate)
        gpus = rng.choices(sizes, weights)[0]
        runtime = max(30.0, rng.lognormvariate(mu, sigma))
        pods = TracePodSet("worker", 1, {GPU: gpus}) if gpus <= 8 else TracePodSet("worker", gpus // 8, {GPU: 8})
        out.append(
            TraceJob(
                f"job-{i}", round(t, 3), round(runtime, 1), "research", [pods], namespace="research", cls=f"{gpus}gpu"
            )
        )
    node_specs = [NodeSpec(f"gpu-{i}", {"cpu": 96_000, "memory": 1 << 40, GPU: 8, "pods": 110}) for i in range(nodes)]
    return Scenario(
        "saturated", parse_queue_config(docs), node_specs, out, EngineConfig(pods_ready_timeout=None), resource=GPU
    )


def timed_policy(inner: Any) -> Any:
    """``inner`` with each scheduling event timed: the ``schedule`` call and the engine calls of
    the events applied before it (submissions, finishes), with the number of gangs waiting when
    ``schedule`` is called (``samples``: (depth, seconds))."""
    from gangq.sim.policies import Policy

    class Timed(Policy):
        def __init__(self) -> None:
            self.name = inner.name
            self.depth = 0
            self.spent = 0.0
            self.samples: list[tuple[int, float]] = []

        def setup(self, scenario: Any, runs: Any) -> None:
            inner.setup(scenario, runs)

        def submit(self, run: Any, now: float) -> None:
            t0 = time.perf_counter()
            inner.submit(run, now)
            self.spent += time.perf_counter() - t0
            self.depth += 1

        def finish(self, run: Any, now: float) -> None:
            t0 = time.perf_counter()
            inner.finish(run, now)
            self.spent += time.perf_counter() - t0

        def started(self, run: Any, now: float) -> None:
            t0 = time.perf_counter()
            inner.started(run, now)
            self.spent += time.perf_counter() - t0

        def eviction_done(self, run: Any, now: float) -> None:
            t0 = time.perf_counter()
            inner.eviction_done(run, now)
            self.spent += time.perf_counter() - t0
            if run.outcome != "Deactivated":
                self.depth += 1

        def schedule(self, now: float) -> Any:
            depth = self.depth
            t0 = time.perf_counter()
            admits, evicts = inner.schedule(now)
            self.samples.append((depth, time.perf_counter() - t0 + self.spent))
            self.spent = 0.0
            self.depth -= len(admits)
            return admits, evicts

        def next_wakeup(self) -> float | None:
            return inner.next_wakeup()  # type: ignore[no-any-return]

        def pending_by_status(self, cq: str) -> dict[str, int]:
            return inner.pending_by_status(cq)  # type: ignore[no-any-return]

        def extra(self, end: float) -> dict[str, object]:
            return inner.extra(end)  # type: ignore[no-any-return]

    return Timed()


def measure_saturated(scenario: Any, policy: str) -> dict[str, Any]:
    import statistics

    from gangq.sim.policies import make_policy
    from gangq.sim.simulator import Simulator

    timed = timed_policy(make_policy(policy))
    result = Simulator(scenario, timed).run()
    samples = timed.samples
    buckets = {}
    for name, (lo, hi) in DEPTH_BUCKETS.items():
        xs = [dt for depth, dt in samples if lo <= depth < hi]
        buckets[name] = {
            "events": len(xs),
            "us_per_event": 1e6 * sum(xs) / len(xs) if xs else None,
            "median_us_per_event": 1e6 * statistics.median(xs) if xs else None,
        }
    deep = sum(1 for depth, _ in samples if depth >= 5000)
    return {
        "policy": policy,
        "jobs": len(scenario.jobs),
        "wall_seconds": result.wall_seconds,
        "schedule_calls": result.schedule_calls,
        "us_per_event": 1e6 * sum(dt for _, dt in samples) / len(samples) if samples else None,
        "max_depth": max((depth for depth, _ in samples), default=0),
        "events_with_5000_waiting": deep / len(samples) if samples else 0.0,
        "by_depth": buckets,
    }


def saturated(args: argparse.Namespace) -> int:
    from gangq.core import compiled

    scenario = saturated_scenario(args.jobs, args.seed, args.load)
    gangq = measure_saturated(scenario, "gangq")
    fifo = measure_saturated(scenario, "fifo")

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    shallow, deep = gangq["by_depth"]["100"]["us_per_event"], gangq["by_depth"]["10000"]["us_per_event"]
    depth_ratio = ratio(deep, shallow)
    doc = {
        "benchmark": "simulate_speed --saturated",
        "trace": {"jobs": args.jobs, "seed": args.seed, "load": args.load, "nodes": 64, "gpus_per_node": 8},
        "core_compiled": compiled(),
        "gangq": gangq,
        "baseline_fifo": fifo,
        "gangq_over_fifo": ratio(gangq["wall_seconds"], fifo["wall_seconds"]),
        "gangq_over_fifo_by_depth": {
            name: ratio(gangq["by_depth"][name]["us_per_event"], fifo["by_depth"][name]["us_per_event"])
            for name in DEPTH_BUCKETS
        },
        "depth_cost_ratio": depth_ratio,
        "targets": {
            "depth_cost_ratio_max": SATURATED_TARGET_RATIO,
            "depth_cost_ratio_met": depth_ratio is not None and depth_ratio <= SATURATED_TARGET_RATIO,
            "wall_seconds_max": SATURATED_TARGET_SECONDS,
            "wall_seconds_met": gangq["wall_seconds"] <= SATURATED_TARGET_SECONDS,
            "saturated": gangq["max_depth"] >= 10_000 and gangq["events_with_5000_waiting"] >= 0.5,
        },
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    for label, case in (("gangq", gangq), ("fifo", fifo)):
        per = "  ".join(
            f"~{name}: {b['us_per_event']:.0f} us ({b['events']} events)"
            for name, b in case["by_depth"].items()
            if b["us_per_event"] is not None
        )
        print(
            f"{label:>5}  {case['jobs']} jobs  replay {case['wall_seconds']:.1f}s  max depth {case['max_depth']}  "
            f"{case['events_with_5000_waiting']:.0%} of events with >= 5000 waiting  {per}",
            flush=True,
        )
    print(f"depth_cost_ratio {depth_ratio:.2f}" if depth_ratio is not None else "depth_cost_ratio: no samples")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/traces/philly")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--fractions", default="0.1,0.5,1.0")
    parser.add_argument("--capacity-scale", type=float, default=1.0)
    parser.add_argument("--saturated", action="store_true", help="the saturated synthetic trace (see above)")
    parser.add_argument("--jobs", type=int, default=20_000, help="--saturated: gangs in the trace")
    parser.add_argument("--seed", type=int, default=1, help="--saturated: the trace's seed")
    parser.add_argument("--load", type=float, default=6.0, help="--saturated: arrivals / cluster capacity")
    args = parser.parse_args(argv)
    if args.saturated:
        return saturated(args)
    if not (args.trace_dir / "philly_pollux_jobs.csv").is_file():
        print(f"the Philly trace is not at {args.trace_dir} (pass --trace-dir)", file=sys.stderr)
        return 2
    fractions = [float(f) for f in args.fractions.split(",")]
    cases = []
    for fraction in fractions:
        gangq = measure(args.trace_dir, fraction, "gangq", args.capacity_scale)
        fifo = measure(args.trace_dir, fraction, "fifo", args.capacity_scale)
        case = {
            "fraction": fraction,
            "jobs": gangq["jobs"],
            "gangq": gangq,
            "baseline_fifo": fifo,
            "gangq_over_fifo": gangq["wall_seconds"] / fifo["wall_seconds"] if fifo["wall_seconds"] else None,
        }
        cases.append(case)
        print(
            f"{fraction:>5.0%}  {gangq['jobs']:>6} jobs  gangq {gangq['jobs_per_s']:>8.0f} jobs/s "
            f"(replay {gangq['wall_seconds']:.2f}s + load {gangq['load_seconds']:.2f}s)  "
            f"fifo {fifo['jobs_per_s']:>8.0f} jobs/s  ratio {case['gangq_over_fifo']:.1f}x",
            flush=True,
        )
    first, last = cases[0]["gangq"], cases[-1]["gangq"]
    full = next((c for c in cases if c["fraction"] == 1.0), None)
    doc = {
        "benchmark": "simulate_speed",
        "trace": "philly 2017-10-01:2017-11-30",
        "capacity_scale": args.capacity_scale,
        "cases": cases,
        "linearity": last["jobs_per_s"] / first["jobs_per_s"] if first["jobs_per_s"] else None,
        "target_seconds": TARGET_SECONDS,
        "full_window_total_seconds": full["gangq"]["total_seconds"] if full else None,
        "meets_target": (full["gangq"]["total_seconds"] <= TARGET_SECONDS) if full else None,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
