"""The admission webhook's install component (deploy/components/webhook, in every overlay but no-webhook):
it passes every check of the install (test_install.py) and agrees with the code — the kinds the
registered kinds, the server's routes, the names of the Service, the Secret and the configurations."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import tests.deploy.test_install as install_checks
from gangq.api.workload import KUEUE_QUEUE_LABEL, QUEUE_LABEL
from gangq.integrations.podgroup import POD_GROUP_LABEL
from gangq.integrations.registry import KINDS
from gangq.operator.certs import DirCertificates
from gangq.operator.config import WebhookConfig, parse_config
from tests.deploy.conftest import DEPLOY, find, kustomize

WEBHOOK = WebhookConfig()
CONFIGURATIONS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _with_components(tmp: Path, overlay: str, components: list[str]) -> list[dict[str, Any]]:
    """``overlay`` with ``components``, as an admin's own kustomization would take them."""
    rel = lambda p: os.path.relpath(p, tmp)  # noqa: E731 (kustomize takes no absolute paths)
    lines = ["resources:", f"- {rel(DEPLOY / 'overlays' / overlay)}", "components:"]
    lines += [f"- {rel(DEPLOY / 'components' / c)}" for c in components]
    (tmp / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    return kustomize(tmp)


@pytest.fixture(scope="module", params=["plain", "external-jobset", "external-jobset+unlabelled"])
def webhook_install(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                    ) -> tuple[str, str, list[dict[str, Any]]]:
    """(name, the overlay it is built on, the rendered documents)."""
    if "+" not in request.param:
        return request.param, request.param, kustomize(DEPLOY / "overlays" / request.param)
    docs = _with_components(tmp_path_factory.mktemp("kustomization"), "external-jobset", ["webhook-unlabelled"])
    return request.param, "external-jobset", docs


def test_the_webhook_install_passes_every_check_of_the_install(webhook_install: tuple[str, str, Any]) -> None:
    _, base, docs = webhook_install
    for check in (install_checks.test_every_manifest_validates_against_the_kubernetes_schemas,
                  install_checks.test_namespaced_objects_live_in_gangq_system,
                  install_checks.test_rbac_has_no_wildcards_and_reads_only_what_gangq_reads,
                  install_checks.test_lease_rights_are_limited_to_the_configured_lease,
                  install_checks.test_probes_metrics_service_and_servicemonitor_agree,
                  install_checks.test_crds_are_installed_from_crds_folder):
        check((base, docs))


def test_every_replica_serves_the_webhook_behind_its_service(webhook_install: tuple[str, str, Any]) -> None:
    _, _, docs = webhook_install
    (deploy,) = find(docs, "Deployment")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert "--webhook-port=9443" in args and "--webhook-bind=0.0.0.0" in args  # the pod's IP, not loopback
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["https-webhook"] == 9443
    (svc,) = find(docs, "Service", WEBHOOK.service_name)
    assert svc["metadata"]["namespace"] == WEBHOOK.namespace
    assert svc["spec"]["selector"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["ports"] == [{"name": "https-webhook", "port": 443, "targetPort": "https-webhook",
                                     "protocol": "TCP"}]


def _routes() -> set[str]:
    from gangq.operator.webhook import WebhookServer

    server = WebhookServer(parse_config({}), None, DirCertificates("/nonexistent"))  # type: ignore[arg-type]
    return {r.resource.canonical for r in server.app().router.routes() if r.resource}


def test_the_configurations_send_every_queued_kind_by_queue_label_and_fail_as_documented(
        webhook_install: tuple[str, str, Any]) -> None:
    name, _, docs = webhook_install
    routes = _routes()
    kinds = {(k.group, k.version, k.plural) for k in KINDS}
    pods = {("", "v1", "pods")} if any(k.gates_pods for k in KINDS) else set()
    for kind in CONFIGURATIONS:
        (config,) = find(docs, kind, WEBHOOK.configuration_name)
        mutating = kind.startswith("Mutating")
        first_key = {h["name"]: h["objectSelector"]["matchExpressions"][0] for h in config["webhooks"]
                     if "objectSelector" in h}
        labelled = [h for h in config["webhooks"] if first_key.get(h["name"], {}).get("operator") == "Exists"
                    and first_key[h["name"]]["key"] in (QUEUE_LABEL, KUEUE_QUEUE_LABEL)]
        # one entry per queue label: a workload without one never waits for gangq
        assert [h["objectSelector"]["matchExpressions"] for h in labelled] == [
            [{"key": QUEUE_LABEL, "operator": "Exists"}], [{"key": KUEUE_QUEUE_LABEL, "operator": "Exists"}]]
        # and, when a kind gates its pods, one for the pods of a PodGroup without a queue label of
        # their own (the PodGroup has it): only pods, only at creation
        pod_group = [h for h in config["webhooks"] if first_key.get(h["name"], {}).get("key") == POD_GROUP_LABEL]
        assert len(pod_group) == (1 if mutating and pods else 0), [h["name"] for h in pod_group]
        for hook in config["webhooks"]:
            assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
            assert hook["timeoutSeconds"] <= 10
            assert "caBundle" not in hook["clientConfig"]  # gangq writes it; a re-apply must not reset it
            service = hook["clientConfig"]["service"]
            assert (service["name"], service["namespace"], service["port"]) == (
                WEBHOOK.service_name, WEBHOOK.namespace, 443)
            assert service["path"] == ("/mutate" if mutating else "/validate") and service["path"] in routes
            # a labelled workload is created suspended or not at all, and what the validating
            # entries refuse is never let through while gangq is down (docs/operator.md)
            assert hook["failurePolicy"] == "Fail"
            excluded = {v for e in hook["namespaceSelector"]["matchExpressions"] if e["operator"] == "NotIn"
                        for v in e["values"]}
            assert {"kube-system", "gangq-system"} <= excluded
            sent = {(g, v, r) for rule in hook["rules"] for g in rule["apiGroups"] for v in rule["apiVersions"]
                    for r in rule["resources"]}
            wanted = pods if hook in pod_group else kinds | (pods if mutating and hook in labelled else set())
            assert sent == wanted, sent ^ wanted
            operations = {op for rule in hook["rules"] for op in rule["operations"]}
            assert operations == ({"CREATE"} if mutating else {"CREATE", "UPDATE"})
        unlabelled = [h for h in config["webhooks"] if h not in labelled and h not in pod_group]
        if "unlabelled" in name:
            (hook,) = unlabelled
            default = parse_config({}).managed_jobs_namespace_selector.model_dump(by_alias=True, exclude_defaults=True)
            assert hook["namespaceSelector"] == default
            assert {e["operator"] for e in hook["objectSelector"]["matchExpressions"]} == {"DoesNotExist"}
        else:
            assert not unlabelled


def test_the_certificate_rights_name_the_secret_and_the_configurations(
        webhook_install: tuple[str, str, Any]) -> None:
    name, _, docs = webhook_install
    (secret,) = find(docs, "Secret", WEBHOOK.secret_name)
    assert secret["metadata"]["namespace"] == WEBHOOK.namespace and "data" not in secret
    (role,) = find(docs, "Role", "gangq-webhook-cert")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [WEBHOOK.secret_name],
                              "verbs": ["get", "update"]}]
    (cluster_role,) = find(docs, "ClusterRole", "gangq-webhook")
    assert cluster_role["rules"] == [{
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
        "resourceNames": [WEBHOOK.configuration_name], "verbs": ["get", "patch"]}]
    for binding in find(docs, "RoleBinding", "gangq-webhook-cert") + find(docs, "ClusterRoleBinding", "gangq-webhook"):
        assert binding["roleRef"]["name"] in ("gangq-webhook-cert", "gangq-webhook")
    namespaces = find(docs, "ClusterRole", "gangq-webhook-namespaces")
    assert bool(namespaces) == ("unlabelled" in name)  # a standby reads a namespace's labels only for those
