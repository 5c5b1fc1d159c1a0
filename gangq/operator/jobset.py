"""kopf wiring of the embedded JobSet controller (the logic is :mod:`gangq.jobset`).

``register(registry)`` adds watch handlers for JobSets, for the Jobs, Services and ConfigMaps labelled
``jobset.sigs.k8s.io/jobset-name``, and startup / cleanup handlers. The watch handlers keep an in-memory cache of
what they saw (no list calls) and queue the owning JobSet's key; a few worker tasks take keys from a deduplicating
queue (a key is never reconciled by two workers at once), run the pure reconciler on the cached objects and apply its
actions through :class:`gangq.operator.kube.KubeClient`:

1. the JobSet status, as a merge patch carrying the observed ``resourceVersion`` (a stale cache gets 409 and the key
   is reconciled again once the watch has caught up; nothing else is done on that pass);
2. the headless Service and the MPI hostfile ConfigMap; Job deletions (propagation Foreground); Job creations;
   Job patches (suspend, resume with the merged pod template); Events; the JobSet's own deletion (TTL).

Writes are written through to the cache, so the next pass does not act on what the watch has not delivered yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import kopf

from gangq.api.jobset import plain_json
from gangq.api.meta import Meta, rfc3339
from gangq.jobset import constants as c
from gangq.jobset import frameworks
from gangq.jobset.reconciler import Result, reconcile

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
COMPONENT = "gangq-jobset-controller"


def _rv(obj: Mapping[str, Any]) -> int | None:
    """The object's resourceVersion; None when absent or not an integer (opaque: never ordered)."""
    return Meta(obj).resource_version or None


