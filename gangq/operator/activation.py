"""The admin's switch on a Workload, ``spec.active``, watched apart from the Workloads' other writes.

Every status write the controller makes to a Workload came back through a watch of all
Workloads: on a busy cluster four in ten of the controller's watch events, and the API server's
work to encode and send them, for a switch an admin flips rarely. The Workload CRD declares
``spec.active`` a selectable field, and the controller watches ``fieldSelector=spec.active=false``
only:

- ADDED / MODIFIED: a deactivated Workload (an admin's switch, or the controller's own after the
  pods-ready backoff limit, which changes nothing);
- DELETED: the Workload left the selection, set active again or deleted; which of the two is
  read back (a GET): a reactivation queues its gang again, a deleted Workload changes nothing
  (the gang keeps its state and its next status write creates the Workload again);
- every (re)list: each listed Workload as ADDED, and each gang the controller holds deactivated
  whose Workload the list does not show is read back the same way, since the switch may have
  moved while no watch was open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any, Final

import aiohttp

from gangq.api.meta import Meta
from gangq.operator.kube import ApiError, KubeClient, resource_path
from gangq.operator.translate import GROUP, VERSION

if TYPE_CHECKING:
    from gangq.operator.controller import Controller

log = logging.getLogger(__name__)

SELECTOR: Final = "spec.active=false"
WATCH_SECONDS: Final = 300
"""How long one watch request lasts on the server (``timeoutSeconds``) before it is resumed."""
BACKOFF: Final = (0.5, 1.0, 2.0, 5.0, 10.0)


class _Expired(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class ActivationWatch:
    """Feed the controller the Workloads whose ``spec.active`` is false, and those that stop being."""

    def __init__(self, client: KubeClient, controller: Controller) -> None:
        self.client = client
        self.controller = controller
        self.path = resource_path(GROUP, VERSION, "workloads")

    async def run(self, stop: asyncio.Event) -> None:
        """List and watch until ``stop``; errors are retried with backoff (the controller goes on)."""
        rv: str | None = None
        failures = 0
        while not stop.is_set():
            try:
                if rv is None:
                    rv = await self._list()
                rv = await self._watch(rv, stop)
                failures = 0
            except _Expired:
                rv = None
            except (ApiError, aiohttp.ClientError, TimeoutError, ValueError) as err:
                delay = BACKOFF[min(failures, len(BACKOFF) - 1)]
                failures += 1
                log.warning("watch of deactivated Workloads: %s; again in %.1f s", err, delay)
                if isinstance(err, ApiError) and err.status in (400, 404, 422):
                    rv = None  # a selector or resource the server does not know (yet): list again
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)

    async def _list(self) -> str:
        result = await self.client.list(self.path, {"fieldSelector": SELECTOR})
        listed: set[tuple[str, str]] = set()
        for obj in result.get("items") or []:
            meta = Meta(obj)
            listed.add((meta.namespace, meta.name))
            await self._event("ADDED", obj)
        for entry in list(self.controller.state.entries.values()):
            if not entry.active and entry.created and (entry.namespace, entry.wl_name) not in listed:
                await self._read_back(entry.namespace, entry.wl_name)
        return Meta(result).resource_version_text or "0"

    async def _watch(self, rv: str, stop: asyncio.Event) -> str:
        params = {
            "watch": "1",
            "fieldSelector": SELECTOR,
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        session = await self.client.session()
        await self.client.bucket.take()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=WATCH_SECONDS + 30)
        async with session.get(self.client.credentials.server + self.path, params=params, timeout=timeout) as resp:
            if resp.status == 410:
                raise _Expired
            if resp.status != 200:
                raise ApiError(resp.status, "", (await resp.text())[:300])
            async for raw in resp.content:
                if stop.is_set():
                    break
                line = raw.strip()
                if not line:
                    continue
                event = json.loads(line)
                kind = str(event.get("type") or "")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Expired
                    raise ApiError(int(obj.get("code") or 0), str(obj.get("reason") or ""), str(obj.get("message")))
                rv = Meta(obj).resource_version_text or rv
                if kind != "BOOKMARK":
                    await self._event(kind, obj)
        return rv

    async def _event(self, kind: str, obj: dict[str, Any]) -> None:
        if not self.controller.state.watched_namespace(obj):
            return
        if kind == "DELETED":
            meta = Meta(obj)
            await self._read_back(meta.namespace, meta.name)
        elif self.controller.gangs.activation_changed(obj):
            self.controller.enqueue("workloads", kind, obj)

    async def _read_back(self, namespace: str, name: str) -> None:
        """The Workload as it is now, to the controller if its switch moved; nothing when it is gone."""
        try:
            obj = await self.client.get(resource_path(GROUP, VERSION, "workloads", namespace, name))
        except ApiError as err:
            if err.status != 404:
                raise
            return
        if self.controller.gangs.activation_changed(obj):
            self.controller.enqueue("workloads", "MODIFIED", obj)
