"""RayClusters through the controller on both control planes, without KubeRay: queued by
``spec.suspend``, admitted with the flavor's node labels in the head's and every worker group's
pod template, held back while the quota is taken, evicted (the Workload deactivated) by suspending
them with their templates as the user wrote them, and refused with the field named when they ask
for in-tree autoscaling.

Ray's CRDs are schema-less ones of the test's own (no KubeRay runs here, so no pod appears and an
evicted RayCluster has stopped as soon as it is suspended). KubeRay itself runs beside gangq in
tests/upstream/test_ray_operator.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gangq.api.workload import ORIGINAL_SCHEDULING_ANNOTATION
from gangq.integrations import ray
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

GPU = "nvidia.com/gpu"
POOL = {"gpu.example.com/model": "a100"}


def template(gpus: int) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray",
                                     "resources": {"requests": {"cpu": "1", GPU: str(gpus)},
                                                   "limits": {GPU: str(gpus)}}}]}}


def raycluster(name: str, workers: int, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": "default", "labels": {"gangq.io/queue-name": "q"}},
            "spec": {"suspend": True, "headGroupSpec": {"rayStartParams": {}, "template": template(0)},
                     "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "minReplicas": 0,
                                           "maxReplicas": 8, "rayStartParams": {}, "template": template(4)}],
                     **spec}}


def workload_condition(sb: Cluster, name: str, ctype: str) -> dict[str, Any]:
    try:
        wl = sb.call(sb.store.get, "gangq.io", "workloads", "default", f"raycluster-{name}")
    except ApiError:
        return {}
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def test_rayclusters_are_queued_admitted_with_their_flavor_evicted_and_refused_with_autoscaling(
        cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(nodes="2x{cpu:16,memory:64Gi,nvidia.com/gpu:8}[gpu.example.com/model=a100]")
    install(sb)
    apply(sb, [flavor("a100", POOL), cluster_queue("cq", {"cpu": 32, "memory": "128Gi", GPU: 16}, flavor="a100"),
               local_queue("q", "cq")])
    op = start_operator(sb, operator_config())
    try:
        with crds_served(sb, [schemaless_crd(ray.GROUP, ray.VERSION, "RayCluster", "rayclusters"),
                              schemaless_crd(ray.GROUP, ray.VERSION, "RayJob", "rayjobs")]):
            def get(name: str) -> dict[str, Any]:
                return dict(sb.call(sb.store.get, ray.GROUP, "rayclusters", "default", name))

            sb.call(sb.store.create, ray.GROUP, "rayclusters", raycluster("first", 3),  # 12 of the queue's 16 GPUs
                    namespace="default")
            wait_for(lambda: get("first")["spec"]["suspend"] is False, 30, "the first RayCluster admitted")
            admitted = get("first")["spec"]
            assert admitted["headGroupSpec"]["template"]["spec"]["nodeSelector"] == POOL
            assert admitted["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] == POOL

            sb.call(sb.store.create, ray.GROUP, "rayclusters", raycluster("second", 2), namespace="default")
            wait_for(lambda: workload_condition(sb, "second", "QuotaReserved").get("status") == "False", 30,
                     "the second RayCluster waiting for quota")
            assert get("second")["spec"]["suspend"] is True

            elastic = raycluster("elastic", 1, enableInTreeAutoscaling=True)
            sb.call(sb.store.create, ray.GROUP, "rayclusters", elastic, namespace="default")
            refused = wait_for(lambda: "enableInTreeAutoscaling" in workload_condition(
                sb, "elastic", "QuotaReserved").get("message", "") and workload_condition(
                sb, "elastic", "QuotaReserved"), 30, "the autoscaling RayCluster refused")
            assert refused["reason"] == "InvalidSpec" and "spec.enableInTreeAutoscaling" in refused["message"]
            assert get("elastic")["spec"]["suspend"] is True

            # evicted: suspended with the templates as written, and the second one admitted
            sb.call(sb.store.patch, "gangq.io", "workloads", "default", "raycluster-first", {"spec": {"active": False}},
                    "application/merge-patch+json")
            wait_for(lambda: get("first")["spec"]["suspend"] is True, 30, "the first RayCluster suspended")
            wait_for(lambda: get("second")["spec"]["suspend"] is False, 30, "the second RayCluster admitted")
            restored = get("first")
            for template in (restored["spec"]["headGroupSpec"]["template"],
                             restored["spec"]["workerGroupSpecs"][0]["template"]):
                assert "nodeSelector" not in template["spec"], template["spec"]
            assert ORIGINAL_SCHEDULING_ANNOTATION not in (restored["metadata"].get("annotations") or {})
    finally:
        op.stop()
