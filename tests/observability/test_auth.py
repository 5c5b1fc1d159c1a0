"""The pending-workloads API's authentication and authorization (gangq/observability/auth.py),
against a recorded double of the API server's reviews; the real API server is in
tests/controlplane/test_visibility_auth.py."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gangq.observability.auth import ACCESS_REVIEWS, TOKEN_REVIEWS, Attributes, Guard, RequestHeader, Unauthorized

LQ = Attributes("get", "visibility.gangq.io", "localqueues", "pendingworkloads", "team-a", "user-queue")
CQ = Attributes("get", "visibility.gangq.io", "clusterqueues", "pendingworkloads", name="gpu")


class ApiServer:
    """TokenReview: ``good`` is alice (groups team-a); SubjectAccessReview: alice may read team-a's
    LocalQueues. ``fail`` makes every review raise. Records every review made."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = False

    async def __call__(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((path, body))
        if self.fail:
            raise ConnectionError("the API server is down")
        spec = body["spec"]
        if path == TOKEN_REVIEWS:
            if spec["token"] == "good":
                return {"status": {"authenticated": True, "user": {
                    "username": "alice", "uid": "u-1", "groups": ["team-a", "system:authenticated"],
                    "extra": {"scopes": ["x"]}}}}
            return {"status": {"authenticated": False, "error": "invalid bearer token"}}
        attrs = spec["resourceAttributes"]
        allowed = spec["user"] == "alice" and attrs.get("namespace") == "team-a" and attrs["resource"] == "localqueues"
        return {"status": {"allowed": allowed, "reason": "" if allowed else "no RBAC policy matched"}}

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.calls if p == path)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def no_values(_: str) -> list[str]:
    return []


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_token_is_reviewed_once_per_period_and_its_user_authorized_for_exactly_the_queue() -> None:
    api, clock = ApiServer(), Clock()
    guard = Guard(api, ttl=10.0, clock=clock)

    async def read(attrs: Attributes) -> None:
        user = await guard.authenticate(bearer("good"), no_values, None)
        await guard.authorize(user, attrs)

    for _ in range(5):
        run(read(LQ))
    assert api.count(TOKEN_REVIEWS) == 1 and api.count(ACCESS_REVIEWS) == 1
    (_, review), = [c for c in api.calls if c[0] == ACCESS_REVIEWS]
    assert review["spec"] == {"user": "alice", "groups": ["team-a", "system:authenticated"], "uid": "u-1",
                              "extra": {"scopes": ["x"]},
                              "resourceAttributes": {"verb": "get", "group": "visibility.gangq.io",
                                                     "resource": "localqueues", "subresource": "pendingworkloads",
                                                     "namespace": "team-a", "name": "user-queue"}}
    with pytest.raises(Unauthorized) as refused:
        run(read(CQ))
    assert refused.value.status == 403
    assert "user 'alice' cannot get clusterqueues/pendingworkloads.visibility.gangq.io 'gpu' (cluster-scoped)" \
        in refused.value.message
    assert "namespace" not in api.calls[-1][1]["spec"]["resourceAttributes"]
    with pytest.raises(Unauthorized):
        run(read(CQ))  # a refusal is a decision: cached too
    assert api.count(ACCESS_REVIEWS) == 2
    clock.now += 10.0
    run(read(LQ))
    assert api.count(TOKEN_REVIEWS) == 2 and api.count(ACCESS_REVIEWS) == 3


def test_missing_refused_and_unreviewable_credentials() -> None:
    api, clock = ApiServer(), Clock()
    guard = Guard(api, clock=clock)
    for headers in ({}, {"Authorization": "Basic YTpi"}, bearer("")):
        with pytest.raises(Unauthorized) as none:
            run(guard.authenticate(headers, no_values, None))
        assert none.value.status == 401 and "no credentials" in none.value.message
    assert not api.calls
    with pytest.raises(Unauthorized) as bad:
        run(guard.authenticate(bearer("forged"), no_values, None))
    assert bad.value.status == 401
    api.fail = True
    with pytest.raises(Unauthorized) as down:
        run(guard.authenticate(bearer("good"), no_values, None))
    assert down.value.status == 503 and "TokenReview failed" in down.value.message
    api.fail = False
    user = run(guard.authenticate(bearer("good"), no_values, None))  # the failure was not cached
    assert user.name == "alice"
    api.fail = True
    with pytest.raises(Unauthorized) as unchecked:
        run(guard.authorize(user, LQ))
    assert unchecked.value.status == 503
    api.fail = False
    run(guard.authorize(user, LQ))  # nor was the failed SubjectAccessReview


