"""The four patch types: JSON merge patch, JSON patch, strategic merge patch and server-side apply
(with field managers and their conflicts), on built-in and custom objects."""

from __future__ import annotations

from typing import Any

from tests.conformance.corpus.objects import (
    APPLY,
    BY_NAME,
    JSON_PATCH,
    MERGE,
    STRATEGIC,
    apply,
    configmap,
    create,
    get,
    patch,
)
from tests.conformance.model import Case, Req

CM = BY_NAME["configmap"]
POD = BY_NAME["pod"]
SVC = BY_NAME["service"]
NODE = BY_NAME["node"]
CQ = BY_NAME["clusterqueue"]
WL = BY_NAME["workload"]
JS = BY_NAME["jobset"]


def _on_cm(name: str, body: Any, ctype: str, data: dict[str, str] | None = None) -> Case:
    return Case(
        f"patch/{name}",
        (Req("POST", CM.collection, configmap("a", data or {"a": "1", "b": "2"})),),
        patch(CM, "a", body, ctype),
    )


def _apply_cm(data: dict[str, str], **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", **metadata}, "data": data}


def _apply_cq(strategy: str) -> dict[str, Any]:
    return {
        "apiVersion": "gangq.io/v1alpha1",
        "kind": "ClusterQueue",
        "metadata": {"name": "{ns}-a", "labels": {"case": "{ns}"}},
        "spec": {"queueingStrategy": strategy},
    }


MERGE_CASES = [
    _on_cm("merge/add-key", {"data": {"c": "3"}}, MERGE),
    _on_cm("merge/remove-key", {"data": {"a": None}}, MERGE),
    _on_cm("merge/replace-map-values", {"data": {"a": "x", "b": "y"}}, MERGE),
    _on_cm("merge/remove-all-data", {"data": None}, MERGE),
    _on_cm("merge/labels", {"metadata": {"labels": {"x": "1"}}}, MERGE),
    _on_cm("merge/stale-resource-version", {"metadata": {"resourceVersion": "1"}, "data": {"c": "3"}}, MERGE),
    _on_cm("merge/not-json", "{not json", MERGE),
    _on_cm("merge/change-name", {"metadata": {"name": "other"}}, MERGE),
    Case("patch/merge/missing-object", (), patch(CM, "missing", {"data": {"a": "1"}}, MERGE)),
    Case("patch/merge/custom-spec", (create(CQ, "a"),), patch(CQ, "a", {"spec": {"queueingStrategy": "StrictFIFO"}})),
    Case(
        "patch/merge/custom-list-replaced",
        (create(WL, "a"),),
        patch(WL, "a", {"spec": {"podSets": [{"name": "main", "count": 3}]}}),
    ),
    Case(
        "patch/merge/custom-labels-keep-generation",
        (create(CQ, "a"),),
        patch(CQ, "a", {"metadata": {"labels": {"x": "1"}}}),
    ),
    Case(
        "patch/merge/custom-no-op-keeps-resource-version",
        (create(CQ, "a", save={"rv": "metadata.resourceVersion"}),),
        patch(CQ, "a", {"spec": {"namespaceSelector": {}}}),
    ),
    Case(
        "patch/merge/pod-image",
        (create(POD, "a"),),
        patch(POD, "a", {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}),
    ),
]

JSON_CASES = [
    _on_cm("json/add", [{"op": "add", "path": "/data/c", "value": "3"}], JSON_PATCH),
    _on_cm("json/replace", [{"op": "replace", "path": "/data/a", "value": "x"}], JSON_PATCH),
    _on_cm("json/remove", [{"op": "remove", "path": "/data/a"}], JSON_PATCH),
    _on_cm("json/remove-missing", [{"op": "remove", "path": "/data/zz"}], JSON_PATCH),
    _on_cm(
        "json/test-passes",
        [{"op": "test", "path": "/data/a", "value": "1"}, {"op": "replace", "path": "/data/a", "value": "x"}],
        JSON_PATCH,
    ),
    _on_cm(
        "json/test-fails",
        [{"op": "test", "path": "/data/a", "value": "9"}, {"op": "replace", "path": "/data/a", "value": "x"}],
        JSON_PATCH,
    ),
    _on_cm("json/move", [{"op": "move", "from": "/data/a", "path": "/data/c"}], JSON_PATCH),
    _on_cm("json/copy", [{"op": "copy", "from": "/data/a", "path": "/data/c"}], JSON_PATCH),
    _on_cm(
        "json/escaped-key",
        [
            {"op": "add", "path": "/metadata/labels", "value": {}},
            {"op": "add", "path": "/metadata/labels/example.com~1tier", "value": "x"},
        ],
        JSON_PATCH,
    ),
    _on_cm("json/not-a-list", {"op": "add", "path": "/data/c", "value": "3"}, JSON_PATCH),
    _on_cm("json/bad-op", [{"op": "frobnicate", "path": "/data/a"}], JSON_PATCH),
    Case(
        "patch/json/custom-spec",
        (create(CQ, "a"),),
        patch(CQ, "a", [{"op": "replace", "path": "/spec/queueingStrategy", "value": "StrictFIFO"}], JSON_PATCH),
    ),
    Case(
        "patch/json/custom-array-append",
        (create(WL, "a"),),
        patch(WL, "a", [{"op": "add", "path": "/metadata/finalizers", "value": ["example.com/hold"]}], JSON_PATCH),
    ),
    Case(
        "patch/json/custom-schema-violation",
        (create(CQ, "a"),),
        patch(CQ, "a", [{"op": "replace", "path": "/spec/queueingStrategy", "value": "Random"}], JSON_PATCH),
    ),
    Case(
        "patch/json/pod-image",
        (create(POD, "a"),),
        patch(POD, "a", [{"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:2"}], JSON_PATCH),
    ),
]

STRATEGIC_CASES = [
    _on_cm("strategic/configmap-data", {"data": {"c": "3", "a": None}}, STRATEGIC),
    Case(
        "patch/strategic/pod-container-by-name",
        (create(POD, "a"),),
        patch(POD, "a", {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}, STRATEGIC),
    ),
    Case(
        "patch/strategic/pod-add-toleration",
        (create(POD, "a"),),
        patch(POD, "a", {"spec": {"tolerations": [{"key": "k", "operator": "Exists"}]}}, STRATEGIC),
    ),
    Case(
        "patch/strategic/pod-new-container-rejected",
        (create(POD, "a"),),
        patch(POD, "a", {"spec": {"containers": [{"name": "side", "image": "busybox"}]}}, STRATEGIC),
    ),
    Case(
        "patch/strategic/service-port-merged",
        (create(SVC, "a"),),
        patch(SVC, "a", {"spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}, STRATEGIC),
    ),
    Case(
        "patch/strategic/service-port-deleted",
        (create(SVC, "a"),),
        patch(
            SVC, "a", {"spec": {"ports": [{"port": 80, "$patch": "delete"}, {"name": "https", "port": 443}]}}, STRATEGIC
        ),
    ),
    Case(
        "patch/strategic/node-taint-merged",
        (create(NODE, "a"),),
        patch(NODE, "a", {"spec": {"taints": [{"key": "extra", "effect": "NoExecute"}]}}, STRATEGIC),
    ),
    Case(
        "patch/strategic/node-replace-directive",
        (create(NODE, "a"),),
        patch(
            NODE,
            "a",
            {
                "spec": {"taints": [{"key": "only", "effect": "NoSchedule"}], "$retainKeys": ["taints"]},
                "metadata": {"labels": {"$patch": "replace", "case": "{ns}", "x": "1"}},
            },
            STRATEGIC,
        ),
    ),
    Case(
        "patch/strategic/custom-unsupported",
        (create(CQ, "a"),),
        patch(CQ, "a", {"spec": {"queueingStrategy": "StrictFIFO"}}, STRATEGIC),
    ),
    Case("patch/unsupported-media-type", (create(CM, "a"),), patch(CM, "a", {"data": {"c": "3"}}, "text/plain")),
]

APPLY_CASES = [
    Case("apply/create", (), apply(CM, "a", _apply_cm({"a": "1"}), "alice"), managed_fields=True),
    Case(
        "apply/same-manager-update",
        (apply(CM, "a", _apply_cm({"a": "1"}), "alice"),),
        apply(CM, "a", _apply_cm({"a": "2", "b": "3"}), "alice"),
        managed_fields=True,
    ),
    Case(
        "apply/same-manager-drops-field",
        (apply(CM, "a", _apply_cm({"a": "1", "b": "2"}), "alice"),),
        apply(CM, "a", _apply_cm({"a": "1"}), "alice"),
        managed_fields=True,
    ),
    Case(
        "apply/second-manager-shared-value",
        (apply(CM, "a", _apply_cm({"a": "1"}), "alice"),),
        apply(CM, "a", _apply_cm({"a": "1"}), "bob"),
        managed_fields=True,
    ),
    Case(
        "apply/second-manager-other-field",
        (apply(CM, "a", _apply_cm({"a": "1"}), "alice"),),
        apply(CM, "a", _apply_cm({"b": "2"}), "bob"),
        managed_fields=True,
    ),
    Case(
        "apply/conflict",
        (apply(CM, "a", _apply_cm({"a": "1"}), "alice"),),
        apply(CM, "a", _apply_cm({"a": "2"}), "bob"),
        managed_fields=True,
    ),
    Case(
        "apply/conflict-forced",
        (apply(CM, "a", _apply_cm({"a": "1"}), "alice"),),
        apply(CM, "a", _apply_cm({"a": "2"}), "bob", force=True),
        managed_fields=True,
    ),
    Case(
        "apply/conflict-with-update-manager",
        (Req("POST", CM.collection, configmap("a")),),
        apply(CM, "a", _apply_cm({"a": "2"}), "bob"),
        managed_fields=True,
    ),
    Case(
        "apply/after-update-managers",
        (apply(CM, "a", _apply_cm({"a": "1"}), "alice"), patch(CM, "a", {"data": {"b": "2"}})),
        get(CM, "a"),
        managed_fields=True,
    ),
    Case("apply/no-field-manager", (), Req("PATCH", CM.path("a"), _apply_cm({"a": "1"}), APPLY)),
    Case("apply/missing-kind", (), apply(CM, "a", {"apiVersion": "v1", "metadata": {"name": "a"}}, "alice")),
    Case("apply/name-mismatch", (), apply(CM, "a", _apply_cm({"a": "1"}) | {"metadata": {"name": "b"}}, "alice")),
    Case(
        "apply/labels",
        (apply(CM, "a", _apply_cm({"a": "1"}, labels={"x": "1"}), "alice"),),
        apply(CM, "a", _apply_cm({"a": "1"}, labels={"y": "2"}), "alice"),
        managed_fields=True,
    ),
    Case("apply/custom-create-defaulted", (), apply(CQ, "a", _apply_cq("StrictFIFO"), "alice"), managed_fields=True),
    Case(
        "apply/custom-conflict",
        (apply(CQ, "a", _apply_cq("StrictFIFO"), "alice"),),
        apply(CQ, "a", _apply_cq("BestEffortFIFO"), "bob"),
        managed_fields=True,
    ),
    Case(
        "apply/custom-forced",
        (apply(CQ, "a", _apply_cq("StrictFIFO"), "alice"),),
        apply(CQ, "a", _apply_cq("BestEffortFIFO"), "bob", force=True),
        managed_fields=True,
    ),
    Case("apply/custom-schema-violation", (), apply(CQ, "a", _apply_cq("Random"), "alice")),
    Case(
        "apply/custom-status",
        (create(CQ, "a"),),
        apply(
            CQ,
            "a",
            {
                "apiVersion": "gangq.io/v1alpha1",
                "kind": "ClusterQueue",
                "metadata": {"name": "{ns}-a"},
                "status": {"pendingWorkloads": 3},
            },
            "status-writer",
            sub="status",
        ),
        managed_fields=True,
    ),
    Case(
        "apply/custom-list-map-merge",
        (
            apply(
                JS,
                "a",
                {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "metadata": {"name": "a"},
                    "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": {}}}}]},
                },
                "alice",
            ),
        ),
        apply(
            JS,
            "a",
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "a"},
                "spec": {"replicatedJobs": [{"name": "v", "replicas": 2, "template": {"spec": {"template": {}}}}]},
            },
            "bob",
        ),
        managed_fields=True,
    ),
    Case(
        "apply/yaml-body",
        (),
        Req(
            "PATCH",
            CM.path("a") + "?fieldManager=alice",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n",
            APPLY,
        ),
        managed_fields=True,
    ),
    Case("apply/create-managers-of-post", (), Req("POST", CM.collection, configmap("a")), managed_fields=True),
    Case(
        "apply/workload-dry-run",
        (),
        Req(
            "PATCH",
            WL.path("a") + "?fieldManager=alice&dryRun=All",
            {
                "apiVersion": "gangq.io/v1alpha1",
                "kind": "Workload",
                "metadata": {"name": "a"},
                "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1}]},
            },
            APPLY,
        ),
    ),
    Case(
        "apply/dry-run-stores-nothing",
        (
            Req(
                "PATCH",
                WL.path("a") + "?fieldManager=alice&dryRun=All",
                {
                    "apiVersion": "gangq.io/v1alpha1",
                    "kind": "Workload",
                    "metadata": {"name": "a"},
                    "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1}]},
                },
                APPLY,
            ),
        ),
        get(WL, "a"),
    ),
]

CASES: list[Case] = [*MERGE_CASES, *JSON_CASES, *STRATEGIC_CASES, *APPLY_CASES]
