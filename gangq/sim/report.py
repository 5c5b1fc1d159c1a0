"""Figures of a run (the ``--json`` contract) and the terminal tables.

Definitions (seconds):
- *wait* (time to admission): first admission − submission, over jobs that were admitted; jobs never
  admitted are counted (``not_admitted``) and left out of the wait figures, as are jobs excluded from
  the run (never admissible, e.g. larger than their VC).
- *JCT*: end − submission, over jobs that ended.
- ``usage_pct`` of a ClusterQueue: Kueue's measure, quota used (``resource``) integrated over time ×
  100 / (nominal quota × makespan); above 100 when the queue borrowed.
- ``utilization``: resource-seconds used by admitted gangs / (cluster capacity × makespan).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from gangq.sim.policies import JobRun
from gangq.sim.scenario import nominal_quota
from gangq.sim.simulator import SimResult


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values (0 for none)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def _stats(runs: Iterable[JobRun]) -> dict[str, Any]:
    runs = list(runs)
    waits = sorted(r.first_admit - r.submit for r in runs if r.first_admit is not None)
    jcts = [r.end - r.submit for r in runs if r.end is not None]
    return {
        "jobs": len(runs),
        "admitted": len(waits),
        "finished": len(jcts),
        "not_admitted": len(runs) - len(waits),
        "avg_wait_s": sum(waits) / len(waits) if waits else 0.0,
        "p50_wait_s": percentile(waits, 50),
        "p95_wait_s": percentile(waits, 95),
        "max_wait_s": waits[-1] if waits else 0.0,
        "avg_jct_s": sum(jcts) / len(jcts) if jcts else 0.0,
        "evictions": sum(r.evictions for r in runs),
        "preemptions": sum(r.preempted for r in runs),
        "timed_out": sum(1 for r in runs if r.end is not None and r.outcome == "TimedOut"),
        "failed": sum(1 for r in runs if r.end is not None and r.outcome == "Failed"),
        "deactivated": sum(1 for r in runs if r.outcome == "Deactivated"),
    }


def summarize(result: SimResult) -> dict[str, Any]:
    """The run's figures as a JSON-ready dict (contract fields first)."""
    sc = result.scenario
    runs = result.runs
    makespan = max(0.0, result.end - result.start)
    overall = _stats(runs)
    capacity = sc.capacity()
    utilization = result.used_area / (capacity * makespan) if capacity and makespan else 0.0
    by_class: dict[str, list[JobRun]] = {c: [] for c in sc.classes}
    by_cq: dict[str, list[JobRun]] = {c: [] for c in sc.config.cluster_queues}
    for r in runs:
        by_class.setdefault(r.cls, []).append(r)
        by_cq[r.cq].append(r)
    timeouts: dict[str, int] = {}
    for (cq, reason), count in result.evicted.items():
        if reason == "PodsReadyTimeout":
            timeouts[cq] = timeouts.get(cq, 0) + count
    cluster_queues = {}
    for cq, members in by_cq.items():
        nominal = nominal_quota(sc.config, cq).get(sc.resource, 0)
        stats = _stats(members)
        usage_pct = 100.0 * result.cq_area.get(cq, 0.0) / (nominal * makespan) if nominal and makespan else 0.0
        cluster_queues[cq] = {
            "usage_pct": usage_pct,
            "avg_wait_s": stats.pop("avg_wait_s"),
            **stats,
            "nominal": nominal,
            "pods_ready_timeouts": timeouts.get(cq, 0),
            "pending_at_end": result.pending_end.get(cq, {}),
        }
    classes = {}
    for cls, members in by_class.items():
        stats = _stats(members)
        classes[cls] = {"jobs": stats.pop("jobs"), "avg_wait_s": stats.pop("avg_wait_s"), **stats}
    usages = [cluster_queues[cq]["usage_pct"] for cq, members in by_cq.items() if members]
    out: dict[str, Any] = {
        "policy": result.label,
        "jobs": len(runs),
        "wall_seconds": result.wall_seconds,
        "simulated_seconds": makespan,
        "avg_jct_s": overall["avg_jct_s"],
        "avg_wait_s": overall["avg_wait_s"],
        "p95_wait_s": overall["p95_wait_s"],
        "max_wait_s": overall["max_wait_s"],
        "utilization": utilization,
        "classes": classes,
        "cluster_queues": cluster_queues,
        "scenario": sc.name,
        "resource": sc.resource,
        "makespan_s": makespan,
        "p50_wait_s": overall["p50_wait_s"],
        "admitted": overall["admitted"],
        "finished": overall["finished"],
        "not_admitted": overall["not_admitted"],
        "evictions": overall["evictions"],
        "preemptions": overall["preemptions"],
        "pods_ready_timeouts": sum(timeouts.values()),
        "timed_out": overall["timed_out"],
        "failed": overall["failed"],
        "deactivated": overall["deactivated"],
        "min_cq_usage_pct": min(usages) if usages else 0.0,
        "excluded": dict(sc.excluded),
        "never_admissible": sum(sc.excluded.values()),
        "jobs_per_s": len(runs) / result.wall_seconds if result.wall_seconds else 0.0,
        "schedule_calls": result.schedule_calls,
        "events": result.events,
        "capacity": capacity,
        "evicted_by_reason": _by_second(result.evicted),
        "preempted_by_reason": _by_second(result.preempted),
        "info": sc.info,
        "policy_figures": result.extra,
    }
    if result.topology is not None:
        out["topology"] = result.topology
    return out


