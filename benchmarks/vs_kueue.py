"""Kueue and gangq side by side on the same control plane: Kueue's scheduler-performance
baseline run by Kueue's own runner and minimalkueue, and gangq's run of the same workloads
(``benchmarks/kueue_baseline_e2e.py --control-plane real``), in one run on this machine.

    python benchmarks/vs_kueue.py --json OUT.json [--scale F] [--config baseline|large-scale]

Kueue: ``hack/upstream/kueue`` pins ``sigs.k8s.io/kueue``; its performance runner and
minimalkueue are built from the module (:mod:`gangq.controlplane.upstream`, cached) and run as
Kueue's ``run-performance-scheduler`` target runs them (``runner --minimalKueue ... --crds
config/components/crd/bases --generatorConfig configs/baseline/generator.yaml``), except that the
runner's envtest uses an existing cluster (``USE_EXISTING_CLUSTER=true``): a control plane
started by :mod:`gangq.controlplane.launcher`, the same binaries, flags and audit policy as
gangq's side. Kueue's figures are read from its own ``summary.yaml`` and
``minimalkueue.stats.yaml``.

gangq: :func:`kueue_baseline_e2e.run_on` on a fresh real control plane, the controller as the
install's ServiceAccount.

Both: API writes per workload from kube-apiserver's audit log (every write at Metadata level,
:data:`gangq.controlplane.audit.WRITES_POLICY`), attributed by user agent: minimalkueue's on one
side, gangq's controller's (``gangq``, ``kopf``) on the other; the runners' writes (creating the
workloads, marking them finished) are not counted. ``min_cq_usage_pct`` as Kueue's checker
computes it: cpu used by the ClusterQueues of a class × 100 / (their nominal quota × elapsed),
the smallest over classes (one class, ``cq``), "used" on both sides being what Kueue's recorder
integrates: the ClusterQueues' ``status.flavorsUsage`` over their events, first to last (gangq's
runner records its ClusterQueues as Kueue's does: ``kueue_baseline_e2e.QuotaRecorder``).
``work_usage_pct`` is the work the workloads needed over the same quota × elapsed, alike on both
sides whatever either holds its quota for. Targets: gangq's wall ≤ ½ Kueue's, min usage ≥
Kueue's + 15 points, time to admission ≤ ½ Kueue's per class, no more evictions and no more
writes per workload than Kueue.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import kueue_baseline_e2e as e2e  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from gangq.controlplane import build as cp_build  # noqa: E402
from gangq.controlplane import upstream  # noqa: E402
from gangq.controlplane.audit import WRITES_POLICY, WriteCounter  # noqa: E402

KUEUE_AGENTS = ("minimalkueue",)
ENVTEST_QPS, ENVTEST_BURST = 1000, 2000
JOB_INTEGRATION_WRITES = ("create workloads.gangq.io", "patch jobsets.jobset.x-k8s.io")
CLASSES = ("small", "medium", "large")
LARGE_SCALE_LIMIT_S = 1800.0
# Kueue's published means (configs/*/rangespec.yaml): large-scale wall / baseline wall, to
# estimate before starting whether the large-scale run fits the limit on this machine.
LARGE_OVER_BASELINE = 1179.4 / 351.1

console = Console(stderr=True)


# -- Kueue's outputs ---------------------------------------------------------------------------
def parse_cmd_stats(text: str) -> dict[str, float]:
    """``minimalkueue.stats.yaml`` (the runner's record of the process: wallMs, userMs, sysMs,
    maxrss in KiB as getrusage gives it on Linux) → wall and CPU seconds, peak RSS MiB."""
    raw = yaml.safe_load(text) or {}
    return {
        "wall_seconds": raw["wallMs"] / 1000.0,
        "cpu_seconds": (raw["userMs"] + raw["sysMs"]) / 1000.0,
        "peak_rss_mb": raw["maxrss"] / 1024.0 if raw.get("maxrss", -1) >= 0 else math.nan,
    }


def _elapsed_ms(summary: dict[str, Any]) -> float:
    first, last = summary["firstEventTime"], summary["lastEventTime"]
    return (_time(last) - _time(first)) * 1000.0


def _time(value: Any) -> float:
    """An RFC 3339 time of the summary (PyYAML may already have parsed it) as epoch seconds."""
    import datetime

    if isinstance(value, datetime.datetime):
        moment = value
    else:
        text = str(value).replace("Z", "+00:00")
        # Go writes up to 9 fractional digits; Python takes 6
        if "." in text:
            head, rest = text.split(".", 1)
            digits = "".join(ch for ch in rest if ch.isdigit())
            text = f"{head}.{digits[:6]}{rest[len(digits):]}"
        moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def parse_summary(text: str) -> dict[str, Any]:
    """Kueue's ``summary.yaml`` → min ClusterQueue-class usage (the checker's formula), mean
    time to admission per workload class (s), evictions, workloads."""
    raw = yaml.safe_load(text) or {}
    usage: dict[str, float] = {}
    for name, cq in (raw.get("clusterQueueClasses") or {}).items():
        elapsed = _elapsed_ms(cq)
        if cq["nominalQuota"] and elapsed > 0:
            usage[name] = cq["cpuUsed"] * 100.0 / (cq["nominalQuota"] * elapsed)
    classes = raw.get("workloadClasses") or {}
    return {
        "min_cq_usage_pct": round(min(usage.values()), 2) if usage else None,
        "cq_usage_pct_by_class": {k: round(v, 2) for k, v in sorted(usage.items())},
        "avg_time_to_admission_s": {c: v["averageTimeToAdmissionMs"] / 1000.0 for c, v in sorted(classes.items())},
        "avg_time_to_finish_s": {c: v["averageTimeToFinishMs"] / 1000.0 for c, v in sorted(classes.items())},
        "evictions": sum(int(v.get("totalEvictions", 0)) for v in classes.values()),
        "workloads": sum(int(v.get("count", 0)) for v in classes.values()),
        "recorded_seconds": max((_elapsed_ms(cq) / 1000.0 for cq in (raw.get("clusterQueueClasses") or {}).values()),
                                default=None),
        "dropped_workload_events": raw.get("droppedWorkloadEvents", 0),
    }


def scaled_generator(config: dict[str, Any], scale: float) -> dict[str, Any]:
    """Kueue's generator configuration with each workload set's count × ``scale`` (at least 1),
    as ``kueue_baseline_e2e.plan`` scales gangq's."""
    out = json.loads(json.dumps(config))
    for cohort in out.get("cohorts", []):
        for queues in cohort.get("queuesSets", []):
            for wset in queues.get("workloadsSets", []):
                wset["count"] = max(1, int(wset["count"] * scale))
    return out


