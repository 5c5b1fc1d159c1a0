"""The Helm chart (deploy/helm/gangq) on a real control plane, validation on: every variant of its
values is accepted by the API server (``kubectl apply --dry-run=server``), and a release goes
through install, upgrade, rollback and uninstall as deploy/README.md says ("Install with Helm").

A control plane of its own: the chart installs cluster-wide objects (CRDs, ClusterRoles, webhook
configurations with failurePolicy Fail) under the names the session's control plane has from
tests/controlplane/install.py. Its controller-manager runs the Deployment controllers besides the
tier's; the pods run on kwok's nodes, which report them Running and Ready
(``sandbox.gangq.io/run-seconds: inf``: they never exit), so ``helm install --wait`` waits for a
Deployment that becomes available. The API server there serves neither the Prometheus Operator's
kinds nor cert-manager's: the dry runs that need them get minimal stand-in CRDs of those kinds.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangq.controlplane.launcher import ControlPlane, Process
from gangq.operator.install import crd_documents
from tests.conftest import start_control_plane
from tests.controlplane.kube import kubectl, wait_for
from tests.controlplane.test_image import BUILD
from tests.deploy.conftest import ROOT
from tests.deploy.test_chart import CERT_MANAGER, CHART, MONITORING, NAMESPACE, helm_env, run_helm, set_args

RELEASE = "gangq"
# kwok's pods of this release run until deleted (gangq/controlplane/kwok.py).
RUNS = {"podAnnotations": {"sandbox.gangq.io/run-seconds": "inf"}}
STAND_INS = (
    ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
    ("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
    ("cert-manager.io", "Certificate", "certificates"),
    ("cert-manager.io", "Issuer", "issuers"),
)
MATRIX: dict[str, dict[str, Any]] = {
    "default": {},
    "webhook-off": {"webhook": {"enabled": False}},
    "cert-manager": {"webhook": {"certManager": {"enabled": True}}},
    "cert-manager-cluster-issuer": {"webhook": {"certManager": {
        "enabled": True, "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}}},
    "quick-start": {"quickStart": {"enabled": True}},
    "external-jobset": {"jobset": {"controller": "external"}},
    "pod-settings": {
        "image": {"repository": "registry.example/gangq", "tag": "1.2.3", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "registry"}],
        "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "4Gi"}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "control", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "priorityClassName": "system-cluster-critical",
    },
    "one-replica": {"replicas": 1},
    "unlabelled-workloads": {"config": {"manageJobsWithoutQueueName": True}},
    "no-monitoring-no-crds": {"crds": {"install": False}, "metrics": {
        "serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False},
        "grafanaDashboard": {"enabled": False}}},
}


def _stand_in(group: str, kind: str, plural: str) -> dict[str, Any]:
    """A CRD that serves ``kind`` and accepts any content (its real schema is its project's)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


def _namespace(cp: ControlPlane) -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    kubectl(cp, "apply", "--server-side", "-f", "-", input=[ns])


# The controllers a Deployment needs that the tier's controller-manager does not run (nothing of
# the tier but this chart creates Deployments).
DEPLOYMENT_CONTROLLERS = ("deployment-controller", "replicaset-controller", "disruption-controller")


@pytest.fixture(scope="module")
def helm_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = start_control_plane(tmp_path_factory.mktemp("helm-control-plane"))
    deployments = Process("kube-controller-manager-deployments", [
        str(cp.bin / "kube-controller-manager"),
        f"--kubeconfig={cp.kubeconfig('controller-manager')}",
        f"--controllers={','.join(DEPLOYMENT_CONTROLLERS)}",
        f"--service-account-private-key-file={cp.pki.sa_key}", f"--root-ca-file={cp.pki.ca_cert}",
        "--use-service-account-credentials=true", "--leader-elect=false", "--secure-port=0",
    ], cp.workdir / "kube-controller-manager-deployments.log")
    deployments.start()
    try:
        yield cp
    finally:
        deployments.stop()
        cp.stop()


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


def helm(cp: ControlPlane, home: Path, *args: str, check: bool = True) -> str:
    done = run_helm(*args, "--kubeconfig", str(cp.kubeconfig("admin")), check=check, env=helm_env(home))
    return done.stdout if done.returncode == 0 else done.stderr


@pytest.fixture(scope="module")
def dry_run_server(helm_control_plane: ControlPlane, helm_home: Path) -> ControlPlane:
    """The namespace, gangq's CRDs (for the quick-start queues) and the stand-in CRDs."""
    cp = helm_control_plane
    _namespace(cp)
    crds = helm(cp, helm_home, "template", RELEASE, str(CHART), "-n", NAMESPACE, "--show-only", "templates/crds.yaml")
    kubectl(cp, "apply", "--server-side", "--force-conflicts", "-f", "-", input=crds)
    kubectl(cp, "apply", "--server-side", "-f", "-", input=[_stand_in(*s) for s in STAND_INS])
    kubectl(cp, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    return cp


@pytest.mark.parametrize("variant", list(MATRIX))
def test_the_api_server_accepts_every_variant(dry_run_server: ControlPlane, helm_home: Path, variant: str) -> None:
    cp = dry_run_server
    rendered = helm(cp, helm_home, "template", RELEASE, str(CHART), "-n", NAMESPACE, "--api-versions", MONITORING,
                    "--api-versions", CERT_MANAGER, *set_args(MATRIX[variant]))
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    assert any(d["kind"] == "Deployment" for d in docs)
    out = kubectl(cp, "apply", "--dry-run=server", "--validate=strict", "-f", "-", input=rendered)
    for doc in docs:
        assert f"{doc['kind'].lower()}" in out.lower() and doc["metadata"]["name"] in out, (doc["kind"], out)


def _get(cp: ControlPlane, *args: str) -> Any:
    return json.loads(kubectl(cp, "get", *args, "-o", "json"))


def _leftovers(cp: ControlPlane) -> set[tuple[str, str]]:
    """Every object of any listable kind that carries the release's label: (kind, name)."""
    # While the release is installed its APIService is registered but unanswered (kwok runs no
    # process): discovery then lists every other group and exits 1 for that one.
    done = subprocess.run([str(cp.kubectl), f"--kubeconfig={cp.kubeconfig('admin')}", "api-resources",
                           "--verbs=list", "-o", "name"], capture_output=True, text=True, timeout=60, check=False)
    kinds = done.stdout.split()
    assert "deployments.apps" in kinds, done.stderr
    out = kubectl(cp, "get", ",".join(kinds), "-A", "-l", f"app.kubernetes.io/instance={RELEASE}",
                  "-o", "jsonpath={range .items[*]}{.kind}/{.metadata.name}{'\\n'}{end}")
    return {tuple(line.split("/", 1)) for line in out.split()}  # type: ignore[misc]


def test_install_upgrade_rollback_uninstall(helm_control_plane: ControlPlane, helm_home: Path) -> None:
    cp = helm_control_plane
    _namespace(cp)
    # A clean cluster: no gangq CRDs (the dry runs' are not the release's), no Prometheus Operator.
    # Waiting for a dozen CRDs to be gone (the API server removes their objects first) can take
    # longer than kubectl's usual minute on a loaded machine.
    kubectl(cp, "delete", "crd", "-l", "app.kubernetes.io/part-of=gangq", "--ignore-not-found", "--wait=true",
            timeout=240)
    kubectl(cp, "delete", "crd", *(f"{plural}.{group}" for group, _, plural in STAND_INS), "--ignore-not-found")
    values = {**RUNS, "quickStart": {"enabled": True}}

    out = helm(cp, helm_home, "install", RELEASE, str(CHART), "-n", NAMESPACE, "--wait", "--timeout", "3m",
               *set_args(values))
    assert "STATUS: deployed" in out, out
    deploy = _get(cp, "deployment", "gangq-controller", "-n", NAMESPACE)
    assert deploy["status"]["readyReplicas"] == 2
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["cpu"] == "500m"
    assert _get(cp, "pdb", "gangq-controller", "-n", NAMESPACE)["spec"]["minAvailable"] == 1
    for crd in ("clusterqueues.gangq.io", "workloads.gangq.io", "jobsets.jobset.x-k8s.io"):
        assert _get(cp, "crd", crd)["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    manifest = helm(cp, helm_home, "get", "manifest", RELEASE, "-n", NAMESPACE)
    assert "kind: ServiceMonitor" not in manifest and "kind: PrometheusRule" not in manifest
    assert "kind: ConfigMap" in manifest and "gangq-dashboard" in manifest
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        hooks = _get(cp, kind, "gangq-webhook")["webhooks"]
        assert {h["failurePolicy"] for h in hooks} == {"Fail"}
    cq = _get(cp, "clusterqueue", "cluster-queue")
    assert _quota(cq, "cpu") == "256"
    assert _get(cp, "localqueue", "user-queue", "-n", "default")["spec"]["clusterQueue"] == "cluster-queue"

    # What gangq writes itself, which no upgrade may take back: the certificate in the Secret the
    # chart ships empty, and the CA in the configurations' caBundle.
    ca = base64.b64encode(cp.pki.ca_cert.read_bytes()).decode()
    kubectl(cp, "patch", "secret", "gangq-webhook-cert", "-n", NAMESPACE, "--type=merge",
            "-p", json.dumps({"data": {"ca.crt": ca}}))
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        kubectl(cp, "patch", kind, "gangq-webhook", "--type=json",
                "-p", json.dumps([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca}]))

    changed = {**values, "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
               "config": {"podsReady": {"enable": True, "timeoutSeconds": 120}},
               "quickStart": {"enabled": True, "nominalQuota": {"cpu": "128", "memory": "2Ti", "nvidia.com/gpu": "32"}}}
    out = helm(cp, helm_home, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--wait", "--timeout", "3m",
               *set_args(changed))
    assert "STATUS: deployed" in out and "REVISION: 2" in out, out
    deploy = _get(cp, "deployment", "gangq-controller", "-n", NAMESPACE)
    assert deploy["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "250m"
    config = yaml.safe_load(_get(cp, "configmap", "gangq-config", "-n", NAMESPACE)["data"]["config.yaml"])
    assert config["podsReady"]["timeoutSeconds"] == 120
    assert _quota(_get(cp, "clusterqueue", "cluster-queue"), "cpu") == "128"
    assert _get(cp, "secret", "gangq-webhook-cert", "-n", NAMESPACE)["data"] == {"ca.crt": ca}
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        assert _get(cp, kind, "gangq-webhook")["webhooks"][0]["clientConfig"]["caBundle"] == ca

    out = helm(cp, helm_home, "rollback", RELEASE, "1", "-n", NAMESPACE, "--wait", "--timeout", "3m")
    deploy = _get(cp, "deployment", "gangq-controller", "-n", NAMESPACE)
    assert deploy["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"
    config = yaml.safe_load(_get(cp, "configmap", "gangq-config", "-n", NAMESPACE)["data"]["config.yaml"])
    assert config["podsReady"]["timeoutSeconds"] == 300
    assert _quota(_get(cp, "clusterqueue", "cluster-queue"), "cpu") == "256"
    history = helm(cp, helm_home, "history", RELEASE, "-n", NAMESPACE, "-o", "json")
    assert [(r["revision"], r["status"]) for r in json.loads(history)] == [
        (1, "superseded"), (2, "superseded"), (3, "deployed")]
    assert _get(cp, "secret", "gangq-webhook-cert", "-n", NAMESPACE)["data"] == {"ca.crt": ca}

    before = _leftovers(cp)
    assert ("Deployment", "gangq-controller") in before and ("ClusterRole", "gangq-controller") in before
    released = [d for d in yaml.safe_load_all(helm(cp, helm_home, "get", "manifest", RELEASE, "-n", NAMESPACE)) if d]
    assert {(d["kind"], d["metadata"]["name"]) for d in released} <= before  # every object carries the label
    helm(cp, helm_home, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "3m")
    # the CRDs (a chart's crds/ are never deleted): every one of the install's crds/
    kept = {("CustomResourceDefinition", d["metadata"]["name"]) for d in crd_documents()}
    assert ("CustomResourceDefinition", "jobsets.jobset.x-k8s.io") in kept
    quick_start = {("ResourceFlavor", "default-flavor"), ("ClusterQueue", "cluster-queue"),
                   ("LocalQueue", "user-queue")}
    # The garbage collector removes the ReplicaSet and its pods (which carry the release's labels)
    # after the Deployment is gone.
    wait_for(lambda: _leftovers(cp) == kept | quick_start, 60, "only what uninstall keeps")
    for doc in released:  # and each object of the release is gone, looked up by name
        if (doc["kind"], doc["metadata"]["name"]) not in kept:
            where = ["-n", doc["metadata"]["namespace"]] if "namespace" in doc["metadata"] else []
            group = doc["apiVersion"].rpartition("/")[0]
            resource = f"{doc['kind']}.{group}" if group else doc["kind"]
            out = kubectl(cp, "get", resource, doc["metadata"]["name"], *where, check=False)
            assert "NotFound" in out, (doc["kind"], doc["metadata"]["name"], out)
    assert helm(cp, helm_home, "list", "-A", "-q").split() == []
    assert not _get(cp, "pods", "-n", NAMESPACE)["items"]

    # Installed again over what the last release kept: its CRDs are adopted, not refused.
    helm(cp, helm_home, "install", RELEASE, str(CHART), "-n", NAMESPACE, "--wait", "--timeout", "3m",
         *set_args({**RUNS, "webhook": {"enabled": False}, "crds": {"keep": False}}))
    assert "helm.sh/resource-policy" not in _get(cp, "crd", "workloads.gangq.io")["metadata"].get("annotations", {})
    helm(cp, helm_home, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "3m")
    wait_for(lambda: not _leftovers(cp), 60, "nothing left of the release")
    assert kubectl(cp, "get", "crd", "workloads.gangq.io", check=False).startswith("Error from server (NotFound)")


def _quota(cq: dict[str, Any], resource: str) -> str:
    resources = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    return str(next(r["nominalQuota"] for r in resources if r["name"] == resource))


@pytest.mark.parametrize(("values", "path"), [
    ({"replicas": -1}, "/replicas"),
    ({"webhook": {"enabled": "yes"}}, "/webhook/enabled"),
])
def test_a_wrong_value_fails_the_install_naming_its_path(helm_control_plane: ControlPlane, helm_home: Path,
                                                         values: dict[str, Any], path: str) -> None:
    cp = helm_control_plane
    _namespace(cp)
    out = helm(cp, helm_home, "install", "wrong", str(CHART), "-n", NAMESPACE, *set_args(values), check=False)
    assert "schema" in out and f"'{path}'" in out, out
    assert "wrong" not in helm(cp, helm_home, "list", "-A", "-q").split()
    assert not _get(cp, "deployments", "-A", "-l", "app.kubernetes.io/instance=wrong")["items"]


def _readme_blocks() -> dict[str, list[str]]:
    """The command lines of the README's "Install on your cluster", by the bold lead of the
    paragraph each code block follows (With Helm, With kustomize, The image)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Install on your cluster", 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, list[str]] = {}
    for lead, code in re.findall(r"\*\*([^*]+)\*\*.*?```bash\n(.*?)```", section, re.S):
        blocks[lead] = [line for line in code.splitlines() if line.strip() and not line.startswith("#")]
    return blocks


def _delete_gangq_crds(cp: ControlPlane) -> None:
    """The CRDs uninstall keeps, deleted as deploy/README.md says. A CRD is gone only once the API
    server has removed its objects (its cleanup finalizer), which a busy machine takes its time
    over: waited for here, not inside one kubectl call."""
    kubectl(cp, "delete", "crd", "-l", "app.kubernetes.io/part-of=gangq", "--ignore-not-found", "--wait=false")
    wait_for(lambda: not _get(cp, "crd", "-l", "app.kubernetes.io/part-of=gangq")["items"], 240,
             "gangq's CRDs to be gone")


def _shell(cp: ControlPlane, home: Path, line: str) -> str:
    """A README line in a shell, as a user runs it from the checkout: the pinned helm and kubectl
    first on the PATH, the control plane's admin kubeconfig."""
    env = {**helm_env(home), "KUBECONFIG": str(cp.kubeconfig("admin")),
           "PATH": f"{cp.bin}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


def test_the_readme_install_commands_install_gangq(helm_control_plane: ControlPlane, helm_home: Path,
                                                   tmp_path: Path) -> None:
    """README's "Install on your cluster", line by line: the Helm install, then the kustomize
    install on a control plane of its own, each leaving the controller's Deployment, the webhook
    configurations (failurePolicy Fail) and the APIService; the image's line is the script
    tests/controlplane/test_image.py builds the image with. kwok runs no process: the one addition
    to the Helm line keeps its pods running (kwok ends pods after their run time), so that
    ``--wait`` sees the Deployment available."""
    cp = helm_control_plane
    blocks = _readme_blocks()
    assert list(blocks) == ["With Helm", "With kustomize", "The image"], list(blocks)
    (helm_line,) = blocks["With Helm"]
    assert helm_line.startswith("helm install gangq deploy/helm/gangq ") and "--wait" in helm_line
    _delete_gangq_crds(cp)
    _shell(cp, helm_home, helm_line + " --set-string 'podAnnotations.sandbox\\.gangq\\.io/run-seconds=inf'")

    def installed(cp: ControlPlane) -> None:
        assert _get(cp, "deployment", "gangq-controller", "-n", NAMESPACE)["spec"]["replicas"] == 2
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            assert {h["failurePolicy"] for h in _get(cp, kind, "gangq-webhook")["webhooks"]} == {"Fail"}
        assert _get(cp, "apiservice", "v1alpha1.visibility.gangq.io")["spec"]["service"]["name"] == "gangq-visibility"

    installed(cp)
    helm(cp, helm_home, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "3m")

    # The kustomize install on a cluster of its own: the Helm release's kept CRDs would be another
    # field manager's, and a CRD deleted just after its creation can take minutes to go (the API
    # server retries its cleanup while the CRD's storage is reinitialized).
    (kustomize_line,) = blocks["With kustomize"]
    assert kustomize_line == "kubectl apply --server-side -k deploy/overlays/plain"
    cp = start_control_plane(tmp_path / "kustomize-control-plane")
    try:
        # The kustomize install includes the Prometheus Operator's kinds (README says so).
        kubectl(cp, "apply", "--server-side", "-f", "-", input=[_stand_in(*s) for s in STAND_INS[:2]])
        kubectl(cp, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        # the CRDs and the objects of their kinds in one apply: the API server may serve the new
        # kinds a moment after it takes the CRDs, so a second apply picks up what the first missed
        first = subprocess.run(["bash", "-c", kustomize_line], cwd=ROOT, capture_output=True, text=True, timeout=300,
                               env={**os.environ, "KUBECONFIG": str(cp.kubeconfig("admin")),
                                    "PATH": f"{cp.bin}{os.pathsep}{os.environ['PATH']}"})
        if first.returncode != 0:
            assert "ensure CRDs are installed first" in first.stderr, first.stderr[-2000:]
            kubectl(cp, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
            _shell(cp, helm_home, kustomize_line)
        installed(cp)
    finally:
        cp.stop()

    (image_line,) = blocks["The image"]
    assert image_line == f"bash {BUILD.relative_to(ROOT)}"  # what the image's test builds it with
