"""The watch streams prove an evicted gang has stopped when they have passed the resourceVersions
its stop rests on, with no request; otherwise the API server is read (gangq.operator.evictions,
gangq.operator.streams). The controller's parts on a stub client, stream items fed by hand as
kopf's stream and handlers would."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gangq.operator import evictions
from gangq.operator.config import parse_config
from gangq.operator.controller import Controller
from gangq.operator.evictions import STREAM_WAIT_SECONDS
from gangq.operator.streams import StreamPosition, StreamPositions
from tests.operator.test_evictions import NOW, StubClient, admitted_then_evicted, child_job, jobset, pod


class CountingClient(StubClient):
    """Records every read; lists answer ``listed`` (per path suffix), at ``list_rv``."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.listed: dict[str, list[dict[str, Any]]] = {}
        self.list_rv = "1000"

    async def list(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        self.reads.append(path)
        items = next((v for k, v in self.listed.items() if path.endswith(k)), [])
        return {"metadata": {"resourceVersion": self.list_rv}, "items": list(items)}

    async def get(self, path: str) -> dict[str, Any]:
        self.reads.append(path)
        return {}


def quiet_job(rv: int) -> dict[str, Any]:
    job = child_job(suspend=True, stopped=True)
    job["metadata"].update(uid="job-uid", resourceVersion=str(rv))
    return job


def running_pod(rv: int) -> dict[str, Any]:
    p = pod()
    p["metadata"].update(uid="pod-uid", resourceVersion=str(rv))
    return p


@pytest.fixture
def live_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Streams that go on sending: a slow test machine does not make them look idle."""
    monkeypatch.setattr(evictions, "STREAM_IDLE_SECONDS", 60.0)


def streams_at(c: Controller, pods_rv: int, jobs_rv: int) -> tuple[StreamPosition, StreamPosition]:
    """The cluster-wide pod and Job streams, each having sent a bookmark at the given resourceVersion."""
    pods = c.state.streams.stream("pods", None)
    jobs = c.state.streams.stream("jobs", None)
    pods.arrived({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(pods_rv)}}})
    jobs.arrived({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(jobs_rv)}}})
    return pods, jobs


async def cycle(c: Controller, now: float) -> None:
    """One turn of the scheduling loop: the reads and writes in flight answer, the loop takes its
    inbox (and with it the streams' positions), applies it, then checks the stopping gangs."""
    await asyncio.sleep(0.05)
    batch = [c.loop.inbox.get_nowait() for _ in range(c.loop.inbox.qsize())]
    c.state.streams.settle()
    for plural, event_type, obj, _ in batch:
        c.kinds.apply(plural, event_type, obj, now)
    c.gangs.resync.run(now)


def job_event(c: Controller, pos: StreamPosition, event_type: str, job: dict[str, Any]) -> None:
    """A child Job's event as kopf's stream and the controller's Job handler pass it on."""
    pos.arrived({"type": event_type, "object": job})
    if c.gangs.job_matters(event_type, job):
        c.loop.enqueue("jobs", event_type, job)
    c.state.streams.delivered("jobs", job)


def pod_event(c: Controller, pos: StreamPosition, event_type: str, p: dict[str, Any], *, handed: bool = True) -> None:
    """A pod's event arriving on the pod stream; ``handed``: the controller's handler has it too."""
    pos.arrived({"type": event_type, "object": p})
    if handed:
        c.loop.enqueue("pods", event_type, p)
        c.state.streams.delivered("pods", p)


@pytest.mark.usefixtures("live_streams")
def test_the_quota_comes_back_with_no_request_once_the_pod_stream_has_passed_the_quiet_job() -> None:
    async def main() -> None:
        client = CountingClient()
        c = Controller(client, parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        key = await admitted_then_evicted(c)
        entry = c.entries[key]
        pods, jobs = streams_at(c, 12, 12)
        c.loop.enqueue("jobsets", "MODIFIED", jobset(True, 12))
        job_event(c, jobs, "MODIFIED", quiet_job(20))  # the Job controller is done with it at 20
        await cycle(c, NOW + 2)
        assert entry.state == "Evicting"  # a pod created before 20 may still be on its way
        assert c.state.engine.cluster_queue("cq").admitted == 1  # type: ignore[union-attr]
        pods.arrived({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "21"}}})
        await cycle(c, NOW + 2.1)
        assert entry.state == "Pending"
        assert c.state.engine.cluster_queue("cq").admitted == 0  # type: ignore[union-attr]
        assert client.reads == []

    asyncio.run(main())


@pytest.mark.usefixtures("live_streams")
def test_a_pod_stream_that_lags_behind_the_quiet_job_is_read_and_its_pod_keeps_the_quota() -> None:
    """The pod was created (rv 18) before the Job controller wrote its stopped state (20), and has
    arrived on the pod stream, but kopf has not handed it to the controller: the stream's position
    stays below 20 however far it has sent. After the wait the API server is read, lists the pod,
    and the quota stays until the pod is gone."""
    async def main() -> None:
        client = CountingClient()
        c = Controller(client, parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        key = await admitted_then_evicted(c)
        entry = c.entries[key]
        pods, jobs = streams_at(c, 12, 12)
        c.loop.enqueue("jobsets", "MODIFIED", jobset(True, 12))
        job_event(c, jobs, "MODIFIED", quiet_job(20))
        pod_event(c, pods, "ADDED", running_pod(18), handed=False)
        pods.arrived({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "25"}}})
        await cycle(c, NOW + 2)
        assert c.state.streams.position("pods", "default") == 17
        assert entry.state == "Evicting"
        assert client.reads == []  # waiting for the stream
        client.listed["/pods"] = [running_pod(18)]
        await cycle(c, NOW + 2 + STREAM_WAIT_SECONDS)
        await cycle(c, NOW + 2 + STREAM_WAIT_SECONDS)
        assert client.reads == ["/api/v1/namespaces/default/pods", "/apis/batch/v1/namespaces/default/jobs"]
        assert entry.state == "Evicting"  # the read lists the pod
        assert c.state.engine.cluster_queue("cq").admitted == 1  # type: ignore[union-attr]
        client.listed.clear()
        c.loop.enqueue("pods", "ADDED", running_pod(18))  # kopf hands it over at last
        c.state.streams.delivered("pods", running_pod(18))
        pod_event(c, pods, "DELETED", running_pod(30))
        await cycle(c, NOW + 5)
        assert entry.state == "Pending"
        assert c.state.engine.cluster_queue("cq").admitted == 0  # type: ignore[union-attr]
        assert len(client.reads) == 2  # the stream, now at 30, proved the rest

    asyncio.run(main())


