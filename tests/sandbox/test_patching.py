"""Patch semantics of the sandbox: RFC 7386 merge patch, RFC 6902 JSON patch, Kubernetes strategic merge.

Expected results follow the Kubernetes documentation ("Update API Objects in Place Using kubectl patch",
the strategic-merge-patch design doc) and the patch strategies declared on the k8s.io/api types.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangq.sandbox.patching import (
    PatchError,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
    create_merge_patch,
    merge_patch_value,
    supports_strategic_merge,
)


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "default",
            "labels": {"app": "web", "tier": "fe"},
            "finalizers": ["a.example.com/f", "b.example.com/f"],
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u1"},
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {"name": "sidecar", "image": "envoy:1"},
            ],
            "volumes": [{"name": "data", "hostPath": {"path": "/tmp"}}],
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "imagePullSecrets": [{"name": "regcred"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False"},
            ],
        },
    }


def _names(items: list[dict[str, Any]], key: str = "name") -> list[Any]:
    return [item[key] for item in items]


# --------------------------------------------------------------------------------------------------
# merge patch (RFC 7386): the RFC's own appendix A examples
# --------------------------------------------------------------------------------------------------

RFC7386_CASES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), RFC7386_CASES)
def test_merge_patch_rfc7386_examples(target: dict[str, Any], patch: dict[str, Any], expected: Any) -> None:
    before = copy.deepcopy(target)
    assert apply_merge_patch(target, patch) == expected
    assert target == before  # inputs are never mutated


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": 1}, "x", "x"),
    ],
)
def test_merge_patch_value_non_object_patch_replaces(target: Any, patch: Any, expected: Any) -> None:
    assert merge_patch_value(target, patch) == expected


def test_merge_patch_non_object_body_is_400() -> None:
    with pytest.raises(PatchError) as exc:
        apply_merge_patch({"a": 1}, ["x"])
    assert exc.value.code == 400


def test_merge_patch_lists_are_replaced_and_result_is_independent() -> None:
    pod = _pod()
    patch = {"spec": {"containers": [{"name": "only", "image": "x"}]}, "metadata": {"labels": {"tier": None}}}
    out = apply_merge_patch(pod, patch)
    assert out["spec"]["containers"] == [{"name": "only", "image": "x"}]
    assert out["metadata"]["labels"] == {"app": "web"}
    out["spec"]["containers"][0]["image"] = "mutated"
    assert patch["spec"]["containers"][0]["image"] == "x"
    assert pod["metadata"]["labels"]["tier"] == "fe"


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text("abc", max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text("abcd", max_size=2), children, max_size=3)
    ),
    max_leaves=12,
)
_no_null_obj = st.dictionaries(
    st.text("abcd", max_size=2),
    st.recursive(
        st.booleans() | st.integers(-5, 5) | st.text("abc", max_size=3),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text("abcd", max_size=2), c, max_size=3),
        max_leaves=10,
    ),
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(_json.filter(lambda x: isinstance(x, dict)), _no_null_obj)
def test_merge_patch_of_a_diff_reproduces_the_target(src: dict[str, Any], dst: dict[str, Any]) -> None:
    patch = create_merge_patch(src, dst)
    assert apply_merge_patch(src, patch) == dst


@settings(max_examples=150, deadline=None)
@given(_json.filter(lambda x: isinstance(x, dict)), _json.filter(lambda x: isinstance(x, dict)))
def test_json_patch_of_a_diff_reproduces_the_target(src: dict[str, Any], dst: dict[str, Any]) -> None:
    ops = jsonpatch.make_patch(src, dst).patch
    assert apply_json_patch(src, ops) == dst


@settings(max_examples=150, deadline=None)
@given(_json.filter(lambda x: isinstance(x, dict)), _no_null_obj)
def test_strategic_merge_equals_merge_patch_for_kinds_without_merge_lists(src: dict[str, Any], patch: Any) -> None:
    # A ConfigMap has no merge lists besides metadata's: any patch without "$" keys and without a
    # "metadata" key behaves exactly like a JSON merge patch.
    patch = {k: v for k, v in patch.items() if k != "metadata"}
    src = {k: v for k, v in src.items() if k != "metadata"}
    assert apply_strategic_merge_patch(src, patch, "ConfigMap") == apply_merge_patch(src, patch)


# --------------------------------------------------------------------------------------------------
# JSON patch (RFC 6902)
# --------------------------------------------------------------------------------------------------


def test_json_patch_operations() -> None:
    pod = _pod()
    out = apply_json_patch(
        pod,
        [
            {"op": "test", "path": "/metadata/name", "value": "p"},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:2"},
            {"op": "add", "path": "/metadata/labels/new", "value": "yes"},
            {"op": "remove", "path": "/metadata/labels/tier"},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "c"},
            {"op": "move", "from": "/metadata/labels/app", "path": "/metadata/labels/application"},
            {"op": "copy", "from": "/spec/containers/1/image", "path": "/metadata/annotations"},
        ],
    )
    assert out["spec"]["containers"][0]["image"] == "busybox:2"
    assert out["metadata"]["labels"] == {"new": "yes", "application": "web"}
    assert out["metadata"]["finalizers"][-1] == "c"
    assert out["metadata"]["annotations"] == "envoy:1"
    assert pod == _pod()


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([{"op": "test", "path": "/metadata/name", "value": "other"}], 422),  # failed test op
        ([{"op": "remove", "path": "/metadata/missing"}], 422),
        ([{"op": "replace", "path": "/spec/nope/deeper", "value": 1}], 422),
        ([{"op": "add", "path": "/spec/containers/9", "value": {}}], 422),
        ([{"op": "frobnicate", "path": "/a"}], 422),
        ([{"path": "/a", "value": 1}], 422),  # no op
        ([{"op": "add", "value": 1}], 422),  # no path
        ([{"op": "replace", "path": "", "value": [1]}], 422),  # result is not an object
        ({"op": "add"}, 400),  # body is not an array
        ("nonsense", 400),
        ([1, 2], 400),  # operations are not objects
    ],
)
def test_json_patch_failures(ops: Any, code: int) -> None:
    pod = _pod()
    with pytest.raises(PatchError) as exc:
        apply_json_patch(pod, ops)
    assert exc.value.code == code
    assert exc.value.message
    assert pod == _pod()


def test_json_patch_failed_test_leaves_no_partial_changes() -> None:
    pod = _pod()
    with pytest.raises(PatchError):
        apply_json_patch(
            pod,
            [
                {"op": "replace", "path": "/spec/containers/0/image", "value": "x"},
                {"op": "test", "path": "/status/phase", "value": "Pending"},
            ],
        )
    assert pod["spec"]["containers"][0]["image"] == "busybox:1"


# --------------------------------------------------------------------------------------------------
# strategic merge patch
# --------------------------------------------------------------------------------------------------


def test_smp_containers_merge_by_name_and_keep_unmentioned() -> None:
    pod = _pod()
    out = apply_strategic_merge_patch(pod, {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}, "Pod")
    assert _names(out["spec"]["containers"]) == ["main", "sidecar"]
    main = out["spec"]["containers"][0]
    assert main["image"] == "busybox:2"
    assert main["env"] == pod["spec"]["containers"][0]["env"]  # untouched fields of the item kept
    assert pod == _pod()


def test_smp_new_list_item_is_appended() -> None:
    out = apply_strategic_merge_patch(_pod(), {"spec": {"containers": [{"name": "extra", "image": "x"}]}}, "Pod")
    assert _names(out["spec"]["containers"]) == ["main", "sidecar", "extra"]


@pytest.mark.parametrize(
    ("container_patch", "field", "key", "expected"),
    [
        ({"env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}]}, "env", "name", ["A", "B", "C"]),
        ({"ports": [{"containerPort": 443}]}, "ports", "containerPort", [80, 443]),
        ({"ports": [{"containerPort": 80, "name": "http"}]}, "ports", "containerPort", [80]),
        (
            {"volumeMounts": [{"name": "cache", "mountPath": "/cache"}]},
            "volumeMounts",
            "mountPath",
            ["/data", "/cache"],
        ),
        ({"env": [{"name": "A", "$patch": "delete"}]}, "env", "name", ["B"]),
    ],
)
def test_smp_nested_container_lists_merge_by_their_keys(
    container_patch: dict[str, Any], field: str, key: str, expected: list[Any]
) -> None:
    patch = {"spec": {"containers": [{"name": "main", **container_patch}]}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert _names(out["spec"]["containers"][0][field], key) == expected


def test_smp_env_value_is_merged_into_the_matching_item() -> None:
    patch = {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "20"}]}]}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert out["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "20"}]


@pytest.mark.parametrize(
    ("kind", "patch", "path", "expected"),
    [
        # status conditions merge by type (Pod, Job, Node, Namespace)
        (
            "Pod",
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            ("status", "conditions"),
            [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        ),
        # volumes by name; imagePullSecrets by name
        (
            "Pod",
            {"spec": {"volumes": [{"name": "cfg", "configMap": {"name": "c"}}]}},
            ("spec", "volumes"),
            [{"name": "data", "hostPath": {"path": "/tmp"}}, {"name": "cfg", "configMap": {"name": "c"}}],
        ),
        (
            "Pod",
            {"spec": {"imagePullSecrets": [{"name": "other"}]}},
            ("spec", "imagePullSecrets"),
            [{"name": "regcred"}, {"name": "other"}],
        ),
        # tolerations carry no patch strategy: replaced atomically
        (
            "Pod",
            {"spec": {"tolerations": [{"key": "zone", "operator": "Exists"}]}},
            ("spec", "tolerations"),
            [{"key": "zone", "operator": "Exists"}],
        ),
        # finalizers: a set-merge of strings
        (
            "Pod",
            {"metadata": {"finalizers": ["b.example.com/f", "c.example.com/f"]}},
            ("metadata", "finalizers"),
            ["a.example.com/f", "b.example.com/f", "c.example.com/f"],
        ),
        # ownerReferences by uid
        (
            "Pod",
            {"metadata": {"ownerReferences": [{"uid": "u2", "kind": "Job", "name": "k", "apiVersion": "batch/v1"}]}},
            ("metadata", "ownerReferences"),
            [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u1"},
                {"uid": "u2", "kind": "Job", "name": "k", "apiVersion": "batch/v1"},
            ],
        ),
    ],
)
def test_smp_pod_list_strategies(kind: str, patch: dict[str, Any], path: tuple[str, str], expected: Any) -> None:
    out = apply_strategic_merge_patch(_pod(), patch, kind)
    assert out[path[0]][path[1]] == expected


def _job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "finalizers": ["batch.kubernetes.io/job-tracking"]},
        "spec": {
            "parallelism": 2,
            "template": {
                "metadata": {"labels": {"job-name": "j"}},
                "spec": {
                    "containers": [{"name": "w", "image": "a", "env": [{"name": "X", "value": "1"}]}],
                    "restartPolicy": "Never",
                },
            },
        },
        "status": {"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]},
    }


def test_smp_job_pod_template_is_nested_the_same_way() -> None:
    patch = {
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "w", "env": [{"name": "Y", "value": "2"}]}, {"name": "side"}]}
            }
        },
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }
    out = apply_strategic_merge_patch(_job(), patch, "Job")
    containers = out["spec"]["template"]["spec"]["containers"]
    assert _names(containers) == ["w", "side"]
    assert containers[0]["image"] == "a"
    assert _names(containers[0]["env"]) == ["X", "Y"]
    assert [c["type"] for c in out["status"]["conditions"]] == ["Suspended", "Complete"]
    assert out["spec"]["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"])
def test_smp_workload_templates(kind: str) -> None:
    target = {
        "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}}
    }
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "2"}]}}}}
    out = apply_strategic_merge_patch(target, patch, kind)
    assert out["spec"]["template"]["spec"]["containers"] == [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]


def test_smp_cronjob_job_template() -> None:
    target = {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}]}}}}}}
    patch = {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "2"}]}}}}}}
    out = apply_strategic_merge_patch(target, patch, "CronJob")
    assert _names(out["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]) == ["a", "b"]


def test_smp_service_ports_merge_by_port() -> None:
    svc = {"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 8443}]}}
    out = apply_strategic_merge_patch(svc, {"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}, "Service")
    assert out["spec"]["ports"] == [{"port": 80, "targetPort": 9090}, {"port": 443, "targetPort": 8443}]


def test_smp_node_conditions_merge_taints_atomic() -> None:
    node = {
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }
    patch = {
        "spec": {"taints": [{"key": "b", "effect": "NoExecute"}]},
        "status": {
            "conditions": [{"type": "Ready", "status": "False"}],
            "addresses": [{"type": "Hostname", "address": "n1"}],
        },
    }
    out = apply_strategic_merge_patch(node, patch, "Node")
    assert out["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]  # NodeSpec.Taints has no patch strategy
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "False"},
        {"type": "MemoryPressure", "status": "False"},
    ]
    assert _names(out["status"]["addresses"], "type") == ["InternalIP", "Hostname"]


def test_smp_namespace_spec_finalizers_are_atomic_but_metadata_finalizers_merge() -> None:
    ns = {"metadata": {"finalizers": ["x"]}, "spec": {"finalizers": ["kubernetes"]}}
    out = apply_strategic_merge_patch(
        ns, {"metadata": {"finalizers": ["y"]}, "spec": {"finalizers": ["z"]}}, "Namespace"
    )
    assert out["metadata"]["finalizers"] == ["x", "y"]
    assert out["spec"]["finalizers"] == ["z"]


# ---- directives ---------------------------------------------------------------------------------


def test_smp_patch_delete_removes_list_item() -> None:
    out = apply_strategic_merge_patch(
        _pod(), {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}, "Pod"
    )
    assert _names(out["spec"]["containers"]) == ["main"]


def test_smp_patch_delete_of_missing_item_is_a_noop() -> None:
    out = apply_strategic_merge_patch(_pod(), {"spec": {"containers": [{"name": "nope", "$patch": "delete"}]}}, "Pod")
    assert _names(out["spec"]["containers"]) == ["main", "sidecar"]


def test_smp_patch_replace_on_a_list() -> None:
    patch = {"spec": {"containers": [{"$patch": "replace"}, {"name": "new", "image": "n"}]}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert out["spec"]["containers"] == [{"name": "new", "image": "n"}]


def test_smp_patch_replace_on_a_map() -> None:
    patch = {"metadata": {"labels": {"$patch": "replace", "only": "this"}}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert out["metadata"]["labels"] == {"only": "this"}


def test_smp_patch_delete_on_a_map_removes_it() -> None:
    out = apply_strategic_merge_patch(_pod(), {"metadata": {"labels": {"$patch": "delete"}}}, "Pod")
    assert "labels" not in out["metadata"]
    assert out["metadata"]["name"] == "p"


def test_smp_patch_merge_directive_is_the_default() -> None:
    out = apply_strategic_merge_patch(_pod(), {"metadata": {"labels": {"$patch": "merge", "x": "1"}}}, "Pod")
    assert out["metadata"]["labels"] == {"app": "web", "tier": "fe", "x": "1"}
    patch = {"spec": {"containers": [{"name": "main", "$patch": "merge", "image": "i"}]}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert out["spec"]["containers"][0]["image"] == "i"
    assert "$patch" not in out["spec"]["containers"][0]


def test_smp_delete_from_primitive_list_finalizers() -> None:
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/f"]}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert out["metadata"]["finalizers"] == ["b.example.com/f"]


def test_smp_delete_from_primitive_list_together_with_additions() -> None:
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/f"], "finalizers": ["c"]}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert out["metadata"]["finalizers"] == ["b.example.com/f", "c"]


def test_smp_set_element_order_reorders_containers() -> None:
    patch = {"spec": {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "main"}]}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert _names(out["spec"]["containers"]) == ["sidecar", "main"]
    assert out["spec"]["containers"][1]["env"][0]["name"] == "A"


def test_smp_set_element_order_with_new_items() -> None:
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "new"}, {"name": "sidecar"}, {"name": "main"}],
            "containers": [{"name": "new", "image": "n"}],
        }
    }
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert _names(out["spec"]["containers"]) == ["new", "sidecar", "main"]


def test_smp_set_element_order_keeps_server_only_items_in_server_position() -> None:
    target = {"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}}
    # the client only knows a and c and wants c before a; b is server-only and stays between
    patch = {"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}]}}
    out = apply_strategic_merge_patch(target, patch, "Pod")
    names = _names(out["spec"]["containers"])
    assert names.index("c") < names.index("a")  # the client's order
    assert sorted(_names(out["spec"]["containers"])) == ["a", "b", "c"]


def test_smp_set_element_order_on_primitive_list() -> None:
    patch = {"metadata": {"$setElementOrder/finalizers": ["b.example.com/f", "a.example.com/f"]}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert out["metadata"]["finalizers"] == ["b.example.com/f", "a.example.com/f"]


def test_smp_retain_keys_drops_unlisted_keys() -> None:
    # switching a volume's source: hostPath -> emptyDir, as kubectl apply does for retainKeys lists
    patch = {"spec": {"volumes": [{"name": "data", "$retainKeys": ["emptyDir", "name"], "emptyDir": {}}]}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert out["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]


def test_smp_retain_keys_on_a_map() -> None:
    target = {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
    out = apply_strategic_merge_patch(target, patch, "Deployment")
    assert out["spec"]["strategy"] == {"type": "Recreate"}


def test_smp_retain_keys_rejects_patch_fields_outside_the_list() -> None:
    patch = {"spec": {"volumes": [{"name": "data", "$retainKeys": ["name"], "emptyDir": {}}]}}
    with pytest.raises(PatchError) as exc:
        apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert exc.value.code == 422
    assert "emptyDir" in exc.value.message


def test_smp_null_deletes_a_key() -> None:
    patch = {"metadata": {"labels": {"tier": None}}, "status": {"phase": None}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert out["metadata"]["labels"] == {"app": "web"}
    assert "phase" not in out["status"]


def test_smp_null_inside_list_item_deletes_field_of_item() -> None:
    patch = {"spec": {"containers": [{"name": "main", "ports": None}]}}
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert "ports" not in out["spec"]["containers"][0]


def test_smp_directives_never_leak_into_the_result() -> None:
    patch = {
        "metadata": {"$setElementOrder/finalizers": ["b.example.com/f"], "labels": {"$patch": "merge", "z": "1"}},
        "spec": {"containers": [{"name": "new", "env": [{"name": "Q", "$patch": "delete"}]}]},
    }
    out = apply_strategic_merge_patch(_pod(), patch, "Pod")

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                assert not key.startswith("$"), key
                walk(sub)
        elif isinstance(value, list):
            for sub in value:
                walk(sub)

    walk(out)
    assert out["spec"]["containers"][-1] == {"name": "new", "env": []}


def test_smp_unknown_kind_treats_lists_atomically() -> None:
    target = {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}, "metadata": {"finalizers": ["x"]}}
    patch = {"spec": {"containers": [{"name": "b", "image": "2"}]}, "metadata": {"finalizers": ["y"]}}
    out = apply_strategic_merge_patch(target, patch, "Widget")
    assert out["spec"]["containers"] == [{"name": "b", "image": "2"}]
    assert out["metadata"]["finalizers"] == ["y"]
    assert not supports_strategic_merge("Widget")
    assert supports_strategic_merge("Pod") and supports_strategic_merge("Job")


@pytest.mark.parametrize(
    ("patch", "code", "needle"),
    [
        ({"spec": {"containers": [{"image": "no-name"}]}}, 422, "merge key"),
        ({"spec": {"containers": [{"$patch": "delete"}]}}, 422, "merge key"),
        ({"spec": {"containers": [{"name": "main", "$patch": "explode"}]}}, 422, "explode"),
        ({"metadata": {"labels": {"$patch": "explode"}}}, 422, "explode"),
        ({"spec": {"containers": ["main"]}}, 422, "spec.containers"),
        ({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}, 422, "finalizers"),
        ({"spec": {"volumes": [{"name": "v", "$retainKeys": "name"}]}}, 422, "$retainKeys"),
        ({"spec": {"$setElementOrder/containers": [{"image": "x"}]}}, 422, "merge key"),
    ],
)
def test_smp_invalid_patches(patch: dict[str, Any], code: int, needle: str) -> None:
    with pytest.raises(PatchError) as exc:
        apply_strategic_merge_patch(_pod(), patch, "Pod")
    assert exc.value.code == code
    assert needle in exc.value.message


def test_smp_non_object_body_is_400() -> None:
    with pytest.raises(PatchError) as exc:
        apply_strategic_merge_patch(_pod(), [{"op": "add"}], "Pod")  # type: ignore[arg-type]
    assert exc.value.code == 400


def test_smp_does_not_mutate_inputs() -> None:
    pod = _pod()
    patch = {
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/f"], "labels": {"app": None}},
        "spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "main"}],
            "containers": [{"name": "main", "env": [{"name": "A", "$patch": "delete"}]}],
        },
    }
    patch_before = copy.deepcopy(patch)
    out = apply_strategic_merge_patch(pod, patch, "Pod")
    assert pod == _pod()
    assert patch == patch_before
    out["spec"]["containers"][0]["image"] = "changed"
    assert pod["spec"]["containers"][1]["image"] == "envoy:1"


def test_smp_replaces_value_of_other_type() -> None:
    out = apply_strategic_merge_patch({"spec": {"x": [1, 2]}}, {"spec": {"x": {"a": 1}}}, "Pod")
    assert out == {"spec": {"x": {"a": 1}}}
    out = apply_strategic_merge_patch({"spec": {"x": {"a": 1}}}, {"spec": {"x": "s"}}, "Pod")
    assert out == {"spec": {"x": "s"}}


_containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["a", "b", "c", "d"])},
        optional={"image": st.sampled_from(["i1", "i2"]), "args": st.lists(st.sampled_from(["x", "y"]), max_size=2)},
    ),
    max_size=4,
    unique_by=lambda c: c["name"],
)


@settings(max_examples=150, deadline=None)
@given(_containers, _containers)
def test_smp_containers_merge_by_name_property(orig: list[dict[str, Any]], patch: list[dict[str, Any]]) -> None:
    out = apply_strategic_merge_patch({"spec": {"containers": orig}}, {"spec": {"containers": patch}}, "Pod")
    merged = out["spec"]["containers"]
    orig_names = _names(orig)
    # original items keep their order, new items are appended in patch order
    assert _names(merged) == orig_names + [n for n in _names(patch) if n not in orig_names]
    by_name = {c["name"]: c for c in merged}
    for item in orig:
        if item["name"] not in _names(patch):
            assert by_name[item["name"]] == item  # unmentioned items untouched
    for item in patch:
        base = next((c for c in orig if c["name"] == item["name"]), {})
        assert by_name[item["name"]] == {**base, **item}  # args is atomic: replaced, not merged


def test_strategic_merge_merges_webhooks_by_name() -> None:
    """kubectl apply of a changed webhook configuration patches one webhook, keeping the others
    (and the caBundle a controller wrote into them)."""
    cfg = {"webhooks": [{"name": "a.gangq.io", "timeoutSeconds": 5, "clientConfig": {"caBundle": "Q0E="}},
                        {"name": "b.gangq.io", "timeoutSeconds": 5}]}
    out = apply_strategic_merge_patch(cfg, {"webhooks": [{"name": "a.gangq.io", "timeoutSeconds": 10}]},
                                      "MutatingWebhookConfiguration")
    assert out["webhooks"][0] == {"name": "a.gangq.io", "timeoutSeconds": 10, "clientConfig": {"caBundle": "Q0E="}}
    assert out["webhooks"][1]["name"] == "b.gangq.io"
    assert supports_strategic_merge("ValidatingWebhookConfiguration")
