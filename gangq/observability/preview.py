"""Render the dashboard's panels against real data: a simulated cluster feeds a real Prometheus.

    apt-get install prometheus          # prometheus + promtool (Debian)
    python -m gangq.observability.preview --out deploy/grafana/dashboard-preview.png

1. drives an :class:`~gangq.core.engine.Engine` through six hours of a synthetic GPU cluster
   (three teams, two cohorts, a burst that makes one queue borrow and another reclaim, a few gangs
   whose pods never become ready), filling :class:`GangqMetrics` exactly as the controller does and
   scraping the registry every 15 simulated seconds;
2. writes the scrapes as OpenMetrics with timestamps and backfills them into a Prometheus TSDB with
   ``promtool tsdb create-blocks-from openmetrics``;
3. starts Prometheus on that TSDB (loopback only), runs every panel query of
   ``deploy/grafana/gangq-dashboard.json`` over the six hours with ``query_range``, and draws the
   panels with matplotlib in the dashboard's layout.

Nothing here runs in the controller; the test suite checks the pieces that need no Prometheus.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from gangq.core import (
    ClusterQueueSpec,
    CohortSpec,
    Engine,
    EngineConfig,
    Eviction,
    FlavorQuotas,
    FlavorSpec,
    LabelSelector,
    LocalQueueSpec,
    NodeSpec,
    PodSetSpec,
    PreemptionSpec,
    ResourceGroup,
    ResourceQuota,
    WorkloadSpec,
)
from gangq.core.decisions import Admission
from gangq.observability.dashboard import OUTPUT as DASHBOARD
from gangq.observability.metrics import GangqMetrics

log = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
STEP = 15.0  # seconds between scrapes (simulated)
HOURS = 6.0


def _cluster() -> Engine:
    e = Engine(EngineConfig(pods_ready_timeout=300, backoff_base=60, backoff_max=600))
    for flavor in ("a100", "h100"):
        e.upsert_flavor(FlavorSpec(flavor, {"gpu": flavor}))
    e.upsert_cohort(CohortSpec("org"))
    e.upsert_cohort(CohortSpec("research", parent="org"))
    e.upsert_cohort(CohortSpec("prod", parent="org"))
    reclaim = PreemptionSpec(within_cluster_queue="LowerPriority", reclaim_within_cohort="Any")
    queues = (("vision", "research", "a100", 16), ("nlp", "research", "a100", 16), ("serving", "prod", "h100", 16))
    for name, cohort, flavor, gpus in queues:
        e.upsert_cluster_queue(
            ClusterQueueSpec(
                name,
                [
                    ResourceGroup(
                        ["cpu", GPU], [FlavorQuotas(flavor, [ResourceQuota("cpu", 256_000), ResourceQuota(GPU, gpus)])]
                    )
                ],
                cohort=cohort,
                namespace_selector=LabelSelector(),
                preemption=reclaim,
            )
        )
        e.upsert_namespace(name, {})
        e.upsert_local_queue(LocalQueueSpec(name, "default", name))
    for i in range(4):
        e.upsert_node(NodeSpec(f"a100-{i}", {"cpu": 128_000, GPU: 8}, {"gpu": "a100"}))
    for i in range(2):
        e.upsert_node(NodeSpec(f"h100-{i}", {"cpu": 128_000, GPU: 8}, {"gpu": "h100"}))
    return e


def _rate(queue: str, t: float) -> float:
    """Arrivals per second: steady, with an nlp burst in hour 2 and a serving surge in hour 4."""
    base = {"vision": 1 / 1200, "nlp": 1 / 1500, "serving": 1 / 1800}[queue]
    if queue == "nlp" and 3600 <= t < 7200:
        base *= 6
    if queue == "serving" and 4 * 3600 <= t < 5 * 3600:
        base *= 5
    return base


def simulate(seed: int = 7, hours: float = HOURS) -> Iterator[tuple[float, CollectorRegistry]]:
    """Yield ``(t, registry)`` every :data:`STEP` simulated seconds."""
    rng = random.Random(seed)
    e = _cluster()
    m = GangqMetrics(CollectorRegistry(auto_describe=True))
    m.set_leader(True)
    runtime: dict[str, float] = {}
    ready_at: dict[str, float] = {}
    end_at: dict[str, float] = {}
    stopping: dict[str, float] = {}
    seq = 0
    t = 0.0
    while t <= hours * 3600:
        for queue in ("vision", "nlp", "serving"):
            arrivals = sum(1 for _ in range(3) if rng.random() < _rate(queue, t) * STEP / 3)
            for _ in range(arrivals):
                seq += 1
                pods = rng.choice((1, 1, 2, 2, 4))
                gpus = rng.choice((1, 2, 4, 8)) if pods < 4 else rng.choice((2, 4))
                key = f"{queue}/job-{seq}"
                priority = 100 if queue == "serving" else rng.choice((0, 0, 10))
                e.submit(
                    WorkloadSpec(
                        key,
                        queue,
                        "default",
                        [PodSetSpec("worker", pods, {"cpu": 4_000, GPU: gpus})],
                        priority=priority,
                        creation_time=t,
                        priority_class="high" if priority else "",
                    ),
                    now=t,
                )
                runtime[key] = rng.uniform(600, 3600) * (0.5 if queue == "serving" else 1.0)
        for key, when in list(ready_at.items()):
            if when <= t:
                del ready_at[key]
                e.pods_ready(key)
        for key, when in list(end_at.items()):
            if when <= t:
                del end_at[key]
                m.observe_finished(e, key)
                e.finish(key, t)
        for key, when in list(stopping.items()):
            if when <= t:
                del stopping[key]
                e.eviction_done(key, t)
        start = time.perf_counter()
        decisions = e.schedule(t)
        elapsed = time.perf_counter() - start
        m.observe_decisions(e, decisions)
        m.observe_cycle(elapsed, sum(1 for d in decisions if isinstance(d, Admission)))
        for d in decisions:
            if isinstance(d, Admission):
                if rng.random() < 0.02:  # the JobSet changed under us: the patch is retried
                    m.admission_error(d.cluster_queue, "Conflict")
                if rng.random() < 0.04:  # an image that never pulls: pods-ready timeout
                    continue
                ready_at[d.workload] = t + rng.uniform(20, 120)
                end_at[d.workload] = t + runtime[d.workload]
            elif isinstance(d, Eviction):
                ready_at.pop(d.workload, None)
                end_at.pop(d.workload, None)
                stopping[d.workload] = t + 15
        for verb, resource in (("patch", "jobsets"), ("patch", "workloads/status"), ("list", "pods")):
            for _ in range(rng.randint(0, 3)):
                m.api_request(verb, resource, 200 if rng.random() > 0.01 else 409)
        m.refresh(e, t)
        yield t, m.registry
        t += STEP


def openmetrics(scrapes: Iterator[tuple[float, CollectorRegistry]], t0: float) -> str:
    """Scrapes as one OpenMetrics text with timestamps (``t0`` + simulated time). Each series'
    points are contiguous, as the format requires (histograms: per label set without ``le``)."""
    families: dict[str, tuple[str, str, dict[tuple[tuple[str, str], ...], list[str]]]] = {}
    for t, registry in scrapes:
        ts = f"{t0 + t:.3f}"
        for family in registry.collect():
            entry = families.setdefault(family.name, (family.type, family.documentation, {}))
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                group = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
                value = _number(s.value)
                line = f"{s.name}{{{labels}}} {value} {ts}" if labels else f"{s.name} {value} {ts}"
                entry[2].setdefault(group, []).append(line)
    out: list[str] = []
    for name, (kind, doc, groups) in families.items():
        out.append(f"# TYPE {name} {kind}")
        out.append(f"# HELP {name} {_escape(doc)}")
        for lines in groups.values():
            out.extend(lines)
    out.append("# EOF")
    return "\n".join(out) + "\n"


def _number(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


VARIABLES = {
    "$cluster_queue": ".*",
    "$cohort": ".*",
    "$flavor": ".*",
    "$resource": GPU,
    "$__rate_interval": "10m",
}


def substitute(expr: str) -> str:
    for var, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(var, value)
    return expr


def render(out: Path, workdir: Path, hours: float = HOURS) -> Path:
    """Run the whole pipeline; returns the PNG path."""
    try:
        import matplotlib
    except ImportError as err:  # plotting is an extra: the controller's install does not carry it
        raise RuntimeError("the dashboard preview needs matplotlib: pip install 'gangq[plots]'") from err

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    promtool = shutil.which("promtool")
    prometheus = shutil.which("prometheus")
    if not promtool or not prometheus:
        raise RuntimeError("needs prometheus and promtool on PATH (Debian: apt-get install prometheus)")
    t0 = math.floor(time.time() - (hours + 1) * 3600)
    data = workdir / "scrapes.om.txt"
    data.write_text(openmetrics(simulate(hours=hours), t0))
    tsdb = workdir / "tsdb"
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(data), str(tsdb)], check=True, capture_output=True
    )
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n")
    port = _free_port()
    proc = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tsdb}",
            "--storage.tsdb.retention.time=10y",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(base + "/-/ready", timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        board = json.loads(DASHBOARD.read_text())
        panels = [p for p in board["panels"] if p["type"] != "row"]
        cols = 4
        rows = math.ceil(len(panels) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(cols * 5.2, rows * 3.1), facecolor="#111217")
        start, end = t0, t0 + hours * 3600
        for ax, panel in zip(axes.flat, panels, strict=False):
            ax.set_facecolor("#181b1f")
            ax.set_title(panel["title"], color="#d8d9da", fontsize=9, loc="left")
            ax.tick_params(colors="#8e8e8e", labelsize=7)
            for spine in ax.spines.values():
                spine.set_color("#2c3235")
            for target in panel["targets"]:
                query = substitute(target["expr"])
                params = urllib.parse.urlencode({"query": query, "start": start, "end": end, "step": 60})
                result = _get(f"{base}/api/v1/query_range?{params}")["data"]["result"]
                for series in result[:8]:
                    xs = [(float(v[0]) - t0) / 3600 for v in series["values"]]
                    ys = [float(v[1]) for v in series["values"]]
                    label = target.get("legendFormat", "")
                    for k, v in series["metric"].items():
                        label = label.replace("{{" + k + "}}", v)
                    ax.plot(xs, ys, linewidth=1.1, label=label.strip() or query[:30])
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
            if unit:
                ax.set_ylabel(unit, color="#8e8e8e", fontsize=7)
            ax.set_xlabel("hours", color="#8e8e8e", fontsize=7)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6, facecolor="#181b1f", labelcolor="#d8d9da", edgecolor="#2c3235", loc="upper left")
        for ax in list(axes.flat)[len(panels) :]:
            ax.set_visible(False)
        fig.suptitle(f"{board['title']} — six simulated hours, queried from Prometheus", color="#d8d9da")
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=80, facecolor=fig.get_facecolor())
        plt.close(fig)
    finally:
        proc.terminate()
        proc.wait(10)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the dashboard's panels from a simulation via Prometheus")
    parser.add_argument("--out", type=Path, default=DASHBOARD.parent / "dashboard-preview.png")
    parser.add_argument("--hours", type=float, default=HOURS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        path = render(args.out, Path(tmp), args.hours)
    log.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
