"""The Lease elector on its own, against an in-memory Lease store: renewal takes one request, rides
out failures shorter than its renew deadline, and still stops before another replica may lead."""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

import pytest

from gangq.operator.kube import ApiError
from gangq.operator.leader import LeaseElector


class LeaseStore:
    """One namespace's Leases with resourceVersions (409 on a stale update) and a switch that
    answers every request 503 (what the KubeClient raises once its own retries are spent)."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.failing = False
        self.requests: list[str] = []
        self.attempts: set[int] = set()  # what the elector asked the client for, per request

    def _fail(self, verb: str, attempts: int) -> None:
        self.requests.append(verb)
        self.attempts.add(attempts)
        if self.failing:
            raise ApiError(503, "ServiceUnavailable", "storm")

    def _stored(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj = copy.deepcopy(body)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.leases[obj["metadata"]["name"]] = obj
        return copy.deepcopy(obj)

    async def get(self, path: str, *, attempts: int = 6) -> dict[str, Any]:
        self._fail("get", attempts)
        name = path.rsplit("/", 1)[1]
        if name not in self.leases:
            raise ApiError(404, "NotFound", name)
        return copy.deepcopy(self.leases[name])

    async def create(self, path: str, body: dict[str, Any], *, attempts: int = 6) -> dict[str, Any]:
        self._fail("create", attempts)
        if body["metadata"]["name"] in self.leases:
            raise ApiError(409, "AlreadyExists", body["metadata"]["name"])
        return self._stored(body)

    async def replace(self, path: str, body: dict[str, Any], *, attempts: int = 6) -> dict[str, Any]:
        self._fail("update", attempts)
        current = self.leases[body["metadata"]["name"]]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        return self._stored(body)


def elector(store: LeaseStore, identity: str, duration: float = 1.2, renew: float = 0.4) -> LeaseElector:
    return LeaseElector(store, "default", "gangq-controller", identity,  # type: ignore[arg-type]
                        duration=duration, renew_interval=renew)


def test_a_leader_renews_with_one_update_of_the_lease_it_wrote() -> None:
    async def go() -> None:
        store = LeaseStore()
        leader = elector(store, "a")
        assert await leader.acquire(asyncio.Event())
        store.requests.clear()
        before = store.leases["gangq-controller"]["spec"]["renewTime"]
        assert await leader.renew()
        assert store.requests == ["update"]
        assert store.leases["gangq-controller"]["spec"]["renewTime"] > before
        assert store.leases["gangq-controller"]["spec"]["holderIdentity"] == "a"
        # each request made once: the client's growing backoff would spend the renew deadline
        assert store.attempts == {1}

    asyncio.run(go())


def test_a_renewal_that_conflicts_reads_the_lease_and_yields_to_a_live_holder() -> None:
    """Another replica wrote the Lease (it took it over): the update conflicts, the read shows a
    live holder, and the renewal fails instead of overwriting it."""

    async def go() -> None:
        store = LeaseStore()
        leader = elector(store, "a")
        assert await leader.acquire(asyncio.Event())
        lease = store.leases["gangq-controller"]
        store._stored({**lease, "spec": {**lease["spec"], "holderIdentity": "b",
                                         "renewTime": lease["spec"]["renewTime"]}})
        store.requests.clear()
        assert not await leader.renew()
        assert store.requests == ["update", "get"]
        assert store.leases["gangq-controller"]["spec"]["holderIdentity"] == "b"

    asyncio.run(go())


def test_a_leader_keeps_its_lease_through_failures_shorter_than_the_renew_deadline() -> None:
    """Every request fails from 0.7 s to 1.2 s after the acquisition (lease 2.4 s, renew deadline
    1.6 s, renew interval 0.8 s). A failed renewal is tried again a quarter interval later, so the
    attempts at 1.2 and 1.4 s reach the API server once it answers: the leader keeps the Lease.
    Waiting a whole interval after the failure at 0.8 s would leave no attempt before 1.6 s."""

    async def go() -> None:
        store = LeaseStore()
        leader = elector(store, "a", duration=2.4, renew=0.8)
        stop = asyncio.Event()
        assert await leader.acquire(stop)
        keeper = asyncio.ensure_future(leader.keep(stop))
        await asyncio.sleep(0.7)
        store.requests.clear()
        store.failing = True
        await asyncio.sleep(0.5)
        failed = len(store.requests)
        store.failing = False
        await asyncio.sleep(1.0)
        stop.set()
        await keeper
        assert not leader.lost.is_set()
        assert failed >= 2  # the renewal was tried again inside the storm
        assert time.time() - leader.renewed_at < 1.0

    asyncio.run(go())


@pytest.mark.parametrize("keeper_starts_after", [0.0, 0.6])
def test_a_leader_that_cannot_renew_stops_before_the_lease_may_be_taken(keeper_starts_after: float) -> None:
    """The renew deadline counts from the acquisition, also for a keeper started late (the replica
    recovered first): it stops at the deadline of the Lease as written, not a whole deadline after
    it started."""

    async def go() -> None:
        store = LeaseStore()
        leader = elector(store, "a")
        stop = asyncio.Event()
        assert await leader.acquire(stop)
        acquired = leader.renewed_at
        await asyncio.sleep(keeper_starts_after)
        store.failing = True
        keeper = asyncio.ensure_future(leader.keep(stop))
        await asyncio.wait_for(leader.lost.wait(), timeout=5)
        lost_after = time.time() - acquired
        await keeper
        # the renew deadline is 0.8 s; another replica may take the Lease only at 1.2 s
        assert 0.75 <= lost_after < 1.2, lost_after
        assert not leader.leading

    asyncio.run(go())
