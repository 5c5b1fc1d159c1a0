"""Optional kinds whose CRD is installed after the controller started (the training operator
installed next to a running gangq) are watched from the moment the API server serves them.

kopf re-reads the API server's discovery on every CRD event. kube-apiserver publishes a new CRD's
group in discovery only once the CRD is Established, and asynchronously: kopf may read discovery
on the CRD's last event before the group is in it, and then never watches the kind — its objects
would run unqueued, outside every quota. So while an optional kind (:data:`translate.OPTIONAL`)
is not served, :class:`LateKinds` asks the API server every :data:`POLL_SECONDS` whether it is
now, and once it is, has kopf read discovery again for its group.

That last step uses kopf's own discovery handler (``kopf._core.reactor.observation``), which is
not public API: if a kopf release moves it, the controller says once that a kind installed after
it started is watched after its next restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

import kopf

from gangq.operator.kube import ApiError, KubeClient
from gangq.operator.translate import OPTIONAL, WATCHED

log = logging.getLogger(__name__)

POLL_SECONDS: Final = 10.0

try:
    from kopf._cogs.structs.references import Insights
    from kopf._core.reactor.observation import process_discovered_resource_event
except ImportError:  # pragma: no cover - a kopf release that moved them
    Insights = None
    process_discovered_resource_event = None


def new_insights() -> Any:
    """The insights object to hand to ``kopf.operator`` (None when this kopf has none to share)."""
    return Insights() if Insights is not None else None


async def served(client: KubeClient, group: str, version: str, plural: str) -> bool:
    """Does the API server's discovery list ``plural`` under ``group/version``?"""
    try:
        doc = await client.get(f"/apis/{group}/{version}")
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return any(r.get("name") == plural for r in doc.get("resources") or [] if isinstance(r, dict))


class LateKinds:
    """Watch for optional kinds that become served (see the module docstring)."""

    def __init__(self, client: KubeClient, registry: kopf.OperatorRegistry, settings: kopf.OperatorSettings,
                 insights: Any) -> None:
        self.client = client
        self.registry = registry
        self.settings = settings
        self.insights = insights

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop``: every optional kind served (on the first round too: one that became
        served between kopf's first discovery and its CRD watch) has kopf read its group again."""
        waiting = {(g, v, p) for g, v, p in WATCHED if p in OPTIONAL}
        first = True
        while waiting and not stop.is_set():
            if not first:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), POLL_SECONDS)
            for kind in sorted(waiting):
                try:
                    if not await served(self.client, *kind):
                        continue
                except ApiError as err:
                    log.debug("discovery of %s failed: %s", kind, err)
                    continue
                waiting.discard(kind)
                await self.rescan(kind[0], kind[2])
            if first and waiting:
                log.info("not served (no CRD): %s; watched as soon as they are",
                         ", ".join(sorted(f"{p}.{g}" for g, _, p in waiting)))
            first = False

    async def rescan(self, group: str, plural: str) -> None:
        """Have kopf read discovery for ``group`` again (idempotent when it already watches it)."""
        if process_discovered_resource_event is None or self.insights is None:
            log.warning("%s.%s is served now; gangq watches it after its next restart (this kopf release "
                        "offers no way to re-read discovery)", plural, group)
            return
        log.info("%s.%s is served now: watching it", plural, group)
        await process_discovered_resource_event(
            raw_event={"type": "MODIFIED", "object": {"spec": {"group": group}}},
            settings=self.settings, registry=self.registry, insights=self.insights)