def test_the_caches_are_bounded() -> None:
    api = ApiServer()
    guard = Guard(api, size=3)
    for i in range(10):
        with pytest.raises(Unauthorized):
            run(guard.authenticate(bearer(f"t{i}"), no_values, None))
    assert len(guard._tokens) == 3
    with pytest.raises(Unauthorized):
        run(guard.authenticate(bearer("t0"), no_values, None))  # evicted: reviewed again
    assert api.count(TOKEN_REVIEWS) == 11


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(cn: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
          *, client: bool = True, days: int = 1) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(issuer[0].subject if issuer else name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=2))
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True))
    if issuer is not None:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


def test_front_proxy_certificates_name_the_user_only_when_signed_by_the_ca_with_an_allowed_name() -> None:
    ca_key, other_key = _key(), _key()
    ca = _cert("front-proxy-ca", ca_key, None)
    other = _cert("front-proxy-ca", other_key, None)  # same name, another key
    data = {"requestheader-client-ca-file": ca.public_bytes(serialization.Encoding.PEM).decode(),
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]'}
    setting = RequestHeader.from_configmap(data)
    assert setting is not None and setting.allowed_names == ("front-proxy-client",)
    api = ApiServer()
    guard = Guard(api, requestheader=setting)
    headers = {"X-Remote-User": "bob", "X-Remote-Group": "team-b", "X-Remote-Extra-Scopes": "s1"}
    values = {"X-Remote-Group": ["team-b", "system:authenticated"], "X-Remote-Extra-Scopes": ["s1"]}
    proxy = _cert("front-proxy-client", _key(), (ca, ca_key))
    user = run(guard.authenticate(headers, lambda h: values.get(h, []), der(proxy)))
    assert (user.name, user.groups, user.extra) == ("bob", ("team-b", "system:authenticated"), (("scopes", ("s1",)),))
    assert not api.calls  # nothing to review: the API server vouches for the user
    refusals = {
        "another CA": (_cert("front-proxy-client", _key(), (other, other_key)), headers, "not signed by"),
        "a name not allowed": (_cert("someone", _key(), (ca, ca_key)), headers, "common name 'someone'"),
        "a server certificate": (_cert("front-proxy-client", _key(), (ca, ca_key), client=False), headers,
                                 "not for client authentication"),
        "an expired one": (_cert("front-proxy-client", _key(), (ca, ca_key), days=-1), headers, "expired"),
        "no user header": (proxy, {"X-Remote-Group": "team-b"}, "without a user header"),
    }
    for what, (cert, given, needle) in refusals.items():
        with pytest.raises(Unauthorized) as refused:
            run(guard.authenticate(given, no_values, der(cert)))
        assert refused.value.status == 401 and needle in refused.value.message, what
    guard.requestheader = None
    with pytest.raises(Unauthorized) as unknown:
        run(guard.authenticate(headers, no_values, der(proxy)))
    assert "no requestheader client CA" in unknown.value.message
    assert RequestHeader.from_configmap({"client-ca-file": "x"}) is None
    with pytest.raises(ValueError, match="requestheader-allowed-names"):
        RequestHeader.from_configmap({**data, "requestheader-allowed-names": "front-proxy-client"})


def test_front_proxy_headers_sent_twice_are_one_name_with_both_values() -> None:
    from multidict import CIMultiDict

    ca_key = _key()
    ca = _cert("front-proxy-ca", ca_key, None)
    setting = RequestHeader((ca,))
    headers = CIMultiDict([("X-Remote-User", "bob"), ("X-Remote-Group", "a"), ("X-Remote-Group", "b"),
                           ("X-Remote-Extra-Team%2fName", "x"), ("x-remote-extra-team%2fname", "y")])
    proxy = _cert("anyone", _key(), (ca, ca_key))  # no allowed names listed: any name
    user = run(Guard(ApiServer(), requestheader=setting).authenticate(headers, headers.getall, der(proxy)))
    assert user.groups == ("a", "b") and user.extra == (("team/name", ("x", "y")),)
