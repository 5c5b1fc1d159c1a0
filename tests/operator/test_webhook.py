"""The admission webhook's decisions, its HTTPS server and its certificates, without a cluster
(the end-to-end tests on both control planes: test_webhook_e2e.py)."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import json
import socket
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from gangq.operator import certs
from gangq.operator.cli import _server_options
from gangq.operator.config import parse_config
from gangq.operator.kube import ApiError
from gangq.operator.webhook import (
    NamespaceLabels,
    ReviewError,
    WebhookServer,
    mutate,
    parse_review,
    validate,
)

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


def job(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, *,
        suspend: bool = False, owner: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": "team", "labels": dict(labels or {}),
                            "annotations": dict(annotations or {})}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js",
                                    "uid": "u", "controller": True}]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {
        "suspend": suspend, "parallelism": 2, "completions": 2,
        "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}}}


def review_of(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
              kind: tuple[str, str, str] = ("batch", "v1", "Job")) -> dict[str, Any]:
    group, version, name = kind
    request: dict[str, Any] = {"uid": "uid-1", "operation": operation, "namespace": "team",
                               "kind": {"group": group, "version": version, "kind": name}, "object": obj}
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]] | None:
    if "patch" not in response:
        return None
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


Q = {"gangq.io/queue-name": "user-queue"}
SUSPEND = [{"op": "add", "path": "/spec/suspend", "value": True}]


# --- reading a review ---------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "says"), [
    ([], "not an AdmissionReview"),
    ({"kind": "AdmissionReview"}, "no request"),
    ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"operation": "CREATE"}},
     "request.uid"),
    ({**review_of(job()), "apiVersion": "admission.k8s.io/v1beta1"}, "admissionReviewVersions"),
    (review_of(job(), "UPDATE"), "oldObject"),
])
def test_a_malformed_review_is_an_error_that_says_what_is_wrong(body: Any, says: str) -> None:
    with pytest.raises(ReviewError, match=says):
        parse_review(body)


# --- mutate -------------------------------------------------------------------------------------


def test_a_labelled_job_created_unsuspended_is_suspended() -> None:
    response = mutate(parse_review(review_of(job(Q))))
    assert response["uid"] == "uid-1" and response["allowed"] is True
    assert patch_of(response) == SUSPEND
    kueue = mutate(parse_review(review_of(job({"kueue.x-k8s.io/queue-name": "q"}))))
    assert patch_of(kueue) == SUSPEND


@pytest.mark.parametrize(("obj", "operation", "default_queue"), [
    (job(Q, suspend=True), "CREATE", None),  # already suspended
    (job(), "CREATE", None),  # no queue label, namespace not managed
    (job(Q, owner=True), "CREATE", None),  # a JobSet's child Job: its JobSet is queued
    (job(Q), "UPDATE", None),  # creation only
])
def test_what_is_not_a_queued_creation_is_left_as_it_is(obj: dict[str, Any], operation: str,
                                                        default_queue: str | None) -> None:
    old = copy.deepcopy(obj) if operation == "UPDATE" else None
    response = mutate(parse_review(review_of(obj, operation, old)), default_queue)
    assert response == {"uid": "uid-1", "allowed": True}


def test_a_kind_gangq_does_not_queue_is_left_as_it_is() -> None:
    for kind in (("example.com", "v1", "Job"), ("apps", "v1", "Deployment")):
        assert "patch" not in mutate(parse_review(review_of(job(Q), kind=kind)))


def test_an_unlabelled_job_in_a_managed_namespace_is_suspended() -> None:
    assert patch_of(mutate(parse_review(review_of(job())), "default")) == SUSPEND


def test_kubeflow_and_jobset_kinds_are_suspended_where_their_kind_keeps_suspend() -> None:
    pytorch = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
               "metadata": {"name": "p", "namespace": "team", "labels": Q}, "spec": {"pytorchReplicaSpecs": {}}}
    ops = patch_of(mutate(parse_review(review_of(pytorch, kind=("kubeflow.org", "v1", "PyTorchJob")))))
    assert ops == [{"op": "add", "path": "/spec/runPolicy", "value": {}},
                   {"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "j", "namespace": "team", "labels": Q}, "spec": {"replicatedJobs": []}}
    assert patch_of(mutate(parse_review(review_of(jobset, kind=("jobset.x-k8s.io", "v1alpha2", "JobSet"))))) \
        == SUSPEND


# --- validate -----------------------------------------------------------------------------------


def admitted_job(labels: dict[str, str] | None = None) -> dict[str, Any]:
    obj = job(labels if labels is not None else Q, {"gangq.io/admission": json.dumps({"clusterQueue": "cq"})})
    return obj


def test_changing_the_queue_of_an_admitted_job_is_refused_naming_the_label_and_what_to_do() -> None:
    old = admitted_job()
    new = admitted_job({"gangq.io/queue-name": "other"})
    response = validate(parse_review(review_of(new, "UPDATE", old)))
    assert response["allowed"] is False and response["uid"] == "uid-1"
    status = response["status"]
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    message = status["message"]
    assert message.startswith("Job 'team/train': metadata.labels[gangq.io/queue-name]: ")
    assert "'user-queue' to 'other'" in message and "ClusterQueue cq" in message
    assert "spec.suspend: true" in message and "delete" in message


def test_removing_the_kueue_queue_label_of_an_admitted_job_is_refused_too() -> None:
    old = admitted_job({"kueue.x-k8s.io/queue-name": "q"})
    response = validate(parse_review(review_of(admitted_job({}), "UPDATE", old)))
    assert "metadata.labels[kueue.x-k8s.io/queue-name]" in response["status"]["message"]


def test_the_queue_of_a_job_that_is_not_running_on_an_admission_may_change() -> None:
    queued = job(Q, suspend=True)
    suspended_admitted = admitted_job()
    suspended_admitted["spec"]["suspend"] = True
    for old in (queued, suspended_admitted):
        new = copy.deepcopy(old)
        new["metadata"]["labels"]["gangq.io/queue-name"] = "other"
        assert validate(parse_review(review_of(new, "UPDATE", old)))["allowed"] is True
    same = admitted_job()
    same["metadata"]["labels"]["team"] = "a"  # other labels of an admitted Job: not the webhook's
    assert validate(parse_review(review_of(same, "UPDATE", admitted_job())))["allowed"] is True


@pytest.mark.parametrize(("annotations", "field"), [
    ({"gangq.io/min-member": "-1"}, "metadata.annotations[gangq.io/min-member]"),
    ({"gangq.io/min-member": "3"}, "metadata.annotations[gangq.io/min-member]"),  # the gang has 2 pods
    ({"gangq.io/min-resources": "gpu"}, "metadata.annotations[gangq.io/min-resources]"),
    ({"gangq.io/runtime-limit": "soon"}, "metadata.annotations[gangq.io/runtime-limit]"),
])
def test_a_malformed_gangq_annotation_is_refused_naming_the_field(annotations: dict[str, str], field: str) -> None:
    response = validate(parse_review(review_of(job(Q, annotations))))
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert response["status"]["message"].startswith(f"Job 'team/train': {field}: "), response


def test_what_the_controller_reports_is_not_refused() -> None:
    """An unknown priority class may be created later, a broken pod spec is the API server's or
    the controller's to report: neither is a webhook denial."""
    unknown_class = job({**Q, "gangq.io/priority-class": "nope"})
    unknown_class["spec"]["template"]["spec"]["priorityClassName"] = "missing"
    assert validate(parse_review(review_of(unknown_class)))["allowed"] is True
    no_containers = job(Q, {"gangq.io/min-member": "-1"})
    no_containers["spec"]["template"]["spec"]["containers"] = []
    assert validate(parse_review(review_of(no_containers)))["allowed"] is True