def _by_second(counts: dict[tuple[str, str], int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for (_, reason), n in counts.items():
        out[reason] = out.get(reason, 0) + n
    return out


# ----------------------------------------------------------------------------------------------
# Terminal output
# ----------------------------------------------------------------------------------------------


def fmt_s(seconds: float) -> str:
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f}d"
    if seconds >= 3_600:
        return f"{seconds / 3_600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.1f}m"
    return f"{seconds:.2f}s"


def print_summary(console: Console, summary: dict[str, Any], per_queue_limit: int = 40) -> None:
    title = (
        f"{summary['scenario']} · policy {summary['policy']} · {summary['jobs']} jobs · simulated "
        f"{fmt_s(summary['simulated_seconds'])} in {summary['wall_seconds']:.2f}s wall"
    )
    overall = Table(title=title)
    for col in (
        "avg wait",
        "p50",
        "p95",
        "max wait",
        "avg JCT",
        "utilisation",
        "admitted",
        "not admitted",
        "evictions",
        "preemptions",
        "never admissible",
    ):
        overall.add_column(col, justify="right")
    overall.add_row(
        fmt_s(summary["avg_wait_s"]),
        fmt_s(summary["p50_wait_s"]),
        fmt_s(summary["p95_wait_s"]),
        fmt_s(summary["max_wait_s"]),
        fmt_s(summary["avg_jct_s"]),
        f"{100 * summary['utilization']:.1f}% {summary['resource']}",
        str(summary["admitted"]),
        str(summary["not_admitted"]),
        str(summary["evictions"]),
        str(summary["preemptions"]),
        str(summary["never_admissible"]),
    )
    console.print(overall)
    console.print(_group_table("per workload class", summary["classes"], usage=False))
    cqs = summary["cluster_queues"]
    if len(cqs) <= per_queue_limit:
        console.print(_group_table("per ClusterQueue", cqs, usage=True))
    else:
        console.print(f"per ClusterQueue: {len(cqs)} queues, min usage {summary['min_cq_usage_pct']:.1f}% (see --json)")
    figures = summary.get("policy_figures") or {}
    if "partial_gang_resource_hours" in figures:
        console.print(
            f"{summary['resource']}-hours held by partial gangs: {figures['partial_gang_resource_hours']:.2f}; "
            f"gangs stuck partly bound at the end: {figures['partial_gangs_at_end']} "
            f"(holding {figures['resource_held_by_partial_gangs_at_end']} {summary['resource']})"
        )
    topo = summary.get("topology")
    if topo is not None:
        loc, frag = topo["locality"], topo["fragmentation"]
        console.print(
            f"topology: {100 * loc['share_in_one_domain']:.1f}% of {loc['gangs']} multi-pod gang admissions in one "
            f"{loc['level']}, {loc['mean_domains_per_gang']:.2f} {loc['level']}s per gang; free {frag['resource']} "
            f"in domains too small for the waiting heads: mean {frag['fragmented_mean']:.1f}, "
            f"p95 {frag['fragmented_p95']:.1f}; heads waiting with enough free in total: "
            f"{100 * frag['share_heads_waiting_with_enough_free']:.1f}%"
        )
    info = summary.get("info") or {}
    if "quota_bound_makespan_s" in info:
        console.print(
            f"makespan {summary['makespan_s']:.1f}s (quota-limited bound {info['quota_bound_makespan_s']:.1f}s), "
            f"min ClusterQueue usage {summary['min_cq_usage_pct']:.1f}%"
        )


def _group_table(title: str, groups: dict[str, dict[str, Any]], usage: bool) -> Table:
    table = Table(title=title)
    table.add_column("name")
    cols = ["jobs", "admitted", "finished", "avg wait", "p50", "p95", "max wait", "avg JCT"]
    if usage:
        cols += ["usage", "evicted", "preempted", "timeouts"]
    for c in cols:
        table.add_column(c, justify="right")
    for name, g in groups.items():
        row = [
            name,
            str(g["jobs"]),
            str(g["admitted"]),
            str(g["finished"]),
            fmt_s(g["avg_wait_s"]),
            fmt_s(g["p50_wait_s"]),
            fmt_s(g["p95_wait_s"]),
            fmt_s(g["max_wait_s"]),
            fmt_s(g["avg_jct_s"]),
        ]
        if usage:
            row += [f"{g['usage_pct']:.1f}%", str(g["evictions"]), str(g["preemptions"]), str(g["pods_ready_timeouts"])]
        table.add_row(*row)
    return table


COMPARE_ROWS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("avg wait", "avg_wait_s", fmt_s),
    ("p50 wait", "p50_wait_s", fmt_s),
    ("p95 wait", "p95_wait_s", fmt_s),
    ("max wait", "max_wait_s", fmt_s),
    ("avg JCT", "avg_jct_s", fmt_s),
    ("makespan", "makespan_s", fmt_s),
    ("utilisation", "utilization", lambda v: f"{100 * v:.1f}%"),
    ("min CQ usage", "min_cq_usage_pct", lambda v: f"{v:.1f}%"),
    ("admitted", "admitted", str),
    ("not admitted", "not_admitted", str),
    ("evictions", "evictions", str),
    ("preemptions", "preemptions", str),
    ("wall", "wall_seconds", lambda v: f"{v:.2f}s"),
)


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


