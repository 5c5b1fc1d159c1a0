"""Prometheus (Debian's ``prometheus``, on loopback) scrapes ``gangq run`` on the real control plane
while gangs are admitted, borrow, are reclaimed, time out waiting for their pods and are refused
by an admission policy: then every query of every panel of the Grafana dashboard returns data.

A panel whose query names a metric gangq no longer exports, a label it no longer sets, or a series
that only exists once something happens that the controller never reports, comes back empty here,
as it would on an SRE's screen."""

from __future__ import annotations

import json
import math
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC
from gangq.controlplane.pki import CONTROLLER_NAMESPACE
from gangq.controlplane.processes import free_port
from gangq.observability.preview import DASHBOARD, substitute
from tests.clusters import RealCluster
from tests.conftest import required_tool
from tests.controlplane.kube import gangq_run, get, kubectl, wait_for

GPU = "nvidia.com/gpu"
REJECT_LABEL = "test.gangq.io/refuse-admission"


@pytest.fixture
def prometheus() -> str:
    return required_tool("prometheus")


def _config(metrics_port: int) -> dict[str, Any]:
    return {
        "metricsPort": metrics_port,
        "podsReady": {"enable": True, "timeoutSeconds": 4, "backoffBaseSeconds": 600},
        "fairSharing": {"enable": True},
        "status": {"workloadDelaySeconds": 0.1, "pendingDelaySeconds": 0.2, "pendingMinIntervalSeconds": 0.5,
                   "queueIntervalSeconds": 0.5},
        "leaderElection": {"namespace": CONTROLLER_NAMESPACE, "leaseDurationSeconds": 4, "renewIntervalSeconds": 1},
    }


def _queues() -> list[dict[str, Any]]:
    def cq(name: str, gpus: int, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": "gangq.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": {
            "namespaceSelector": {}, "cohortName": "research",
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["cpu", GPU], "flavors": [{"name": "gpu", "resources": [
                {"name": "cpu", "nominalQuota": "64"}, {"name": GPU, "nominalQuota": str(gpus)}]}]}],
            **spec}}

    idle = cq("idle", 8)
    idle["spec"]["resourceGroups"][0]["flavors"][0]["name"] = "no-such-flavor"  # inactive: its flavor is missing
    return [
        {"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "gpu"},
         "spec": {"nodeLabels": {}}},
        cq("team-a", 16), cq("team-b", 16), idle,
        *({"apiVersion": "gangq.io/v1alpha1", "kind": "LocalQueue", "metadata": {"name": q, "namespace": "default"},
           "spec": {"clusterQueue": q}} for q in ("team-a", "team-b", "idle")),
    ]


def _refuse_admission_policy() -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy that refuses to unsuspend a JobSet carrying REJECT_LABEL: the
    controller's admission patch fails, as it does under a cluster's own policies."""
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": "refuse-admission"},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["*"],
                                                          "operations": ["UPDATE"], "resources": ["jobsets"]}]},
                  "validations": [{"expression": f"!has(object.metadata.labels) || "
                                                 f"!('{REJECT_LABEL}' in object.metadata.labels) || "
                                                 "object.spec.suspend == true",
                                   "message": "this JobSet may not start"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": "refuse-admission"},
         "spec": {"policyName": "refuse-admission", "validationActions": ["Deny"]}},
    ]


def _jobset(name: str, queue: str, *, pods: int, gpus: int, run_seconds: float, start_delay: float = 0,
            labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"gangq.io/queue-name": queue, **(labels or {})}},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "worker", "replicas": 1, "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": {"metadata": {"annotations": {"sandbox.gangq.io/run-seconds": str(run_seconds),
                                                      "sandbox.gangq.io/start-delay-seconds": str(start_delay)}},
                         "spec": {"restartPolicy": "Never", "containers": [{
                             "name": "main", "image": "busybox",
                             "resources": {"requests": {"cpu": "1", GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}},
        }}}]},
    }


@pytest.fixture
def controller_port(real_cluster: RealCluster, tmp_path: Path) -> Iterator[int]:
    """``gangq run`` as the install's ServiceAccount; yields its metrics port."""
    real_cluster.reset(DEFAULT_NODE_SPEC)  # 4 nodes of 8 GPUs
    port = free_port()
    try:
        with gangq_run(real_cluster.controller_kubeconfig, _config(port), tmp_path, lambda: _ready(port),
                       "gangq run to serve /readyz"):
            yield port
    finally:
        kubectl(real_cluster.cp, "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                "refuse-admission", "--ignore-not-found")


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture
def prometheus_url(prometheus: str, controller_port: int, tmp_path: Path) -> Iterator[str]:
    """Prometheus scraping the controller every second."""
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "gangq", "static_configs": [{"targets": [f"127.0.0.1:{controller_port}"]}]}],
    }))
    port = free_port()
    proc = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.poll() is not None or _prom_ready(url), 60, "Prometheus to be ready")
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _prom_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _query(url: str, expr: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def _finite(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(series["value"][1])) for series in result)


