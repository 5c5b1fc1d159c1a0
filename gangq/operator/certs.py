"""The admission webhook's serving certificate: from files an admin provides, or kept by gangq.

Two sources, one :class:`ServingContext` (the TLS context the webhook server answers with; a new
certificate is loaded into it in place, so connections made after a rotation get the new one and
none is dropped):

- :class:`DirCertificates` — ``--webhook-cert-dir`` holds ``tls.crt`` and ``tls.key`` (a mounted
  Secret, e.g. written by cert-manager, whose CA injector keeps the caBundle): used as they are,
  read again every :data:`DIR_CHECK_SECONDS` and reloaded when their content changed (a kubelet
  updates a mounted Secret by swapping a symlink, so their content is what to compare).
- :class:`SecretCertificates` — gangq keeps a CA and a serving certificate for the webhook
  Service's DNS names (and any extra ``hosts``) in one Secret, so that every replica serves the
  same certificate, and writes the CA into the ``caBundle`` of the webhook configurations. Every
  replica runs it (a standby serves the webhook too): the Secret is written with its
  resourceVersion, so of two replicas rotating at once one wins and the other adopts its result.

Rotation (:func:`plan`): the serving certificate lives :data:`SERVING_DAYS` and is replaced at
two thirds of its life, and the CA lives :data:`CA_DAYS`, replaced at two thirds of its own; a
replaced CA stays in the caBundle until it expires, so a replica still serving a certificate it
signed is trusted until it has read the new Secret. (Kueue's internal certificate management,
open-policy-agent/cert-controller, issues a 10-year CA and 1-year serving certificates, checks
every 12 hours and renews what would not be valid 90 days later; the same lives here, renewed
earlier, and checked every :data:`SECRET_CHECK_SECONDS`, which also puts a caBundle back that a
re-created configuration lost.)
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import logging
import shutil
import ssl
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gangq.api.meta import Meta
from gangq.operator.config import WebhookConfig
from gangq.operator.kube import JSON_PATCH, ApiError, KubeClient, resource_path

log = logging.getLogger(__name__)

CA_DAYS: Final = 3650
SERVING_DAYS: Final = 365
RENEW_AT: Final = 2 / 3
"""The part of a certificate's life after which it is replaced."""
BACKDATE: Final = datetime.timedelta(hours=1)
"""Certificates are valid from an hour before they were made: a clock behind ours still accepts them."""
DIR_CHECK_SECONDS: Final = 10.0
SECRET_CHECK_SECONDS: Final = 60.0
WEBHOOK_KINDS: Final = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
_CA_CERT, _CA_KEY, _TLS_CERT, _TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names the API server may reach a webhook Service by (it verifies ``<svc>.<ns>.svc``)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


@dataclass(frozen=True)
class KeyPair:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


@dataclass(frozen=True)
class Bundle:
    """What the Secret holds: the CA that signs (and its key), the serving certificate and key, and
    the CA certificates the API server is to trust — the signing CA first, then a replaced one that
    is still valid."""

    ca: KeyPair
    serving: KeyPair
    trusted: tuple[x509.Certificate, ...]

    @property
    def ca_bundle(self) -> bytes:
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in self.trusted)

    def secret_data(self) -> dict[str, str]:
        raw = {_CA_CERT: self.ca_bundle, _CA_KEY: self.ca.key_pem, _TLS_CERT: self.serving.cert_pem,
               _TLS_KEY: self.serving.key_pem}
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}

    @classmethod
    def from_secret(cls, secret: dict[str, Any] | None) -> Bundle | None:
        """The bundle in a Secret, or None when it holds none or one that cannot be read."""
        data = (secret or {}).get("data") or {}
        try:
            raw = {k: base64.b64decode(data[k]) for k in (_CA_CERT, _CA_KEY, _TLS_CERT, _TLS_KEY)}
            trusted = tuple(x509.load_pem_x509_certificates(raw[_CA_CERT]))
            ca_key = serialization.load_pem_private_key(raw[_CA_KEY], None)
            key = serialization.load_pem_private_key(raw[_TLS_KEY], None)
            cert = x509.load_pem_x509_certificate(raw[_TLS_CERT])
        except (KeyError, ValueError, TypeError):
            return None
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey) or not isinstance(key, ec.EllipticCurvePrivateKey):
            return None
        return cls(KeyPair(trusted[0], ca_key), KeyPair(cert, key), trusted)


def _validity(cert: x509.Certificate) -> tuple[datetime.datetime, datetime.datetime]:
    return cert.not_valid_before_utc, cert.not_valid_after_utc


