"""The Helm chart (deploy/helm/gangq), offline: it lints, its values are checked by its schema, its
options render what they promise, and its default render is the default Kustomize install
(deploy/overlays/plain) object for object, so the two cannot drift apart.

Helm is the one the control-plane build pins (hack/control-plane/helm), in the same cache as
kubectl; where it is not built and Go is missing the tests skip (fail under
GANGQ_REQUIRE_REAL_CLUSTER=1), as the real-control-plane tier does.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangq.operator.config import OperatorConfig, parse_config
from tests.conftest import _unavailable
from tests.deploy.conftest import DEPLOY, ROOT, find, kustomize

CHART = DEPLOY / "helm" / "gangq"
NAMESPACE = "gangq-system"
MONITORING = "monitoring.coreos.com/v1"
CERT_MANAGER = "cert-manager.io/v1"
# What Helm adds to the install's own labels and annotations: which chart, release and version
# made an object, the checksum that rolls the pods on a configuration change, and the policy that
# keeps the CRDs on uninstall.
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version")
HELM_ANNOTATIONS = ("helm.sh/resource-policy", "checksum/config")
# The one object of the Kustomize install the chart leaves out: Helm stores its release in the
# namespace before any object is created, so the namespace comes first (helm install
# --create-namespace, or kubectl create namespace with the pod-security label; deploy/README.md).
NOT_IN_CHART = {("Namespace", None, NAMESPACE)}


def helm_binary() -> Path:
    """The pinned helm of the control-plane build: built (alone) into its cache when Go is at
    hand, else the tier's skip (a failure under GANGQ_REQUIRE_REAL_CLUSTER=1)."""
    from gangq.controlplane import build

    helm = build.bin_dir() / "helm"
    if helm.is_file():
        return helm
    reason = "helm is not built and Go is not installed"
    if build.go_binary() is not None:
        try:
            return build.build_only({"helm"}) / "helm"
        except build.BuildError as err:
            reason = f"building helm failed: {err}"
    _unavailable(reason)
    raise AssertionError("unreachable: _unavailable skips or fails")


def helm_env(home: Path | None = None) -> dict[str, str]:
    """Helm's environment: its cache, configuration and data in ``home`` (nothing of the user's),
    no kubeconfig of the user's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    base = home or Path(os.environ.get("TMPDIR", "/tmp")) / f"gangq-helm-{os.getuid()}"
    for name in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{name}_HOME"] = str(base / name.lower())
    env["KUBECONFIG"] = ""
    return env


def run_helm(*args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=300,
                          env=env or helm_env())
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done


def set_args(values: dict[str, Any]) -> list[str]:
    """``--set-json`` arguments for ``values`` (a nested dict), one per top-level key."""
    return [arg for key, value in values.items() for arg in ("--set-json", f"{key}={json.dumps(value)}")]


def template(values: dict[str, Any] | None = None, *, api_versions: tuple[str, ...] = (MONITORING,),
             namespace: str = NAMESPACE, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``helm template gangq deploy/helm/gangq`` with ``values``; hooks included."""
    args = ["template", "gangq", str(CHART), "--namespace", namespace, *set_args(values or {})]
    for api in api_versions:
        args += ["--api-versions", api]
    return run_helm(*args, check=check)


def render(values: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(template(values, **kwargs).stdout) if d]


def key(doc: dict[str, Any]) -> tuple[str, str | None, str]:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace"), meta["name"]


def _strip(meta: dict[str, Any]) -> None:
    for field, helm_only in (("labels", HELM_LABELS), ("annotations", HELM_ANNOTATIONS)):
        kept = {k: v for k, v in (meta.get(field) or {}).items() if k not in helm_only}
        if kept:
            meta[field] = kept
        else:
            meta.pop(field, None)


