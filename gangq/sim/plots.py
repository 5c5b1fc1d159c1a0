"""PNG plots of runs (matplotlib, Agg backend): queue depth per ClusterQueue, utilisation over time,
CDF of time to admission."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from gangq.sim.simulator import Series, SimResult

MAX_POINTS = 4000
MAX_QUEUES = 12


def _thin(series: Series, limit: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """Keep at most ``limit`` steps (every k-th change plus the last one) of a step series."""
    times, values = series.times, series.values
    if len(times) <= limit:
        return times, values
    step = len(times) // limit + 1
    return [*times[::step], times[-1]], [*values[::step], values[-1]]


def _hours(result: SimResult) -> bool:
    return result.end - result.start > 3 * 3600


def write_plots(results: list[SimResult], directory: str | Path) -> list[Path]:
    """Write ``queue_depth[_<label>].png``, ``utilisation.png`` and ``wait_cdf.png``; returns the paths."""
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for result in results:
        suffix = "" if len(results) == 1 else f"_{result.label.replace('/', '_').replace('@', '_')}"
        paths.append(_queue_depth(result, out_dir / f"queue_depth{suffix}.png"))
    paths.append(_utilisation(results, out_dir / "utilisation.png"))
    paths.append(_wait_cdf(results, out_dir / "wait_cdf.png"))
    return paths


def _scale(result: SimResult) -> tuple[float, str]:
    return (3600.0, "hours") if _hours(result) else (1.0, "seconds")


def _queue_depth(result: SimResult, path: Path) -> Path:
    div, unit = _scale(result)
    fig, ax = plt.subplots(figsize=(10, 5))
    ranked = sorted(result.depth.items(), key=lambda kv: -max(kv[1].values, default=0))
    for name, series in ranked[:MAX_QUEUES]:
        if not series.times:
            continue
        t, v = _thin(series)
        ax.step([(x - result.start) / div for x in t], v, where="post", label=name, linewidth=0.9)
    ax.set_xlabel(f"time since first submission ({unit})")
    ax.set_ylabel("pending workloads")
    shown = min(len(ranked), MAX_QUEUES)
    ax.set_title(f"{result.scenario.name} · {result.label}: queue depth per ClusterQueue (top {shown} by peak)")
    if shown:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _utilisation(results: list[SimResult], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4))
    div, unit = _scale(results[0])
    for result in results:
        capacity = result.scenario.capacity() or 1
        t, v = _thin(result.utilisation)
        ax.step(
            [(x - result.start) / div for x in t],
            [100 * x / capacity for x in v],
            where="post",
            label=result.label,
            linewidth=0.9,
        )
    ax.set_xlabel(f"time since first submission ({unit})")
    ax.set_ylabel(f"{results[0].scenario.resource} in use (% of capacity)")
    ax.set_title(f"{results[0].scenario.name}: utilisation over time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _wait_cdf(results: list[SimResult], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 5))
    for result in results:
        waits = sorted(r.first_admit - r.submit for r in result.runs if r.first_admit is not None)
        if not waits:
            continue
        n = len(waits)
        step = max(1, n // MAX_POINTS)
        xs = [*waits[::step], waits[-1]]
        ys = [i / n for i in range(0, n, step)] + [1.0]
        ax.plot([max(x, 1e-3) for x in xs], ys, label=result.label)
    ax.set_xscale("log")
    ax.set_xlabel("time to admission (s, log)")
    ax.set_ylabel("fraction of admitted jobs")
    ax.set_title(f"{results[0].scenario.name}: CDF of time to admission")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
