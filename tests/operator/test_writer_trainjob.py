"""The writer with a kind admitted by several patches of its own object (a TrainJob,
gangq/operator/writer.py): the patches go in order, a conflict re-reads the object and computes
them again, and the restore once the gang has stopped is tried again while the Trainer's webhook
refuses it. The API is an object in memory behind the Trainer v2.0.0 webhook's rule on
``spec.podSpecOverrides``: changed only while the TrainJob is suspended and its JobSet has no
active Job (a refusal is a 403, as controller-runtime answers a denied validation)."""

from __future__ import annotations

import asyncio
import copy
import json
from types import SimpleNamespace
from typing import Any, cast

import jsonpatch
import pytest

from gangq.core import Admission, FlavorSpec, Toleration
from gangq.core.decisions import PodSetAssignment
from gangq.integrations.trainjob import CLUSTER_TRAINING_RUNTIMES, OVERRIDES_ANNOTATION, TrainJobKind
from gangq.operator import writer as w
from gangq.operator.entry import Entry
from gangq.operator.kube import ApiError
from gangq.operator.translate import ADMISSION_ANNOTATION

FLAVOR = FlavorSpec("a100", {"gpu.example.com/model": "a100"},
                    tolerations=[Toleration("gpu", "Exists", "", "NoSchedule")])
RUNTIME = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
           "metadata": {"name": "torch", "uid": "rt", "generation": 1},
           "spec": {"mlPolicy": {"numNodes": 2}, "template": {"spec": {"replicatedJobs": [
               {"name": "node", "template": {
                   "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                   "spec": {"template": {"spec": {"containers": [
                       {"name": "node", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}}}]}}}}
USER_OVERRIDES = [{"targetJobs": [{"name": "node"}], "serviceAccountName": "trainer"}]


