"""Who may read the pending-workloads API: authentication and authorization delegated to the
Kubernetes API server, as an aggregated API server does it.

A request is authenticated by one of two credentials:

- **the API server's front-proxy client certificate** (a request kube-apiserver forwards for an
  APIService): a TLS client certificate signed by the requestheader client CA, whose common name
  is one of the allowed names (any name when none are listed); the user is then the one the
  request headers name (``X-Remote-User``, ``X-Remote-Group``, ``X-Remote-Extra-*``, or the
  headers the API server's ``extension-apiserver-authentication`` ConfigMap lists). The headers
  are believed only with such a certificate: anyone else could write them.
- **a bearer token**, checked with a TokenReview (``authentication.k8s.io/v1``).

and authorized with a SubjectAccessReview (``authorization.k8s.io/v1``) of the user for the
request's attributes (:class:`Attributes`). No credentials, or ones the API server does not
accept, answer 401; a refused review 403; a review that could not be made 503 (never an allow).

Decisions (a token's user, a user's access) are kept :attr:`Guard.ttl` seconds in bounded caches,
so that a busy ``gangq queue`` costs the API server a review per user and queue per period, not per
request. A failed review is never cached: the next request asks again.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar
from urllib.parse import unquote

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

TOKEN_REVIEWS: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
DEFAULT_TTL: Final = 10.0
DEFAULT_SIZE: Final = 4096

K = TypeVar("K")
V = TypeVar("V")


class Unauthorized(Exception):
    """The request carries no credentials the API server accepts (401), or may not do what it asks
    (403), or its credentials could not be checked (503)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class User:
    """An authenticated user, as TokenReview and SubjectAccessReview spell one."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def review_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"user": self.name, "groups": list(self.groups)}
        if self.uid:
            spec["uid"] = self.uid
        if self.extra:
            spec["extra"] = {k: list(v) for k, v in self.extra}
        return spec


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do, as a SubjectAccessReview's ``resourceAttributes``."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"verb": self.verb, "group": self.group, "resource": self.resource}
        for key, value in (("subresource", self.subresource), ("namespace", self.namespace), ("name", self.name)):
            if value:
                out[key] = value
        return out

    def describe(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f" in namespace {self.namespace!r}" if self.namespace else " (cluster-scoped)"
        return f"{self.verb} {what}.{self.group} {self.name!r}{where}"


class Reviews(Protocol):
    """Creates a review object at ``path`` and returns the API server's answer; raises on failure
    (any exception: the decision is then 503, never an allow)."""

    def __call__(self, path: str, body: dict[str, Any]) -> Awaitable[dict[str, Any]]: ...


class TTLCache(Generic[K, V]):
    """At most ``size`` entries, each kept ``ttl`` seconds; the oldest goes first when full."""

    def __init__(self, ttl: float, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.size = size
        self.clock = clock
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        hit = self._data.get(key)
        if hit is None:
            return None
        if self.clock() - hit[0] >= self.ttl:
            del self._data[key]
            return None
        return hit[1]

    def put(self, key: K, value: V) -> None:
        if self.ttl <= 0:
            return
        self._data.pop(key, None)
        self._data[key] = (self.clock(), value)
        while len(self._data) > self.size:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


@dataclass(frozen=True)
class RequestHeader:
    """The front-proxy settings of the API server (its ``extension-apiserver-authentication``
    ConfigMap, or given): the CA that signs its client certificate, the allowed common names,
    and the headers that name the user."""

    cas: tuple[x509.Certificate, ...]
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)
    uid_headers: tuple[str, ...] = ()

    @property
    def ca_pem(self) -> str:
        from cryptography.hazmat.primitives import serialization

        return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in self.cas)

    @classmethod
    def from_configmap(cls, data: Mapping[str, str]) -> RequestHeader | None:
        """From the ``data`` of ``kube-system/extension-apiserver-authentication``; None when it
        has no requestheader CA (the API server runs without a front proxy). Raises ValueError
        naming the key that cannot be read."""
        pem = data.get("requestheader-client-ca-file")
        if not pem:
            return None
        try:
            cas = tuple(x509.load_pem_x509_certificates(pem.encode()))
        except ValueError as err:
            raise ValueError(f"requestheader-client-ca-file: not PEM certificates ({err})") from None

        def names(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            raw = data.get(key)
            if raw is None:
                return default
            try:
                value = json.loads(raw)
            except ValueError:
                raise ValueError(f"{key}: not a JSON list: {raw!r}") from None
            if value is None:
                return ()
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{key}: not a JSON list of strings: {raw!r}")
            return tuple(value)

        return cls(
            cas,
            allowed_names=names("requestheader-allowed-names", ()),
            username_headers=names("requestheader-username-headers", ("X-Remote-User",)),
            group_headers=names("requestheader-group-headers", ("X-Remote-Group",)),
            extra_prefixes=names("requestheader-extra-headers-prefix", ("X-Remote-Extra-",)),
            uid_headers=names("requestheader-uid-headers", ()),
        )

    def check(self, der: bytes, now: datetime.datetime | None = None) -> str:
        """The common name of client certificate ``der`` when it is a front-proxy certificate:
        signed by one of :attr:`cas`, valid now, for client authentication, with an allowed name.
        Raises :class:`Unauthorized` (401) saying which of these fails."""
        cert = x509.load_der_x509_certificate(der)
        now = now or datetime.datetime.now(datetime.UTC)
        if not any(_signed_by(cert, ca) for ca in self.cas):
            raise Unauthorized(401, "the client certificate is not signed by the requestheader client CA")
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            raise Unauthorized(401, "the front-proxy client certificate has expired or is not valid yet")
        try:
            usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
                raise Unauthorized(401, "the front-proxy client certificate is not for client authentication")
        except x509.ExtensionNotFound:
            pass
        cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        cn = str(cns[0].value) if cns else ""
        if self.allowed_names and cn not in self.allowed_names:
            raise Unauthorized(401, f"the front-proxy client certificate's common name {cn!r} is not one of the "
                                    f"requestheader allowed names {list(self.allowed_names)}")
        return cn

    def user(self, headers: Mapping[str, str], all_values: Callable[[str], Sequence[str]]) -> User:
        """The user the request headers name (after :meth:`check`); 401 when none does."""
        name = next((headers[h] for h in self.username_headers if headers.get(h)), "")
        if not name:
            raise Unauthorized(401, f"a front-proxy request without a user header ({', '.join(self.username_headers)})")
        groups = tuple(g for h in self.group_headers for g in all_values(h) if g)
        uid = next((headers[h] for h in self.uid_headers if headers.get(h)), "")
        extra: dict[str, list[str]] = {}
        lowered = [p.lower() for p in self.extra_prefixes]
        for key in dict.fromkeys(headers):  # a header sent twice is one key with two values
            prefix = next((p for p in lowered if key.lower().startswith(p)), None)
            if prefix is not None:
                extra.setdefault(unquote(key[len(prefix):]).lower(), []).extend(all_values(key))
        return User(name, groups, uid, tuple(sorted((k, tuple(v)) for k, v in extra.items())))


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    if cert.issuer != ca.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _user_of(status: Mapping[str, Any]) -> User:
    raw = status.get("user") or {}
    extra = raw.get("extra") or {}
    return User(
        str(raw.get("username", "")),
        tuple(str(g) for g in raw.get("groups") or ()),
        str(raw.get("uid", "")),
        tuple(sorted((str(k), tuple(str(x) for x in (v or ()))) for k, v in extra.items())),
    )


@dataclass
class Guard:
    """Authentication and authorization of one server's requests (see the module docstring).

    ``reviews`` creates TokenReviews and SubjectAccessReviews; ``requestheader`` is the front-proxy
    setting (None: front-proxy certificates are not accepted), replaced when it changes."""

    reviews: Reviews
    ttl: float = DEFAULT_TTL
    size: int = DEFAULT_SIZE
    clock: Callable[[], float] = time.monotonic
    requestheader: RequestHeader | None = None
    _tokens: TTLCache[str, tuple[User | None]] = field(init=False)
    _access: TTLCache[tuple[User, Attributes], tuple[bool, str]] = field(init=False)

    def __post_init__(self) -> None:
        self._tokens = TTLCache(self.ttl, self.size, self.clock)
        self._access = TTLCache(self.ttl, self.size, self.clock)

    async def authenticate(self, headers: Mapping[str, str], all_values: Callable[[str], Sequence[str]],
                           peer_cert: bytes | None) -> User:
        """The request's user (see the module docstring); :class:`Unauthorized` otherwise."""
        if peer_cert is not None:
            if self.requestheader is None:
                raise Unauthorized(401, "a client certificate, but no requestheader client CA is known "
                                        "(kube-system/extension-apiserver-authentication)")
            self.requestheader.check(peer_cert)
            return self.requestheader.user(headers, all_values)
        auth = headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized(401, "no credentials: send a bearer token (Authorization: Bearer ...) or reach "
                                    "the API through the Kubernetes API server")
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._tokens.get(key)
        if cached is not None:
            if cached[0] is None:
                raise Unauthorized(401, "the bearer token was not accepted by the API server")
            return cached[0]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        try:
            answer = await self.reviews(TOKEN_REVIEWS, body)
        except Exception as err:
            log.warning("visibility: a TokenReview failed: %s", err)
            raise Unauthorized(503, f"the bearer token could not be checked (TokenReview failed: {err}); "
                                    "retry") from None
        status = answer.get("status") or {}
        if not status.get("authenticated"):
            self._tokens.put(key, (None,))
            reason = status.get("error") or "not authenticated"
            log.info("visibility: a bearer token was refused by the API server: %s", reason)
            raise Unauthorized(401, "the bearer token was not accepted by the API server")
        user = _user_of(status)
        self._tokens.put(key, (user,))
        return user

    async def authorize(self, user: User, attributes: Attributes) -> None:
        """Return when ``user`` may do ``attributes``; :class:`Unauthorized` 403 (refused) or 503
        (the review failed) otherwise."""
        key = (user, attributes)
        decision = self._access.get(key)
        if decision is None:
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                    "spec": {**user.review_spec(), "resourceAttributes": attributes.to_json()}}
            try:
                answer = await self.reviews(ACCESS_REVIEWS, body)
            except Exception as err:
                log.warning("visibility: a SubjectAccessReview for %s failed: %s", user.name, err)
                raise Unauthorized(503, f"access could not be checked (SubjectAccessReview failed: {err}); "
                                        "retry") from None
            status = answer.get("status") or {}
            decision = (status.get("allowed") is True and not status.get("denied"),
                        str(status.get("reason") or status.get("evaluationError") or ""))
            self._access.put(key, decision)
        allowed, reason = decision
        if not allowed:
            because = f": {reason}" if reason else ""
            raise Unauthorized(403, f"user {user.name!r} cannot {attributes.describe()}{because}")


__all__ = ["ACCESS_REVIEWS", "TOKEN_REVIEWS", "Attributes", "Guard", "RequestHeader", "Reviews", "TTLCache",
           "Unauthorized", "User"]