TOPOLOGY_ROWS: tuple[tuple[str, str, str, Callable[[Any], str]], ...] = (
    ("multi-pod gangs in one domain", "locality", "share_in_one_domain", lambda v: f"{100 * v:.1f}%"),
    ("domains per multi-pod gang", "locality", "mean_domains_per_gang", lambda v: f"{v:.2f}"),
    ("fragmented free (mean)", "fragmentation", "fragmented_mean", lambda v: f"{v:.1f}"),
    ("fragmented free (p95)", "fragmentation", "fragmented_p95", lambda v: f"{v:.1f}"),
    ("heads waiting, enough free", "fragmentation", "share_heads_waiting_with_enough_free", _pct),
)


def print_compare(console: Console, summaries: list[dict[str, Any]]) -> None:
    table = Table(title=f"{summaries[0]['scenario']}: {summaries[0]['jobs']} jobs, side by side")
    table.add_column("")
    for s in summaries:
        table.add_column(s["policy"], justify="right")
    for label, key, fmt in COMPARE_ROWS:
        table.add_row(label, *(fmt(s[key]) for s in summaries))
    for cls in summaries[0]["classes"]:
        table.add_row(f"avg wait {cls}", *(fmt_s(s["classes"].get(cls, {}).get("avg_wait_s", 0.0)) for s in summaries))
    if any("partial_gang_resource_hours" in (s.get("policy_figures") or {}) for s in summaries):
        table.add_row(
            f"{summaries[0]['resource']}-h held by partial gangs",
            *(f"{(s.get('policy_figures') or {}).get('partial_gang_resource_hours', 0.0):.2f}" for s in summaries),
        )
        table.add_row(
            "gangs stuck partly bound",
            *(str((s.get("policy_figures") or {}).get("partial_gangs_at_end", 0)) for s in summaries),
        )
    if any("topology" in s for s in summaries):
        for label, part, key, fmt in TOPOLOGY_ROWS:
            table.add_row(
                label,
                *(fmt(s["topology"][part][key]) if "topology" in s else "-" for s in summaries),
            )
    console.print(table)
