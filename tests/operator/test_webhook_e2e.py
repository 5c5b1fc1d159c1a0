"""The admission webhook end to end, on both control planes: the API server calls gangq's webhook
(served by the controller on 127.0.0.1, registered with the install's configurations and a URL
client config) for every labelled workload, over HTTPS.

- a labelled Job created unsuspended is stored suspended, so no pod of it exists before gangq
  admits it; then it is admitted and runs;
- changing the queue label of the admitted Job is refused, naming the label;
- a Job with a malformed ``gangq.io/min-member`` is refused, naming the annotation;
- an unlabelled Job is not touched (created unsuspended, it runs);
- without a certificate directory gangq keeps its certificate in the Secret and writes its CA into
  the configurations' caBundle, and the API server trusts it;
- ``gangq run --webhook-port`` serves it while a standby (another replica holds the Lease), and
  exits within 5 s of SIGTERM.

The requests a user makes go over HTTP on both planes (as kubectl's), so the emulated plane's
admission chain is what answers them.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from gangq.operator import certs
from gangq.sandbox.errors import ApiError
from tests.clusters import RealCluster, RemoteStore, controller_kubeconfig
from tests.conformance.client import Endpoint
from tests.controlplane.kube import gangq_command
from tests.operator.helpers import (
    FAST_CONFIG,
    Cluster,
    apply,
    cluster_queue,
    flavor,
    install,
    is_real,
    lease_namespace,
    local_queue,
    namespace,
    operator_config,
    start_operator,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "deploy" / "components" / "webhook"
ADMISSION = "admissionregistration.k8s.io"
CONFIGURATIONS = (("mutatingwebhookconfigurations", "MutatingWebhookConfiguration"),
                  ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration"))
NAME = "gangq-webhook"  # the install's configurations (the component's RBAC names them)
GPU = "nvidia.com/gpu"


def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    """The test's cluster (both planes call admission webhooks)."""
    sb = cluster_factory(nodes="2x{cpu:16,memory:64Gi,nvidia.com/gpu:8}")
    install(sb)
    return sb


def api(sb: Cluster) -> RemoteStore:
    """A user's requests: over HTTP on either plane."""
    return sb.store if isinstance(sb.store, RemoteStore) else RemoteStore(Endpoint("emulated", sb.url))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def job(name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, *,
        pods: int = 2, gpus: int = 4, run_seconds: float = 2.0, suspend: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "labels": dict(labels or {}),
                     "annotations": dict(annotations or {})},
        "spec": {
            "suspend": suspend, "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"sandbox.gangq.io/run-seconds": str(run_seconds)}},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "train", "image": "trainer",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)},
                                  "limits": {GPU: str(gpus)}}}]},
            },
        },
    }


def get_job(store: RemoteStore, name: str) -> dict[str, Any]:
    found: dict[str, Any] = store.get("batch", "jobs", "default", name)
    return found


def pods_of(store: RemoteStore, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = store.list("", "pods", "default",
                                             label_selector=f"batch.kubernetes.io/job-name={name}")["items"]
    return items


def complete(j: dict[str, Any]) -> bool:
    return any(c.get("type") == "Complete" and c.get("status") == "True"
               for c in (j.get("status") or {}).get("conditions") or [])


def admitted(j: dict[str, Any]) -> bool:
    return "gangq.io/admission" in (j["metadata"].get("annotations") or {}) and j["spec"].get("suspend") is False


def configurations(port: int, ca_bundle: bytes | None) -> list[tuple[str, dict[str, Any]]]:
    """The install's webhook configurations, calling ``https://127.0.0.1:port`` instead of the Service."""
    docs = [d for d in yaml.safe_load_all((COMPONENT / "configurations.yaml").read_text()) if d]
    out = []
    for plural, kind in CONFIGURATIONS:
        (doc,) = [copy.deepcopy(d) for d in docs if d["kind"] == kind]
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}"}
            if ca_bundle is not None:
                hook["clientConfig"]["caBundle"] = base64.b64encode(ca_bundle).decode()
        out.append((plural, doc))
    return out


def remove_configurations(store: RemoteStore) -> None:
    for plural, _ in CONFIGURATIONS:
        with contextlib.suppress(ApiError):
            store.delete(ADMISSION, plural, None, NAME)


@contextlib.contextmanager
def registered(store: RemoteStore, docs: list[tuple[str, dict[str, Any]]]) -> Iterator[None]:
    """The configurations, for the test's duration only: one left behind would send every labelled
    workload of later tests to a webhook that is gone (failurePolicy Fail)."""
    remove_configurations(store)
    try:
        for plural, doc in docs:
            store.create(ADMISSION, plural, doc)
        yield
    finally:
        remove_configurations(store)


