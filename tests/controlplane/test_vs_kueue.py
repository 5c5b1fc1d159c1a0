"""The side-by-side benchmark's own logic (``benchmarks/vs_kueue.py``), without Go or a control
plane: Kueue's output files read from hand-written fixtures in their format, the audit log's
writes attributed by user agent, the checker's usage formula, the targets."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gangq.controlplane import upstream
from gangq.controlplane.audit import WRITES_POLICY, WriteCounter, agent_name

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vs_kueue", ROOT / "benchmarks" / "vs_kueue.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kueue_summary_is_read_as_its_checker_reads_it(bench: ModuleType) -> None:
    summary = bench.parse_summary((DATA / "kueue-summary.yaml").read_text())
    # cpuUsed × 100 / (nominalQuota × elapsed ms): 40,416,450,000 × 100 / (600,000 × 120,500)
    assert summary["min_cq_usage_pct"] == pytest.approx(55.9, abs=0.005)
    assert summary["recorded_seconds"] == pytest.approx(120.5)
    assert summary["avg_time_to_admission_s"] == {"large": 16.501, "medium": 76.768, "small": 215.468}
    assert summary["evictions"] == 5
    assert summary["workloads"] == 15_000


def test_minimalkueue_stats_give_wall_cpu_and_peak_rss(bench: ModuleType) -> None:
    stats = bench.parse_cmd_stats((DATA / "minimalkueue.stats.yaml").read_text())
    assert stats == {"wall_seconds": 351.116, "cpu_seconds": 110.75, "peak_rss_mb": 256.0}
    assert math.isnan(bench.parse_cmd_stats("wallMs: 1\nuserMs: 1\nsysMs: 1\nmaxrss: -1\n")["peak_rss_mb"])


def test_nanosecond_times_in_either_yaml_form(bench: ModuleType) -> None:
    assert bench._time("2026-01-02T10:00:00.123456789Z") == pytest.approx(bench._time("2026-01-02T10:00:00.123456Z"))
    assert bench._time("2026-01-02T10:00:01Z") - bench._time("2026-01-02T10:00:00.5Z") == pytest.approx(0.5)


def test_scaled_generator_scales_every_workload_set_and_keeps_one(bench: ModuleType) -> None:
    config = {"cohorts": [{"className": "cohort", "count": 5, "queuesSets": [{
        "className": "cq", "count": 6, "nominalQuota": 20,
        "workloadsSets": [{"count": 350, "workloads": []}, {"count": 5, "workloads": []}]}]}]}
    out = bench.scaled_generator(config, 0.1)
    assert [w["count"] for w in out["cohorts"][0]["queuesSets"][0]["workloadsSets"]] == [35, 1]
    assert config["cohorts"][0]["queuesSets"][0]["workloadsSets"][0]["count"] == 350  # a copy


def test_generator_work_is_what_the_workloads_need(bench: ModuleType) -> None:
    config = {"cohorts": [{"count": 5, "queuesSets": [{"count": 6, "nominalQuota": "20", "workloadsSets": [
        {"count": 350, "workloads": [{"request": "1", "runtimeMs": 200}]},
        {"count": 50, "workloads": [{"request": "20", "runtimeMs": 1000}]}]}]}]}
    work, nominal = bench.generator_work(config)
    assert (work, nominal) == (30 * (350 * 0.2 + 50 * 20.0), 600.0)
    assert bench.work_usage_pct(work, nominal, 100.0) == pytest.approx(100 * work / 60_000, abs=0.01)


def test_gangq_usage_uses_the_checker_formula(bench: ModuleType) -> None:
    # two queues of 20 cpu over 10 s: 400 cpu·s possible, 300 used
    assert bench.gangq_usage_pct({"a": 200.0, "b": 100.0}, 20.0, 10.0) == 75.0


def _side(wall: float, usage: float, admission: float, evictions: int, writes: float) -> dict[str, Any]:
    return {"wall_seconds": wall, "min_cq_usage_pct": usage, "evictions": evictions,
            "avg_time_to_admission_s": dict.fromkeys(("small", "medium", "large"), admission),
            "api_writes_per_workload": writes}


def test_targets_are_the_issues(bench: ModuleType) -> None:
    kueue = _side(351.0, 55.9, 100.0, 5, 6.0)
    assert all(bench.targets(kueue, _side(175.0, 71.0, 50.0, 5, 6.0)).values())
    missed = bench.targets(kueue, _side(176.0, 70.8, 50.1, 6, 6.1))
    assert not any(missed.values())


def _event(agent: str, verb: str, resource: str, code: int = 201, *, stage: str = "ResponseComplete",
           subresource: str | None = None, group: str = "kueue.x-k8s.io") -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": resource, "apiGroup": group}
    if subresource:
        ref["subresource"] = subresource
    return {"kind": "Event", "level": "Metadata", "stage": stage, "verb": verb, "userAgent": agent,
            "user": {"username": "gangq-admin"}, "objectRef": ref, "responseStatus": {"code": code}}


def test_audit_writes_are_attributed_by_user_agent(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    events = [
        _event("runner/v0.0.0 (linux/amd64) kubernetes/$Format", "create", "workloads"),
        _event("minimalkueue/v0.0.0 (linux/amd64) kubernetes/$Format", "patch", "workloads", 200,
               subresource="status"),
        _event("minimalkueue/v0.0.0 (linux/amd64) kubernetes/$Format", "patch", "workloads", 200,
               stage="RequestReceived", subresource="status"),  # the same request's first stage
        _event("minimalkueue/v0.0.0 (linux/amd64) kubernetes/$Format", "create", "events", group=""),
        _event("minimalkueue/v0.0.0 (linux/amd64) kubernetes/$Format", "patch", "workloads", 409,
               subresource="status"),  # a conflict: no write
        _event("runner/v0.0.0 (linux/amd64) kubernetes/$Format", "update", "workloads", 200,
               subresource="status"),
        _event("kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc", "update", "leases", 200,
               group="coordination.k8s.io"),
        _event("gangq/0.1.0 (python aiohttp)", "get", "workloads", 200),  # a read: not a write
    ]
    lines = [json.dumps(e) for e in events]
    log.write_text("\n".join(lines[:4]) + "\n" + lines[4][:20])  # the last line still being written
    counter = WriteCounter(log).read()
    assert counter.total(("minimalkueue",)) == 2
    with log.open("a") as f:
        f.write(lines[4][20:] + "\n" + "\n".join(lines[5:]) + "\n")
    counter.read()
    assert counter.by_resource(("minimalkueue",)) == {"create events": 1, "patch workloads.kueue.x-k8s.io/status": 1}
    assert counter.failed["minimalkueue"] == 1
    assert counter.per_agent() == {"kube-controller-manager": 1, "minimalkueue": 2, "runner": 2}
    counter.reset()
    assert counter.per_agent() == {}


def test_agent_names() -> None:
    assert agent_name("kopf/1.38.0") == "kopf"
    assert agent_name("gangq/0.1.0 (python aiohttp)") == "gangq"
    assert agent_name("Python/3.11 aiohttp/3.9") == "Python"
    assert agent_name("") == "?"


def test_the_audit_policy_logs_writes_only() -> None:
    rule, rest = WRITES_POLICY
    assert rule["level"] == "Metadata" and set(rule["verbs"]) >= {"create", "update", "patch", "delete"}
    assert rest == {"level": "None"}


def test_kueue_pin_is_read_from_go_mod() -> None:
    version = upstream.pinned_version()
    assert version.startswith("v0.") and int(version.split(".")[1]) >= 17
    assert upstream.bin_dir().parent.name.startswith("kueue-")
