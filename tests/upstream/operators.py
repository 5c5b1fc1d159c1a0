"""The upstream operators of the kinds gangq queues (``hack/upstream``, built by
:func:`gangq.controlplane.upstream.build_operator`) run out of cluster beside gangq against the
session's real control plane, with their CRDs from the pinned module's source in the Go module
cache (never copied into this repository).

Each runs as the control plane's admin, with leader election off and its metrics and health
probes on free loopback ports; its webhooks stay off (none is registered with the API server),
but the Trainer's, which are part of what it does to a TrainJob (:func:`trainer_operator`).

A gang scheduler's name on pods (the training operator's ``--gang-scheduler-name``) is served by a
second kube-scheduler of the control plane's build with one profile of that name
(:func:`named_scheduler`): a cluster running scheduler-plugins' coscheduling has it serve that name.
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from gangq.controlplane import upstream
from gangq.controlplane.launcher import ControlPlane, Process
from gangq.sandbox.runtime import free_port
from tests.controlplane.kube import get, stop_process, wait_for

KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
TRAINING_OPERATOR_MODULE = "github.com/kubeflow/training-operator"


def crd_documents(directory: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in the YAML files of ``directory``."""
    docs = [d for path in sorted(directory.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if d.get("kind") == "CustomResourceDefinition"]


def install_crds(cp: ControlPlane, documents: Sequence[dict[str, Any]], timeout: float = 60.0) -> None:
    """Apply ``documents`` (server-side: an upstream CRD can be too large for client-side apply's
    annotation) and wait until the API server serves each."""
    if not documents:
        return
    cp.apply(list(documents))
    for crd in documents:
        name = crd["metadata"]["name"]

        def established(name: str = name) -> bool:
            obj = get(cp, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
            return any(c.get("type") == "Established" and c.get("status") == "True"
                       for c in (obj.get("status") or {}).get("conditions") or [])

        wait_for(established, timeout, f"CRD {name} established")


def kuberay_crds() -> list[dict[str, Any]]:
    """KubeRay's CRDs (RayCluster, RayJob, RayService) of the pinned operator module."""
    source = upstream.source_dir("kuberay", KUBERAY_MODULE)
    return crd_documents(source / "config" / "crd" / "bases")


def training_operator_crds(plurals: Sequence[str] = ("pytorchjobs", "tfjobs")) -> list[dict[str, Any]]:
    """The training operator's CRDs of ``plurals`` (``kubeflow.org/v1``) from the pinned module."""
    source = upstream.source_dir("training-operator", TRAINING_OPERATOR_MODULE)
    docs = crd_documents(source / "manifests" / "base" / "crds")
    found = [d for d in docs if d["spec"]["names"]["plural"] in plurals]
    assert len(found) == len(plurals), f"{plurals} not all among the module's CRDs"
    return found


@contextlib.contextmanager
def upstream_operator(name: str, command: Sequence[str], probe: str, log: Path, timeout: float = 60.0,
                      env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` (with ``env`` added to the environment) until the block ends; waits until
    ``http://<probe>/readyz`` answers 200. Its output goes to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "KUBECONFIG": "", **(env or {})})
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"the upstream {name} exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError, urllib.error.URLError), \
                    urllib.request.urlopen(f"http://{probe}/readyz", timeout=1) as answer:
                if answer.status == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"the upstream {name} not ready within {timeout:.0f} s:\n"
                                     f"{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield proc
    finally:
        stop_process(proc)


@contextlib.contextmanager
def kuberay_operator(cp: ControlPlane, binary: Path, workdir: Path) -> Iterator[Path]:
    """KubeRay's ``ray-operator`` against ``cp`` until the block ends (its feature gates at their
    defaults, every namespace watched). Yields its log file."""
    probe = f"127.0.0.1:{free_port()}"
    log = workdir / "ray-operator.log"
    command = [str(binary), f"--kubeconfig={cp.kubeconfig('admin')}", "--enable-leader-election=false",
               f"--metrics-addr=127.0.0.1:{free_port()}", f"--health-probe-bind-address={probe}",
               "--log-stdout-encoder=console"]
    with upstream_operator("KubeRay operator", command, probe, log):
        yield log


TRAINING_OPERATOR_NAMESPACE = "kubeflow"
"""Where the training operator keeps its webhook certificate's Secret (``MY_POD_NAMESPACE``)."""
TRAINING_OPERATOR_SECRET = "training-operator-webhook-cert"
TRAINING_OPERATOR_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
"""Where the operator's webhook server reads its certificate (fixed in its code): its Deployment
mounts the Secret there. The Trainer's reads the same directory (:data:`TRAINER_CERT_DIR`)."""


def _mount_certificate(cp: ControlPlane, stop: threading.Event) -> None:
    """Do what the kubelet does for the operator's pod — once the Secret holds a serving
    certificate, put it in the directory its webhook server reads — unless a certificate is there
    already: the directory is one for the whole machine, and a Trainer running beside (its webhook
    called by its API server) must keep its own. Nothing calls this operator's webhooks, so any
    certificate there serves it."""
    if all((TRAINING_OPERATOR_CERT_DIR / name).is_file() for name in ("tls.crt", "tls.key")):
        return
    path = f"/api/v1/namespaces/{TRAINING_OPERATOR_NAMESPACE}/secrets/{TRAINING_OPERATOR_SECRET}"
    while not stop.is_set():
        data = (get(cp, path) or {}).get("data") or {}
        if "tls.crt" in data and "tls.key" in data:
            TRAINING_OPERATOR_CERT_DIR.mkdir(parents=True, exist_ok=True)
            for name in ("tls.crt", "tls.key"):
                part = TRAINING_OPERATOR_CERT_DIR / f".{name}.{os.getpid()}"
                part.write_bytes(base64.b64decode(data[name]))
                part.replace(TRAINING_OPERATOR_CERT_DIR / name)
            return
        stop.wait(0.2)


@contextlib.contextmanager
def training_operator(cp: ControlPlane, binary: Path, workdir: Path, *, gang_scheduler: str,
                      schemes: Sequence[str] = ("pytorchjob", "tfjob")) -> Iterator[Path]:
    """The Kubeflow training operator against ``cp`` until the block ends, its controllers of
    ``schemes`` only (their CRDs installed before), gang scheduling with ``gang_scheduler`` (any
    name but ``volcano`` is scheduler-plugins' coscheduling to it: PodGroups
    ``scheduling.x-k8s.io/v1alpha1``, whose CRD must be served). Yields its log file.

    Whatever its flags say, it manages its webhook certificate with cert-controller and is ready
    only once a certificate is in its webhook server's directory: the Secret it keeps it in is
    created here (empty; the operator fills it) and copied to that directory as its Deployment's
    volume would be (:func:`_mount_certificate`). Its webhook server listens on a free port; no
    webhook configuration points at it.
    """
    ns = TRAINING_OPERATOR_NAMESPACE
    if get(cp, f"/api/v1/namespaces/{ns}") is None:
        cp.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    if get(cp, f"/api/v1/namespaces/{ns}/secrets/{TRAINING_OPERATOR_SECRET}") is None:
        cp.request("POST", f"/api/v1/namespaces/{ns}/secrets",
                   {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": TRAINING_OPERATOR_SECRET}})
    probe = f"127.0.0.1:{free_port()}"
    log = workdir / "training-operator.log"
    command = [str(binary), f"--kubeconfig={cp.kubeconfig('admin')}", "--leader-elect=false",
               f"--metrics-bind-address=127.0.0.1:{free_port()}", f"--health-probe-bind-address={probe}",
               f"--webhook-server-port={free_port()}", f"--gang-scheduler-name={gang_scheduler}",
               *(f"--enable-scheme={s}" for s in schemes)]
    stop = threading.Event()
    mount = threading.Thread(target=_mount_certificate, args=(cp, stop), name="training-operator-certs", daemon=True)
    mount.start()
    try:
        with upstream_operator("training operator", command, probe, log, timeout=90.0,
                               env={"MY_POD_NAMESPACE": ns}):
            yield log
    finally:
        stop.set()
        mount.join()


@contextlib.contextmanager
def named_scheduler(cp: ControlPlane, scheduler_name: str, workdir: Path, timeout: float = 60.0) -> Iterator[Path]:
    """A second kube-scheduler (the control plane's binary) with one profile, ``scheduler_name``,
    its default plugins: it binds the pods that name it, as the gang scheduler a Kubeflow operator
    is told about would (no other scheduler here does). Runs as the control plane's scheduler,
    leader election off. Yields its log file."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "scheduler-config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(cp.kubeconfig("scheduler")), "qps": 100, "burst": 200},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name}],
    }))
    log = workdir / "kube-scheduler.log"
    port = free_port()
    kubeconfig = cp.kubeconfig("scheduler")
    process = Process(f"kube-scheduler ({scheduler_name})", [
        str(cp.bin / "kube-scheduler"), f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}"], log)
    process.start()
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # its serving certificate is its own, self-signed

    def ready() -> bool:  # /readyz: its informers and event handlers have synced
        process.check()
        with contextlib.suppress(OSError, urllib.error.URLError), \
                urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=1, context=context) as answer:
            return bool(answer.status == 200)
        return False

    try:
        wait_for(ready, timeout, f"the kube-scheduler serving {scheduler_name!r}")
        yield log
    finally:
        process.stop()


TRAINER_MODULE = "github.com/kubeflow/trainer/v2"
TRAINER_NAMESPACE = "kubeflow-system"
"""The Trainer's namespace when it runs out of a pod (fixed in its code)."""
TRAINER_SECRET = "kubeflow-trainer-webhook-cert"
TRAINER_WEBHOOK_CONFIGURATION = "validator.trainer.kubeflow.org"
TRAINER_SERVICE_DNS = f"kubeflow-trainer-controller-manager.{TRAINER_NAMESPACE}.svc"
TRAINER_CA_NAME = "kubeflow-trainer-ca"
TRAINER_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
"""Where the Trainer's webhook server reads its certificate, and its certificate rotator checks
that it is mounted (fixed in its code)."""


def trainer_crds() -> list[dict[str, Any]]:
    """The Trainer's CRDs (TrainJob, TrainingRuntime, ClusterTrainingRuntime) of the pinned module."""
    return crd_documents(upstream.source_dir("trainer", TRAINER_MODULE) / "manifests" / "base" / "crds")


def _trainer_certificates() -> dict[str, bytes]:
    """``ca.crt``, ``ca.key``, ``tls.crt`` and ``tls.key`` as the Trainer's certificate rotator
    (open-policy-agent/cert-controller) keeps them and accepts them without making new ones: an
    RSA CA (PKCS #1 key) valid for the name ``kubeflow-trainer-ca``, and a serving certificate it
    signed valid for the Service's DNS name, both valid beyond the rotator's 90-day look-ahead.
    The serving certificate is valid for 127.0.0.1 too: the API server calls the webhook there."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def pem_key(key: rsa.RSAPrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())

    def builder(subject: str, issuer: x509.Name, key: rsa.RSAPrivateKey,
                names: list[x509.GeneralName]) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                .issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=365))
                .add_extension(x509.SubjectAlternativeName(names), critical=False))

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TRAINER_CA_NAME)])
    ca = (builder(TRAINER_CA_NAME, ca_name, ca_key, [x509.DNSName(TRAINER_CA_NAME)])
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    serving = (builder(TRAINER_SERVICE_DNS, ca_name, key,
                       [x509.DNSName(TRAINER_SERVICE_DNS), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
               .sign(ca_key, hashes.SHA256()))
    return {"ca.crt": ca.public_bytes(serialization.Encoding.PEM), "ca.key": pem_key(ca_key),
            "tls.crt": serving.public_bytes(serialization.Encoding.PEM), "tls.key": pem_key(key)}


def _trainer_webhooks(port: int, ca_bundle: bytes) -> dict[str, Any]:
    """The Trainer's ValidatingWebhookConfiguration from the pinned module, under the name its
    rotator keeps the caBundle of, each webhook called at ``https://127.0.0.1:<port>``."""
    path = upstream.source_dir("trainer", TRAINER_MODULE) / "manifests" / "base" / "webhook" / "manifests.yaml"
    (config,) = [d for d in yaml.safe_load_all(path.read_text())
                 if d and d.get("kind") == "ValidatingWebhookConfiguration"]
    for hook in config["webhooks"]:
        service = hook["clientConfig"].pop("service")
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{service['path']}",
                                "caBundle": base64.b64encode(ca_bundle).decode()}
    config["metadata"] = {"name": TRAINER_WEBHOOK_CONFIGURATION}
    return dict(config)


@contextlib.contextmanager
def trainer_operator(cp: ControlPlane, binary: Path, workdir: Path) -> Iterator[Path]:
    """The Kubeflow Trainer's controller manager against ``cp`` until the block ends (its CRDs
    installed before), its validating webhooks registered with the API server as its install
    does (TrainJobs and runtimes are refused or admitted by it). Yields its log file.

    Its certificate rotator keeps the webhook certificate in a Secret of namespace
    ``kubeflow-system`` and makes new ones unless that Secret holds valid ones: the Secret is
    created here with certificates it accepts (:func:`_trainer_certificates`), and the serving
    pair is put where its Deployment's volume would put it. Its metrics are off."""
    ns = TRAINER_NAMESPACE
    if get(cp, f"/api/v1/namespaces/{ns}") is None:
        cp.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    certs = _trainer_certificates()
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": TRAINER_SECRET, "namespace": ns},
              "data": {k: base64.b64encode(v).decode() for k, v in certs.items()}}
    cp.apply([secret])
    TRAINER_CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        part = TRAINER_CERT_DIR / f".{name}.{os.getpid()}"
        part.write_bytes(certs[name])
        part.replace(TRAINER_CERT_DIR / name)
    port = free_port()
    webhooks = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{TRAINER_WEBHOOK_CONFIGURATION}"
    if get(cp, webhooks) is not None:
        cp.request("DELETE", webhooks)
    cp.apply([_trainer_webhooks(port, certs["ca.crt"])])
    probe = f"127.0.0.1:{free_port()}"
    log = workdir / "trainer.log"
    command = [str(binary), f"--kubeconfig={cp.kubeconfig('admin')}", "--leader-elect=false",
               "--metrics-bind-address=0", f"--health-probe-bind-address={probe}", f"--webhook-server-port={port}"]
    try:
        with upstream_operator("Trainer", command, probe, log, timeout=90.0):
            yield log
    finally:
        cp.request("DELETE", webhooks)  # with the Trainer gone, its webhooks would refuse every TrainJob write


KARPENTER_NODES = "karpenter.sh/nodepool"
"""The label Karpenter puts on the nodes of its NodePools."""


def karpenter_leftovers(cp: ControlPlane) -> list[str]:
    """Karpenter's NodePools and NodeClaims and its nodes that still exist."""
    pools = get(cp, "/apis/karpenter.sh/v1/nodepools") or {"items": []}
    claims = get(cp, "/apis/karpenter.sh/v1/nodeclaims") or {"items": []}
    nodes = get(cp, f"/api/v1/nodes?labelSelector={KARPENTER_NODES}")["items"]
    return [f"{kind}/{o['metadata']['name']}" for kind, items in
            (("nodepool", pools["items"]), ("nodeclaim", claims["items"]), ("node", nodes)) for o in items]


@contextlib.contextmanager
def karpenter_autoscaler(cp: ControlPlane, binary: Path, workdir: Path, timeout: float = 90.0) -> Iterator[Any]:
    """Karpenter's kwok provider against ``cp`` until the block ends (:mod:`gangq.controlplane.karpenter`:
    its CRDs and the Ready KWOKNodeClass ``default`` installed, GPU instance types). Yields the
    :class:`~gangq.controlplane.karpenter.Karpenter`.

    On exit, while it still runs, the NodePools are deleted and Karpenter takes its nodes away
    (its finalizers on NodeClaims and nodes are removed by it alone); whatever is left after
    ``timeout`` has its finalizers removed and is deleted, and the test fails."""
    from gangq.controlplane import karpenter

    karpenter.install(cp.kubectl, cp.kubeconfig("admin"))
    runner = karpenter.Karpenter(cp.kubeconfig("admin"), workdir, binary=binary)
    runner.start()
    try:
        yield runner
    finally:
        try:
            for pool in (get(cp, "/apis/karpenter.sh/v1/nodepools") or {"items": []})["items"]:
                cp.request("DELETE", f"/apis/karpenter.sh/v1/nodepools/{pool['metadata']['name']}")
            deadline = time.monotonic() + timeout
            while karpenter_leftovers(cp) and time.monotonic() < deadline and runner.popen is not None \
                    and runner.popen.poll() is None:
                time.sleep(0.5)
            left = karpenter_leftovers(cp)
        finally:
            runner.stop()
        if left:
            _force_delete(cp, left)
            raise AssertionError(f"Karpenter left {left} within {timeout:.0f} s of its NodePools' deletion:\n"
                                 f"{runner.tail()}")


def _force_delete(cp: ControlPlane, objects: Sequence[str]) -> None:
    paths = {"nodepool": "/apis/karpenter.sh/v1/nodepools", "nodeclaim": "/apis/karpenter.sh/v1/nodeclaims",
             "node": "/api/v1/nodes"}
    for ref in objects:
        kind, name = ref.split("/", 1)
        with contextlib.suppress(urllib.error.HTTPError):
            cp.request("PATCH", f"{paths[kind]}/{name}", {"metadata": {"finalizers": None}},
                       content_type="application/merge-patch+json")
        with contextlib.suppress(urllib.error.HTTPError):
            cp.request("DELETE", f"{paths[kind]}/{name}")
