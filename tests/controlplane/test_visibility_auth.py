"""The pending-workloads API behind the real API server's authentication and authorization.

The controller runs as the install's ServiceAccount with the install's RBAC (deploy/base/rbac.yaml,
and deploy/base/visibility.yaml for its certificate), its visibility port on loopback, its
certificate kept in the Secret and its CA written into the APIService's caBundle:

- a request without a token is 401; a ServiceAccount token granted (a RoleBinding to the install's
  gangq-pending-workloads-reader) only in team-a reads team-a's LocalQueue (200, its pending
  JobSet listed) and neither team-b's nor the ClusterQueue (403); a malformed token, and the same
  token with its expiry in the past (re-signed with the service-account key), are 401, and the
  controller goes on answering;
- the front-proxy client certificate of the API server (the launcher's, signed by its
  requestheader client CA, read by gangq from kube-system/extension-apiserver-authentication) is
  believed with the user it names; one signed by another CA, or with a common name not allowed, is
  refused;
- through kube-apiserver itself (``kubectl get --raw``, the aggregation layer): this plane has no
  cluster network, and a Service's endpoints may not be loopback addresses, so the install's
  ClusterIP Service cannot route here; an ExternalName Service (``localhost``), which the
  aggregator resolves to a host name, reaches the controller on loopback: the same APIService, the
  same certificate checks (caBundle, ``gangq-visibility.gangq-system.svc``) and front-proxy hop;
- the leading controller labels its own pod (named by the Downward API's variables)
  ``gangq.io/leader=true``, which the API's Service selects;
- the controller is never refused, and uses every right the visibility manifests grant it.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gangq.controlplane.launcher import ControlPlane
from gangq.controlplane.pki import CONTROLLER_NAMESPACE
from gangq.controlplane.processes import free_port
from gangq.operator.config import parse_config
from gangq.operator.kube import Credentials
from gangq.operator.leaderpod import LEADER_LABEL, POD_NAME_ENV, POD_NAMESPACE_ENV
from gangq.operator.operator import OperatorThread
from tests.controlplane.install import install
from tests.controlplane.kube import get, kubectl, namespace, wait_for

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "base"
PREFIX = "/apis/visibility.gangq.io/v1alpha1"
SECRET = f"/api/v1/namespaces/{CONTROLLER_NAMESPACE}/secrets/gangq-visibility-cert"
API_SERVICE = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.visibility.gangq.io"
GPU = "nvidia.com/gpu"
TEAM_A, TEAM_B = "vis-team-a", "vis-team-b"
CONTROLLER_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "gangq-controller-vis", "namespace": CONTROLLER_NAMESPACE,
                 "labels": {"app.kubernetes.io/name": "gangq", "app.kubernetes.io/component": "controller"},
                 "annotations": {"sandbox.gangq.io/run-seconds": "inf"}},
    "spec": {"containers": [{"name": "controller", "image": "ghcr.io/gangq/gangq:0.1.0"}]},
}


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((BASE / name).read_text()) if d]


def queues() -> list[dict[str, Any]]:
    quota = [{"name": "cpu", "nominalQuota": "1"}, {"name": GPU, "nominalQuota": "0"}]
    return [
        {"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "vis-flavor"},
         "spec": {"nodeLabels": {}}},
        {"apiVersion": "gangq.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": "vis-cq"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", GPU], "flavors": [
             {"name": "vis-flavor", "resources": quota}]}]}},
        *({"apiVersion": "gangq.io/v1alpha1", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": ns},
           "spec": {"clusterQueue": "vis-cq"}} for ns in (TEAM_A, TEAM_B)),
    ]


def waiting_jobset(ns: str) -> dict[str, Any]:
    """A JobSet that waits: it asks for a GPU of a queue with none."""
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": ns, "labels": {"gangq.io/queue-name": "q"}},
            "spec": {"suspend": True, "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": 1, "completions": 1, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "resources": {
                        "requests": {"cpu": "1", GPU: "1"}, "limits": {GPU: "1"}}}]}}}}}]}}


def service_account_token(cp: ControlPlane, ns: str, name: str) -> str:
    kubectl(cp, "-n", ns, "create", "serviceaccount", name)
    answer = cp.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                         "spec": {"expirationSeconds": 3600}})
    token: str = answer["status"]["token"]
    return token


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def expired(cp: ControlPlane, token: str) -> str:
    """``token`` with its expiry an hour ago, signed again with the API server's service-account key:
    only the expiry differs from a token the API server accepts."""
    header, payload, _ = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    now = int(time.time())
    claims.update(iat=now - 7200, nbf=now - 7200, exp=now - 3600)
    signing_input = f"{header}.{_b64(json.dumps(claims).encode())}"
    key = serialization.load_pem_private_key(cp.pki.sa_key.read_bytes(), None)
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())  # type: ignore[union-attr,call-arg]
    return f"{signing_input}.{_b64(signature)}"


def client_cert(directory: Path, cn: str, ca_cert: x509.Certificate | None, ca_key: Any) -> tuple[str, str]:
    """A client certificate for ``cn`` signed by ``ca_cert`` (None: a CA of its own); its files."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    if ca_cert is None:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gangq-front-proxy-ca")])
        ca_cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(ca_key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path, key_path = directory / f"{cn}-{id(cert)}.crt", directory / f"{cn}-{id(cert)}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


class Visibility:
    """Requests to the controller's visibility port."""

    def __init__(self, port: int, ca_pem: bytes) -> None:
        self.base = f"https://127.0.0.1:{port}"
        self.ca_pem = ca_pem

    def get(self, path: str, *, token: str | None = None, cert: tuple[str, str] | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        if cert is not None:
            context.load_cert_chain(*cert)
        request = urllib.request.Request(self.base + path, headers=dict(headers or {}))
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")


def lq(ns: str) -> str:
    return f"{PREFIX}/namespaces/{ns}/localqueues/q/pendingworkloads"


CQ = f"{PREFIX}/clusterqueues/vis-cq/pendingworkloads"


@pytest.fixture(scope="module")
def visibility(control_plane: ControlPlane) -> Iterator[tuple[Visibility, OperatorThread]]:
    """The install (RBAC, the visibility manifests, the ClusterRoles), the queues, a waiting JobSet
    in team-a, and the controller as the install's ServiceAccount with its visibility port on."""
    cp = control_plane
    install(cp)
    installed = docs("visibility.yaml") + docs("visibility-roles.yaml")
    kubectl(cp, "apply", "--server-side", "--force-conflicts", "-f", "-", input=installed)
    for ns in (TEAM_A, TEAM_B):
        namespace(cp, ns)
    kubectl(cp, "apply", "--server-side", "-f", "-", input=[*queues(), waiting_jobset(TEAM_A)])
    # The controller's own pod, as the Deployment names it to the controller (Downward API): the
    # leader labels it, so the API's Service routes to it alone.
    kubectl(cp, "apply", "--server-side", "-f", "-", input=[CONTROLLER_POD])
    environ = {POD_NAME_ENV: CONTROLLER_POD["metadata"]["name"], POD_NAMESPACE_ENV: CONTROLLER_NAMESPACE}
    saved = {k: os.environ.get(k) for k in environ}
    os.environ.update(environ)
    port = free_port()
    config = parse_config({
        "metricsPort": None, "podsReady": {"enable": False}, "leaderElection": {"enable": False},
        "status": {"workloadDelaySeconds": 0.1, "pendingDelaySeconds": 0.2},
        "visibility": {"port": port, "hosts": ["127.0.0.1"], "cacheSeconds": 0},
    }, "test")
    op = OperatorThread(Credentials.load(cp.kubeconfig("controller")), config).start()
    try:
        def ca() -> bytes | None:
            data = (get(cp, SECRET) or {}).get("data") or {}
            bundle = (get(cp, API_SERVICE) or {}).get("spec", {}).get("caBundle")
            return base64.b64decode(data["ca.crt"]) if "ca.crt" in data and bundle == data["ca.crt"] else None

        ca_pem = wait_for(ca, 30, "the visibility certificate in the Secret and the APIService's caBundle")
        vis = Visibility(port, ca_pem)
        admin = cp.pki.identities["admin"].token
        wait_for(lambda: vis.get(lq(TEAM_A), token=admin)[1].get("total") == 1, 30,
                 "the leader's answer: team-a's JobSet pending")
        yield vis, op
    finally:
        # the queues first, while the controller runs: it lifts the ClusterQueue's finalizer
        for ns in (TEAM_A, TEAM_B):
            kubectl(cp, "delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        kubectl(cp, "delete", "--ignore-not-found", "--wait=false", "clusterqueue/vis-cq", "resourceflavor/vis-flavor",
                check=False)
        with contextlib.suppress(AssertionError):
            wait_for(lambda: get(cp, "/apis/gangq.io/v1alpha1/clusterqueues/vis-cq") is None, 30,
                     "the ClusterQueue gone")
        op.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        kubectl(cp, "delete", "--ignore-not-found", "--wait=false", "-f", "-", input=[*installed, CONTROLLER_POD],
                check=False)


def test_only_what_the_token_is_granted_is_answered_and_bad_tokens_are_401(
        control_plane: ControlPlane, visibility: tuple[Visibility, OperatorThread]) -> None:
    cp = control_plane
    vis, op = visibility
    token = service_account_token(cp, TEAM_A, "researcher")
    kubectl(cp, "-n", TEAM_A, "create", "rolebinding", "researcher-pending",
            "--clusterrole=gangq-pending-workloads-reader", f"--serviceaccount={TEAM_A}:researcher")
    wait_for(lambda: vis.get(lq(TEAM_A), token=token)[0] == 200, 30, "the researcher's RoleBinding in force")

    status, body = vis.get(lq(TEAM_A))
    assert status == 401 and body["reason"] == "Unauthorized", body
    status, body = vis.get(lq(TEAM_A), token=token)
    assert status == 200, body
    assert [(i["namespace"], i["name"], i["positionInLocalQueue"]) for i in body["items"]] == [(TEAM_A, "train", 1)]
    for path in (lq(TEAM_B), CQ):
        status, body = vis.get(path, token=token)
        assert status == 403 and body["reason"] == "Forbidden", (path, body)
        assert f"system:serviceaccount:{TEAM_A}:researcher" in body["message"], body
    for bad in ("not-a-token", token[:-8] + "AAAAAAAA", expired(cp, token)):
        status, body = vis.get(lq(TEAM_A), token=bad)
        assert status == 401, (bad[:20], body)
    # the expired token differs only in its expiry: the same claims, fresh, are accepted
    assert vis.get(lq(TEAM_A), token=token)[0] == 200
    assert op.error is None
    # discovery: any authenticated user; no credentials, none
    assert vis.get(PREFIX)[0] == 401
    status, resources = vis.get(PREFIX, token=token)
    assert status == 200 and resources["groupVersion"] == "visibility.gangq.io/v1alpha1"


def test_the_api_servers_front_proxy_certificate_is_believed_and_no_other(
        control_plane: ControlPlane, visibility: tuple[Visibility, OperatorThread], tmp_path: Path) -> None:
    cp = control_plane
    vis, _ = visibility
    kubectl(cp, "-n", TEAM_A, "create", "rolebinding", "carol-pending",
            "--clusterrole=gangq-pending-workloads-reader", "--user=carol")
    proxy = (str(cp.pki.front_proxy_client_cert), str(cp.pki.front_proxy_client_key))
    as_carol = {"X-Remote-User": "carol", "X-Remote-Group": "system:authenticated"}
    # gangq reads the front-proxy settings at start: the ConfigMap the API server publishes
    wait_for(lambda: vis.get(lq(TEAM_A), cert=proxy, headers=as_carol)[0] == 200, 30,
             "carol through the front-proxy certificate")
    status, body = vis.get(lq(TEAM_A), cert=proxy, headers=as_carol)
    assert status == 200 and body["total"] == 1
    assert vis.get(CQ, cert=proxy, headers=as_carol)[0] == 403
    assert vis.get(lq(TEAM_A), cert=proxy)[0] == 401  # no user named
    ca = x509.load_pem_x509_certificate(cp.pki.front_proxy_ca.read_bytes())
    ca_key = serialization.load_pem_private_key(cp.pki.front_proxy_ca_key.read_bytes(), None)
    not_allowed = client_cert(tmp_path, "intruder", ca, ca_key)
    status, body = vis.get(lq(TEAM_A), cert=not_allowed, headers=as_carol)
    assert status == 401 and "common name 'intruder'" in body["message"], body
    other_ca = client_cert(tmp_path, "front-proxy-client", None, None)
    # No answer at all: the TLS handshake refuses a certificate of an unknown CA (with TLS 1.3 the
    # client learns it when it reads: an alert, or the connection closed).
    with pytest.raises(OSError) as refused:
        vis.get(lq(TEAM_A), cert=other_ca, headers=as_carol)
    assert not isinstance(refused.value, urllib.error.HTTPError), refused.value


def test_kube_apiserver_routes_the_api_service_to_gangq(
        control_plane: ControlPlane, visibility: tuple[Visibility, OperatorThread], tmp_path: Path) -> None:
    """Through the aggregation layer, with kubectl and the caller's credentials; the install's
    Service made an ExternalName one (see the module docstring)."""
    cp = control_plane
    vis, _ = visibility
    port = int(vis.base.rsplit(":", 1)[1])
    kubectl(cp, "-n", CONTROLLER_NAMESPACE, "delete", "service", "gangq-visibility")
    kubectl(cp, "apply", "--server-side", "--force-conflicts", "-f", "-", input=[
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "gangq-visibility",
                                                              "namespace": CONTROLLER_NAMESPACE},
         "spec": {"type": "ExternalName", "externalName": "localhost"}}])
    kubectl(cp, "patch", "apiservice", "v1alpha1.visibility.gangq.io", "--type=merge",
            "-p", json.dumps({"spec": {"service": {"port": port}}}))

    def available() -> bool:
        conditions = (get(cp, API_SERVICE) or {}).get("status", {}).get("conditions") or []
        return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    wait_for(available, 60, "the APIService to be Available")
    token = service_account_token(cp, TEAM_A, "via-apiserver")
    kubectl(cp, "-n", TEAM_A, "create", "rolebinding", "via-apiserver-pending",
            "--clusterrole=gangq-pending-workloads-reader", f"--serviceaccount={TEAM_A}:via-apiserver")
    kubeconfig = tmp_path / "researcher.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": cp.url, "certificate-authority": str(cp.pki.ca_cert)}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": TEAM_A}}]}))

    def raw(path: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(cp.kubectl), f"--kubeconfig={kubeconfig}", "get", "--raw", path],
                              capture_output=True, text=True, timeout=30)

    wait_for(lambda: raw(lq(TEAM_A)).returncode == 0, 30, "kubectl get --raw through the API server")
    page = json.loads(raw(lq(TEAM_A)).stdout)
    assert page["kind"] == "PendingWorkloadsSummary" and [i["name"] for i in page["items"]] == ["train"]
    refused = raw(lq(TEAM_B))
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    # gangq queue, through the API server with the same kubeconfig
    from typer.testing import CliRunner

    from tests.observability.test_http import cli

    result = CliRunner().invoke(cli(), ["queue", "-n", TEAM_A, "q", "--kubeconfig", str(kubeconfig)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"LocalQueue {TEAM_A}/q: 1 pending" in result.output and f"{TEAM_A}/train" in result.output


def test_the_controller_uses_every_visibility_right_and_is_never_refused(
        control_plane: ControlPlane, visibility: tuple[Visibility, OperatorThread]) -> None:
    cp = control_plane
    vis, _ = visibility
    vis.get(lq(TEAM_A), token=cp.pki.identities["admin"].token)
    user = cp.pki.identities["controller"].name
    used = set()
    for event in cp.audit_events():
        ref = event.get("objectRef") or {}
        if event.get("user", {}).get("username") != user or ref.get("resource") not in (
                "secrets", "apiservices", "tokenreviews", "subjectaccessreviews", "configmaps", "pods"):
            continue
        assert event.get("responseStatus", {}).get("code") != 403, event
        used.add((ref.get("apiGroup", ""), ref["resource"], event["verb"]))
    granted = {(g, r, v) for d in docs("visibility.yaml") if d["kind"] in ("Role", "ClusterRole")
               for rule in d["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    granted |= {("authentication.k8s.io", "tokenreviews", "create"),
                ("authorization.k8s.io", "subjectaccessreviews", "create")}
    assert granted <= used, granted - used
    assert ("", "configmaps", "get") in used  # kube-system/extension-apiserver-authentication


def test_the_leader_labels_its_own_pod_for_the_service(control_plane: ControlPlane,
                                                        visibility: tuple[Visibility, OperatorThread]) -> None:
    """The API's Service selects gangq.io/leader=true: the leading controller (here the only one,
    without leader election) has put it on the pod the Downward API names."""
    pod = get(control_plane, f"/api/v1/namespaces/{CONTROLLER_NAMESPACE}/pods/{CONTROLLER_POD['metadata']['name']}")
    assert (pod["metadata"].get("labels") or {}).get(LEADER_LABEL) == "true", pod["metadata"]
