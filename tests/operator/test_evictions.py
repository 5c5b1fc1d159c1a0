"""When an evicted gang's quota comes back: not before its last pod is gone, nor (a JobSet) before
its last child Job that could still start pods is suspended or gone; and a deletion the watches
missed is found by reading the API server (gangq.operator.evictions). The controller's parts on a
stub client, events fed by hand."""

from __future__ import annotations

import asyncio
from typing import Any

from gangq.operator.config import parse_config
from gangq.operator.controller import Controller

NOW = 1_000.0


class StubClient:
    """Answers every write with success; the tests feed the watch events themselves."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []

    async def patch(self, path: str, body: Any, content_type: str = "", *, want_body: bool = True) -> dict[str, Any]:
        self.writes.append(("PATCH", path))
        return {}

    async def create(self, path: str, body: dict[str, Any], *, want_body: bool = True) -> dict[str, Any]:
        self.writes.append(("POST", path))
        return {}

    async def list(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        return {"items": []}

    async def get(self, path: str) -> dict[str, Any]:
        return {}


def jobset(suspend: bool, rv: int, admitted: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": "default", "uid": "u1", "resourceVersion": str(rv),
                            "labels": {"gangq.io/queue-name": "q"}, "creationTimestamp": "2026-01-01T00:00:00Z"}
    if admitted:
        meta["annotations"] = {"gangq.io/admission": '{"clusterQueue": "cq"}'}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta, "spec": {
        "suspend": suspend, "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
            "parallelism": 1, "completions": 1, "template": {"spec": {"containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "2"}}}]}}}}}]}}


def child_job(suspend: bool, *, stopped: bool = False) -> dict[str, Any]:
    """``stopped``: the Job controller is done with the suspension (condition Suspended, no pod active)."""
    status: dict[str, Any] = {"active": 0 if stopped else 1}
    if stopped:
        status["conditions"] = [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train-w-0", "namespace": "default",
                         "labels": {"jobset.sigs.k8s.io/jobset-name": "train"},
                         "ownerReferences": [{"kind": "JobSet", "name": "train", "uid": "u1", "controller": True}]},
            "spec": {"suspend": suspend}, "status": status}


async def drain(c: Controller, now: float) -> None:
    """Let the writes and reads in flight answer, and apply their outcomes as the loop would."""
    await asyncio.sleep(0.05)
    for plural, event_type, obj, _ in [c.loop.inbox.get_nowait() for _ in range(c.loop.inbox.qsize())]:
        c.kinds.apply(plural, event_type, obj, now)


def pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-w-0-0", "namespace": "default", "resourceVersion": "50",
                         "labels": {"jobset.sigs.k8s.io/jobset-name": "train",
                                    "jobset.sigs.k8s.io/replicatedjob-name": "w"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
            "status": {"phase": "Running"}}


async def admitted_then_evicted(c: Controller) -> str:
    """A JobSet admitted, then deactivated by an admin (an eviction); returns its key."""
    k = c.kinds
    k.apply("namespaces", "ADDED", {"metadata": {"name": "default", "resourceVersion": "1"}}, NOW)
    k.apply("resourceflavors", "ADDED", {"metadata": {"name": "default", "resourceVersion": "2"}, "spec": {}}, NOW)
    k.apply("clusterqueues", "ADDED", {"metadata": {"name": "cq", "resourceVersion": "3"}, "spec": {
        "namespaceSelector": {}, "admissionMode": "QuotaOnly", "resourceGroups": [{"coveredResources": ["cpu"],
        "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}}, NOW)
    k.apply("localqueues", "ADDED", {"metadata": {"name": "q", "namespace": "default", "resourceVersion": "4"},
                                     "spec": {"clusterQueue": "cq"}}, NOW)
    k.apply("jobsets", "ADDED", jobset(True, 10), NOW)
    c.recovered.set()
    c.gangs.handle(c.state.schedule(NOW), NOW)
    entry = c.entries["default/train"]
    assert entry.state == "Admitted"
    await asyncio.sleep(0.05)  # the admission patch goes out
    entry.writing = False
    k.apply("jobsets", "MODIFIED", jobset(False, 11, admitted=True), NOW)
    c.state.engine.deactivate(entry.key, NOW, "parked")
    c.gangs.handle(c.state.schedule(NOW + 1), NOW + 1)
    assert entry.state == "Evicting"
    await asyncio.sleep(0.05)  # the suspend patch goes out
    entry.writing = False
    return entry.key


def test_an_evicted_jobset_keeps_its_quota_until_its_last_child_job_that_could_start_pods_stops() -> None:
    async def main() -> None:
        c = Controller(StubClient(), parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        key = await admitted_then_evicted(c)
        entry = c.entries[key]
        # its child Job was created just before the eviction: it has no pod yet, but may start one
        assert c.gangs.job_matters("ADDED", child_job(suspend=False)) is False
        c.kinds.apply("jobsets", "MODIFIED", jobset(True, 12), NOW + 2)
        assert entry.state == "Evicting"  # suspended, no pod: still not done
        assert c.state.engine.cluster_queue("cq").admitted == 1  # type: ignore[union-attr]
        # suspended, but its controller has not acted on it yet: it may still create a pod
        assert c.gangs.job_matters("MODIFIED", child_job(suspend=True)) is False
        assert c.gangs.job_matters("MODIFIED", child_job(suspend=True, stopped=True)) is True  # the loop hears
        c.kinds.apply("jobs", "MODIFIED", child_job(suspend=True, stopped=True), NOW + 3)
        assert entry.state == "Evicting"  # the watches say done: read once more from the API server
        await drain(c, NOW + 3)
        assert entry.state == "Pending"
        assert c.state.engine.cluster_queue("cq").admitted == 0  # type: ignore[union-attr]

    asyncio.run(main())


def test_a_pod_the_watches_have_not_shown_yet_keeps_the_quota() -> None:
    """Pods and Jobs come through separate watches: the Job controller's last pod, created just
    before it saw the suspension, can reach the controller after the Job's stopped state. The
    read that confirms the eviction finds it, and the quota stays until it is gone."""
    async def main() -> None:
        client = StubClient()
        c = Controller(client, parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        key = await admitted_then_evicted(c)
        entry = c.entries[key]
        listed: list[dict[str, Any]] = [pod()]

        async def listing(path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
            return {"items": listed if path.endswith("/pods") else []}

        client.list = listing  # type: ignore[method-assign]
        c.kinds.apply("jobsets", "MODIFIED", jobset(True, 12), NOW + 2)
        await drain(c, NOW + 2)
        assert entry.state == "Evicting"  # the API server lists a pod the pod watch has not shown
        assert c.state.engine.cluster_queue("cq").admitted == 1  # type: ignore[union-attr]
        listed.clear()
        c.kinds.apply("pods", "ADDED", pod(), NOW + 3)
        deleted = pod()
        deleted["metadata"]["resourceVersion"] = "60"
        c.kinds.apply("pods", "DELETED", deleted, NOW + 4)
        await drain(c, NOW + 4)
        assert entry.state == "Pending"
        assert c.state.engine.cluster_queue("cq").admitted == 0  # type: ignore[union-attr]

    asyncio.run(main())


def test_the_quota_waits_for_the_embedded_jobset_controller_to_be_done_with_the_jobset() -> None:
    """A reconcile that began on the running JobSet creates its child Jobs after the read that
    found none; their pods would start on the next gang's quota. The read waits until the embedded
    JobSet controller has seen the suspension with no reconcile of the JobSet under way."""
    async def main() -> None:
        from gangq.operator.jobset import JobSetController, WorkQueue

        client = StubClient()
        c = Controller(client, parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        embedded = JobSetController(client=client)
        embedded.queue = WorkQueue()
        c.state.child_controller_settled = embedded.settled
        key = await admitted_then_evicted(c)
        entry = c.entries[key]
        embedded.on_jobset("MODIFIED", jobset(False, 11, admitted=True))  # its cache: still running
        assert await embedded.queue.get() == key  # a worker reconciles it
        c.kinds.apply("jobsets", "MODIFIED", jobset(True, 12), NOW + 2)
        await drain(c, NOW + 2)
        assert entry.state == "Evicting"  # the reconcile on the running JobSet is under way
        assert c.state.engine.cluster_queue("cq").admitted == 1  # type: ignore[union-attr]
        embedded.queue.done(key)
        c.gangs.resync.run(NOW + 3)  # read again soon: the cache still shows it running
        await drain(c, NOW + 3)
        assert entry.state == "Evicting"
        embedded.on_jobset("MODIFIED", jobset(True, 12))  # the suspension reaches its cache
        assert embedded.settled(key)  # queued again, and a reconcile from now on sees it suspended
        c.gangs.resync.run(NOW + 4)
        await drain(c, NOW + 4)
        assert entry.state == "Pending"
        assert c.state.engine.cluster_queue("cq").admitted == 0  # type: ignore[union-attr]

    asyncio.run(main())


def test_a_pod_deletion_the_watch_missed_is_found_by_reading_the_api_server() -> None:
    async def main() -> None:
        c = Controller(StubClient(), parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        key = await admitted_then_evicted(c)
        entry = c.entries[key]
        c.kinds.apply("pods", "ADDED", pod(), NOW + 1)
        c.kinds.apply("jobsets", "MODIFIED", jobset(True, 12), NOW + 2)
        assert entry.state == "Evicting"  # its pod runs
        # the pod's DELETED event is lost (an expired watch is listed again, deletions unsaid);
        # the resync's read of the API server lists no pod for the gang:
        assert c.gangs.resync.next_due() is not None
        c.gangs.resynced("", {"key": key, "pods": [], "jobs": []}, key, NOW + 20)
        assert entry.state == "Pending"
        assert c.state.engine.cluster_queue("cq").admitted == 0  # type: ignore[union-attr]

    asyncio.run(main())


def test_the_resync_reads_only_gangs_that_are_still_stopping() -> None:
    async def main() -> None:
        client = StubClient()
        c = Controller(client, parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        key = await admitted_then_evicted(c)
        reads: list[str] = []

        async def listing(path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
            reads.append(path)
            return {"items": []}

        client.list = listing  # type: ignore[method-assign]
        c.kinds.apply("pods", "ADDED", pod(), NOW + 1)
        c.kinds.apply("jobsets", "MODIFIED", jobset(True, 12), NOW + 2)
        c.gangs.resync.run(NOW + 5)  # not due yet
        await asyncio.sleep(0.05)
        assert reads == []
        c.gangs.resync.run(NOW + 1 + 10)
        await asyncio.sleep(0.05)
        assert reads == ["/api/v1/namespaces/default/pods", "/apis/batch/v1/namespaces/default/jobs"]
        for plural, event_type, obj, _ in [c.loop.inbox.get_nowait() for _ in range(c.loop.inbox.qsize())]:
            c.kinds.apply(plural, event_type, obj, NOW + 12)
        assert c.entries[key].state == "Pending"

    asyncio.run(main())


class LosingClient(StubClient):
    """The admission patch reaches etcd, but its answer is lost (an API-server restart)."""

    async def patch(self, path: str, body: Any, content_type: str = "", *, want_body: bool = True) -> dict[str, Any]:
        self.writes.append(("PATCH", path))
        unsuspends = isinstance(body, list) and any(
            op.get("path") == "/spec/suspend" and op.get("value") is False for op in body)
        if unsuspends:
            from gangq.operator.kube import ApiError

            raise ApiError(500, "InternalError", "the connection was cut")
        return {}


def setup_queue(c: Controller, cpu: int) -> None:
    k = c.kinds
    k.apply("namespaces", "ADDED", {"metadata": {"name": "default", "resourceVersion": "1"}}, NOW)
    k.apply("resourceflavors", "ADDED", {"metadata": {"name": "default", "resourceVersion": "2"}, "spec": {}}, NOW)
    k.apply("clusterqueues", "ADDED", {"metadata": {"name": "cq", "resourceVersion": "3"}, "spec": {
        "namespaceSelector": {}, "admissionMode": "QuotaOnly", "resourceGroups": [{"coveredResources": ["cpu"],
        "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": str(cpu)}]}]}]}}, NOW)
    k.apply("localqueues", "ADDED", {"metadata": {"name": "q", "namespace": "default", "resourceVersion": "4"},
                                     "spec": {"clusterQueue": "cq"}}, NOW)
    c.recovered.set()


async def admission_lost(c: Controller) -> None:
    """The JobSet is admitted, the patch's answer is lost: the gang goes back to its queue."""
    c.kinds.apply("jobsets", "ADDED", jobset(True, 10), NOW)
    c.gangs.handle(c.state.schedule(NOW), NOW)
    await asyncio.sleep(0.05)
    for plural, event_type, obj, _ in [c.loop.inbox.get_nowait() for _ in range(c.loop.inbox.qsize())]:
        c.kinds.apply(plural, event_type, obj, NOW)
    assert c.entries["default/train"].state == "Pending"


