"""JobSet → gang mapping, effective pod requests, annotations, and admission inject / restore."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gangq.api.jobset import PodSpec, plain_json
from gangq.api.pods import FieldContext, pod_requests
from gangq.api.workload import (
    ORIGINAL_SCHEDULING_ANNOTATION,
    NotQueuedError,
    parse_duration,
    parse_min_resources,
    parse_timestamp,
    queue_name,
)
from gangq.core import (
    Admission,
    ClusterQueueSpec,
    Engine,
    FlavorQuotas,
    FlavorSpec,
    LabelSelector,
    LocalQueueSpec,
    NodeSpec,
    PodSetAssignment,
    ResourceGroup,
    ResourceQuota,
    SpecError,
    Taint,
    Toleration,
)
from gangq.integrations import podsets
from gangq.integrations.jobset import JOBSET, jobset_to_workload

DATA = Path(__file__).parent / "data"
POD_PATH = "spec.replicatedJobs[0].template.spec.template.spec"
GI = 1 << 30
MI = 1 << 20


def admission_patch(doc: Any, adm: Any, flavors: Any, *, unsuspend: bool = True) -> list[dict[str, Any]]:
    """The JobSet kind's admission patch (without the unsuspend when ``unsuspend`` is false)."""
    if unsuspend:
        return JOBSET.admission_ops(doc, adm, flavors)
    return podsets.admission_ops(JOBSET.kind, doc, JOBSET.pod_sets(doc), adm, flavors, JOBSET.pod_sets_field)


def apply_admission(doc: Any, adm: Any, flavors: Any, *, unsuspend: bool = True) -> dict[str, Any]:
    ops = admission_patch(doc, adm, flavors, unsuspend=unsuspend)
    out: dict[str, Any] = jsonpatch.apply_patch(plain_json(doc), ops)
    return out


def restore_patch(doc: Any, *, suspend: bool = True) -> list[dict[str, Any]]:
    """The JobSet kind's eviction patch (without the suspend when ``suspend`` is false)."""
    if suspend:
        return JOBSET.eviction_ops(doc)
    return podsets.restore_ops(JOBSET.kind, doc, JOBSET.pod_sets(doc))


def restore(doc: Any, *, suspend: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = jsonpatch.apply_patch(plain_json(doc), restore_patch(doc, suspend=suspend))
    return out



def pytorch() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DATA / "pytorch_jobset.yaml").read_text())
    return doc


def pod(containers: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"containers": containers or [{"name": "c", "resources": {"requests": {"cpu": "1"}}}], **extra}


def rjob(name: str = "w", replicas: int | None = None, pod_spec: dict[str, Any] | None = None, **job: Any) -> Any:
    out: dict[str, Any] = {"name": name, "template": {"spec": {**job, "template": {"spec": pod_spec or pod()}}}}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def jobset(
    *rjobs: dict[str, Any],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "js", "namespace": "ns", "labels": {"gangq.io/queue-name": "q", **(labels or {})}}
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta,
        "spec": {"replicatedJobs": list(rjobs) or [rjob()], **spec},
    }


def error_of(doc: dict[str, Any], **kwargs: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        jobset_to_workload(doc, **kwargs)
    assert info.value.kind == "JobSet"
    assert info.value.name == "ns/js" or info.value.name == "team-a/llama-finetune"
    return info.value


# --- the realistic example ----------------------------------------------------------------------


def test_pytorch_jobset_maps_to_the_gang() -> None:
    wl = jobset_to_workload(pytorch(), priority_classes={"batch": 100}, workload_priority_classes={"research-high": 7})
    assert (wl.key, wl.namespace, wl.queue_name) == ("team-a/llama-finetune", "team-a", "gpu-queue")
    assert (wl.priority, wl.priority_class) == (7, "research-high")  # the WorkloadPriorityClass label wins
    assert wl.creation_time == 1795388400.0  # 2026-11-22T23:00:00Z
    assert wl.min_member == 9
    assert wl.min_resources == {"nvidia.com/gpu": 64, "cpu": 96_000}
    # dependsOn → sequential: (7200 + 7000) × (1 + maxRestarts 3)
    assert wl.runtime_limit == (7200 + 7000) * 4
    master, worker = wl.pod_sets
    assert (master.name, master.count) == ("master", 1)
    # 10 cpu + 500m sidecar (the 4-cpu init container runs before the sidecar starts, alone)
    assert master.requests == {"cpu": 10_500, "memory": 200 * GI + 256 * MI, "nvidia.com/gpu": 8}
    assert (worker.name, worker.count) == ("worker", 2 * 4)
    # requests from limits where only the limit is set (memory, gpu), cpu request wins over its limit;
    # plus pod overhead
    assert worker.requests == {"cpu": 10_250, "memory": 200 * GI + 120 * MI, "nvidia.com/gpu": 8}
    assert worker.node_selector == {"cloud.google.com/gke-nodepool": "gpu-pool"}
    assert [t.signature() for t in worker.tolerations] == [("nvidia.com/gpu", "Exists", "", "NoSchedule")]
    assert wl.total_pods == 9


# --- pod counts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "job", "count"),
    [
        (None, {}, 1),  # replicas 1, parallelism 1, completions 1
        (3, {}, 3),
        (2, {"parallelism": 4, "completions": 4}, 8),
        (2, {"parallelism": 4, "completions": 2}, 4),  # completions < parallelism caps the pods
        (2, {"parallelism": 2, "completions": 10}, 4),
        (1, {"completions": 5}, 1),  # parallelism defaults to 1
        (2, {"parallelism": 4, "completionMode": "NonIndexed"}, 8),  # work queue: parallelism pods
        (3, {"parallelism": 0, "completions": 4}, 0),
        (0, {"parallelism": 4, "completions": 4}, 0),
    ],
)
def test_pod_set_count_is_replicas_times_pods_per_job(replicas: int | None, job: dict[str, Any], count: int) -> None:
    doc = jobset(rjob("a", replicas, **job), rjob("b"))
    wl = jobset_to_workload(doc)
    assert [(ps.name, ps.count) for ps in wl.pod_sets] == [("a", count), ("b", 1)]


