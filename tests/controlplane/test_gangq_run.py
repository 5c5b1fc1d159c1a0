"""`gangq run` against the real control plane, as the install's ServiceAccount: whole gangs are
admitted within quota, the embedded JobSet reconciler creates the child Jobs, the real Job
controller their pods, the real kube-scheduler binds them to kwok's nodes, and JobSets complete."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangq.controlplane.launcher import ControlPlane
from gangq.controlplane.pki import CONTROLLER_NAMESPACE
from gangq.integrations.registry import KINDS
from tests.controlplane.install import install
from tests.controlplane.kube import RUN_CONFIG as CONFIG
from tests.controlplane.kube import gangq_run, get, kubectl, namespace, wait_for

GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def controller(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    install(control_plane)
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{CONTROLLER_NAMESPACE}/leases/gangq-controller"
    with gangq_run(control_plane.kubeconfig("controller"), CONFIG, tmp_path_factory.mktemp("gangq-run"),
                   lambda: get(control_plane, lease), "the controller to take its lease") as log:
        yield log


def _jobset(name: str, queue: str, *, pods: int, gpus: int, run_seconds: float) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {"gangq.io/queue-name": queue}},
        "spec": {
            "suspend": True,  # as the examples say: gangq unsuspends it on admission
            "replicatedJobs": [{
                "name": "worker",
                "replicas": 1,
                "template": {"spec": {
                    "parallelism": pods, "completions": pods, "backoffLimit": 0,
                    "template": {
                        "metadata": {"annotations": {"sandbox.gangq.io/run-seconds": str(run_seconds)}},
                        "spec": {"restartPolicy": "Never", "containers": [{
                            "name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "1", GPU: str(gpus)},
                                          "limits": {GPU: str(gpus)}}}]},
                    },
                }},
            }],
        },
    }


def _queues(ns: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"},
         "spec": {"nodeLabels": {}}},
        {"apiVersion": "gangq.io/v1alpha1", "kind": "Cohort", "metadata": {"name": "gpu-cohort"}},
        {"apiVersion": "gangq.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": "gpu-cq"},
         "spec": {"namespaceSelector": {}, "cohortName": "gpu-cohort", "resourceGroups": [{
             "coveredResources": ["cpu", GPU],
             "flavors": [{"name": "default-flavor", "resources": [
                 {"name": "cpu", "nominalQuota": "64"}, {"name": GPU, "nominalQuota": "16"}]}]}]}},
        {"apiVersion": "gangq.io/v1alpha1", "kind": "LocalQueue", "metadata": {"name": "user-queue", "namespace": ns},
         "spec": {"clusterQueue": "gpu-cq"}},
    ]


def test_gangs_queue_within_quota_and_complete_on_the_real_control_plane(
    control_plane: ControlPlane, controller: Path
) -> None:
    ns = namespace(control_plane, "research")
    kubectl(control_plane, "apply", "--server-side", "-f", "-", input=_queues(ns))
    names = ["a", "b", "c"]
    kubectl(control_plane, "apply", "--server-side", "-n", ns, "-f", "-",
            input=[_jobset(n, "user-queue", pods=2, gpus=4, run_seconds=3) for n in names])
    pods_path = f"/api/v1/namespaces/{ns}/pods"
    most_gpus = 0
    stop = threading.Event()

    def watch_usage() -> None:  # GPUs held by pods bound to nodes, sampled
        nonlocal most_gpus
        while not stop.is_set():
            items = get(control_plane, pods_path)["items"]
            held = sum(int(c["resources"]["requests"].get(GPU, 0)) for p in items
                       if p["spec"].get("nodeName") and p["status"].get("phase") in ("Pending", "Running")
                       for c in p["spec"]["containers"])
            most_gpus = max(most_gpus, held)
            time.sleep(0.2)

    sampler = threading.Thread(target=watch_usage, daemon=True)
    sampler.start()
    try:
        def completed() -> bool:
            for n in names:
                js = get(control_plane, f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/{n}")
                conditions = (js or {}).get("status", {}).get("conditions", [])
                if not any(c["type"] == "Completed" and c["status"] == "True" for c in conditions):
                    return False
            return True

        wait_for(completed, 120, "every JobSet to complete")
    finally:
        stop.set()
        sampler.join(5)
    # 3 gangs of 8 GPUs in a 16-GPU queue on 32 GPUs of nodes: the quota binds, two at a time
    assert 0 < most_gpus <= 16, most_gpus
    nodes = {n["metadata"]["name"] for n in get(control_plane, "/api/v1/nodes")["items"]}
    bound = [p["spec"].get("nodeName") for p in get(control_plane, pods_path)["items"]]
    assert len(bound) == 6 and set(bound) <= nodes
    workloads = get(control_plane, f"/apis/gangq.io/v1alpha1/namespaces/{ns}/workloads")["items"]
    assert len(workloads) == 3
    for wl in workloads:
        assert wl["status"]["admission"]["clusterQueue"] == "gpu-cq"

    def cohort_ready() -> bool:
        cohort = get(control_plane, "/apis/gangq.io/v1alpha1/cohorts/gpu-cohort") or {}
        return any(c["type"] == "Active" and c["status"] == "True"
                   for c in cohort.get("status", {}).get("conditions", []))

    wait_for(cohort_ready, 30, "the Cohort's Active condition")


# Rights of the install's ClusterRoles that the end-to-end run above does not need, each with the
# code path that does: a grant leaves this list only when a test exercises it, and a grant that
# neither a test exercises nor this list explains fails the test (least privilege).
UNEXERCISED: dict[tuple[str, str, str], str] = {
    ("jobset.x-k8s.io", "jobsets", "get"): "a JobSet patch that meets a conflict reads the JobSet again",
    ("jobset.x-k8s.io", "jobsets", "delete"): "ttlSecondsAfterFinished deletes a finished JobSet",
    ("jobset.x-k8s.io", "jobsets/finalizers", "update"):
        "blockOwnerDeletion on child Jobs, under the OwnerReferencesPermissionEnforcement admission plugin",
    ("batch", "jobs", "patch"): "an evicted gang's child Jobs are suspended, a readmitted gang's resumed",
    ("batch", "jobs", "delete"): "a failed attempt's Jobs are deleted when the JobSet restarts",
    ("batch", "jobs/status", "patch"): "a suspended Job's startTime is cleared before its template changes",
    ("", "configmaps", "create"): "the MPI framework's hostfile ConfigMap",
    ("batch", "jobs", "get"): "a queued Job's admission patch that meets a conflict, or loses its answer, reads the "
                              "Job again (tests/operator/test_jobs_e2e.py queues Jobs)",
    # every kind of gangq/integrations/registry.py whose CRD may not be installed, and what it is
    # built from: read and written once one is queued (this run queues none of them;
    # tests/operator and tests/upstream do)
    **{(k.group, k.plural, verb): f"{k.plural} are read and written once one is queued"
       for k in KINDS if k.optional for verb in k.queue_verbs},
    **{(r.group, r.plural, verb): f"{r.plural} are read for the {k.kind}s built from them"
       for k in KINDS if k.optional for r in k.reference_resources for verb in ("get", "list", "watch")},
    # a pod group (none in this run; tests/operator/test_podgroup_e2e.py runs them)
    ("", "pods", "patch"): "a pod group's pods are admitted one by one: the flavor added, the gate removed",
    ("", "pods", "delete"): "an evicted pod group's pods are deleted",
    ("scheduling.x-k8s.io", "podgroups/status", "patch"): "a PodGroup's status, as coscheduling's",
    ("gangq.io", "workloads", "patch"): "spec.active: false, written when a gang exceeds podsReady.backoffLimit "
                                        "(tests/operator/test_active_e2e.py)",
    ("gangq.io", "workloads", "get"): "a Workload that leaves the spec.active=false watch is read back to learn "
                                      "whether it was reactivated or deleted (tests/operator/test_activation.py)",
    ("authentication.k8s.io", "tokenreviews", "create"):
        "the pending-workloads API checks a bearer token (tests/controlplane/test_visibility_auth.py)",
    ("authorization.k8s.io", "subjectaccessreviews", "create"):
        "the pending-workloads API checks the caller's access to a queue (tests/controlplane/test_visibility_auth.py)",
    **{("karpenter.sh", "nodepools", verb): "Karpenter's NodePools are listed and watched once their CRD is "
       "served (none in this run; tests/upstream/test_karpenter_gangq.py)" for verb in ("list", "watch")},
    ("gangq.io", "admissionchecks/status", "patch"):
        "an AdmissionCheck's status says gangq runs no admission-check controller (none in this run; "
        "tests/operator/test_topology_checks_e2e.py)",
}


def _exercised(events: list[dict[str, Any]], user: str) -> set[tuple[str, str, str]]:
    out = set()
    for event in events:
        ref = event.get("objectRef") or {}
        if event.get("user", {}).get("username") != user or not ref.get("resource"):
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out.add((ref.get("apiGroup", ""), resource, event["verb"]))
    return out


def test_the_controller_is_never_refused_and_needs_every_right_it_is_granted(
    control_plane: ControlPlane, controller: Path
) -> None:
    from gangq.controlplane.install import rbac_documents

    user = control_plane.pki.identities["controller"].name
    events = [e for e in control_plane.audit_events() if e.get("user", {}).get("username") == user]
    assert events, "no request of the controller in the audit log"
    refused = [f"{e['verb']} {e.get('requestURI')}" for e in events if e.get("responseStatus", {}).get("code") == 403]
    assert not refused, refused
    used = _exercised(events, user)
    verbs_seen = {(g, r, v) for g, r, v in used}
    granted = set()
    for doc in rbac_documents():
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        granted.add((group, resource, verb))
    unexercised = {g for g in granted if g not in verbs_seen}
    unexplained = sorted(unexercised - set(UNEXERCISED))
    print("rights granted and not exercised by this run:", sorted(unexercised))
    assert not unexplained, f"granted but neither exercised nor explained: {unexplained}"
