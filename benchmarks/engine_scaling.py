"""Admission throughput of gangq's engine on synthetic clusters with deep queues.

    python benchmarks/engine_scaling.py --json OUT.json [--quick] [--max-seconds 120]

Each case runs in a fresh subprocess (so peak RSS is per case), with the garbage-collector settings
that ``gangq run`` uses (:mod:`gangq.gc_tuning`): build the cluster, submit every
workload (timed separately), then a steady-state loop on a virtual clock — ``schedule(now)``,
collect admissions, advance to the next finish, ``finish()`` the finished gangs — until every
gang has been admitted or the case's time cap is reached. The first cycle fills the empty cluster
(about half of the gangs); after that every admission waits for capacity that a finish frees,
while the other gangs stay queued (deep queues: the situation of kueue#14477). Both phases are
reported separately too (``first_cycle_*``, ``steady_*``).

Figures (per case): ``admissions_per_s`` = admissions / engine CPU seconds (``schedule`` +
``finish``, measured with ``time.process_time`` so that other work on a shared machine does not
count);
``us_per_admission`` = its inverse in microseconds; ``peak_rss_mb`` = the subprocess's peak RSS;
``core_compiled``: whether the engine ran mypyc-compiled (a regular ``pip install .``, see setup.py)
or as the pure-Python source (an editable install, or ``GANGQ_PURE_PYTHON=1``). Run it from an
environment where gangq is installed: ``benchmarks/`` is first on ``sys.path``, not the checkout.
Cases are repeated, each run in a fresh subprocess, and the run with the median
``us_per_admission`` is reported (``runs`` says how many, ``us_per_admission_runs`` lists them
all): the 1,000-gang case takes a fifth of a second of CPU, and on a shared machine single runs
vary widely, which the cost ratio would inherit in full. The runs go in rounds (one run of each
case per round, smallest first), so that a slow spell falls on every case alike. Defaults: 9 runs
of the first case, 3 of the second and 5 of the third (``--repeats N`` for N runs of every case): the cost ratio of the
third to the first is a target, and medians of fewer runs spread widely for code whose costs do
not differ.
``--preemption`` runs the same cases with ClusterQueues that may preempt (``withinClusterQueue:
LowerPriority``, ``reclaimWithinCohort: Any``) and gangs of priorities 0 to 3: the contract's
cases never preempt, so rules on the preemption path cost them nothing and show only here. A
preempted gang stops at once (``eviction_done``) and is requeued; ``evictions`` counts them,
``max_evictions_per_gang`` is the most any one gang was evicted, and every admission counts
(``admitted``), readmissions too; ``finished`` counts the gangs that ran to their end. Not the
contract's configuration: its figures are
for comparing builds, not for the targets.
Baseline, measured in the same run on the same workloads of the first case: a plain FIFO
admitter that scans every pending gang each cycle and checks quota only (no nodes, no cohorts);
the ratio ``gangq / baseline`` is reported with it. These machines are shared and noisy: compare
ratios, not absolute numbers, across runs.
"""

from __future__ import annotations

import argparse
import heapq
import json
import platform
import random
import resource
import subprocess
import sys
import time
from typing import Any

CASES = [(1_000, 10, 100), (10_000, 100, 1_000), (100_000, 1_000, 5_000)]
REPEATS = {1_000: 9, 10_000: 3, 100_000: 5}  # runs per case (see the module docstring)
GPU = "nvidia.com/gpu"


def _priorities(pending: int, seed: int) -> list[int]:
    """A priority (0 to 3) per gang, for ``--preemption`` (drawn apart from the gangs' shapes)."""
    rnd = random.Random(seed + 1)
    return [rnd.randrange(4) for _ in range(pending)]


def _workloads(pending: int, cluster_queues: int, seed: int) -> list[tuple[str, int, int, int, int, float]]:
    """(key, queue index, pods, cpu millicores per pod, gpus per pod, duration) per gang."""
    rnd = random.Random(seed)
    out = []
    for i in range(pending):
        pods = rnd.randint(1, 8)
        gpu = 1 if rnd.random() < 0.3 else 0
        out.append(
            (f"ns/w{i}", rnd.randrange(cluster_queues), pods, rnd.randint(1, 4) * 1000, gpu, rnd.uniform(60, 600))
        )
    return out