def wait_until_called(store: RemoteStore, timeout: float = 30.0) -> None:
    """Until the API server sends labelled creates to the webhook (it reads new configurations
    asynchronously): a probe Job for a queue that does not exist comes back suspended."""
    deadline = time.monotonic() + timeout
    i = 0
    while True:
        i += 1
        probe = store.create("batch", "jobs", job(f"probe-{i}", {"gangq.io/queue-name": "no-such-queue"}, pods=1,
                                                  gpus=0), namespace="default")
        store.delete("batch", "jobs", "default", probe["metadata"]["name"], propagation_policy="Background")
        if probe["spec"].get("suspend") is True:
            return
        assert time.monotonic() < deadline, "the API server never called the webhook"
        time.sleep(0.3)


def test_labelled_jobs_are_created_suspended_and_what_breaks_the_queue_is_refused(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    sb = cluster(cluster_factory)
    store = api(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 32, "memory": "128Gi", GPU: 16}),
               local_queue("q", "cq")])
    bundle = certs.plan(None, ["127.0.0.1"], datetime.datetime.now(datetime.UTC))
    assert bundle is not None
    cert_dir = tmp_path / "tls"
    cert_dir.mkdir()
    (cert_dir / "tls.crt").write_bytes(bundle.serving.cert_pem)
    (cert_dir / "tls.key").write_bytes(bundle.serving.key_pem)
    port = free_port()
    op = start_operator(sb, operator_config(webhook={"port": port, "certDir": str(cert_dir)}))
    try:
        with registered(store, configurations(port, bundle.ca_bundle)):
            wait_until_called(store)
            created = store.create("batch", "jobs", job("train", {"gangq.io/queue-name": "q"}, run_seconds=5),
                                   namespace="default")
            assert created["spec"]["suspend"] is True  # stored suspended: the Job controller starts no pod

            def admitted_with_no_pod_before() -> bool:
                running = pods_of(store, "train")  # listed first: a pod then means an admission before it
                current = get_job(store, "train")
                assert not running or "gangq.io/admission" in (current["metadata"].get("annotations") or {}), \
                    "a pod of the Job exists before its admission"
                return admitted(current)

            wait_for(admitted_with_no_pod_before, 30, "the Job to be admitted", every=0.05)
            events = store.list("", "events", "default")["items"]
            assert not [e for e in events if e.get("reason") == "StartedBeforeAdmission"
                        and e["involvedObject"]["name"] == "train"]

            with pytest.raises(ApiError) as refused:
                store.patch("batch", "jobs", "default", "train",
                            {"metadata": {"labels": {"gangq.io/queue-name": "other"}}}, "merge")
            assert refused.value.code == 403, refused.value.message
            assert "metadata.labels[gangq.io/queue-name]" in refused.value.message
            assert "suspend it first" in refused.value.message
            assert (get_job(store, "train")["metadata"]["labels"] or {})["gangq.io/queue-name"] == "q"

            with pytest.raises(ApiError) as malformed:
                store.create("batch", "jobs", job("bad", {"gangq.io/queue-name": "q"}, {"gangq.io/min-member": "-1"}),
                             namespace="default")
            assert malformed.value.code == 403, malformed.value.message
            assert "Job 'default/bad': metadata.annotations[gangq.io/min-member]" in malformed.value.message

            plain = store.create("batch", "jobs", job("plain", pods=1, gpus=0, run_seconds=1), namespace="default")
            assert plain["spec"]["suspend"] is False  # not gangq's: not sent to the webhook, not touched

            wait_for(lambda: complete(get_job(store, "train")) and complete(get_job(store, "plain")), 60,
                     "both Jobs to complete")
            assert "gangq.io/admission" not in (get_job(store, "plain")["metadata"].get("annotations") or {})
    finally:
        op.stop()


SECRET = ("", "secrets", "gangq-system", "gangq-webhook-cert")


def component_rbac() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((COMPONENT / "rbac.yaml").read_text()) if d]


def component_rights_used(sb: RealCluster) -> set[tuple[str, str, str]]:
    """What the controller did with the Secret and the webhook configurations (the audit log);
    never refused."""
    user = sb.cp.pki.identities["controller"].name
    used = set()
    for event in sb.cp.audit_events():
        ref = event.get("objectRef") or {}
        if event.get("user", {}).get("username") != user or ref.get("resource") not in (
                "secrets", *(plural for plural, _ in CONFIGURATIONS)):
            continue
        assert event.get("responseStatus", {}).get("code") != 403, event
        used.add((ref.get("apiGroup", ""), ref["resource"], event["verb"]))
    return used


