"""The kopf wiring's work queue and cache (no API server)."""

from __future__ import annotations

import asyncio

from gangq.jobset import constants as c
from gangq.operator.jobset import JobSetController, WorkQueue


def test_work_queue_dedupes_and_requeues_keys_changed_while_active() -> None:
    async def run() -> list[str]:
        q = WorkQueue()
        q.add("a")
        q.add("a")
        q.add("b")
        assert len(q) == 2
        first = await q.get()
        q.add(first)  # changed while a worker holds it: not handed out twice
        second = await q.get()
        assert second == "b"
        q.done(first)  # queued again now
        third = await q.get()
        q.done(second)
        q.done(third)
        return [first, second, third]

    assert asyncio.run(run()) == ["a", "b", "a"]


def _job(name: str, rv: str, owner: str = "js") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                         "labels": {c.JOBSET_NAME_KEY: owner}}}


def test_cache_keeps_the_newest_resource_version_and_forgets_deleted_objects() -> None:
    ctl = JobSetController(client=object())
    ctl.on_job("ADDED", _job("js-w-0", "10"))
    ctl.on_job("MODIFIED", _job("js-w-0", "12"))
    ctl.on_job("MODIFIED", _job("js-w-0", "11"))  # a late event never replaces a newer write
    assert ctl.jobs["ns/js"]["js-w-0"]["metadata"]["resourceVersion"] == "12"
    ctl.on_job("DELETED", _job("js-w-0", "13"))
    assert "ns/js" not in ctl.jobs
    ctl.on_job(None, {"metadata": {"name": "stray", "namespace": "ns", "labels": {}}})  # not a JobSet's
    assert not ctl.jobs
    ctl.on_service("ADDED", {"metadata": {"name": "js", "namespace": "ns", "labels": {c.JOBSET_NAME_KEY: "js"}}})
    assert "ns/js" in ctl.services
    ctl.on_service("DELETED", {"metadata": {"name": "js", "namespace": "ns", "labels": {c.JOBSET_NAME_KEY: "js"}}})
    assert "ns/js" not in ctl.services
    ctl.on_jobset("ADDED", {"metadata": {"name": "js", "namespace": "ns", "resourceVersion": "5"}, "spec": {}})
    ctl.on_jobset("MODIFIED", {"metadata": {"name": "js", "namespace": "ns", "resourceVersion": "4"}, "spec": {}})
    assert ctl.jobsets["ns/js"]["metadata"]["resourceVersion"] == "5"
    ctl.on_jobset("DELETED", {"metadata": {"name": "js", "namespace": "ns"}})
    assert "ns/js" not in ctl.jobsets