def test_a_malformed_annotation_on_a_workload_gangq_does_not_queue_is_not_its_business() -> None:
    stray = job(None, {"gangq.io/min-member": "-1"})
    assert validate(parse_review(review_of(stray)))["allowed"] is True
    assert validate(parse_review(review_of(stray)), "default")["allowed"] is False  # a managed namespace
    child = job(Q, {"gangq.io/min-member": "-1"}, owner=True)
    assert validate(parse_review(review_of(child)))["allowed"] is True


def test_an_update_is_refused_only_for_an_error_it_brings() -> None:
    broken = job(Q, {"gangq.io/min-member": "-1"})  # created before the webhook was installed
    suspended = copy.deepcopy(broken)
    suspended["spec"]["suspend"] = True  # gangq suspends it; a finalizer goes; it is deleted
    assert validate(parse_review(review_of(suspended, "UPDATE", broken)))["allowed"] is True
    deleting = copy.deepcopy(broken)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    deleting["metadata"]["annotations"]["gangq.io/min-member"] = "x"
    assert validate(parse_review(review_of(deleting, "UPDATE", broken)))["allowed"] is True
    fine = job(Q, {"gangq.io/min-member": "2"})
    wider = copy.deepcopy(fine)
    wider["spec"]["parallelism"] = wider["spec"]["completions"] = 1  # min-member 2 of a 1-pod gang now
    response = validate(parse_review(review_of(wider, "UPDATE", fine)))
    assert response["allowed"] is False
    assert "metadata.annotations[gangq.io/min-member]" in response["status"]["message"]