@pytest.mark.parametrize("job", [{"parallelism": 4}, {"parallelism": 4, "completionMode": "Indexed"}])
def test_indexed_job_without_completions_is_an_error(job: dict[str, Any]) -> None:
    err = error_of(jobset(rjob("a", 2, **job)))
    assert err.field == "spec.replicatedJobs[0].template.spec.completions"
    assert "Indexed" in err.message


# --- queue, priority, time -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "queue"),
    [
        ({"gangq.io/queue-name": "mine"}, "mine"),
        ({"kueue.x-k8s.io/queue-name": "from-kueue"}, "from-kueue"),
        ({"gangq.io/queue-name": "mine", "kueue.x-k8s.io/queue-name": "other"}, "mine"),
        ({"gangq.io/queue-name": "", "kueue.x-k8s.io/queue-name": "other"}, "other"),
        ({}, None),
        ({"gangq.io/queue-name": ""}, None),
    ],
)
def test_queue_name_from_labels(labels: dict[str, str], queue: str | None) -> None:
    doc = jobset()
    doc["metadata"]["labels"] = labels
    assert queue_name(doc) == queue
    if queue is None:
        with pytest.raises(NotQueuedError) as info:
            jobset_to_workload(doc)
        assert info.value.field == "metadata.labels[gangq.io/queue-name]"
        assert "not queued" in info.value.message
    else:
        assert jobset_to_workload(doc).queue_name == queue


def test_queue_name_of_odd_objects_is_none() -> None:
    assert queue_name({}) is None
    assert queue_name({"metadata": {"labels": None}}) is None


PCS = {"batch": 100, "urgent": 1000}
WPCS = {"research-high": 50_000}


@pytest.mark.parametrize(
    ("labels", "pod_extra", "expected"),
    [
        ({"gangq.io/priority-class": "research-high"}, {"priorityClassName": "batch"}, (50_000, "research-high")),
        ({"kueue.x-k8s.io/priority-class": "research-high"}, {}, (50_000, "research-high")),
        ({}, {"priorityClassName": "urgent"}, (1000, "urgent")),
        ({}, {"priorityClassName": "batch", "priority": 7}, (100, "batch")),
        ({}, {"priority": 7}, (7, "")),
        ({}, {}, (0, "")),
    ],
)
def test_priority_sources_in_order(
    labels: dict[str, str], pod_extra: dict[str, Any], expected: tuple[int, str]
) -> None:
    doc = jobset(rjob("a"), rjob("b", pod_spec=pod(**pod_extra)), labels=labels)
    wl = jobset_to_workload(doc, priority_classes=PCS, workload_priority_classes=WPCS)
    assert (wl.priority, wl.priority_class) == expected


def test_unknown_priority_classes_name_the_field() -> None:
    err = error_of(jobset(labels={"gangq.io/priority-class": "nope"}), workload_priority_classes=WPCS)
    assert err.field == "metadata.labels[gangq.io/priority-class]"
    assert "WorkloadPriorityClass 'nope'" in err.message
    err = error_of(jobset(rjob("a"), rjob("b", pod_spec=pod(priorityClassName="nope"))), priority_classes=PCS)
    assert err.field == "spec.replicatedJobs[1].template.spec.template.spec.priorityClassName"
    assert "PriorityClass 'nope'" in err.message


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2026-11-22T23:00:00Z", 1795388400.0),
        ("2026-11-22T23:00:00.25Z", 1795388400.25),
        ("2026-11-23T00:00:00+01:00", 1795388400.0),
    ],
)
def test_creation_timestamp(text: str, epoch: float) -> None:
    doc = jobset()
    doc["metadata"]["creationTimestamp"] = text
    assert jobset_to_workload(doc).creation_time == epoch
    assert parse_timestamp(text) == epoch


@pytest.mark.parametrize("text", ["yesterday", "2026-11-22", "2026-11-22T23:00:00", "2026-13-01T00:00:00Z"])
def test_malformed_creation_timestamp_is_named(text: str) -> None:
    doc = jobset()
    doc["metadata"]["creationTimestamp"] = text
    err = error_of(doc)
    assert err.field == "metadata.creationTimestamp"
    assert "RFC 3339" in err.message


def test_missing_creation_timestamp_is_zero() -> None:
    assert jobset_to_workload(jobset()).creation_time == 0.0


# --- effective pod requests ------------------------------------------------------------------------


def c(name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **kw: Any) -> Any:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": name, "resources": res, **kw}