class TrainerApi:
    """One TrainJob behind the Trainer's webhook rule (see the module docstring)."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.rv = 1
        self.jobset_active = False
        self.conflicts = 0  # the next patches answered 409 (another writer got there first)
        self.patches: list[list[dict[str, Any]]] = []
        self.refused = 0

    async def patch(self, path: str, ops: list[dict[str, Any]], content_type: str = "",
                    *, want_body: bool = True) -> dict[str, Any]:
        await asyncio.sleep(0)
        self.patches.append(ops)
        if self.conflicts:
            self.conflicts -= 1
            raise ApiError(409, "Conflict", "the object has been modified")
        try:
            new = jsonpatch.apply_patch(self.obj, ops)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
            raise ApiError(422, "Invalid", str(err)) from err
        changed = new["spec"].get("podSpecOverrides") != self.obj["spec"].get("podSpecOverrides")
        if changed and (not new["spec"].get("suspend") or self.jobset_active):
            self.refused += 1
            raise ApiError(403, "Forbidden", "spec.podSpecOverrides: Forbidden")
        self.rv += 1
        new["metadata"]["resourceVersion"] = str(self.rv)
        self.obj = new
        return copy.deepcopy(new)

    async def get(self, path: str, **_: Any) -> dict[str, Any]:
        return copy.deepcopy(self.obj)


def trainjob() -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "llm", "namespace": "team", "uid": "uid-llm", "resourceVersion": "1",
                         "labels": {"gangq.io/queue-name": "q"}},
            "spec": {"suspend": True, "runtimeRef": {"name": "torch"},
                     "podSpecOverrides": copy.deepcopy(USER_OVERRIDES)}}


def setup(obj: dict[str, Any]) -> tuple[TrainJobKind, TrainerApi, list[tuple[str, dict[str, Any]]], w.Writer, Entry]:
    kind = TrainJobKind()
    kind.reference_event(CLUSTER_TRAINING_RUNTIMES, "ADDED", RUNTIME)
    api = TrainerApi(obj)
    reports: list[tuple[str, dict[str, Any]]] = []
    state = SimpleNamespace(metrics=None, client=api, engine=SimpleNamespace(flavors={"a100": FLAVOR}),
                            config=SimpleNamespace(events=SimpleNamespace(admission=False, eviction=False)))
    writer = w.Writer(cast(Any, state), lambda outcome, body: reports.append((outcome, body)))
    return kind, api, reports, writer, Entry(kind.key_of(obj), obj, kind)


def admission(kind: TrainJobKind, obj: dict[str, Any]) -> Admission:
    spec = kind.to_workload(obj, {}, {})
    return Admission(spec.key, "cq", tuple(
        PodSetAssignment(ps.name, ps.count, {r: "a100" for r in ps.requests}, dict(ps.requests), {})
        for ps in spec.pod_sets), False, 0.0, {})


def admitted_override(obj: dict[str, Any]) -> dict[str, Any]:
    (mine,) = [o for o in obj["spec"]["podSpecOverrides"] if o["targetJobs"] == [{"name": "node"}]]
    return cast(dict[str, Any], mine)


@pytest.mark.parametrize("conflicts", [0, 1])
def test_a_trainjob_is_admitted_by_its_two_patches_in_order_and_again_after_a_conflict(conflicts: int) -> None:
    async def scenario() -> tuple[TrainerApi, list[tuple[str, dict[str, Any]]]]:
        kind, api, reports, writer, entry = setup(trainjob())
        api.conflicts = conflicts
        writer.write_admission(entry, admission(kind, entry.obj))
        await writer.drain(5.0)
        return api, reports

    api, reports = asyncio.run(scenario())
    assert api.refused == 0  # the flavors went in while suspended, the unsuspension after them
    first, second = api.patches[-2:]
    assert any(o["path"] == "/spec/podSpecOverrides" for o in first)
    assert not any(o["path"] == "/spec/suspend" and o["op"] == "add" for o in first)
    assert {"op": "add", "path": "/spec/suspend", "value": False} in second
    assert len(api.patches) == 2 + conflicts
    obj = api.obj
    assert obj["spec"]["suspend"] is False
    mine = admitted_override(obj)
    assert mine["nodeSelector"] == {"gpu.example.com/model": "a100"}
    assert {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"} in mine["tolerations"]
    assert mine["serviceAccountName"] == "trainer"  # the user's override keeps what it said
    assert json.loads(obj["metadata"]["annotations"][OVERRIDES_ANNOTATION]) == USER_OVERRIDES
    assert json.loads(obj["metadata"]["annotations"][ADMISSION_ANNOTATION])["clusterQueue"] == "cq"
    assert reports == [(w.WRITTEN, {"key": "team/llm", "object": obj})]


def test_an_admission_refused_between_its_patches_fails_and_leaves_the_trainjob_suspended() -> None:
    async def scenario() -> tuple[TrainerApi, list[tuple[str, dict[str, Any]]]]:
        kind, api, reports, writer, entry = setup(trainjob())
        api.jobset_active = True  # its JobSet still counts an active Job: the first patch is refused
        writer.write_admission(entry, admission(kind, entry.obj))
        await writer.drain(5.0)
        return api, reports

    api, reports = asyncio.run(scenario())
    assert api.refused == 1 and api.obj["spec"]["suspend"] is True
    assert [outcome for outcome, _ in reports] == [w.ADMISSION_FAILED]
    assert reports[0][1]["object"]["spec"]["suspend"] is True


def test_the_restore_once_stopped_is_tried_again_while_the_webhook_refuses_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(w, "STOPPED_RETRY_DELAYS", (0.05, 0.05, 0.05))

    async def scenario() -> tuple[TrainerApi, list[tuple[str, dict[str, Any]]]]:
        kind, api, reports, writer, entry = setup(trainjob())
        writer.write_admission(entry, admission(kind, entry.obj))
        await writer.drain(5.0)
        evicted = jsonpatch.apply_patch(api.obj, kind.eviction_ops(api.obj))
        api.obj = evicted
        entry.obj = copy.deepcopy(evicted)
        api.jobset_active = True  # the JobSet controller has not counted its suspended Jobs yet
        writer.write_stopped(entry)
        await asyncio.sleep(0.12)  # two refusals
        api.jobset_active = False
        await asyncio.sleep(0.3)
        await writer.drain(5.0)
        patched = len(api.patches)
        writer.write_stopped(entry)  # nothing left to restore: nothing written
        await writer.drain(5.0)
        assert len(api.patches) == patched
        return api, reports

    api, reports = asyncio.run(scenario())
    assert len(reports) == 1  # the admission's: the restore's outcome comes through the watch
    assert api.refused >= 2
    assert api.obj["spec"]["suspend"] is True
    assert api.obj["spec"]["podSpecOverrides"] == USER_OVERRIDES
    assert OVERRIDES_ANNOTATION not in api.obj["metadata"].get("annotations", {})


def test_the_restore_is_dropped_once_the_trainjob_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(w, "STOPPED_RETRY_DELAYS", (0.05,) * 5)

    async def scenario() -> TrainerApi:
        kind, api, _, writer, entry = setup(trainjob())
        writer.write_admission(entry, admission(kind, entry.obj))
        await writer.drain(5.0)
        api.obj = jsonpatch.apply_patch(api.obj, kind.eviction_ops(api.obj))
        entry.obj = copy.deepcopy(api.obj)
        api.jobset_active = True
        writer.write_stopped(entry)
        await asyncio.sleep(0.02)
        api.jobset_active = False
        readmitted = copy.deepcopy(api.obj)  # admitted again meanwhile (unsuspended, flavors recorded)
        readmitted["spec"]["suspend"] = False
        api.obj = readmitted
        await asyncio.sleep(0.4)
        await writer.drain(5.0)
        return api

    api = asyncio.run(scenario())
    assert api.obj["spec"]["suspend"] is False
    assert admitted_override(api.obj)["nodeSelector"] == {"gpu.example.com/model": "a100"}
    assert OVERRIDES_ANNOTATION in api.obj["metadata"]["annotations"]
