from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from gangq.controlplane.nodespec import parse_node_spec
from gangq.sandbox.cluster import SimulatedCluster, WorkQueue
from gangq.sandbox.kubelet import (
    KubeletConfig,
    finished_status,
    pending_status,
    pod_timing,
    restarted_status,
    restarts_container,
    running_status,
)
from gangq.sandbox.store import ApiError, ResourceInfo, Store

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "annotations": annotations or {}},
        "spec": {
            "nodeName": "node-0",
            "containers": [{"name": "main", "image": "busybox"}, {"name": "side", "image": "envoy"}],
            **spec,
        },
        "status": {
            "phase": "Pending",
            "qosClass": "BestEffort",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "DisruptionTarget", "status": "False"}],
        },
    }


def test_timing_defaults_and_annotations() -> None:
    cfg = KubeletConfig(default_run_seconds=2.5, default_exit_code=0, start_delay_seconds=0.5)
    t = pod_timing(pod(), cfg)
    assert (t.start_delay, t.run_seconds, t.exit_code, t.problems) == (0.5, 2.5, 0, [])
    t = pod_timing(
        pod(
            {
                "sandbox.gangq.io/run-seconds": "7",
                "sandbox.gangq.io/exit-code": "42",
                "sandbox.gangq.io/start-delay-seconds": "0",
            }
        ),
        cfg,
    )
    assert (t.start_delay, t.run_seconds, t.exit_code) == (0.0, 7.0, 42)
    for forever in ("inf", "-1", "Infinity"):
        assert pod_timing(pod({"sandbox.gangq.io/run-seconds": forever}), cfg).run_seconds is None
    t = pod_timing(
        pod(
            {
                "sandbox.gangq.io/run-seconds": "soon",
                "sandbox.gangq.io/exit-code": "300",
                "sandbox.gangq.io/start-delay-seconds": "-3",
            }
        ),
        cfg,
    )
    assert (t.start_delay, t.run_seconds, t.exit_code) == (0.5, 2.5, 0)
    assert len(t.problems) == 3 and any("exit-code" in p and "'300'" in p for p in t.problems)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="default_exit_code"):
        KubeletConfig(default_exit_code=256)
    with pytest.raises(ValueError, match="start_delay_seconds"):
        KubeletConfig(start_delay_seconds=-1)


def test_running_then_finished_status() -> None:
    p = pod()
    st = running_status(p, "10.0.0.2", "10.244.0.2", NOW)
    assert st["phase"] == "Running" and st["podIP"] == "10.244.0.2" and st["hostIP"] == "10.0.0.2"
    assert st["startTime"] == "2026-01-01T12:00:00Z" and st["qosClass"] == "BestEffort"
    conds = {c["type"]: c["status"] for c in st["conditions"]}
    assert conds == {
        "PodScheduled": "True",
        "DisruptionTarget": "False",
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
    }
    assert [c["name"] for c in st["containerStatuses"]] == ["main", "side"]
    assert all(
        c["ready"] and c["state"]["running"]["startedAt"] == "2026-01-01T12:00:00Z" for c in st["containerStatuses"]
    )
    p["status"] = st
    done = finished_status(p, 0, NOW.replace(second=5))
    assert done["phase"] == "Succeeded"
    term = done["containerStatuses"][0]["state"]["terminated"]
    assert term == {
        "exitCode": 0,
        "reason": "Completed",
        "startedAt": "2026-01-01T12:00:00Z",
        "finishedAt": "2026-01-01T12:00:05Z",
        "containerID": st["containerStatuses"][0]["containerID"],
    }
    ready = next(c for c in done["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "PodCompleted"
    failed = finished_status(p, 2, NOW)
    assert failed["phase"] == "Failed"
    assert failed["containerStatuses"][1]["state"]["terminated"]["reason"] == "Error"
    assert failed["containerStatuses"][1]["state"]["terminated"]["exitCode"] == 2


def test_pending_status_and_init_containers() -> None:
    p = pod(
        initContainers=[{"name": "setup", "image": "x"}, {"name": "proxy", "image": "y", "restartPolicy": "Always"}]
    )
    st = pending_status(p, "10.0.0.2", NOW)
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    st = running_status(p, "10.0.0.2", "10.244.0.3", NOW)
    init = {c["name"]: c for c in st["initContainerStatuses"]}
    assert init["setup"]["state"]["terminated"]["reason"] == "Completed"
    assert "running" in init["proxy"]["state"]


def test_restart_in_place() -> None:
    p = pod()
    p["status"] = running_status(p, "h", "i", NOW)
    st = restarted_status(p, 1, NOW.replace(second=9))
    cs = st["containerStatuses"][0]
    assert cs["restartCount"] == 1 and cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["state"]["running"]["startedAt"] == "2026-01-01T12:00:09Z"
    assert cs["containerID"] != p["status"]["containerStatuses"][0]["containerID"]
    assert restarts_container("OnFailure", 1) and not restarts_container("OnFailure", 0)
    assert restarts_container("Always", 0) and not restarts_container("Never", 1)


def test_work_queue_dedupes_and_requeues_keys_added_while_processing() -> None:
    async def main() -> None:
        q = WorkQueue()
        q.add("a")
        q.add("a")
        q.add("b")
        assert len(q) == 2
        k = await q.get()
        assert k == "a"
        q.add("a")  # added while processing: not handed out twice at once
        assert await q.get() == "b"
        assert len(q) == 0
        q.done("a")
        assert await q.get() == "a"
        q.done("a")
        q.done("b")
        q.shutdown()
        assert await q.get() is None

    asyncio.run(main())


def test_graceful_deletion_is_capped_and_reports_killed_pod() -> None:
    async def main() -> None:
        store = Store()
        seen: list[tuple[str, str, str | None]] = []

        def record(etype: str, info: ResourceInfo, obj: dict) -> None:
            if info.plural == "pods":
                seen.append((etype, obj["status"].get("phase", ""), obj["metadata"].get("deletionTimestamp")))

        store.subscribe(record)
        cluster = SimulatedCluster(
            store, parse_node_spec("1x{cpu:4}"), kubelet=KubeletConfig(default_run_seconds=-1, max_grace_seconds=0.1)
        )
        await cluster.start()
        try:
            store.create(
                "",
                "pods",
                {
                    "metadata": {"name": "p"},
                    "spec": {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"},
                },
                namespace="default",
            )
            t0 = time.monotonic()
            while store.get("", "pods", "default", "p")["status"].get("phase") != "Running":
                assert time.monotonic() - t0 < 5
                await asyncio.sleep(0.01)
            store.delete("", "pods", "default", "p")  # grace 30 s by default, capped at 0.1 s
            deleted_at = time.monotonic()
            await asyncio.sleep(0.03)
            assert store.get("", "pods", "default", "p")["metadata"]["deletionGracePeriodSeconds"] == 30
            while True:
                try:
                    store.get("", "pods", "default", "p")
                except ApiError as exc:
                    assert exc.code == 404
                    break
                assert time.monotonic() - deleted_at < 5
                await asyncio.sleep(0.01)
            assert time.monotonic() - deleted_at >= 0.09
        finally:
            await cluster.stop()
        # Running -> deletionTimestamp set -> killed (Failed) -> DELETED
        assert seen[-1][0] == "DELETED"
        assert ("MODIFIED", "Failed") in [(e, ph) for e, ph, dt in seen if dt]
        assert any(ph == "Running" and dt for _, ph, dt in seen)

    asyncio.run(main())