SIDECAR = {"restartPolicy": "Always"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [c("a", {"cpu": "1", "memory": "1Gi"})]}, {"cpu": 1000, "memory": GI}),
        ({"containers": [c("a", limits={"cpu": "2", "nvidia.com/gpu": 4})]}, {"cpu": 2000, "nvidia.com/gpu": 4}),
        ({"containers": [c("a", {"cpu": "500m"}, {"cpu": "2"})]}, {"cpu": 500}),
        ({"containers": [c("a", {"cpu": "1"}), c("b", {"cpu": "250m", "memory": "1Mi"})]}, {"cpu": 1250, "memory": MI}),
        # a classic init container larger than the containers sets the peak
        ({"containers": [c("a", {"cpu": "1"})], "initContainers": [c("i", {"cpu": "3"})]}, {"cpu": 3000}),
        ({"containers": [c("a", {"cpu": "4"})], "initContainers": [c("i", {"cpu": "3"})]}, {"cpu": 4000}),
        # a sidecar runs alongside the containers, and alongside init containers started after it
        (
            {"containers": [c("a", {"cpu": "1"})], "initContainers": [c("s", {"cpu": "1"}, **SIDECAR)]},
            {"cpu": 2000},
        ),
        (
            {
                "containers": [c("a", {"cpu": "1"})],
                "initContainers": [c("s", {"cpu": "1"}, **SIDECAR), c("i", {"cpu": "3"})],
            },
            {"cpu": 4000},
        ),
        (
            {
                "containers": [c("a", {"cpu": "1"})],
                "initContainers": [c("i", {"cpu": "3"}), c("s", {"cpu": "1"}, **SIDECAR)],
            },
            {"cpu": 3000},
        ),
        (  # two sidecars, then a big init container: 1 + 2 + 5 = 8 beats 1 + 2 + 1 = 4
            {
                "containers": [c("a", {"cpu": "1"})],
                "initContainers": [
                    c("s1", {"cpu": "1"}, **SIDECAR),
                    c("s2", {"cpu": "2"}, **SIDECAR),
                    c("i", {"cpu": "5"}),
                ],
            },
            {"cpu": 8000},
        ),
        # per resource: memory from the init container, cpu from the containers
        (
            {"containers": [c("a", {"cpu": "4", "memory": "1Gi"})], "initContainers": [c("i", {"memory": "8Gi"})]},
            {"cpu": 4000, "memory": 8 * GI},
        ),
        # overhead is added on top
        (
            {"containers": [c("a", {"cpu": "1"})], "overhead": {"cpu": "100m", "memory": "64Mi"}},
            {"cpu": 1100, "memory": 64 * MI},
        ),
        # pod-level requests override cpu / memory, not extended resources; overhead still added
        (
            {
                "containers": [c("a", {"cpu": "1", "nvidia.com/gpu": 2}), c("b", {"cpu": "1"})],
                "resources": {"requests": {"cpu": "3", "nvidia.com/gpu": 9}},
                "overhead": {"cpu": "1"},
            },
            {"cpu": 4000, "nvidia.com/gpu": 2},
        ),
        ({"containers": [c("a")], "resources": {"limits": {"memory": "2Gi"}}}, {"memory": 2 * GI}),
        # sums are exact, only the total is rounded up
        ({"containers": [c("a", {"cpu": "0.0005"}), c("b", {"cpu": "0.0005"})]}, {"cpu": 1}),
        ({"containers": [c("a", {"cpu": "100m"}), c("b", {"cpu": "0.0001"})]}, {"cpu": 101}),
        ({"containers": [c("a", {"memory": "1.5"})]}, {"memory": 2}),
        ({"containers": [c("a", {"cpu": "1e3m", "memory": "2k"})]}, {"cpu": 1000, "memory": 2000}),
        ({"containers": [c("a", {"cpu": 2, "memory": 1.5e3})]}, {"cpu": 2000, "memory": 1500}),
        # zero amounts are left out
        ({"containers": [c("a", {"cpu": "0", "nvidia.com/gpu": "0"})]}, {}),
        ({"containers": [c("a")]}, {}),
    ],
)
def test_effective_pod_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests(spec) == expected
    assert pod_requests(PodSpec.model_validate(spec)) == expected


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"containers": [c("a"), c("b", {"cpu": "1x"})]}, "spec.containers[1].resources.requests[cpu]", "not a valid"),
        (
            {"containers": [c("a", limits={"memory": "-1Gi"})]},
            "spec.containers[0].resources.limits[memory]",
            "negative",
        ),
        (
            {"containers": [c("a")], "initContainers": [c("i", {"cpu": "x"})]},
            "initContainers[0].resources.requests[cpu]",
            "",
        ),
        ({"containers": [c("a")], "overhead": {"cpu": "lots"}}, "spec.overhead[cpu]", ""),
        ({"containers": [c("a", {"cpu": True})]}, "spec.containers[0].resources.requests[cpu]", ""),
        ({"containers": [{"image": "x"}]}, "spec.containers[0].name", "required"),
    ],
)
def test_malformed_pod_resources_name_the_field(spec: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        pod_requests(spec, FieldContext("JobSet", "ns/js", "spec"))
    assert info.value.field.endswith(field), info.value.field
    assert message in info.value.message


def test_malformed_quantity_in_a_jobset_names_the_full_path() -> None:
    doc = jobset(rjob("a"), rjob("b", pod_spec=pod([c("x", {"nvidia.com/gpu": "eight"})])))
    err = error_of(doc)
    assert (
        err.field
        == "spec.replicatedJobs[1].template.spec.template.spec.containers[0].resources.requests[nvidia.com/gpu]"
    )
    assert "'eight' is not a valid quantity" in err.message


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 10**7), min_size=1, max_size=4),
    st.sampled_from([("m", 1, "cpu"), ("", 1000, "cpu"), ("Mi", 1, "memory"), ("k", 1, "memory"), ("", 1, "x.io/y")]),
)
def test_quantities_sum_exactly(amounts: list[int], unit: tuple[str, int, str]) -> None:
    suffix, factor, resource = unit
    spec = {"containers": [c(f"c{i}", {resource: f"{a}{suffix}"}) for i, a in enumerate(amounts)]}
    scale = {"m": 1, "": factor, "Mi": MI, "k": 1000}[suffix] if resource != "x.io/y" else 1
    total = sum(amounts) * scale
    assert pod_requests(spec) == ({resource: total} if total else {})


