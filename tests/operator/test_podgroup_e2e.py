"""Pod groups of plain pods as gangs, on both control planes, with the webhook as ``gangq run``'s
quick start registers it (gangq/integrations/podgroup.py):

- two coscheduling PodGroups of ``minMember: 3``, each of three pods asking 8 GPUs, in a 64-GPU
  ClusterQueue on 32 GPUs of nodes: the webhook gates every pod at creation, gangq admits one
  group at a time (both fit the quota, not the nodes), so never more than 3 pods are ungated and
  unfinished at once; all six succeed, and each PodGroup's status ends ``Finished``;
- a PodGroup whose pods cannot run once admitted (a second scheduling gate, not gangq's) is
  evicted at its ``scheduleTimeoutSeconds``: its pods are deleted and its quota comes back;
- a Kueue plain-pod group (``kueue.x-k8s.io/pod-group-name``, total count 2) and a single
  labelled pod run and succeed;
- a PodGroup without a queue label (none in its namespace by default) is not gangq's: the webhook
  gated its pods before it could know, so gangq takes its gate off again and they run, with no
  Workload;
- a PodGroup, a Kueue group and a single pod admitted before a controller restart come back
  admitted from the admission recorded on their pods: none is deleted, and their quota stays
  charged (a pod that does not fit beside them stays gated until they finish).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gangq.integrations import podgroup as pg
from gangq.operator.config import OperatorConfig
from tests.operator.helpers import (
    RUN_SECONDS,
    Cluster,
    apply,
    cluster_queue,
    flavor,
    install,
    local_queue,
    start_operator,
    wait_for,
)
from tests.operator.test_unsuspended_e2e import enable_webhook, unregister
from tests.operator.test_webhook_e2e import api, wait_until_called

GPU = "nvidia.com/gpu"
NODES = "4x{cpu:16,memory:64Gi,nvidia.com/gpu:8}"


def podgroup(name: str, min_member: int = 3, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
            "spec": {"minMember": min_member, **spec}}


def pod(name: str, labels: dict[str, str], *, gpus: int = 8, run_seconds: float = 3.0,
        annotations: dict[str, str] | None = None, gates: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
        "name": "train", "image": "trainer",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels,
                         "annotations": {RUN_SECONDS: str(run_seconds), **(annotations or {})}},
            "spec": spec}


def setup(cluster_factory: Callable[..., Cluster], tmp_path: Path, gpus: int) -> tuple[Cluster, Any, Any]:
    sb, op, store, _ = setup_with_config(cluster_factory, tmp_path, gpus)
    return sb, op, store


def setup_with_config(cluster_factory: Callable[..., Cluster], tmp_path: Path,
                      gpus: int) -> tuple[Cluster, Any, Any, OperatorConfig]:
    sb = cluster_factory(nodes=NODES)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 64, "memory": "256Gi", GPU: gpus}),
               local_queue("q", "cq")])
    config = enable_webhook(sb, tmp_path)
    op = start_operator(sb, config, jobset_controller="embedded")
    store = api(sb)
    wait_until_called(store)
    return sb, op, store, config


def group_pods(store: Any, label: str, names: set[str]) -> list[dict[str, Any]]:
    return [p for p in store.list("", "pods", "default")["items"]
            if (p["metadata"].get("labels") or {}).get(label) in names]


def test_two_podgroups_in_a_queue_larger_than_the_nodes_run_one_at_a_time(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    sb, op, store = setup(cluster_factory, tmp_path, 64)
    try:
        groups = {"pg-a", "pg-b"}
        for g in sorted(groups):
            store.create(pg.GROUP, pg.PLURAL, podgroup(g), namespace="default")
            for i in range(3):
                created = store.create("", "pods", pod(f"{g}-{i}", {pg.POD_GROUP_LABEL: g}), namespace="default")
                assert pg.gated(created), created["spec"]
        most, succeeded = 0, set()
        deadline = time.monotonic() + 150
        while len(succeeded) < 6:
            assert time.monotonic() < deadline, f"not all succeeded: {sorted(succeeded)}"
            pods = group_pods(store, pg.POD_GROUP_LABEL, groups)
            running = [p for p in pods if not pg.gated(p) and not pg.terminal(p)]
            most = max(most, len(running))
            assert most <= 3, [p["metadata"]["name"] for p in running]
            succeeded |= {p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Succeeded"}
            assert not [p for p in pods if p["status"].get("phase") == "Failed"]
            time.sleep(0.05)
        assert most == 3
        for g in groups:
            wait_for(lambda g=g: (store.get(pg.GROUP, pg.PLURAL, "default", g).get("status") or {}).get("phase")
                     == "Finished", 20, f"PodGroup {g} Finished")
            status = store.get(pg.GROUP, pg.PLURAL, "default", g)["status"]
            assert (status["succeeded"], status["failed"], status["running"]) == (3, 0, 0), status
            placed = group_pods(store, pg.POD_GROUP_LABEL, {g})
            assert all(p["metadata"]["annotations"].get(pg.ADMISSION_ANNOTATION) for p in placed)
    finally:
        op.stop()
        unregister(sb)


def test_a_podgroup_not_running_within_its_schedule_timeout_is_evicted(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    sb, op, store = setup(cluster_factory, tmp_path, 64)
    try:
        store.create(pg.GROUP, pg.PLURAL, podgroup("stuck", 2, scheduleTimeoutSeconds=3), namespace="default")
        for i in range(2):  # a gate of someone else's keeps them from scheduling once gangq's is gone
            store.create("", "pods", pod(f"stuck-{i}", {pg.POD_GROUP_LABEL: "stuck"}, gates=["example.com/hold"]),
                         namespace="default")

        def ungated() -> bool:
            pods = group_pods(store, pg.POD_GROUP_LABEL, {"stuck"})
            return len(pods) == 2 and not any(pg.gated(p) for p in pods)

        wait_for(ungated, 30, "the group admitted (gangq's gates removed)")
        wait_for(lambda: not group_pods(store, pg.POD_GROUP_LABEL, {"stuck"}), 30,
                 "the timed-out group's pods deleted")

        def evicted() -> bool:
            wls = store.list("gangq.io", "workloads", "default")["items"]
            wl = next((w for w in wls if w["metadata"]["name"] == "podgroup-stuck"), None)
            conds = {c["type"]: c for c in ((wl or {}).get("status") or {}).get("conditions") or []}
            ev = conds.get("Evicted")
            return ev is not None and ev["status"] == "True" and ev["reason"] == "PodsReadyTimeout"

        wait_for(evicted, 30, "the Workload says PodsReadyTimeout")

        def quota_free() -> bool:
            cq = store.get("gangq.io", "clusterqueues", None, "cq")
            usage = (cq.get("status") or {}).get("flavorsUsage") or []
            return all(r.get("total") in (None, "0", 0) for f in usage for r in f.get("resources") or [])

        wait_for(quota_free, 30, "the quota back")
    finally:
        op.stop()
        unregister(sb)


def test_a_kueue_pod_group_and_a_single_pod_run(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    sb, op, store = setup(cluster_factory, tmp_path, 32)
    try:
        labels = {pg.KUEUE_GROUP_LABEL: "kg", "kueue.x-k8s.io/queue-name": "q"}
        for i in range(2):
            created = store.create("", "pods", pod(f"kg-{i}", labels, annotations={pg.KUEUE_TOTAL_ANNOTATION: "2"}),
                                   namespace="default")
            assert pg.gated(created)
        solo = store.create("", "pods", pod("solo", {"gangq.io/queue-name": "q"}, gpus=2), namespace="default")
        assert pg.gated(solo)
        plain = store.create("", "pods", pod("plain", {}, gpus=0), namespace="default")
        assert not pg.gated(plain)

        def succeeded() -> set[str]:
            return {p["metadata"]["name"] for p in store.list("", "pods", "default")["items"]
                    if p["status"].get("phase") == "Succeeded"}

        wait_for(lambda: {"kg-0", "kg-1", "solo"} <= succeeded(), 90, "the Kueue group and the single pod succeed")
        for name in ("kg-0", "kg-1", "solo"):
            assert store.get("", "pods", "default", name)["metadata"]["annotations"].get(pg.ADMISSION_ANNOTATION)
    finally:
        op.stop()
        unregister(sb)


def test_a_podgroup_without_a_queue_is_given_back_to_the_scheduler(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    sb, op, store = setup(cluster_factory, tmp_path, 32)
    try:
        group = podgroup("free", 2)
        del group["metadata"]["labels"]
        store.create(pg.GROUP, pg.PLURAL, group, namespace="default")
        for i in range(2):
            created = store.create("", "pods", pod(f"free-{i}", {pg.POD_GROUP_LABEL: "free"}, gpus=1),
                                   namespace="default")
            assert pg.gated(created), created["spec"]  # gated at creation: its PodGroup could be queued

        def succeeded() -> bool:
            pods = group_pods(store, pg.POD_GROUP_LABEL, {"free"})
            return len(pods) == 2 and all(p["status"].get("phase") == "Succeeded" for p in pods)

        wait_for(succeeded, 60, "the unqueued group's pods ungated and succeeded")
        assert not [w for w in store.list("gangq.io", "workloads", "default")["items"]
                    if w["metadata"]["name"] == "podgroup-free"]
        assert not any(p["metadata"].get("annotations", {}).get(pg.ADMISSION_ANNOTATION)
                       for p in group_pods(store, pg.POD_GROUP_LABEL, {"free"}))
    finally:
        op.stop()
        unregister(sb)


def test_admitted_pod_groups_come_back_admitted_after_a_controller_restart(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    sb, op, store, config = setup_with_config(cluster_factory, tmp_path, 32)
    second = None
    try:
        store.create(pg.GROUP, pg.PLURAL, podgroup("pg-r", 2), namespace="default")
        for i in range(2):
            store.create("", "pods", pod(f"pg-r-{i}", {pg.POD_GROUP_LABEL: "pg-r"}, run_seconds=25),
                         namespace="default")
        kueue = {pg.KUEUE_GROUP_LABEL: "kg-r", "kueue.x-k8s.io/queue-name": "q"}
        for i in range(2):
            store.create("", "pods", pod(f"kg-r-{i}", kueue, gpus=4, run_seconds=25,
                                         annotations={pg.KUEUE_TOTAL_ANNOTATION: "2"}), namespace="default")
        store.create("", "pods", pod("solo-r", {"gangq.io/queue-name": "q"}, gpus=2, run_seconds=25),
                     namespace="default")
        groups = ({"pg-r-0", "pg-r-1"}, {"kg-r-0", "kg-r-1"}, {"solo-r"})  # 26 of the queue's 32 GPUs
        first = set().union(*groups)

        def pods() -> dict[str, dict[str, Any]]:
            return {p["metadata"]["name"]: p for p in store.list("", "pods", "default")["items"]}

        def bound(now: dict[str, dict[str, Any]]) -> bool:
            return all(n in now and not pg.gated(now[n]) and now[n]["spec"].get("nodeName") for n in first)

        wait_for(lambda: bound(pods()), 60, "every group admitted and bound")
        uids = {n: p["metadata"]["uid"] for n, p in pods().items() if n in first}
        op.stop()
        second = start_operator(sb, config, identity="second", jobset_controller="embedded")
        keys = (pg.PODGROUP.key_for(pg.SOURCE_PODGROUP, "default", "pg-r"),
                pg.PODGROUP.key_for(pg.SOURCE_GROUP, "default", "kg-r"),
                pg.PODGROUP.key_for(pg.SOURCE_POD, "default", "solo-r"))
        for key in keys:
            view = second.call(lambda key=key: second.controller.engine.workload(key))
            assert view is not None and view.state == "Admitted", (key, view)
        # 8 GPUs more do not fit beside the 26 held: the pod stays gated until a group is done
        store.create("", "pods", pod("late", {"gangq.io/queue-name": "q"}, gpus=8, run_seconds=1),
                     namespace="default")
        deadline = time.monotonic() + 90
        while not all(pods()[n]["status"].get("phase") == "Succeeded" for n in first):
            assert time.monotonic() < deadline, "the restored groups did not finish"
            now = pods()
            assert {n: now[n]["metadata"]["uid"] for n in first} == uids, "a pod was deleted"
            assert not [n for n in first if now[n]["status"].get("phase") == "Failed"]
            if all(any(not pg.terminal(now[n]) for n in members) for members in groups):
                assert pg.gated(now["late"]), "admitted over the quota the restored groups hold"
            time.sleep(0.1)
        wait_for(lambda: pods()["late"]["status"].get("phase") == "Succeeded", 60, "the late pod to run")
        for key in keys:
            wl = second.call(lambda key=key: second.controller.state.entries.get(key))
            assert wl is None or wl.reason != "StartedBeforeAdmission", (key, wl.reason)
    finally:
        if second is not None:
            second.stop()
        op.stop()
        unregister(sb)
