"""Workload, ClusterQueue and LocalQueue status: what is written, and when (docs/operator.md, "The
write budget").

A Workload's status is written ``status.workloadDelaySeconds`` after a change that matters
(admission, eviction, finish, an error reason), and a plain queueing reason at most every
``status.pendingMinIntervalSeconds`` after ``status.pendingDelaySeconds``: every write is an API
request the cluster pays for, and a person reading the Workload needs the reason, not each step.
The status is computed when its write goes out, not when it became due, so a write that waited
behind admissions writes the latest state and the states in between are never sent. Queue status
is written at most every ``status.queueIntervalSeconds``, only on change.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Mapping
from typing import Any, Final

from gangq.api.meta import object_key, rfc3339
from gangq.api.queues import PROVISIONING_REQUEST_CONTROLLER, AdmissionCheck
from gangq.core.errors import SpecError
from gangq.operator.entry import Entry, EntryState
from gangq.operator.kube import ApiError, resource_path
from gangq.operator.state import ControllerState
from gangq.operator.translate import API_VERSION, GPU, GROUP, VERSION, admission_json, quantity_text
from gangq.operator.writer import Write, Writer

ORDINARY_PENDING: Final = frozenset(
    {"Pending", "InsufficientQuota", "InsufficientNodes", "InsufficientMinResources", "WaitingForPreemption",
     "BlockedByHead", "BlockedByReservation"}
)
"""Pending reasons that are plain queueing (written lazily); anything else is written promptly."""

_UNCOMPARED: Final = ("position", "pendingInQueue")  # move with every admission ahead: ride along


class Statuses:
    """The Workload writes that are due (a heap by due time) and the queue statuses last written."""

    def __init__(self, state: ControllerState, writer: Writer) -> None:
        self.state = state
        self.writer = writer
        self.dirty: list[tuple[float, int, str]] = []  # heap of (due, seq, key)
        self._dirty_seq = 0
        self.queue_errors: dict[str, str] = {}  # "cq:<name>" / "lq:<ns/name>" / "co:<name>" -> spec error
        self.queue_written: dict[str, Any] = {}  # "cq:<name>" / "lq:<ns/name>" / "co:<name>" -> status last written
        self.flavor_errors: dict[str, str] = {}  # ResourceFlavor name -> why it was left out of the engine
        self.missing_topologies: dict[str, str] = {}  # ResourceFlavor name -> the missing Topology it names
        # ClusterQueue -> (reason, message): it names admission checks, so the engine has it held (Kinds)
        self.check_problems: dict[str, tuple[str, str]] = {}
        self.admission_checks: Mapping[str, AdmissionCheck] = {}  # the AdmissionCheck objects, by name (Kinds')
        self._last_queue_flush = 0.0

    # ------------------------------------------------------------------------------------------
    # Workloads
    # ------------------------------------------------------------------------------------------

    def mark(self, entry: Entry, now: float, *, urgent: bool) -> None:
        """The entry's Workload status changed: write it ``urgent``-ly or as plain queueing."""
        cfg = self.state.config.status
        if urgent:
            due = now + cfg.workload_delay_seconds
        else:
            due = max(now + cfg.pending_delay_seconds, entry.last_pending_write + cfg.pending_min_interval_seconds)
        if entry.due is None or due < entry.due:
            entry.due = due
            self._dirty_seq += 1
            heapq.heappush(self.dirty, (due, self._dirty_seq, entry.key))

    def became_next(self, entry: Entry, now: float) -> None:
        """``entry`` is first in its ClusterQueue now: its Workload says so within
        ``workloadDelaySeconds`` if it said otherwise. "Position 2 of 2" for a minute after the gang
        ahead left tells its owner something false about what they wait for; the other positions
        are figures that ride along with the next write (one write per queue's new head, not one
        per pending gang per admission)."""
        if entry.created and entry.state == EntryState.PENDING and not (entry.last_written or {}).get("next"):
            self.mark(entry, now, urgent=True)

    def next_due(self) -> float | None:
        return self.dirty[0][0] if self.dirty else None

    def flush(self, now: float) -> None:
        """Start the Workload writes that are due, and the queue statuses when their interval is up."""
        self._flush_workloads(now)
        if now - self._last_queue_flush >= self.state.config.status.queue_interval_seconds:
            self._last_queue_flush = now
            self._flush_queues()

    def workload_status(self, entry: Entry) -> dict[str, Any]:
        """The Workload's status as it would be written now."""
        state = entry.state
        shown = "Evicted" if state is EntryState.EVICTING else state.value  # the status's text, a plain str
        position = pending = None
        if state is EntryState.PENDING:
            pos = self.state.engine.position(entry.key)
            if pos is not None:
                position, pending = pos
        if state is EntryState.ADMITTED:
            provisioning = entry.admission is not None and entry.admission.provisioning
            ready = entry.conditions.get("PodsReady", {}).get("status") == "True"
            reason, message = ("Provisioning" if provisioning and not ready else "Admitted"), entry.message
        elif state is EntryState.FINISHED:
            cond = entry.conditions.get("Finished", {})
            reason, message = str(cond.get("reason", "Finished")), str(cond.get("message", ""))
        else:
            reason, message = entry.reason, entry.message
        if state is EntryState.PENDING and position is not None:
            message = f"{message}; position {position} of {pending}" if "position" not in message else message
        return {
            "state": shown,
            "clusterQueue": entry.cluster_queue,
            "position": position,
            "pendingInQueue": pending,
            "reason": reason,
            "message": message,
            "admission": admission_json(entry.admission) if entry.admission is not None else None,
            "requeueState": entry.requeue,
            "conditions": sorted(entry.conditions.values(), key=lambda c: c["type"]),
        }

    def adopt(self, entry: Entry, status: Mapping[str, Any]) -> None:
        """Take over the status of a Workload written before a restart (no rewrite when nothing changed)."""
        entry.created = True
        for cond in status.get("conditions") or []:
            if isinstance(cond, dict) and cond.get("type"):
                entry.conditions.setdefault(str(cond["type"]), dict(cond))
        entry.requeue = entry.requeue or status.get("requeueState")
        entry.last_written = _comparable(status)

    def _workload_body(self, entry: Entry) -> dict[str, Any]:
        spec: dict[str, Any]
        if entry.spec is not None:
            s = entry.spec
            spec = {"queueName": s.queue_name, "priority": s.priority, "podSets": entry.pod_sets}
            if s.priority_class:
                spec["priorityClassName"] = s.priority_class
            if s.min_member is not None:
                spec["minMember"] = s.min_member
            if s.min_resources:
                spec["minResources"] = {r: quantity_text(r, v) for r, v in s.min_resources.items()}
            if s.runtime_limit is not None:
                spec["runtimeLimitSeconds"] = s.runtime_limit
            if not entry.active:
                spec["active"] = False
        else:
            names = entry.kind.pod_set_names(entry.obj)
            spec = {"queueName": entry.lq.partition("/")[2], "podSets": [{"name": n, "count": 0} for n in names]}
        return {
            "apiVersion": API_VERSION,
            "kind": "Workload",
            "metadata": {
                "name": entry.wl_name,
                "namespace": entry.namespace,
                "labels": {entry.kind.owner_label: entry.name[:63]},
                "ownerReferences": [entry.kind.owner_reference(entry.obj)],
            },
            "spec": spec,
        }

    def write_active(self, entry: Entry) -> None:
        """Set the Workload's ``spec.active`` to ``entry.active`` (after the status writes queued
        before it; a Workload not created yet gets it in its body)."""
        key = entry.key
        path = resource_path(GROUP, VERSION, "workloads", entry.namespace, entry.wl_name)

        async def write() -> None:
            if self.state.entries.get(key) is not entry or not entry.created:
                return
            try:
                await self.state.client.patch(path, {"spec": {"active": entry.active}}, want_body=False)
            except ApiError as err:
                if err.status != 404:  # gone: its next status write creates it, with spec.active
                    raise

        self.writer.spawn(f"wl:{key}", write)

    def _flush_workloads(self, now: float) -> None:
        entries = self.state.entries
        while self.dirty and self.dirty[0][0] <= now:
            due, _, key = heapq.heappop(self.dirty)
            entry = entries.get(key)
            if entry is None or entry.due != due:
                continue  # forgotten, or superseded by an earlier due time
            entry.due = None
            if entry.status_queued:
                continue  # a writer is queued already; it writes the status as it is when it goes out
            entry.status_queued = True
            self.writer.spawn(f"wl:{key}", self._status_writer(entry))

    def _status_writer(self, entry: Entry) -> Write:
        """The Workload's status write, computed when it goes out (not when it was due)."""
        key = entry.key
        base = resource_path(GROUP, VERSION, "workloads", entry.namespace)
        path = resource_path(GROUP, VERSION, "workloads", entry.namespace, entry.wl_name, "status")

        async def write() -> None:
            entry.status_queued = False
            if self.state.entries.get(key) is not entry:
                return  # forgotten meanwhile (deleted, recreated, no longer queued)
            status = self.workload_status(entry)
            comparable = _comparable(status)
            if entry.state == EntryState.FINISHED:  # its last write: forget it (later events of the object are ignored)
                self.state.entries.pop(key, None)
                self.state.rvs.pop((entry.kind.plural, object_key(entry.obj)), None)
            if entry.created and (
                comparable == entry.last_written
                or (entry.state == EntryState.PENDING and _significant(comparable) == _significant(entry.last_written))
            ):
                # Nothing changed, or a queued gang whose reason is back to the one written (or
                # whose message alone moved): that rides along with its next write.
                return
            entry.last_written = comparable
            metrics = self.state.metrics
            if metrics is not None:
                metrics.workload_status_writes_total.labels(status["state"]).inc()
            if entry.state == EntryState.PENDING:
                entry.last_pending_write = time.time()
            create = None if entry.created else self._workload_body(entry)
            entry.created = True
            await self._send_status(entry, base, path, status, create)

        return write

    async def _send_status(
        self, entry: Entry, base: str, path: str, status: dict[str, Any], create: dict[str, Any] | None
    ) -> None:
        client = self.state.client
        body = create
        for _ in range(2):
            if body is not None:
                try:
                    await client.create(base, body, want_body=False)
                except ApiError as err:
                    if err.status == 404:  # the namespace or the queued object is gone
                        return
                    if err.status != 409:
                        raise
            try:
                await client.patch(path, {"status": status}, want_body=False)
                return
            except ApiError as err:
                if err.status != 404 or body is not None:
                    raise
                if entry.key not in self.state.entries:
                    return
                body = self._workload_body(entry)  # deleted from outside: create it again

    # ------------------------------------------------------------------------------------------
    # ClusterQueues and LocalQueues
    # ------------------------------------------------------------------------------------------

    def explain_pending(self, reason: str, message: str, cluster_queue: str | None) -> tuple[str, str]:
        """A pending reason as the Workload says it: in a ClusterQueue held for its admission
        checks, ``ClusterQueueInactive`` with the checks named (the engine sees a stopped queue);
        in one inactive for a flavor left out, what is wrong with the flavor (its Topology)."""
        if cluster_queue is not None and reason == "ClusterQueueStopped" and cluster_queue in self.check_problems:
            return "ClusterQueueInactive", self.check_problems[cluster_queue][1]
        if reason == "ClusterQueueInactive":
            return reason, self._with_flavor_error(message)
        return reason, message

    def queue_seen(self, kind_key: str, err: SpecError | None) -> None:
        """A ClusterQueue (``cq:<name>``), LocalQueue (``lq:<ns>/<name>``), Cohort (``co:<name>``) or
        AdmissionCheck (``ac:<name>``) was applied; ``err``: why its spec was rejected (reported on
        its status)."""
        if err is None:
            self.queue_errors.pop(kind_key, None)
        else:
            self.queue_errors[kind_key] = str(err)
        self.queue_written.setdefault(kind_key, None)

    def queue_deleted(self, kind_key: str) -> None:
        self.queue_errors.pop(kind_key, None)
        self.queue_written.pop(kind_key, None)

    def _flush_queues(self) -> None:
        lq_counts: dict[str, list[int]] = {}
        for entry in self.state.entries.values():
            if entry.state in (EntryState.PENDING, EntryState.INADMISSIBLE, EntryState.ADMITTED, EntryState.EVICTING):
                counts = lq_counts.setdefault(entry.lq, [0, 0])
                counts[0 if entry.state in (EntryState.PENDING, EntryState.INADMISSIBLE) else 1] += 1
        for kind_key in list(self.queue_written):
            kind, _, name = kind_key.partition(":")
            if kind == "cq":
                status = self._cq_status(name)
            elif kind == "co":
                status = self._cohort_status(name)
            elif kind == "ac":
                status = self._ac_status(name)
            else:
                status = self._lq_status(name, lq_counts.get(name, [0, 0]))
            if status == self.queue_written.get(kind_key):
                continue
            self.queue_written[kind_key] = status
            if kind == "cq":
                path = resource_path(GROUP, VERSION, "clusterqueues", None, name, "status")
            elif kind == "co":
                path = resource_path(GROUP, VERSION, "cohorts", None, name, "status")
            elif kind == "ac":
                path = resource_path(GROUP, VERSION, "admissionchecks", None, name, "status")
            else:
                ns, _, lq = name.partition("/")
                path = resource_path(GROUP, VERSION, "localqueues", ns, lq, "status")
            self.writer.spawn(kind_key, self._queue_writer(path, status), lane="queues")

    def _queue_writer(self, path: str, status: dict[str, Any]) -> Write:
        async def write() -> None:
            try:
                await self.state.client.patch(path, {"status": status}, want_body=False)
            except ApiError as err:
                if err.status != 404:
                    raise

        return write

    def _cq_status(self, name: str) -> dict[str, Any]:
        old = self.queue_written.get(f"cq:{name}")
        error = self.queue_errors.get(f"cq:{name}")
        view = self.state.engine.cluster_queue(name)
        if view is None:
            cond = _active(False, "InvalidSpec", error or "not known to the engine", old)
            return {"pendingWorkloads": 0, "admittedWorkloads": 0, "conditions": [cond]}
        usage: dict[str, list[dict[str, Any]]] = {}
        gpu_used = gpu_nominal = 0
        has_gpu = False
        for (flavor, resource), total in sorted(view.usage.items()):
            usage.setdefault(flavor, []).append({
                "name": resource, "total": quantity_text(resource, total),
                "borrowed": quantity_text(resource, view.borrowed.get((flavor, resource), 0)),
            })
            if resource == GPU:
                has_gpu = True
                gpu_used += total
                gpu_nominal += view.nominal.get((flavor, resource), 0)
        held = self.check_problems.get(name)
        if held is not None and not view.active and view.inactive_reason.startswith("stopped"):
            cond = _active(False, held[0], held[1], old)
        elif view.active:
            cond = _active(True, "Ready", "Can admit new workloads", old)
        elif self._missing_topology(view.inactive_reason) is not None:
            flavor, topology = self._missing_topology(view.inactive_reason) or ("", "")
            cond = _active(False, "TopologyNotFound",
                           f"{view.inactive_reason}: there is no Topology {topology!r} for flavor {flavor!r} "
                           f"(its spec.topologyName): {self.flavor_errors.get(flavor, '')}", old)
        else:
            reason = "Stopped" if view.inactive_reason.startswith("stopped") else "FlavorNotFound"
            if "flavor" not in view.inactive_reason.lower() and reason != "Stopped":
                reason = "Inactive"
            cond = _active(False, reason, self._with_flavor_error(view.inactive_reason), old)
        return {
            "pendingWorkloads": view.pending,
            "admittedWorkloads": view.admitted,
            "reservingWorkloads": view.admitted,
            "flavorsUsage": [{"name": f, "resources": r} for f, r in usage.items()],
            "gpu": f"{gpu_used}/{gpu_nominal}" if has_gpu else None,
            "conditions": [cond],
        }

    def _with_flavor_error(self, message: str) -> str:
        """A ClusterQueue inactive for a missing flavor that exists but is invalid says what is
        wrong with it: the flavor has no status of its own, and "not found" alone sends the
        admin looking for an object that is there."""
        for name, error in self.flavor_errors.items():
            if f"flavor {name!r} not found" in message:
                return f"{message}: the ResourceFlavor is invalid: {error}"
        return message

    def _missing_topology(self, message: str) -> tuple[str, str] | None:
        """``(flavor, Topology)`` when ``message`` (a ClusterQueue's inactive reason) is a flavor left
        out for naming a Topology that does not exist."""
        for flavor, topology in self.missing_topologies.items():
            if f"flavor {flavor!r} not found" in message:
                return flavor, topology
        return None

    def _ac_status(self, name: str) -> dict[str, Any]:
        """An AdmissionCheck's ``Active`` condition: never true, gangq runs no admission-check
        controller (a ClusterQueue naming it is inactive)."""
        old = self.queue_written.get(f"ac:{name}")
        error = self.queue_errors.get(f"ac:{name}")
        if error is not None:
            return {"conditions": [_active(False, "InvalidSpec", error, old)]}
        check = self.admission_checks.get(name)
        controller = check.controller_name if check is not None else ""
        if controller == PROVISIONING_REQUEST_CONTROLLER:
            message = ("cluster-autoscaler's ProvisioningRequest is not supported by gangq (see docs/api.md, "
                       "AdmissionCheck): ClusterQueues naming this check admit nothing")
        else:
            message = (f"gangq does not run admission-check controllers ({controller!r} is not run): ClusterQueues "
                       f"naming this check admit nothing")
        return {"conditions": [_active(False, "NotSupported", message, old)]}

    def _cohort_status(self, name: str) -> dict[str, Any]:
        old = self.queue_written.get(f"co:{name}")
        error = self.queue_errors.get(f"co:{name}")
        if error is not None:
            return {"conditions": [_active(False, "InvalidSpec", error, old)]}
        return {"conditions": [_active(True, "Ready", "Can lend and borrow quota", old)]}

    def _lq_status(self, key: str, counts: list[int]) -> dict[str, Any]:
        old = self.queue_written.get(f"lq:{key}")
        error = self.queue_errors.get(f"lq:{key}")
        engine = self.state.engine
        lq = engine.local_queues.get(key)
        if lq is None:
            cond = _active(False, "InvalidSpec", error or "not known", old)
        else:
            view = engine.cluster_queue(lq.cluster_queue)
            if view is None:
                missing = f"ClusterQueue {lq.cluster_queue} does not exist"
                cond = _active(False, "ClusterQueueDoesNotExist", missing, old)
            elif lq.cluster_queue in self.check_problems:
                cond = _active(False, "ClusterQueueIsInactive", self.check_problems[lq.cluster_queue][1], old)
            elif not view.active:
                cond = _active(False, "ClusterQueueIsInactive", self._with_flavor_error(view.inactive_reason), old)
            elif lq.stop_policy != "None":
                cond = _active(False, "Stopped", f"LocalQueue is stopped ({lq.stop_policy})", old)
            else:
                cond = _active(True, "Ready", "Can submit new workloads to ClusterQueue", old)
        return {"pendingWorkloads": counts[0], "admittedWorkloads": counts[1], "reservingWorkloads": counts[1],
                "conditions": [cond]}


def _active(active: bool, reason: str, message: str, old: Any) -> dict[str, Any]:
    """A queue's ``Active`` condition; its transition time is kept from ``old`` while the status holds."""
    value = "True" if active else "False"
    since = rfc3339(time.time())
    if isinstance(old, dict):
        for cond in old.get("conditions") or []:
            if cond.get("type") == "Active" and cond.get("status") == value:
                since = cond["lastTransitionTime"]
    return {"type": "Active", "status": value, "reason": reason, "message": message, "lastTransitionTime": since}


def _comparable(status: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in status.items() if k not in _UNCOMPARED}
    out["next"] = status.get("position") == 1
    return out


def _significant(status: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """What a status write is for, without messages and times: state, reason, ClusterQueue,
    whether the gang is next in its queue (position 1: other positions are figures), admission,
    requeue state and each condition's type, status and reason."""
    if status is None:
        return None
    return (
        status.get("state"), status.get("reason"), status.get("clusterQueue"), status.get("next"),
        status.get("admission"),
        status.get("requeueState"),
        tuple((c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or ()),
    )
