"""The sandbox API server over raw HTTP: URL layout, discovery, Status bodies, watch streams, Tables, faults."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gangq.sandbox.runtime import Sandbox

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "things.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Cluster",
        "names": {"plural": "things", "singular": "thing", "kind": "Thing", "shortNames": ["th"],
                  "categories": ["all"]},
        "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                      "schema": {"openAPIV3Schema": {"type": "object",
                                                     "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


class Http:
    def __init__(self, url: str) -> None:
        u = urlsplit(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80

    def req(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json",
            accept: str = "application/json") -> tuple[int, Any, dict[str, str]]:
        c = http.client.HTTPConnection(self.host, self.port, timeout=10)
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        c.request(method, path, body=data, headers={"Content-Type": ctype, "Accept": accept})
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r.status, (json.loads(raw) if raw else None), dict(r.getheaders())

    def stream(self, path: str, *, accept: str = "application/json") -> tuple[http.client.HTTPConnection, Any]:
        c = http.client.HTTPConnection(self.host, self.port, timeout=10)
        c.request("GET", path, headers={"Accept": accept})
        return c, c.getresponse()


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    with Sandbox(nodes="2x{cpu:8}", bookmark_interval=0.2, history=100) as s:
        yield s


@pytest.fixture
def h(sb: Sandbox) -> Iterator[Http]:
    yield Http(sb.url)
    sb.call(sb.faults.clear)


def test_discovery_documents_and_live_crds(h: Http) -> None:
    code, v, _ = h.req("GET", "/version")
    assert code == 200 and v["major"] == "1" and v["minor"] == "30"
    code, core, _ = h.req("GET", "/api/v1")
    by_name = {r["name"]: r for r in core["resources"]}
    assert by_name["pods"]["shortNames"] == ["po"] and by_name["pods"]["namespaced"] is True
    assert set(by_name["pods"]["verbs"]) >= {"create", "get", "list", "watch", "patch", "update", "delete"}
    assert by_name["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert by_name["pods/binding"]["verbs"] == ["create"] and by_name["nodes"]["namespaced"] is False
    code, groups, _ = h.req("GET", "/apis")
    names = {g["name"] for g in groups["groups"]}
    assert {"batch", "coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"} <= names
    assert "example.com" not in names
    assert h.req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)[0] == 201
    code, lst, _ = h.req("GET", "/apis/example.com/v1")
    things = {r["name"]: r for r in lst["resources"]}
    assert things["things"]["namespaced"] is False and things["things"]["categories"] == ["all"]
    assert "things/status" in things
    assert h.req("GET", "/apis/example.com")[1]["preferredVersion"]["version"] == "v1"
    assert h.req("POST", "/apis/example.com/v1/things", {"metadata": {"name": "t1"}})[0] == 201
    assert h.req("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/things.example.com")[0] == 200
    assert h.req("GET", "/apis/example.com/v1")[0] == 404
    assert h.req("GET", "/apis/example.com/v1/things/t1")[0] == 404


def test_errors_are_status_objects(h: Http) -> None:
    code, body, _ = h.req("GET", "/api/v1/namespaces/default/configmaps/missing")
    assert code == 404
    assert body["kind"] == "Status" and body["reason"] == "NotFound" and body["code"] == 404
    assert body["details"] == {"name": "missing", "kind": "configmaps"}
    cm = {"metadata": {"name": "dup"}, "data": {}}
    assert h.req("POST", "/api/v1/namespaces/default/configmaps", cm)[0] == 201
    code, body, _ = h.req("POST", "/api/v1/namespaces/default/configmaps", cm)
    assert (code, body["reason"]) == (409, "AlreadyExists")
    code, body, _ = h.req("POST", "/api/v1/namespaces/default/pods", {"metadata": {"name": "p"}, "spec": {}})
    assert (code, body["reason"]) == (422, "Invalid") and body["details"]["causes"][0]["field"] == "spec.containers"
    code, body, _ = h.req("PATCH", "/api/v1/namespaces/default/configmaps/dup", b"{nope",
                          ctype="application/merge-patch+json")
    assert (code, body["reason"]) == (400, "BadRequest")
    code, body, _ = h.req("GET", "/apis/nothing.io/v1/widgets")
    assert code == 404 and body["kind"] == "Status"
    code, body, _ = h.req("GET", "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(")
    assert code == 400 and body["kind"] == "Status"


def test_delete_options_preconditions_and_propagation(h: Http) -> None:
    code, owner, _ = h.req("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    h.req("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "dep", "ownerReferences": [ref]}})
    code, body, _ = h.req("DELETE", "/api/v1/namespaces/default/configmaps/owner",
                          {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-it"}})
    assert (code, body["reason"]) == (409, "Conflict") and "Precondition failed" in body["message"]
    code, body, _ = h.req("DELETE", "/api/v1/namespaces/default/configmaps/owner",
                          {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"})
    assert code == 200
    code, dep, _ = h.req("GET", "/api/v1/namespaces/default/configmaps/dep")
    assert code == 200 and "ownerReferences" not in dep["metadata"]


def test_binding_and_table_output(h: Http) -> None:
    pod = {"metadata": {"name": "tab"}, "spec": {"schedulerName": "nobody",
                                                 "containers": [{"name": "c", "image": "x"}]}}
    assert h.req("POST", "/api/v1/namespaces/default/pods", pod)[0] == 201
    code, _, _ = h.req("POST", "/api/v1/namespaces/default/pods/tab/binding",
                       {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "tab"},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-0"}})
    assert code == 201
    code, _, _ = h.req("POST", "/api/v1/namespaces/default/pods/tab/binding",
                           {"target": {"kind": "Node", "name": "node-1"}})
    assert code == 409
    code, table, _ = h.req("GET", "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dtab",
                           accept="application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    cols = [c["name"] for c in table["columnDefinitions"]]
    assert cols[:3] == ["Name", "Ready", "Status"]
    assert table["rows"][0]["cells"][0] == "tab"
    assert table["rows"][0]["object"]["metadata"]["name"] == "tab"


def test_list_limit_and_continue(h: Http) -> None:
    h.req("POST", "/api/v1/namespaces", {"metadata": {"name": "paging"}})
    for i in range(5):
        h.req("POST", "/api/v1/namespaces/paging/configmaps", {"metadata": {"name": f"c{i}"}})
    code, page, _ = h.req("GET", "/api/v1/namespaces/paging/configmaps?limit=3")
    assert code == 200
    assert [o["metadata"]["name"] for o in page["items"]] == ["c0", "c1", "c2"]
    assert page["kind"] == "ConfigMapList" and page["apiVersion"] == "v1"
    cont = page["metadata"]["continue"]
    _, page2, _ = h.req("GET", f"/api/v1/namespaces/paging/configmaps?limit=3&continue={cont}")
    assert [o["metadata"]["name"] for o in page2["items"]] == ["c3", "c4"]


def _lines(resp: Any, n: int) -> list[dict[str, Any]]:
    return [json.loads(resp.readline()) for _ in range(n)]


def test_watch_stream_flushes_each_event_and_sends_bookmarks(sb: Sandbox, h: Http) -> None:
    h.req("POST", "/api/v1/namespaces", {"metadata": {"name": "watched"}})
    _, lst, _ = h.req("GET", "/api/v1/namespaces/watched/configmaps")
    rv = lst["metadata"]["resourceVersion"]
    conn, resp = h.stream(f"/api/v1/namespaces/watched/configmaps?watch=1&resourceVersion={rv}"
                          "&allowWatchBookmarks=true&timeoutSeconds=2")
    assert resp.status == 200
    _, created, _ = h.req("POST", "/api/v1/namespaces/watched/configmaps", {"metadata": {"name": "a"}})
    ev = json.loads(resp.readline())  # arrives before the stream ends: flushed per event
    assert ev["type"] == "ADDED"
    assert ev["object"]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    t0 = time.monotonic()
    bm = json.loads(resp.readline())
    assert bm["type"] == "BOOKMARK" and time.monotonic() - t0 < 2
    assert int(bm["object"]["metadata"]["resourceVersion"]) >= int(created["metadata"]["resourceVersion"])
    t0 = time.monotonic()
    while resp.readline():  # timeoutSeconds=2 ends the stream
        pass
    assert time.monotonic() - t0 < 5
    conn.close()


def test_watch_as_table_sends_table_rows(sb: Sandbox, h: Http) -> None:
    conn, resp = h.stream("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=" + sb.store.resource_version,
                          accept="application/json;as=Table;v=v1;g=meta.k8s.io")
    h.req("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "tabled"}, "data": {"a": "1"}})
    ev = json.loads(resp.readline())
    assert ev["type"] == "ADDED" and ev["object"]["kind"] == "Table"
    assert [c["name"] for c in ev["object"]["columnDefinitions"]][:2] == ["Name", "Data"]
    assert ev["object"]["rows"][0]["cells"][:2] == ["tabled", 1]
    conn.close()


def test_watch_from_too_old_resource_version_gets_410_error_event(h: Http) -> None:
    for i in range(250):  # history=100 in this sandbox
        h.req("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": f"flood-{i}"}})
    conn, resp = h.stream("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=2")
    ev = json.loads(resp.readline())
    assert ev["type"] == "ERROR" and ev["object"]["code"] == 410 and ev["object"]["reason"] == "Expired"
    assert resp.readline() == b""
    conn.close()


def test_fault_injection_429_latency_and_request_counters(sb: Sandbox, h: Http) -> None:
    h.req("DELETE", "/debug/requests")
    code, cfg, _ = h.req("POST", "/debug/faults", {"rules": [
        {"verb": "create", "resource": "configmaps", "errorRate": 1.0, "code": 429, "retryAfterSeconds": 2},
        {"verb": "get", "resource": "configmaps", "latencyMs": 300},
    ]})
    assert code == 200 and len(cfg["rules"]) == 2
    code, body, headers = h.req("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "f"}})
    assert code == 429 and headers["Retry-After"] == "2" and body["reason"] == "TooManyRequests"
    assert body["details"]["retryAfterSeconds"] == 2
    t0 = time.monotonic()
    assert h.req("GET", "/api/v1/namespaces/default/configmaps/dup")[0] in (200, 404)
    assert time.monotonic() - t0 >= 0.3
    code, bad, _ = h.req("POST", "/debug/faults", {"rules": [{"verb": "explode"}]})
    assert code == 400 and "verb" in bad["message"]
    h.req("DELETE", "/debug/faults")
    assert h.req("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "f"}})[0] == 201
    _, counters, _ = h.req("GET", "/debug/requests")
    got = {(r["verb"], r["resource"], r["code"]): r["count"] for r in counters["requests"]}
    assert got[("create", "configmaps", 429)] == 1 and got[("create", "configmaps", 201)] == 1
    assert counters["writes"] == 2


def test_fault_injection_drops_and_expires_watch_streams(sb: Sandbox, h: Http) -> None:
    h.req("POST", "/api/v1/namespaces", {"metadata": {"name": "quiet"}})
    conn, resp = h.stream("/api/v1/namespaces/quiet/pods?watch=1&resourceVersion=" + sb.store.resource_version)
    time.sleep(0.1)
    h.req("POST", "/debug/faults", {"dropWatches": True})
    assert resp.readline() == b""  # the stream ends with no ERROR, like a broken connection
    conn.close()
    sb.call(sb.faults.configure, {"watchLifetimeSeconds": 0.3, "watchLifetimeError": True})
    conn, resp = h.stream("/api/v1/namespaces/quiet/pods?watch=1&resourceVersion=" + sb.store.resource_version)
    ev = json.loads(resp.readline())
    assert ev["type"] == "ERROR" and ev["object"]["code"] == 410
    conn.close()


def test_state_file_survives_a_restart_of_the_subprocess_server(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with Sandbox(mode="subprocess", cluster=False, state_file=state) as sb:
        h = Http(sb.url)
        code, cm, _ = h.req("POST", "/api/v1/namespaces/default/configmaps",
                            {"metadata": {"name": "persisted"}, "data": {"k": "v"}})
        assert code == 201
        assert "export" not in sb.kubeconfig.read_text() and sb.url in sb.kubeconfig.read_text()
    assert state.exists()
    with Sandbox(mode="subprocess", cluster=False, state_file=state) as sb:
        code, again, _ = Http(sb.url).req("GET", "/api/v1/namespaces/default/configmaps/persisted")
        assert code == 200 and again["metadata"]["uid"] == cm["metadata"]["uid"] and again["data"] == {"k": "v"}
        code, later, _ = Http(sb.url).req("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "n"}})
        assert int(later["metadata"]["resourceVersion"]) > int(cm["metadata"]["resourceVersion"])


def test_cli_up_prints_export_line_and_stops_on_sigint(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    kubeconfig = tmp_path / "kc.yaml"
    proc = subprocess.Popen([sys.executable, "-m", "gangq.sandbox.cli", "up", "--port", "0", "--no-cluster",
                             "--kubeconfig-out", str(kubeconfig)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == f"export KUBECONFIG={kubeconfig}"
        import yaml

        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        code, v, _ = Http(server).req("GET", "/version")
        assert code == 200 and v["gitVersion"].startswith("v1.30")
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0


def test_cli_rejects_a_bad_node_spec() -> None:
    from typer.testing import CliRunner

    from gangq.sandbox.cli import sandbox_app

    result = CliRunner().invoke(sandbox_app, ["up", "--port", "0", "--nodes", "4x{cpu:"])
    assert result.exit_code == 2
    assert "--nodes" in result.output


def test_dry_run_answers_without_storing(h: Http) -> None:
    code, obj, _ = h.req("POST", "/api/v1/namespaces/default/configmaps?dryRun=All", {"metadata": {"name": "dry"}})
    assert code == 201 and obj["metadata"]["uid"] and "resourceVersion" not in obj["metadata"]
    assert h.req("GET", "/api/v1/namespaces/default/configmaps/dry")[0] == 404
    code, real, _ = h.req("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "dry"}})
    code, patched, _ = h.req("PATCH", "/api/v1/namespaces/default/configmaps/dry?dryRun=All", {"data": {"a": "1"}},
                             ctype="application/merge-patch+json")
    assert code == 200 and patched["data"] == {"a": "1"}
    assert patched["metadata"]["resourceVersion"] == real["metadata"]["resourceVersion"]
    code, _, _ = h.req("DELETE", "/api/v1/namespaces/default/configmaps/dry", {"dryRun": ["All"]})
    assert code == 200
    code, got, _ = h.req("GET", "/api/v1/namespaces/default/configmaps/dry")
    assert code == 200 and "data" not in got
    assert h.req("POST", "/api/v1/namespaces/default/configmaps?dryRun=Some", {"metadata": {"name": "x"}})[0] == 400
