"""The sandbox Store: Kubernetes object semantics, in process."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gangq.sandbox.store import ApiError, Store


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}], **spec}}


def cm(name: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}, "data": {"k": "v"}}


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
            }
        ],
    },
}


def err(fn: Any, *a: Any, **kw: Any) -> ApiError:
    with pytest.raises(ApiError) as ei:
        fn(*a, **kw)
    return ei.value


@pytest.fixture
def store() -> Store:
    return Store()


def test_create_stamps_metadata_and_global_resource_version(store: Store) -> None:
    a = store.create("", "configmaps", cm("a"), namespace="default")
    b = store.create("", "configmaps", cm("b"), namespace="default")
    assert a["metadata"]["uid"] != b["metadata"]["uid"]
    assert int(b["metadata"]["resourceVersion"]) == int(a["metadata"]["resourceVersion"]) + 1
    assert a["metadata"]["creationTimestamp"].endswith("Z")
    assert a["apiVersion"] == "v1" and a["kind"] == "ConfigMap"
    assert store.list("", "configmaps", "default")["metadata"]["resourceVersion"] == b["metadata"]["resourceVersion"]


def test_returned_objects_are_copies(store: Store) -> None:
    a = store.create("", "configmaps", cm("a"), namespace="default")
    a["data"]["k"] = "changed"
    got = store.get("", "configmaps", "default", "a")
    assert got["data"]["k"] == "v"
    got["data"]["k"] = "again"
    assert store.get("", "configmaps", "default", "a")["data"]["k"] == "v"


def test_generate_name_namespace_must_exist_and_duplicates(store: Store) -> None:
    p = store.create("", "pods", {"metadata": {"generateName": "w-"}, "spec": pod("x")["spec"]}, namespace="default")
    assert p["metadata"]["name"].startswith("w-") and len(p["metadata"]["name"]) == 7
    e = err(store.create, "", "configmaps", cm("a"), namespace="nope")
    assert (e.code, e.reason) == (404, "NotFound") and 'namespaces "nope" not found' in e.message
    store.create("", "configmaps", cm("a"), namespace="default")
    e = err(store.create, "", "configmaps", cm("a"), namespace="default")
    assert (e.code, e.reason) == (409, "AlreadyExists")
    e = err(store.create, "", "configmaps", cm("Bad_Name"), namespace="default")
    assert e.code == 422 and e.status()["details"]["causes"][0]["field"] == "metadata.name"
    e = err(store.create, "", "configmaps", {"metadata": {}}, namespace="default")
    assert e.code == 422
    e = err(store.create, "", "configmaps", {"kind": "Pod", "metadata": {"name": "x"}}, namespace="default")
    assert e.code == 400


def test_put_with_stale_resource_version_conflicts(store: Store) -> None:
    a = store.create("", "configmaps", cm("a"), namespace="default")
    a["data"] = {"k": "2"}
    b = store.replace("", "configmaps", "default", "a", a)
    assert b["data"] == {"k": "2"}
    a["data"] = {"k": "3"}  # still carries the old resourceVersion
    e = err(store.replace, "", "configmaps", "default", "a", a)
    assert (e.code, e.reason) == (409, "Conflict")
    assert e.status()["details"] == {"kind": "configmaps", "name": "a"}


def test_patch_carrying_a_stale_resource_version_conflicts(store: Store) -> None:
    a = store.create("", "configmaps", cm("a"), namespace="default")
    rv = a["metadata"]["resourceVersion"]
    store.patch("", "configmaps", "default", "a", {"data": {"x": "1"}}, "merge")
    e = err(
        store.patch,
        "",
        "configmaps",
        "default",
        "a",
        {"metadata": {"resourceVersion": rv}, "data": {"y": "1"}},
        "application/merge-patch+json",
    )
    assert e.code == 409
    ok = store.patch("", "configmaps", "default", "a", [{"op": "add", "path": "/data/z", "value": "1"}], "json")
    assert ok["data"] == {"k": "v", "x": "1", "z": "1"}


def test_failed_json_patch_test_op_is_422_and_strategic_on_custom_is_415(store: Store) -> None:
    store.create("", "configmaps", cm("a"), namespace="default")
    e = err(store.patch, "", "configmaps", "default", "a", [{"op": "test", "path": "/data/k", "value": "no"}], "json")
    assert (e.code, e.reason) == (422, "Invalid")
    store.create("apiextensions.k8s.io", "customresourcedefinitions", CRD)
    store.create("example.com", "widgets", {"metadata": {"name": "w"}, "spec": {"size": 1}}, namespace="default")
    e = err(store.patch, "example.com", "widgets", "default", "w", {"spec": {"size": 2}}, "strategic")
    assert (e.code, e.reason) == (415, "UnsupportedMediaType")


def test_noop_write_keeps_resource_version_and_emits_nothing(store: Store) -> None:
    a = store.create("", "configmaps", cm("a"), namespace="default")
    seen: list[str] = []
    store.subscribe(lambda t, info, o: seen.append(t))
    b = store.patch("", "configmaps", "default", "a", {"data": {"k": "v"}}, "merge")
    assert b["metadata"]["resourceVersion"] == a["metadata"]["resourceVersion"]
    assert seen == []


def test_generation_bumps_on_spec_only_and_status_subresource(store: Store) -> None:
    store.create("apiextensions.k8s.io", "customresourcedefinitions", CRD)
    w = store.create(
        "example.com",
        "widgets",
        {"metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"ignored": True}},
        namespace="default",
    )
    assert w["metadata"]["generation"] == 1 and "status" not in w
    w = store.patch("example.com", "widgets", "default", "w", {"metadata": {"labels": {"a": "b"}}}, "merge")
    assert w["metadata"]["generation"] == 1
    w = store.patch("example.com", "widgets", "default", "w", {"status": {"phase": "Done"}}, "merge")
    assert "status" not in w and w["metadata"]["generation"] == 1  # the main endpoint ignores status
    w = store.patch(
        "example.com",
        "widgets",
        "default",
        "w",
        {"status": {"phase": "Done"}, "spec": {"size": 9}},
        "merge",
        subresource="status",
    )
    assert w["status"] == {"phase": "Done"} and w["spec"]["size"] == 1  # /status ignores spec
    assert w["metadata"]["generation"] == 1
    w = store.patch("example.com", "widgets", "default", "w", {"spec": {"size": 2}}, "merge")
    assert w["metadata"]["generation"] == 2 and w["status"] == {"phase": "Done"}


def test_custom_resource_put_requires_resource_version(store: Store) -> None:
    store.create("apiextensions.k8s.io", "customresourcedefinitions", CRD)
    w = store.create("example.com", "widgets", {"metadata": {"name": "w"}, "spec": {"size": 1}}, namespace="default")
    del w["metadata"]["resourceVersion"]
    e = err(store.replace, "example.com", "widgets", "default", "w", w)
    assert e.code == 422 and "metadata.resourceVersion" in e.message


def test_finalizers_hold_deletion_until_removed(store: Store) -> None:
    store.create("", "configmaps", cm("a", finalizers=["x/y"]), namespace="default")
    d = store.delete("", "configmaps", "default", "a")
    assert d["metadata"]["deletionTimestamp"]
    assert store.get("", "configmaps", "default", "a")["metadata"]["deletionTimestamp"]
    e = err(store.patch, "", "configmaps", "default", "a", {"metadata": {"finalizers": ["x/y", "new"]}}, "merge")
    assert e.code == 422
    store.patch("", "configmaps", "default", "a", {"metadata": {"finalizers": None}}, "merge")
    assert err(store.get, "", "configmaps", "default", "a").code == 404


def test_pod_graceful_deletion(store: Store) -> None:
    store.create("", "pods", pod("unbound"), namespace="default")
    store.delete("", "pods", "default", "unbound")  # never scheduled: goes at once
    assert err(store.get, "", "pods", "default", "unbound").code == 404
    store.create("", "pods", pod("p"), namespace="default")
    store.bind("default", "p", "node-1")
    assert err(store.bind, "default", "p", "node-2").code == 409
    got = store.get("", "pods", "default", "p")
    assert got["spec"]["nodeName"] == "node-1"
    assert any(c["type"] == "PodScheduled" for c in got["status"]["conditions"])
    d = store.delete("", "pods", "default", "p")
    assert d["metadata"]["deletionGracePeriodSeconds"] == 30 and d["metadata"]["deletionTimestamp"]
    assert store.get("", "pods", "default", "p")["metadata"]["deletionTimestamp"]
    store.delete("", "pods", "default", "p", grace_period_seconds=0)  # what the kubelet does
    assert err(store.get, "", "pods", "default", "p").code == 404


def _owned(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    return cm(name, ownerReferences=[ref])


def test_background_garbage_collection_is_recursive(store: Store) -> None:
    root = store.create("", "configmaps", cm("root"), namespace="default")
    child = store.create("", "configmaps", _owned("child", root), namespace="default")
    store.create("", "configmaps", _owned("grandchild", child), namespace="default")
    store.create("", "configmaps", cm("bystander"), namespace="default")
    store.delete("", "configmaps", "default", "root")
    names = [o["metadata"]["name"] for o in store.list("", "configmaps", "default")["items"]]
    assert names == ["bystander"]


def test_foreground_deletion_waits_for_dependents(store: Store) -> None:
    root = store.create("", "configmaps", cm("root"), namespace="default")
    store.create(
        "",
        "configmaps",
        _owned("child", {**root})
        | {
            "metadata": {
                "name": "child",
                "finalizers": ["hold"],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "root", "uid": root["metadata"]["uid"]}
                ],
            }
        },
        namespace="default",
    )
    d = store.delete("", "configmaps", "default", "root", propagation_policy="Foreground")
    assert "foregroundDeletion" in d["metadata"]["finalizers"]
    assert store.get("", "configmaps", "default", "child")["metadata"]["deletionTimestamp"]
    assert store.get("", "configmaps", "default", "root")  # still there: the child is held by a finalizer
    store.patch("", "configmaps", "default", "child", {"metadata": {"finalizers": []}}, "merge")
    assert err(store.get, "", "configmaps", "default", "child").code == 404
    assert err(store.get, "", "configmaps", "default", "root").code == 404


def test_orphan_keeps_dependents_and_strips_owner_refs(store: Store) -> None:
    root = store.create("", "configmaps", cm("root"), namespace="default")
    store.create("", "configmaps", _owned("child", root), namespace="default")
    store.delete("", "configmaps", "default", "root", propagation_policy="Orphan")
    child = store.get("", "configmaps", "default", "child")
    assert "ownerReferences" not in child["metadata"]


def test_namespace_deletion_cascades(store: Store) -> None:
    store.create("", "namespaces", {"metadata": {"name": "team"}})
    store.create("", "configmaps", cm("a", finalizers=["hold"]), namespace="team")
    store.create("", "configmaps", cm("b"), namespace="team")
    ns = store.delete("", "namespaces", None, "team")
    assert ns["status"]["phase"] == "Terminating"
    e = err(store.create, "", "configmaps", cm("c"), namespace="team")
    assert (e.code, e.reason) == (403, "Forbidden")
    assert [o["metadata"]["name"] for o in store.list("", "configmaps", "team")["items"]] == ["a"]
    store.patch("", "configmaps", "team", "a", {"metadata": {"finalizers": None}}, "merge")
    assert err(store.get, "", "namespaces", None, "team").code == 404


def test_crd_lifecycle_serves_and_removes_the_resource(store: Store) -> None:
    crd = store.create("apiextensions.k8s.io", "customresourcedefinitions", CRD)
    conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conds["Established"] == "True"
    info = store.resource("example.com", "widgets")
    assert info.namespaced and info.short_names == ("wd",) and "status" in info.subresources
    assert info.printer_columns[0]["jsonPath"] == ".spec.size"
    store.create(
        "example.com",
        "widgets",
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}},
        namespace="default",
    )
    store.delete("apiextensions.k8s.io", "customresourcedefinitions", None, "widgets.example.com")
    assert err(store.resource, "example.com", "widgets").code == 404
    assert err(store.get, "apiextensions.k8s.io", "customresourcedefinitions", None, "widgets.example.com").code == 404
    bad = {**CRD, "metadata": {"name": "wrong.example.com"}}
    assert err(store.create, "apiextensions.k8s.io", "customresourcedefinitions", bad).code == 422


def test_job_defaults_selector_and_labels(store: Store) -> None:
    job = store.create(
        "batch",
        "jobs",
        {
            "metadata": {"name": "j"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}},
        },
        namespace="default",
    )
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["job-name"] == "j" and labels["batch.kubernetes.io/controller-uid"] == uid
    assert job["spec"]["completions"] == 1 and job["spec"]["parallelism"] == 1 and job["spec"]["backoffLimit"] == 6
    bad = {"metadata": {"name": "k"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    assert err(store.create, "batch", "jobs", bad, namespace="default").code == 422


def test_list_limit_continue_and_selectors(store: Store) -> None:
    for i in range(5):
        store.create("", "configmaps", cm(f"c{i}", labels={"even": str(i % 2 == 0).lower()}), namespace="default")
    first = store.list("", "configmaps", "default", limit=2)
    assert [o["metadata"]["name"] for o in first["items"]] == ["c0", "c1"]
    assert first["metadata"]["remainingItemCount"] == 3
    second = store.list("", "configmaps", "default", limit=2, continue_token=first["metadata"]["continue"])
    assert [o["metadata"]["name"] for o in second["items"]] == ["c2", "c3"]
    third = store.list("", "configmaps", "default", limit=2, continue_token=second["metadata"]["continue"])
    assert [o["metadata"]["name"] for o in third["items"]] == ["c4"] and "continue" not in third["metadata"]
    even = store.list("", "configmaps", "default", label_selector="even=true")
    assert [o["metadata"]["name"] for o in even["items"]] == ["c0", "c2", "c4"]
    named = store.list("", "configmaps", None, field_selector="metadata.name=c3")
    assert [o["metadata"]["name"] for o in named["items"]] == ["c3"]
    assert err(store.list, "", "configmaps", None, field_selector="data.k=v").code == 400
    assert store.list("", "configmaps", "default")["kind"] == "ConfigMapList"


def test_watch_replays_from_resource_version_and_sees_live_events(store: Store) -> None:
    a = store.create("", "configmaps", cm("a"), namespace="default")
    store.patch("", "configmaps", "default", "a", {"data": {"k": "2"}}, "merge")

    async def run() -> list[tuple[str, str, str]]:
        w = store.watch("", "configmaps", "default", resource_version=a["metadata"]["resourceVersion"])
        store.delete("", "configmaps", "default", "a")
        got = []
        async for ev in w:
            got.append((ev["type"], ev["object"]["metadata"]["name"], ev["object"]["metadata"]["resourceVersion"]))
            if len(got) == 2:
                w.close()
        return got

    got = asyncio.run(run())
    assert [g[0] for g in got] == ["MODIFIED", "DELETED"]
    assert int(got[1][2]) == int(got[0][2]) + 1  # the DELETED event carries the delete's own resourceVersion


def test_watch_without_resource_version_starts_with_current_state(store: Store) -> None:
    store.create("", "configmaps", cm("a"), namespace="default")

    async def run() -> list[str]:
        w = store.watch("", "configmaps", "default")
        store.create("", "configmaps", cm("b"), namespace="default")
        out = []
        async for ev in w:
            out.append(f"{ev['type']} {ev['object']['metadata']['name']}")
            if len(out) == 2:
                break
        w.close()
        return out

    assert asyncio.run(run()) == ["ADDED a", "ADDED b"]


def test_watch_too_old_resource_version_is_410() -> None:
    store = Store(history=5)
    for i in range(20):
        store.create("", "configmaps", cm(f"c{i}"), namespace="default")

    async def run() -> dict[str, Any]:
        w = store.watch("", "configmaps", resource_version="3")
        return await w.__anext__()

    ev = asyncio.run(run())
    assert ev["type"] == "ERROR" and ev["object"]["code"] == 410
    assert "too old resource version" in ev["object"]["message"]


def test_watch_with_selector_turns_label_changes_into_added_and_deleted(store: Store) -> None:
    store.create("", "configmaps", cm("a"), namespace="default")

    async def run() -> list[str]:
        w = store.watch("", "configmaps", "default", label_selector="app=x")
        store.patch("", "configmaps", "default", "a", {"metadata": {"labels": {"app": "x"}}}, "merge")
        store.patch("", "configmaps", "default", "a", {"data": {"q": "1"}}, "merge")
        store.patch("", "configmaps", "default", "a", {"metadata": {"labels": {"app": "y"}}}, "merge")
        out = []
        async for ev in w:
            out.append(ev["type"])
            if len(out) == 3:
                break
        w.close()
        return out

    assert asyncio.run(run()) == ["ADDED", "MODIFIED", "DELETED"]


def test_watch_bookmarks_carry_the_current_resource_version(store: Store) -> None:
    async def run() -> dict[str, Any]:
        w = store.watch(
            "",
            "configmaps",
            "default",
            resource_version=store.resource_version,
            allow_bookmarks=True,
            bookmark_interval=0.05,
        )
        store.create("", "configmaps", cm("a"), namespace="default")
        first = await w.__anext__()
        assert first["type"] == "ADDED"
        ev = await asyncio.wait_for(w.__anext__(), 2)
        w.close()
        return ev

    ev = asyncio.run(run())
    assert ev["type"] == "BOOKMARK" and ev["object"]["metadata"]["resourceVersion"] == store.resource_version


def test_subscribe_sees_every_commit_and_unsubscribes(store: Store) -> None:
    seen: list[tuple[str, str]] = []
    unsub = store.subscribe(lambda t, info, o: seen.append((t, info.plural)))
    store.create("", "configmaps", cm("a"), namespace="default")
    store.delete("", "configmaps", "default", "a")
    unsub()
    store.create("", "configmaps", cm("b"), namespace="default")
    assert seen == [("ADDED", "configmaps"), ("DELETED", "configmaps")]


def test_state_round_trip_keeps_uids_versions_and_crds(store: Store) -> None:
    store.create("apiextensions.k8s.io", "customresourcedefinitions", CRD)
    w = store.create("example.com", "widgets", {"metadata": {"name": "w"}, "spec": {"size": 3}}, namespace="default")
    other = Store()
    other.load_state(store.dump_state())
    got = other.get("example.com", "widgets", "default", "w")
    assert got["metadata"]["uid"] == w["metadata"]["uid"] and got["spec"]["size"] == 3
    nxt = other.create("", "configmaps", cm("x"), namespace="default")
    assert int(nxt["metadata"]["resourceVersion"]) > int(w["metadata"]["resourceVersion"])


def test_metadata_validation_is_422_naming_the_field(store: Store) -> None:
    e = err(store.create, "", "configmaps", cm("a", labels={"app": "x" * 64}), namespace="default")
    assert e.code == 422 and e.status()["details"]["causes"][0]["field"] == "metadata.labels"
    assert "63 characters" in e.message
    e = err(store.create, "", "configmaps", cm("a", annotations={"bad key": "v"}), namespace="default")
    assert e.code == 422 and "metadata.annotations" in e.message
    e = err(
        store.create,
        "",
        "configmaps",
        cm("a", ownerReferences=[{"apiVersion": "v1", "kind": "X", "name": "o"}]),
        namespace="default",
    )
    assert e.code == 422 and "metadata.ownerReferences.uid" in e.message
    store.create("", "configmaps", cm("a", labels={"example.com/team": "a-1"}), namespace="default")
    e = err(store.patch, "", "configmaps", "default", "a", {"metadata": {"labels": {"x": "has space"}}}, "merge")
    assert e.code == 422


def test_terminating_namespace_survives_its_own_updates_until_empty(store: Store) -> None:
    store.create("", "namespaces", {"metadata": {"name": "t"}})
    store.create("", "configmaps", cm("held", finalizers=["hold"]), namespace="t")
    store.delete("", "namespaces", None, "t")
    store.patch("", "namespaces", None, "t", {"metadata": {"labels": {"x": "y"}}}, "merge")
    assert store.get("", "namespaces", None, "t")["metadata"]["labels"]["x"] == "y"
    store.patch("", "configmaps", "t", "held", {"metadata": {"finalizers": None}}, "merge")
    assert err(store.get, "", "namespaces", None, "t").code == 404


def test_no_new_custom_resources_while_the_crd_is_terminating(store: Store) -> None:
    store.create("apiextensions.k8s.io", "customresourcedefinitions", CRD)
    store.create("example.com", "widgets", {"metadata": {"name": "w", "finalizers": ["hold"]}}, namespace="default")
    store.delete("apiextensions.k8s.io", "customresourcedefinitions", None, "widgets.example.com")
    e = err(store.create, "example.com", "widgets", {"metadata": {"name": "v"}}, namespace="default")
    assert e.code == 405
    store.patch("example.com", "widgets", "default", "w", {"metadata": {"finalizers": None}}, "merge")
    assert err(store.resource, "example.com", "widgets").code == 404


def test_apply_patch_creates_then_merges(store: Store) -> None:
    ap = "application/apply-patch+yaml"
    made = store.patch("", "configmaps", "default", "applied", "data:\n  a: '1'\n", ap)
    assert made["metadata"]["name"] == "applied" and made["data"] == {"a": "1"}
    again = store.patch("", "configmaps", "default", "applied", {"data": {"b": "2"}}, ap)
    assert again["data"] == {"a": "1", "b": "2"} and again["metadata"]["uid"] == made["metadata"]["uid"]


def test_pod_status_subresource_changes_only_status(store: Store) -> None:
    store.create("", "pods", pod("s"), namespace="default")
    got = store.patch(
        "",
        "pods",
        "default",
        "s",
        {"status": {"phase": "Running"}, "metadata": {"labels": {"x": "y"}}},
        "merge",
        subresource="status",
    )
    assert got["status"]["phase"] == "Running" and "labels" not in got["metadata"]
    got = store.patch("", "pods", "default", "s", {"status": {"phase": "Failed"}}, "merge")
    assert got["status"]["phase"] == "Running"
    assert err(store.patch, "", "configmaps", "default", "nope", {}, "merge", subresource="status").code == 404


def test_dry_run_mode_stores_nothing(store: Store) -> None:
    rv = store.resource_version
    with store.dry_run_mode():
        made = store.create("", "configmaps", cm("dry"), namespace="default")
    assert made["metadata"]["uid"] and store.resource_version == rv
    assert err(store.get, "", "configmaps", "default", "dry").code == 404


def test_fault_helpers_end_watches(store: Store) -> None:
    async def run() -> tuple[list[str], list[str]]:
        dropped = store.watch("", "configmaps", resource_version=store.resource_version)
        expired = store.watch("", "configmaps", resource_version=store.resource_version)
        assert store.drop_watches() == 2
        got_dropped = [ev["type"] async for ev in dropped]
        expired2 = store.watch("", "configmaps", resource_version=store.resource_version)
        assert store.expire_watches("", "configmaps") == 1
        got_expired = [ev["object"]["code"] async for ev in expired2]
        assert [ev async for ev in expired] == []
        return got_dropped, got_expired

    assert asyncio.run(run()) == ([], [410])


def test_status_writes_are_validated_against_the_crd_schema(store: Store) -> None:
    crd = {
        **CRD,
        "spec": {
            **CRD["spec"],
            "versions": [
                {
                    **CRD["spec"]["versions"][0],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
                            },
                        }
                    },
                }
            ],
        },
    }
    store.create("apiextensions.k8s.io", "customresourcedefinitions", crd)
    store.create("example.com", "widgets", {"metadata": {"name": "w"}, "spec": {}}, namespace="default")
    e = err(
        store.patch,
        "example.com",
        "widgets",
        "default",
        "w",
        {"status": {"ready": "yes"}},
        "merge",
        subresource="status",
    )
    assert e.code == 422 and "status.ready" in e.message
    got = store.patch(
        "example.com", "widgets", "default", "w", {"status": {"ready": True, "junk": 1}}, "merge", subresource="status"
    )
    assert got["status"] == {"ready": True}


def test_priority_classes_are_served_cluster_wide(store: Store) -> None:
    """gangq reads pods' PriorityClasses (scheduling.k8s.io/v1) for gang priorities."""
    created = store.create(
        "scheduling.k8s.io",
        "priorityclasses",
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
    )
    assert created["metadata"].get("namespace") is None
    assert store.get("scheduling.k8s.io", "priorityclasses", None, "high")["value"] == 1000
    assert store.resource("scheduling.k8s.io", "priorityclasses").short_names == ("pc",)
    with pytest.raises(ApiError) as err:
        store.create("scheduling.k8s.io", "priorityclasses", {"metadata": {"name": "high"}, "value": 1})
    assert err.value.code == 409