def normalise(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without what only Helm adds, and with the controller's configuration file parsed
    (the chart writes it from values, the Kustomize install as text with comments: the same
    settings, in other words)."""
    doc = copy.deepcopy(doc)
    _strip(doc["metadata"])
    template_meta = doc.get("spec", {}).get("template", {}).get("metadata") if doc["kind"] == "Deployment" else None
    if template_meta is not None:
        _strip(template_meta)
    if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "gangq-config":
        doc["data"]["config.yaml"] = parse_config(yaml.safe_load(doc["data"]["config.yaml"]), "config.yaml")
    return doc


def differences(chart: list[dict[str, Any]], kustomized: list[dict[str, Any]]) -> list[str]:
    """What differs between two installs, object by object (empty: the same)."""
    ours = {key(d): normalise(d) for d in chart}
    theirs = {key(d): normalise(d) for d in kustomized if key(d) not in NOT_IN_CHART}
    problems = [f"only in the chart: {k}" for k in sorted(ours.keys() - theirs.keys(), key=str)]
    problems += [f"only in kustomize: {k}" for k in sorted(theirs.keys() - ours.keys(), key=str)]
    for k in sorted(ours.keys() & theirs.keys(), key=str):
        if ours[k] != theirs[k]:
            a = yaml.safe_dump(_printable(ours[k]), sort_keys=True).splitlines()
            b = yaml.safe_dump(_printable(theirs[k]), sort_keys=True).splitlines()
            diff = "\n".join(difflib.unified_diff(b, a, "kustomize", "chart", lineterm="", n=2))
            problems.append(f"{k} differs:\n{diff}")
    return problems


def _printable(doc: Any) -> Any:
    if isinstance(doc, OperatorConfig):
        return doc.model_dump(mode="json", by_alias=True)
    if isinstance(doc, dict):
        return {k: _printable(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_printable(v) for v in doc]
    return doc


# -- the chart against the Kustomize install --------------------------------------------------


@pytest.mark.parametrize(("overlay", "values"), [
    ("plain", {}),
    ("no-webhook", {"webhook": {"enabled": False}}),
    ("external-jobset", {"jobset": {"controller": "external"}}),
])
def test_the_chart_renders_the_kustomize_install(overlay: str, values: dict[str, Any]) -> None:
    """The default values are deploy/overlays/plain; the webhook off is overlays/no-webhook, the
    external JobSet controller overlays/external-jobset: same objects, same specs."""
    kustomized = kustomize(DEPLOY / "overlays" / overlay)
    if overlay != "plain":
        # Components label what their overlay holds: without components/webhook, the alerts and
        # the dashboard of overlays/no-webhook miss the part-of label every other object has.
        kustomized = copy.deepcopy(kustomized)
        for doc in kustomized:
            doc["metadata"].setdefault("labels", {})["app.kubernetes.io/part-of"] = "gangq"
    problems = differences(render(values), kustomized)
    assert not problems, "\n".join(problems)


def test_the_comparison_sees_a_changed_spec() -> None:
    """The drift check is real: a changed port, rule or label fails it; Helm's own labels do not."""
    chart = render()
    kustomized = kustomize(DEPLOY / "overlays" / "plain")
    assert not differences(chart, kustomized)
    changed = copy.deepcopy(chart)
    (deploy,) = find(changed, "Deployment")
    deploy["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = 9090
    assert any("Deployment" in p for p in differences(changed, kustomized))
    changed = copy.deepcopy(chart)
    find(changed, "ClusterRole", "gangq-controller")[0]["rules"][0]["verbs"].append("delete")
    assert any("ClusterRole" in p for p in differences(changed, kustomized))
    changed = copy.deepcopy(chart)
    find(changed, "ConfigMap", "gangq-config")[0]["data"]["config.yaml"] = "podsReady: {timeoutSeconds: 60}\n"
    assert any("gangq-config" in p for p in differences(changed, kustomized))
    changed = [d for d in copy.deepcopy(chart) if d["kind"] != "PodDisruptionBudget"]
    assert any("only in kustomize" in p and "PodDisruptionBudget" in p for p in differences(changed, kustomized))


def test_the_charts_copies_are_their_sources() -> None:
    """The CRDs, the dashboard and the alerts the chart ships are copies (hack/gen-chart.py) of
    crds/, deploy/grafana and deploy/prometheus, and the schema of its config value is the
    controller's configuration model's."""
    done = subprocess.run([sys.executable, str(ROOT / "hack" / "gen-chart.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_webhook_is_sent_what_the_registry_queues() -> None:
    """Every entry's rules are the registered kinds' (hack/gen-chart.py writes them), a mutating
    entry's with the pods a kind gates at creation (a pod group's); the entry for a PodGroup's
    pods without a queue label of their own is sent those pods only."""
    from gangq.integrations.registry import pod_webhook_rules, webhook_rules

    pods = pod_webhook_rules()
    assert pods, "a registered kind (PodGroup) gates its pods at creation"
    for docs in (kustomize(DEPLOY / "overlays" / "plain"), render()):
        mutating = find(docs, "MutatingWebhookConfiguration", "gangq-webhook")[0]["webhooks"]
        assert [h["name"] for h in mutating] == [
            "queue-name.mutate.gangq.io", "kueue-queue-name.mutate.gangq.io", "pod-group.mutate.gangq.io"]
        assert mutating[0]["rules"] == mutating[1]["rules"] == webhook_rules(["CREATE"]) + pods
        assert mutating[2]["rules"] == pods
        assert {e["key"]: e["operator"] for e in mutating[2]["objectSelector"]["matchExpressions"]} == {
            "scheduling.x-k8s.io/pod-group": "Exists", "gangq.io/queue-name": "DoesNotExist",
            "kueue.x-k8s.io/queue-name": "DoesNotExist"}
        for hook in find(docs, "ValidatingWebhookConfiguration", "gangq-webhook")[0]["webhooks"]:
            assert hook["rules"] == webhook_rules(["CREATE", "UPDATE"]), hook["name"]


def test_helm_lint() -> None:
    for values in ({}, {"webhook": {"enabled": False}}, {"quickStart": {"enabled": True}}):
        done = run_helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *set_args(values))
        assert "0 chart(s) failed" in done.stdout, done.stdout


# -- values and what they render --------------------------------------------------------------


@pytest.mark.parametrize(("values", "path"), [
    ({"replicas": -1}, "/replicas"),
    ({"replicas": "two"}, "/replicas"),
    ({"webhook": {"enabled": "yes"}}, "/webhook/enabled"),
    ({"jobset": {"controller": "both"}}, "/jobset/controller"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"resources": {"requests": {"cpu": "lots"}}}, "/resources/requests/cpu"),
    ({"tolerations": [{"key": "gpu", "effect": "NoRun"}]}, "/tolerations/0/effect"),
    ({"webhook": {"enable": True}}, "/webhook"),
    ({"config": {"metricsPort": 0}}, "/config/metricsPort"),
    # the controller's own configuration model (hack/gen-chart.py writes its schema)
    ({"config": {"podsReady": {"timeoutSecond": 60}}}, "/config/podsReady"),
    ({"config": {"preemption": {"budget": "two"}}}, "/config/preemption/budget"),
    ({"config": {"api": {"qps": 0}}}, "/config/api/qps"),
])
def test_a_wrong_value_fails_naming_its_path(values: dict[str, Any], path: str) -> None:
    done = template(values, check=False)
    assert done.returncode != 0
    assert "schema" in done.stderr and f"'{path}'" in done.stderr, done.stderr


def test_the_monitoring_objects_need_the_prometheus_operators_api() -> None:
    """ServiceMonitor and PrometheusRule are rendered only where the API server serves
    monitoring.coreos.com/v1 (and their values switches are on); the dashboard always."""
    kinds = {d["kind"] for d in render(api_versions=())}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"} and "Deployment" in kinds
    kinds = {d["kind"] for d in render()}
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds
    off = {"metrics": {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False},
                       "grafanaDashboard": {"enabled": False}}}
    docs = render(off)
    assert not {d["kind"] for d in docs} & {"ServiceMonitor", "PrometheusRule"}
    assert not find(docs, "ConfigMap", "gangq-dashboard")


def test_cert_manager_keeps_the_certificate() -> None:
    """cert-manager issues into the Secret the Deployment mounts; its CA injector writes the
    caBundle; gangq gets no right on the Secret or the configurations."""
    done = template({"webhook": {"certManager": {"enabled": True}}}, check=False)
    assert done.returncode != 0 and "cert-manager.io/v1" in done.stderr, done.stderr
    docs = render({"webhook": {"certManager": {"enabled": True}}}, api_versions=(MONITORING, CERT_MANAGER))
    (cert,) = find(docs, "Certificate")
    assert cert["spec"]["secretName"] == "gangq-webhook-cert"
    service = f"gangq-webhook.{NAMESPACE}.svc"
    assert cert["spec"]["dnsNames"] == [service, f"{service}.cluster.local"]
    assert cert["spec"]["issuerRef"] == {"name": "gangq-webhook-selfsigned", "kind": "Issuer"}
    assert find(docs, "Issuer", "gangq-webhook-selfsigned")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (config,) = find(docs, kind)
        inject = {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/gangq-webhook-cert"}
        assert config["metadata"]["annotations"] == inject
        assert all("caBundle" not in w["clientConfig"] for w in config["webhooks"])
    assert not find(docs, "Secret", "gangq-webhook-cert") and not find(docs, "Role", "gangq-webhook-cert")
    assert not find(docs, "ClusterRole", "gangq-webhook")
    (deploy,) = find(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "--webhook-cert-dir=/etc/gangq-webhook" in container["args"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/gangq-webhook"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "gangq-webhook-cert" and mount["readOnly"] is True
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer"}
    docs = render({"webhook": {"certManager": {"enabled": True, "issuerRef": issuer}}},
                  api_versions=(MONITORING, CERT_MANAGER))
    assert not find(docs, "Issuer") and find(docs, "Certificate")[0]["spec"]["issuerRef"] == issuer


def test_pod_settings_reach_the_deployment() -> None:
    values = {
        "image": {"repository": "registry.example/gangq", "tag": "1.2.3", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "registry"}],
        "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "4Gi"}},
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "priorityClassName": "system-cluster-critical",
        "podAnnotations": {"example.com/team": "batch"},
        "podLabels": {"example.com/tier": "control"},
        "replicas": 3,
    }
    (deploy,) = find(render(values), "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deploy["spec"]["replicas"] == 3
    assert container["image"] == "registry.example/gangq:1.2.3" and container["imagePullPolicy"] == "Always"
    assert container["resources"] == values["resources"]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    for field in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
        assert pod[field] == values[field], field
    meta = deploy["spec"]["template"]["metadata"]
    assert meta["annotations"]["example.com/team"] == "batch" and meta["labels"]["example.com/tier"] == "control"
    # the selector stays the install's, whatever the pod labels
    assert deploy["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "gangq",
                                                         "app.kubernetes.io/component": "controller"}
    (default,) = find(render(), "Deployment")
    assert default["spec"]["template"]["spec"]["containers"][0]["image"] == "ghcr.io/gangq/gangq:0.1.0"


def test_one_replica_has_no_disruption_budget() -> None:
    """With one replica, minAvailable 1 would block every node drain."""
    docs = render({"replicas": 1})
    assert find(docs, "Deployment")[0]["spec"]["replicas"] == 1 and not find(docs, "PodDisruptionBudget")
    assert find(render(), "PodDisruptionBudget")[0]["spec"]["minAvailable"] == 1


def test_the_configuration_follows_the_values_and_the_release_namespace() -> None:
    docs = render({"config": {"metricsPort": 9090, "podsReady": {"enable": True, "timeoutSeconds": 60},
                              "leaderElection": {"enable": True, "leaseName": "gangq-lease"}}},
                  namespace="batch-system")
    config = parse_config(yaml.safe_load(find(docs, "ConfigMap", "gangq-config")[0]["data"]["config.yaml"]), "x")
    assert config.pods_ready.timeout_seconds == 60 and config.metrics_port == 9090
    assert config.leader_election.namespace == "batch-system" and config.leader_election.lease_name == "gangq-lease"
    assert config.webhook.namespace == config.visibility.namespace == "batch-system"
    (deploy,) = find(docs, "Deployment")
    ports = {p["name"]: p["containerPort"] for p in deploy["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports == {"http-metrics": 9090, "https-pending": 8443, "https-webhook": 9443}
    assert find(docs, "Service", "gangq-metrics")[0]["spec"]["ports"][0]["port"] == 9090
    (role,) = find(docs, "Role", "gangq-leader-election")
    assert role["rules"][1]["resourceNames"] == ["gangq-lease"]
    for doc in docs:
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert doc["subjects"][0]["namespace"] == "batch-system"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in find(docs, kind)[0]["webhooks"]:
            assert hook["clientConfig"]["service"]["namespace"] == "batch-system"
            assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "batch-system"]
    # a changed configuration rolls the pods
    before = find(render(), "Deployment")[0]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert deploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != before


def test_unlabelled_workloads_get_their_webhook_entries() -> None:
    """manageJobsWithoutQueueName in the configuration adds what components/webhook-unlabelled
    adds: an entry per configuration for the managed namespaces, and the right to read them."""
    docs = render({"config": {"manageJobsWithoutQueueName": True}})
    patches = yaml.safe_load((DEPLOY / "components" / "webhook-unlabelled" / "kustomization.yaml").read_text())
    for patch in patches["patches"]:
        (op,) = yaml.safe_load(patch["patch"])
        (config,) = find(docs, patch["target"]["kind"])
        assert config["webhooks"][-1] == op["value"]
    for doc in yaml.safe_load_all((DEPLOY / "components" / "webhook-unlabelled" / "rbac.yaml").read_text()):
        (ours,) = find(docs, doc["kind"], doc["metadata"]["name"])
        assert normalise(ours) == doc
    assert not find(render(), "ClusterRole", "gangq-webhook-namespaces")


def test_the_quick_start_queues_are_hooks_after_install_upgrade_and_rollback() -> None:
    docs = render({"quickStart": {"enabled": True}})
    queues = [d for d in docs if d["apiVersion"] == "gangq.io/v1alpha1"]
    assert sorted(key(d) for d in queues) == [
        ("ClusterQueue", None, "cluster-queue"), ("LocalQueue", "default", "user-queue"),
        ("ResourceFlavor", None, "default-flavor")]
    for doc in queues:
        assert doc["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade,post-rollback"
    quickstart = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "policies" / "quickstart.yaml").read_text())}
    for doc in queues:
        wanted = quickstart[doc["kind"]]["spec"]
        assert _quantities_as_strings(doc["spec"]) == _quantities_as_strings(wanted), doc["kind"]
    assert not [d for d in render() if d["apiVersion"] == "gangq.io/v1alpha1"]


def _quantities_as_strings(spec: Any) -> Any:
    """``spec`` with every quota as a string: 256 and "256" are the same quantity."""
    if isinstance(spec, dict):
        return {k: str(v) if k == "nominalQuota" else _quantities_as_strings(v) for k, v in spec.items()}
    if isinstance(spec, list):
        return [_quantities_as_strings(v) for v in spec]
    return spec


def test_crds_are_kept_on_uninstall_and_follow_the_jobset_mode() -> None:
    from gangq.operator.install import crd_documents

    crds = {d["metadata"]["name"]: d for d in find(render(), "CustomResourceDefinition")}
    assert set(crds) == {d["metadata"]["name"] for d in crd_documents()}
    for name, crd in crds.items():
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}, name
    external_docs = render({"jobset": {"controller": "external"}})
    external = {d["metadata"]["name"] for d in find(external_docs, "CustomResourceDefinition")}
    assert external == set(crds) - {"jobsets.jobset.x-k8s.io"}
    loose = find(render({"crds": {"keep": False}}), "CustomResourceDefinition")
    assert loose and all("annotations" not in d["metadata"] for d in loose)
    assert not find(render({"crds": {"install": False}}), "CustomResourceDefinition")


def test_the_chart_needs_the_kubernetes_that_serves_selectable_fields() -> None:
    """The Workload CRD's selectableFields (the controller's watch of deactivated Workloads) are
    served from Kubernetes 1.31 on: an older cluster is refused, not installed half-working."""
    old = run_helm("template", "gangq", str(CHART), "--kube-version", "1.30.5", check=False)
    assert old.returncode != 0 and "kubeVersion" in old.stderr, old.stderr
    run_helm("template", "gangq", str(CHART), "--kube-version", "1.31.0")
