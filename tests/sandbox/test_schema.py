"""Structural schemas (pruning, defaulting, validation) and server-side Tables, following the Kubernetes
documentation of CustomResourceDefinitions ("Field pruning", "Defaulting", "Validation",
"Additional printer columns") and kubectl's default columns for built-in kinds."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from gangq.sandbox.builtin import ResourceInfo
from gangq.sandbox.errors import invalid
from gangq.sandbox.jsonpath import JSONPathError, jsonpath_error, jsonpath_first
from gangq.sandbox.schema import apply_defaults, error_cause_reason, prune, validate
from gangq.sandbox.tables import builtin_table, human_duration, printer_columns_table, table_for

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC).timestamp()


def _ago(seconds: int) -> str:
    return datetime.fromtimestamp(NOW - seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "default": {},
            "required": ["image"],
            "properties": {
                "image": {"type": "string", "minLength": 1, "maxLength": 20, "pattern": "^[a-z0-9:./-]+$"},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
                "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                "port": {"x-kubernetes-int-or-string": True},
                "ratio": {"type": "number", "exclusiveMinimum": True, "minimum": 0},
                "enabled": {"type": "boolean"},
                "comment": {"type": "string", "nullable": True},
                "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "resources": {"type": "object", "additionalProperties": {"type": "string"}},
                "podTemplate": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {"spec": {"type": "object", "properties": {"nodeName": {"type": "string"}}}},
                },
                "workers": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "gpus": {"type": "integer", "default": 0},
                        },
                    },
                },
                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "phase": {"type": "string"},
                "conditions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"type": {"type": "string"}, "status": {"type": "string"}},
                    },
                },
            },
        },
    },
}


def _widget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "default", "creationTimestamp": _ago(3600), "labels": {"a": "b"}},
        "spec": {"image": "busybox", **spec},
    }


# --------------------------------------------------------------------------------------------------
# pruning
# --------------------------------------------------------------------------------------------------


def test_prune_drops_unknown_fields_everywhere() -> None:
    obj = _widget(unknown=1, workers=[{"name": "a", "junk": True}])
    obj["topLevelJunk"] = {"x": 1}
    obj["status"] = {"phase": "Running", "bogus": 1, "conditions": [{"type": "Ready", "status": "True", "x": 1}]}
    out = prune(obj, SCHEMA)
    assert "topLevelJunk" not in out
    assert "unknown" not in out["spec"]
    assert out["spec"]["workers"] == [{"name": "a"}]
    assert out["status"] == {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def test_prune_keeps_root_apiversion_kind_metadata_untouched() -> None:
    obj = _widget()
    obj["metadata"]["someFutureField"] = {"kept": True}
    out = prune(obj, SCHEMA)
    assert out["apiVersion"] == "example.com/v1" and out["kind"] == "Widget"
    assert out["metadata"] == obj["metadata"]


def test_prune_keeps_preserved_subtrees() -> None:
    tpl = {"anything": {"deeply": [{"nested": 1}]}, "x": None}
    out = prune(_widget(template=tpl), SCHEMA)
    assert out["spec"]["template"] == tpl


def test_prune_preserve_unknown_still_prunes_inside_specified_properties() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"known": {"type": "object", "properties": {"a": {"type": "integer"}}}},
            }
        },
    }
    obj = {"spec": {"free": {"x": 1}, "known": {"a": 1, "b": 2}}}
    assert prune(obj, schema) == {"spec": {"free": {"x": 1}, "known": {"a": 1}}}


def test_prune_additional_properties_map() -> None:
    out = prune(_widget(resources={"cpu": "1", "memory": "1Gi"}), SCHEMA)
    assert out["spec"]["resources"] == {"cpu": "1", "memory": "1Gi"}


def test_prune_embedded_resource_keeps_its_type_meta() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "n", "junk": 1}, "x": 1}
    out = prune(_widget(podTemplate=pod), SCHEMA)
    assert out["spec"]["podTemplate"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"nodeName": "n"},
    }


def test_prune_root_preserve_unknown_fields_and_no_schema() -> None:
    obj = _widget(extra=1)
    obj["other"] = {"a": 1}
    assert prune(obj, {"type": "object", "x-kubernetes-preserve-unknown-fields": True}) == obj
    assert prune(obj, None) == obj
    # an object schema with no properties prunes everything but the type meta and metadata
    assert prune(obj, {"type": "object"}) == {k: obj[k] for k in ("apiVersion", "kind", "metadata")}


def test_prune_does_not_mutate_input() -> None:
    obj = _widget(unknown=1)
    before = copy.deepcopy(obj)
    out = prune(obj, SCHEMA)
    out["metadata"]["name"] = "changed"
    assert obj == before


def test_prune_keeps_values_of_the_wrong_type_for_validation_to_reject() -> None:
    out = prune(_widget(replicas={"a": 1}), SCHEMA)
    assert out["spec"]["replicas"] == {"a": 1}
    assert any(field == "spec.replicas" for field, _ in validate(out, SCHEMA))


# --------------------------------------------------------------------------------------------------
# defaulting
# --------------------------------------------------------------------------------------------------


def test_defaults_applied_to_absent_fields() -> None:
    out = apply_defaults(_widget(workers=[{"name": "a"}, {"name": "b", "gpus": 8}]), SCHEMA)
    assert out["spec"]["replicas"] == 1
    assert out["spec"]["mode"] == "safe"
    assert out["spec"]["workers"] == [{"name": "a", "gpus": 0}, {"name": "b", "gpus": 8}]


def test_defaults_do_not_override_values() -> None:
    out = apply_defaults(_widget(replicas=5, mode="fast"), SCHEMA)
    assert out["spec"]["replicas"] == 5 and out["spec"]["mode"] == "fast"


def test_default_object_receives_its_nested_defaults() -> None:
    obj = _widget()
    del obj["spec"]
    out = apply_defaults(obj, SCHEMA)
    assert out["spec"] == {"replicas": 1, "mode": "safe"}


def test_defaults_null_of_non_nullable_is_defaulted_or_dropped() -> None:
    out = apply_defaults(_widget(replicas=None, enabled=None, comment=None), SCHEMA)
    assert out["spec"]["replicas"] == 1  # null + default -> default
    assert "enabled" not in out["spec"]  # null, no default, not nullable -> pruned
    assert out["spec"]["comment"] is None  # nullable keeps null


def test_defaults_do_not_mutate_input_or_share_default_values() -> None:
    obj = _widget()
    del obj["spec"]
    before = copy.deepcopy(obj)
    schema = copy.deepcopy(SCHEMA)
    first = apply_defaults(obj, schema)
    first["spec"]["replicas"] = 99
    second = apply_defaults(obj, schema)
    assert obj == before
    assert second["spec"]["replicas"] == 1
    assert schema == SCHEMA


# --------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------


def test_valid_object_has_no_errors() -> None:
    obj = apply_defaults(
        _widget(port=8080, ratio=0.5, enabled=True, comment=None, workers=[{"name": "a"}], tags=["x", "y"]), SCHEMA
    )
    assert validate(obj, SCHEMA) == []
    assert validate(_widget(port="http"), SCHEMA) == []


@pytest.mark.parametrize(
    ("spec", "field", "needle"),
    [
        ({"replicas": "three"}, "spec.replicas", "must be of type integer"),
        ({"replicas": 1.5}, "spec.replicas", "must be of type integer"),
        ({"replicas": True}, "spec.replicas", "must be of type integer"),
        ({"enabled": "yes"}, "spec.enabled", "must be of type boolean"),
        ({"replicas": 0}, "spec.replicas", "should be greater than or equal to 1"),
        ({"replicas": 11}, "spec.replicas", "should be less than or equal to 10"),
        ({"ratio": 0}, "spec.ratio", "should be greater than 0"),
        ({"mode": "turbo"}, "spec.mode", 'Unsupported value: "turbo": supported values: "fast", "safe"'),
        ({"image": ""}, "spec.image", "should be at least 1 chars long"),
        ({"image": "x" * 21}, "spec.image", "may not be longer than 20"),
        ({"image": "UPPER"}, "spec.image", "should match '^[a-z0-9:./-]+$'"),
        ({"workers": []}, "spec.workers", "should have at least 1 items"),
        ({"workers": [{"name": str(i)} for i in range(4)]}, "spec.workers", "must have at most 3 items"),
        ({"workers": [{"gpus": 1}]}, "spec.workers[0].name", "Required value"),
        ({"port": 1.5}, "spec.port", "must be of type integer or string"),
        ({"port": None}, "spec.port", "must be of type integer or string"),
        ({"enabled": None}, "spec.enabled", "must be of type boolean"),
        ({"tags": ["a", "a"]}, "spec.tags[1]", "Duplicate value"),
        ({"resources": {"cpu": 1}}, "spec.resources.cpu", "must be of type string"),
        ({"workers": "a"}, "spec.workers", "must be of type array"),
    ],
)
def test_validation_errors(spec: dict[str, Any], field: str, needle: str) -> None:
    errors = validate(_widget(**spec), SCHEMA)
    assert any(f == field and needle in m for f, m in errors), errors


def test_validation_required_top_level_and_multiple_errors() -> None:
    obj = _widget(replicas=0, mode="x")
    del obj["spec"]["image"]
    errors = validate(obj, SCHEMA)
    fields = sorted(f for f, _ in errors)
    assert fields == ["spec.image", "spec.mode", "spec.replicas"]
    assert ("spec.image", "Required value") in errors


def test_validation_combinators() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "size": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^[0-9]+Gi$"}]},
                    "kind": {"type": "string", "not": {"enum": ["forbidden"]}},
                    "n": {"type": "integer", "allOf": [{"minimum": 2}, {"maximum": 4}]},
                    "multiple": {"type": "integer", "multipleOf": 4},
                },
            }
        },
    }
    assert validate({"spec": {"size": 3, "kind": "ok", "n": 3, "multiple": 8}}, schema) == []
    assert validate({"spec": {"size": "10Gi"}}, schema) == []
    errors = dict(validate({"spec": {"size": "big", "kind": "forbidden", "n": 5, "multiple": 6}}, schema))
    assert "anyOf" in errors["spec.size"]
    assert "(not)" in errors["spec.kind"]
    assert "less than or equal to 4" in errors["spec.n"]
    assert "multiple of 4" in errors["spec.multiple"]


def test_validation_list_map_keys_must_be_unique() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "ports": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["port"],
                        "items": {"type": "object", "properties": {"port": {"type": "integer"}}},
                    }
                },
            }
        },
    }
    errors = validate({"spec": {"ports": [{"port": 1}, {"port": 2}, {"port": 1}]}}, schema)
    assert [f for f, _ in errors] == ["spec.ports[2]"]


def test_validation_of_metadata_name_constraints_only() -> None:
    schema = {
        "type": "object",
        "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}}},
    }
    errors = validate(_widget(), schema)
    assert errors == []
    obj = _widget()
    obj["metadata"]["name"] = "toolong"
    assert [f for f, _ in validate(obj, schema)] == ["metadata.name"]


def test_validation_errors_as_status_body() -> None:
    errors = [("spec.replicas", "Invalid value: 0: spec.replicas in body should be greater than or equal to 1")]
    widgets = ResourceInfo("example.com", "v1", "widgets", "Widget", custom=True)
    causes = [(f, error_cause_reason(m), m) for f, m in [*errors, ("spec.image", "Required value")]]
    status = invalid(widgets, "w1", causes).status()
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["message"].startswith('Widget.example.com "w1" is invalid: [spec.replicas: Invalid value: 0')
    assert status["details"]["causes"][1] == {
        "reason": "FieldValueRequired",
        "message": "Required value",
        "field": "spec.image",
    }
    assert error_cause_reason('Unsupported value: "x": supported values: "a"') == "FieldValueNotSupported"


# --------------------------------------------------------------------------------------------------
# JSONPath and tables
# --------------------------------------------------------------------------------------------------

OBJ = {
    "metadata": {"name": "w1", "labels": {"app.kubernetes.io/name": "web", "foo": "bar"}},
    "spec": {"replicas": 3, "list": [{"name": "a"}, {"name": "b"}]},
    "status": {
        "conditions": [{"type": "Scheduled", "status": "True"}, {"type": "Ready", "status": "False", "n": 2}],
    },
}


@pytest.mark.parametrize(
    ("expr", "found", "value"),
    [
        (".spec.replicas", True, 3),
        ("{.spec.replicas}", True, 3),
        ("$.spec.replicas", True, 3),
        (".spec.missing", False, None),
        (".metadata.labels.foo", True, "bar"),
        (".metadata.labels['app.kubernetes.io/name']", True, "web"),
        (".metadata.labels.app\\.kubernetes\\.io/name", True, "web"),
        (".spec.list[1].name", True, "b"),
        (".spec.list[-1].name", True, "b"),
        (".spec.list[5].name", False, None),
        (".spec.list[*].name", True, "a"),
        ('.status.conditions[?(@.type=="Ready")].status', True, "False"),
        (".status.conditions[?(@.type=='Scheduled')].status", True, "True"),
        ('.status.conditions[?(@.type=="Missing")].status', False, None),
        (".status.conditions[?(@.n)].type", True, "Ready"),
        (".status.conditions[?(@.n > 1)].type", True, "Ready"),
    ],
)
def test_jsonpath(expr: str, found: bool, value: Any) -> None:
    assert jsonpath_first(OBJ, expr) == (found, value)


@pytest.mark.parametrize("expr", ["..spec", ".spec.list[1:2]", ".a[?(@.x ~ 1)]", ".a[0"])
def test_jsonpath_unsupported(expr: str) -> None:
    with pytest.raises(JSONPathError):
        jsonpath_first(OBJ, expr)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (45, "45s"),
        (119, "119s"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (5 * 3600 + 120, "5h2m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 5 * 3600, "3d5h"),
        (10 * 86400, "10d"),
        (3 * 365 * 86400 + 20 * 86400, "3y20d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


COLUMNS = [
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "App", "type": "string", "jsonPath": ".metadata.labels.foo", "priority": 1, "description": "app"},
    {"name": "Missing", "type": "string", "jsonPath": ".spec.nope"},
    {"name": "List", "type": "string", "jsonPath": ".spec.list[0]"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def test_printer_columns_table() -> None:
    obj = copy.deepcopy(OBJ)
    obj["metadata"]["creationTimestamp"] = _ago(3 * 3600)
    table = printer_columns_table([obj], COLUMNS, "Widget", now=NOW, resource_version="42")
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "42"}
    cols = table["columnDefinitions"]
    assert [c["name"] for c in cols] == ["Name", "Replicas", "Ready", "App", "Missing", "List", "Age"]
    assert cols[0]["format"] == "name"
    assert cols[3]["priority"] == 1 and cols[3]["description"] == "app"
    (row,) = table["rows"]
    assert row["cells"] == ["w1", 3, "False", "bar", None, '{"name":"a"}', "3h"]
    assert row["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def test_printer_columns_with_unusable_jsonpath_render_empty_cells() -> None:
    columns = [
        {"name": "Bad", "type": "string", "jsonPath": "..spec"},
        {"name": "Good", "type": "integer", "jsonPath": ".spec.replicas"},
    ]
    table = printer_columns_table([OBJ], columns, "Widget", now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Bad", "Good"]
    assert table["rows"][0]["cells"] == ["w1", None, 3]
    assert jsonpath_error("..spec") is not None
    assert jsonpath_error('.status.conditions[?(@.type=="Ready")].status') is None


def test_printer_columns_default_name_and_age() -> None:
    obj = {"metadata": {"name": "x", "creationTimestamp": _ago(90)}}
    table = printer_columns_table([obj], [], "Widget", now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]
    assert table["rows"][0]["cells"] == ["x", "90s"]


@pytest.mark.parametrize(
    ("include", "expected_keys"),
    [("Object", {"metadata", "spec", "status"}), ("Metadata", {"kind", "apiVersion", "metadata"}), ("None", None)],
)
def test_table_include_object(include: str, expected_keys: set[str] | None) -> None:
    row = printer_columns_table([OBJ], None, "Widget", include_object=include, now=NOW)["rows"][0]
    if expected_keys is None:
        assert "object" not in row
    else:
        assert set(row["object"]) == expected_keys


def test_table_bad_include_object() -> None:
    with pytest.raises(ValueError, match="includeObject"):
        builtin_table([], "Pod", include_object="Everything")


def _pod(name: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": _ago(300)},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
        "status": status,
    }


RUNNING = {"name": "a", "ready": True, "restartCount": 1, "state": {"running": {}}}


@pytest.mark.parametrize(
    ("pod", "ready", "status", "restarts"),
    [
        (_pod("pending", phase="Pending"), "0/2", "Pending", 0),
        (
            _pod(
                "creating",
                phase="Pending",
                containerStatuses=[{"name": "a", "state": {"waiting": {"reason": "ContainerCreating"}}}],
            ),
            "0/2",
            "ContainerCreating",
            0,
        ),
        (
            _pod("running", phase="Running", containerStatuses=[RUNNING, {**RUNNING, "name": "b", "restartCount": 2}]),
            "2/2",
            "Running",
            3,
        ),
        (
            _pod(
                "done",
                phase="Succeeded",
                containerStatuses=[{"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
            ),
            "0/2",
            "Completed",
            0,
        ),
        (
            _pod("failed", phase="Failed", containerStatuses=[{"name": "a", "state": {"terminated": {"exitCode": 3}}}]),
            "0/2",
            "ExitCode:3",
            0,
        ),
        (
            _pod(
                "init",
                phase="Pending",
                initContainerStatuses=[{"name": "i", "state": {"waiting": {"reason": "PodInitializing"}}}],
            ),
            "0/2",
            "Init:0/0",
            0,
        ),
    ],
)
def test_builtin_pod_table(pod: dict[str, Any], ready: str, status: str, restarts: int) -> None:
    table = builtin_table([pod], "Pod", now=NOW)
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert all(c["priority"] == 1 for c in table["columnDefinitions"][5:])
    cells = table["rows"][0]["cells"]
    assert cells[:5] == [pod["metadata"]["name"], ready, status, restarts, "5m"]
    assert cells[6] == "n1"


def test_builtin_pod_table_terminating() -> None:
    pod = _pod("p", phase="Running", containerStatuses=[RUNNING])
    pod["metadata"]["deletionTimestamp"] = _ago(1)
    assert builtin_table([pod], "Pod", now=NOW)["rows"][0]["cells"][2] == "Terminating"


def _job(**kw: Any) -> dict[str, Any]:
    spec = {"completions": kw.pop("completions", 4), "parallelism": kw.pop("parallelism", 4)}
    return {
        "metadata": {"name": "j", "creationTimestamp": _ago(600)},
        "spec": {**spec, "template": {"spec": {"containers": [{"name": "w", "image": "busybox"}]}}},
        "status": kw,
    }


@pytest.mark.parametrize(
    ("job", "status", "completions", "duration"),
    [
        (_job(active=4, startTime=_ago(90)), "Running", "0/4", "90s"),
        (
            _job(
                succeeded=4,
                startTime=_ago(600),
                completionTime=_ago(300),
                conditions=[{"type": "Complete", "status": "True"}],
            ),
            "Complete",
            "4/4",
            "5m",
        ),
        (
            _job(failed=7, startTime=_ago(60), conditions=[{"type": "Failed", "status": "True"}]),
            "Failed",
            "0/4",
            "60s",
        ),
        (_job(conditions=[{"type": "Suspended", "status": "True"}]), "Suspended", "0/4", ""),
        (_job(completions=None, parallelism=3, succeeded=1), "Running", "1/1 of 3", ""),
        (_job(completions=None, parallelism=1), "Running", "0/1", ""),
    ],
)
def test_builtin_job_table(job: dict[str, Any], status: str, completions: str, duration: str) -> None:
    table = builtin_table([job], "Job", now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]][:5] == ["Name", "Status", "Completions", "Duration", "Age"]
    assert table["rows"][0]["cells"][:5] == ["j", status, completions, duration, "10m"]
    assert table["rows"][0]["cells"][5:7] == ["w", "busybox"]


def test_builtin_node_and_namespace_tables() -> None:
    node = {
        "metadata": {
            "name": "n1",
            "creationTimestamp": _ago(2 * 86400),
            "labels": {"node-role.kubernetes.io/worker": ""},
        },
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.31.0"}},
    }
    cells = builtin_table([node], "Node", now=NOW)["rows"][0]["cells"]
    assert cells[:5] == ["n1", "Ready,SchedulingDisabled", "worker", "2d", "v1.31.0"]
    ns = {"metadata": {"name": "default", "creationTimestamp": _ago(30)}, "status": {"phase": "Terminating"}}
    table = builtin_table([ns], "Namespace", now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert table["rows"][0]["cells"] == ["default", "Terminating", "30s"]


def test_builtin_generic_and_event_tables() -> None:
    cm = {"metadata": {"name": "cfg", "creationTimestamp": _ago(60)}, "data": {"a": "1", "b": "2"}}
    assert builtin_table([cm], "ConfigMap", now=NOW)["rows"][0]["cells"] == ["cfg", 2, "60s"]
    lease = {"metadata": {"name": "l", "creationTimestamp": _ago(60)}}
    generic = builtin_table([lease], "PriorityClass", now=NOW)
    assert [c["name"] for c in generic["columnDefinitions"]] == ["Name", "Age"]
    assert generic["rows"][0]["cells"] == ["l", "60s"]
    event = {
        "metadata": {"name": "p.1", "creationTimestamp": _ago(10)},
        "involvedObject": {"kind": "Pod", "name": "p"},
        "reason": "Scheduled",
        "type": "Normal",
        "message": "assigned",
        "lastTimestamp": _ago(10),
    }
    cells = builtin_table([event], "Event", now=NOW)["rows"][0]["cells"]
    assert [cells[i] for i in (0, 1, 2, 3, 6)] == ["10s", "Normal", "Scheduled", "pod/p", "assigned"]


def test_table_for_dispatch() -> None:
    obj = {"metadata": {"name": "x", "creationTimestamp": _ago(5)}, "spec": {"replicas": 2}}
    custom = table_for([obj], "Widget", [{"name": "R", "type": "integer", "jsonPath": ".spec.replicas"}], now=NOW)
    assert custom["rows"][0]["cells"] == ["x", 2]
    assert table_for([obj], "Widget", None, custom=True, now=NOW)["rows"][0]["cells"] == ["x", "5s"]
    pods = table_for([_pod("p", phase="Pending")], "Pod", now=NOW)
    assert pods["columnDefinitions"][1]["name"] == "Ready"