def generator_work(config: dict[str, Any]) -> tuple[float, float]:
    """(cpu·s the workloads of a generator configuration need, nominal cpu of its ClusterQueues)."""
    work = nominal = 0.0
    for cohort in config.get("cohorts", []):
        for queues in cohort.get("queuesSets", []):
            n = cohort["count"] * queues["count"]
            nominal += n * float(queues["nominalQuota"])
            for wset in queues.get("workloadsSets", []):
                for w in wset.get("workloads", []):
                    work += n * wset["count"] * float(w["request"]) * w["runtimeMs"] / 1000.0
    return work, nominal


def work_usage_pct(work_cpu_seconds: float, nominal: float, elapsed: float) -> float:
    """The cpu·s the workloads needed × 100 / (nominal quota × elapsed): the same measure on both
    sides whatever each one records as "used" (Kueue's recorder integrates its ClusterQueues'
    status usage, the quota held by admitted workloads until Kueue has seen them finish; gangq's
    runner the cpu of the workloads it saw running)."""
    return round(100.0 * work_cpu_seconds / (nominal * elapsed), 2)


def gangq_usage_pct(cq_cpu_seconds: dict[str, float], nominal: float, wall: float) -> float:
    """Kueue's checker formula on the runner's record of gangq's run (``running_usage_pct``): every
    ClusterQueue's cpu·s of the workloads seen running × 100 / (their nominal quota together ×
    elapsed)."""
    return round(100.0 * sum(cq_cpu_seconds.values()) / (nominal * len(cq_cpu_seconds) * wall), 2)