# --- namespaces (manageJobsWithoutQueueName) ----------------------------------------------------


class FakeClient:
    """The KubeClient calls the webhook and its certificates make, against a dict of objects."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.conflict_next_replace: dict[str, Any] | None = None
        self.rv = 0

    def _stored(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        body = copy.deepcopy(body)
        body.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.objects[path] = body
        return copy.deepcopy(body)

    async def get(self, path: str) -> dict[str, Any]:
        self.calls.append(("GET", path))
        if path not in self.objects:
            raise ApiError(404, "NotFound", f"{path} not found")
        return copy.deepcopy(self.objects[path])

    async def create(self, path: str, body: dict[str, Any], *, want_body: bool = True) -> dict[str, Any]:
        self.calls.append(("POST", path))
        full = f"{path}/{body['metadata']['name']}"
        if full in self.objects:
            raise ApiError(409, "AlreadyExists", "exists")
        return self._stored(full, body)

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("PUT", path))
        if self.conflict_next_replace is not None:  # another replica wrote first
            self._stored(path, self.conflict_next_replace)
            self.conflict_next_replace = None
            raise ApiError(409, "Conflict", "the object has been modified")
        if body["metadata"].get("resourceVersion") != self.objects[path]["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        return self._stored(path, body)

    async def patch(self, path: str, body: Any, content_type: str = "", *, want_body: bool = True) -> dict[str, Any]:
        self.calls.append(("PATCH", path))
        obj = self.objects[path]
        for op in body:
            parts = op["path"].strip("/").split("/")
            target: Any = obj
            for part in parts[:-1]:
                target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
            if op["op"] == "test":
                assert target[parts[-1]] == op["value"]
            else:
                target[parts[-1]] = op["value"]
        return self._stored(path, obj)

    def writes(self) -> list[tuple[str, str]]:
        return [c for c in self.calls if c[0] != "GET"]


def test_namespace_labels_are_read_once_per_ttl_and_a_missing_namespace_is_none() -> None:
    client = FakeClient()
    client.objects["/api/v1/namespaces/team"] = {"metadata": {"name": "team", "labels": {"a": "b"}}}
    clock = [0.0]
    labels = NamespaceLabels(client, ttl=10, clock=lambda: clock[0])  # type: ignore[arg-type]

    async def main() -> None:
        assert await labels.get("team") == {"a": "b"}
        assert await labels.get("team") == {"a": "b"}
        assert await labels.get("gone") is None
        clock[0] = 11
        assert await labels.get("team") == {"a": "b"}

    asyncio.run(main())
    assert client.calls == [("GET", "/api/v1/namespaces/team"), ("GET", "/api/v1/namespaces/gone"),
                            ("GET", "/api/v1/namespaces/team")]


def test_the_server_decides_on_the_namespaces_selector_only_for_unlabelled_workloads() -> None:
    client = FakeClient()
    client.objects["/api/v1/namespaces/team"] = {"metadata": {"name": "team", "labels": {
        "kubernetes.io/metadata.name": "team"}}}
    client.objects["/api/v1/namespaces/kube-system"] = {"metadata": {"name": "kube-system", "labels": {
        "kubernetes.io/metadata.name": "kube-system"}}}
    config = parse_config({"manageJobsWithoutQueueName": True})
    server = WebhookServer(config, client, certs.DirCertificates("/nonexistent"))  # type: ignore[arg-type]

    async def main() -> None:
        assert await server.default_queue(parse_review(review_of(job()))) == "default"
        assert await server.default_queue(parse_review(review_of(job(Q)))) is None  # labelled: no read
        system = review_of(job())
        system["request"]["namespace"] = "kube-system"
        assert await server.default_queue(parse_review(system)) is None

    asyncio.run(main())
    assert ("GET", "/api/v1/namespaces/team") in client.calls
    off = WebhookServer(parse_config({}), client, certs.DirCertificates("/nonexistent"))  # type: ignore[arg-type]
    assert asyncio.run(off.default_queue(parse_review(review_of(job())))) is None


# --- certificates -------------------------------------------------------------------------------

NAMES = certs.service_names("gangq-webhook", "gangq-system")


def test_the_serving_certificate_is_renewed_at_two_thirds_of_its_life_by_the_same_ca() -> None:
    first = certs.plan(None, NAMES, NOW)
    assert first is not None
    cert = first.serving.cert
    life = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert life == datetime.timedelta(days=certs.SERVING_DAYS) + certs.BACKDATE
    renew = cert.not_valid_before_utc + life * 2 / 3
    assert certs.plan(first, NAMES, renew - DAY) is None
    second = certs.plan(first, NAMES, renew + datetime.timedelta(seconds=1))
    assert second is not None and second.ca == first.ca and second.trusted == first.trusted
    assert second.serving.cert.issuer == first.ca.cert.subject
    assert second.serving.cert.not_valid_after_utc > cert.not_valid_after_utc
    san = second.serving.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == set(NAMES)
    assert "gangq-webhook.gangq-system.svc" in NAMES


def test_a_ca_at_two_thirds_of_its_life_is_replaced_and_stays_trusted_until_it_expires() -> None:
    first = certs.plan(None, NAMES, NOW)
    assert first is not None
    ca = first.ca.cert
    renew = certs.renew_time(ca)
    assert renew - NOW > datetime.timedelta(days=6 * 365)  # a 10-year CA
    later = certs.plan(first, NAMES, renew + DAY)
    assert later is not None and later.ca != first.ca
    assert later.trusted == (later.ca.cert, ca)  # the old CA still in the caBundle
    assert later.ca_bundle.count(b"BEGIN CERTIFICATE") == 2
    last = certs.plan(later, NAMES, ca.not_valid_after_utc + DAY)  # the old CA expired
    assert last is not None and last.trusted == (later.ca.cert,)


def test_a_certificate_without_a_requested_name_is_reissued_with_ip_addresses_as_such() -> None:
    first = certs.plan(None, NAMES, NOW)
    assert first is not None
    more = certs.plan(first, [*NAMES, "127.0.0.1", "webhook.example"], NOW + DAY)
    assert more is not None and more.ca == first.ca
    san = more.serving.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert "webhook.example" in san.get_values_for_type(x509.DNSName)


def test_a_bundle_survives_the_secret_and_garbage_reads_as_none() -> None:
    bundle = certs.plan(None, NAMES, NOW)
    assert bundle is not None
    again = certs.Bundle.from_secret({"data": bundle.secret_data()})
    assert again is not None and again.serving.cert == bundle.serving.cert and again.trusted == bundle.trusted
    assert certs.plan(again, NAMES, NOW + DAY) is None
    assert certs.Bundle.from_secret(None) is None
    assert certs.Bundle.from_secret({"data": {"tls.crt": "bm9wZQ=="}}) is None


def _configurations(client: FakeClient) -> None:
    for plural in certs.WEBHOOK_KINDS:
        client.objects[f"/apis/admissionregistration.k8s.io/v1/{plural}/gangq-webhook"] = {
            "metadata": {"name": "gangq-webhook", "resourceVersion": "1"},
            "webhooks": [{"name": "a.gangq.io", "clientConfig": {"service": {"name": "gangq-webhook"}}},
                         {"name": "b.gangq.io", "clientConfig": {"service": {"name": "gangq-webhook"}}}]}


SECRET = "/api/v1/namespaces/gangq-system/secrets/gangq-webhook-cert"


def test_the_secret_is_created_the_ca_injected_and_then_nothing_is_written_until_renewal() -> None:
    client = FakeClient()
    _configurations(client)
    clock = [NOW.timestamp()]
    webhook = parse_config({}).webhook
    keeper = certs.SecretCertificates(client, webhook, clock=lambda: clock[0])  # type: ignore[arg-type]
    try:
        asyncio.run(keeper.refresh())
        assert client.writes() == [
            ("POST", "/api/v1/namespaces/gangq-system/secrets"),
            ("PATCH", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gangq-webhook"),
            ("PATCH", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gangq-webhook")]
        bundle = certs.Bundle.from_secret(client.objects[SECRET])
        assert bundle is not None and keeper.serving.loaded == bundle.serving.cert_pem
        ca_bundle = base64.b64encode(bundle.ca_bundle).decode()
        for plural in certs.WEBHOOK_KINDS:
            hooks = client.objects[f"/apis/admissionregistration.k8s.io/v1/{plural}/gangq-webhook"]["webhooks"]
            assert [h["clientConfig"]["caBundle"] for h in hooks] == [ca_bundle, ca_bundle]
        client.calls.clear()
        clock[0] += 200 * 86400
        asyncio.run(keeper.refresh())
        assert client.writes() == []  # 200 of 365 days: not yet
        clock[0] += 50 * 86400
        asyncio.run(keeper.refresh())
        assert client.writes() == [("PUT", SECRET)]  # renewed by the same CA: the caBundle stays
        renewed = certs.Bundle.from_secret(client.objects[SECRET])
        assert renewed is not None and renewed.serving.cert != bundle.serving.cert
        assert keeper.serving.loaded == renewed.serving.cert_pem
    finally:
        keeper.serving.close()


def test_a_replica_that_loses_the_race_to_rotate_serves_the_winners_certificate() -> None:
    client = FakeClient()
    webhook = parse_config({}).webhook
    clock = [NOW.timestamp()]
    keeper = certs.SecretCertificates(client, webhook, clock=lambda: clock[0])  # type: ignore[arg-type]
    try:
        asyncio.run(keeper.refresh())  # no configurations: nothing to inject, no error
        stored = client.objects[SECRET]
        current = certs.Bundle.from_secret(stored)
        assert current is not None
        clock[0] += 300 * 86400
        winner = certs.plan(current, keeper.names, datetime.datetime.fromtimestamp(clock[0], datetime.UTC))
        assert winner is not None
        client.conflict_next_replace = {**stored, "data": winner.secret_data()}
        asyncio.run(keeper.refresh())
        assert keeper.serving.loaded == winner.serving.cert_pem
    finally:
        keeper.serving.close()


def test_a_refused_secret_write_says_which_secret_and_where_its_rights_come_from() -> None:
    class Refusing(FakeClient):
        async def create(self, path: str, body: dict[str, Any], *, want_body: bool = True) -> dict[str, Any]:
            raise ApiError(403, "Forbidden", "secrets is forbidden")

    keeper = certs.SecretCertificates(Refusing(), parse_config({}).webhook)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"Secret gangq-system/gangq-webhook-cert: .*webhook component"):
        asyncio.run(keeper.refresh())


# --- the HTTPS server ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def write_cert_dir(directory: Path, bundle: certs.Bundle) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(bundle.serving.cert_pem)
    (directory / "tls.key").write_bytes(bundle.serving.key_pem)


def test_the_server_answers_reviews_over_https_and_reloads_a_changed_certificate(tmp_path: Path) -> None:
    names = ["127.0.0.1"]
    first = certs.plan(None, names, datetime.datetime.now(datetime.UTC))
    assert first is not None
    write_cert_dir(tmp_path / "tls", first)
    port = free_port()
    config = parse_config({"webhook": {"port": port, "certDir": str(tmp_path / "tls")}})
    client = FakeClient()

    async def main() -> None:
        server = WebhookServer(config, client)  # type: ignore[arg-type]
        await server.start()
        try:
            await asyncio.wait_for(server.ready.wait(), 5)
            trust = ssl.create_default_context(cadata=first.ca_bundle.decode())
            url = f"https://127.0.0.1:{port}"
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as http:
                async with http.post(f"{url}/mutate", json=review_of(job(Q))) as resp:
                    assert resp.status == 200
                    body = await resp.json()
                assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
                assert body["response"]["uid"] == "uid-1" and patch_of(body["response"]) == SUSPEND
                new = admitted_job({"gangq.io/queue-name": "other"})
                async with http.post(f"{url}/validate", json=review_of(new, "UPDATE", admitted_job())) as resp:
                    denied = (await resp.json())["response"]
                assert denied["allowed"] is False and denied["status"]["code"] == 403
                async with http.post(f"{url}/validate", data=b"{not json") as resp:
                    assert resp.status == 400
                    bad = (await resp.json())["response"]
                assert bad["allowed"] is False and bad["status"]["code"] == 400
                async with http.post(f"{url}/mutate", json={"kind": "AdmissionReview", "apiVersion": "x",
                                                            "request": {"uid": "u-9"}}) as resp:
                    assert resp.status == 400
                    assert (await resp.json())["response"]["uid"] == "u-9"
                async with http.get(f"{url}/healthz") as resp:
                    assert resp.status == 200 and await resp.text() == "ok"
            # a new certificate in the directory (cert-manager renewed it): served after a refresh
            second = certs.plan(first, [*names, "localhost"], datetime.datetime.now(datetime.UTC))
            assert second is not None
            write_cert_dir(tmp_path / "tls", second)
            await server.certs.refresh()
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trust)
            served = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            writer.close()
            assert x509.load_der_x509_certificate(served) == second.serving.cert
        finally:
            await server.stop()

    asyncio.run(main())


def test_a_port_in_use_fails_the_start_at_once(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = parse_config({"webhook": {"port": taken.getsockname()[1], "certDir": str(tmp_path)}})
        server = WebhookServer(config, FakeClient())  # type: ignore[arg-type]
        with pytest.raises(OSError):
            asyncio.run(server.start())


def test_the_cli_options_override_the_webhook_section() -> None:
    cfg = parse_config({"webhook": {"hosts": ["a.example"]}})
    assert cfg.webhook.port == 0 and cfg.webhook.bind == "127.0.0.1"  # off, loopback
    assert _server_options(cfg, "webhook", None, None, None, None) is cfg
    out = _server_options(cfg, "webhook", 9443, "0.0.0.0", Path("/certs"), ["127.0.0.1"])
    assert (out.webhook.port, out.webhook.bind, out.webhook.cert_dir) == (9443, "0.0.0.0", "/certs")
    assert out.webhook.hosts == ["a.example", "127.0.0.1"]
    assert (out.webhook.secret_name, out.webhook.configuration_name) == ("gangq-webhook-cert", "gangq-webhook")
    assert out.visibility == cfg.visibility
    vis = _server_options(cfg, "visibility", 8443, "0.0.0.0", None, ["gangq.example"])
    assert (vis.visibility.port, vis.visibility.bind, vis.visibility.hosts) == (8443, "0.0.0.0", ["gangq.example"])
    assert vis.webhook == cfg.webhook