def test_an_idle_or_opaque_stream_is_not_waited_for() -> None:
    """A stream short of the resourceVersion that has sent nothing for a while (its next bookmark
    may be a minute away), or one whose resourceVersions are not integers: the gang is read at once."""
    async def main() -> None:
        for make_opaque in (False, True):
            client = CountingClient()
            c = Controller(client, parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
            key = await admitted_then_evicted(c)
            pods, jobs = streams_at(c, 5, 5)
            if make_opaque:
                pods.arrived({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "a1b2"}}})
            else:
                pods.arrived_at -= evictions.STREAM_IDLE_SECONDS
                jobs.arrived_at -= evictions.STREAM_IDLE_SECONDS
            c.loop.enqueue("jobsets", "MODIFIED", jobset(True, 12))
            await cycle(c, NOW + 2)
            await cycle(c, NOW + 2)
            assert "/api/v1/namespaces/default/pods" in client.reads
            assert c.entries[key].state == "Pending"

    asyncio.run(main())


@pytest.mark.usefixtures("live_streams")
def test_the_job_stream_must_pass_every_child_job_the_embedded_controller_wrote() -> None:
    """The embedded JobSet controller created a child Job (rv 40) after the suspension (12), in a
    reconcile begun before it: until the Job stream has shown it, the watches cannot say the
    JobSet has no child Job left that may start pods."""
    async def main() -> None:
        client = CountingClient()
        c = Controller(client, parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        c.state.child_jobs_rv = lambda key: 40
        key = await admitted_then_evicted(c)
        entry = c.entries[key]
        pods, jobs = streams_at(c, 44, 30)
        c.loop.enqueue("jobsets", "MODIFIED", jobset(True, 12))
        await cycle(c, NOW + 2)
        assert entry.state == "Evicting" and client.reads == []
        created = child_job(suspend=False)
        created["metadata"].update(uid="job-uid", resourceVersion="40")
        job_event(c, jobs, "ADDED", created)  # it may start pods
        await cycle(c, NOW + 2.1)
        assert entry.state == "Evicting"
        job_event(c, jobs, "MODIFIED", quiet_job(45))
        await cycle(c, NOW + 2.2)
        assert entry.state == "Evicting"  # pods created before 45 may be on their way: the pod stream is at 44
        pods.arrived({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "46"}}})
        await cycle(c, NOW + 2.3)
        assert entry.state == "Pending"
        assert client.reads == []

    asyncio.run(main())