# -- runs --------------------------------------------------------------------------------------
def run_kueue(config_name: str, scale: float, tmp: Path, say: Callable[[str], None],
              limit_s: float) -> dict[str, Any]:
    """Kueue's runner + minimalkueue on a fresh control plane; its figures."""
    from gangq.controlplane.launcher import ControlPlane

    tools = upstream.build_kueue(say)
    source = upstream.source_dir()
    base = source / "test" / "performance" / "scheduler" / "configs" / config_name / "generator.yaml"
    tmp.mkdir(parents=True, exist_ok=True)
    generator = tmp / "generator.yaml"
    gen_config = scaled_generator(yaml.safe_load(base.read_text()), scale)
    generator.write_text(yaml.safe_dump(gen_config))
    out = tmp / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    cp = ControlPlane(workdir=tmp / "control-plane", announce=say, audit=WRITES_POLICY)
    cp.start()
    try:
        kubeconfig = cp.pki.kubeconfig(tmp / "admin-embedded.kubeconfig", cp.url, "admin", embed=True)
        counter = WriteCounter(cp.audit_log)
        counter.reset()
        env = dict(os.environ, USE_EXISTING_CLUSTER="true", KUBECONFIG=str(kubeconfig),
                   KUBEBUILDER_ASSETS=str(cp.bin))
        cmd = [str(tools / "runner"), "--o", str(out),
               "--crds", str(source / "config" / "components" / "crd" / "bases"),
               "--generatorConfig", str(generator), "--minimalKueue", str(tools / "minimalkueue"),
               "--timeout", f"{int(limit_s)}s",
               # the rates envtest gives the runner's client when it starts its own API server
               # (an existing cluster's kubeconfig would leave controller-runtime's 20/30)
               "--qps", str(ENVTEST_QPS), "--burst", str(ENVTEST_BURST)]
        say(f"Kueue {upstream.pinned_version()}: {' '.join(Path(c).name if '/' in c else c for c in cmd)}")
        started = time.monotonic()
        with open(tmp / "runner.log", "wb") as log:
            # from the module's root, as make runs it (its test utilities look for the Makefile)
            runner = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=source)
            try:
                code = runner.wait(timeout=limit_s + 120)
            except subprocess.TimeoutExpired:
                runner.send_signal(2)
                code = runner.wait(60)
        took = time.monotonic() - started
        if not (out / "summary.yaml").exists() or not (out / "minimalkueue.stats.yaml").exists():
            tail = (tmp / "runner.log").read_text(errors="replace").splitlines()[-30:]
            raise RuntimeError(f"Kueue's runner exited {code} after {took:.0f} s without its outputs:\n"
                               + "\n".join(tail))
        summary = parse_summary((out / "summary.yaml").read_text())
        stats = parse_cmd_stats((out / "minimalkueue.stats.yaml").read_text())
        counter.read()
        writes = counter.by_resource(KUEUE_AGENTS)
        failed = sum(counter.failed[a] for a in KUEUE_AGENTS)
        by_agent = counter.per_agent()
        server_cpu = round(sum(e2e.proc_stats(p.popen.pid)[0] for p in cp.processes
                               if p.name in ("kube-apiserver", "etcd") and p.popen is not None), 2)
    finally:
        cp.stop()
    n = summary["workloads"] or 1
    return {
        "version": upstream.pinned_version(),
        "config": config_name,
        "wall_seconds": round(stats["wall_seconds"], 2),
        "min_cq_usage_pct": summary["min_cq_usage_pct"],
        "work_usage_pct": work_usage_pct(*generator_work(gen_config), summary["recorded_seconds"] or math.nan),
        "avg_time_to_admission_s": summary["avg_time_to_admission_s"],
        "evictions": summary["evictions"],
        "api_writes_per_workload": round(sum(writes.values()) / n, 3),
        "cpu_seconds": round(stats["cpu_seconds"], 2),
        "peak_rss_mb": round(stats["peak_rss_mb"], 1),
        "workloads": summary["workloads"],
        "recorded_seconds": summary["recorded_seconds"],
        "avg_time_to_finish_s": summary["avg_time_to_finish_s"],
        "cq_usage_pct_by_class": summary["cq_usage_pct_by_class"],
        "dropped_workload_events": summary["dropped_workload_events"],
        "writes_by_resource": writes,
        "writes_by_agent": by_agent,
        "failed_writes": failed,
        "api_server_cpu_seconds": server_cpu,
        "runner_exit_code": code,
        "run_seconds": round(took, 1),
        "wall_definition": "minimalkueue's process wall time (minimalkueue.stats.yaml wallMs)",
    }


