"""Becoming leader: rebuild the engine from the API before the watches start.

Recovery works on a complete view or not at all: every list is retried until it succeeds, and
until then the controller admits, evicts and writes nothing. A recovery that went on without its
ClusterQueues (a 503 for a few seconds during a rollout) found every admitted gang's queue
missing and suspended them: running training jobs stopped by a blip.

List the queue objects, nodes, pods, the objects gangs are built from (a TrainJob's runtimes) and
the queued kinds; put admitted objects back first with the admission recorded on them (nothing is
admitted twice, and no write is needed), and evicted ones whose pods still run with the admission
their eviction record names (they hold it until the pods are gone, as without the restart);
schedule again the ones whose recorded admission cannot be kept (and suspend those that no longer
fit), then queue the rest in creation order. Workload conditions written before the restart are
carried over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from gangq.api.meta import Meta, object_key, resource_version
from gangq.core import compiled
from gangq.core.decisions import Admission, Decision
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.registry import BY_PLURAL, REFERENCE_RESOURCES, pod_gang, queued
from gangq.operator.gangs import DEACTIVATED_BY_ADMIN, Gangs
from gangq.operator.kinds import Kinds
from gangq.operator.kube import ApiError, resource_path
from gangq.operator.state import ControllerState
from gangq.operator.status import Statuses
from gangq.operator.translate import (
    ADMISSION_ANNOTATION,
    CONFIG_KINDS,
    GROUP,
    OPTIONAL_KINDS,
    VERSION,
    WATCHED,
    recorded_admission,
    recorded_eviction,
    workload_active,
)

log = logging.getLogger(__name__)


async def recover(state: ControllerState, kinds: Kinds, gangs: Gangs, statuses: Statuses) -> None:
    """Rebuild the engine and the entries from the API (see the module docstring); sets
    ``state.recovered``."""
    listed: dict[str, list[dict[str, Any]]] = {}
    for group, version, plural in WATCHED:
        listed[plural] = await list_until_listed(state, group, version, plural)
    now = time.time()
    for plural in CONFIG_KINDS:
        for obj in listed[plural]:
            kinds.apply(plural, "ADDED", obj, now)
    for resource in REFERENCE_RESOURCES:  # what gangs are built from (a TrainJob's runtime), before them
        kinds.references_listed(resource.plural, listed[resource.plural])
    await gangs.runtimes.load()  # before the gangs are queued: their expected run times
    wls = await list_until_listed(state, GROUP, VERSION, "workloads")
    existing_workloads = {object_key(w): w for w in wls}

    def adopt(key: str) -> None:
        entry = state.entries.get(key)
        if entry is not None:
            wl = existing_workloads.get(f"{entry.namespace}/{entry.wl_name}")
            if wl is not None:
                statuses.adopt(entry, wl.get("status") or {})

    def keep_deactivated(key: str) -> None:
        """A gang deactivated before the restart stays so (its Workload says ``spec.active: false``)."""
        entry = state.entries.get(key)
        if entry is not None:
            wl = existing_workloads.get(f"{entry.namespace}/{entry.wl_name}")
            if wl is not None and not workload_active(wl):
                gangs.deactivate(entry, DEACTIVATED_BY_ADMIN, now)

    pods = listed["pods"]

    def gang_of(pod: dict[str, Any]) -> str | None:
        owner = pod_gang(pod)
        return owner[0] if owner is not None else None

    live_gangs = {gang_of(p) for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")}
    admitted: list[tuple[WorkloadKind, dict[str, Any]]] = []
    stopping: list[tuple[WorkloadKind, dict[str, Any]]] = []
    started: list[tuple[WorkloadKind, dict[str, Any]]] = []
    rest: list[tuple[WorkloadKind, dict[str, Any]]] = []
    for kind in BY_PLURAL.values():
        for obj in kinds.recovery_objects(kind, listed):
            if not state.watched_namespace(obj):
                continue
            ann = Meta(obj).annotations
            suspended = kind.suspended(obj)
            if not queued(kind, obj, state.default_queue(obj)) or kind.terminal(obj) is not None:
                rest.append((kind, obj))
            elif ADMISSION_ANNOTATION in ann and not suspended:
                admitted.append((kind, obj))
            elif suspended and ADMISSION_ANNOTATION not in ann and kind.key_of(obj) in live_gangs and (
                    (recorded_eviction(obj) or {}).get("admission")):
                stopping.append((kind, obj))  # evicted, its pods not gone yet: it holds its quota until they are
            elif suspended and ADMISSION_ANNOTATION not in ann and kind.key_of(obj) in live_gangs:
                # created unsuspended and suspended before the restart, its pods not gone yet: it
                # holds its queue's quota until they are (an unsuspended one: as it comes, below)
                started.append((kind, obj))
            else:
                rest.append((kind, obj))
    recovering: set[str] = set()
    restored: set[str] = set()
    for kind, obj in admitted:
        key = kind.key_of(obj)
        entry = gangs.new_entry(key, obj, kind)
        adopt(key)
        if gangs.submit(entry, now):
            if gangs.restore(entry, now):
                restored.add(key)
            else:
                recovering.add(key)  # not restorable as recorded: admit again if it fits, else suspend
        keep_deactivated(key)
    for kind, obj in stopping:
        key = kind.key_of(obj)
        entry = gangs.new_entry(key, obj, kind)
        adopt(key)
        if gangs.submit(entry, now) and not gangs.restore_stopping(entry, now):
            log.warning("recovery: %s %s was evicted and its pods still run, but its recorded admission "
                        "cannot be restored: queued", kind.kind, key)
        keep_deactivated(key)
    for kind, obj in started:
        key = kind.key_of(obj)
        entry = gangs.new_entry(key, obj, kind)
        adopt(key)
        if gangs.submit(entry, now):
            gangs.hold_started(entry, now)
        keep_deactivated(key)
    kinds.delete_queues_after_recovery()  # restored first: their gangs keep the quota recorded
    gang_pods = [p for p in pods if gang_of(p) in recovering]
    for pod in pods:
        if gang_of(pod) not in recovering:
            kinds.apply("pods", "ADDED", pod, now)
    decisions = state.schedule(now)
    readmitted: set[str] = set(restored)
    others: list[Decision] = []
    for d in decisions:
        if isinstance(d, Admission) and d.workload in recovering:
            entry = state.entries[d.workload]
            gangs.mark_admitted(entry, d, now)
            readmitted.add(d.workload)
            recorded = recorded_admission(entry.obj)
            if recorded is not None and recorded.get("clusterQueue") != d.cluster_queue:
                log.warning("recovery: %s %s was admitted to %s, now charged to %s",
                            entry.kind.kind, entry.key, recorded.get("clusterQueue"), d.cluster_queue)
        else:
            others.append(d)
    for key in recovering - readmitted:
        log.warning("recovery: admitted %s %s no longer fits its queue: suspending it",
                    state.entries[key].kind.kind, key)
        gangs.writer.write_suspend(state.entries[key], restore=True, eviction=(
            "RestoreFailed", "recorded admission no longer fits its ClusterQueue after a restart"))
    for pod in gang_pods:
        kinds.apply("pods", "ADDED", pod, now)
    gangs.handle(others, now)
    for kind, obj in sorted(rest, key=lambda ko: Meta(ko[1]).creation_timestamp):
        kinds.recovered_object(kind, obj, now)
        adopt(kind.key_of(obj))
        keep_deactivated(kind.key_of(obj))
    kinds.pod_groups.release()
    log.info(
        "recovered: %d queued workloads (%d admitted), %d nodes, %d pods, %d ClusterQueues (engine: %s)",
        len(state.entries), len(readmitted), len(listed["nodes"]), len(pods), len(state.engine.cluster_queues),
        "mypyc-compiled" if compiled() else "pure Python",
    )
    state.recovered.set()
    kinds.release_deleted_queues()


RETRY_DELAYS = (1.0, 2.0, 5.0, 10.0)  # then every 10 s; each request retries on its own first


async def list_until_listed(state: ControllerState, group: str, version: str, plural: str) -> list[dict[str, Any]]:
    """Every object of ``plural``, retrying the list (with backoff) until the API server answers it.
    An optional kind (:data:`OPTIONAL_KINDS`) whose CRD does not exist has none (a 404 alone does not say so: an API
    server that has just started serves a CRD's objects only once it has read the CRD)."""
    failures = 0
    while True:
        try:
            result = await state.client.list(resource_path(group, version, plural))
            return list(result.get("items") or [])
        except ApiError as err:
            if err.status == 404 and plural in OPTIONAL_KINDS:
                try:
                    if not await crd_exists(state, group, plural):
                        log.info("recovery: %s are not served (no CRD %s.%s): none to queue", plural, plural, group)
                        return []
                except ApiError:
                    pass
            delay = RETRY_DELAYS[min(failures, len(RETRY_DELAYS) - 1)]
            failures += 1
            log.warning("recovery: cannot list %s (%s); nothing is admitted, evicted or written until it "
                        "can (attempt %d, next in %.0f s)", plural, err, failures, delay)
            await asyncio.sleep(delay)


async def crd_exists(state: ControllerState, group: str, plural: str) -> bool:
    """Does the CustomResourceDefinition of ``plural`` exist? (ApiError when that cannot be known)."""
    try:
        await state.client.get(resource_path("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                                             None, f"{plural}.{group}"))
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


async def resync_queued(state: ControllerState, forget: Callable[[str, dict[str, Any]], None]) -> None:
    """After the watches started: forget queued objects of every kind deleted between the
    recovery list and kopf's own initial list (no DELETED event reaches us for them).
    ``forget(plural, obj)`` queues a DELETED event."""
    for kind in BY_PLURAL.values():
        try:
            result = await state.client.list(resource_path(kind.group, kind.version, kind.plural))
        except ApiError as err:
            if not (err.status == 404 and kind.optional):
                log.warning("resync: cannot list %s (%s)", kind.plural, err)
            continue
        present = {kind.key_of(o) for o in result.get("items") or []}
        list_rv = resource_version(result)
        for key, entry in list(state.entries.items()):
            if entry.kind is kind and key not in present and (entry.rv <= list_rv or not list_rv):
                forget(kind.plural, entry.obj)
