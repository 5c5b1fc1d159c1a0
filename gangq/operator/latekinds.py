"""Optional kinds whose CRD is installed after the controller started (the training operator
installed next to a running gangq) are watched from the moment the API server serves them.

kopf re-reads the API server's discovery on every CRD event. kube-apiserver publishes a new CRD's
group in discovery only once the CRD is Established, and asynchronously: kopf may read discovery
on the CRD's last event before the group is in it, and then never watches the kind — its objects
would run unqueued, outside every quota. So while an optional kind (:data:`gangq.operator.translate.OPTIONAL_KINDS`)
is not served, :class:`LateKinds` asks the API server every :data:`POLL_SECONDS` whether it is
now, and once it is, has kopf read discovery again for its group.

That last step uses kopf's own discovery handler (``kopf._core.reactor.observation``), which is
not public API: if a kopf release moves it, the controller says once that a kind installed after
it started is watched after its next restart. It calls the API through kopf's credentials, which
kopf keeps in a context variable of its own tasks: the controller hands kopf the credentials'
vault (:func:`new_vault`) and the poller sets that variable in its own task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, Final

import kopf

from gangq.operator.kube import ApiError, KubeClient
from gangq.operator.translate import OPTIONAL_KINDS, WATCHED

log = logging.getLogger(__name__)

POLL_SECONDS: Final = 10.0

# kopf's internals, or None when this kopf release has moved them.
Insights: Callable[[], Any] | None
Vault: Callable[[], Any] | None
vault_var: ContextVar[Any] | None
process_discovered_resource_event: Callable[..., Coroutine[Any, Any, None]] | None
try:
    from kopf._cogs.clients.auth import vault_var as _vault_var
    from kopf._cogs.structs.credentials import Vault as _Vault
    from kopf._cogs.structs.references import Insights as _Insights
    from kopf._core.reactor.observation import process_discovered_resource_event as _process_discovered_resource_event
except ImportError:  # pragma: no cover - a kopf release that moved them
    Insights = Vault = vault_var = process_discovered_resource_event = None
else:
    Insights, Vault, vault_var = _Insights, _Vault, _vault_var
    process_discovered_resource_event = _process_discovered_resource_event


def new_insights() -> Any:
    """The insights object to hand to ``kopf.operator`` (None when this kopf has none to share)."""
    return Insights() if Insights is not None else None


def new_vault() -> Any:
    """The credentials vault to hand to ``kopf.operator`` (None when this kopf has none to share)."""
    return Vault() if Vault is not None else None


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
                 insights: Any, vault: Any) -> None:
        self.client = client
        self.registry = registry
        self.settings = settings
        self.insights = insights
        self.vault = vault

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop``: every optional kind served (on the first round too: one that became
        served between kopf's first discovery and its CRD watch) has kopf read its group again."""
        if vault_var is not None and self.vault is not None:
            vault_var.set(self.vault)  # this task's own context: kopf's requests read it
        waiting = {(g, v, p) for g, v, p in WATCHED if p in OPTIONAL_KINDS}
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
        if process_discovered_resource_event is None or self.insights is None or self.vault is None:
            log.warning("%s.%s is served now; gangq watches it after its next restart (this kopf release "
                        "offers no way to re-read discovery)", plural, group)
            return
        log.info("%s.%s is served now: watching it", plural, group)
        try:
            await process_discovered_resource_event(
                raw_event={"type": "MODIFIED", "object": {"spec": {"group": group}}},
                settings=self.settings, registry=self.registry, insights=self.insights)
        except Exception:
            log.exception("%s.%s is served now, but kopf could not read discovery: it is watched after the "
                          "next restart", plural, group)