def test_gangq_keeps_its_certificate_in_the_secret_and_its_ca_in_the_configurations(
        cluster_factory: Callable[..., Cluster]) -> None:
    """No certificate directory: the controller (on the real plane as the install's ServiceAccount,
    with the component's RBAC) fills the Secret the component ships, writes the CA into both
    configurations, and the API server calls it over TLS with that CA."""
    sb = cluster(cluster_factory)
    store = api(sb)
    if not is_real(sb):
        namespace(sb, "gangq-system")
    rbac = component_rbac() if is_real(sb) else []
    plurals = {"Role": "roles", "RoleBinding": "rolebindings", "ClusterRole": "clusterroles",
               "ClusterRoleBinding": "clusterrolebindings"}
    shipped = next(d for d in yaml.safe_load_all((COMPONENT / "secret.yaml").read_text()) if d)
    port = free_port()
    config = operator_config(webhook={"port": port, "hosts": ["127.0.0.1"]})
    op = None
    try:
        for doc in rbac:
            with contextlib.suppress(ApiError):
                store.create("rbac.authorization.k8s.io", plurals[doc["kind"]], doc,
                             namespace=doc["metadata"].get("namespace"))
        with contextlib.suppress(ApiError):
            store.delete(*SECRET)
        store.create("", "secrets", shipped, namespace="gangq-system")
        with registered(store, configurations(port, None)):
            op = start_operator(sb, config)

            def injected() -> bytes | None:
                data = (store.get(*SECRET) or {}).get("data") or {}
                if "ca.crt" not in data:
                    return None
                hooks = [h for plural, _ in CONFIGURATIONS
                         for h in store.get(ADMISSION, plural, None, NAME)["webhooks"]]
                if not all(h["clientConfig"].get("caBundle") == data["ca.crt"] for h in hooks):
                    return None
                return base64.b64decode(data["tls.crt"])

            served = wait_for(injected, 30, "the Secret and the caBundle of both configurations")
            kept = certs.Bundle.from_secret(store.get(*SECRET))
            assert kept is not None and kept.serving.cert_pem == served
            san = kept.serving.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert "gangq-webhook.gangq-system.svc" in san.get_values_for_type(x509.DNSName)
            wait_until_called(store)  # the API server trusts the certificate through the caBundle
        if isinstance(sb, RealCluster):
            assert component_rights_used(sb) == {(g, r, v) for d in rbac if d["kind"] in ("Role", "ClusterRole")
                                                 for rule in d["rules"] for g in rule["apiGroups"]
                                                 for r in rule["resources"] for v in rule["verbs"]}
    finally:
        if op is not None:
            op.stop()
        with contextlib.suppress(ApiError):
            store.delete(*SECRET)
        for doc in rbac:
            with contextlib.suppress(ApiError):
                store.delete("rbac.authorization.k8s.io", plurals[doc["kind"]], doc["metadata"].get("namespace"),
                             doc["metadata"]["name"])


def test_gangq_run_serves_the_webhook_as_a_standby_and_stops_it_within_the_shutdown_budget(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    """Another replica holds the Lease: this one never leads, yet the API server's calls reach its
    webhook (a standby has no watches). SIGTERM ends it, webhook included, within 5 s."""
    sb = cluster(cluster_factory)
    store = api(sb)
    held = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    store.create("coordination.k8s.io", "leases", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "gangq-controller", "namespace": lease_namespace(sb)},
        "spec": {"holderIdentity": "the-leader", "leaseDurationSeconds": 3600, "renewTime": held}},
        namespace=lease_namespace(sb))
    bundle = certs.plan(None, ["127.0.0.1"], datetime.datetime.now(datetime.UTC))
    assert bundle is not None
    (tmp_path / "tls.crt").write_bytes(bundle.serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(bundle.serving.key_pem)
    config = {**FAST_CONFIG, "leaderElection": {**FAST_CONFIG["leaderElection"], "namespace": lease_namespace(sb)}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    trust = ssl.create_default_context(cadata=bundle.ca_bundle.decode())

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=trust, timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    log = tmp_path / "gangq.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*gangq_command(), "run", "--kubeconfig", str(controller_kubeconfig(sb)),
                                 "--config", str(tmp_path / "config.yaml"), "--jobset-controller", "external",
                                 "--webhook-port", str(port), "--webhook-cert-dir", str(tmp_path)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: healthy() or proc.poll() is not None, 30, "the webhook to serve", every=0.2)
        assert proc.poll() is None, log.read_text()[-3000:]
        with registered(store, configurations(port, bundle.ca_bundle)):
            wait_until_called(store)  # answered by the standby
        assert "waits for Lease" in log.read_text()
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        took = time.monotonic() - sent
        assert proc.returncode == 0, log.read_text()[-3000:]
        assert took <= 5.0, f"took {took:.1f} s to exit:\n{log.read_text()[-3000:]}"
        assert not healthy()
    finally:
        if proc.poll() is None:
            proc.kill()
