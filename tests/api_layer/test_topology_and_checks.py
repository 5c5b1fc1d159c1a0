"""Topology, a flavor's topologyName and AdmissionChecks: parsing, errors naming object and field,
resolution, and what ``gangq validate`` says gangq does with them."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from gangq.api import queues
from gangq.api.loader import load_documents, parse_queue_config
from gangq.cli import app
from gangq.core.errors import SpecError
from gangq.core.model import TopologySpec

BLOCK, RACK, HOST = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"


def _levels(*labels: str) -> dict[str, Any]:
    return {"levels": [{"nodeLabel": label} for label in labels]}


def test_topology_levels_top_first() -> None:
    topo = queues.topology("default", _levels(BLOCK, RACK, HOST))
    assert topo.name == "default" and topo.levels == [BLOCK, RACK, HOST]


@pytest.mark.parametrize(("spec", "field", "message"), [
    ({}, "spec.levels", "at least one level"),
    (_levels(), "spec.levels", "at least one level"),
    (_levels(*(f"example.com/l{i}" for i in range(17))), "spec.levels", "at most 16 levels, got 17"),
    (_levels(BLOCK, RACK, BLOCK), "spec.levels[2].nodeLabel", "already spec.levels[0]: levels must be unique"),
    (_levels(HOST, RACK), "spec.levels[0].nodeLabel", "kubernetes.io/hostname can only be the lowest"),
    (_levels("Bad Label"), "spec.levels[0].nodeLabel", "is not a valid label key"),
    (_levels("-x.com/rack"), "spec.levels[0].nodeLabel", "prefix must be a DNS subdomain"),
    ({"levels": [{"name": "rack"}]}, "spec.levels[0].nodeLabel", "Field required"),
])
def test_topology_errors_name_the_object_and_field(spec: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        queues.topology("t", spec)
    assert err.value.kind == "Topology" and err.value.name == "t" and err.value.field == field
    assert message in err.value.message


def test_sixteen_levels_are_allowed() -> None:
    assert len(queues.topology("t", _levels(*(f"example.com/l{i}" for i in range(16)))).levels) == 16


def test_flavor_resolves_its_topology_name() -> None:
    topo = TopologySpec("default", [BLOCK, RACK])
    flavor = queues.resource_flavor("tas", {"nodeLabels": {"pool": "gpu"}, "topologyName": "default"},
                                    {"default": topo})
    assert flavor.topology is topo and flavor.node_labels == {"pool": "gpu"}
    assert queues.resource_flavor("plain", {"nodeLabels": {"pool": "gpu"}}, {"default": topo}).topology is None


def test_flavor_naming_a_missing_topology_is_topology_not_found() -> None:
    with pytest.raises(queues.TopologyNotFound) as err:
        queues.resource_flavor("tas", {"topologyName": "missing"}, {})
    assert err.value.kind == "ResourceFlavor" and err.value.field == "spec.topologyName"
    assert err.value.topology_name == "missing" and "Topology 'missing' does not exist" in str(err.value)
    with pytest.raises(SpecError, match="must not be empty"):
        queues.resource_flavor("tas", {"topologyName": ""})


def test_admission_checks_of_a_cluster_queue() -> None:
    assert queues.admission_checks("cq", {}) == []
    v1beta1 = queues.admission_checks("cq", {"admissionChecks": ["prov", "other"]})
    assert [(r.name, r.field) for r in v1beta1] == [("prov", "spec.admissionChecks[0]"),
                                                      ("other", "spec.admissionChecks[1]")]
    strategy = queues.admission_checks("cq", {"admissionChecksStrategy": {"admissionChecks": [
        {"name": "prov", "onFlavors": ["gpu"]}]}})
    assert strategy == [queues.CheckRef("prov", ("gpu",), "spec.admissionChecksStrategy.admissionChecks[0].name")]
    with pytest.raises(SpecError, match=r"cannot be used along with spec\.admissionChecks"):
        queues.admission_checks("cq", {"admissionChecks": ["a"],
                                       "admissionChecksStrategy": {"admissionChecks": [{"name": "b"}]}})
    with pytest.raises(SpecError, match="listed twice"):
        queues.admission_checks("cq", {"admissionChecks": ["a", "a"]})
    # the ClusterQueue itself still parses with them (they do not change its quota)
    assert queues.cluster_queue("cq", {"admissionChecksStrategy": {"admissionChecks": [{"name": "b"}]}}).name == "cq"


def test_admission_check_object() -> None:
    check = queues.admission_check("prov", {"controllerName": queues.PROVISIONING_REQUEST_CONTROLLER, "parameters": {
        "apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "cfg"}})
    assert check.parameters == ("kueue.x-k8s.io", "ProvisioningRequestConfig", "cfg")
    with pytest.raises(SpecError) as err:
        queues.admission_check("bad", {})
    assert err.value.field == "spec.controllerName"


def test_a_cluster_queue_with_checks_is_inactive_with_the_checks_named() -> None:
    refs = queues.admission_checks("cq", {"admissionChecks": ["prov", "custom"]})
    checks = {"prov": queues.AdmissionCheck("prov", queues.PROVISIONING_REQUEST_CONTROLLER),
              "custom": queues.AdmissionCheck("custom", "example.com/approver")}
    assert queues.admission_check_problem("cq", [], checks) is None
    reason, message = queues.admission_check_problem("cq", refs, checks) or ("", "")
    assert reason == "AdmissionCheckInactive"
    assert "ProvisioningRequest is not supported by gangq" in message and "'prov'" in message
    assert "'custom'" in message and "example.com/approver" in message
    assert "gangq does not run admission-check controllers" in message
    reason, message = queues.admission_check_problem("cq", refs, {}) or ("", "")
    assert reason == "AdmissionCheckNotFound" and "references missing AdmissionCheck(s): prov, custom" in message


CONFIG = f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: tas}}
spec: {{nodeLabels: {{pool: gpu}}, topologyName: default}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {{name: default}}
spec:
  levels: [{{nodeLabel: {BLOCK}}}, {{nodeLabel: {RACK}}}, {{nodeLabel: {HOST}}}]
---
apiVersion: gangq.io/v1alpha1
kind: ResourceFlavor
metadata: {{name: lost}}
spec: {{topologyName: nowhere}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {{name: prov}}
spec: {{controllerName: kueue.x-k8s.io/provisioning-request}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: checked}}
spec:
  namespaceSelector: {{}}
  admissionChecksStrategy: {{admissionChecks: [{{name: prov}}]}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{{name: tas, resources: [{{name: nvidia.com/gpu, nominalQuota: 16}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: lost-queue}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{{name: lost, resources: [{{name: nvidia.com/gpu, nominalQuota: 16}}]}}]
"""


