"""Credentials of a local control plane: a CA, the API server's serving certificate, the
service-account signing key, bearer tokens per identity, and kubeconfigs.

Identities authenticate with static bearer tokens (kube-apiserver's ``--token-auth-file``): one
per component, each a user that the API server's bootstrap RBAC already grants what it needs
(``system:kube-controller-manager``, ``system:kube-scheduler``), an admin in ``system:masters``,
and gangq's controller as its ServiceAccount user, so that the ClusterRoleBinding of the install
manifests (``deploy/base/rbac.yaml``) is exactly what it may do. The admin also has a client
certificate (kube-apiserver's ``--client-ca-file`` is the CA): a program that copies only the
certificates of its kubeconfig, as controller-runtime's envtest does for the kubeconfig it hands
to Kueue's minimalkueue, still authenticates (:meth:`Pki.kubeconfig` with ``embed=True``).

A second CA, the front-proxy CA, signs the client certificate kube-apiserver presents when it
forwards a request to an aggregated API server (``--proxy-client-cert-file``), and is its
requestheader client CA (``--requestheader-client-ca-file``, published in
``kube-system/extension-apiserver-authentication``), as kubeadm sets a cluster up.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

# The common name of kube-apiserver's front-proxy client certificate, its only requestheader allowed name.
FRONT_PROXY_CLIENT = "front-proxy-client"

# The namespace and ServiceAccount that deploy/base runs the controller as.
CONTROLLER_NAMESPACE = "gangq-system"
CONTROLLER_SERVICE_ACCOUNT = "gangq-controller"
CONTROLLER_USER = f"system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_SERVICE_ACCOUNT}"


@dataclass(frozen=True)
class Identity:
    """A user of the API server: its name, groups and bearer token."""

    name: str
    groups: tuple[str, ...]
    token: str


def _identities() -> dict[str, Identity]:
    sa = CONTROLLER_USER
    return {
        "admin": Identity("gangq-admin", ("system:masters",), secrets.token_hex(16)),
        "controller-manager": Identity("system:kube-controller-manager", (), secrets.token_hex(16)),
        "scheduler": Identity("system:kube-scheduler", (), secrets.token_hex(16)),
        "kwok": Identity("gangq-kwok", ("system:masters",), secrets.token_hex(16)),
        "controller": Identity(
            sa, ("system:serviceaccounts", f"system:serviceaccounts:{CONTROLLER_NAMESPACE}"), secrets.token_hex(16)
        ),
    }


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _pem_key(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    pem, pkcs8 = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    return key.private_bytes(pem, pkcs8, serialization.NoEncryption())


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    ips: tuple[str, ...] = (),
    dns: tuple[str, ...] = (),
    organizations: tuple[str, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    name = x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer is not None else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ips or dns:
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


class Pki:
    """The files of one control plane's credentials, written under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.identities = _identities()
        self.ca_cert = directory / "ca.crt"
        self.serving_cert = directory / "apiserver.crt"
        self.serving_key = directory / "apiserver.key"
        self.sa_key = directory / "sa.key"
        self.sa_pub = directory / "sa.pub"
        self.token_file = directory / "tokens.csv"
        self.admin_cert = directory / "admin.crt"
        self.admin_key = directory / "admin.key"
        self.front_proxy_ca = directory / "front-proxy-ca.crt"
        self.front_proxy_ca_key = directory / "front-proxy-ca.key"
        self.front_proxy_client_cert = directory / "front-proxy-client.crt"
        self.front_proxy_client_key = directory / "front-proxy-client.key"

    def write(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _cert("gangq-control-plane-ca", ca_key, None, ca_key, ca=True)
        key = ec.generate_private_key(ec.SECP256R1())
        serving = _cert(
            "kube-apiserver", key, ca, ca_key, ca=False,
            ips=("127.0.0.1", "10.0.0.1"),
            dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        )
        self.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        self.serving_cert.write_bytes(serving.public_bytes(serialization.Encoding.PEM))
        self.serving_key.write_bytes(_pem_key(key))
        self.serving_key.chmod(0o600)
        admin = self.identities["admin"]
        admin_key = ec.generate_private_key(ec.SECP256R1())
        client = _cert(admin.name, admin_key, ca, ca_key, ca=False, organizations=admin.groups)
        self.admin_cert.write_bytes(client.public_bytes(serialization.Encoding.PEM))
        self.admin_key.write_bytes(_pem_key(admin_key))
        self.admin_key.chmod(0o600)
        proxy_ca_key = ec.generate_private_key(ec.SECP256R1())
        proxy_ca = _cert("gangq-front-proxy-ca", proxy_ca_key, None, proxy_ca_key, ca=True)
        proxy_key = ec.generate_private_key(ec.SECP256R1())
        proxy_client = _cert(FRONT_PROXY_CLIENT, proxy_key, proxy_ca, proxy_ca_key, ca=False)
        self.front_proxy_ca.write_bytes(proxy_ca.public_bytes(serialization.Encoding.PEM))
        self.front_proxy_ca_key.write_bytes(_pem_key(proxy_ca_key))
        self.front_proxy_ca_key.chmod(0o600)
        self.front_proxy_client_cert.write_bytes(proxy_client.public_bytes(serialization.Encoding.PEM))
        self.front_proxy_client_key.write_bytes(_pem_key(proxy_key))
        self.front_proxy_client_key.chmod(0o600)
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key.write_bytes(_pem_key(sa))
        self.sa_key.chmod(0o600)
        self.sa_pub.write_bytes(
            sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        lines = []
        for i, ident in enumerate(self.identities.values()):
            groups = ",".join(ident.groups)
            line = f"{ident.token},{ident.name},uid-{i}"
            lines.append(f'{line},"{groups}"' if groups else line)
        self.token_file.write_text("\n".join(lines) + "\n")
        self.token_file.chmod(0o600)

    def kubeconfig(
        self, path: Path, server: str, who: str, *, namespace: str = "default", embed: bool = False
    ) -> Path:
        """A kubeconfig for identity ``who`` (a key of :attr:`identities`) that trusts the CA.
        ``embed``: the CA and the client certificate inline, no token (the admin only)."""
        ident = self.identities[who]
        name = "gangq-real"
        cluster: dict[str, str] = {"server": server, "certificate-authority": str(self.ca_cert)}
        user: dict[str, str] = {"token": ident.token}
        if embed:
            if who != "admin":
                raise ValueError(f"only the admin has a client certificate, not {who}")
            cluster = {"server": server, "certificate-authority-data": _b64(self.ca_cert)}
            user = {"client-certificate-data": _b64(self.admin_cert), "client-key-data": _b64(self.admin_key)}
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": ident.name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": ident.name, "namespace": namespace}}],
            "current-context": name,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        path.chmod(0o600)
        return path