def renew_time(cert: x509.Certificate) -> datetime.datetime:
    """When ``cert`` is to be replaced: at :data:`RENEW_AT` of its life."""
    start, end = _validity(cert)
    return start + (end - start) * RENEW_AT


def _names_of(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n) for n in san.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in san.get_values_for_type(x509.IPAddress)}


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    if cert.issuer != ca.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: KeyPair | None, now: datetime.datetime,
          days: int, names: Sequence[str] = ()) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.cert.subject if issuer is not None else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if issuer is None:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    else:
        sans: list[x509.GeneralName] = []
        for host in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        builder = (builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
    return builder.sign(issuer.key if issuer is not None else key, hashes.SHA256())


def new_ca(now: datetime.datetime, days: int = CA_DAYS) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    return KeyPair(_cert("gangq-webhook-ca", key, None, now, days), key)


def issue(ca: KeyPair, names: Sequence[str], now: datetime.datetime, days: int = SERVING_DAYS) -> KeyPair:
    """A serving certificate for ``names`` (DNS names or IP addresses), signed by ``ca``."""
    key = ec.generate_private_key(ec.SECP256R1())
    return KeyPair(_cert(names[0] if names else "gangq-webhook", key, ca, now, days, names), key)


def plan(current: Bundle | None, names: Sequence[str], now: datetime.datetime) -> Bundle | None:
    """The bundle to store instead of ``current``, or None to keep it.

    A new CA when there is none, or at two thirds of its life (the old one stays trusted until it
    expires); a new serving certificate with a new CA, at two thirds of its own life, when it
    lacks one of ``names``, or when the CA did not sign it."""
    if current is None or now >= current.ca.cert.not_valid_after_utc:
        ca = new_ca(now)
        return Bundle(ca, issue(ca, names, now), (ca.cert,))
    if now >= renew_time(current.ca.cert):
        ca = new_ca(now)
        old = tuple(c for c in current.trusted if c.not_valid_after_utc > now)
        return Bundle(ca, issue(ca, names, now), (ca.cert, *old))
    serving = current.serving.cert
    if now >= renew_time(serving) or not set(names) <= _names_of(serving) or not _signed_by(serving, current.ca.cert):
        trusted = tuple(c for c in current.trusted if c.not_valid_after_utc > now)
        return Bundle(current.ca, issue(current.ca, names, now), trusted)
    return None


def write_new_dir(directory: Path, names: Sequence[str], now: datetime.datetime) -> Bundle:
    """A new CA and a serving certificate for ``names`` written into ``directory`` as a
    certificate directory (``tls.crt``, ``tls.key`` readable by its owner alone, and ``ca.crt``
    for the clients to trust), for a server on this machine (the quick start's). Returns them."""
    bundle = Bundle(ca := new_ca(now), issue(ca, names, now), (ca.cert,))
    directory.mkdir(parents=True, exist_ok=True)
    key = directory / _TLS_KEY
    key.touch(mode=0o600)
    key.write_bytes(bundle.serving.key_pem)
    (directory / _TLS_CERT).write_bytes(bundle.serving.cert_pem)
    (directory / _CA_CERT).write_bytes(bundle.ca_bundle)
    return bundle


class ServingContext:
    """The webhook server's TLS context; :meth:`load` puts a certificate in it (in place)."""

    def __init__(self) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.loaded: bytes | None = None  # the certificate served (PEM)
        self._dir: Path | None = None

    def load_files(self, cert: Path, key: Path) -> None:
        self.context.load_cert_chain(cert, key)

    def load(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Serve this certificate (no-op when it is already served). The ssl module reads
        certificates from files only: they go to a private temporary directory."""
        if cert_pem == self.loaded:
            return
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="gangq-webhook-"))
        cert, key = self._dir / _TLS_CERT, self._dir / _TLS_KEY
        key.touch(mode=0o600)
        key.write_bytes(key_pem)
        cert.write_bytes(cert_pem)
        self.context.load_cert_chain(cert, key)
        self.loaded = cert_pem

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


class Certificates(Protocol):
    """A source of the serving certificate: :meth:`refresh` loads it (again when it changed)."""

    serving: ServingContext
    interval: float

    async def refresh(self) -> None: ...


class DirCertificates:
    """``tls.crt`` and ``tls.key`` of a directory, reloaded when their content changes."""

    interval = DIR_CHECK_SECONDS

    def __init__(self, directory: str | Path, serving: ServingContext | None = None) -> None:
        self.directory = Path(directory)
        self.serving = serving or ServingContext()

    async def refresh(self) -> None:
        cert, key = self.directory / _TLS_CERT, self.directory / _TLS_KEY
        try:
            pem = cert.read_bytes()
        except OSError as err:
            raise OSError(f"webhook certificate {cert}: {err.strerror or err}") from err
        if pem != self.serving.loaded:
            self.serving.load_files(cert, key)
            self.serving.loaded = pem
            log.info("webhook: serving the certificate of %s", cert)


class SecretCertificates:
    """A CA and a serving certificate kept in a Secret, the CA in the webhook configurations'
    caBundle (see the module docstring). Writes go through ``client``."""

    interval = SECRET_CHECK_SECONDS

    def __init__(self, client: KubeClient, config: WebhookConfig, serving: ServingContext | None = None,
                 clock: Any = time.time) -> None:
        self.client = client
        self.config = config
        self.names = [*service_names(config.service_name, config.namespace), *config.hosts]
        self.serving = serving or ServingContext()
        self.clock = clock
        self.path = resource_path("", "v1", "secrets", config.namespace, config.secret_name)
        self._missing: set[str] = set()  # webhook configurations reported not found

    @property
    def secret_ref(self) -> str:
        return f"Secret {self.config.namespace}/{self.config.secret_name}"

    async def refresh(self) -> None:
        now = datetime.datetime.fromtimestamp(self.clock(), datetime.UTC)
        secret = await self._read()
        bundle = Bundle.from_secret(secret)
        new = plan(bundle, self.names, now)
        if new is not None:
            written = await self._write(secret, new)
            bundle = new if written else Bundle.from_secret(await self._read())
            if bundle is None:
                raise RuntimeError(f"{self.secret_ref}: holds no readable certificate after a conflicting write")
        assert bundle is not None
        if bundle.serving.cert_pem != self.serving.loaded:
            self.serving.load(bundle.serving.cert_pem, bundle.serving.key_pem)
            log.info("webhook: serving the certificate of %s (renewed at %s)", self.secret_ref,
                     renew_time(bundle.serving.cert).isoformat(timespec="seconds"))
        await self._inject(base64.b64encode(bundle.ca_bundle).decode())

    async def _read(self) -> dict[str, Any] | None:
        try:
            return await self.client.get(self.path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    async def _write(self, secret: dict[str, Any] | None, bundle: Bundle) -> bool:
        """Store ``bundle``; False when another replica wrote first (its bundle is to be used)."""
        cfg = self.config
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                                "metadata": {"name": cfg.secret_name, "namespace": cfg.namespace,
                                             "labels": {"app.kubernetes.io/name": "gangq",
                                                        "app.kubernetes.io/component": "webhook"}},
                                "data": bundle.secret_data()}
        try:
            if secret is None:
                await self.client.create(resource_path("", "v1", "secrets", cfg.namespace), body, want_body=False)
            else:
                meta = {k: v for k, v in Meta(secret).raw.items() if k != "managedFields"}
                body["metadata"] = meta  # with its resourceVersion: a concurrent write is a 409
                body["type"] = secret.get("type") or "Opaque"
                await self.client.replace(self.path, body)
        except ApiError as err:
            if err.status == 409:
                log.info("webhook: %s was written by another replica meanwhile: using its certificate", self.secret_ref)
                return False
            if err.status == 403:
                raise RuntimeError(f"{self.secret_ref}: {err.message} (the webhook component of the install "
                                   "ships this Secret and the Role that lets gangq update it)") from err
            raise
        log.info("webhook: stored a new serving certificate in %s", self.secret_ref)
        return True

    async def _inject(self, ca_bundle: str) -> None:
        """Put the CA into every webhook entry of the configurations whose caBundle differs."""
        name = self.config.configuration_name
        for plural in WEBHOOK_KINDS:
            path = resource_path("admissionregistration.k8s.io", "v1", plural, name=name)
            try:
                current = await self.client.get(path)
            except ApiError as err:
                if err.status != 404:
                    raise
                if plural not in self._missing:
                    self._missing.add(plural)
                    log.info("webhook: %s %r does not exist: nothing calls that webhook", plural, name)
                continue
            self._missing.discard(plural)
            ops: list[dict[str, Any]] = []
            for i, hook in enumerate(current.get("webhooks") or []):
                if ((hook.get("clientConfig") or {}).get("caBundle") or "") != ca_bundle:
                    ops += [{"op": "test", "path": f"/webhooks/{i}/name", "value": hook.get("name")},
                            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_bundle}]
            if ops:
                await self.client.patch(path, ops, JSON_PATCH, want_body=False)
                log.info("webhook: wrote the CA into the caBundle of %s %r", plural, name)


def certificates(client: KubeClient, config: WebhookConfig) -> DirCertificates | SecretCertificates:
    """The source the configuration asks for: ``certDir`` when set, else the Secret."""
    if config.cert_dir:
        return DirCertificates(config.cert_dir)
    return SecretCertificates(client, config)
