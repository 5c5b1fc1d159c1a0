"""benchmarks/kueue_baseline_e2e.py with ``--kind job``: the Jobs are the JobSets' gangs, the
runner's finished status is what gangq reads as finished, and a small run ends with every Job
finished through the controller."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gangq.core.model import WorkloadSpec
from gangq.integrations.job import JOB
from gangq.integrations.jobset import JOBSET, jobset_to_workload

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "kueue_baseline_e2e.py"
PRIORITIES = {"small": 1, "medium": 2, "large": 3}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kueue_baseline_e2e", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _gang(spec: WorkloadSpec) -> tuple[Any, ...]:
    return (spec.queue_name, spec.priority, spec.min_member,
            tuple((ps.name, ps.count, dict(ps.requests)) for ps in spec.pod_sets))


@pytest.mark.parametrize("cls", ["small", "medium", "large"])
def test_a_job_is_the_gang_of_its_jobset(bench: ModuleType, cls: str) -> None:
    cpu = {c: cpu for c, _, cpu, _, _ in bench.CLASSES}[cls]
    as_jobset = bench.jobset("w", "lq-1", cls, cpu)
    as_job = bench.job("w", "lq-1", cls, cpu)
    assert as_job["apiVersion"] == "batch/v1" and as_job["spec"]["suspend"] is True
    assert as_job["metadata"]["labels"] == as_jobset["metadata"]["labels"]
    job_gang = JOB.to_workload(as_job, {}, PRIORITIES)
    jobset_gang = jobset_to_workload(as_jobset, workload_priority_classes=PRIORITIES)
    assert _gang(job_gang) == _gang(jobset_gang)
    assert job_gang.key == "default/job:w" and JOB.workload_name("w") == "job-w"


def test_the_runners_finished_status_finishes_each_kind(bench: ModuleType) -> None:
    for kind, adapter in (("jobset", JOBSET), ("job", JOB)):
        api = bench.KINDS[kind]
        obj = api.manifest("w", "lq-1", "small", 1)
        assert adapter.terminal(obj) is None
        status = api.finished(1_000_000.0, 1_000_000.4)["status"]
        assert adapter.terminal({**obj, "status": status}) == "Completed"
    status = bench.job_finished(1_000_000.9, 1_000_001.2)["status"]
    assert status["startTime"] <= status["completionTime"] and status["succeeded"] == 1
    assert [c["type"] for c in status["conditions"]] == ["SuccessCriteriaMet", "Complete"]


def _cluster_queue(name: str, held: str | None, nominal: int = 20) -> dict[str, Any]:
    flavors = [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": nominal}]}]
    status = {"flavorsUsage": [{"name": "default", "resources": [{"name": "cpu", "total": held}]}]} if held else {}
    return {"metadata": {"name": name}, "spec": {"resourceGroups": [{"flavors": flavors}]}, "status": status}


def test_the_quota_record_integrates_cluster_queue_status_as_kueues_recorder(bench: ModuleType) -> None:
    rec = bench.QuotaRecorder()
    rec.observe(_cluster_queue("a", None), 0.0)  # listed before the controller wrote its status
    rec.observe(_cluster_queue("b", "0"), 1.0)
    rec.observe(_cluster_queue("a", "20"), 2.0)  # a holds 20 cpu from 2 s ...
    rec.observe(_cluster_queue("b", "500m"), 4.0)
    assert not rec.idle()
    rec.observe(_cluster_queue("a", "0"), 7.0)  # ... to 7 s: 100 cpu·s
    rec.observe(_cluster_queue("b", "0"), 10.0)  # b: 0.5 cpu for 6 s, 3 cpu·s
    assert rec.idle()
    summary = rec.summary()
    assert (summary["cpu_seconds_used"], summary["nominal_cpu"], summary["elapsed_seconds"]) == (103.0, 40.0, 10.0)
    assert summary["usage_pct"] == round(100 * 103.0 / (40.0 * 10.0), 2) and summary["cluster_queues"] == 2
    assert bench.QuotaRecorder().summary()["usage_pct"] is None


def test_a_small_job_run_finishes_every_job(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    config = tmp_path / "config.yaml"  # ClusterQueue status often enough to record this short run's usage
    config.write_text("status:\n  queueIntervalSeconds: 0.2\n")
    run = subprocess.run([sys.executable, str(SCRIPT), "--scale", "0.01", "--kind", "job", "--json", str(out),
                          "--config", str(config)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["kind"] == "job" and report["control_plane"] == "emulated"
    assert report["workloads"] == 150 and report["runner_errors"] == []
    assert report["controller_summary"]["workload_status_writes"]["Finished"] == 150
    quota = report["cq_status_usage"]  # the ClusterQueues' status, recorded until it showed no quota held
    assert quota["cluster_queues"] == 30 and quota["idle_at_end"] and quota["usage_pct"] > 0
    writes = report["writes_by_resource"]
    assert writes["create workloads.gangq.io"] == 150 and writes["patch jobs.batch"] >= 150
    assert not [k for k in writes if "jobsets" in k or k in ("create jobs.batch", "patch jobs.batch/status")]


def test_a_broken_watch_stream_is_watched_again_from_the_last_resource_version(bench: ModuleType) -> None:
    """The runner's watches resume where a stream broke (a stalled JobSet watch would leave the run
    waiting for completions it never sees), and start again from "0" after an ERROR event."""
    import asyncio

    import aiohttp
    from aiohttp import web

    asked: list[str] = []

    def event(kind: str, rv: int) -> bytes:
        obj = {"metadata": {"name": f"o{rv}", "resourceVersion": str(rv)}}
        return json.dumps({"type": kind, "object": obj}).encode() + b"\n"

    async def handler(request: web.Request) -> web.StreamResponse:
        rv = request.query["resourceVersion"]
        asked.append(rv)
        resp = web.StreamResponse()
        await resp.prepare(request)
        if len(asked) == 1:  # two events, then the connection drops mid-line
            await resp.write(event("ADDED", 11) + event("MODIFIED", 12) + b'{"type": "MOD')
            assert request.transport is not None
            request.transport.close()
            return resp
        if len(asked) == 2:
            await resp.write(event("ADDED", 13))
            await resp.write(json.dumps({"type": "ERROR", "object": {"code": 410}}).encode() + b"\n")
            return resp
        await resp.write(event("ADDED", 14))
        return resp

    async def go() -> list[tuple[str, str]]:
        app = web.Application()
        app.router.add_get("/things", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        broken: list[str] = []
        seen: list[tuple[str, str]] = []
        try:
            async with aiohttp.ClientSession() as session:
                async for ev in bench.watch_events(session, f"http://127.0.0.1:{port}/things", "10", broken):
                    seen.append((ev["type"], ev["object"]["metadata"]["resourceVersion"]
                                 if ev["type"] != "ERROR" else ""))
                    if len(seen) == 5:
                        break
        finally:
            await runner.cleanup()
        assert len(broken) == 1, broken
        return seen

    seen = asyncio.run(go())
    assert seen == [("ADDED", "11"), ("MODIFIED", "12"), ("ADDED", "13"), ("ERROR", ""), ("ADDED", "14")]
    assert asked == ["10", "12", "0"]
