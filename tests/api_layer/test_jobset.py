"""JobSet models: round-trip of the JSON, upstream's defaults, errors that name the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gangq.api.jobset import JobSet, dump, parse_jobset, with_defaults
from gangq.core import SpecError

DATA = Path(__file__).parent / "data"


def pytorch() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DATA / "pytorch_jobset.yaml").read_text())
    return doc


def minimal(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ns"},
        "spec": {
            "replicatedJobs": [
                {"name": "w", "template": {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}}
            ],
            **spec,
        },
    }


def test_realistic_jobset_round_trips_exactly() -> None:
    doc = pytorch()
    js = parse_jobset(doc)
    assert dump(js) == doc
    # typed where gangq reads it
    worker = js.replicated_jobs()[1]
    assert worker.replicas == 2
    assert worker.depends_on is not None and worker.depends_on[0].status == "Ready"
    assert worker.template.spec.pod_failure_policy is not None
    assert worker.template.spec.pod_failure_policy.rules[0].action == "FailJob"
    master_pod = js.replicated_jobs()[0].template.spec.template.spec
    assert master_pod is not None and master_pod.init_containers is not None
    assert master_pod.init_containers[1].restart_policy == "Always"
    assert js.spec.failure_policy is not None and js.spec.failure_policy.restart_strategy == "BlockingRecreate"
    assert js.spec.coordinator is not None and js.spec.coordinator.replicated_job == "master"
    assert js.status is not None and js.status.replicated_jobs_status is not None
    assert js.status.replicated_jobs_status[1].suspended == 2
    assert js.key == "team-a/llama-finetune"


def test_unknown_fields_are_kept_at_every_level() -> None:
    doc = minimal(volumeClaimPolicies=[{"templates": [{"metadata": {"name": "cache"}}]}])
    doc["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    rjob = doc["spec"]["replicatedJobs"][0]
    rjob["futureField"] = {"x": 1}
    pod = rjob["template"]["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    pod["containers"][0]["env"] = [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
    pod["schedulingGates"] = [{"name": "gangq.io/admission"}]
    assert dump(parse_jobset(doc)) == doc


def test_parsing_adds_no_defaults() -> None:
    doc = minimal()
    out = dump(parse_jobset(doc))
    assert out == doc
    assert "replicas" not in out["spec"]["replicatedJobs"][0]
    assert "network" not in out["spec"]


def test_with_defaults_applies_upstream_webhook_and_schema_defaults() -> None:
    doc = minimal(failurePolicy={"maxRestarts": 2, "rules": [{"action": "FailJobSet"}, {"action": "RestartJobSet"}]})
    js = with_defaults(doc)
    out = dump(js)
    spec = out["spec"]
    assert spec["successPolicy"] == {"operator": "All"}
    assert spec["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert spec["failurePolicy"]["restartStrategy"] == "Recreate"
    assert [r["name"] for r in spec["failurePolicy"]["rules"]] == ["failurePolicyRule0", "failurePolicyRule1"]
    rjob = spec["replicatedJobs"][0]
    assert rjob["replicas"] == 1
    assert rjob["groupName"] == "default"
    assert rjob["template"]["spec"]["completionMode"] == "Indexed"
    assert rjob["template"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert doc == minimal(
        failurePolicy={"maxRestarts": 2, "rules": [{"action": "FailJobSet"}, {"action": "RestartJobSet"}]}
    ), "the input is not changed"


def test_with_defaults_keeps_what_the_user_set() -> None:
    doc = pytorch()
    out = dump(with_defaults(doc))
    spec = out["spec"]
    assert spec["successPolicy"] == doc["spec"]["successPolicy"]
    assert spec["failurePolicy"]["restartStrategy"] == "BlockingRecreate"
    assert spec["failurePolicy"]["rules"][0]["name"] == "fail-on-bad-config"
    assert spec["network"] == {"enableDNSHostnames": True, "subdomain": "llama", "publishNotReadyAddresses": True}
    master = spec["replicatedJobs"][0]["template"]["spec"]
    assert master["template"]["spec"]["restartPolicy"] == "Never"
    assert master["completionMode"] == "Indexed"
    assert "startupPolicy" in spec and "failurePolicy" in spec


def test_with_defaults_is_idempotent() -> None:
    once = dump(with_defaults(pytorch()))
    assert dump(with_defaults(once)) == once
    assert dump(with_defaults(with_defaults(minimal()))) == dump(with_defaults(minimal()))


def test_network_defaults_do_not_override_false() -> None:
    out = dump(with_defaults(minimal(network={"enableDNSHostnames": False, "publishNotReadyAddresses": False})))
    assert out["spec"]["network"] == {"enableDNSHostnames": False, "publishNotReadyAddresses": False}


def _set(doc: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node: Any = out
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return out


RJ = ["spec", "replicatedJobs", 0]
POD = [*RJ, "template", "spec", "template", "spec"]


@pytest.mark.parametrize(
    ("path", "value", "field", "message"),
    [
        (["spec", "successPolicy"], {"operator": "Most"}, "spec.successPolicy.operator", "'Most'"),
        (["spec", "startupPolicy"], {"startupPolicyOrder": "Random"}, "spec.startupPolicy.startupPolicyOrder", ""),
        (["spec", "failurePolicy"], {"rules": [{"action": "Explode"}]}, "spec.failurePolicy.rules[0].action", ""),
        (["spec", "failurePolicy"], {"restartStrategy": "Never"}, "spec.failurePolicy.restartStrategy", ""),
        (["spec", "failurePolicy"], {"maxRestarts": -1}, "spec.failurePolicy.maxRestarts", "greater than"),
        (["spec", "coordinator"], {"jobIndex": 0}, "spec.coordinator.replicatedJob", "required"),
        (["spec", "suspend"], "yes", "spec.suspend", "boolean"),
        ([*RJ, "replicas"], -1, "spec.replicatedJobs[0].replicas", "greater than"),
        ([*RJ, "replicas"], "2", "spec.replicatedJobs[0].replicas", "integer"),
        ([*RJ, "dependsOn"], [{"name": "a", "status": "Done"}], "spec.replicatedJobs[0].dependsOn[0].status", ""),
        ([*RJ, "template", "spec", "parallelism"], 1.5, "spec.replicatedJobs[0].template.spec.parallelism", ""),
        ([*RJ, "template", "spec", "completionMode"], "Both", "template.spec.completionMode", ""),
        ([*RJ, "template", "spec", "activeDeadlineSeconds"], 0, "template.spec.activeDeadlineSeconds", ""),
        ([*POD, "restartPolicy"], "Sometimes", "template.spec.template.spec.restartPolicy", ""),
        ([*POD, "nodeSelector"], {"disk": 1}, "spec.template.spec.nodeSelector[disk]", "string"),
        ([*POD, "tolerations"], [{"operator": "Maybe"}], "spec.tolerations[0].operator", ""),
        ([*POD, "containers"], [{"image": "x"}], "spec.template.spec.containers[0].name", "required"),
        ([*POD, "priority"], "high", "spec.template.spec.priority", "integer"),
        (["apiVersion"], "jobset.x-k8s.io/v1alpha1", "apiVersion", "v1alpha2"),
        (["spec", "network"], {"enableDNSHostnames": "true"}, "spec.network.enableDNSHostnames", "boolean"),
    ],
)
def test_invalid_fields_are_named(path: list[Any], value: Any, field: str, message: str) -> None:
    doc = _set(minimal(), path, value)
    with pytest.raises(SpecError) as info:
        parse_jobset(doc)
    err = info.value
    assert err.kind == "JobSet"
    assert err.name == "ns/js"
    assert err.field.endswith(field), err.field
    assert message in err.message
    assert str(err).startswith("JobSet 'ns/js': ")


def test_missing_template_is_named() -> None:
    doc = minimal()
    del doc["spec"]["replicatedJobs"][0]["template"]
    with pytest.raises(SpecError) as info:
        parse_jobset(doc)
    assert info.value.field == "spec.replicatedJobs[0].template"


def test_map_keys_with_dots_are_bracketed() -> None:
    doc = _set(minimal(), [*POD, "containers", 0, "resources"], {"limits": {"nvidia.com/gpu": [8]}})
    with pytest.raises(SpecError) as info:
        parse_jobset(doc)
    assert info.value.field.endswith("containers[0].resources.limits[nvidia.com/gpu]")


def test_parse_accepts_a_model() -> None:
    js = parse_jobset(minimal())
    assert parse_jobset(js) is js
    assert isinstance(with_defaults(js), JobSet)
    assert dump(js) == minimal(), "with_defaults copies; the model is not changed"


_label = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-./", min_size=1, max_size=12)
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=5))
_extra = st.dictionaries(st.sampled_from(["zFuture", "xOther", "vendorField"]), _json_leaf, max_size=2)


@st.composite
def jobsets(draw: st.DrawFn) -> dict[str, Any]:
    rjobs = []
    for i in range(draw(st.integers(1, 3))):
        pod: dict[str, Any] = {"containers": [{"name": "c", **draw(_extra)}], **draw(_extra)}
        if draw(st.booleans()):
            pod["nodeSelector"] = draw(st.dictionaries(_label, _label, max_size=3))
        if draw(st.booleans()):
            pod["tolerations"] = [{"key": draw(_label), "operator": "Exists"}]
        if draw(st.booleans()):
            pod["restartPolicy"] = draw(st.sampled_from(["Never", "OnFailure"]))
        job: dict[str, Any] = {"template": {"spec": pod}}
        for field in ("parallelism", "completions", "backoffLimit"):
            if draw(st.booleans()):
                job[field] = draw(st.integers(0, 8))
        rjob: dict[str, Any] = {"name": f"r{i}", "template": {"spec": job}, **draw(_extra)}
        if draw(st.booleans()):
            rjob["replicas"] = draw(st.integers(0, 4))
        rjobs.append(rjob)
    spec: dict[str, Any] = {"replicatedJobs": rjobs, **draw(_extra)}
    if draw(st.booleans()):
        spec["suspend"] = draw(st.booleans())
    if draw(st.booleans()):
        spec["successPolicy"] = {"operator": draw(st.sampled_from(["All", "Any"]))}
    if draw(st.booleans()):
        spec["network"] = {"enableDNSHostnames": draw(st.booleans())}
    return {"metadata": {"name": "p", **draw(_extra)}, "spec": spec, **draw(_extra)}


@settings(max_examples=60, deadline=None)
@given(jobsets())
def test_round_trip_property(doc: dict[str, Any]) -> None:
    assert dump(parse_jobset(doc)) == doc
    defaulted = dump(with_defaults(doc))
    assert dump(with_defaults(defaulted)) == defaulted
