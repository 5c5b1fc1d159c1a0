"""Kubeflow training jobs through the queue, end to end on both control planes.

The PyTorchJob CRD is installed by the test (a schema-less one of our own: the training operator is
not built here), after gangq has started — a kind whose CRD appears later is queued from then on —
and :class:`FakeTrainingOperator` stands in for the training operator: for an unsuspended
PyTorchJob it creates the pods of every replica type, labelled and owned as the training operator
does, deletes them when the job is suspended, and marks the job ``Succeeded`` when they all
succeeded. The sandbox's scheduler and kubelet (or kwok) run the pods.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable
from typing import Any

from gangq.api import kubeflow
from gangq.sandbox.errors import ApiError
from tests.operator.helpers import (
    RUN_SECONDS,
    Cluster,
    apply,
    cluster_queue,
    flavor,
    get,
    install,
    local_queue,
    operator_config,
    start_operator,
    wait_for,
)

GPU = "nvidia.com/gpu"
GROUP, PLURAL = "kubeflow.org", "pytorchjobs"

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP, "scope": "Namespaced",
        "names": {"kind": "PyTorchJob", "listKind": "PyTorchJobList", "plural": PLURAL, "singular": "pytorchjob"},
        "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


def pytorchjob(name: str, queue: str, *, workers: int = 3, gpus: int = 4, run_seconds: float = 3.0) -> dict[str, Any]:
    def replicas(n: int) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "OnFailure", "template": {
            "metadata": {"annotations": {RUN_SECONDS: str(run_seconds)}},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "pytorch", "image": "trainer",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)},
                              "limits": {GPU: str(gpus)}}}]}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "default", "labels": {"gangq.io/queue-name": queue}},
            "spec": {"runPolicy": {"suspend": True},
                     "pytorchReplicaSpecs": {"Master": replicas(1), "Worker": replicas(workers)}}}


class FakeTrainingOperator:
    """The training operator's part for the test (see the module docstring)."""

    def __init__(self, sb: Cluster) -> None:
        self.sb = sb
        self.running_at_once = 0  # most PyTorchJobs unsuspended and unfinished at the same time
        self.gang_pods: dict[str, int] = {}  # job -> most of its pods Running at the same time
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeTrainingOperator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # the CRD may not be served yet
                self.sb.call(self._tick)
            time.sleep(0.05)

    def _tick(self) -> None:
        store = self.sb.store
        jobs = store.list(GROUP, PLURAL, "default")["items"]
        pods = store.list("", "pods", "default", label_selector=kubeflow.JOB_NAME_LABEL)["items"]
        now = time.monotonic()
        live = [j for j in jobs if not kubeflow.suspended(j) and kubeflow.terminal(j) is None]
        self.running_at_once = max(self.running_at_once, len(live))
        for job in jobs:
            meta = job["metadata"]
            mine = [p for p in pods
                    if any(r.get("uid") == meta["uid"] for r in p["metadata"].get("ownerReferences") or [])]
            running = sum(1 for p in mine if p["status"].get("phase") == "Running"
                          and not p["metadata"].get("deletionTimestamp"))
            self.gang_pods[meta["name"]] = max(self.gang_pods.get(meta["name"], 0), running)
            if kubeflow.terminal(job) is not None:
                continue
            if kubeflow.suspended(job):
                for pod in mine:
                    with contextlib.suppress(ApiError):
                        store.delete("", "pods", "default", pod["metadata"]["name"], grace_period_seconds=0)
                continue
            self.started.setdefault(meta["name"], now)
            if not mine:
                # The job as it is now, as the training operator sees it through its watch, not as
                # this tick's list saw it: the list can be seconds old on a loaded machine, a view
                # far staler than a watch-fed operator's.
                with contextlib.suppress(ApiError):
                    current = store.get(GROUP, PLURAL, "default", meta["name"])
                    if current["metadata"]["uid"] == meta["uid"] and not kubeflow.suspended(current):
                        self._create_pods(current)
            elif all(p["status"].get("phase") == "Succeeded" for p in mine):
                self.finished[meta["name"]] = now
                store.patch(GROUP, PLURAL, "default", meta["name"], {"status": {"conditions": [
                    {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, "merge", subresource="status")

    def _create_pods(self, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": meta["name"], "uid": meta["uid"],
                 "controller": True}
        for rtype, spec in job["spec"]["pytorchReplicaSpecs"].items():
            for i in range(spec["replicas"]):
                tmpl = spec["template"]
                labels = {kubeflow.JOB_NAME_LABEL: meta["name"], kubeflow.REPLICA_TYPE_LABEL: rtype.lower(),
                          kubeflow.OPERATOR_NAME_LABEL: "pytorchjob-controller",
                          "training.kubeflow.org/replica-index": str(i)}
                pod = {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": f"{meta['name']}-{rtype.lower()}-{i}", "namespace": "default",
                                    "labels": labels, "ownerReferences": [owner],
                                    "annotations": dict(tmpl["metadata"]["annotations"])},
                       "spec": {**copy.deepcopy(tmpl["spec"]), "restartPolicy": "Never"}}
                self.sb.store.create("", "pods", pod, namespace="default")


def _install_crd(sb: Cluster) -> None:
    sb.call(sb.store.create, "apiextensions.k8s.io", "customresourcedefinitions", copy.deepcopy(CRD))

    def served() -> bool:
        try:
            sb.call(sb.store.list, GROUP, PLURAL, "default")
        except ApiError:
            return False
        return True

    wait_for(served, 30, "the PyTorchJob CRD to be served")


def _remove_crd(sb: Cluster) -> None:
    with contextlib.suppress(ApiError):
        sb.call(sb.store.delete, "apiextensions.k8s.io", "customresourcedefinitions", None, CRD["metadata"]["name"])

    def gone() -> bool:
        try:
            sb.call(sb.store.get, "apiextensions.k8s.io", "customresourcedefinitions", None, CRD["metadata"]["name"])
        except ApiError as err:
            return err.code == 404
        return False

    wait_for(gone, 60, "the PyTorchJob CRD to be deleted")


def test_a_pytorchjob_is_admitted_as_one_gang_of_master_and_workers(cluster_factory: Callable[..., Cluster]) -> None:
    """Two PyTorchJobs of master + 3 workers × 4 GPUs in a 16-GPU ClusterQueue on 32 GPUs of nodes:
    each is admitted whole (4 pods), one at a time; the second runs after the first finished."""
    sb = cluster_factory(nodes="4x{cpu:16,memory:64Gi,nvidia.com/gpu:8}")
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 32, "memory": "128Gi", GPU: 16}),
               local_queue("q", "cq")])
    op = start_operator(sb, operator_config())
    try:
        _install_crd(sb)  # after gangq started: it begins to watch the kind once the CRD is served
        with FakeTrainingOperator(sb) as trainer:
            for name in ("bert", "gpt"):
                sb.call(sb.store.create, GROUP, PLURAL, pytorchjob(name, "q"), namespace="default")
            wait_for(lambda: len(trainer.finished) == 2, 120, "both PyTorchJobs to finish")
            assert trainer.running_at_once == 1, "the quota holds one 16-GPU gang at a time"
            assert trainer.gang_pods == {"bert": 4, "gpt": 4}, trainer.gang_pods
            first, second = sorted(trainer.started, key=lambda n: trainer.started[n])
            assert trainer.started[second] >= trainer.finished[first] - 0.5, (trainer.started, trainer.finished)
        workload = get(sb, "Workload", f"pytorchjob-{second}")
        assert workload is not None
        assert [(ps["name"], ps["count"]) for ps in workload["spec"]["podSets"]] == [("master", 1), ("worker", 3)]
        owner = workload["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("PyTorchJob", second)
        job = sb.call(sb.store.get, GROUP, PLURAL, "default", second)
        admission = job["metadata"]["annotations"]["gangq.io/admission"]
        assert '"master"' in admission and '"worker"' in admission and '"cq"' in admission
        wait_for(lambda: any(c.get("type") == "Finished" and c.get("status") == "True" for c in (
            (get(sb, "Workload", f"pytorchjob-{second}") or {}).get("status") or {}).get("conditions") or []), 15,
            "the Workload to say Finished")
    finally:
        op.stop()
        _remove_crd(sb)
