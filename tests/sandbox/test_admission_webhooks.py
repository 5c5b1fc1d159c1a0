"""The sandbox calls admission webhooks as kube-apiserver does (gangq/sandbox/admission.py).

A small HTTPS webhook server runs in the test (its own thread and loop, a self-signed CA given to the
configurations as caBundle); each test registers Mutating/ValidatingWebhookConfigurations whose
webhooks point at one of its paths, sets what each path answers, and checks what the sandbox sent
and what it did with the answers.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import http.client
import ipaddress
import itertools
import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gangq.controlplane.processes import free_port
from gangq.sandbox.runtime import Sandbox

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
MUTATING = f"{ADMISSION}/mutatingwebhookconfigurations"
VALIDATING = f"{ADMISSION}/validatingwebhookconfigurations"
JOB_RULE = {"operations": ["CREATE", "UPDATE"], "apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"]}
Answer = Callable[[dict[str, Any]], dict[str, Any]]


# ------------------------------------------------------------------------------------- the webhook


def _certificates(directory: Path) -> tuple[Path, Path, str]:
    """A CA and a serving certificate for 127.0.0.1: (cert file, key file, the CA as a caBundle)."""
    now = datetime.datetime.now(datetime.UTC)

    def build(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None,
              issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (
            x509.CertificateBuilder().subject_name(name)
            .issuer_name(issuer.subject if issuer is not None else name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = build("gangq-webhook-test-ca", ca_key, None, ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = build("127.0.0.1", key, ca, ca_key, ca=False)
    cert_file, key_file = directory / "webhook.crt", directory / "webhook.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file, base64.b64encode(ca.public_bytes(serialization.Encoding.PEM)).decode()


@dataclass(frozen=True)
class Call:
    """One AdmissionReview the webhook server received on `path` (the query string as sent)."""

    path: str
    query: str
    review: dict[str, Any]

    @property
    def request(self) -> dict[str, Any]:
        req: dict[str, Any] = self.review["request"]
        return req


def allow(request: dict[str, Any]) -> dict[str, Any]:
    return {"allowed": True}


def json_patch(*ops: dict[str, Any], **extra: Any) -> Answer:
    patch = base64.b64encode(json.dumps(list(ops)).encode()).decode()
    return lambda request: {"allowed": True, "patchType": "JSONPatch", "patch": patch, **extra}


def deny(status: dict[str, Any] | None) -> Answer:
    return lambda request: {"allowed": False, **({"status": status} if status is not None else {})}


class WebhookServer:
    """An aiohttp HTTPS server on its own thread: POST /{path} answers with `answers[path]` (allow by
    default) after `delays[path]` seconds, and records every review in `calls`."""

    def __init__(self, directory: Path) -> None:
        cert, key, self.ca_bundle = _certificates(directory)
        self.ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ssl.load_cert_chain(cert, key)
        self.calls: list[Call] = []
        self.answers: dict[str, Answer] = {}
        self.raw_answers: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self.delays: dict[str, float] = {}
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="test-webhook-server", daemon=True)
        self._ready = threading.Event()

    async def _handle(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        review = await request.json()
        self.calls.append(Call(path, request.query_string, review))
        await asyncio.sleep(self.delays.get(path, 0))
        if path in self.raw_answers:
            return web.json_response(self.raw_answers[path](review))
        response = {"uid": review["request"]["uid"], **self.answers.get(path, allow)(review["request"])}
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "response": response})

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/{path}", self._handle)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self.ssl)
        self._loop.run_until_complete(site.start())
        self.port = runner.addresses[0][1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    def start(self) -> WebhookServer:
        self._thread.start()
        assert self._ready.wait(10), "the webhook server did not start"
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}/{path}"

    def on(self, path: str) -> list[Call]:
        return [c for c in self.calls if c.path == path]


# ------------------------------------------------------------------------------------- the sandbox


class Api:
    """Plain HTTP requests to the sandbox: (status, body, headers as a list of pairs)."""

    def __init__(self, url: str) -> None:
        u = urlsplit(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80

    def req(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json",
            headers: dict[str, str] | None = None) -> tuple[int, Any, list[tuple[str, str]]]:
        c = http.client.HTTPConnection(self.host, self.port, timeout=30)
        data = None if body is None else json.dumps(body).encode()
        c.request(method, path, body=data, headers={"Content-Type": ctype, "Accept": "application/json",
                                                    **(headers or {})})
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r.status, (json.loads(raw) if raw else None), r.getheaders()

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        code, out, _ = self.req(method, path, body, **kw)
        assert 200 <= code < 300, (method, path, code, out)
        return out


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    with Sandbox(cluster=False) as s:
        yield s


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookServer]:
    s = WebhookServer(tmp_path_factory.mktemp("webhook")).start()
    yield s
    s.stop()


@pytest.fixture
def api(sb: Sandbox, server: WebhookServer) -> Iterator[Api]:
    a = Api(sb.url)
    yield a
    for path in (MUTATING, VALIDATING):  # no test's webhooks outlive it
        for cfg in a.ok("GET", path)["items"]:
            a.ok("DELETE", f"{path}/{cfg['metadata']['name']}")
    server.calls.clear()
    server.answers.clear()
    server.raw_answers.clear()
    server.delays.clear()


_names = itertools.count(1)


def namespace(api: Api, labels: dict[str, str] | None = None) -> str:
    name = f"adm-{next(_names)}"
    api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels or {}}})
    return name


def webhook(server: WebhookServer, name: str, path: str, rules: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "rules": rules,
            "clientConfig": {"url": server.url(path), "caBundle": server.ca_bundle}, **fields}


def register(api: Api, kind: str, name: str, *hooks: dict[str, Any]) -> dict[str, Any]:
    path = MUTATING if kind == "Mutating" else VALIDATING
    body = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": f"{kind}WebhookConfiguration",
            "metadata": {"name": name}, "webhooks": list(hooks)}
    out: dict[str, Any] = api.ok("POST", path, body)
    return out


def job(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "c", "image": "busybox"}]}}}}


def configmap(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": {"k": "v"}}


# ------------------------------------------------------------------------------------- tests


def test_configurations_are_served_defaulted_and_validated(api: Api, server: WebhookServer) -> None:
    disc = api.ok("GET", ADMISSION)
    by_name = {r["name"]: r for r in disc["resources"]}
    assert by_name["mutatingwebhookconfigurations"]["namespaced"] is False
    assert by_name["validatingwebhookconfigurations"]["kind"] == "ValidatingWebhookConfiguration"
    assert {"create", "delete", "list", "watch"} <= set(by_name["mutatingwebhookconfigurations"]["verbs"])
    assert "admissionregistration.k8s.io" in {g["name"] for g in api.ok("GET", "/apis")["groups"]}

    cfg = register(api, "Mutating", "defaults", webhook(server, "m.gangq.test", "m", [JOB_RULE]))
    hook = cfg["webhooks"][0]
    assert (hook["failurePolicy"], hook["matchPolicy"], hook["timeoutSeconds"], hook["reinvocationPolicy"]) == (
        "Fail", "Equivalent", 10, "Never")
    assert hook["namespaceSelector"] == {} and hook["objectSelector"] == {} and hook["rules"][0]["scope"] == "*"
    assert cfg["metadata"]["generation"] == 1
    assert [c["metadata"]["name"] for c in api.ok("GET", MUTATING)["items"]] == ["defaults"]

    bad = webhook(server, "short", "v", [JOB_RULE], timeoutSeconds=31, matchConditions=[
        {"name": "x", "expression": "true"}])
    bad["clientConfig"]["url"] = "http://127.0.0.1:1/v"
    del bad["sideEffects"]
    code, status, _ = api.req("POST", VALIDATING, {"metadata": {"name": "bad"}, "webhooks": [bad]})
    assert code == 422 and status["reason"] == "Invalid"
    fields = {c["field"] for c in status["details"]["causes"]}
    assert fields == {"webhooks[0].name", "webhooks[0].sideEffects", "webhooks[0].timeoutSeconds",
                      "webhooks[0].clientConfig.url", "webhooks[0].matchConditions"}
    assert "should be a domain with at least three segments separated by dots" in status["message"]
    assert "'https' is the only allowed URL scheme" in status["message"]

    api.ok("DELETE", f"{MUTATING}/defaults")
    assert api.req("GET", f"{MUTATING}/defaults")[0] == 404


def test_mutating_patch_is_applied_and_stored(api: Api, server: WebhookServer) -> None:
    ns = namespace(api)
    server.answers["suspend"] = json_patch(
        {"op": "replace", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/metadata/labels/gangq.io~1queue", "value": "default"},
        warnings=['the job was "suspended"'],
    )
    register(api, "Mutating", "suspend", webhook(server, "suspend.gangq.test", "suspend", [JOB_RULE]))

    code, created, headers = api.req("POST", f"/apis/batch/v1/namespaces/{ns}/jobs?fieldManager=me", job("j1"),
                                     headers={"Impersonate-User": "alice", "Impersonate-Group": "team-a"})
    assert code == 201, created
    assert created["spec"]["suspend"] is True and created["metadata"]["labels"]["gangq.io/queue"] == "default"
    stored = api.ok("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/j1")
    assert stored["spec"]["suspend"] is True and stored["metadata"]["labels"]["gangq.io/queue"] == "default"
    assert ("Warning", '299 - "the job was \\"suspended\\""') in headers

    [call] = server.on("suspend")
    assert call.query == "timeout=10s"
    assert call.review["apiVersion"] == "admission.k8s.io/v1" and call.review["kind"] == "AdmissionReview"
    req = call.request
    assert req["kind"] == {"group": "batch", "version": "v1", "kind": "Job"}
    assert req["resource"] == {"group": "batch", "version": "v1", "resource": "jobs"}
    assert req["requestKind"] == req["kind"] and req["requestResource"] == req["resource"]
    assert "subResource" not in req and req["uid"]
    assert (req["operation"], req["name"], req["namespace"], req["dryRun"]) == ("CREATE", "j1", ns, False)
    assert req["userInfo"] == {"username": "alice", "groups": ["team-a", "system:authenticated"]}
    assert req["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "me"}
    assert req["oldObject"] is None
    obj = req["object"]
    # what the webhook sees: the decoded, defaulted object, not yet stored (no uid, no selector yet)
    assert obj["spec"]["suspend"] is False and obj["spec"]["backoffLimit"] == 6
    assert "uid" not in obj["metadata"] and "selector" not in obj["spec"]


def test_validating_webhooks_see_the_mutated_object(api: Api, server: WebhookServer) -> None:
    ns = namespace(api)
    server.answers["label"] = json_patch({"op": "add", "path": "/metadata/labels/mutated", "value": "yes"})
    register(api, "Mutating", "label", webhook(server, "label.gangq.test", "label", [JOB_RULE]))
    register(api, "Validating", "look", webhook(server, "look.gangq.test", "look", [JOB_RULE]))

    api.ok("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1"))
    [mutating] = server.on("label")
    [validating] = server.on("look")
    assert "mutated" not in mutating.request["object"]["metadata"]["labels"]
    seen = validating.request["object"]
    assert seen["metadata"]["labels"]["mutated"] == "yes"
    # after the kind's validation and preparation: what is about to be stored
    assert seen["metadata"]["uid"] and seen["spec"]["selector"]["matchLabels"]


def test_a_denial_answers_kube_apiserver_s_status(api: Api, server: WebhookServer) -> None:
    ns = namespace(api)
    server.answers["no"] = deny({"code": 403, "reason": "Forbidden", "message": "jobs need a queue"})
    register(api, "Validating", "no", webhook(server, "no.gangq.test", "no", [JOB_RULE]))
    code, status, _ = api.req("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1"))
    assert (code, status) == (403, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'admission webhook "no.gangq.test" denied the request: jobs need a queue',
        "reason": "Forbidden", "code": 403})
    assert api.req("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/j1")[0] == 404

    server.answers["no"] = deny({"message": "plain"})  # no code: 400, and no reason
    code, status, _ = api.req("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job("j2"))
    assert code == 400 and status["code"] == 400 and "reason" not in status
    assert status["message"] == 'admission webhook "no.gangq.test" denied the request: plain'

    server.answers["no"] = deny(None)
    code, status, _ = api.req("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job("j3"))
    assert code == 400
    assert status["message"] == 'admission webhook "no.gangq.test" denied the request without explanation'


def test_rules_choose_operations_resources_and_subresources(api: Api, server: WebhookServer) -> None:
    ns = namespace(api)
    updates = dict(JOB_RULE, operations=["UPDATE"])
    status_only = dict(JOB_RULE, operations=["*"], resources=["jobs/status"])
    everything = {"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}
    register(api, "Validating", "rules",
             webhook(server, "updates.gangq.test", "updates", [updates]),
             webhook(server, "status.gangq.test", "status", [status_only]),
             webhook(server, "all.gangq.test", "all", [everything]))
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"

    api.ok("POST", jobs, job("j1"))
    assert not server.on("updates") and not server.on("status")
    assert [c.request["operation"] for c in server.on("all")] == ["CREATE"]

    api.ok("PATCH", f"{jobs}/j1", {"metadata": {"labels": {"x": "1"}}}, ctype="application/merge-patch+json")
    [upd] = server.on("updates")
    assert upd.request["operation"] == "UPDATE" and upd.request["options"]["kind"] == "UpdateOptions"
    assert "x" not in upd.request["oldObject"]["metadata"]["labels"]
    assert upd.request["object"]["metadata"]["labels"]["x"] == "1"

    api.ok("PATCH", f"{jobs}/j1/status", {"status": {"active": 1}}, ctype="application/merge-patch+json")
    assert len(server.on("updates")) == 1  # "jobs" does not match jobs/status ...
    assert len(server.on("all")) == 2  # ... nor does "*"
    [st] = server.on("status")
    assert st.request["subResource"] == "status" and st.request["requestSubResource"] == "status"
    assert st.request["kind"]["kind"] == "Job" and st.request["object"]["status"]["active"] == 1

    api.ok("POST", f"/api/v1/namespaces/{ns}/configmaps", configmap("cm"))
    assert server.on("all")[-1].request["resource"]["resource"] == "configmaps"
    assert len(server.on("updates")) == 1 and len(server.on("status")) == 1


def test_namespace_and_object_selectors(api: Api, server: WebhookServer) -> None:
    watched, other = namespace(api, {"webhooks": "on"}), namespace(api)
    cms = {"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}
    register(api, "Validating", "selectors",
             webhook(server, "ns.gangq.test", "ns", [cms], namespaceSelector={"matchLabels": {"webhooks": "on"}}),
             webhook(server, "obj.gangq.test", "obj", [cms], objectSelector={
                 "matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}))

    api.ok("POST", f"/api/v1/namespaces/{watched}/configmaps", configmap("c1"))
    api.ok("POST", f"/api/v1/namespaces/{other}/configmaps", configmap("c1"))
    assert [c.request["namespace"] for c in server.on("ns")] == [watched]
    assert not server.on("obj")

    api.ok("POST", f"/api/v1/namespaces/{other}/configmaps", configmap("c2", {"team": "a"}))
    assert [c.request["name"] for c in server.on("obj")] == ["c2"]
    # an update that removes the label still matches: the old object has it
    api.ok("PUT", f"/api/v1/namespaces/{other}/configmaps/c2", configmap("c2"))
    assert [c.request["operation"] for c in server.on("obj")] == ["CREATE", "UPDATE"]
    api.ok("PUT", f"/api/v1/namespaces/{other}/configmaps/c2", configmap("c2", {"team": "b"}))
    assert len(server.on("obj")) == 2


def test_failure_policy_when_the_webhook_cannot_be_called(api: Api, server: WebhookServer) -> None:
    ns = namespace(api)
    port = free_port()
    down = webhook(server, "down.gangq.test", "down", [JOB_RULE])
    down["clientConfig"]["url"] = f"https://127.0.0.1:{port}/down"
    register(api, "Validating", "down", down)
    code, status, _ = api.req("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1"))
    assert code == 500 and status["reason"] == "InternalError"
    assert status["message"] == (
        f'Internal error occurred: failed calling webhook "down.gangq.test": failed to call webhook: '
        f'Post "https://127.0.0.1:{port}/down?timeout=10s": dial tcp 127.0.0.1:{port}: connect: connection refused')
    assert api.req("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/j1")[0] == 404

    api.ok("PATCH", f"{VALIDATING}/down", [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}],
           ctype="application/json-patch+json")
    api.ok("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1"))

    server.delays["slow"] = 1.5
    register(api, "Mutating", "slow", webhook(server, "slow.gangq.test", "slow", [JOB_RULE], timeoutSeconds=1))
    code, status, _ = api.req("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job("j2"))
    assert code == 500 and status["message"].endswith(
        f'Post "{server.url("slow")}?timeout=1s": context deadline exceeded')
    assert server.on("slow")[0].query == "timeout=1s"


def test_an_invalid_answer_is_a_failed_call(api: Api, server: WebhookServer) -> None:
    ns = namespace(api)
    server.raw_answers["bad"] = lambda review: {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                                "response": {"uid": "not-the-uid", "allowed": True}}
    register(api, "Validating", "bad", webhook(server, "bad.gangq.test", "bad", [JOB_RULE]))
    code, status, _ = api.req("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1"))
    uid = server.on("bad")[0].request["uid"]
    assert code == 500 and status["message"] == (
        'Internal error occurred: failed calling webhook "bad.gangq.test": received invalid webhook response: '
        f'expected response.uid="{uid}", got "not-the-uid"')


def test_webhook_configurations_are_never_sent_to_webhooks(api: Api, server: WebhookServer) -> None:
    server.answers["wall"] = deny({"message": "nothing passes"})
    everything = {"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}
    register(api, "Validating", "wall", webhook(server, "wall.gangq.test", "wall", [everything]))
    register(api, "Mutating", "another", webhook(server, "another.gangq.test", "another", [JOB_RULE]))
    api.ok("PATCH", f"{MUTATING}/another", {"metadata": {"labels": {"a": "b"}}},
           ctype="application/merge-patch+json")
    api.ok("DELETE", f"{MUTATING}/another")
    assert not server.calls
    code, status, _ = api.req("POST", "/api/v1/namespaces", {"metadata": {"name": "walled"}})
    assert code == 400 and status["message"].endswith("denied the request: nothing passes")
    assert server.on("wall")[0].request["namespace"] == "walled"
    api.ok("DELETE", f"{VALIDATING}/wall")


def test_dry_run_calls_webhooks_with_dry_run_and_stores_nothing(api: Api, server: WebhookServer) -> None:
    ns = namespace(api)
    server.answers["m"] = json_patch({"op": "replace", "path": "/spec/suspend", "value": True})
    register(api, "Mutating", "m", webhook(server, "m.gangq.test", "m", [JOB_RULE], sideEffects="NoneOnDryRun"))
    out = api.ok("POST", f"/apis/batch/v1/namespaces/{ns}/jobs?dryRun=All", job("j1"))
    assert out["spec"]["suspend"] is True
    [call] = server.on("m")
    assert call.request["dryRun"] is True and call.request["options"]["dryRun"] == ["All"]
    assert api.req("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/j1")[0] == 404


def test_delete_is_admitted(api: Api, server: WebhookServer) -> None:
    ns = namespace(api)
    api.ok("POST", f"/api/v1/namespaces/{ns}/configmaps", configmap("keep", {"protected": "yes"}))
    api.ok("POST", f"/api/v1/namespaces/{ns}/configmaps", configmap("drop"))
    server.answers["guard"] = lambda req: (
        {"allowed": False, "status": {"code": 403, "reason": "Forbidden", "message": "protected"}}
        if req["oldObject"]["metadata"]["labels"].get("protected") else {"allowed": True})
    deletes = {"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}
    register(api, "Validating", "guard", webhook(server, "guard.gangq.test", "guard", [deletes]))

    code, status, _ = api.req("DELETE", f"/api/v1/namespaces/{ns}/configmaps/keep", {"gracePeriodSeconds": 0})
    assert code == 403 and status["message"].endswith("denied the request: protected")
    api.ok("DELETE", f"/api/v1/namespaces/{ns}/configmaps/drop")
    first, second = server.on("guard")
    assert first.request["operation"] == "DELETE" and first.request["object"] is None
    assert first.request["options"] == {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1",
                                        "gracePeriodSeconds": 0}
    assert second.request["oldObject"]["metadata"]["name"] == "drop"
    names = [c["metadata"]["name"] for c in api.ok("GET", f"/api/v1/namespaces/{ns}/configmaps")["items"]]
    assert names == ["keep"]

    code, status, _ = api.req("DELETE", f"/api/v1/namespaces/{ns}/configmaps")  # a collection: each object
    assert code == 403 and status["message"].endswith("denied the request: protected")
    last = server.on("guard")[-1].request
    assert "name" not in last and last["namespace"] == ns and last["oldObject"]["metadata"]["name"] == "keep"


def test_an_update_changed_during_admission_is_admitted_again(sb: Sandbox, api: Api, server: WebhookServer) -> None:
    ns = namespace(api)
    api.ok("POST", f"/api/v1/namespaces/{ns}/configmaps", configmap("cm"))
    server.delays["slow"] = 0.3
    updates = {"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}
    register(api, "Validating", "slow", webhook(server, "slow.gangq.test", "slow", [updates]))
    results: list[Any] = []

    def meanwhile(request: Callable[[], Any], data: dict[str, str]) -> None:
        """`request` on a thread; while its webhook is being called, a write of `data` that is not admitted."""
        calls = len(server.on("slow"))
        worker = threading.Thread(target=lambda: results.append(request()))
        worker.start()
        while len(server.on("slow")) == calls:
            threading.Event().wait(0.01)
        sb.call(sb.store.patch, "", "configmaps", ns, "cm", {"data": data}, "merge")
        worker.join(10)

    # a patch without a resourceVersion: admitted again on the new object, and both changes are kept
    meanwhile(lambda: api.req("PATCH", f"/api/v1/namespaces/{ns}/configmaps/cm", {"data": {"a": "1"}},
                              ctype="application/merge-patch+json"), {"b": "2"})
    code, patched, _ = results.pop()
    assert code == 200 and patched["data"] == {"k": "v", "a": "1", "b": "2"}
    first, second = server.on("slow")
    assert "b" not in first.request["oldObject"]["data"] and second.request["oldObject"]["data"]["b"] == "2"

    # a PUT of a given resourceVersion: 409, as the object is no longer at that version
    current = api.ok("GET", f"/api/v1/namespaces/{ns}/configmaps/cm")
    meanwhile(lambda: api.req("PUT", f"/api/v1/namespaces/{ns}/configmaps/cm", dict(current, data={"c": "3"})),
              {"d": "4"})
    code, status, _ = results.pop()
    assert code == 409 and status["reason"] == "Conflict"
    assert api.ok("GET", f"/api/v1/namespaces/{ns}/configmaps/cm")["data"] == {"k": "v", "a": "1", "b": "2", "d": "4"}


def test_kubectl_creates_lists_and_deletes_configurations(sb: Sandbox, api: Api, server: WebhookServer,
                                                          tmp_path: Path) -> None:
    manifest = tmp_path / "vwc.json"
    manifest.write_text(json.dumps({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "from-kubectl"},
        "webhooks": [webhook(server, "kubectl.gangq.test", "kubectl", [JOB_RULE])]}))

    def kubectl(*args: str) -> str:
        done = subprocess.run([shutil.which("kubectl") or "/usr/bin/kubectl", *args], env=sb.env(),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    kubectl("apply", "-f", str(manifest))
    assert kubectl("get", "validatingwebhookconfigurations", "-o", "name").split() == [
        "validatingwebhookconfiguration.admissionregistration.k8s.io/from-kubectl"]
    ns = namespace(api)
    api.ok("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1"))
    assert len(server.on("kubectl")) == 1
    kubectl("delete", "validatingwebhookconfiguration", "from-kubectl")
    assert api.ok("GET", VALIDATING)["items"] == []