def run_case(
    pending: int,
    cluster_queues: int,
    nodes: int,
    max_seconds: float,
    seed: int = 7,
    engine_class: Any = None,
    log: list[tuple[float, str]] | None = None,
    preemption: bool = False,
) -> dict[str, Any]:
    """One case; ``engine_class`` and ``log`` (every decision but pending updates, with the time)
    let tests/engine/test_properties.py replay it through the engine without retry shortcuts.
    ``preemption``: see ``--preemption`` in the module docstring."""
    from gangq.core import (
        Admission,
        ClusterQueueSpec,
        Engine,
        EngineConfig,
        Eviction,
        FlavorQuotas,
        FlavorSpec,
        LabelSelector,
        LocalQueueSpec,
        NodeSpec,
        PendingUpdate,
        PodSetSpec,
        PreemptionSpec,
        ResourceGroup,
        ResourceQuota,
        WorkloadSpec,
        compiled,
    )

    engine = (engine_class or Engine)(EngineConfig(pods_ready_timeout=None))
    engine.upsert_namespace("ns", {})
    engine.upsert_flavor(FlavorSpec("cpu", {"pool": "cpu"}))
    engine.upsert_flavor(FlavorSpec("gpu", {"pool": "gpu"}))
    gpu_nodes = max(1, nodes // 4)
    for i in range(nodes):
        if i < gpu_nodes:
            engine.upsert_node(NodeSpec(f"g{i}", {"cpu": 64_000, "memory": 512 << 30, GPU: 8}, {"pool": "gpu"}))
        else:
            engine.upsert_node(NodeSpec(f"c{i}", {"cpu": 64_000, "memory": 256 << 30}, {"pool": "cpu"}))
    cpu_per_cq = 64_000 * (nodes - gpu_nodes) // cluster_queues
    gpu_cpu_per_cq = 64_000 * gpu_nodes // cluster_queues
    gpu_per_cq = max(1, 8 * gpu_nodes // cluster_queues)
    for c in range(cluster_queues):
        groups = [
            ResourceGroup(
                ["cpu", "memory", GPU],
                [
                    FlavorQuotas(
                        "cpu",
                        [ResourceQuota("cpu", cpu_per_cq), ResourceQuota("memory", 1 << 50), ResourceQuota(GPU, 0)],
                    ),
                    FlavorQuotas(
                        "gpu",
                        [
                            ResourceQuota("cpu", gpu_cpu_per_cq),
                            ResourceQuota("memory", 1 << 50),
                            ResourceQuota(GPU, gpu_per_cq),
                        ],
                    ),
                ],
            )
        ]
        engine.upsert_cluster_queue(
            ClusterQueueSpec(
                f"cq{c}",
                groups,
                cohort=f"cohort{c // 10}",
                namespace_selector=LabelSelector(),
                preemption=PreemptionSpec("LowerPriority", "Any") if preemption else None,
            )
        )
        engine.upsert_local_queue(LocalQueueSpec("ns", f"lq{c}", f"cq{c}"))

    gangs = _workloads(pending, cluster_queues, seed)
    priorities = _priorities(pending, seed) if preemption else [0] * pending
    durations = {}
    t0 = time.process_time()
    for i, (key, q, pods, cpu, gpu, duration) in enumerate(gangs):
        requests = {"cpu": cpu, "memory": 4 << 30}
        if gpu:
            requests[GPU] = gpu
        engine.submit(
            WorkloadSpec(
                key,
                "ns",
                f"lq{q}",
                [PodSetSpec("workers", pods, requests)],
                priority=priorities[i],
                creation_time=i * 0.01,
            ),
            0.0,
        )
        durations[key] = duration
    submit_s = time.process_time() - t0

    ends: list[tuple[float, str]] = []
    # --preemption only: admitted gang -> its end (an entry of ends that is not is a preempted
    # gang's old end). Not kept otherwise: in a deep case it holds tens of thousands of gangs,
    # and the case's peak RSS is the engine's figure.
    running: dict[str, float] = {}
    evicted: dict[str, int] = {}  # --preemption: evictions per gang
    now = 1.0
    admitted = cycles = evictions = finished = 0
    engine_s = 0.0
    wall0 = time.perf_counter()
    capped = False
    first: tuple[int, float] | None = None
    while (finished if preemption else admitted) < pending:
        t = time.process_time()
        decisions = engine.schedule(now)
        engine_s += time.process_time() - t
        cycles += 1
        if first is None:
            first = (sum(isinstance(d, Admission) for d in decisions), engine_s)
        stopped = []
        for d in decisions:
            if log is not None and not isinstance(d, PendingUpdate):
                log.append((now, repr(d)))
            if isinstance(d, Admission):
                admitted += 1
                end = now + durations[d.workload]
                if preemption:
                    running[d.workload] = end
                heapq.heappush(ends, (end, d.workload))
            elif isinstance(d, Eviction):
                evictions += 1
                evicted[d.workload] = evicted.get(d.workload, 0) + 1
                running.pop(d.workload, None)
                stopped.append(d.workload)
        if time.perf_counter() - wall0 > max_seconds:
            capped = True
            break
        if stopped:
            # Its pods stopped at once: the preemptor may take the freed capacity now.
            t = time.process_time()
            for key in stopped:
                engine.eviction_done(key, now)
            engine_s += time.process_time() - t
            continue
        while preemption and ends and running.get(ends[0][1]) != ends[0][0]:
            heapq.heappop(ends)  # a preempted gang's old end
        if not ends:
            break
        now = ends[0][0]
        t = time.process_time()
        while ends and ends[0][0] <= now:
            end, key = heapq.heappop(ends)
            if preemption:
                if running.get(key) != end:
                    continue  # a preempted gang's old end
                del running[key]
            finished += 1
            engine.finish(key, now)
        engine_s += time.process_time() - t
    engine.check_invariants()
    rate = admitted / engine_s if engine_s > 0 else 0.0
    extra = (
        {
            "preemption": True,
            "evictions": evictions,
            "max_evictions_per_gang": max(evicted.values(), default=0),
        }
        if preemption
        else {}
    )
    return {
        **extra,
        "pending": pending,
        "cluster_queues": cluster_queues,
        "nodes": nodes,
        "admissions_per_s": round(rate, 1),
        "us_per_admission": round(1e6 / rate, 1) if rate else None,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "core_compiled": compiled(),
        "admitted": admitted,
        "finished": finished,
        "cycles": cycles,
        "admissions_per_cycle": round(admitted / cycles, 2) if cycles else 0.0,
        "submit_us_per_workload": round(submit_s / pending * 1e6, 1),
        "capped_at_seconds": max_seconds if capped else None,
        "first_cycle_admissions": first[0] if first else 0,
        "first_cycle_s": round(first[1], 3) if first else 0.0,
        "steady_admissions_per_s": (
            round((admitted - first[0]) / (engine_s - first[1]), 1) if first and engine_s > first[1] else None
        ),
    }


def run_baseline(pending: int, cluster_queues: int, nodes: int, seed: int = 7) -> dict[str, Any]:
    """A naive FIFO admitter on the same gangs: scan every pending gang per cycle, quota only."""
    gangs = _workloads(pending, cluster_queues, seed)
    cpu_quota = 64_000 * nodes // cluster_queues
    used = [0] * cluster_queues
    queue = list(gangs)
    ends: list[tuple[float, int, int]] = []
    now = 1.0
    admitted = 0
    t0 = time.process_time()
    while queue:
        rest = []
        for key, q, pods, cpu, _gpu, duration in queue:
            need = pods * cpu
            if used[q] + need <= cpu_quota:
                used[q] += need
                admitted += 1
                heapq.heappush(ends, (now + duration, q, need))
            else:
                rest.append((key, q, pods, cpu, _gpu, duration))
        queue = rest
        if not ends:
            break
        now = ends[0][0]
        while ends and ends[0][0] <= now:
            _, q, need = heapq.heappop(ends)
            used[q] -= need
    elapsed = time.process_time() - t0
    rate = admitted / elapsed if elapsed else 0.0
    return {"pending": pending, "admitted": admitted, "admissions_per_s": round(rate, 1)}


def _subprocess(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median cost per admission (the lower middle one of an even count), with
    every run's cost listed."""
    ordered = sorted(runs, key=lambda r: r["us_per_admission"] or 0.0)
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["runs"] = len(runs)
    chosen["us_per_admission_runs"] = [r["us_per_admission"] for r in runs]
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", dest="json_path", help="write the results here")
    parser.add_argument("--quick", action="store_true", help="only the first two cases")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="cap on one case's admission loop")
    parser.add_argument(
        "--repeats", type=int, default=None, help="runs of every case (default: 9, 3 and 5, smallest case first)"
    )
    parser.add_argument(
        "--preemption", action="store_true", help="queues that may preempt, gangs of 4 priorities (not the contract)"
    )
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--baseline", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        from gangq.gc_tuning import tune_gc
        tune_gc()
        p, c, n = (int(x) for x in args.case.split(","))
        result = run_case(p, c, n, args.max_seconds, preemption=args.preemption)
        print(json.dumps(result))
        return
    if args.baseline:
        p, c, n = (int(x) for x in args.baseline.split(","))
        print(json.dumps(run_baseline(p, c, n)))
        return
    cases = CASES[:2] if args.quick else CASES
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be at least 1")
    repeats = {case: args.repeats or REPEATS.get(case[0], 1) for case in cases}
    # Round by round, every case that still has runs to do: a slow spell of a shared machine
    # then lands on all cases alike instead of on whichever ran during it.
    jobs = [case for r in range(max(repeats.values())) for case in cases if r < repeats[case]]
    try:
        from rich.progress import track

        iterator = track(jobs, description="engine_scaling", console=None, transient=True)
    except ImportError:  # pragma: no cover - rich is a dependency
        iterator = jobs
    runs: dict[tuple[int, int, int], list[dict[str, Any]]] = {case: [] for case in cases}
    for case in iterator:
        runs[case].append(
            _subprocess(
                ["--case", ",".join(map(str, case)), "--max-seconds", str(args.max_seconds)]
                + (["--preemption"] if args.preemption else [])
            )
        )
    results = [_median_run(runs[case]) for case in cases]
    baseline = _subprocess(["--baseline", ",".join(map(str, CASES[0]))])
    report: dict[str, Any] = {
        **({"preemption": True} if args.preemption else {}),
        "cases": results,
        "baseline": {
            **baseline,
            "ratio_gangq_over_baseline": round(results[0]["admissions_per_s"] / baseline["admissions_per_s"], 3),
        },
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        # mypyc-compiled core (a regular ``pip install .``) or the pure-Python source (setup.py)
        "core_compiled": all(r["core_compiled"] for r in results),
    }
    by_size = {r["pending"]: r for r in results}
    targets: dict[str, Any] = {}
    if 10_000 in by_size:
        measured = by_size[10_000]["admissions_per_s"]
        targets["admissions_per_s_at_10k"] = {"target": 5000, "measured": measured, "met": measured >= 5000}
    if 1_000 in by_size and 100_000 in by_size:
        small, large = by_size[1_000], by_size[100_000]
        ratio = large["us_per_admission"] / small["us_per_admission"]
        report["ratios"] = {"us_per_admission_100k_over_1k": round(ratio, 2)}
        if small["steady_admissions_per_s"] and large["steady_admissions_per_s"]:
            # What the ratio is made of: the first cycle fills an empty cluster cheaply, and the
            # 100,000-gang case (20 gangs per node, against 10 at 1,000) admits a smaller share of
            # its gangs there, so more of its admissions are steady-state ones, each after a finish.
            report["ratios"]["steady_us_per_admission_100k_over_1k"] = round(
                small["steady_admissions_per_s"] / large["steady_admissions_per_s"], 2
            )
            report["ratios"]["first_cycle_share_1k"] = round(small["first_cycle_admissions"] / small["admitted"], 3)
            report["ratios"]["first_cycle_share_100k"] = round(large["first_cycle_admissions"] / large["admitted"], 3)
        targets["cost_ratio_100k_over_1k"] = {"target": 2.0, "measured": round(ratio, 2), "met": ratio <= 2.0}
        rss = large["peak_rss_mb"]
        targets["peak_rss_mb_at_100k"] = {"target": 1024, "measured": rss, "met": rss <= 1024}
    report["targets"] = targets
    text = json.dumps(report, indent=2)
    if args.json_path:
        with open(args.json_path, "w") as fh:
            fh.write(text + "\n")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
