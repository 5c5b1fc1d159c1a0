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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/traces/philly")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--fractions", default="0.1,0.5,1.0")
    parser.add_argument("--capacity-scale", type=float, default=1.0)
    args = parser.parse_args(argv)
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