def test_loader_resolves_topologies_defined_after_their_flavor() -> None:
    config = parse_queue_config(load_documents(CONFIG))
    tas = config.flavors["tas"]
    assert tas.topology is not None and tas.topology.levels == [BLOCK, RACK, HOST]
    assert "lost" not in config.flavors and config.unresolved_flavors == {"lost": "nowhere"}
    assert config.inactive("checked") is not None and config.inactive("lost-queue") is None
    problems = config.problems()
    assert any("ResourceFlavor 'lost' names Topology 'nowhere'" in p and "TopologyNotFound" in p for p in problems)
    assert any(p.startswith("ClusterQueue 'checked' is inactive") for p in problems)


def test_loader_errors_name_topology_and_check_fields() -> None:
    bad = CONFIG.replace(f"{{nodeLabel: {HOST}}}]", f"{{nodeLabel: {HOST}}}, {{nodeLabel: {HOST}}}]")
    with pytest.raises(SpecError, match=r"Topology .default.: spec.levels\[2\].nodeLabel: kubernetes.io/hostname"):
        parse_queue_config(load_documents(bad))
    with pytest.raises(SpecError, match=r"AdmissionCheck 'prov': spec.controllerName"):
        parse_queue_config(load_documents(CONFIG.replace("{controllerName: kueue.x-k8s.io/provisioning-request}",
                                                         "{}")))


def test_validate_prints_what_gangq_does_with_topologies_and_checks(tmp_path: Any) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    result = CliRunner().invoke(app, ["validate", str(path)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"Topology default: levels {BLOCK} > {RACK} > {HOST}" in out
    assert "ResourceFlavor tas: spec.topologyName default" in out and "see docs/engine.md, Topology" in out
    assert "ResourceFlavor lost: spec.topologyName nowhere: no such Topology" in out
    assert "AdmissionCheck prov: controllerName kueue.x-k8s.io/provisioning-request: accepted, not run" in out
    assert "ClusterQueue checked: inactive, reason AdmissionCheckInactive" in out
    assert "ProvisioningRequest is not supported by gangq" in out
    assert "1 topologies, 1 admission checks" in out
