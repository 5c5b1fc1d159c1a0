"""Workloads created without ``suspend``, as a Kueue user writes them, on both control planes: no
way around the quota, with the webhook or without it.

Three labelled workloads of 2 pods × 4 GPUs (Jobs; JobSets run by the embedded JobSet controller;
PyTorchJobs run by the test's stand-in for the training operator), created unsuspended at once in a
16-GPU ClusterQueue on 32 GPUs of nodes:

- with the webhook as the quick start registers it (:func:`gangq.operator.install.quickstart_webhook`,
  what ``gangq run`` does by default): each is stored suspended, so never more than two gangs' pods
  (4) exist at once, and no ``StartedBeforeAdmission`` Event is posted;
- without it: their pods may start before gangq suspends them, and they are charged to the queue
  and the nodes until they are gone, so whenever a pod of an admitted workload exists, the GPUs of
  every live pod of the three (admitted, and started early and not yet gone) are within the
  quota; each workload whose pods started early is named by a ``StartedBeforeAdmission`` Event.

All three complete in both cases.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gangq.api import kubeflow
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.job import JOB
from gangq.integrations.jobset import JOBSET
from gangq.integrations.kubeflow import PYTORCHJOB
from gangq.operator.gangs import STARTED_BEFORE_ADMISSION
from gangq.operator.install import quickstart_webhook, remove_webhook_configurations
from gangq.operator.kube import Credentials, KubeClient
from gangq.sandbox.errors import ApiError
from tests.operator import test_kubeflow_e2e as kf
from tests.operator.helpers import (
    Cluster,
    apply,
    cluster_queue,
    flavor,
    install,
    is_real,
    jobset,
    local_queue,
    namespace,
    operator_config,
    start_operator,
    wait_for,
)
from tests.operator.test_webhook_e2e import api, wait_until_called
from tests.operator.test_webhook_e2e import job as webhook_job

GPU = "nvidia.com/gpu"
QUOTA_GPUS = 16
GPUS_PER_POD = 4
RUN_SECONDS = 4.0


def job(name: str) -> dict[str, Any]:
    return webhook_job(name, {"kueue.x-k8s.io/queue-name": "q"}, pods=2, gpus=GPUS_PER_POD, run_seconds=RUN_SECONDS)


def gang_jobset(name: str) -> dict[str, Any]:
    doc = jobset(name, None, parallelism=2, requests={"cpu": 1, GPU: GPUS_PER_POD}, run_seconds=RUN_SECONDS)
    del doc["spec"]["suspend"]
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    return doc


def gang_pytorchjob(name: str) -> dict[str, Any]:
    doc = kf.pytorchjob(name, "q", workers=1, gpus=GPUS_PER_POD, run_seconds=RUN_SECONDS)
    del doc["spec"]["runPolicy"]
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    return doc


KINDS: dict[str, tuple[Callable[[str], dict[str, Any]], WorkloadKind, str]] = {
    # kind: (manifest of a gang of 2 pods, its adapter, the pod label naming the workload)
    "Job": (job, JOB, "batch.kubernetes.io/job-name"),
    "JobSet": (gang_jobset, JOBSET, "jobset.sigs.k8s.io/jobset-name"),
    "PyTorchJob": (gang_pytorchjob, PYTORCHJOB, kubeflow.JOB_NAME_LABEL),
}


def live_gpus(pod: dict[str, Any]) -> int:
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    return sum(int(c["resources"].get("requests", {}).get(GPU, 0)) for c in pod["spec"]["containers"])


def enable_webhook(sb: Cluster, tmp_path: Path) -> Any:
    """What ``gangq run`` does in the quick start: the webhook on loopback, registered."""
    async def register() -> Any:
        client = KubeClient(Credentials.load(sb.kubeconfig))
        try:
            return await quickstart_webhook(client, operator_config(), tmp_path / "webhook")
        finally:
            await client.close()

    return asyncio.run(register())


def unregister(sb: Cluster) -> None:
    async def remove() -> None:
        client = KubeClient(Credentials.load(sb.kubeconfig))
        try:
            await remove_webhook_configurations(client)
        finally:
            await client.close()

    asyncio.run(remove())


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("webhook", [True, False], ids=["webhook", "no-webhook"])
def test_workloads_created_unsuspended_never_run_over_their_quota(
        cluster_factory: Callable[..., Cluster], tmp_path: Path, kind: str, webhook: bool) -> None:
    sb = cluster_factory(nodes="4x{cpu:16,memory:64Gi,nvidia.com/gpu:8}")
    install(sb)
    store = api(sb)
    manifest, adapter, pod_label = KINDS[kind]
    group, plural = adapter.group, adapter.plural

    def admitted(obj: dict[str, Any]) -> bool:
        return "gangq.io/admission" in (obj["metadata"].get("annotations") or {}) and not adapter.suspended(obj)

    def finished(obj: dict[str, Any]) -> bool:
        return adapter.terminal(obj) is not None
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 32, "memory": "128Gi", GPU: QUOTA_GPUS}),
               local_queue("q", "cq")])
    config = enable_webhook(sb, tmp_path) if webhook else operator_config()
    op = None
    training = kf.FakeTrainingOperator(sb) if adapter is PYTORCHJOB else contextlib.nullcontext()
    try:
        if adapter is PYTORCHJOB:
            kf._install_crd(sb)
        op = start_operator(sb, config, jobset_controller="embedded")
        if webhook:
            wait_until_called(store)
        training.__enter__()
        names = [f"train-{i}" for i in range(3)]
        for name in names:
            created = store.create(group, plural, manifest(name), namespace="default")
            assert adapter.suspended(created) is webhook, created["spec"]
        most_pods, most_gpus_with_admitted = 0, 0
        early: set[str] = set()  # workloads with a pod seen before their admission
        done: set[str] = set()
        deadline = time.monotonic() + 150
        while done != set(names):
            assert time.monotonic() < deadline, f"not all finished: {sorted(done)}"
            # pods first, then their owners: an admission seen after the pods' list can only make
            # a pod look early, never an early pod look admitted
            pods = [p for p in store.list("", "pods", "default")["items"]
                    if (p["metadata"].get("labels") or {}).get(pod_label) in names]
            owners = {o["metadata"]["name"]: o for o in store.list(group, plural, "default")["items"]
                      if o["metadata"]["name"] in names}
            live = [p for p in pods if live_gpus(p)]
            most_pods = max(most_pods, len(live))
            by_owner = {p["metadata"]["labels"][pod_label] for p in live}
            if any(admitted(owners[n]) for n in by_owner):
                most_gpus_with_admitted = max(most_gpus_with_admitted, sum(live_gpus(p) for p in live))
            early |= {n for n in by_owner if not admitted(owners[n]) and not finished(owners[n])}
            done |= {n for n, o in owners.items() if finished(o)}
            time.sleep(0.05)
        assert most_gpus_with_admitted <= QUOTA_GPUS, most_gpus_with_admitted
        assert most_gpus_with_admitted > 0  # the loop saw admitted gangs run
        if webhook:
            assert most_pods <= 2 * 2, most_pods
            assert not early, early

        def reported() -> set[str]:
            events = store.list("", "events", "default")["items"]
            return {e["involvedObject"]["name"] for e in events if e.get("reason") == "StartedBeforeAdmission"
                    and e["involvedObject"]["kind"] == kind}

        if webhook:
            assert not reported()
        else:
            wait_for(lambda: early <= reported(), 15, f"a StartedBeforeAdmission Event for each of {sorted(early)}")
    finally:
        training.__exit__(None, None, None)
        if op is not None:
            op.stop()
        if webhook:
            unregister(sb)
        if adapter is PYTORCHJOB:
            kf._remove_crd(sb)


def test_pods_an_operator_creates_after_the_suspension_ended_are_charged_and_reported(
        cluster_factory: Callable[..., Cluster]) -> None:
    """An operator that saw a PyTorchJob created unsuspended may create its pods after gangq has
    suspended it and found it stopped (no pod yet): those pods run outside every quota. gangq
    charges them (the Workload says StartedBeforeAdmission, as while a start is held), posts a
    StartedBeforeAdmission Event, and once they are gone queues the job again. The queue is full
    (another job admitted), so the late job stays queued throughout."""
    sb = cluster_factory(nodes="4x{cpu:16,memory:64Gi,nvidia.com/gpu:8}")
    install(sb)
    store = api(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 32, "memory": "128Gi", GPU: 8}),
               local_queue("q", "cq")])
    op = None
    try:
        kf._install_crd(sb)
        op = start_operator(sb, operator_config(), jobset_controller="embedded")
        holder = gang_pytorchjob("holder")
        holder["spec"]["runPolicy"] = {"suspend": True}
        store.create(PYTORCHJOB.group, PYTORCHJOB.plural, holder, namespace="default")  # no operator: no pods
        wait_for(lambda: not PYTORCHJOB.suspended(store.get(PYTORCHJOB.group, PYTORCHJOB.plural, "default",
                                                            "holder")), 30, "the holder admitted")
        created = store.create(PYTORCHJOB.group, PYTORCHJOB.plural, gang_pytorchjob("late"), namespace="default")

        def quota_reason() -> str:
            try:
                wl = store.get("gangq.io", "workloads", "default", "pytorchjob-late")
            except ApiError as err:  # not written yet
                if err.code == 404:
                    return ""
                raise
            return next((c.get("reason", "") for c in (wl.get("status") or {}).get("conditions") or []
                         if c["type"] == "QuotaReserved"), "")

        def late() -> dict[str, Any]:
            return dict(store.get(PYTORCHJOB.group, PYTORCHJOB.plural, "default", "late"))

        wait_for(lambda: PYTORCHJOB.suspended(late()), 30, "the late job suspended")
        wait_for(lambda: quota_reason() not in ("", STARTED_BEFORE_ADMISSION), 30, "the late job queued")
        assert not reported(store, "late")

        owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "late",
                 "uid": created["metadata"]["uid"], "controller": True}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "late-master-0", "namespace": "default", "ownerReferences": [owner],
                            "labels": {kubeflow.JOB_NAME_LABEL: "late", kubeflow.REPLICA_TYPE_LABEL: "master",
                                       kubeflow.OPERATOR_NAME_LABEL: "pytorchjob-controller",
                                       "training.kubeflow.org/replica-index": "0"}},
               "spec": {"terminationGracePeriodSeconds": 0, "restartPolicy": "Never", "containers": [
                   {"name": "pytorch", "image": "trainer",
                    "resources": {"requests": {"cpu": "1", GPU: str(GPUS_PER_POD)},
                                  "limits": {GPU: str(GPUS_PER_POD)}}}]}}
        store.create("", "pods", pod, namespace="default")
        wait_for(lambda: reported(store, "late"), 30, "a StartedBeforeAdmission Event for the late job")
        wait_for(lambda: quota_reason() == STARTED_BEFORE_ADMISSION, 30, "the late job's pods charged")
        store.delete("", "pods", "default", "late-master-0", grace_period_seconds=0)
        wait_for(lambda: quota_reason() not in ("", STARTED_BEFORE_ADMISSION), 60, "the late job queued again")
        assert PYTORCHJOB.suspended(late())
    finally:
        if op is not None:
            op.stop()
        kf._remove_crd(sb)


def reported(store: Any, name: str) -> bool:
    return any(e.get("reason") == STARTED_BEFORE_ADMISSION and e["involvedObject"]["name"] == name
               for e in store.list("", "events", "default")["items"])


def test_while_the_webhook_is_unreachable_a_labelled_workload_is_refused_and_nothing_else_is(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    """Registered as the quick start registers it, with no replica answering (gangq down): creating
    a labelled Job fails with the API server's message naming the webhook, instead of running
    outside its quota; an unlabelled Job, and a labelled one in gangq's own namespace, are created
    as usual (the webhook never holds up what is not gangq's, nor gangq itself)."""
    sb = cluster_factory(cluster=False)
    install(sb)
    store = api(sb)
    enable_webhook(sb, tmp_path)  # registered; no controller runs, so nothing serves it
    try:
        deadline = time.monotonic() + 30
        while True:  # the API server reads new configurations asynchronously
            try:
                created = store.create("batch", "jobs", job("refused"), namespace="default")
            except ApiError as err:
                refused = err
                break
            store.delete("batch", "jobs", "default", created["metadata"]["name"], propagation_policy="Background")
            assert time.monotonic() < deadline, "the API server never called the webhook"
            time.sleep(0.3)
        assert refused.code == 500, refused.message
        assert 'failed calling webhook "kueue-queue-name.mutate.gangq.io"' in refused.message, refused.message
        plain = job("plain")
        plain["metadata"]["labels"] = {}
        assert store.create("batch", "jobs", plain, namespace="default")["metadata"]["name"] == "plain"
        if not is_real(sb):
            namespace(sb, "gangq-system")
        own = job("own")
        own["metadata"]["namespace"] = "gangq-system"
        try:
            assert store.create("batch", "jobs", own, namespace="gangq-system")["metadata"]["name"] == "own"
        finally:
            store.delete("batch", "jobs", "gangq-system", "own", propagation_policy="Background")
    finally:
        unregister(sb)
