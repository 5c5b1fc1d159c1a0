"""Pod groups as gangs (gangq.integrations.podgroup): a PodGroup and its pods, a Kueue plain-pod
group, a single pod — assembled from watch events, mapped to the gang, admitted by per-pod patches,
evicted by deleting pods, and the PodGroup's status; and the engine's per-gang pods-ready timeout
that a PodGroup's scheduleTimeoutSeconds becomes."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import pytest

from gangq.core import Engine, EngineConfig, PodSetSpec, WorkloadSpec
from gangq.core.decisions import Admission, Eviction, PodSetAssignment
from gangq.core.errors import SpecError
from gangq.core.model import FlavorSpec
from gangq.core.selectors import Toleration
from gangq.integrations import podgroup as pg
from gangq.integrations.podgroup import PODGROUP, PodGroups
from tests.engine.builders import GPU, add_nodes, add_queue, quota

FLAVORS = {"a100": FlavorSpec("a100", {"pool": "a100"}, [])}


def podgroup(name: str = "pg", min_member: int = 3, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "10",
                         "creationTimestamp": "2024-01-01T00:00:00Z", "labels": {"gangq.io/queue-name": "q"}},
            "spec": {"minMember": min_member, **spec}}


def pod(name: str, labels: dict[str, str], *, gpu: int = 8, rv: int = 20, gate: bool = True,
        annotations: dict[str, str] | None = None, phase: str = "Pending", node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox",
                                            "resources": {"requests": {"cpu": "1", GPU: str(gpu)}}}]}
    if gate:
        spec["schedulingGates"] = [{"name": pg.GATE}]
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": str(rv),
                         "creationTimestamp": f"2024-01-01T00:00:{rv % 60:02d}Z", "labels": labels,
                         "annotations": annotations or {}},
            "spec": spec, "status": {"phase": phase}}


def member(name: str, group: str = "pg", **kw: Any) -> dict[str, Any]:
    return pod(name, {pg.POD_GROUP_LABEL: group}, **kw)


def assembled_podgroup(n: int = 3, min_member: int = 3, **spec: Any) -> dict[str, Any]:
    groups = PodGroups()
    groups.podgroup_event("ADDED", podgroup(min_member=min_member, **spec))
    out = None
    for i in range(n):
        out = groups.pod_event("ADDED", member(f"w{i}", rv=20 + i))
    assert out is not None
    return out[1]


def admission_of(obj: dict[str, Any]) -> Admission:
    sets = tuple(PodSetAssignment(ps.name, ps.count, {GPU: "a100", "cpu": "a100"}, {}, {})
                 for ps in PODGROUP.pod_sets(obj))
    return Admission(PODGROUP.key_of(obj), "cq", sets, False, 0.0, {})


# --- assembly ----------------------------------------------------------------------------------


def test_a_podgroup_is_a_gang_once_min_member_pods_exist() -> None:
    groups = PodGroups()
    assert groups.podgroup_event("ADDED", podgroup()) is None
    assert groups.pod_event("ADDED", member("w0", rv=21)) is None
    assert groups.pod_event("ADDED", member("w1", rv=22)) is None
    event = groups.pod_event("ADDED", member("w2", rv=23))
    assert event is not None and event[0] == "ADDED"
    obj = event[1]
    assert PODGROUP.key_of(obj) == "ns/podgroups:pg"
    assert obj["metadata"]["resourceVersion"] == "23"
    assert [p["metadata"]["name"] for p in pg.pods(obj)] == ["w0", "w1", "w2"]
    later = groups.pod_event("MODIFIED", member("w2", rv=30, phase="Running"))
    assert later is not None and later[0] == "MODIFIED"
    deleted = groups.podgroup_event("DELETED", podgroup())
    assert deleted is not None and deleted[0] == "DELETED"


def test_pods_of_no_group_and_of_another_source_are_apart() -> None:
    groups = PodGroups()
    assert groups.pod_event("ADDED", pod("plain", {})) is None
    assert pg.membership(pod("x", {pg.KUEUE_GROUP_LABEL: "pg"})) == ("Group", "pg")
    assert pg.membership(member("y")) == ("PodGroup", "pg")
    assert pg.membership(pod("z", {"kueue.x-k8s.io/queue-name": "q"})) == ("Pod", "z")
    kueue_key = PODGROUP.pod_owner(pod("x", {pg.KUEUE_GROUP_LABEL: "pg"}))
    assert kueue_key is not None and kueue_key[0] == "ns/pod-groups:pg"
    owner = PODGROUP.pod_owner(member("y"))
    assert owner is not None and owner[0] == "ns/podgroups:pg"


def test_a_kueue_group_waits_for_its_total_count_and_needs_every_pod() -> None:
    groups = PodGroups()
    labels = {pg.KUEUE_GROUP_LABEL: "grp", "kueue.x-k8s.io/queue-name": "q"}
    ann = {pg.KUEUE_TOTAL_ANNOTATION: "2"}
    assert groups.pod_event("ADDED", pod("a", labels, annotations=ann, rv=5)) is None
    event = groups.pod_event("ADDED", pod("b", labels, annotations=ann, rv=6))
    assert event is not None
    spec = PODGROUP.to_workload(event[1], {}, {})
    assert spec.key == "ns/pod-groups:grp" and spec.queue_name == "q"
    assert spec.total_pods == 2 and spec.min_member is None
    assert PODGROUP.workload_name_of(event[1]) == "pod-group-grp"
    assert PODGROUP.owner_reference(event[1])["name"] == "a"
    gone = groups.pod_event("DELETED", pod("a", labels, annotations=ann, rv=7))
    assert gone is not None and gone[0] == "MODIFIED"
    with pytest.raises(SpecError, match=r"pod-group-total-count.*is 2 but the group has 1 pods"):
        PODGROUP.to_workload(gone[1], {}, {})
    last = groups.pod_event("DELETED", pod("b", labels, annotations=ann, rv=8))
    assert last is not None and last[0] == "DELETED" and len(groups) == 0


def test_a_single_labelled_pod_is_a_gang_of_one() -> None:
    groups = PodGroups()
    event = groups.pod_event("ADDED", pod("solo", {"gangq.io/queue-name": "q"}, gpu=2))
    assert event is not None
    obj = event[1]
    spec = PODGROUP.to_workload(obj, {}, {})
    assert spec.key == "ns/pods:solo" and [(ps.name, ps.count) for ps in spec.pod_sets] == [("main", 1)]
    assert spec.pod_sets[0].requests[GPU] == 2
    assert PODGROUP.owner_reference(obj) == {"apiVersion": "v1", "kind": "Pod", "name": "solo", "uid": "uid-solo",
                                             "controller": True, "blockOwnerDeletion": True}
    deleted = groups.pod_event("DELETED", pod("solo", {"gangq.io/queue-name": "q"}))
    assert deleted is not None and deleted[0] == "DELETED"


# --- the gang ----------------------------------------------------------------------------------


def test_podgroup_fields_become_the_gang() -> None:
    obj = assembled_podgroup(4, min_member=3, minResources={GPU: "24", "cpu": "3"}, scheduleTimeoutSeconds=90)
    spec = PODGROUP.to_workload(obj, {}, {})
    assert spec.queue_name == "q" and spec.total_pods == 4 and spec.min_member == 3
    assert spec.min_resources == {GPU: 24, "cpu": 3000}
    assert spec.pods_ready_timeout == 90.0
    assert len(spec.pod_sets) == 1 and spec.pod_sets[0].requests == {"cpu": 1000, GPU: 8}


def test_pods_of_different_shapes_are_different_pod_sets() -> None:
    groups = PodGroups()
    groups.podgroup_event("ADDED", podgroup(min_member=2))
    groups.pod_event("ADDED", member("driver", gpu=0, rv=21))
    event = groups.pod_event("ADDED", member("worker", gpu=8, rv=22))
    assert event is not None
    spec = PODGROUP.to_workload(event[1], {}, {})
    assert sorted(ps.requests.get(GPU, 0) for ps in spec.pod_sets) == [0, 8]
    assert {ps.name for ps in spec.pod_sets} == {pg.role(member("driver", gpu=0)), pg.role(member("worker"))}


def test_bad_fields_are_named() -> None:
    with pytest.raises(SpecError, match=r"PodGroup 'ns/pg'.*spec.minMember.*at least 1"):
        PODGROUP.to_workload(assembled_podgroup(3, min_member=3) | {"spec": {"minMember": "3"}}, {}, {})
    with pytest.raises(SpecError, match=r"spec.scheduleTimeoutSeconds"):
        PODGROUP.to_workload(assembled_podgroup(3, scheduleTimeoutSeconds=0), {}, {})
    with pytest.raises(SpecError, match=r"spec.minResources\[nvidia.com/gpu\].*not a valid quantity"):
        PODGROUP.to_workload(assembled_podgroup(3, minResources={GPU: "lots"}), {}, {})
    obj = assembled_podgroup(3)
    pg.pods(obj)[1]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "x"
    with pytest.raises(SpecError, match=r"pods\[w\d\]\.spec\.containers\[0\]"):
        PODGROUP.to_workload(obj, {}, {})


def test_fewer_pods_than_min_member_is_said() -> None:
    obj = assembled_podgroup(3)
    for p in pg.pods(obj)[:2]:
        p["status"]["phase"] = "Failed"
    with pytest.raises(SpecError, match=r"spec.minMember.*is 3 but the group has 1 pods"):
        PODGROUP.to_workload(obj, {}, {})


def test_a_podgroup_controlled_by_a_queued_kind_is_not_its_own_gang() -> None:
    import gangq.integrations.registry  # noqa: F401  (sets which kinds' PodGroups are theirs)

    assert "PyTorchJob" in PODGROUP.controlled_by
    obj = assembled_podgroup(3)
    assert PODGROUP.ours(obj)
    obj["metadata"]["ownerReferences"] = [{"kind": "PyTorchJob", "name": "t", "controller": True}]
    assert not PODGROUP.ours(obj)


# --- suspension, admission, eviction -----------------------------------------------------------


def test_suspended_while_every_live_pod_is_gated() -> None:
    obj = assembled_podgroup(3)
    assert PODGROUP.suspended(obj) and not PODGROUP.started(obj)
    pg.pods(obj)[0]["spec"].pop("schedulingGates")
    assert not PODGROUP.suspended(obj)
    pg.pods(obj)[0]["status"]["phase"] = "Succeeded"
    assert PODGROUP.suspended(obj) and PODGROUP.started(obj)


def test_admission_patches_each_pod_and_removes_its_gate() -> None:
    obj = assembled_podgroup(3)
    pg.pods(obj)[0]["spec"]["tolerations"] = [{"key": "k", "operator": "Exists"}]
    flavors = {"a100": FlavorSpec("a100", {"pool": "a100"}, [])}
    flavors["a100"].tolerations = [Toleration("gpu", "Equal", "yes", "NoSchedule")]
    writes = PODGROUP.admission_writes(obj, admission_of(obj), flavors, '{"clusterQueue":"cq"}')
    assert [w.path for w in writes] == [f"/api/v1/namespaces/ns/pods/w{i}" for i in range(3)]
    patched = [jsonpatch.apply_patch(p, w.patch) for p, w in zip(pg.pods(obj), writes, strict=True)]
    for p in patched:
        assert "schedulingGates" not in p["spec"] or p["spec"]["schedulingGates"] == []
        assert p["spec"]["nodeSelector"] == {"pool": "a100"}
        assert {"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"} in p["spec"]["tolerations"]
        assert p["metadata"]["annotations"][pg.ADMISSION_ANNOTATION] == '{"clusterQueue":"cq"}'
    assert patched[0]["spec"]["tolerations"][0] == {"key": "k", "operator": "Exists"}
    original = json.loads(patched[0]["metadata"]["annotations"]["gangq.io/original-pod-scheduling"])
    assert original == {"nodeSelector": None, "tolerations": [{"key": "k", "operator": "Exists"}]}
    # the pods' roles do not change with the flavors injected: the gang stays the same
    assert {pg.role(p) for p in patched} == {ps.name for ps in PODGROUP.pod_sets(obj)}
    # a pod whose gate is gone meanwhile fails its patch (the test of the gate)
    gone = dict(pg.pods(obj)[1], spec={k: v for k, v in pg.pods(obj)[1]["spec"].items() if k != "schedulingGates"})
    with pytest.raises(jsonpatch.JsonPatchException):
        jsonpatch.apply_patch(gone, writes[1].patch)


def test_assembled_after_admission_carries_the_record() -> None:
    groups = PodGroups()
    groups.podgroup_event("ADDED", podgroup(min_member=1))
    p = member("w0", gate=False, annotations={pg.ADMISSION_ANNOTATION: '{"clusterQueue":"cq"}'})
    event = groups.pod_event("ADDED", p)
    assert event is not None
    assert event[1]["metadata"]["annotations"][pg.ADMISSION_ANNOTATION] == '{"clusterQueue":"cq"}'


def test_eviction_deletes_the_ungated_live_pods() -> None:
    obj = assembled_podgroup(4)
    pods = pg.pods(obj)
    for p in pods[:3]:
        p["spec"].pop("schedulingGates")
    pods[2]["status"]["phase"] = "Succeeded"
    writes = PODGROUP.eviction_writes(obj)
    assert [(w.path.rsplit("/", 1)[1], w.patch, w.uid) for w in writes] == [("w0", None, "uid-w0"),
                                                                            ("w1", None, "uid-w1")]


def test_terminal_once_every_pod_has_finished() -> None:
    obj = assembled_podgroup(3, min_member=2)
    pods = pg.pods(obj)
    assert PODGROUP.terminal(obj) is None
    for p in pods:
        p["status"]["phase"] = "Succeeded"
    pods[0]["status"]["phase"] = "Failed"
    assert PODGROUP.terminal(obj) == "Completed"
    pods[1]["status"]["phase"] = "Failed"
    assert PODGROUP.terminal(obj) == "Failed"


# --- the PodGroup's status ---------------------------------------------------------------------


@pytest.mark.parametrize(("pods", "phase", "counts"), [
    ([("g", "Pending", None)] * 2, "Pending", (0, 0, 0, 0)),
    ([("g", "Pending", None)] * 3, "PreScheduling", (0, 0, 0, 0)),
    ([("u", "Pending", "n1"), ("u", "Pending", None), ("u", "Pending", None)], "Scheduling", (1, 0, 0, 0)),
    ([("u", "Pending", "n1")] * 3, "Scheduled", (3, 0, 0, 0)),
    ([("u", "Running", "n1")] * 3, "Running", (3, 3, 0, 0)),
    ([("u", "Running", "n1"), ("u", "Running", "n1"), ("u", "Failed", "n1")], "Failed", (2, 2, 0, 1)),
    ([("u", "Succeeded", "n1")] * 3, "Finished", (3, 0, 3, 0)),
])
def test_podgroup_status_as_coscheduling_keeps_it(pods: list[tuple[str, str, str | None]], phase: str,
                                                   counts: tuple[int, int, int, int]) -> None:
    obj = pg.assemble("PodGroup", "ns", "pg", podgroup(), [
        member(f"w{i}", gate=g == "g", phase=ph, node=node, rv=20 + i) for i, (g, ph, node) in enumerate(pods)], 30)
    status = pg.podgroup_status(obj)
    assert status["phase"] == phase
    assert (status["scheduled"], status["running"], status["succeeded"], status["failed"]) == counts
    writes = PODGROUP.status_writes(obj)
    assert len(writes) == 1 and writes[0].subresource == "status"
    assert writes[0].path == "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/pg"
    assert jsonpatch.apply_patch(obj, writes[0].patch)["status"]["phase"] == phase
    obj["status"] = status
    assert PODGROUP.status_writes(obj) == []


def test_no_status_writes_for_groups_without_a_podgroup() -> None:
    obj = pg.assemble("Group", "ns", "g", None, [pod("a", {pg.KUEUE_GROUP_LABEL: "g"})], 3)
    assert PODGROUP.status_writes(obj) == []


# --- the engine's per-gang pods-ready timeout --------------------------------------------------


def _timed_engine(timeout: float | None) -> Engine:
    e = Engine(EngineConfig(pods_ready_timeout=timeout, preemption_delay=0))
    e.upsert_namespace("ns", {})
    add_nodes(e, "a100", 1)
    add_queue(e, "q", [quota("a100", 64, 8)])
    return e


@pytest.mark.parametrize("engine_timeout", [None, 600.0])
def test_a_gang_with_its_own_timeout_is_evicted_at_it(engine_timeout: float | None) -> None:
    e = _timed_engine(engine_timeout)
    e.submit(WorkloadSpec("ns/g", "ns", "q", [PodSetSpec("w", 1, {"cpu": 1000, GPU: 8})],
                          pods_ready_timeout=30.0), 0)
    assert [d.workload for d in e.schedule(0) if isinstance(d, Admission)] == ["ns/g"]
    assert e.next_wakeup() == 30
    evictions = [d for d in e.schedule(30) if isinstance(d, Eviction)]
    assert [(d.workload, d.reason) for d in evictions] == [("ns/g", "PodsReadyTimeout")]
    assert "30s after admission" in evictions[0].message


def test_a_gang_without_its_own_timeout_keeps_the_engines() -> None:
    e = _timed_engine(None)
    e.submit(WorkloadSpec("ns/g", "ns", "q", [PodSetSpec("w", 1, {"cpu": 1000, GPU: 8})]), 0)
    assert [d.workload for d in e.schedule(0) if isinstance(d, Admission)] == ["ns/g"]
    assert e.next_wakeup() is None
    with pytest.raises(SpecError, match="podsReadyTimeout"):
        WorkloadSpec("ns/h", "ns", "q", [PodSetSpec("w", 1, {})], pods_ready_timeout=0).validate()
