"""Leader election with a coordination.k8s.io/v1 Lease (client-go's leaderelection, simplified).

Only the replica holding the Lease runs the controller; the others wait. The holder renews every
``renew_interval``; a candidate takes the Lease over when ``renewTime + leaseDurationSeconds`` has
passed. Updates carry the resourceVersion they read, so two candidates cannot both win (409).
A leader that cannot renew before its lease runs out stops leading (``lost`` is set) — the operator
then stops, as controller-runtime's managers do.

Renewal is built to ride out a busy or flaky API server, because a leader that gives up its Lease
under a short storm of 429s or 503s costs the cluster a failover (a restart, a full recovery and
minutes without admissions on a large cluster) for nothing:

- the leader renews with one request, an update of the Lease it last wrote (client-go's
  optimistic renewal); only when that conflicts does it read the Lease again;
- a failed renewal is tried again after a quarter of the renew interval, not a whole interval, so
  the renew deadline holds several attempts and not one or two; each request is made once (the
  client's own backoff, growing to seconds, would spend the deadline inside one attempt);
- the deadline counts from the last renewal that landed (the acquisition at first), so time spent
  recovering before the keeper starts is not time the Lease has left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Final

from gangq.api.meta import parse_timestamp, rfc3339
from gangq.operator.kube import ApiError, KubeClient, resource_path

log = logging.getLogger(__name__)

RENEW_DEADLINE: Final = 2 / 3
"""The part of the Lease's duration within which the leader must renew or stop (client-go's
defaults: renew deadline 10 s of a 15 s lease)."""

RETRY_FRACTION: Final = 1 / 4
"""After a failed renewal the next attempt comes this part of the renew interval later."""

ATTEMPTS: Final = 1
"""Tries per Lease request inside the client: the elector retries on its own schedule."""


def _micro(t: float) -> str:
    """A Lease time (``metav1.MicroTime``)."""
    return rfc3339(t, "microseconds")


def _parse(text: str | None) -> float:
    """A Lease time as epoch seconds; 0 when absent or unreadable (a Lease never renewed)."""
    if not text:
        return 0.0
    try:
        return parse_timestamp(text)
    except ValueError:
        return 0.0


class LeaseElector:
    """Acquire and keep a Lease named ``name`` in ``namespace`` for ``identity``."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        duration: float = 15.0,
        renew_interval: float = 5.0,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.renew_interval = renew_interval
        self.lost = asyncio.Event()
        self.leading = False
        self.renewed_at = 0.0
        """When the Lease was last written by this replica (``time.time()``): acquired or renewed."""
        self._written: dict[str, Any] | None = None  # the Lease as our last write left it

    @property
    def _path(self) -> str:
        return resource_path("coordination.k8s.io", "v1", "leases", self.namespace, self.name)

    def _spec(self, now: float, acquire: float, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.duration)),
            "acquireTime": _micro(acquire),
            "renewTime": _micro(now),
            "leaseTransitions": transitions,
        }

    async def try_acquire(self) -> bool:
        """One attempt: True when this candidate holds the Lease afterwards."""
        now = time.time()
        try:
            lease = await self.client.get(self._path, attempts=ATTEMPTS)
        except ApiError as err:
            if err.status != 404:
                log.warning("leader election: cannot read Lease %s/%s: %s", self.namespace, self.name, err)
                return False
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, now, 0),
            }
            try:
                self._written = await self.client.create(
                    resource_path("coordination.k8s.io", "v1", "leases", self.namespace), body, attempts=ATTEMPTS
                )
            except ApiError:
                return False
            self.renewed_at = now
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _parse(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.duration)
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            acquire = _parse(spec.get("acquireTime")) or now
        elif holder and renewed + duration > now:
            return False  # someone else leads and is alive
        else:
            acquire = now
            transitions += 1
        lease["spec"] = self._spec(now, acquire, transitions)
        try:
            # carries the resourceVersion read: 409 if raced
            self._written = await self.client.replace(self._path, lease, attempts=ATTEMPTS)
        except ApiError as err:
            if err.status != 409:
                log.warning("leader election: cannot update Lease: %s", err)
            return False
        self.renewed_at = now
        return True

    async def renew(self) -> bool:
        """One renewal: an update of the Lease as this replica last wrote it (one request, 409 when
        anyone wrote it since); after a conflict, or with nothing written yet, :meth:`try_acquire`
        (read, then update)."""
        written = self._written
        spec = (written or {}).get("spec") or {}
        if written is None or spec.get("holderIdentity") != self.identity:
            return await self.try_acquire()
        now = time.time()
        lease = {**written, "spec": {**spec, "renewTime": _micro(now)}}
        try:
            self._written = await self.client.replace(self._path, lease, attempts=ATTEMPTS)
        except ApiError as err:
            if err.status == 409:
                self._written = None
                return await self.try_acquire()
            log.warning("leader election: cannot renew Lease %s/%s: %s", self.namespace, self.name, err)
            return False
        self.renewed_at = now
        return True

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until leading (True) or ``stop`` is set (False)."""
        logged = False
        while not stop.is_set():
            if await self.try_acquire():
                self.leading = True
                log.info("leader election: %s leads (Lease %s/%s)", self.identity, self.namespace, self.name)
                return True
            if not logged:
                log.info("leader election: %s waits for Lease %s/%s", self.identity, self.namespace, self.name)
                logged = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=min(self.renew_interval, self.duration / 3))
        return False

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew until ``stop``; set :attr:`lost` once the lease could not be renewed within
        :data:`RENEW_DEADLINE` of its duration. Each attempt is bounded by that deadline, so the
        leader stops before another replica may take the Lease (at its full duration), not after
        a request that hung through an API-server restart: two leaders admitting at once overfill
        the queues. The deadline counts from :attr:`renewed_at` (see the module docstring for the
        retry rule)."""
        pause = self.renew_interval
        while not stop.is_set():
            deadline = (self.renewed_at or time.time()) + self.duration * RENEW_DEADLINE
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, min(pause, deadline - time.time())))
            if stop.is_set():
                break
            renewed = False
            if time.time() < deadline:
                try:
                    renewed = await asyncio.wait_for(self.renew(), timeout=max(0.1, deadline - time.time()))
                except TimeoutError:
                    log.warning("leader election: renewing Lease %s/%s timed out", self.namespace, self.name)
            pause = self.renew_interval if renewed else self.renew_interval * RETRY_FRACTION
            if not renewed and time.time() >= deadline:
                log.error("leader election: %s lost Lease %s/%s", self.identity, self.namespace, self.name)
                self.leading = False
                self.lost.set()
                return

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown so a standby takes over at once."""
        if not self.leading:
            return
        self.leading = False
        try:
            lease = await self.client.get(self._path)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["renewTime"] = _micro(0)
                await self.client.replace(self._path, lease)
        except ApiError as err:
            log.debug("leader election: release failed: %s", err)
