"""Label and field selectors: the grammar and semantics of the Kubernetes "Labels and Selectors" and
"Field Selectors" documentation pages."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangq.sandbox.selection import (
    SelectorError,
    field_selector_allowed,
    field_value,
    label_selector_from_object,
    matches,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"env": "prod", "tier": "frontend", "app.kubernetes.io/name": "web", "gpus": "8", "empty": ""}

LABEL_CASES: list[tuple[str, dict[str, str], bool]] = [
    ("", LABELS, True),
    ("env=prod", LABELS, True),
    ("env==prod", LABELS, True),
    ("env=dev", LABELS, False),
    ("env!=dev", LABELS, True),
    ("env!=prod", LABELS, False),
    ("missing!=x", LABELS, True),  # != matches objects without the label
    ("missing=x", LABELS, False),
    ("env in (prod,qa)", LABELS, True),
    ("env in (dev, qa)", LABELS, False),
    ("env notin (dev,qa)", LABELS, True),
    ("missing notin (dev)", LABELS, True),  # notin matches objects without the label
    ("missing in (dev)", LABELS, False),
    ("tier", LABELS, True),
    ("!tier", LABELS, False),
    ("!missing", LABELS, True),
    ("missing", LABELS, False),
    ("env in (prod,qa),!tier", LABELS, False),
    ("env in (prod,qa),!missing", LABELS, True),
    ("env in (a,b),!tier", {"env": "a"}, True),
    ("env in (a,b),!tier", {"env": "a", "tier": "x"}, False),
    ("env in (a,b),!tier", {"env": "c"}, False),
    ("app.kubernetes.io/name=web", LABELS, True),
    ("app.kubernetes.io/name in (api)", LABELS, False),
    ("empty=", LABELS, True),
    ("empty=,env=prod", LABELS, True),
    ("env=", LABELS, False),
    ("gpus>4", LABELS, True),
    ("gpus<4", LABELS, False),
    ("env>4", LABELS, False),  # non-integer label value never satisfies gt/lt
    ("  env = prod ,  tier ", LABELS, True),
    ("env=prod,tier=frontend,gpus in (8)", LABELS, True),
    ("env=prod,tier=backend", LABELS, False),
    ("a=b", {}, False),
    ("!a", {}, True),
]


@pytest.mark.parametrize(("selector", "labels", "expected"), LABEL_CASES)
def test_label_selector_matches(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(selector).matches(labels) is expected


def test_label_selector_none_and_empty_select_everything() -> None:
    for sel in (None, "", "   "):
        matcher = parse_label_selector(sel)
        assert matcher.requirements == () and not matcher.nothing
        assert matcher.matches({}) and matcher.matches(LABELS)


def test_label_selector_matches_object_metadata() -> None:
    matcher = parse_label_selector("app=x")
    assert matches(matcher, None, {"metadata": {"labels": {"app": "x"}}})
    assert not matches(matcher, None, {"metadata": {}})
    assert not matches(matcher, None, {})


@pytest.mark.parametrize(
    ("selector", "needle"),
    [
        ("env in ()", "can't be empty"),
        ("env in (a", "')'"),
        ("env in a", "'('"),
        ("=b", "label key"),
        ("a b", "'b'"),
        ("!", "label key"),
        ("a=b=c", "'='"),
        ("a=b,", "end of input"),
        ("a,,b", "','"),
        ("-a=b", "invalid label key"),
        ("a=-b", "invalid label value"),
        ("a=" + "x" * 64, "invalid label value"),
        ("Bad_Prefix/a=b", "prefix"),
        ("a>b", "integer"),
        ("env in (a b)", "expected ','"),
        ("env notin (a,(b))", "'('"),
        ("env=prod)", "')'"),
    ],
)
def test_label_selector_errors(selector: str, needle: str) -> None:
    with pytest.raises(SelectorError) as exc:
        parse_label_selector(selector)
    assert needle in str(exc.value)
    assert selector in str(exc.value)  # the message names the offending selector


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", "x.io/d"]),
            st.sampled_from(["=", "!=", "in", "notin", "exists", "!"]),
            st.lists(st.sampled_from(["1", "2", "v"]), min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=4,
    ),
    st.dictionaries(st.sampled_from(["a", "b", "c", "x.io/d"]), st.sampled_from(["1", "2", "v"])),
)
def test_label_selector_string_round_trip_and_semantics(reqs: list[tuple[str, str, list[str]]], labels: Any) -> None:
    parts = []
    expected = True
    for key, op, values in reqs:
        have = labels.get(key)
        if op == "=":
            parts.append(f"{key}={values[0]}")
            expected &= have == values[0]
        elif op == "!=":
            parts.append(f"{key}!={values[0]}")
            expected &= have != values[0]
        elif op == "in":
            parts.append(f"{key} in ({','.join(values)})")
            expected &= have in values
        elif op == "notin":
            parts.append(f"{key} notin ({','.join(values)})")
            expected &= have not in values
        elif op == "exists":
            parts.append(key)
            expected &= have is not None
        else:
            parts.append(f"!{key}")
            expected &= have is None
    matcher = parse_label_selector(",".join(parts))
    assert matcher.matches(labels) is expected
    # the canonical string form parses back to an equivalent selector
    assert parse_label_selector(str(matcher)).matches(labels) is expected


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {"a": "b"}, True),  # empty selector: everything
        (None, {"a": "b"}, False),  # nil selector: nothing
        ({"matchLabels": {"job-name": "j"}}, {"job-name": "j", "x": "y"}, True),
        ({"matchLabels": {"job-name": "j"}}, {"job-name": "k"}, False),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["a", "b"]}]}, {"env": "b"}, True),
        ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "env", "operator": "Exists"}]}, {"env": ""}, True),
        ({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}, {"env": "x"}, False),
        (
            {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "In", "values": ["2"]}]},
            {"a": "1", "b": "3"},
            False,
        ),
    ],
)
def test_label_selector_object(selector: Any, labels: dict[str, str], expected: bool) -> None:
    assert label_selector_from_object(selector).matches(labels) is expected


@pytest.mark.parametrize(
    ("selector", "needle"),
    [
        ({"matchExpressions": [{"key": "env", "operator": "In"}]}, "must be specified"),
        ({"matchExpressions": [{"key": "env", "operator": "Exists", "values": ["a"]}]}, "may not be specified"),
        ({"matchExpressions": [{"key": "env", "operator": "Equals", "values": ["a"]}]}, "Equals"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "key"),
        ({"matchLabels": {"a": 1}}, "matchLabels"),
        ({"matchLabels": ["a"]}, "matchLabels"),
        ("app=x", "must be an object"),
    ],
)
def test_label_selector_object_errors(selector: Any, needle: str) -> None:
    with pytest.raises(SelectorError) as exc:
        label_selector_from_object(selector, where="spec.selector")
    assert needle in str(exc.value)
    assert "spec.selector" in str(exc.value)


# --------------------------------------------------------------------------------------------------
# field selectors
# --------------------------------------------------------------------------------------------------

POD = {
    "metadata": {"name": "p1", "namespace": "default"},
    "spec": {"nodeName": "node-1", "schedulerName": "default-scheduler", "hostNetwork": False},
    "status": {"phase": "Running"},
}
UNSCHEDULED = {"metadata": {"name": "p2", "namespace": "ml"}, "spec": {}, "status": {"phase": "Pending"}}


@pytest.mark.parametrize(
    ("selector", "obj", "expected"),
    [
        ("metadata.name=p1", POD, True),
        ("metadata.name==p1", POD, True),
        ("metadata.name!=p1", POD, False),
        ("metadata.namespace=default,status.phase=Running", POD, True),
        ("metadata.namespace=default,status.phase=Pending", POD, False),
        ("spec.nodeName=", UNSCHEDULED, True),  # unscheduled pods
        ("spec.nodeName=", POD, False),
        ("spec.nodeName!=", POD, True),
        ("spec.nodeName!=,status.phase!=Succeeded", POD, True),
        ("spec.hostNetwork=false", POD, True),
        ("", POD, True),
    ],
)
def test_field_selector_matches(selector: str, obj: dict[str, Any], expected: bool) -> None:
    assert parse_field_selector(selector, kind="Pod").matches(obj) is expected


def test_field_selector_escapes() -> None:
    matcher = parse_field_selector(r"metadata.name=a\,b\=c\\d")
    assert matcher.matches({"metadata": {"name": "a,b=c\\d"}})
    assert [(r.field, r.value, r.negate) for r in matcher.requirements] == [("metadata.name", "a,b=c\\d", False)]


@pytest.mark.parametrize(
    ("selector", "kind", "needle"),
    [
        ("spec.foo=1", "Pod", "field label not supported: spec.foo"),
        ("status.phase=Running", "ConfigMap", "field label not supported: status.phase"),
        ("spec.nodeName=n", "Job", "field label not supported: spec.nodeName"),
        ("metadata.name", "Pod", "field=value"),
        ("=x", "Pod", "field=value"),
        ("metadata.name=a,", "Pod", "empty requirement"),
        ("metadata.name=a=b", "Pod", "unescaped '='"),
        (r"metadata.name=a\x", "Pod", "escape"),
    ],
)
def test_field_selector_errors(selector: str, kind: str, needle: str) -> None:
    with pytest.raises(SelectorError) as exc:
        parse_field_selector(selector, kind=kind)
    assert needle in str(exc.value)


@pytest.mark.parametrize(
    ("kind", "field", "allowed"),
    [
        ("Pod", "metadata.name", True),
        ("Widget", "metadata.namespace", True),
        ("Pod", "spec.nodeName", True),
        ("Pod", "status.phase", True),
        ("Pod", "spec.schedulerName", True),
        ("Event", "involvedObject.name", True),
        ("Event", "involvedObject.uid", True),
        ("Event", "reason", True),
        ("Event", "type", True),
        ("Job", "status.successful", True),
        ("Job", "status.phase", False),
        ("Widget", "spec.size", False),
        ("ConfigMap", "data.x", False),
    ],
)
def test_field_selector_allow_list(kind: str, field: str, allowed: bool) -> None:
    assert field_selector_allowed(kind, field) is allowed


def test_field_selector_allows_crd_selectable_fields() -> None:
    assert field_selector_allowed("Widget", "spec.size", extra=["spec.size"])
    matcher = parse_field_selector("spec.size=3", kind="Widget", extra_fields=["spec.size"])
    assert matcher.matches({"spec": {"size": 3}})
    assert not matcher.matches({"spec": {"size": 4}})


def test_field_selector_on_events_of_both_api_groups() -> None:
    core = {"involvedObject": {"kind": "Pod", "name": "p1"}, "reason": "Scheduled", "source": {"component": "s"}}
    new = {"regarding": {"kind": "Pod", "name": "p1"}, "reason": "Scheduled", "reportingController": "s"}
    matcher = parse_field_selector("involvedObject.kind=Pod,involvedObject.name=p1,reason=Scheduled", kind="Event")
    assert matcher.matches(core) and matcher.matches(new)
    assert parse_field_selector("regarding.name=p1", kind="Event").matches(core)
    assert field_value(core, "source") == "s"
    assert not parse_field_selector("involvedObject.name=p2", kind="Event").matches(new)


def test_field_value_renders_scalars_as_the_server_does() -> None:
    obj = {"status": {"successful": 3, "ok": True, "ratio": 2.0}, "spec": {"list": [1]}}
    assert field_value(obj, "status.successful") == "3"
    assert field_value(obj, "status.ok") == "true"
    assert field_value(obj, "status.ratio") == "2"
    assert field_value(obj, "status.missing") == ""
    assert field_value(obj, "spec.list") == ""
    assert parse_field_selector("status.successful=3", kind="Job").matches(obj)
