"""The gangq.io CRDs: served with short names, the gangq category and printer columns; their
schemas accept the example configurations and reject what a schema can reject."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangq.operator.install import CRD_DIR, crd_documents
from gangq.sandbox.runtime import Sandbox
from tests.operator.helpers import install

ROOT = Path(__file__).resolve().parents[2]


def kubectl(sb: Sandbox, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", *args], input=stdin, env=sb.env(), capture_output=True, text=True, timeout=60)


@pytest.fixture
def crd_sandbox(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    sb = sandbox_factory(cluster=False)
    install(sb)
    return sb


def test_crd_names_scope_and_status_subresources() -> None:
    docs = {d["spec"]["names"]["kind"]: d for d in crd_documents(sorted(CRD_DIR.glob("gangq.io_*.yaml")))}
    assert set(docs) == {"ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort", "WorkloadPriorityClass", "Workload",
                         "Topology", "AdmissionCheck"}
    short = {k: d["spec"]["names"]["shortNames"][0] for k, d in docs.items()}
    assert short == {"ResourceFlavor": "rf", "ClusterQueue": "cq", "LocalQueue": "lq", "Cohort": "cohort",
                     "WorkloadPriorityClass": "wpc", "Workload": "wl", "Topology": "topo", "AdmissionCheck": "ac"}
    for kind, doc in docs.items():
        assert doc["spec"]["names"]["categories"] == ["gangq"]
        version = doc["spec"]["versions"][0]
        assert version["name"] == "v1alpha1"
        has_status = "status" in version["schema"]["openAPIV3Schema"]["properties"]
        assert ("subresources" in version) == has_status, kind
    assert {d["spec"]["scope"] for k, d in docs.items() if k in ("LocalQueue", "Workload")} == {"Namespaced"}
    wl_cols = [c["name"] for c in docs["Workload"]["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert wl_cols[:5] == ["Queue", "State", "ClusterQueue", "Position", "Reason"] and "Age" in wl_cols
    cq_cols = [c["name"] for c in docs["ClusterQueue"]["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert cq_cols[:5] == ["Cohort", "Strategy", "Pending", "Admitted", "GPU"]


def test_example_configurations_apply_and_print(crd_sandbox: Sandbox) -> None:
    sb = crd_sandbox
    namespaces = set(re.findall(r"namespace: ([a-z0-9-]+)", (ROOT / "policies/example-gpu-cluster.yaml").read_text()))
    for ns in sorted(namespaces - {"default"}):
        assert kubectl(sb, "create", "namespace", ns).returncode == 0
    for path in ("policies/example-gpu-cluster.yaml", "policies/kueue-baseline.yaml", "policies/quickstart.yaml"):
        result = kubectl(sb, "apply", "-f", str(ROOT / path))
        assert result.returncode == 0, (path, result.stderr)
    result = kubectl(sb, "get", "cq")
    assert result.returncode == 0, result.stderr
    header = result.stdout.splitlines()[0].split()
    assert header[:6] == ["NAME", "COHORT", "STRATEGY", "PENDING", "ADMITTED", "GPU"]
    assert "cluster-queue" in result.stdout and "cq-4-5" in result.stdout
    result = kubectl(sb, "get", "gangq", "-A")
    assert result.returncode == 0, result.stderr
    for kind in ("resourceflavor.gangq.io/default-flavor", "clusterqueue.gangq.io/cluster-queue",
                 "localqueue.gangq.io/user-queue", "cohort.gangq.io/research"):
        assert kind in result.stdout, result.stdout
    for short in ("rf", "lq", "wpc", "wl", "cohort"):
        assert kubectl(sb, "get", short, "-A").returncode == 0


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"kind": "ClusterQueue", "metadata": {"name": "x"}, "spec": {"queueingStrategy": "Random"}},
         "spec.queueingStrategy"),
        ({"kind": "ClusterQueue", "metadata": {"name": "x"}, "spec": {"resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu"}]}]}]}},
         "nominalQuota"),
        ({"kind": "ClusterQueue", "metadata": {"name": "x"}, "spec": {"preemption": {
            "withinClusterQueue": "Always"}}}, "spec.preemption.withinClusterQueue"),
        ({"kind": "LocalQueue", "metadata": {"name": "x", "namespace": "default"}, "spec": {}}, "clusterQueue"),
        ({"kind": "WorkloadPriorityClass", "metadata": {"name": "x"}}, "value"),
        ({"kind": "ResourceFlavor", "metadata": {"name": "x"}, "spec": {"nodeTaints": [
            {"key": "k", "effect": "Sometimes"}]}}, "effect"),
        ({"kind": "Workload", "metadata": {"name": "x", "namespace": "default"},
          "spec": {"queueName": "q", "podSets": [{"name": "w", "count": -1}]}}, "count"),
    ],
)
def test_schema_rejects_invalid_objects(crd_sandbox: Sandbox, doc: dict[str, Any], field: str) -> None:
    body = {"apiVersion": "gangq.io/v1alpha1", **doc}
    result = kubectl(crd_sandbox, "create", "-f", "-", "-o", "json", stdin=yaml.safe_dump(body))
    assert result.returncode != 0
    assert field in result.stderr, result.stderr


def test_workload_status_is_a_subresource(crd_sandbox: Sandbox) -> None:
    sb = crd_sandbox
    body = {"apiVersion": "gangq.io/v1alpha1", "kind": "Workload", "metadata": {"name": "w", "namespace": "default"},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1}]}, "status": {"state": "Admitted"}}
    created = kubectl(sb, "create", "-f", "-", "-o", "json", stdin=json.dumps(body))
    assert created.returncode == 0, created.stderr
    assert "status" not in json.loads(created.stdout) or not json.loads(created.stdout)["status"]