def admitted_object() -> dict[str, Any]:
    obj = jobset(False, 20, admitted=True)
    obj["metadata"]["annotations"]["gangq.io/admission"] = (
        '{"clusterQueue": "cq", "podSetAssignments": [{"name": "w", "count": 1, "flavors": {"cpu": "default"}}]}')
    return obj


def test_an_admission_whose_answer_was_lost_is_charged_when_the_object_shows_it() -> None:
    async def main() -> None:
        c = Controller(LosingClient(), parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        setup_queue(c, cpu=4)
        await admission_lost(c)
        c.kinds.apply("jobsets", "MODIFIED", admitted_object(), NOW + 1)  # it runs: the patch went through
        assert c.entries["default/train"].state == "Admitted"
        assert c.state.engine.cluster_queue("cq").admitted == 1  # type: ignore[union-attr]

    asyncio.run(main())


def test_an_admission_whose_answer_was_lost_and_no_longer_fits_is_stopped() -> None:
    async def main() -> None:
        client = LosingClient()
        c = Controller(client, parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        setup_queue(c, cpu=2)
        await admission_lost(c)
        c.state.engine.deactivate("default/train", NOW, "parked")  # meanwhile another gang takes the quota
        other = jobset(True, 30)
        other["metadata"].update({"name": "other", "uid": "u2"})
        c.kinds.apply("jobsets", "ADDED", other, NOW)
        c.gangs.handle(c.state.schedule(NOW), NOW)
        assert c.entries["default/other"].state == "Admitted"
        c.state.engine.reactivate("default/train", NOW)
        client.writes.clear()
        c.kinds.apply("jobsets", "MODIFIED", admitted_object(), NOW + 1)  # "train" runs too: over quota
        await asyncio.sleep(0.05)
        assert c.entries["default/train"].state == "Pending"
        assert c.state.engine.cluster_queue("cq").admitted == 1  # type: ignore[union-attr]
        assert ("PATCH", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/train") in client.writes

    asyncio.run(main())


def test_a_lost_admission_answer_is_learned_by_reading_the_object_not_admitted_twice() -> None:
    """The patch went through, its answer was lost: the writer reads the object, sees its own
    admission and keeps the gang admitted; it never sends a second admission to a running object
    (each admission patch tests ``spec.suspend: true``)."""
    async def main() -> None:
        client = LosingClient()
        seen: list[Any] = []

        async def get(path: str) -> dict[str, Any]:
            obj = admitted_object()
            obj["metadata"]["annotations"]["gangq.io/admission"] = (
                '{"clusterQueue": "cq", "podSetAssignments": [{"name": "w", "count": 1, '
                '"flavors": {"cpu": "default"}}]}')
            seen.append(path)
            return obj

        client.get = get  # type: ignore[method-assign]
        c = Controller(client, parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        setup_queue(c, cpu=4)
        c.kinds.apply("jobsets", "ADDED", jobset(True, 10), NOW)
        c.gangs.handle(c.state.schedule(NOW), NOW)
        await asyncio.sleep(0.05)
        for plural, event_type, obj, _ in [c.loop.inbox.get_nowait() for _ in range(c.loop.inbox.qsize())]:
            c.kinds.apply(plural, event_type, obj, NOW)
        assert seen == ["/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/train"]
        assert c.entries["default/train"].state == "Admitted"
        assert c.state.engine.cluster_queue("cq").admitted == 1  # type: ignore[union-attr]
        patches = [w for w in client.writes if w == ("PATCH", seen[0])]
        assert len(patches) == 1  # no second admission

    asyncio.run(main())


def test_a_job_can_start_no_more_pods_once_its_controller_is_done_with_the_suspension() -> None:
    from gangq.operator.evictions import quiet

    job = child_job(suspend=True)
    job["status"] = {"active": 0}
    assert not quiet(job)  # Kubernetes' Job controller has not said it is done
    assert quiet(child_job(suspend=True, stopped=True))
    assert not quiet(child_job(suspend=False, stopped=True))
    job["spec"]["managedBy"] = "example.com/other-controller"  # another controller writes no condition
    assert quiet(job)
    job["status"]["active"] = 1
    assert not quiet(job)
