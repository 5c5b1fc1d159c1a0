"""The official `kubernetes` Python client against the sandbox: CRUD, patches, watches, error paths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from gangq.sandbox.runtime import Sandbox

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 0}}},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
        }],
    },
}


@pytest.fixture(scope="module")
def api() -> Iterator[client.ApiClient]:
    with Sandbox(cluster=False, history=200) as sb:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(sb.kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as c:
            c.sandbox = sb  # type: ignore[attr-defined]
            yield c


def cm(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_crud_and_all_three_patch_types_on_builtins(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    created = core.create_namespaced_config_map("default", cm("crud", a="1"))
    assert created.metadata.uid and created.metadata.resource_version
    core.patch_namespaced_config_map("crud", "default", {"data": {"b": "2"}})  # strategic merge
    core.patch_namespaced_config_map("crud", "default", [{"op": "replace", "path": "/data/a", "value": "9"}])
    got = core.read_namespaced_config_map("crud", "default")
    assert got.data == {"a": "9", "b": "2"}
    got.data["c"] = "3"
    replaced = core.replace_namespaced_config_map("crud", "default", got)
    assert int(replaced.metadata.resource_version) > int(got.metadata.resource_version)
    names = [i.metadata.name for i in core.list_namespaced_config_map("default").items]
    assert "crud" in names
    core.delete_namespaced_config_map("crud", "default")
    with pytest.raises(ApiException) as ei:
        core.read_namespaced_config_map("crud", "default")
    assert ei.value.status == 404


def test_strategic_merge_keeps_containers_merged_by_name(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "smp", "labels": {"a": "1"}},
           "spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:1"}]}}
    core.create_namespaced_pod("default", pod)
    core.patch_namespaced_pod("smp", "default", {"spec": {"containers": [{"name": "b", "image": "y:2"}]}})
    got = core.read_namespaced_pod("smp", "default")
    assert [(c.name, c.image) for c in got.spec.containers] == [("a", "x:1"), ("b", "y:2")]
    with pytest.raises(ApiException) as ei:  # pod spec is immutable except images and a few fields
        core.patch_namespaced_pod("smp", "default", {"spec": {"restartPolicy": "Never"}})
    assert ei.value.status == 422


def test_custom_objects_merge_and_json_patch_status_and_422(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(CRD)
    co = client.CustomObjectsApi(api)
    body = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"replicas": 1}}
    co.create_namespaced_custom_object("example.com", "v1", "default", "gadgets", body)
    co.patch_namespaced_custom_object("example.com", "v1", "default", "gadgets", "g", {"spec": {"replicas": 2}},
                                      _content_type="application/merge-patch+json")
    co.patch_namespaced_custom_object("example.com", "v1", "default", "gadgets", "g",
                                      [{"op": "replace", "path": "/spec/replicas", "value": 3}],
                                      _content_type="application/json-patch+json")
    got = co.patch_namespaced_custom_object_status("example.com", "v1", "default", "gadgets", "g",
                                                   {"status": {"ready": True}},
                                                   _content_type="application/merge-patch+json")
    assert got["spec"]["replicas"] == 3 and got["status"] == {"ready": True} and got["metadata"]["generation"] == 3
    with pytest.raises(ApiException) as ei:
        co.patch_namespaced_custom_object("example.com", "v1", "default", "gadgets", "g",
                                          {"spec": {"replicas": -1}}, _content_type="application/merge-patch+json")
    assert ei.value.status == 422
    assert '"reason":"Invalid"' in ei.value.body.replace(" ", "") and "spec.replicas" in ei.value.body
    with pytest.raises(ApiException) as ei:
        co.patch_namespaced_custom_object("example.com", "v1", "default", "gadgets", "g",
                                          [{"op": "test", "path": "/spec/replicas", "value": 99}],
                                          _content_type="application/json-patch+json")
    assert ei.value.status == 422


def test_conflicts_409(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", cm("conflict", a="1"))
    with pytest.raises(ApiException) as ei:
        core.create_namespaced_config_map("default", cm("conflict", a="1"))
    assert ei.value.status == 409 and "AlreadyExists" in ei.value.body
    stale = core.read_namespaced_config_map("conflict", "default")
    core.patch_namespaced_config_map("conflict", "default", {"data": {"a": "2"}})
    stale.data = {"a": "3"}
    with pytest.raises(ApiException) as ei:
        core.replace_namespaced_config_map("conflict", "default", stale)
    assert ei.value.status == 409 and "Conflict" in ei.value.body


def test_watch_resumes_from_a_resource_version(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    first = core.create_namespaced_config_map("default", cm("w-a"))
    core.create_namespaced_config_map("default", cm("w-b"))
    core.delete_namespaced_config_map("w-a", "default")
    w = watch.Watch()
    seen = []
    for ev in w.stream(core.list_namespaced_config_map, "default", resource_version=first.metadata.resource_version,
                       timeout_seconds=2):
        seen.append((ev["type"], ev["object"].metadata.name))
        if len(seen) == 2:
            w.stop()
    assert seen == [("ADDED", "w-b"), ("DELETED", "w-a")]


def test_watch_from_a_compacted_resource_version_is_410(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    old = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(450):  # history=200 in this sandbox: the old version falls out
        core.create_namespaced_config_map("default", cm(f"flood-{i}"))
    w = watch.Watch()
    with pytest.raises(ApiException) as ei:
        for _ in w.stream(core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=2):
            pass
    assert ei.value.status == 410