# --- nodeSelector and tolerations -----------------------------------------------------------------


def test_node_selector_and_tolerations_come_from_each_template() -> None:
    a = pod(nodeSelector={"disk": "ssd"}, tolerations=[{"key": "gpu", "operator": "Equal", "value": "yes"}])
    b = pod(tolerations=[{"operator": "Exists"}, {"key": "k", "effect": "NoExecute", "tolerationSeconds": 30}])
    wl = jobset_to_workload(jobset(rjob("a", pod_spec=a), rjob("b", pod_spec=b)))
    ps_a, ps_b = wl.pod_sets
    assert ps_a.node_selector == {"disk": "ssd"}
    assert [t.signature() for t in ps_a.tolerations] == [("gpu", "Equal", "yes", "")]
    assert ps_b.node_selector == {}
    assert [t.signature() for t in ps_b.tolerations] == [("", "Exists", "", ""), ("k", "Equal", "", "NoExecute")]


def test_invalid_toleration_is_named() -> None:
    doc = jobset(rjob("a", pod_spec=pod(tolerations=[{"value": "x"}])))
    err = error_of(doc)
    assert err.field == "spec.replicatedJobs[0].template.spec.template.spec.tolerations[0]"
    assert "Exists" in err.message


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def test_required_node_affinity_comes_from_the_template() -> None:
    affinity = _required(
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100", "a100"]}]},
        {"matchExpressions": [{"key": "mem-gb", "operator": "Gt", "values": ["512"]}]},
    )
    affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
    ]
    wl = jobset_to_workload(jobset(rjob("a", pod_spec=pod(affinity=affinity))))
    (ps,) = wl.pod_sets
    assert [[r.signature() for r in term] for term in ps.node_affinity] == [
        [("gpu", "In", ("h100", "a100"))],
        [("mem-gb", "Gt", ("512",))],
    ]  # preferences are not requirements
    only_names = _required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})
    wl = jobset_to_workload(jobset(rjob("a", pod_spec=pod(affinity=only_names))))
    assert wl.pod_sets[0].node_affinity == ()  # node names are left to the kube-scheduler