def _phase(real: RealCluster, name: str) -> tuple[bool, str]:
    js = get(real.cp, f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/{name}") or {}
    conditions = {c["type"] for c in (js.get("status") or {}).get("conditions") or [] if c["status"] == "True"}
    return not js.get("spec", {}).get("suspend", True), ",".join(sorted(conditions))


def test_every_dashboard_panel_has_data_from_a_real_control_plane(
    real_cluster: RealCluster, prometheus_url: str
) -> None:
    cp = real_cluster.cp
    cp.apply([*_queues(), *_refuse_admission_policy()])
    # as on a real cluster, the queues exist (and are scraped, their series at 0) before work comes
    wait_for(lambda: len(_query(prometheus_url, "gangq_admission_wait_time_seconds_count == 0")) == 3, 30,
             "the new queues' series at 0")
    # team-b borrows team-a's idle GPUs; team-a then reclaims them (an eviction by preemption)
    cp.apply([_jobset("borrower", "team-b", pods=3, gpus=8, run_seconds=600)])
    wait_for(lambda: _phase(real_cluster, "borrower")[0], 60, "the borrowing gang to be admitted")
    cp.apply([
        _jobset("reclaimer", "team-a", pods=2, gpus=8, run_seconds=600),
        # pods that never become Ready: evicted after podsReady.timeoutSeconds
        _jobset("never-ready", "team-b", pods=1, gpus=1, run_seconds=600, start_delay=3600),
        # refused by the admission policy: an admission error
        _jobset("refused", "team-a", pods=1, gpus=1, run_seconds=1, labels={REJECT_LABEL: "true"}),
        # waits at the head of the idle ClusterQueue
        _jobset("waiting", "idle", pods=1, gpus=1, run_seconds=1),
    ])
    board = json.loads(DASHBOARD.read_text())
    queries = [(panel["title"], substitute(target["expr"]))
               for panel in board["panels"] if panel["type"] != "row" for target in panel.get("targets", [])]
    assert len(queries) >= 20

    def empty() -> list[str]:
        return [f"{title}: {expr}" for title, expr in queries if not _query(prometheus_url, expr)]

    try:
        wait_for(lambda: not empty(), 90, "every panel query to return data")
    except AssertionError:
        raise AssertionError(f"panel queries without data: {empty()}") from None
    # Each panel shows a number, not only NaN: at least one of its queries has a finite value.
    by_panel: dict[str, bool] = {}
    for title, expr in queries:
        by_panel[title] = by_panel.get(title, False) or _finite(_query(prometheus_url, expr))
    assert [t for t, ok in by_panel.items() if not ok] == []
    # what the scenario did, seen through the metrics
    def evictions() -> set[str]:
        return {s["metric"]["reason"] for s in _query(prometheus_url, "gangq_evicted_workloads_total > 0")}

    wait_for(lambda: {"Preempted", "PodsReadyTimeout"} <= evictions(), 30, "both evictions counted")
    assert _query(prometheus_url, 'gangq_admission_errors_total{reason="PatchFailed"} > 0')
    assert _query(prometheus_url, 'gangq_cluster_queue_status{cluster_queue="idle", status!="active"} > 0')
