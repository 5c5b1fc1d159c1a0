"""The contract every registered kind passes (gangq/integrations/registry.py): the checks a new
kind must pass before the controller can queue it (docs/integrating-a-kind.md). Each kind brings a
sample (tests/integrations/samples.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest

from gangq.api.workload import NotQueuedError
from gangq.core import Admission, FlavorSpec, SpecError, Toleration
from gangq.core.decisions import PodSetAssignment
from gangq.integrations import podsets
from gangq.integrations.interface import ObjectWrite, WorkloadKind
from gangq.integrations.podgroup import GATE, pod_path
from gangq.integrations.registry import BY_KIND, BY_PLURAL, KINDS, pod_gang
from tests.integrations.samples import NAME, NS, QUEUE, SAMPLES, Sample

FLAVOR = FlavorSpec("a100", {"gpu.example.com/model": "a100"},
                    tolerations=[Toleration("gpu", "Exists", "", "NoSchedule")])


@pytest.fixture(autouse=True)
def _references() -> Iterator[None]:
    """Each sample's references (a TrainJob's runtime) known to its kind for the test, and gone
    after it (see Sample.references)."""
    fed = [(kind, resource, obj) for kind in KINDS
           for resource, obj in (_sample(kind).references or list)()]
    for kind, resource, obj in fed:
        kind.reference_event(resource, "ADDED", obj)
    yield
    for kind, resource, obj in fed:
        kind.reference_event(resource, "DELETED", obj)


def _one_object(kind: WorkloadKind) -> bool:
    """Is the kind admitted and evicted by one patch of its own object (every kind without writes
    of its own: a pod group's are its pods', a TrainJob's two patches in order)?"""
    return type(kind).admission_writes is WorkloadKind.admission_writes


def _sample(kind: WorkloadKind) -> Sample:
    sample = SAMPLES.get(kind.kind)
    assert sample is not None, f"{kind.kind}: add its sample to tests/integrations/samples.py"
    return sample


def _admission(kind: WorkloadKind, obj: dict[str, Any]) -> Admission:
    spec = kind.to_workload(obj, {}, {})
    return Admission(spec.key, "cq", tuple(
        PodSetAssignment(ps.name, ps.count, {r: "a100" for r in ps.requests}, dict(ps.requests), {})
        for ps in spec.pod_sets), False, 0.0, {})


def test_every_registered_kind_has_a_sample_and_unique_names() -> None:
    assert set(SAMPLES) == set(BY_KIND), "tests/integrations/samples.py must hold one sample per registered kind"
    assert len(BY_KIND) == len(KINDS) and len(BY_PLURAL) == len(KINDS)
    assert len({k.workload_prefix for k in KINDS}) == len(KINDS)
    assert len({k.owner_label for k in KINDS}) == len(KINDS)
    # the same namespace and name in two kinds are two gangs, but for a kind whose object runs as a
    # JobSet of the same name it controls (a TrainJob): that JobSet's pods are its gang's
    jobset = BY_KIND["JobSet"]
    shared = [k for k in KINDS if jobset.resource in k.child_resources]
    assert all(k.key(NS, NAME) == jobset.key(NS, NAME) for k in shared)
    assert len({k.key(NS, NAME) for k in KINDS if k not in shared}) == len(KINDS) - len(shared)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_identity(kind: WorkloadKind) -> None:
    obj = _sample(kind).obj()
    assert obj["apiVersion"] == kind.api_version and obj["kind"] == kind.kind
    assert kind.key_of(obj) == kind.key(NS, NAME)
    assert kind.path(NS, NAME).endswith(f"/{kind.version}/namespaces/{NS}/{kind.plural}/{NAME}")
    assert kind.workload_name(NAME) == f"{kind.workload_prefix}{NAME}"
    assert len(kind.workload_name("x" * 300)) <= 253
    assert kind.docs, f"{kind.kind}: a one-line description for docs/integrating-a-kind.md"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_the_gang_is_its_pod_sets_in_its_queue(kind: WorkloadKind) -> None:
    sample = _sample(kind)
    obj = sample.obj()
    assert kind.ours(obj)
    spec = kind.to_workload(obj, {}, {})
    assert spec.key == kind.key_of(obj) and spec.queue_name == QUEUE and spec.namespace == NS
    assert {ps.name: ps.count for ps in spec.pod_sets} == sample.pod_sets
    assert kind.pod_set_names(obj) == [ps.name for ps in spec.pod_sets]
    assert all(ps.requests.get("nvidia.com/gpu") == 1 for ps in spec.pod_sets)
    assert kind.suspended(obj) and not kind.started(obj) and kind.terminal(obj) is None
    assert kind.signature(obj) == kind.signature(copy.deepcopy(obj))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_without_a_queue_label_it_is_not_queued_unless_the_namespace_has_a_default(kind: WorkloadKind) -> None:
    obj = _sample(kind).obj()
    del obj["metadata"]["labels"]["gangq.io/queue-name"]
    with pytest.raises(NotQueuedError):
        kind.to_workload(obj, {}, {})
    assert kind.to_workload(obj, {}, {}, default_queue="fallback").queue_name == "fallback"
    obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "kq"  # Kueue's label, as Kueue users write it
    assert kind.to_workload(obj, {}, {}).queue_name == "kq"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_bad_input_is_an_error_naming_the_kind_the_object_and_the_field(kind: WorkloadKind) -> None:
    sample = _sample(kind)
    obj = sample.obj()
    ps = kind.pod_sets(obj)[0]
    if sample.break_cpu is not None:  # its templates are not in the object (see Sample.break_cpu)
        sample.break_cpu(obj, "lots")
    else:
        podsets.get(obj, ps.path)["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    with pytest.raises(SpecError) as info:
        kind.to_workload(obj, {}, {})
    assert (info.value.kind, info.value.name) == (kind.kind, f"{NS}/{NAME}")
    assert info.value.field == f"{ps.field}.spec.containers[0].resources.requests[cpu]", info.value.field
    for resource, reference in (sample.references or list)():  # as they were before break_cpu
        kind.reference_event(resource, "MODIFIED", reference)
    obj = _sample(kind).obj()
    obj["metadata"]["labels"]["gangq.io/priority-class"] = "missing"
    with pytest.raises(SpecError, match="WorkloadPriorityClass 'missing' does not exist"):
        kind.to_workload(obj, {}, {})
    assert kind.to_workload(obj, {}, {"missing": 7}).priority == 7


@pytest.mark.parametrize("kind", [k for k in KINDS if _one_object(k)], ids=lambda k: k.kind)
def test_suspend_admit_and_evict_are_patches_of_the_object(kind: WorkloadKind) -> None:
    obj = _sample(kind).obj()
    before = [copy.deepcopy(podsets.get(obj, ps.path)) for ps in kind.pod_sets(obj)]
    admitted = jsonpatch.apply_patch(obj, kind.admission_ops(obj, _admission(kind, obj), {"a100": FLAVOR}))
    assert not kind.suspended(admitted)
    for ps in kind.pod_sets(admitted):
        spec = podsets.get(admitted, ps.path)["spec"]
        assert spec["nodeSelector"] == {"gpu.example.com/model": "a100"}, ps.name
        assert {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"], ps.name
    assert kind.to_workload(admitted, {}, {}).key == kind.key_of(obj)
    evicted = jsonpatch.apply_patch(admitted, kind.eviction_ops(admitted))
    assert kind.suspended(evicted)
    # admitted again, the flavors never pile up
    again = jsonpatch.apply_patch(evicted, kind.admission_ops(evicted, _admission(kind, evicted), {"a100": FLAVOR}))
    for ps in kind.pod_sets(again):
        assert podsets.get(again, ps.path)["spec"]["tolerations"].count(
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}) == 1
    restored = jsonpatch.apply_patch(again, kind.eviction_ops(again))
    after = [podsets.get(restored, ps.path) for ps in kind.pod_sets(restored)]
    # the pod templates as they were (a kind whose started object refuses template changes keeps
    # them recorded instead and starts the next admission from the record)
    assert after == before or podsets.recorded_originals(kind.kind, restored) is not None
    suspended = jsonpatch.apply_patch(restored, kind.unsuspend_ops(restored))
    assert not kind.suspended(suspended)
    assert kind.suspended(jsonpatch.apply_patch(suspended, kind.suspend_ops(suspended)))


def _apply_writes(kind: WorkloadKind, sample: Sample, obj: dict[str, Any],
                  writes: list[ObjectWrite]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The object and its pods once ``writes`` are applied, each checked to target the object
    itself or one of its own pods (by path, with its uid), never anything else."""
    own = kind.path(NS, NAME)
    pods = {pod_path(NS, str(p["metadata"]["name"])): p for p in (sample.members(obj) if sample.members else [])}
    for w in writes:
        if w.path == own:
            assert w.patch is not None, "an admission or eviction never deletes the object"
            if w.subresource != "status":
                obj = jsonpatch.apply_patch(obj, w.patch)
            continue
        assert w.path in pods, f"{kind.kind}: a write of {w.path}, neither the object nor one of its pods"
        pod = pods[w.path]
        owner = kind.pod_owner(pod)
        assert owner is not None and owner[0] == kind.key_of(obj), (w.path, owner)
        assert w.uid == pod["metadata"]["uid"], "a pod's write is for that pod, not one recreated under its name"
        if w.patch is None:
            del pods[w.path]
            continue
        patched = jsonpatch.apply_patch(pod, w.patch)
        assert kind.pod_owner(patched) == owner, "an admission does not move a pod to another pod set"
        pods[w.path] = patched
    return obj, list(pods.values())


@pytest.mark.parametrize("kind", [k for k in KINDS if not _one_object(k)], ids=lambda k: k.kind)
def test_its_own_writes_admit_and_evict_only_the_object_and_its_own_pods(kind: WorkloadKind) -> None:
    """A kind with writes of its own (a pod group's pods, a TrainJob's two patches): each targets
    the object or its own pods; a pod's admission write adds the flavor's node labels and
    tolerations and removes the scheduling gate; admitted, it runs; evicted, it is suspended."""
    sample = _sample(kind)
    obj = sample.obj()
    record = json.dumps({"clusterQueue": "cq"})
    writes = kind.admission_writes(obj, _admission(kind, obj), {"a100": FLAVOR}, record)
    assert writes, f"{kind.kind}: admission_writes returned none"
    admitted, pods = _apply_writes(kind, sample, obj, writes)
    for pod in pods:
        spec = pod["spec"]
        assert GATE not in [g.get("name") for g in spec.get("schedulingGates") or []], pod["metadata"]["name"]
        assert spec["nodeSelector"] == {"gpu.example.com/model": "a100"}, pod["metadata"]["name"]
        assert {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    if sample.regroup is not None:
        admitted = sample.regroup(admitted, pods)
    assert not kind.suspended(admitted)
    assert kind.to_workload(admitted, {}, {}).key == kind.key_of(obj)
    assert all(w.path == kind.path(NS, NAME) and w.subresource == "status" for w in kind.status_writes(admitted))
    evictions = kind.eviction_writes(admitted)
    if evictions is None:
        evicted = jsonpatch.apply_patch(admitted, kind.eviction_ops(admitted))
    else:
        evicted, pods = _apply_writes(kind, sample, admitted, evictions)
        if sample.regroup is not None:
            evicted = sample.regroup(evicted, pods)
    assert kind.suspended(evicted)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_its_pods_belong_to_its_gang_and_no_other_kind_claims_them(kind: WorkloadKind) -> None:
    sample = _sample(kind)
    for pod_set in sample.pod_sets:
        pod = sample.pod(pod_set)
        assert kind.pod_owner(pod) == (kind.key(NS, NAME), pod_set), pod_set
        assert pod_gang(pod) == (kind.key(NS, NAME), pod_set), pod_set
        labels = pod["metadata"]["labels"]
        selector = dict(part.split("=", 1) for part in kind.pod_selector(NAME).split(","))
        assert all(labels.get(k) == v for k, v in selector.items()), (selector, labels)