def test_invalid_node_affinity_is_named() -> None:
    bad = _required({"matchExpressions": [{"key": "gpu", "operator": "Near", "values": ["x"]}]})
    err = error_of(jobset(rjob("a", pod_spec=pod(affinity=bad))))
    assert err.field == (
        "spec.replicatedJobs[0].template.spec.template.spec.affinity.nodeAffinity."
        "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator"
    )
    assert "Near" in err.message
    bad = _required({"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["many"]}]})
    assert "integer" in error_of(jobset(rjob("a", pod_spec=pod(affinity=bad)))).message


# --- annotations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [("1", 1), ("4", 4), (" 2 ", 2)])
def test_min_member(text: str, expected: int) -> None:
    doc = jobset(rjob("a", 2, parallelism=2, completions=2), annotations={"gangq.io/min-member": text})
    assert jobset_to_workload(doc).min_member == expected


def test_min_member_defaults_to_all_pods() -> None:
    assert jobset_to_workload(jobset()).min_member is None


@pytest.mark.parametrize("text", ["0", "5", "-1", "two", "1.5", "", "2,3"])
def test_bad_min_member_is_named(text: str) -> None:
    doc = jobset(rjob("a", 2, parallelism=2, completions=2), annotations={"gangq.io/min-member": text})
    err = error_of(doc)
    assert err.field == "metadata.annotations[gangq.io/min-member]"
    assert "between 1 and the gang's 4 pods" in err.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nvidia.com/gpu=16,cpu=32", {"nvidia.com/gpu": 16, "cpu": 32_000}),
        (" cpu = 500m , memory=1.5Gi ", {"cpu": 500, "memory": 3 * GI // 2}),
        ("example.com/fpga=2", {"example.com/fpga": 2}),
        ("cpu=0.0001", {"cpu": 1}),
        ("memory=1e3", {"memory": 1000}),
    ],
)
def test_min_resources(text: str, expected: dict[str, int]) -> None:
    assert parse_min_resources(text) == expected
    doc = jobset(annotations={"gangq.io/min-resources": text})
    assert jobset_to_workload(doc).min_resources == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("cpu", "not resource=quantity"),
        ("cpu=", "not resource=quantity"),
        ("=4", "not resource=quantity"),
        ("cpu=4,,memory=1Gi", "empty item"),
        ("cpu=4;memory=1Gi", "not a valid quantity"),
        ("cpu=4,cpu=5", "listed twice"),
        ("cpu=four", "'four' is not a valid quantity"),
        ("cpu=-4", "must not be negative"),
        ("nvidia.com/=1", "not a valid resource name"),
        ("Bad_Domain.com/gpu=1", "not a valid resource name"),
    ],
)
def test_bad_min_resources_is_named(text: str, message: str) -> None:
    err = error_of(jobset(annotations={"gangq.io/min-resources": text}))
    assert err.field == "metadata.annotations[gangq.io/min-resources]"
    assert message in err.message


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5400", 5400.0),
        ("90.5", 90.5),
        ("90m", 5400.0),
        ("2h30m", 9000.0),
        ("45s", 45.0),
        ("1.5h", 5400.0),
        ("1h0m30s", 3630.0),
        ("1500ms", 1.5),
        ("1e3", 1000.0),
    ],
)
def test_runtime_limit_annotation(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    doc = jobset(rjob("a", activeDeadlineSeconds=10), annotations={"gangq.io/runtime-limit": text})
    assert jobset_to_workload(doc).runtime_limit == seconds  # the annotation wins over deadlines


@pytest.mark.parametrize("text", ["", "0", "-5", "0s", "soon", "2h 30m", "h", "1d", "inf", "nan", "1h-3m"])
def test_bad_runtime_limit_is_named(text: str) -> None:
    err = error_of(jobset(annotations={"gangq.io/runtime-limit": text}))
    assert err.field == "metadata.annotations[gangq.io/runtime-limit]"


def _deadline(name: str, seconds: int | None, **kw: Any) -> dict[str, Any]:
    job: dict[str, Any] = {} if seconds is None else {"activeDeadlineSeconds": seconds}
    return rjob(name, **job, **kw)


@pytest.mark.parametrize(
    ("rjobs", "spec", "limit"),
    [
        ([_deadline("a", 100), _deadline("b", 300)], {}, 300.0),  # All: the last Job to end
        ([_deadline("a", 100), _deadline("b", None)], {}, None),  # one without a deadline: unbounded
        ([_deadline("a", 100), _deadline("b", 300)], {"successPolicy": {"operator": "Any"}}, 100.0),
        ([_deadline("a", None), _deadline("b", 300)], {"successPolicy": {"operator": "Any"}}, 300.0),
        (
            [_deadline("a", 100), _deadline("b", None)],
            {"successPolicy": {"operator": "All", "targetReplicatedJobs": ["a"]}},
            100.0,
        ),
        ([_deadline("a", 100), _deadline("b", 300)], {"startupPolicy": {"startupPolicyOrder": "InOrder"}}, 400.0),
        ([_deadline("a", 100), _deadline("b", 300)], {"failurePolicy": {"maxRestarts": 2}}, 900.0),
        (
            [_deadline("a", 100), _deadline("b", 300)],
            {"failurePolicy": {"maxRestarts": 2, "rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts"}]}},
            None,
        ),
        ([_deadline("a", 100), _deadline("b", None, replicas=0)], {}, 100.0),  # no pods: no say
        ([_deadline("a", None)], {}, None),
    ],
)
def test_runtime_limit_from_job_deadlines(
    rjobs: list[dict[str, Any]], spec: dict[str, Any], limit: float | None
) -> None:
    assert jobset_to_workload(jobset(*rjobs, **spec)).runtime_limit == limit


def test_depends_on_runs_replicated_jobs_one_after_the_other() -> None:
    b = _deadline("b", 300)
    b["dependsOn"] = [{"name": "a", "status": "Complete"}]
    assert jobset_to_workload(jobset(_deadline("a", 100), b)).runtime_limit == 400.0


# --- structural errors -----------------------------------------------------------------------------


def _without(path: list[Any]) -> dict[str, Any]:
    doc = jobset()
    node: Any = doc
    for p in path[:-1]:
        node = node[p]
    del node[path[-1]]
    return doc


@pytest.mark.parametrize(
    ("doc", "field", "message"),
    [
        (_without(["metadata", "name"]), "metadata.name", "required"),
        (jobset(rjob("a"), rjob("a")), "spec.replicatedJobs[1].name", "duplicate"),
        (jobset(rjob("a", 0), rjob("b", 0)), "spec.replicatedJobs", "no pods"),
        (
            jobset(rjob("a", pod_spec={"containers": []})),
            "spec.replicatedJobs[0].template.spec.template.spec.containers",
            "at least one",
        ),
        (jobset(rjob("a", 2, parallelism="2")), "spec.replicatedJobs[0].template.spec.parallelism", "integer"),
        (jobset(rjob("a", -1)), "spec.replicatedJobs[0].replicas", "greater than"),
    ],
)
def test_structural_errors_name_the_field(doc: dict[str, Any], field: str, message: str) -> None:
    if "name" not in doc["metadata"]:
        with pytest.raises(SpecError) as info:
            jobset_to_workload(doc)
        err = info.value
    else:
        err = error_of(doc)
    assert err.field == field
    assert message in err.message


