"""The watch of deactivated Workloads (gangq/operator/activation.py) on both control planes: the
controller hears an admin's ``spec.active`` switch both ways and none of the Workloads' status
writes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

from gangq.operator.activation import ActivationWatch
from gangq.operator.kube import Credentials, KubeClient
from gangq.operator.translate import workload_active
from tests.clusters import Cluster, controller_kubeconfig
from tests.operator.helpers import install, wait_for

GROUP = "gangq.io"


def workload(name: str, active: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "gangq.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "queueName": "q",
            "active": active,
            "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "1"}}],
        },
    }


class FakeController:
    """What the watch needs of the controller: the gangs it holds (by Workload name), whether an
    event says other than it knows, and the inbox (each event applied at once, as the loop would)."""

    def __init__(self, inactive: set[str]) -> None:
        self.known = {name: name not in inactive for name in ("a", "b", "c", "d")}
        self.received: list[tuple[str, str, bool]] = []
        entries = {
            name: SimpleNamespace(active=active, created=True, namespace="default", wl_name=name)
            for name, active in self.known.items()
        }
        self.state = SimpleNamespace(entries=entries, watched_namespace=lambda obj: True)
        self.gangs = SimpleNamespace(activation_changed=self.activation_changed)

    def activation_changed(self, obj: dict[str, Any]) -> bool:
        name = obj["metadata"]["name"]
        return name in self.known and workload_active(obj) != self.known[name]

    def enqueue(self, plural: str, event_type: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.received.append((event_type, name, workload_active(obj)))
        self.known[name] = workload_active(obj)
        self.state.entries[name].active = workload_active(obj)


def test_the_controller_hears_the_switch_both_ways_and_no_status_write(
    cluster_factory: Callable[..., Cluster],
) -> None:
    sb = cluster_factory(cluster=False)
    install(sb)
    store = sb.store

    def patch(name: str, body: dict[str, Any], sub: str | None = None) -> None:
        kwargs = {"subresource": sub} if sub else {}
        sb.call(store.patch, GROUP, "workloads", "default", name, body, "merge", **kwargs)

    # a: deactivated before the watch starts (listed); b: active; c: held deactivated by the
    # controller although its Workload says active (the switch moved while no watch was open: read
    # back at the list); d: deactivated, then deleted.
    for name, active in (("a", False), ("b", True), ("c", True), ("d", False)):
        sb.call(store.create, GROUP, "workloads", workload(name, active), namespace="default")
    fake = FakeController(inactive={"c", "d"})
    stop = asyncio.Event()
    loop = asyncio.new_event_loop()

    async def run() -> None:
        client = KubeClient(Credentials.load(controller_kubeconfig(sb)))
        try:
            await ActivationWatch(client, cast(Any, fake)).run(stop)
        finally:
            await client.close()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(fake.received) >= 2, 15, "the list's two changes")
        assert sorted(fake.received) == [("ADDED", "a", False), ("MODIFIED", "c", True)]
        fake.received.clear()

        for i in range(5):  # status writes, active or not, never reach the controller
            patch("b", {"status": {"state": "Pending", "message": f"write {i}"}}, "status")
            patch("a", {"status": {"state": "Pending", "message": f"write {i}"}}, "status")
        patch("b", {"spec": {"active": False}})
        wait_for(lambda: fake.received, 15, "b's deactivation")
        patch("b", {"status": {"state": "Pending", "message": "deactivated"}}, "status")
        patch("b", {"spec": {"active": True}})
        wait_for(lambda: len(fake.received) >= 2, 15, "b's reactivation")
        sb.call(store.delete, GROUP, "workloads", "default", "d")
        patch("a", {"spec": {"active": True}})
        wait_for(lambda: len(fake.received) >= 3, 15, "a's reactivation")
        assert fake.received == [("ADDED", "b", False), ("MODIFIED", "b", True), ("MODIFIED", "a", True)]
        assert fake.known["d"] is False  # deleted: nothing changes for its gang
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
