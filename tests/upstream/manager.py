"""The upstream JobSet controller manager (``sigs.k8s.io/jobset``'s ``main.go``, built from
``hack/upstream/jobset`` by :func:`gangq.controlplane.upstream.build_jobset`) run out of cluster
against a real control plane.

It runs as the control plane's admin, with leader election off, its metrics (HTTPS) and health
probes on free loopback ports, and its webhooks off: no Mutating- or ValidatingWebhookConfiguration
points at it, so the API server never calls them. The manager still starts its webhook server
(it registers the JobSet and pod webhooks unconditionally), so it gets a self-signed serving
certificate and a loopback port too, and so does the metrics server (which reads its certificate
from a directory once internal certificate management is off).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gangq.controlplane.launcher import ControlPlane
from gangq.sandbox.runtime import free_port

from .operators import upstream_operator


def _self_signed(directory: Path) -> Path:
    """``tls.crt`` and ``tls.key`` for 127.0.0.1 in ``directory``, as controller-runtime's servers read them."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jobset-manager")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    (directory / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    return directory


def configuration(workdir: Path) -> dict[str, object]:
    """The manager's ``--config`` (``config.jobset.x-k8s.io/v1alpha1`` Configuration)."""
    certs = str(_self_signed(workdir / "certs"))
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": free_port(), "certDir": certs},
        "metrics": {"bindAddress": f"127.0.0.1:{free_port()}", "certDir": certs},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
    }


@contextlib.contextmanager
def upstream_jobset_controller(cp: ControlPlane, binary: Path, workdir: Path,
                               timeout: float = 60.0) -> Iterator[Path]:
    """Run ``binary`` (the upstream manager) against ``cp`` until the block ends; waits until its
    readiness probe answers. Yields its log file."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = configuration(workdir)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    probe = config["health"]["healthProbeBindAddress"]  # type: ignore[index]
    log = workdir / "jobset-manager.log"
    command = [str(binary), f"--kubeconfig={cp.kubeconfig('admin')}", f"--config={workdir / 'config.yaml'}",
               "--zap-log-level=info"]
    with upstream_operator("JobSet controller", command, str(probe), log, timeout):
        yield log