def test_no_replicated_jobs_is_an_error() -> None:
    doc = jobset()
    doc["spec"]["replicatedJobs"] = []
    assert error_of(doc).field == "spec.replicatedJobs"
    del doc["spec"]["replicatedJobs"]
    assert error_of(doc).field == "spec.replicatedJobs"


def test_pod_template_without_spec_is_an_error() -> None:
    doc = jobset()
    del doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert error_of(doc).field == "spec.replicatedJobs[0].template.spec.template.spec"


# --- admission: inject and restore -----------------------------------------------------------------

A100 = FlavorSpec(
    "a100",
    node_labels={"gpu": "a100", "pool": "train"},
    node_taints=[Taint("nvidia.com/gpu", "", "NoSchedule")],
    tolerations=[Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"), Toleration("team", "Equal", "ml", "")],
)
CPU = FlavorSpec("cpu-pool", node_labels={"pool": "train", "kind": "cpu"})
FLAVORS = {"a100": A100, "cpu-pool": CPU}


def admission(**pod_sets: dict[str, str]) -> Admission:
    return Admission(
        "ns/js",
        "cq",
        tuple(PodSetAssignment(name, 1, flavors, {}, {}) for name, flavors in pod_sets.items()),
        borrowing=False,
        time=0.0,
        usage={},
    )


def _pod(doc: dict[str, Any], i: int) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["replicatedJobs"][i]["template"]["spec"]["template"]["spec"]
    return spec


def test_admission_merges_flavor_labels_and_appends_tolerations_once() -> None:
    doc = pytorch()
    adm = admission(master={"cpu": "a100", "nvidia.com/gpu": "a100"}, worker={"nvidia.com/gpu": "a100"})
    out = apply_admission(doc, adm, FLAVORS)
    assert doc == pytorch(), "the input is not changed"
    for i in (0, 1):
        assert _pod(out, i)["nodeSelector"] == {
            "cloud.google.com/gke-nodepool": "gpu-pool",
            "gpu": "a100",
            "pool": "train",
        }
        # the template already tolerated nvidia.com/gpu: only the team toleration is new
        assert _pod(out, i)["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "team", "operator": "Equal", "value": "ml"},
        ]
    assert out["spec"]["suspend"] is False
    assert ORIGINAL_SCHEDULING_ANNOTATION in out["metadata"]["annotations"]
    # everything else is untouched
    for path in (("status",), ("metadata", "labels"), ("spec", "failurePolicy")):
        a, b = out, doc
        for p in path:
            a, b = a[p], b[p]
        assert a == b
    assert restore(out) == doc


def test_several_flavors_for_one_pod_set_are_all_injected() -> None:
    doc = jobset(rjob("a", pod_spec=pod()))
    out = apply_admission(doc, admission(a={"cpu": "cpu-pool", "nvidia.com/gpu": "a100"}), FLAVORS)
    assert _pod(out, 0)["nodeSelector"] == {"pool": "train", "kind": "cpu", "gpu": "a100"}
    assert len(_pod(out, 0)["tolerations"]) == 2


def test_absent_fields_are_added_and_removed_again() -> None:
    doc = jobset(rjob("a"), rjob("b"))
    doc["spec"]["suspend"] = True
    out = apply_admission(doc, admission(a={"cpu": "a100"}), FLAVORS)
    assert "nodeSelector" in _pod(out, 0) and "tolerations" in _pod(out, 0)
    assert "nodeSelector" not in _pod(out, 1), "pod sets not in the admission are not touched"
    back = restore(out)
    assert back == doc
    assert "annotations" not in back["metadata"]


def test_patches_apply_to_the_same_result() -> None:
    doc = pytorch()
    adm = admission(master={"cpu": "a100"}, worker={"nvidia.com/gpu": "a100"})
    patch = admission_patch(doc, adm, FLAVORS)
    admitted = jsonpatch.apply_patch(doc, patch)
    assert admitted == apply_admission(doc, adm, FLAVORS)
    tests = [op for op in patch if op["op"] == "test"]
    assert tests == [
        {"op": "test", "path": "/spec/replicatedJobs/0/name", "value": "master"},
        {"op": "test", "path": "/spec/replicatedJobs/1/name", "value": "worker"},
    ]
    assert {"op": "add", "path": "/spec/suspend", "value": False} in patch
    assert all(
        op["path"].startswith(("/spec/replicatedJobs/", "/spec/suspend", "/metadata/annotations")) for op in patch
    )
    undo = restore_patch(admitted)
    assert jsonpatch.apply_patch(admitted, undo) == doc
    assert any(op["path"] == "/metadata/annotations/gangq.io~1original-pod-scheduling" for op in undo)


def test_patch_fails_if_the_replicated_jobs_moved() -> None:
    doc = pytorch()
    patch = admission_patch(doc, admission(worker={"nvidia.com/gpu": "a100"}), FLAVORS)
    moved = copy.deepcopy(doc)
    moved["spec"]["replicatedJobs"].reverse()
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, patch)


