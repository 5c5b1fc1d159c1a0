"""Store + SimulatedCluster in-process: Jobs run through the scheduler, the Job controller and the kubelet."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC, parse_node_spec
from gangq.sandbox import cluster as cluster_module
from gangq.sandbox.cluster import KubeletConfig, SimulatedCluster
from gangq.sandbox.jobcontroller import COMPLETION_INDEX, TRACKING_FINALIZER
from gangq.sandbox.store import ApiError, Store

NS = "default"
MERGE = "application/merge-patch+json"
FAST = KubeletConfig(default_run_seconds=0.03, max_grace_seconds=0.02)


def job(
    name: str,
    *,
    parallelism: int = 1,
    completions: int | None = 1,
    gpus: int = 0,
    annotations: dict[str, str] | None = None,
    restart: str = "Never",
    **spec: Any,
) -> dict:
    container: dict = {"name": "main", "image": "busybox:1.36"}
    if gpus:
        container["resources"] = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    template: dict = {"spec": {"restartPolicy": restart, "containers": [container]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    if "subdomain" in spec:
        template["spec"]["subdomain"] = spec.pop("subdomain")
    body: dict = {"parallelism": parallelism, "template": template, **spec}
    if completions is not None:
        body["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS}, "spec": body}


async def wait_for(pred: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def run(
    body: Callable[[Store, SimulatedCluster], Awaitable[None]],
    spec: str = DEFAULT_NODE_SPEC,
    kubelet: KubeletConfig = FAST,
    **kwargs: Any,
) -> None:
    async def main() -> None:
        store = Store()
        cluster = SimulatedCluster(store, parse_node_spec(spec), kubelet=kubelet, **kwargs)
        await cluster.start()
        try:
            await body(store, cluster)
        finally:
            await cluster.stop()

    asyncio.run(main())


def get_job(store: Store, name: str) -> dict:
    return store.get("batch", "jobs", NS, name)


def condition(obj: dict, ctype: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def job_pods(store: Store, name: str) -> list[dict]:
    return store.list("", "pods", NS, label_selector=f"batch.kubernetes.io/job-name={name}")["items"]


def phases(pods: list[dict]) -> list[str]:
    return sorted(p["status"].get("phase", "") for p in pods)


def test_parallel_job_runs_to_complete() -> None:
    async def body(store: Store, cluster: SimulatedCluster) -> None:
        store.create("batch", "jobs", job("train", parallelism=4, completions=4, gpus=8), namespace=NS)
        done = await wait_for(lambda: condition(get_job(store, "train"), "Complete"), what="Complete")
        assert done["status"] == "True" and done["reason"] == "CompletionsReached"
        st = get_job(store, "train")["status"]
        assert st["succeeded"] == 4 and "failed" not in st and "active" not in st
        assert st["startTime"] and st["completionTime"]
        pods = job_pods(store, "train")
        assert phases(pods) == ["Succeeded"] * 4  # finished pods are kept
        # 4 pods x 8 GPUs fill the 4 nodes: each pod on its own node
        assert sorted(p["spec"]["nodeName"] for p in pods) == ["node-0", "node-1", "node-2", "node-3"]
        for p in pods:
            assert TRACKING_FINALIZER not in (p["metadata"].get("finalizers") or [])
            assert p["status"]["podIP"].startswith("10.244.")
            node = store.get("", "nodes", None, p["spec"]["nodeName"])
            assert p["status"]["hostIP"] == node["status"]["addresses"][0]["address"]
            term = p["status"]["containerStatuses"][0]["state"]["terminated"]
            assert term["exitCode"] == 0 and term["reason"] == "Completed"
            assert condition(p, "PodScheduled")["status"] == "True"  # type: ignore[index]
        reasons = {e["reason"] for e in store.list("", "events", NS)["items"]}
        assert {"SuccessfulCreate", "Scheduled", "Started", "Completed"} <= reasons

    run(body)


def test_failing_pods_reach_backoff_limit_exceeded() -> None:
    async def body(store: Store, cluster: SimulatedCluster) -> None:
        store.create(
            "batch", "jobs", job("bad", backoffLimit=2, annotations={"sandbox.gangq.io/exit-code": "3"}), namespace=NS
        )
        failed = await wait_for(lambda: condition(get_job(store, "bad"), "Failed"), what="Failed")
        assert failed["reason"] == "BackoffLimitExceeded"
        assert failed["message"] == "Job has reached the specified backoff limit"
        st = get_job(store, "bad")["status"]
        assert st["failed"] == 3 and "succeeded" not in st
        pods = job_pods(store, "bad")
        assert phases(pods) == ["Failed"] * 3  # each failed pod replaced by a new one (restartPolicy Never)
        for p in pods:
            term = p["status"]["containerStatuses"][0]["state"]["terminated"]
            assert term["exitCode"] == 3 and term["reason"] == "Error"

    run(body)


def test_on_failure_restarts_count_toward_backoff_limit() -> None:
    async def body(store: Store, cluster: SimulatedCluster) -> None:
        store.create(
            "batch",
            "jobs",
            job("crash", backoffLimit=2, restart="OnFailure", annotations={"sandbox.gangq.io/exit-code": "1"}),
            namespace=NS,
        )
        failed = await wait_for(lambda: condition(get_job(store, "crash"), "Failed"), what="Failed")
        assert failed["reason"] == "BackoffLimitExceeded"
        pods = job_pods(store, "crash")
        assert len(pods) <= 1  # one pod, restarted in place, then deleted when the Job failed
        assert get_job(store, "crash")["status"]["failed"] == 1  # the pod killed because the Job failed

    run(body)


def test_active_deadline_exceeded() -> None:
    async def body(store: Store, cluster: SimulatedCluster) -> None:
        store.create("batch", "jobs", job("slow", parallelism=2, completions=2, activeDeadlineSeconds=1,
                                          annotations={"sandbox.gangq.io/run-seconds": "inf"}), namespace=NS)
        failed = await wait_for(lambda: condition(get_job(store, "slow"), "Failed"), timeout=4, what="Failed")
        assert failed["reason"] == "DeadlineExceeded"
        assert failed["message"] == "Job was active longer than specified deadline"
        # the active pods are deleted (and, after the capped grace period, gone) and counted as failed
        await wait_for(lambda: not job_pods(store, "slow"), what="pods removed")
        st = get_job(store, "slow")["status"]
        assert "active" not in st and st["failed"] == 2 and "succeeded" not in st
        reasons = [e["reason"] for e in store.list("", "events", NS)["items"]
                   if e["involvedObject"]["name"] == "slow"]
        assert reasons.count("SuccessfulCreate") == 2 and reasons.count("SuccessfulDelete") == 2
        assert "DeadlineExceeded" in reasons


def test_suspend_deletes_active_pods_and_resume_recreates_them() -> None:
    async def body(store: Store, cluster: SimulatedCluster) -> None:
        store.create(
            "batch",
            "jobs",
            job("susp", parallelism=3, completions=3, annotations={"sandbox.gangq.io/run-seconds": "-1"}),
            namespace=NS,
        )
        await wait_for(lambda: phases(job_pods(store, "susp")) == ["Running"] * 3, what="3 running")
        await wait_for(lambda: get_job(store, "susp")["status"].get("ready") == 3, what="ready 3")
        first = {p["metadata"]["name"] for p in job_pods(store, "susp")}
        start1 = get_job(store, "susp")["status"]["startTime"]
        store.patch("batch", "jobs", NS, "susp", {"spec": {"suspend": True}}, MERGE)
        await wait_for(lambda: not job_pods(store, "susp"), what="pods deleted")
        j = get_job(store, "susp")
        s = condition(j, "Suspended")
        assert s is not None and (s["status"], s["reason"], s["message"]) == ("True", "JobSuspended", "Job suspended")
        assert "active" not in j["status"] and "failed" not in j["status"]
        await asyncio.sleep(1.05)  # so that the reset startTime differs (second resolution)
        store.patch("batch", "jobs", NS, "susp", {"spec": {"suspend": False}}, MERGE)
        await wait_for(lambda: phases(job_pods(store, "susp")) == ["Running"] * 3, what="3 running again")
        j = get_job(store, "susp")
        s = condition(j, "Suspended")
        assert s is not None and (s["status"], s["reason"], s["message"]) == ("False", "JobResumed", "Job resumed")
        assert j["status"]["startTime"] > start1
        assert not first & {p["metadata"]["name"] for p in job_pods(store, "susp")}

    run(body)


def test_indexed_job_pod_identity() -> None:
    async def body(store: Store, cluster: SimulatedCluster) -> None:
        store.create(
            "batch",
            "jobs",
            job("idx", parallelism=3, completions=3, completionMode="Indexed", subdomain="workers"),
            namespace=NS,
        )
        await wait_for(lambda: condition(get_job(store, "idx"), "Complete"), what="Complete")
        j = get_job(store, "idx")
        assert j["status"]["completedIndexes"] == "0-2" and j["status"]["succeeded"] == 3
        uid = j["metadata"]["uid"]
        pods = sorted(job_pods(store, "idx"), key=lambda p: int(p["metadata"]["labels"][COMPLETION_INDEX]))
        assert len(pods) == 3
        for i, p in enumerate(pods):
            meta = p["metadata"]
            assert meta["name"].startswith(f"idx-{i}-") and len(meta["name"]) == len(f"idx-{i}-") + 5
            assert meta["labels"][COMPLETION_INDEX] == meta["annotations"][COMPLETION_INDEX] == str(i)
            assert meta["labels"]["job-name"] == meta["labels"]["batch.kubernetes.io/job-name"] == "idx"
            assert meta["labels"]["controller-uid"] == meta["labels"]["batch.kubernetes.io/controller-uid"] == uid
            assert p["spec"]["hostname"] == f"idx-{i}" and p["spec"]["subdomain"] == "workers"
            owner = meta["ownerReferences"][0]
            assert (owner["kind"], owner["name"], owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == (
                "Job",
                "idx",
                uid,
                True,
                True,
            )

    run(body)


def test_two_gangs_deadlock_without_gangq() -> None:
    """Two 6-pod gangs of 8-GPU pods on 4 x 8-GPU nodes, scheduled pod by pod: both end up partially running."""

    async def body(store: Store, cluster: SimulatedCluster) -> None:
        forever = {"sandbox.gangq.io/run-seconds": "inf"}  # workers wait for their peers forever
        for name in ("gang-a", "gang-b"):
            store.create(
                "batch", "jobs", job(name, parallelism=6, completions=6, gpus=8, annotations=forever), namespace=NS
            )

        def running(name: str) -> int:
            return sum(1 for p in job_pods(store, name) if p["status"].get("phase") == "Running")

        def settled() -> bool:
            pods = job_pods(store, "gang-a") + job_pods(store, "gang-b")
            pending = [
                p
                for p in pods
                if p["status"].get("phase") == "Pending"
                and (condition(p, "PodScheduled") or {}).get("reason") == "Unschedulable"
            ]
            return len(pods) == 12 and running("gang-a") + running("gang-b") == 4 and len(pending) == 8

        await wait_for(settled, what="4 running + 8 unschedulable")
        attempts = cluster.scheduling_attempts
        await asyncio.sleep(0.3)
        # the deadlock: both gangs hold GPUs, neither can ever complete, and nobody retries in a busy loop
        a, b = running("gang-a"), running("gang-b")
        assert 0 < a < 6 and 0 < b < 6 and a + b == 4
        assert cluster.scheduling_attempts == attempts
        for name in ("gang-a", "gang-b"):
            st = get_job(store, name)["status"]
            assert st["active"] == 6 and condition(get_job(store, name), "Complete") is None
        msgs = {
            condition(p, "PodScheduled")["message"]  # type: ignore[index]
            for p in job_pods(store, "gang-a") + job_pods(store, "gang-b")
            if p["status"]["phase"] == "Pending"
        }
        assert msgs == {"0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}
        # freeing capacity retries the unschedulable pods: delete gang-a, gang-b then gets 4 GPUs-nodes
        store.delete("batch", "jobs", NS, "gang-a", propagation_policy="Background")
        await wait_for(lambda: running("gang-b") == 4, what="gang-b takes the whole cluster")
        await wait_for(lambda: not job_pods(store, "gang-a"), what="gang-a pods gone")

    run(body)


def test_scheduling_gates_and_foreign_scheduler() -> None:
    async def body(store: Store, cluster: SimulatedCluster) -> None:
        base = {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"}
        store.create(
            "",
            "pods",
            {
                "metadata": {"name": "gated", "annotations": {"sandbox.gangq.io/run-seconds": "inf"}},
                "spec": {**base, "schedulingGates": [{"name": "gangq.io/admission"}]},
            },
            namespace=NS,
        )
        store.create(
            "", "pods", {"metadata": {"name": "other"}, "spec": {**base, "schedulerName": "volcano"}}, namespace=NS
        )
        await asyncio.sleep(0.1)
        gated = store.get("", "pods", NS, "gated")
        assert not gated["spec"].get("nodeName")
        c = condition(gated, "PodScheduled")
        assert c is not None and c["reason"] == "SchedulingGated"
        assert not store.get("", "pods", NS, "other")["spec"].get("nodeName")
        store.patch("", "pods", NS, "gated", {"spec": {"schedulingGates": None}}, MERGE)
        await wait_for(lambda: store.get("", "pods", NS, "gated")["status"].get("phase") == "Running", what="Running")
        assert not store.get("", "pods", NS, "other")["spec"].get("nodeName")

    run(body)


def test_node_selector_taints_and_start_delay() -> None:
    async def body(store: Store, cluster: SimulatedCluster) -> None:
        spec = {
            "containers": [{"name": "main", "image": "busybox"}],
            "restartPolicy": "Never",
            "nodeSelector": {"gpu": "a100"},
        }
        ann = {"sandbox.gangq.io/start-delay-seconds": "0.5", "sandbox.gangq.io/run-seconds": "inf"}
        store.create("", "pods", {"metadata": {"name": "picky", "annotations": ann}, "spec": spec}, namespace=NS)
        def attempted() -> dict | None:
            q = store.get("", "pods", NS, "picky")
            return q if condition(q, "PodScheduled") else None

        p = await wait_for(attempted, what="picky attempted")
        # the only a100 node is tainted and the pod does not tolerate it
        assert condition(p, "PodScheduled")["message"] == (  # type: ignore[index]
            "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
            "1 node(s) had untolerated taint {nvidia.com/gpu: present}."
        )
        store.delete("", "pods", NS, "picky")
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        store.create("", "pods", {"metadata": {"name": "tolerant", "annotations": ann}, "spec": spec}, namespace=NS)
        await wait_for(lambda: store.get("", "pods", NS, "tolerant")["spec"].get("nodeName") == "node-0", what="bound")
        p = store.get("", "pods", NS, "tolerant")
        assert p["status"]["phase"] == "Pending"  # start delay still running
        assert p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
        await wait_for(lambda: store.get("", "pods", NS, "tolerant")["status"]["phase"] == "Running", what="Running")
        assert condition(store.get("", "pods", NS, "tolerant"), "Ready")["status"] == "True"  # type: ignore[index]

    run(body, spec="1x{cpu:8}[gpu=a100](nvidia.com/gpu=present:NoSchedule);1x{cpu:8}[gpu=h100]")


def test_higher_priority_pod_is_retried_first_when_capacity_frees() -> None:
    async def body(store: Store, cluster: SimulatedCluster) -> None:
        def gpu_pod(name: str, priority: int, run: str) -> dict:
            return {
                "metadata": {"name": name, "annotations": {"sandbox.gangq.io/run-seconds": run}},
                "spec": {
                    "priority": priority,
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
                    ],
                },
            }

        store.create("", "pods", gpu_pod("holder", 0, "0.2"), namespace=NS)
        await wait_for(lambda: store.get("", "pods", NS, "holder")["status"].get("phase") == "Running", what="holder")
        store.create("", "pods", gpu_pod("low", 0, "inf"), namespace=NS)
        store.create("", "pods", gpu_pod("high", 100, "inf"), namespace=NS)
        await wait_for(
            lambda: (
                (condition(store.get("", "pods", NS, "low"), "PodScheduled") or {}).get("reason") == "Unschedulable"
            ),
            what="low unschedulable",
        )
        # holder finishes -> its GPU is released -> the waiting pods are retried, highest priority first
        await wait_for(lambda: store.get("", "pods", NS, "high")["spec"].get("nodeName"), what="high bound")
        await asyncio.sleep(0.05)
        assert not store.get("", "pods", NS, "low")["spec"].get("nodeName")
        assert store.get("", "pods", NS, "holder")["status"]["phase"] == "Succeeded"

    run(body, spec="1x{cpu:8,nvidia.com/gpu:1}")


def test_job_deleted_with_orphan_policy_releases_pod_finalizers() -> None:
    async def body(store: Store, cluster: SimulatedCluster) -> None:
        store.create("batch", "jobs", job("orph", parallelism=2, completions=2,
                                          annotations={"sandbox.gangq.io/run-seconds": "inf"}), namespace=NS)
        await wait_for(lambda: phases(job_pods(store, "orph")) == ["Running", "Running"], what="running")
        store.delete("batch", "jobs", NS, "orph", propagation_policy="Orphan")
        # the pods keep running, without an owner and without the tracking finalizer
        await wait_for(lambda: all(not p["metadata"].get("finalizers") and not p["metadata"].get("ownerReferences")
                                   for p in job_pods(store, "orph")), what="finalizers released")
        pods = job_pods(store, "orph")
        assert phases(pods) == ["Running", "Running"]
        for p in pods:
            store.delete("", "pods", NS, p["metadata"]["name"])
        await wait_for(lambda: not job_pods(store, "orph"), what="pods gone")

    run(body)


def test_failed_pod_creation_is_reported_and_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module, "CREATE_RETRY_SECONDS", 0.1)

    async def body(store: Store, cluster: SimulatedCluster) -> None:
        real_create = store.create
        failures = [0]

        def flaky_create(group: str, plural: str, obj: dict, **kw: Any) -> dict:
            if plural == "pods" and failures[0] < 2:
                failures[0] += 1
                raise ApiError(500, "InternalError", "etcdserver: request timed out")
            return real_create(group, plural, obj, **kw)

        store.create = flaky_create  # type: ignore[method-assign]
        store.create("batch", "jobs", job("flaky", parallelism=2, completions=2,
                                          annotations={"sandbox.gangq.io/run-seconds": "inf"}), namespace=NS)
        await wait_for(lambda: any(e["reason"] == "FailedCreate" for e in store.list("", "events", NS)["items"]),
                       what="FailedCreate event")
        st = get_job(store, "flaky")["status"]
        assert "active" not in st and not job_pods(store, "flaky")  # nothing was created, nothing is claimed
        # the controller retries on its own (after CREATE_RETRY_SECONDS) and the pods get created
        await wait_for(lambda: phases(job_pods(store, "flaky")) == ["Running", "Running"], timeout=5, what="retry")
        assert failures[0] == 2

    run(body)