def run_gangq(scale: float) -> dict[str, Any]:
    """gangq's baseline on a fresh real control plane (kueue_baseline_e2e.run_on)."""
    jobs, _ = e2e.plan(scale)
    baseline = e2e.engine_alone(scale)
    args = argparse.Namespace(scale=scale, profile=None, kind="jobset", config=None, control_plane="real")
    result = e2e.run_on("real", jobs, dict(e2e.CONTROLLER_CONFIG), baseline, args)
    return {
        "version": _gangq_version(),
        "config": "baseline",
        "wall_seconds": result["wall_seconds"],
        # Kueue's checker on the same record on both sides: the ClusterQueues' status usage
        # integrated over their events (kueue_baseline_e2e.QuotaRecorder, as Kueue's recorder)
        "min_cq_usage_pct": result["cq_status_usage"]["usage_pct"],
        "cq_status_usage": result["cq_status_usage"],
        # the formula on the runner's record instead: cpu of the workloads while it saw them running
        "running_usage_pct": gangq_usage_pct(result["cq_cpu_seconds_used"], e2e.NOMINAL_CPU, result["wall_seconds"]),
        "work_usage_pct": work_usage_pct(sum(cpu * runtime for *_, cpu, runtime in jobs),
                                         e2e.NOMINAL_CPU * len(result["cq_cpu_seconds_used"]), result["wall_seconds"]),
        "avg_time_to_admission_s": result["avg_time_to_admission_s"],
        "evictions": result["evictions_seen_by_runner"],
        "api_writes_per_workload": result["api_writes_per_workload"],
        # Kueue's runner creates the Workloads itself and has no jobs for minimalkueue to start:
        # gangq's writes without its job integration's part (its Workload per JobSet, the JobSet
        # patches that start and stop them)
        "api_writes_per_workload_without_job_integration": round(sum(
            v for k, v in result["writes_by_resource"].items() if k not in JOB_INTEGRATION_WRITES
        ) / result["workloads"], 3),
        "cpu_seconds": result["controller_cpu_seconds"],
        "peak_rss_mb": result["controller_peak_rss_mb"],
        "workloads": result["workloads"],
        "min_single_cq_usage_pct": result["min_cq_usage_pct"],
        "writes_by_resource": result["writes_by_resource"],
        "writes_by_agent": result.get("writes_by_agent"),
        "failed_writes": result["failed_requests"],
        "api_server_cpu_seconds": result["api_server_cpu_seconds"],
        "core_compiled": e2e._installed_core_compiled(),
        "controller_summary": result["controller_summary"],
        "wall_definition": "first workload created → last one finished, as the runner saw them",
    }


def _gangq_version() -> str:
    from gangq import __version__

    return __version__


def targets(kueue: dict[str, Any], gangq: dict[str, Any]) -> dict[str, bool]:
    return {
        "wall<=half_kueue": gangq["wall_seconds"] <= 0.5 * kueue["wall_seconds"],
        "min_cq_usage>=kueue+15": gangq["min_cq_usage_pct"] >= kueue["min_cq_usage_pct"] + 15.0,
        "admission<=half_kueue_every_class": all(
            gangq["avg_time_to_admission_s"][c] <= 0.5 * kueue["avg_time_to_admission_s"][c] for c in CLASSES
        ),
        "evictions<=kueue": gangq["evictions"] <= kueue["evictions"],
        "writes_per_workload<=kueue": gangq["api_writes_per_workload"] <= kueue["api_writes_per_workload"],
    }


