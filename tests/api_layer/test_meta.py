"""The typed views of gangq.api.meta: one reading of every metadata field, absent and malformed included."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.api.meta import (
    Meta,
    TimeSpec,
    condition_true,
    conditions,
    find_condition,
    object_key,
    object_name,
    parse_timestamp,
    resource_version,
    rfc3339,
)

JOB: dict[str, Any] = {
    "metadata": {
        "name": "train-w-0", "namespace": "team-a", "uid": "u-1", "resourceVersion": "42", "generation": 3,
        "labels": {"app": "x"}, "annotations": {"a": "b"}, "finalizers": ["f"],
        "creationTimestamp": "2026-11-22T23:00:00Z",
        "ownerReferences": [
            "not an object",
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-0"},
            {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train", "uid": "u-2",
             "controller": True},
        ],
    },
    "status": {"conditions": [{"type": "Complete", "status": "False"}, "junk", {"type": "Failed", "status": "True"}]},
}


def test_fields_are_read_from_the_metadata() -> None:
    m = Meta(JOB)
    assert (m.name, m.namespace, m.namespace_or_default, m.uid) == ("train-w-0", "team-a", "team-a", "u-1")
    assert (m.resource_version, m.resource_version_text, m.generation) == (42, "42", 3)
    assert dict(m.labels) == {"app": "x"} and dict(m.annotations) == {"a": "b"} and m.finalizers == ["f"]
    assert m.creation_timestamp == "2026-11-22T23:00:00Z" and not m.deleting and m.deletion_timestamp == ""
    assert m.key == "team-a/train-w-0" == object_key(JOB)
    assert object_name(JOB) == "team-a/train-w-0"


@pytest.mark.parametrize("obj", [{}, {"metadata": None}, {"metadata": "garbage"}, {"metadata": {"labels": None}}])
def test_an_absent_or_malformed_metadata_reads_as_every_field_absent(obj: dict[str, Any]) -> None:
    m = Meta(obj)
    assert (m.name, m.namespace, m.namespace_or_default, m.uid, m.key) == ("", "", "default", "", "")
    assert (m.resource_version, m.generation, m.creation_timestamp, m.deleting) == (0, 0, "", False)
    assert dict(m.labels) == {} and dict(m.annotations) == {} and m.finalizers == []
    assert m.owner_references == [] and m.controller_reference is None
    assert object_name(obj) == "default/?"


@pytest.mark.parametrize(("raw", "want"), [("17", 17), (17, 17), ("", 0), (None, 0), ("opaque-v1", 0), ([], 0)])
def test_a_resource_version_that_is_not_an_integer_is_zero(raw: object, want: int) -> None:
    obj = {"metadata": {"resourceVersion": raw}}
    assert Meta(obj).resource_version == want == resource_version(obj)


def test_owner_references_skip_non_objects_and_the_controller_is_the_flagged_one() -> None:
    refs = Meta(JOB).owner_references
    assert [(r.kind, r.name, r.uid, r.controller) for r in refs] == [("Pod", "p", "u-0", False),
                                                                    ("JobSet", "train", "u-2", True)]
    ref = Meta(JOB).controller_reference
    assert ref is not None and (ref.api_version, ref.kind, ref.name) == ("jobset.x-k8s.io/v1alpha2", "JobSet", "train")
    no_controller = {"metadata": {"ownerReferences": [{"kind": "Pod", "name": "p"}]}}
    assert Meta(no_controller).controller_reference is None


def test_conditions_skip_non_objects_and_are_found_by_type() -> None:
    conds = conditions(JOB)
    assert [c["type"] for c in conds] == ["Complete", "Failed"]
    assert find_condition(conds, "Failed") == {"type": "Failed", "status": "True"}
    assert find_condition(conds, "Suspended") is None and find_condition(None, "Failed") is None
    assert condition_true(conds, "Failed") and not condition_true(conds, "Complete")
    assert not condition_true(conds, "Suspended")
    assert conditions({"status": None}) == [] and conditions({}) == []


def test_rfc3339_writes_whole_seconds_unless_asked_for_a_fraction() -> None:
    t = 1795388400.123456
    assert rfc3339(t) == "2026-11-22T23:00:00Z"
    assert rfc3339(t, "milliseconds") == "2026-11-22T23:00:00.123Z"
    assert rfc3339(t, "microseconds") == "2026-11-22T23:00:00.123456Z"
    assert rfc3339(0) == "1970-01-01T00:00:00Z"


def test_parse_timestamp_reads_what_rfc3339_writes_and_requires_a_zone() -> None:
    specs: tuple[TimeSpec, ...] = ("seconds", "milliseconds", "microseconds")
    for spec in specs:
        text = rfc3339(1795388400.5, spec)
        assert parse_timestamp(text) == (1795388400.0 if spec == "seconds" else 1795388400.5)
    assert parse_timestamp("2026-11-22T23:00:00+01:00") == 1795388400.0 - 3600
    with pytest.raises(ValueError, match="with a time zone"):
        parse_timestamp("2026-11-22T23:00:00")
    with pytest.raises(ValueError, match="is not an RFC 3339 timestamp"):
        parse_timestamp("yesterday")
