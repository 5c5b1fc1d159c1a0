"""gangq's CRDs on a real API server, validation on: what their schemas and CEL rules promise to
reject is rejected with an error that names the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gangq.controlplane.launcher import ControlPlane
from tests.controlplane.kube import kubectl, namespace

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane) -> ControlPlane:
    kubectl(control_plane, "apply", "--server-side", "-k", str(ROOT / "crds"))
    for name in ("clusterqueues.gangq.io", "cohorts.gangq.io", "localqueues.gangq.io", "workloads.gangq.io",
                 "jobsets.jobset.x-k8s.io"):
        kubectl(control_plane, "wait", "--for=condition=Established", f"crd/{name}", "--timeout=30s")
    return control_plane


def _cq(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["cpu"],
                            "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "8"}]}]}],
    }
    base.update(spec)
    return {"apiVersion": "gangq.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": base}


def _rejected(cp: ControlPlane, doc: dict[str, Any], namespace: str | None = None) -> str:
    args = ["apply", "--server-side", "-f", "-"] + (["-n", namespace] if namespace else [])
    out = kubectl(cp, *args, input=[doc], check=False)
    assert "Invalid" in out or "invalid" in out, out
    return out


def test_a_valid_cluster_queue_is_accepted_and_defaulted(crds: ControlPlane) -> None:
    kubectl(crds, "apply", "--server-side", "-f", "-", input=[_cq()])
    out = kubectl(crds, "get", "clusterqueue", "cq", "-o", "jsonpath={.spec.queueingStrategy}")
    assert out == "BestEffortFIFO"
    kubectl(crds, "delete", "clusterqueue", "cq")


def test_a_quantity_that_is_not_a_quantity_is_rejected_naming_the_field(crds: ControlPlane) -> None:
    doc = _cq()
    doc["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "eight"
    out = _rejected(crds, doc)
    assert "nominalQuota" in out


def test_an_unknown_queueing_strategy_is_rejected_naming_the_field(crds: ControlPlane) -> None:
    out = _rejected(crds, _cq(queueingStrategy="Random"))
    assert "queueingStrategy" in out


def test_the_preemption_cel_rule_rejects_reclaim_never_with_borrowing(crds: ControlPlane) -> None:
    doc = _cq(preemption={"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}})
    out = _rejected(crds, doc)
    assert "reclaimWithinCohort=Never" in out


def test_a_cohort_with_an_empty_parent_is_rejected(crds: ControlPlane) -> None:
    doc = {"apiVersion": "gangq.io/v1alpha1", "kind": "Cohort", "metadata": {"name": "c"}, "spec": {"parentName": ""}}
    out = _rejected(crds, doc)
    assert "parentName" in out


def test_a_local_queues_cluster_queue_is_immutable(crds: ControlPlane) -> None:
    ns = namespace(crds, "lq-immutable")
    lq = {"apiVersion": "gangq.io/v1alpha1", "kind": "LocalQueue", "metadata": {"name": "lq"},
          "spec": {"clusterQueue": "a"}}
    kubectl(crds, "apply", "--server-side", "-n", ns, "-f", "-", input=[lq])
    lq["spec"]["clusterQueue"] = "b"
    out = _rejected(crds, lq, ns)
    assert "clusterQueue" in out and "immutable" in out


def test_unknown_fields_are_rejected_under_strict_validation_and_pruned_without(crds: ControlPlane) -> None:
    doc = _cq()
    doc["metadata"]["name"] = "pruned"
    doc["spec"]["notAField"] = 1
    out = kubectl(crds, "apply", "--server-side", "-f", "-", input=[doc], check=False)
    assert ".spec.notAField" in out and "not declared in schema" in out, out
    out = kubectl(crds, "create", "-f", "-", input=[doc], check=False)  # kubectl validates strictly
    assert 'unknown field "spec.notAField"' in out, out
    kubectl(crds, "create", "--validate=false", "-f", "-", input=[doc])
    stored = kubectl(crds, "get", "clusterqueue", "pruned", "-o", "json")
    assert "notAField" not in stored and "BestEffortFIFO" in stored