def table(kueue: dict[str, Any], gangq: dict[str, Any]) -> Table:
    out = Table(title=f"Kueue {kueue['version']} vs gangq {gangq['version']}, same machine, same control plane")
    out.add_column("measure")
    out.add_column("Kueue", justify="right")
    out.add_column("gangq", justify="right")
    rows: list[tuple[str, Any, Any]] = [
        ("wall (s)", kueue["wall_seconds"], gangq["wall_seconds"]),
        ("min ClusterQueue usage (%)", kueue["min_cq_usage_pct"], gangq["min_cq_usage_pct"]),
        ("work / (quota × elapsed) (%)", kueue["work_usage_pct"], gangq["work_usage_pct"]),
        *((f"time to admission, {c} (s)", kueue["avg_time_to_admission_s"][c], gangq["avg_time_to_admission_s"][c])
          for c in CLASSES),
        ("evictions", kueue["evictions"], gangq["evictions"]),
        ("API writes per workload", kueue["api_writes_per_workload"], gangq["api_writes_per_workload"]),
        ("controller CPU (s)", kueue["cpu_seconds"], gangq["cpu_seconds"]),
        ("controller peak RSS (MiB)", kueue["peak_rss_mb"], gangq["peak_rss_mb"]),
        ("workloads", kueue["workloads"], gangq["workloads"]),
    ]
    for name, a, b in rows:
        out.add_row(name, f"{a}", f"{b}")
    return out


def machine() -> dict[str, Any]:
    go = cp_build.go_binary()
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_at_start": [round(x, 2) for x in os.getloadavg()],
        "go": cp_build._go_version(go) if go else None,
        "kubernetes": cp_build.KUBERNETES_VERSION,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the workloads per class (both sides)")
    parser.add_argument("--config", choices=("baseline", "large-scale"), default="baseline",
                        help="large-scale: also Kueue's large-scale configuration, where it fits in 30 minutes")
    parser.add_argument("--keep", type=Path, help="keep Kueue's artifacts and logs in this directory")
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": machine(), "scale": args.scale}
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="gangq-vs-kueue-"))
    tmp.mkdir(parents=True, exist_ok=True)

    with console.status("building") as status:

        def say(line: str) -> None:
            console.log(line)
            status.update(line)

        started = time.monotonic()
        cp_build.build(say)
        upstream.build_kueue(say)
        report["machine"]["build_seconds"] = round(time.monotonic() - started, 1)
        say(f"Kueue's baseline (scale {args.scale}) with its runner and minimalkueue")
        report["kueue"] = run_kueue("baseline", args.scale, tmp / "kueue-baseline", say, LARGE_SCALE_LIMIT_S)
        say(f"gangq's baseline (scale {args.scale}) through kueue_baseline_e2e on the real control plane")
        report["gangq"] = run_gangq(args.scale)
        if args.config == "large-scale":
            estimate = report["kueue"]["wall_seconds"] / args.scale * LARGE_OVER_BASELINE
            if estimate > LARGE_SCALE_LIMIT_S / args.scale:
                report["kueue_large_scale"] = {
                    "skipped": f"Kueue's large-scale run would take about {estimate:.0f} s here (its baseline "
                               f"took {report['kueue']['wall_seconds']:.0f} s at scale {args.scale}; large-scale is "
                               f"{LARGE_OVER_BASELINE:.2f}× the baseline in Kueue's published means): over the "
                               f"{LARGE_SCALE_LIMIT_S:.0f} s limit"}
            else:
                say("Kueue's large-scale configuration")
                t0 = time.monotonic()
                try:
                    report["kueue_large_scale"] = run_kueue("large-scale", args.scale, tmp / "kueue-large-scale",
                                                            say, LARGE_SCALE_LIMIT_S)
                except RuntimeError as err:
                    report["kueue_large_scale"] = {"skipped": f"did not finish: {err}"}
                report["kueue_large_scale"]["took_seconds"] = round(time.monotonic() - t0, 1)
            report["gangq_large_scale"] = {"skipped": "gangq's runner (kueue_baseline_e2e) has only the baseline"}
    report["machine"]["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["targets"] = targets(report["kueue"], report["gangq"])
    console.print(table(report["kueue"], report["gangq"]))
    console.print(report["targets"])
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
