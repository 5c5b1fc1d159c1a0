"""On both control planes: a Topology is accepted and its flavor's ClusterQueue admits; a
ClusterQueue naming an admission check is inactive with the check named, its gang waits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.operator.helpers import (
    Cluster,
    FakeJobSetRunner,
    admitted,
    apply,
    cluster_queue,
    condition,
    get,
    install,
    jobset,
    local_queue,
    start_operator,
    wait_for,
    workload_status,
)


def _status_condition(sb: Cluster, kind: str, name: str) -> dict[str, Any] | None:
    obj = get(sb, kind, name, None)
    status = (obj or {}).get("status") or {}
    return condition(status, "Active") if status.get("conditions") else None


def test_topology_flavor_admits_and_admission_checks_make_the_queue_inactive(
    cluster_factory: Callable[..., Cluster],
) -> None:
    sb = cluster_factory(nodes="2x{cpu:8,memory:32Gi}")
    install(sb)
    topo = {"apiVersion": "gangq.io/v1alpha1", "kind": "Topology", "metadata": {"name": "t47-default"},
            "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}}
    flavor = {"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "t47-tas"},
              "spec": {"topologyName": "t47-default"}}
    checked = cluster_queue("checked", {"cpu": 8}, flavor="t47-tas")
    checked["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": "t47-prov"}]}
    check = {"apiVersion": "gangq.io/v1alpha1", "kind": "AdmissionCheck", "metadata": {"name": "t47-prov"},
             "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"}}
    apply(sb, [topo, flavor, check, cluster_queue("open", {"cpu": 8}, flavor="t47-tas"), checked,
               local_queue("lq-open", "open"), local_queue("lq-checked", "checked")])
    op = start_operator(sb)
    try:
        with FakeJobSetRunner(sb, pods=False):
            apply(sb, [jobset("runs", "lq-open", requests={"cpu": 1}, run_seconds=30),
                       jobset("waits", "lq-checked", requests={"cpu": 1}, run_seconds=30)])
            wait_for(lambda: admitted(sb, "runs"), 15, "the gang of the Topology's flavor to be admitted")
            cond = wait_for(lambda: (c := _status_condition(sb, "ClusterQueue", "checked")) and c["status"] == "False"
                            and c, 10, "the checked ClusterQueue's Active condition")
            assert cond["reason"] == "AdmissionCheckInactive"
            assert "'t47-prov'" in cond["message"] and "ProvisioningRequest is not supported" in cond["message"]
            # Queue statuses are written in the background lane: read once this one is.
            wait_for(lambda: (_status_condition(sb, "ClusterQueue", "open") or {}).get("status") == "True", 10,
                     "the open ClusterQueue's Active condition")
            ac = wait_for(lambda: _status_condition(sb, "AdmissionCheck", "t47-prov"), 10, "the check's status")
            assert (ac["status"], ac["reason"]) == ("False", "NotSupported")
            status = wait_for(lambda: (s := workload_status(sb, "waits")) and s.get("reason") == "ClusterQueueInactive"
                              and s, 10, "the waiting gang's reason")
            assert "t47-prov" in status["message"]
            assert not admitted(sb, "waits")
    finally:
        op.stop()