def _newer(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    if old is None:
        return True
    a, b = _rv(old), _rv(new)
    return a is None or b is None or b >= a


class WorkQueue:
    """Keys to reconcile: each key at most once in the queue and never handed to two workers at once (a key that
    changes while being reconciled is queued again when it is done)."""

    __slots__ = ("_active", "_dirty", "_queue", "_queued")

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._dirty: set[str] = set()

    def add(self, key: str) -> None:
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    async def get(self) -> str:
        key = await self._queue.get()
        self._queued.discard(key)
        self._active.add(key)
        return key

    def done(self, key: str) -> None:
        self._active.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def __len__(self) -> int:
        return len(self._queued)

    def active(self, key: str) -> bool:
        """Is a worker reconciling ``key`` now?"""
        return key in self._active


class JobSetController:
    """The cache, the queue and the workers. One per operator."""

    def __init__(self, *, client: Any = None, credentials: Any = None, workers: int = 4,
                 clock: Any = time.time) -> None:
        self.client = client
        self.credentials = credentials
        self._own_client = client is None
        self.workers = workers
        self.clock = clock
        self.jobsets: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, dict[str, Any]]] = {}  # jobset key -> job name -> Job
        self.services: set[str] = set()  # "<ns>/<name>"
        self.configmaps: set[str] = set()
        self.queue: WorkQueue | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: dict[str, asyncio.TimerHandle] = {}

    # --- lifecycle ----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.client is None:
            from gangq.operator.kube import Credentials, KubeClient

            creds = self.credentials or Credentials.load(os.environ.get("KUBECONFIG") or None)
            self.client = KubeClient(creds)
        self.queue = WorkQueue()
        self._tasks = [asyncio.create_task(self._worker(), name=f"jobset-worker-{i}") for i in range(self.workers)]
        log.info("embedded JobSet controller started with %d workers", self.workers)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        for timer in self._timers.values():
            timer.cancel()
        if self._own_client and self.client is not None:
            await self.client.close()

    def settled(self, key: str) -> bool:
        """Has this controller seen the JobSet ``key`` suspended (or gone), with no reconcile of it
        under way? Then it starts no child Job of it any more: a reconcile that began on the
        running JobSet would create its Jobs after the eviction read found none (see
        :mod:`gangq.operator.evictions`)."""
        if self.queue is not None and self.queue.active(key):
            return False
        obj = self.jobsets.get(key)
        return obj is None or bool((obj.get("spec") or {}).get("suspend"))

    def child_jobs_rv(self, key: str) -> int | None:
        """The newest resourceVersion of a child Job of the JobSet ``key`` this controller created,
        changed or saw (its writes go through to the cache), 0 when none; None when one is not an
        integer. Once :meth:`settled`, it writes no other: a watch stream past it has shown them all."""
        newest = 0
        for job in (self.jobs.get(key) or {}).values():
            rv = _rv(job)
            if rv is None:
                return None
            newest = max(newest, rv)
        return newest

    def enqueue(self, key: str) -> None:
        if self.queue is not None:
            self.queue.add(key)

    def enqueue_after(self, key: str, delay: float) -> None:
        old = self._timers.pop(key, None)
        if old is not None and old.when() <= asyncio.get_running_loop().time() + delay:
            self._timers[key] = old
            return
        if old is not None:
            old.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(max(delay, 0.0), self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.enqueue(key)

    # --- watch events -------------------------------------------------------------------------------------------
    def on_jobset(self, type: str | None, body: Mapping[str, Any]) -> None:
        meta = Meta(body)
        key = f"{meta.namespace_or_default}/{meta.name}"
        if type == "DELETED":
            self.jobsets.pop(key, None)
            return
        obj = plain_json(body)
        if _newer(self.jobsets.get(key), obj):
            self.jobsets[key] = obj
        self.enqueue(key)

    def on_job(self, type: str | None, body: Mapping[str, Any]) -> None:
        meta = Meta(body)
        owner = meta.labels.get(c.JOBSET_NAME_KEY)
        if not owner:
            return
        key = f"{meta.namespace_or_default}/{owner}"
        jobs = self.jobs.setdefault(key, {})
        name = meta.name
        if type == "DELETED":
            jobs.pop(name, None)
            if not jobs:
                self.jobs.pop(key, None)
        else:
            obj = plain_json(body)
            if _newer(jobs.get(name), obj):
                jobs[name] = obj
        self.enqueue(key)

    def _on_named(self, cache: set[str], type: str | None, body: Mapping[str, Any]) -> None:
        meta = Meta(body)
        ns = meta.namespace_or_default
        name = f"{ns}/{meta.name}"
        if type == "DELETED":
            cache.discard(name)
        else:
            cache.add(name)
        owner = meta.labels.get(c.JOBSET_NAME_KEY)
        if owner:
            self.enqueue(f"{ns}/{owner}")

    def on_service(self, type: str | None, body: Mapping[str, Any]) -> None:
        self._on_named(self.services, type, body)

    def on_configmap(self, type: str | None, body: Mapping[str, Any]) -> None:
        self._on_named(self.configmaps, type, body)

    # --- workers ------------------------------------------------------------------------------------------------
    async def _worker(self) -> None:
        assert self.queue is not None
        while True:
            key = await self.queue.get()
            try:
                await self.reconcile_key(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reconciling JobSet %s failed; retrying in 1s", key)
                self.enqueue_after(key, 1.0)
            finally:
                self.queue.done(key)

    async def reconcile_key(self, key: str) -> Result | None:
        obj = self.jobsets.get(key)
        if obj is None:
            return None
        ns, name = key.split("/", 1)
        spec = obj.get("spec") or {}
        subdomain = (spec.get("network") or {}).get("subdomain") or name
        anns = Meta(obj).annotations
        cm = f"{ns}/{name}-mpi-hostfile"
        res = reconcile(obj, list(self.jobs.get(key, {}).values()), service_exists=f"{ns}/{subdomain}" in self.services,
                        configmap_exists=cm in self.configmaps if anns.get(c.FRAMEWORK_ANNOTATION) == "mpi" else True,
                        now=self.clock())
        if res.skipped:
            log.debug("JobSet %s skipped: %s", key, res.skipped)
            return res
        await self.apply(key, obj, res)
        return res

    async def apply(self, key: str, obj: dict[str, Any], res: Result) -> None:
        from gangq.operator.kube import ApiError

        client = self.client
        assert client is not None
        ns, name = key.split("/", 1)
        base = f"/apis/{c.GROUP}/{c.VERSION}/namespaces/{ns}/{c.PLURAL}/{name}"
        jobs_path = f"/apis/batch/v1/namespaces/{ns}/jobs"
        if res.status is not None:
            body = {"metadata": {"resourceVersion": Meta(obj).resource_version_text or None}, "status": res.status}
            try:
                new = await client.request("PATCH", f"{base}/status", body=body, content_type=MERGE_PATCH)
            except ApiError as err:
                if err.status in (404, 409):
                    log.debug("JobSet %s status write: %s; reconciling again", key, err)
                    self.enqueue_after(key, 0.5)
                    return
                raise
            if _newer(self.jobsets.get(key), new):
                self.jobsets[key] = new
            obj = new
        if res.create_service is not None:
            await self._create_named(self.services, f"/api/v1/namespaces/{ns}/services", res.create_service, obj,
                                     c.SERVICE_CREATION_FAILED_REASON)
        if res.create_configmap is not None:
            await self._create_named(self.configmaps, f"/api/v1/namespaces/{ns}/configmaps", res.create_configmap,
                                     obj, "ConfigMapCreationFailed")
        jobs = self.jobs.setdefault(key, {})
        if res.delete_jobs:
            await asyncio.gather(*(self._delete_job(jobs_path, n, jobs) for n in res.delete_jobs))
        if res.create_jobs:
            errors = await asyncio.gather(*(self._create_job(jobs_path, j, jobs) for j in res.create_jobs))
            failed = [e for e in errors if e]
            if failed:
                await self.post_event(obj, "Warning", c.JOB_CREATION_FAILED_REASON, "; ".join(failed))
                self.enqueue_after(key, 2.0)
        for upd in res.update_jobs:
            try:
                if upd.clear_start_time:
                    await client.request("PATCH", f"{jobs_path}/{upd.name}/status",
                                         body={"status": {"startTime": None}}, content_type=MERGE_PATCH)
                new_job = await client.request("PATCH", f"{jobs_path}/{upd.name}", body=upd.patch,
                                               content_type=MERGE_PATCH)
            except ApiError as err:
                if err.status != 404:
                    raise
                continue
            if _newer(jobs.get(upd.name), new_job):
                jobs[upd.name] = new_job
        for event in res.events:
            await self.post_event(obj, event.type, event.reason, event.message)
        if res.delete_jobset:
            try:
                await client.request("DELETE", base, body={"propagationPolicy": "Foreground"})
                log.info("JobSet %s deleted: ttlSecondsAfterFinished has passed", key)
            except ApiError as err:
                if err.status != 404:
                    raise
        if res.requeue_after is not None:
            self.enqueue_after(key, res.requeue_after)

    async def _create_named(self, cache: set[str], path: str, body: dict[str, Any], owner: Mapping[str, Any],
                            reason: str) -> None:
        from gangq.operator.kube import ApiError

        assert self.client is not None
        full = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        try:
            await self.client.request("POST", path, body=body)
        except ApiError as err:
            if err.status != 409:
                await self.post_event(owner, "Warning", reason, str(err))
                raise
        cache.add(full)

    async def _create_job(self, path: str, job: dict[str, Any], jobs: dict[str, dict[str, Any]]) -> str | None:
        from gangq.operator.kube import ApiError

        assert self.client is not None
        name = job["metadata"]["name"]
        try:
            new = await self.client.request("POST", path, body=job)
        except ApiError as err:
            if err.status == 409:
                return None  # an earlier attempt's Job still holds the name, or the cache is behind
            return f"job {name!r} creation failed with error: {err}"
        if _newer(jobs.get(name), new):
            jobs[name] = new
        return None

    async def _delete_job(self, path: str, name: str, jobs: dict[str, dict[str, Any]]) -> None:
        from gangq.operator.kube import ApiError

        assert self.client is not None
        try:
            new = await self.client.request("DELETE", f"{path}/{name}", body={"propagationPolicy": "Foreground"})
        except ApiError as err:
            if err.status == 404:
                jobs.pop(name, None)
                return
            raise
        if new.get("kind") == "Job" and Meta(new).deleting:
            if _newer(jobs.get(name), new):
                jobs[name] = new
        else:
            jobs.pop(name, None)

    async def post_event(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        from gangq.operator.kube import ApiError

        assert self.client is not None
        meta = Meta(obj)
        ns = meta.namespace_or_default
        now = rfc3339(self.clock())
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.name}.", "namespace": ns},
            "involvedObject": {"apiVersion": c.API_VERSION, "kind": c.KIND, "name": meta.name,
                               "namespace": ns, "uid": meta.uid or None,
                               "resourceVersion": meta.resource_version_text or None},
            "reason": reason, "message": message[:1024], "type": type, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
        }
        try:
            await self.client.request("POST", f"/api/v1/namespaces/{ns}/events", body=event)
        except ApiError as err:
            log.warning("could not post Event %s on JobSet %s/%s: %s", reason, ns, meta.name, err)


def register(registry: kopf.OperatorRegistry, *, client: Any = None, credentials: Any = None,
             workers: int = 4) -> JobSetController:
    """Add the embedded JobSet controller's handlers to ``registry`` (async: they run on kopf's event loop).

    ``client`` is a :class:`gangq.operator.kube.KubeClient` to share; without one the controller opens its own at
    startup from ``credentials`` (a :class:`gangq.operator.kube.Credentials`), else from $KUBECONFIG or the in-cluster
    service account. Returns the controller (its cache, for tests)."""
    ctl = JobSetController(client=client, credentials=credentials, workers=workers)
    selector = {c.JOBSET_NAME_KEY: kopf.PRESENT}

    @kopf.on.startup(id="jobset-controller-start", registry=registry)
    async def _start(**_: Any) -> None:
        await ctl.start()

    @kopf.on.cleanup(id="jobset-controller-stop", registry=registry)
    async def _stop(**_: Any) -> None:
        await ctl.stop()

    @kopf.on.event(group=c.GROUP, version=c.VERSION, plural=c.PLURAL,
                   id="jobset-controller-jobsets", registry=registry)
    async def _jobset(type: str | None, body: kopf.Body, **_: Any) -> None:
        ctl.on_jobset(type, body)

    @kopf.on.event(group="batch", version="v1", plural="jobs", labels=selector,
                   id="jobset-controller-jobs", registry=registry)
    async def _job(type: str | None, body: kopf.Body, **_: Any) -> None:
        ctl.on_job(type, body)

    @kopf.on.event(group="", version="v1", plural="services", labels=selector,
                   id="jobset-controller-services", registry=registry)
    async def _service(type: str | None, body: kopf.Body, **_: Any) -> None:
        ctl.on_service(type, body)

    @kopf.on.event(group="", version="v1", plural="configmaps", labels=selector,
                   id="jobset-controller-configmaps", registry=registry)
    async def _configmap(type: str | None, body: kopf.Body, **_: Any) -> None:
        ctl.on_configmap(type, body)

    return ctl


__all__ = ["JobSetController", "WorkQueue", "frameworks", "register"]
