"""Every install serves the pending-workloads API behind the API server: the APIService, its
Service, the port and config of the controller, the Secret gangq keeps the certificate in, the
controller's rights for it, and the ClusterRoles users are granted (docs/observability.md,
"Visibility")."""

from __future__ import annotations

import re
from typing import Any

import yaml

from gangq.operator.config import parse_config
from gangq.operator.leaderpod import LEADER_LABEL, POD_NAME_ENV, POD_NAMESPACE_ENV
from tests.deploy.conftest import find

IANA_SVC_NAME = re.compile(r"^(?=.{1,15}$)[a-z0-9]+(-[a-z0-9]+)*$")


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def test_the_api_service_reaches_the_controllers_visibility_port(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = overlay
    (api,) = find(docs, "APIService", "v1alpha1.visibility.gangq.io")
    spec = api["spec"]
    assert (spec["group"], spec["version"]) == ("visibility.gangq.io", "v1alpha1")
    assert "caBundle" not in spec and spec.get("insecureSkipTLSVerify") is False  # gangq writes the caBundle
    (svc,) = find(docs, "Service", spec["service"]["name"])
    assert svc["metadata"]["namespace"] == spec["service"]["namespace"] == "gangq-system"
    (port,) = [p for p in svc["spec"]["ports"] if p["port"] == spec["service"]["port"]]
    (deploy,) = find(docs, "Deployment")
    # the controller's pods, the leader's alone: only it can answer (gangq/operator/leaderpod.py)
    selector = dict(svc["spec"]["selector"])
    assert selector.pop(LEADER_LABEL) == "true"
    assert selector.items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert (env[POD_NAME_ENV], env[POD_NAMESPACE_ENV]) == ("metadata.name", "metadata.namespace")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    config = parse_config(yaml.safe_load(find(docs, "ConfigMap", "gangq-config")[0]["data"]["config.yaml"]), "config")
    assert ports[port["targetPort"]] == config.visibility.port == 8443
    assert config.visibility.bind == "0.0.0.0"  # kube-apiserver reaches it on the pod's IP
    assert config.visibility.cert_dir is None  # gangq keeps the certificate, in the shipped Secret:
    (secret,) = find(docs, "Secret", config.visibility.secret_name)
    assert "data" not in secret and config.visibility.api_service_name == api["metadata"]["name"]
    assert config.visibility.service_name == svc["metadata"]["name"]
    # port names the API server accepts (IANA service names: at most 15 characters)
    for name in [*ports, *(p["name"] for s in find(docs, "Service") for p in s["spec"]["ports"])]:
        assert IANA_SVC_NAME.match(name), name


def test_the_controller_may_review_and_keep_the_certificate_and_nothing_more(
        overlay: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = overlay
    (controller,) = find(docs, "ClusterRole", "gangq-controller")
    grants = _grants(controller)
    assert {("authentication.k8s.io", "tokenreviews", "create"),
            ("authorization.k8s.io", "subjectaccessreviews", "create")} <= grants
    reviews = [r for r in controller["rules"] if set(r["resources"]) & {"tokenreviews", "subjectaccessreviews"}]
    assert all(r["verbs"] == ["create"] for r in reviews)
    (reader,) = [d for d in find(docs, "RoleBinding") if d["metadata"]["namespace"] == "kube-system"]
    assert reader["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    (cert,) = find(docs, "Role", "gangq-visibility-cert")
    assert cert["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["gangq-visibility-cert"],
                              "verbs": ["get", "update"]}]
    (api_service,) = find(docs, "ClusterRole", "gangq-visibility-apiservice")
    assert api_service["rules"] == [{"apiGroups": ["apiregistration.k8s.io"], "resources": ["apiservices"],
                                     "resourceNames": ["v1alpha1.visibility.gangq.io"], "verbs": ["get", "patch"]}]
    bound = {(b["kind"], b["roleRef"]["name"]) for b in find(docs, "RoleBinding") + find(docs, "ClusterRoleBinding")}
    assert {("RoleBinding", "gangq-visibility-cert"), ("ClusterRoleBinding", "gangq-visibility-apiservice")} <= bound


def test_users_are_granted_reader_roles_a_researchers_aggregated_to_view(
        overlay: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = overlay
    (researcher,) = find(docs, "ClusterRole", "gangq-pending-workloads-reader")
    assert _grants(researcher) == {("visibility.gangq.io", "localqueues/pendingworkloads", "get")}
    assert researcher["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    (admin,) = find(docs, "ClusterRole", "gangq-cluster-pending-workloads-reader")
    assert _grants(admin) == {("visibility.gangq.io", "clusterqueues/pendingworkloads", "get"),
                              ("visibility.gangq.io", "localqueues/pendingworkloads", "get")}
    # a ClusterQueue's list names every namespace's jobs: never part of a namespace's built-in roles
    assert not [k for k in admin["metadata"]["labels"] if k.startswith("rbac.authorization.k8s.io/aggregate-to-")]
    # no ClusterRoleBinding grants them: an admin binds them to people
    assert not [b for b in find(docs, "ClusterRoleBinding") + find(docs, "RoleBinding")
                if b["roleRef"]["name"] in ("gangq-pending-workloads-reader", "gangq-cluster-pending-workloads-reader")]