def test_readmission_replaces_the_previous_injection() -> None:
    doc = jobset(rjob("a", pod_spec=pod(nodeSelector={"zone": "z1"})))
    first = apply_admission(doc, admission(a={"cpu": "a100"}), FLAVORS)
    second = apply_admission(first, admission(a={"cpu": "cpu-pool"}), FLAVORS)
    assert second == apply_admission(doc, admission(a={"cpu": "cpu-pool"}), FLAVORS)
    assert _pod(second, 0)["nodeSelector"] == {"zone": "z1", "pool": "train", "kind": "cpu"}
    assert "tolerations" not in _pod(second, 0)


def test_restore_without_a_recorded_admission_only_suspends() -> None:
    doc = jobset(rjob("a", pod_spec=pod(nodeSelector={"gpu": "a100"})))
    assert restore_patch(doc) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert restore_patch(doc, suspend=False) == []
    assert restore(doc, suspend=False) == doc


def test_restore_skips_replicated_jobs_that_are_gone() -> None:
    doc = jobset(rjob("a"), rjob("b"))
    out = apply_admission(doc, admission(a={"cpu": "a100"}, b={"cpu": "a100"}), FLAVORS)
    del out["spec"]["replicatedJobs"][0]
    back = restore(out, suspend=False)
    assert _pod(back, 0) == _pod(doc, 1)