def test_the_read_lists_the_pods_again_when_their_list_is_older_than_a_quiet_job() -> None:
    async def main() -> None:
        client = CountingClient()
        c = Controller(client, parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        key = await admitted_then_evicted(c)
        client.listed["/jobs"] = [quiet_job(2000)]  # stopped after the pods' list (1000)
        await c.gangs.resync.read(c.entries[key])()
        assert client.reads.count("/api/v1/namespaces/default/pods") == 2
        client.reads.clear()
        client.list_rv = "2001"
        await c.gangs.resync.read(c.entries[key])()
        assert client.reads.count("/api/v1/namespaces/default/pods") == 1

    asyncio.run(main())


def test_a_stream_position_counts_only_what_was_handed_over() -> None:
    """Events arrive in stream order; kopf hands each object's events over in a task of its own."""
    pos = StreamPosition()
    positions = StreamPositions()
    positions.streams[("pods", None)] = pos

    def obj(uid: str, rv: int) -> dict[str, Any]:
        return {"metadata": {"uid": uid, "namespace": "ns", "resourceVersion": str(rv)}}

    # kopf's list (type None, in key order), then its end
    pos.arrived({"type": None, "object": obj("b", 7)})
    pos.arrived({"type": None, "object": obj("a", 9)})
    pos.arrived("LISTED")
    assert pos.current() == 0  # the list is not handed over yet
    positions.delivered("pods", obj("a", 9))
    assert pos.current() == 0
    positions.delivered("pods", obj("b", 7))
    assert pos.current() == 9
    pos.arrived({"type": "MODIFIED", "object": obj("a", 11)})
    pos.arrived({"type": "MODIFIED", "object": obj("b", 12)})
    pos.arrived({"type": "MODIFIED", "object": obj("a", 13)})
    positions.delivered("pods", obj("b", 12))  # b's task ran first
    assert pos.current() == 10
    positions.delivered("pods", obj("a", 13))  # a's older event was skipped: this one covers it
    assert pos.current() == 13
    pos.arrived({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}})
    assert pos.current() == 20
    # a relist after a 410 never moves the position back
    pos.arrived({"type": None, "object": obj("a", 25)})
    pos.arrived("LISTED")
    assert pos.current() == 20
    positions.delivered("pods", obj("a", 25))
    assert pos.current() == 25
    positions.settle()
    assert positions.position("pods", "any") == 25
    pos.arrived({"type": "MODIFIED", "object": {"metadata": {"uid": "a", "resourceVersion": "x7"}}})
    positions.settle()
    assert positions.position("pods", "any") is None


def test_the_gangs_of_a_namespace_due_for_a_read_together_are_read_with_one_list_each_of_pods_and_jobs() -> None:
    """On a quiet cluster every eviction is read; the reads due while one is in flight go together."""
    async def main() -> None:
        from gangq.operator.entry import Entry

        client = CountingClient()
        c = Controller(client, parse_config({"podsReady": {"enable": False}}))  # type: ignore[arg-type]
        first = Entry("default/train", jobset(True, 12))
        other = jobset(True, 13)
        other["metadata"].update(name="other", uid="u2")
        second = Entry("default/other", other)
        still = child_job(suspend=True)  # the Job controller has not acted on the suspension yet
        still["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] = "other"
        client.listed["/pods"] = [running_pod(18)]  # train's
        client.listed["/jobs"] = [still]
        c.gangs.resync._read(first)
        c.gangs.resync._read(second)
        await asyncio.sleep(0.05)
        assert client.reads == ["/api/v1/namespaces/default/pods", "/apis/batch/v1/namespaces/default/jobs"]
        outcomes = {obj["key"]: obj for plural, _, obj, _ in
                    [c.loop.inbox.get_nowait() for _ in range(c.loop.inbox.qsize())] if plural == "_resynced"}
        assert outcomes["default/train"]["pods"] == ["default/train-w-0-0"] and outcomes["default/train"]["jobs"] == []
        assert outcomes["default/other"]["pods"] == [] and outcomes["default/other"]["jobs"] == ["train-w-0"]
        assert not c.gangs.resync.reading

    asyncio.run(main())
