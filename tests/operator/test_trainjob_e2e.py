"""A TrainJob's way through the controller, on the sandbox: its runtime watched beside it
(gangq/operator/kinds.py), its two admission patches (gangq/operator/writer.py) and the restore
once its evicted gang has stopped (gangq/operator/gangs.py).

The Trainer's CRDs are schema-less ones of the test's own, installed after gangq started (a kind
whose CRD appears later is watched from then on); no Trainer runs, so no JobSet or pod appears and
an evicted TrainJob's gang has stopped as soon as it is suspended. The Trainer itself runs beside
gangq in tests/upstream/test_trainer_operator.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from gangq.integrations.trainjob import OVERRIDES_ANNOTATION
from gangq.sandbox.errors import ApiError
from tests.clusters import Cluster
from tests.operator.helpers import (
    apply,
    cluster_queue,
    crds_served,
    flavor,
    install,
    local_queue,
    operator_config,
    schemaless_crd,
    start_operator,
    wait_for,
)

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
GPU = "nvidia.com/gpu"
USER_OVERRIDES = [{"targetJobs": [{"name": "node"}], "serviceAccountName": "trainer"}]


CRDS = [schemaless_crd(GROUP, VERSION, "TrainJob", "trainjobs"),
        schemaless_crd(GROUP, VERSION, "ClusterTrainingRuntime", "clustertrainingruntimes", "Cluster")]


def runtime(gpus: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterTrainingRuntime", "metadata": {"name": "torch"},
            "spec": {"mlPolicy": {"numNodes": 2}, "template": {"spec": {"replicatedJobs": [
                {"name": "node", "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [
                        {"name": "node", "image": "trainer",
                         "resources": {"requests": {"cpu": "1", GPU: str(gpus)},
                                       "limits": {GPU: str(gpus)}}}]}}}}}]}}}}


def trainjob(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "default", "labels": {"gangq.io/queue-name": "q"}},
            "spec": {"suspend": True, "runtimeRef": {"name": "torch"},
                     "podSpecOverrides": copy.deepcopy(USER_OVERRIDES)}}


def workload(sb: Cluster, name: str) -> dict[str, Any]:
    try:
        return dict(sb.call(sb.store.get, "gangq.io", "workloads", "default", f"trainjob-{name}"))
    except ApiError:
        return {}


def quota_reserved(sb: Cluster, name: str) -> dict[str, Any]:
    conditions = (workload(sb, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "QuotaReserved"), {})


def test_a_trainjob_waits_for_its_runtime_then_is_admitted_in_two_patches_and_restored_once_stopped(
        cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(nodes="2x{cpu:16,memory:64Gi,nvidia.com/gpu:8}[gpu.example.com/model=a100]")
    install(sb)
    apply(sb, [flavor("a100", {"gpu.example.com/model": "a100"}),
               cluster_queue("cq", {"cpu": 32, "memory": "128Gi", GPU: 16}, flavor="a100"),
               local_queue("q", "cq")])
    op = start_operator(sb, operator_config())
    try:
        with crds_served(sb, CRDS):
            def get() -> dict[str, Any]:
                return dict(sb.call(sb.store.get, GROUP, "trainjobs", "default", "llm"))

            sb.call(sb.store.create, GROUP, "trainjobs", trainjob("llm"), namespace="default")
            waiting = wait_for(lambda: "does not exist" in quota_reserved(sb, "llm").get("message", "")
                               and quota_reserved(sb, "llm"), 30, "the TrainJob to wait for its runtime")
            assert waiting["reason"] == "InvalidSpec" and "ClusterTrainingRuntime 'torch'" in waiting["message"]
            assert get()["spec"]["suspend"] is True

            sb.call(sb.store.create, GROUP, "clustertrainingruntimes", runtime(gpus=8))
            wait_for(lambda: get()["spec"]["suspend"] is False, 30, "the TrainJob to be admitted")
            obj = get()
            (mine,) = obj["spec"]["podSpecOverrides"]
            assert mine["nodeSelector"] == {"gpu.example.com/model": "a100"}
            assert mine["serviceAccountName"] == "trainer"
            annotations = obj["metadata"]["annotations"]
            assert json.loads(annotations[OVERRIDES_ANNOTATION]) == USER_OVERRIDES
            record = json.loads(annotations["gangq.io/admission"])
            assert record["clusterQueue"] == "cq"
            assert [(a["name"], a["count"]) for a in record["podSetAssignments"]] == [("node", 2)]

            # evicted (deactivated): suspended, then, its gang stopped, the user's overrides back
            sb.call(sb.store.patch, "gangq.io", "workloads", "default", "trainjob-llm", {"spec": {"active": False}},
                    "application/merge-patch+json")
            wait_for(lambda: get()["spec"]["suspend"] is True
                     and OVERRIDES_ANNOTATION not in (get()["metadata"].get("annotations") or {}), 30,
                     "the evicted TrainJob's overrides to be restored")
            assert get()["spec"]["podSpecOverrides"] == USER_OVERRIDES
            wait_for(lambda: (sb.call(sb.store.get, "gangq.io", "clusterqueues", None, "cq").get("status")
                              or {}).get("admittedWorkloads") == 0, 15, "the quota to be free")
    finally:
        op.stop()