@pytest.mark.parametrize(
    ("adm", "doc", "field", "message"),
    [
        (
            admission(a={"cpu": "a100"}),
            jobset(rjob("a", pod_spec=pod(nodeSelector={"gpu": "h100"}))),
            "spec.replicatedJobs[0].template.spec.template.spec.nodeSelector[gpu]",
            "needs 'a100'",
        ),
        (admission(z={"cpu": "a100"}), jobset(rjob("a")), "spec.replicatedJobs", "'z'"),
        (admission(a={"cpu": "v100"}), jobset(rjob("a")), f"{POD_PATH}", "'v100'"),
    ],
)
def test_admission_errors_name_the_field(adm: Admission, doc: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        apply_admission(doc, adm, FLAVORS)
    assert (info.value.kind, info.value.name, info.value.field) == ("JobSet", "ns/js", field)
    assert message in info.value.message


@pytest.mark.parametrize("text", ["{not json", "[1]", '{"a": {"nodeSelector": 3}}', '{"a": 1}'])
def test_malformed_recorded_annotation_is_named(text: str) -> None:
    doc = jobset(annotations={ORIGINAL_SCHEDULING_ANNOTATION: text})
    with pytest.raises(SpecError) as info:
        restore(doc)
    assert info.value.field == "metadata.annotations[gangq.io/original-pod-scheduling]"


_key = st.sampled_from(["zone", "disk", "gpu", "pool", "example.com/rack"])
_value = st.sampled_from(["a", "b", "c"])
_toleration = st.fixed_dictionaries(
    {"key": st.sampled_from(["nvidia.com/gpu", "team", "spot"])},
    optional={
        "operator": st.sampled_from(["Exists", "Equal"]),
        "value": _value,
        "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
    },
)


@st.composite
def admitted_cases(draw: st.DrawFn) -> tuple[dict[str, Any], Admission, dict[str, FlavorSpec]]:
    names = ["r0", "r1", "r2"][: draw(st.integers(1, 3))]
    flavors: dict[str, FlavorSpec] = {}
    for f in ("f0", "f1", "f2"):
        tols = draw(st.lists(_toleration, max_size=2))
        flavors[f] = FlavorSpec(
            f,
            node_labels=draw(st.dictionaries(_key, _value, max_size=2)),
            tolerations=[
                Toleration(t["key"], t.get("operator", "Equal"), t.get("value", ""), t.get("effect", "")) for t in tols
            ],
        )
    rjobs = []
    assignments = {}
    for name in names:
        assigned = draw(st.lists(st.sampled_from(sorted(flavors)), max_size=2, unique=True))
        spec = pod()
        # a template's nodeSelector never contradicts its flavors (the engine checks that)
        needed: dict[str, str] = {}
        for f in assigned:
            for k, v in flavors[f].node_labels.items():
                needed.setdefault(k, v)
        consistent = all(flavors[f].node_labels.get(k, v) == v for f in assigned for k, v in needed.items())
        if not consistent:
            assigned = assigned[:1]
            needed = dict(flavors[assigned[0]].node_labels) if assigned else {}
        if draw(st.booleans()):
            own = draw(st.dictionaries(_key, _value, max_size=3))
            spec["nodeSelector"] = {k: needed.get(k, v) for k, v in own.items()}
        if draw(st.booleans()):
            spec["tolerations"] = draw(st.lists(_toleration, max_size=3))
        rjobs.append(rjob(name, pod_spec=spec))
        if assigned and draw(st.booleans()):
            assignments[name] = {f"res{i}": f for i, f in enumerate(assigned)}
    doc = jobset(*rjobs, annotations=draw(st.sampled_from([None, {"owner": "me"}])))
    doc["spec"]["suspend"] = True
    return doc, admission(**assignments), flavors


@settings(max_examples=120, deadline=None)
@given(admitted_cases())
def test_inject_then_restore_is_the_identity(case: tuple[dict[str, Any], Admission, dict[str, FlavorSpec]]) -> None:
    doc, adm, flavors = case
    out = apply_admission(doc, adm, flavors)
    assert jsonpatch.apply_patch(doc, admission_patch(doc, adm, flavors)) == out
    for ps in adm.pod_sets:
        i = int(ps.name[1])
        pod_spec = _pod(out, i)
        selector = pod_spec.get("nodeSelector", {})
        tolerations = pod_spec.get("tolerations", [])
        for f in set(ps.flavors.values()):
            assert flavors[f].node_labels.items() <= selector.items()
        identities = [
            (t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", "")) for t in tolerations
        ]
        injected = [t.signature() for f in ps.flavors.values() for t in flavors[f].tolerations]
        assert all(sig in identities for sig in injected)
        original = [
            (t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", ""))
            for t in _pod(doc, i).get("tolerations", [])
        ]
        assert len(identities) == len(original) + len(set(injected) - set(original))
    assert restore(out) == doc
    assert jsonpatch.apply_patch(out, restore_patch(out)) == doc
    # admitting twice is the same as admitting once
    assert apply_admission(out, adm, flavors) == out


# --- end to end through the engine -----------------------------------------------------------------


def test_a_jobset_is_admitted_by_the_engine_and_its_templates_patched() -> None:
    engine = Engine()
    engine.upsert_flavor(A100)
    engine.upsert_cluster_queue(
        ClusterQueueSpec(
            "cq",
            namespace_selector=LabelSelector(),
            resource_groups=[
                ResourceGroup(
                    ["cpu", "memory", "nvidia.com/gpu"],
                    [
                        FlavorQuotas(
                            "a100",
                            [
                                ResourceQuota("cpu", 64_000),
                                ResourceQuota("memory", 512 * GI),
                                ResourceQuota("nvidia.com/gpu", 16),
                            ],
                        )
                    ],
                )
            ],
        )
    )
    engine.upsert_local_queue(LocalQueueSpec("ns", "q", "cq"))
    engine.upsert_namespace("ns", {})
    for n in range(2):
        engine.upsert_node(
            NodeSpec(
                f"node-{n}",
                {"cpu": 32_000, "memory": 256 * GI, "nvidia.com/gpu": 8},
                labels={"gpu": "a100", "pool": "train"},
                taints=[Taint("nvidia.com/gpu", "", "NoSchedule")],
            )
        )
    gpu_pod = pod(
        [c("trainer", {"cpu": "8", "memory": "64Gi"}, {"nvidia.com/gpu": 4})],
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    doc = jobset(rjob("worker", 2, gpu_pod, parallelism=2, completions=2))
    doc["spec"]["suspend"] = True
    engine.submit(jobset_to_workload(doc), now=0.0)
    decisions = engine.schedule(now=1.0)
    admissions = [d for d in decisions if isinstance(d, Admission)]
    assert len(admissions) == 1 and admissions[0].workload == "ns/js"
    patched = jsonpatch.apply_patch(doc, admission_patch(doc, admissions[0], {"a100": A100}))
    assert patched["spec"]["suspend"] is False
    assert _pod(patched, 0)["nodeSelector"] == {"gpu": "a100", "pool": "train"}
    assert jsonpatch.apply_patch(patched, restore_patch(patched)) == doc


# --- the docs say what the code does ---------------------------------------------------------------


def test_docs_example_jobset_maps_as_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = text[text.index("## JobSets and gangs") :]
    example = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    wl = jobset_to_workload(example, workload_priority_classes={"research-high": 10})
    assert (wl.key, wl.queue_name, wl.priority, wl.min_member) == ("team-a/train", "user-queue", 10, 5)
    assert wl.min_resources == {"nvidia.com/gpu": 32, "cpu": 40_000}
    assert wl.runtime_limit == 9000.0
    assert [(ps.name, ps.count, ps.requests) for ps in wl.pod_sets] == [
        ("launcher", 1, {"cpu": 2000, "memory": 4 * GI}),
        ("worker", 8, {"cpu": 8000, "nvidia.com/gpu": 8}),
    ]
    messages = section.split("```\nJobSet '", 1)[1].split("```", 1)[0].strip().splitlines()
    messages = ["JobSet '" + messages[0], *messages[1:]]
    bad = copy.deepcopy(example)
    bad["metadata"]["annotations"]["gangq.io/min-member"] = "12"
    with pytest.raises(SpecError) as info:
        jobset_to_workload(bad, workload_priority_classes={"research-high": 10})
    assert str(info.value) == messages[0]
    bad = copy.deepcopy(example)
    bad["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "nvidia.com/gpu": "eight"
    }
    with pytest.raises(SpecError) as info:
        jobset_to_workload(bad, workload_priority_classes={"research-high": 10})
    assert str(info.value) == messages[1]


def test_kopf_bodies_and_read_only_mappings_are_accepted() -> None:
    from types import MappingProxyType

    import kopf

    doc = pytorch()
    kwargs: dict[str, Any] = {"priority_classes": PCS | {"batch": 1}, "workload_priority_classes": {"research-high": 2}}
    expected = jobset_to_workload(doc, **kwargs)
    for view in (kopf.Body(copy.deepcopy(doc)), MappingProxyType(copy.deepcopy(doc))):
        wl = jobset_to_workload(view, **kwargs)
        assert (wl.key, wl.priority, [p.count for p in wl.pod_sets]) == (
            expected.key,
            expected.priority,
            [p.count for p in expected.pod_sets],
        )
        adm = admission(worker={"nvidia.com/gpu": "a100"})
        assert apply_admission(view, adm, FLAVORS) == apply_admission(doc, adm, FLAVORS)
