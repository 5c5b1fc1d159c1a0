"""``gangq simulate`` through typer's CliRunner: options, JSON contract, plots, metrics, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gangq.sim.cli import simulate
from tests.sim.test_philly import JOBS, VCS

ROOT = Path(__file__).resolve().parents[2]

app = typer.Typer()


@app.callback()
def main() -> None:
    """test app"""


app.command("simulate")(simulate)
runner = CliRunner()


def _check_contract(doc: dict) -> None:  # type: ignore[type-arg]
    for field, kind in (("policy", str), ("jobs", int)):
        assert isinstance(doc[field], kind), field
    for field in (
        "wall_seconds",
        "simulated_seconds",
        "avg_jct_s",
        "avg_wait_s",
        "p95_wait_s",
        "max_wait_s",
        "utilization",
    ):
        assert isinstance(doc[field], float), field
    assert doc["classes"] and doc["cluster_queues"]
    for cls in doc["classes"].values():
        assert isinstance(cls["jobs"], int) and isinstance(cls["avg_wait_s"], float)
    for cq in doc["cluster_queues"].values():
        assert isinstance(cq["usage_pct"], float) and isinstance(cq["avg_wait_s"], float)


def test_kueue_baseline_json_contract(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = runner.invoke(app, ["simulate", "--scenario", "kueue-baseline", "--scale", "0.05", "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    _check_contract(doc)
    assert doc["policy"] == "gangq" and doc["jobs"] == 30 * (17 + 5 + 2)
    assert set(doc["classes"]) == {"small", "medium", "large"}
    assert "per workload class" in result.output


def test_philly_compare_plots_and_metrics(tmp_path: Path) -> None:
    (tmp_path / "philly_vc_helios_replay.csv").write_text(VCS)
    (tmp_path / "philly_pollux_jobs.csv").write_text(JOBS)
    out, plots, prom = tmp_path / "o.json", tmp_path / "plots", tmp_path / "m.prom"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            "philly",
            "--trace-dir",
            str(tmp_path),
            "--window",
            "2017-10-01:2017-10-02",
            "--compare",
            "fifo,sjf,gangq",
            "--capacity-scale",
            "1.0",
            "--json",
            str(out),
            "--plots",
            str(plots),
            "--metrics",
            str(prom),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    _check_contract(doc)
    assert [s["policy"] for s in doc["compare"]] == ["fifo", "sjf", "gangq"]
    assert doc["never_admissible"] == 1 and doc["jobs"] == 4
    assert "side by side" in result.output
    assert sorted(p.name for p in plots.iterdir()) == [
        "queue_depth_fifo.png",
        "queue_depth_gangq.png",
        "queue_depth_sjf.png",
        "utilisation.png",
        "wait_cdf.png",
    ]
    text = prom.read_text()
    assert (
        'gangq_cluster_queue_nominal_quota{cluster_queue="aaa111",flavor="vc-aaa111",resource="nvidia.com/gpu"} 16.0'
        in text
    )
    assert 'gangq_admitted_workloads_total{cluster_queue="bbb222"} 2.0' in text
    assert 'gangq_admission_wait_time_seconds_count{cluster_queue="aaa111"} 2.0' in text
    assert "gangq_pending_workloads" in text and "_created" not in text


def test_native_trace_with_config(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(ROOT / "examples" / "traces" / "gpu-cluster-day.yaml"),
            "--config",
            str(ROOT / "policies" / "example-gpu-cluster.yaml"),
            "--policy",
            "gangq",
            "--json",
            str(out),
            "--pod-start-latency",
            "5",
            "--pods-ready-timeout",
            "300",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["jobs"] == 40 and doc["finished"] == 40
    assert set(doc["cluster_queues"]) == {"vision", "language", "inference", "batch-cpu"}


def test_errors_are_clear_and_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate"])
    assert result.exit_code == 2 and "exactly one of --scenario or --trace" in result.output
    result = runner.invoke(app, ["simulate", "--scenario", "kueue-baseline", "--policy", "lifo"])
    assert result.exit_code == 2 and "unknown policy 'lifo'" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "workloads:\n  - {name: a, queue: default, submit: 0, duration: x, podSets: [{requests: {cpu: 1}}]}\n"
    )
    result = runner.invoke(
        app, ["simulate", "--trace", str(bad), "--config", str(ROOT / "policies" / "example-gpu-cluster.yaml")]
    )
    assert result.exit_code == 2 and "bad.yaml:2: workloads[0].duration" in result.output
    ok = tmp_path / "ok.yaml"
    ok.write_text(
        "workloads:\n  - {name: a, queue: nowhere, submit: 0, duration: 1, podSets: [{requests: {cpu: 1}}]}\n"
    )
    result = runner.invoke(
        app, ["simulate", "--trace", str(ok), "--config", str(ROOT / "policies" / "example-gpu-cluster.yaml")]
    )
    assert result.exit_code == 2 and "LocalQueue default/nowhere is not in the queue configuration" in result.output


QUEUES = """
apiVersion: gangq.io/v1alpha1
kind: ResourceFlavor
metadata: {name: gpu}
spec: {}
---
apiVersion: gangq.io/v1alpha1
kind: ClusterQueue
metadata: {name: research}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: gpu
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: memory, nominalQuota: 1Ti}
      - {name: nvidia.com/gpu, nominalQuota: 16}
---
apiVersion: gangq.io/v1alpha1
kind: LocalQueue
metadata: {name: team-a, namespace: research}
spec: {clusterQueue: research}
"""


def test_a_csv_trace_without_a_queue_column_replays_with_csv_default(tmp_path: Path) -> None:
    """Most public traces have no queue column: ``--csv-default queue=NAME`` gives every job one."""
    trace = tmp_path / "public.csv"
    trace.write_text("submitted,runtime,num_gpus\n0,600,8\n60,300,16\n120,900,4\n")
    (tmp_path / "queues.yaml").write_text(QUEUES)
    (tmp_path / "cluster.yaml").write_text(
        "nodes:\n- name: gpu\n  count: 2\n  allocatable: {cpu: 32, memory: 512Gi, nvidia.com/gpu: 8}\n")
    out = tmp_path / "o.json"
    args = ["simulate", "--trace", str(trace), "--config", str(tmp_path / "queues.yaml"),
            "--cluster", str(tmp_path / "cluster.yaml"),
            "--csv-map", "submit=submitted,duration=runtime,gpus=num_gpus", "--json", str(out), "--quiet"]
    result = runner.invoke(app, args)
    assert result.exit_code != 0 and "--csv-default queue=NAME" in result.output, result.output
    result = runner.invoke(app, [*args, "--csv-default", "queue=team-a,namespace=research"])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["jobs"] == 3 and doc["finished"] == 3
    assert set(doc["cluster_queues"]) == {"research"}


def test_plots_without_matplotlib_say_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plotting is an extra (the controller's install does not carry matplotlib): ``--plots``
    without it fails before the run, naming the extra."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    plots = tmp_path / "plots"
    result = runner.invoke(app, ["simulate", "--scenario", "gang-deadlock", "--plots", str(plots)])
    assert result.exit_code == 2, result.output
    assert "--plots needs matplotlib" in result.output and "pip install 'gangq[plots]'" in result.output
    assert not plots.exists()
