"""The Kustomize install: builds offline, validates against the Kubernetes schemas, and keeps the
promises of docs/observability.md (least-privilege RBAC, hardened pods, two replicas, probes)."""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gangq.integrations.registry import KINDS
from gangq.observability.http import create_app
from gangq.operator.install import crd_documents
from tests.deploy.conftest import DEPLOY, ROOT, find

K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())

# kubernetes-validate ships only the built-in kinds; the Prometheus Operator kinds get a minimal
# schema of the fields gangq uses (checked with jsonschema; unknown fields are errors).
_STR = {"type": "string"}
_LABELS = {"type": "object", "additionalProperties": _STR}
_META = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": _STR, "namespace": _STR, "labels": _LABELS, "annotations": _LABELS},
    "additionalProperties": False,
}
MONITORING_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "additionalProperties": False,
                "properties": {
                    "selector": {
                        "type": "object",
                        "properties": {"matchLabels": _LABELS},
                        "additionalProperties": False,
                    },
                    "namespaceSelector": {
                        "type": "object",
                        "properties": {"matchNames": {"type": "array", "items": _STR}, "any": {"type": "boolean"}},
                        "additionalProperties": False,
                    },
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["port"],
                            "additionalProperties": False,
                            "properties": {
                                "port": _STR,
                                "path": _STR,
                                "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            },
                        },
                    },
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["groups"],
                "additionalProperties": False,
                "properties": {
                    "groups": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "additionalProperties": False,
                            "properties": {
                                "name": _STR,
                                "rules": {
                                    "type": "array",
                                    "minItems": 1,
                                    "items": {
                                        "type": "object",
                                        "required": ["alert", "expr", "labels", "annotations"],
                                        "additionalProperties": False,
                                        "properties": {
                                            "alert": {"type": "string", "pattern": "^[A-Z][A-Za-z0-9]+$"},
                                            "expr": _STR,
                                            "for": {"type": "string", "pattern": "^[0-9]+(s|m|h)$"},
                                            "labels": {
                                                "type": "object",
                                                "required": ["severity"],
                                                "properties": {"severity": {"enum": ["critical", "warning", "info"]}},
                                            },
                                            "annotations": {
                                                "type": "object",
                                                "required": ["summary", "description"],
                                                "additionalProperties": _STR,
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    },
}

READ_ONLY = {
    "nodes",
    "namespaces",
    "priorityclasses",
    "resourceflavors",
    "cohorts",
    "topologies",
    "admissionchecks",
    "localqueues",
    "workloadpriorityclasses",
}


# The overlays where gangq runs the JobSet controller (components/embedded-jobset): the JobSet CRD
# and the controller's rights on Jobs, Services and JobSet status.
EMBEDDED_JOBSET = ("plain", "no-webhook")


def rules_of(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for kind in ("ClusterRole", "Role") for d in find(docs, kind) for r in d["rules"]]


def test_every_manifest_validates_against_the_kubernetes_schemas(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = overlay
    assert docs
    checked = 0
    for doc in docs:
        if doc["kind"] in MONITORING_SCHEMAS:
            jsonschema.validate(doc, MONITORING_SCHEMAS[doc["kind"]])
        else:
            for version in K8S_VERSIONS:
                kubernetes_validate.validate(doc, version, strict=True)
        checked += 1
    assert checked == len(docs)


def test_validation_catches_a_bad_field() -> None:
    """The schema check is real: an unknown container field fails it."""
    doc = yaml.safe_load((DEPLOY / "base" / "deployment.yaml").read_text())
    doc["spec"]["template"]["spec"]["containers"][0]["runAsRoot"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSIONS[0], strict=True)
    rule = yaml.safe_load((DEPLOY / "prometheus" / "gangq-rules.yaml").read_text())
    rule["spec"]["groups"][0]["rules"][0]["labels"]["severity"] = "urgent"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rule, MONITORING_SCHEMAS["PrometheusRule"])


def test_namespaced_objects_live_in_gangq_system(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = overlay
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                      "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "APIService"}
    # The one object elsewhere: the binding to the built-in Role that reads the API server's
    # front-proxy settings (kube-system/extension-apiserver-authentication), by name.
    (reader,) = [d for d in docs if d["metadata"].get("namespace") == "kube-system"]
    assert reader["kind"] == "RoleBinding" and reader["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "extension-apiserver-authentication-reader"}
    for doc in docs:
        if doc["kind"] not in cluster_scoped and doc is not reader:
            assert doc["metadata"].get("namespace") == "gangq-system", (doc["kind"], doc["metadata"]["name"])
    for binding in find(docs, "ClusterRoleBinding") + find(docs, "RoleBinding"):
        for subject in binding["subjects"]:
            assert subject == {"kind": "ServiceAccount", "name": "gangq-controller", "namespace": "gangq-system"}


def test_rbac_has_no_wildcards_and_reads_only_what_gangq_reads(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    name, docs = overlay
    rules = rules_of(docs)
    assert rules
    cert_roles = find(docs, "Role", "gangq-webhook-cert") + find(docs, "Role", "gangq-visibility-cert")
    webhook_secret_rules = [r for d in cert_roles for r in d["rules"]]
    assert all(d["metadata"]["namespace"] == "gangq-system" for d in cert_roles)
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(field, []), (field, rule)
        assert "escalate" not in rule["verbs"] and "bind" not in rule["verbs"] and "impersonate" not in rule["verbs"]
        assert "deletecollection" not in rule["verbs"], rule
        if "secrets" in rule["resources"]:
            # Only the serving certificates of the admission webhook (deploy/components/webhook)
            # and of the pending-workloads API (deploy/base/visibility.yaml): one Secret each, by
            # name, read and updated through a namespaced Role (the install ships them empty, so
            # not even create is granted). Any other Secret right would let the controller read
            # every credential of a namespace (or of the cluster).
            assert rule in webhook_secret_rules, rule
            assert rule["resources"] == ["secrets"], rule
            assert rule["resourceNames"] in (["gangq-webhook-cert"], ["gangq-visibility-cert"]), rule
            assert set(rule["verbs"]) <= {"get", "update", "patch"}, rule
        leader_pod = [r for d in find(docs, "Role", "gangq-leader-pod") for r in d["rules"]]
        for resource in rule["resources"]:
            if resource == "pods" and rule in leader_pod:
                # the leader's label on its own pod (gangq/operator/leaderpod.py), in gangq's
                # namespace only, and nothing but patch
                assert rule == {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}, rule
                assert all(d["metadata"]["namespace"] == "gangq-system" for d in find(docs, "Role", "gangq-leader-pod"))
            elif resource in READ_ONLY:
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, (resource, rule["verbs"])
            if resource == "pods" and rule not in leader_pod:
                # read; a pod group's member pods are admitted one by one (the flavor's node labels
                # added, the scheduling gate removed) and an evicted group's pods deleted
                # (gangq/integrations/podgroup.py); never created
                assert set(rule["verbs"]) <= {"list", "watch", "patch", "delete"}, (resource, rule["verbs"])
            if resource == "clusterqueues":  # read, and patched for the resource-in-use finalizer only
                assert set(rule["verbs"]) <= {"get", "list", "watch", "patch"}, (resource, rule["verbs"])
    granted = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    needed = {
        ("", "pods", "watch"),
        ("", "nodes", "list"),
        ("scheduling.k8s.io", "priorityclasses", "watch"),
        ("gangq.io", "workloads", "create"),
        ("gangq.io", "workloads", "watch"),  # spec.active, flipped by an admin
        ("gangq.io", "workloads", "patch"),  # spec.active: false over the pods-ready backoff limit
        ("gangq.io", "workloads/status", "patch"),
        ("gangq.io", "clusterqueues/status", "patch"),
        ("gangq.io", "cohorts/status", "patch"),
        ("gangq.io", "admissionchecks/status", "patch"),  # reported: gangq runs no admission-check controller
        ("gangq.io", "topologies", "watch"),
        ("gangq.io", "admissionchecks", "watch"),
        ("gangq.io", "clusterqueues", "patch"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "get"),  # a restart: is a 404 kind installed?
        ("", "events", "create"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
    }
    assert needed <= granted, needed - granted
    # every registered kind (gangq/integrations/registry.py): watched, suspended, admitted and
    # evicted; the objects it creates that the controller reads
    kinds = {(k.group, k.plural, verb) for k in KINDS for verb in k.queue_verbs}
    kinds |= {(r.group, r.plural, verb) for k in KINDS for r in (*k.child_resources, *k.reference_resources)
              for verb in ("get", "list", "watch")}
    assert kinds <= granted, f"deploy/base/rbac.yaml does not grant: {sorted(kinds - granted)}"
    jobset_controller = {
        ("batch", "jobs", "create"),
        ("", "services", "create"),
        ("jobset.x-k8s.io", "jobsets/status", "patch"),
    }
    if name in EMBEDDED_JOBSET:
        assert jobset_controller <= granted
    else:
        assert not granted & {("batch", "jobs", "create"), ("batch", "jobs", "delete")}
        assert not {(g, r) for g, r, _ in granted} & {("", "services"), ("jobset.x-k8s.io", "jobsets/status")}


def test_lease_rights_are_limited_to_the_configured_lease(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = overlay
    config = yaml.safe_load(find(docs, "ConfigMap", "gangq-config")[0]["data"]["config.yaml"])
    lease = config["leaderElection"]["leaseName"]
    assert config["leaderElection"]["namespace"] == "gangq-system"
    role = find(docs, "Role", "gangq-leader-election")[0]
    for rule in role["rules"]:
        if rule["verbs"] != ["create"]:
            assert rule["resourceNames"] == [lease]
    assert not [r for d in find(docs, "ClusterRole") for r in d["rules"] if "leases" in r["resources"]]


def test_deployment_is_hardened_and_highly_available(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    name, docs = overlay
    (deploy,) = find(docs, "Deployment")
    spec = deploy["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "gangq-controller"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc.get("privileged", False) is False
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
    assert container["resources"]["limits"]["memory"]
    # writable scratch space despite the read-only root filesystem
    assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])
    args = container["args"]
    assert args[:3] == ["run", "--config", "/etc/gangq/config.yaml"]
    if name == "external-jobset":
        at = args.index("--jobset-controller")
        assert args[at:at + 2] == ["--jobset-controller", "external"]
    else:
        assert "--jobset-controller" not in args
    assert find(docs, "PodDisruptionBudget")[0]["spec"]["minAvailable"] == 1


def test_probes_metrics_service_and_servicemonitor_agree(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = overlay
    (deploy,) = find(docs, "Deployment")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    config = yaml.safe_load(find(docs, "ConfigMap", "gangq-config")[0]["data"]["config.yaml"])
    assert ports["http-metrics"] == config["metricsPort"] == 8080
    # the kubelet probes the pod's IP: the controller's loopback default would fail every probe
    from gangq.operator.config import parse_config

    assert parse_config(config, "deploy/base/config.yaml").metrics_bind == "0.0.0.0"
    # the probe paths are routes of the controller's HTTP app
    from prometheus_client import CollectorRegistry

    routes = {r.resource.canonical for r in create_app(CollectorRegistry()).router.routes() if r.resource}
    for probe in ("livenessProbe", "readinessProbe"):
        http = container[probe]["httpGet"]
        assert http["port"] == "http-metrics"
        assert http["path"] in routes, http["path"]
    (svc,) = find(docs, "Service", "gangq-metrics")
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] == "http-metrics"
    (monitor,) = find(docs, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert "/metrics" in routes


def test_crds_are_installed_from_crds_folder(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    """Every CRD of crds/ is in the install, taken from crds/ itself (no copy under deploy/); the
    JobSet CRD only where gangq runs the JobSet controller."""
    name, docs = overlay
    installed = {d["metadata"]["name"]: d for d in find(docs, "CustomResourceDefinition")}
    for crd in crd_documents():
        wanted = crd["spec"]["group"] != "jobset.x-k8s.io" or name in EMBEDDED_JOBSET
        assert (crd["metadata"]["name"] in installed) == wanted, (name, crd["metadata"]["name"])
        if wanted:
            assert installed[crd["metadata"]["name"]]["spec"] == crd["spec"], crd["metadata"]["name"]
    assert not (DEPLOY / "crds").exists(), "the CRDs have one source: crds/"


def test_crds_kustomization_lists_every_crd_file() -> None:
    """A CRD file added to crds/ but not to its kustomization would be missing from the install."""
    kustomization = yaml.safe_load((ROOT / "crds" / "kustomization.yaml").read_text())
    files = sorted(p.name for p in (ROOT / "crds").glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == files


def test_dockerfile_runs_gangq_as_non_root() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    # A base users can pull and this machine can make from Debian's packages (hack/build-image.sh)
    froms = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert froms and set(froms) == {"docker.io/library/debian:bookworm-slim"}, froms
    final = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM ")):]
    assert not [line for line in final if "gcc" in line or "python3-dev" in line]  # the compiler stays behind
    lines = final
    assert "USER 65532:65532" in lines
    assert lines.index("USER 65532:65532") < lines.index('ENTRYPOINT ["gangq"]')
    assert 'CMD ["run"]' in lines
    for copied in ("pyproject.toml", "README.md", "gangq"):
        assert (ROOT / copied).exists(), copied


def test_dockerfile_builds_with_everything_setup_py_uses() -> None:
    """The image is built by ``pip install .``: setup.py must be there to compile the core
    with mypyc (with a C compiler in the build stage), and crds/ and policies/ to be bundled
    (gangq/resources.py); without them the image ran the pure-Python core and had no CRDs."""
    text = (DEPLOY / "Dockerfile").read_text()
    build = text.split("FROM ")[1]  # the build stage
    copied = set()
    for line in build.splitlines():
        if line.startswith("COPY "):
            copied.update(line.split()[1:-1])
    assert {"pyproject.toml", "setup.py", "README.md", "gangq", "crds", "policies"} <= copied
    assert "gcc" in build and "libc6-dev" in build
    assert build.index("gcc") < build.index("pip install")
    setup = (ROOT / "setup.py").read_text()
    for name in ("crds", "policies"):
        assert name.split("/")[0] in copied and f'"{name}"' in setup, name


def test_every_object_of_the_install_is_labelled_part_of_gangq(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    """What the docs tell an admin to remove by ``-l app.kubernetes.io/part-of=gangq`` (the CRDs, an
    install's leftovers) is every object of it, whatever the overlay."""
    _, docs = overlay
    unlabelled = [f"{d['kind']}/{d['metadata']['name']}" for d in docs
                  if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/part-of") != "gangq"]
    assert not unlabelled, unlabelled
