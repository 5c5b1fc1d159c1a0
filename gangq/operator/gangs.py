"""The life of a queued workload (any kind of :mod:`gangq.integrations`): submitted as a gang,
admitted, evicted, finished — in the engine, on its Workload's status, and as writes to the object.

Inputs are the watch events of the queued kinds (:meth:`Gangs.object_event`: JobSets, Jobs; see
:mod:`gangq.integrations`), their pods' progress, the
engine's decisions (:meth:`Gangs.handle`) and the outcomes of our own patches of those objects
(:meth:`Gangs.written`, :meth:`Gangs.admission_failed`). Everything runs on the scheduling loop.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from gangq.api.meta import Meta, object_key, resource_version, rfc3339
from gangq.api.workload import queue_name
from gangq.core.decisions import Admission, Decision, Eviction, PendingUpdate
from gangq.core.errors import SpecError
from gangq.core.model import WorkloadSpec
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.job import JOB
from gangq.integrations.jobset import JOBSET
from gangq.integrations.registry import child_of_jobset, queued, workload_owner
from gangq.jobset import constants as js
from gangq.operator.entry import Entry, EntryState
from gangq.operator.evictions import EvictionResync, quiet
from gangq.operator.runtimes import LearnedRuntimes
from gangq.operator.state import ControllerState
from gangq.operator.status import ORDINARY_PENDING, Statuses
from gangq.operator.translate import quantity_text, recorded_admission, recorded_eviction, workload_active
from gangq.operator.writer import Writer

log = logging.getLogger(__name__)

OVER_QUOTA = "OverQuota"
"""Workload condition of an admitted gang a restart kept running over a quota that shrank."""
OVER_QUOTA_REASON = "RestoredOverQuota"

DEACTIVATED_BY_ADMIN: Final = "deactivated: the Workload's spec.active is false"

STARTED_BEFORE_ADMISSION: Final = "StartedBeforeAdmission"
"""Event reason and Workload reason of a workload created unsuspended (no webhook suspended it)."""


def reactivate_hint(entry: Entry) -> str:
    """How to queue a deactivated gang again, for its Workload's message: a researcher whose gang
    was deactivated after too many pods-ready timeouts must not have to find the switch."""
    return (f"to queue it again: kubectl patch workload {entry.wl_name} -n {entry.namespace} "
            """--type merge -p '{"spec":{"active":true}}'""")


FINISHED_REMEMBERED: Final = 200_000
"""Uids of finished queued objects kept (oldest dropped first): a late event of a finished and forgotten
workload, of any queued kind, must not queue it again."""


class Gangs:
    """The queued objects (``state.entries``), the pods of each gang, and the priority classes a
    gang's priority is read from."""

    def __init__(self, state: ControllerState, writer: Writer, statuses: Statuses) -> None:
        self.state = state
        self.writer = writer
        self.runtimes = LearnedRuntimes(state, writer)  # expected run times of gangs that declare none
        self.statuses = statuses
        self.finished: dict[str, None] = {}  # uids of finished objects already forgotten (FIFO)
        self.gang_pods: dict[str, set[str]] = {}  # gang key -> live pod keys (bound or not)
        self.child_jobs: dict[str, set[str]] = {}  # JobSet gang key -> child Jobs neither suspended nor finished
        # Gangs held for arriving unsuspended whose pods had not shown yet: reported when one does.
        self.unreported_starts: set[str] = set()
        self.resync = EvictionResync(state, writer)
        self.resync.stopped = self.watches_say_stopped
        self.resync.confirmed = self._stop_confirmed
        self.fronts: set[str] = set()  # ClusterQueues whose first pending gang may have changed
        self.workload_priority_classes: dict[str, int] = {}
        self.priority_classes: dict[str, int] = {}
        # objects our object-by-object writes returned (a pod group's pods): fed to their gang
        self.objects_written: Callable[[list[Mapping[str, Any]], float], None] = lambda objects, now: None

    # ------------------------------------------------------------------------------------------
    # Submission
    # ------------------------------------------------------------------------------------------

    def new_entry(self, key: str, obj: dict[str, Any], kind: WorkloadKind = JOBSET) -> Entry:
        entry = Entry(key, obj, kind)
        self.state.entries[key] = entry
        return entry

    def submit(self, entry: Entry, now: float) -> bool:
        """(Re)build the gang from the object and queue it; a malformed one is Inadmissible."""
        obj = entry.obj
        default = self.state.default_queue(obj)
        entry.lq = f"{entry.namespace}/{queue_name(obj) or default}"
        entry.sig = entry.kind.signature(obj)
        try:
            spec = entry.kind.to_workload(obj, self.priority_classes, self.workload_priority_classes, default)
        except SpecError as err:
            if entry.spec is not None and entry.key in self.state.engine.workloads:
                self.state.finish(entry.key, now)
            entry.spec = None
            entry.move(EntryState.INADMISSIBLE)
            entry.reason, entry.message = "InvalidSpec", str(err)
            entry.condition("QuotaReserved", False, "InvalidSpec", str(err), now)
            self.statuses.mark(entry, now, urgent=True)
            return False
        entry.spec = spec
        entry.pod_sets = [
            {"name": ps.name, "count": ps.count,
             "requests": {r: quantity_text(r, v) for r, v in ps.requests.items()}}
            for ps in spec.pod_sets
        ]
        if entry.state == EntryState.INADMISSIBLE:
            entry.move(EntryState.PENDING)
            entry.reason, entry.message = "Pending", "queued"
        self.state.engine.submit(self.runtimes.engine_spec(entry, spec), now)
        if entry.state == EntryState.PENDING:
            self.statuses.mark(entry, now, urgent=False)
        return True

    def retry_invalid(self, now: float) -> None:
        """Resubmit the Inadmissible gangs (a priority class they named may exist now)."""
        if not self.state.recovered.is_set():
            return
        for entry in list(self.state.entries.values()):
            if entry.state == EntryState.INADMISSIBLE:
                self.submit(entry, now)

    def remap(self, kind: WorkloadKind, now: float) -> None:
        """An object the kind's gangs are built from changed (a TrainJob's runtime): map again
        its Inadmissible gangs (the runtime they waited for may exist now) and its pending ones
        whose :meth:`~WorkloadKind.signature` changed. Admitted and stopping gangs keep the gang
        they were admitted as: their pods were made from it."""
        if not self.state.recovered.is_set():
            return  # recovery maps every object after the objects they are built from
        for entry in list(self.state.entries.values()):
            if entry.kind is not kind:
                continue
            if entry.state == EntryState.INADMISSIBLE or (
                entry.state == EntryState.PENDING and kind.signature(entry.obj) != entry.sig
            ):
                self.submit(entry, now)

    def restore(self, entry: Entry, now: float) -> bool:
        """Put an admitted object back into the engine with the ClusterQueue and flavors recorded
        when it was admitted (its pods run with those flavors' labels)."""
        return self._restore(entry, recorded_admission(entry.obj), now, stopping=False)

    def restore_stopping(self, entry: Entry, now: float) -> bool:
        """Put back an object that was evicted (suspended) before the restart and whose pods still
        run: it holds the admission its eviction record names until they are gone."""
        record = recorded_eviction(entry.obj) or {}
        admission = record.get("admission")
        return self._restore(entry, admission if isinstance(admission, dict) else None, now, stopping=True)

    def _restore(self, entry: Entry, recorded: dict[str, Any] | None, now: float, *, stopping: bool) -> bool:
        spec = entry.spec
        if recorded is None or spec is None or not isinstance(recorded.get("clusterQueue"), str):
            return False
        flavors = recorded_flavors(recorded, spec)
        engine = self.state.engine
        restore = engine.restore_stopping if stopping else engine.restore
        admission, why = restore(self.runtimes.engine_spec(entry, spec), recorded["clusterQueue"], flavors, now)
        if admission is None:
            log.warning("recovery: %s %s cannot keep its recorded admission: %s", entry.kind.kind, entry.key, why)
            return False
        if stopping:
            entry.move(EntryState.EVICTING)
            entry.admission = admission
            entry.cluster_queue = admission.cluster_queue
            entry.reason, entry.message = "Evicted", "stopping: evicted before a restart, its pods still run"
            self.resync.started(entry.key, now)
            log.info("recovery: %s %s was evicted and its pods still run: it keeps ClusterQueue %s's quota "
                     "until they are gone", entry.kind.kind, entry.key, admission.cluster_queue)
            return True
        self.mark_admitted(entry, admission, now)
        if why:  # kept running over a quota that shrank: said on the Workload, the object and /metrics
            message = (f"kept running after a restart, {why}; ClusterQueue {admission.cluster_queue} admits "
                       "nothing more of it until its usage is within its quota")
            log.warning("recovery: %s %s %s", entry.kind.kind, entry.key, message)
            entry.condition(OVER_QUOTA, True, OVER_QUOTA_REASON, message, now)
            self.writer.post_event(entry, "Warning", OVER_QUOTA_REASON, message)
            metrics = self.state.metrics
            if metrics is not None:
                metrics.restored_over_quota_total.labels(admission.cluster_queue).inc()
            self.statuses.mark(entry, now, urgent=True)
        return True

    # ------------------------------------------------------------------------------------------
    # Events of the queued kinds
    # ------------------------------------------------------------------------------------------

    def queued_kind_event(self, kind: WorkloadKind) -> Callable[[str, dict[str, Any], str, float], None]:
        """The handler of a registered kind's watch events (:meth:`object_event`)."""
        def handle(event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
            self.object_event(kind, event_type, obj, now)
        return handle

    def job_event(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        owner = child_of_jobset(obj)
        if owner is not None:  # an evicted JobSet's last child Job that could start pods has stopped
            entry = self.state.entries.get(owner)
            if entry is not None and entry.state == EntryState.EVICTING:
                self.maybe_eviction_done(entry, now)
            return
        self.object_event(JOB, event_type, obj, now)

    def job_matters(self, event_type: str | None, obj: dict[str, Any]) -> bool:
        """Is a Job's watch event for the scheduling loop? Checked in the watch handler, before the
        inbox: the child Jobs of every JobSet (and of CronJobs …) come through the same watch, and
        only labelled Jobs of their own, or ones queued before, are gangs. A queued JobSet's child
        Jobs are only counted here (:meth:`child_job_seen`); the loop hears of them when the last
        one that could still start pods of an evicted JobSet stops."""
        owner = child_of_jobset(obj)
        if owner is not None:
            return self.child_job_seen(owner, event_type, obj)
        return queued(JOB, obj, self.state.default_queue(obj)) or JOB.key_of(obj) in self.state.entries

    def child_job_seen(self, gang: str, event_type: str | None, obj: dict[str, Any]) -> bool:
        """Keep the JobSet's child Jobs that may still start pods (neither suspended nor finished);
        True when an evicted JobSet has just lost its last one (its eviction may be done)."""
        name = Meta(obj).name
        live = event_type != "DELETED" and not quiet(obj)
        jobs = self.child_jobs.get(gang)
        entry = self.state.entries.get(gang)
        if not live and entry is not None and entry.state == EntryState.EVICTING:
            # the pods its Job controller created before this must come through the pod stream
            quiet_rvs = self.resync.quiet_rvs
            quiet_rvs[gang] = max(quiet_rvs.get(gang, 0), resource_version(obj))
        if live:
            if jobs is None:
                jobs = self.child_jobs[gang] = set()
            jobs.add(name)
            return False
        if jobs is None or name not in jobs:
            return False
        jobs.discard(name)
        if jobs:
            return False
        del self.child_jobs[gang]
        return entry is not None and entry.state == EntryState.EVICTING

    def object_event(self, kind: WorkloadKind, event_type: str, obj: dict[str, Any], now: float) -> None:
        """A watch event of a queued kind: queue, requeue, finish or forget its gang."""
        key = kind.key_of(obj)
        entry = self.state.entries.get(key)
        if entry is not None and entry.kind is not kind:
            return  # another kind's gang under the same key: a TrainJob's, whose JobSet this is
        if entry is not None and event_type != "DELETED":
            uid = Meta(obj).uid
            if uid and entry.uid and uid != entry.uid:  # deleted and recreated under the same name
                self.forget(entry, now)
                entry = None
        if event_type == "DELETED":
            if entry is not None and (not entry.uid or Meta(obj).uid in ("", entry.uid)):
                self.forget(entry, now)
            return
        if not self.state.watched_namespace(obj):
            return
        if not queued(kind, obj, self.state.default_queue(obj)):
            if entry is not None:  # the queue label was removed: no longer ours
                self.forget(entry, now)
            return
        rv = resource_version(obj)
        if entry is not None:
            if rv and rv < entry.rv:
                return
            entry.obj = obj
            entry.rv = rv
        terminal = kind.terminal(obj)
        suspended = kind.suspended(obj)
        if entry is None:
            if terminal is not None or Meta(obj).uid in self.finished:
                # Finished before we saw it (or before a restart), or a late event of one we finished
                # and forgot: nothing to hold, nothing to write.
                return
            entry = self.new_entry(key, obj, kind)
            if not suspended:
                # Arrived running without an admission (no webhook suspended it at creation):
                # suspend it before any child or pod exists, and say so if some already ran.
                self.writer.write_suspend(entry, restore=False)
                if kind.started(obj):
                    self._started_before_queued(entry)
            if self.submit(entry, now) and not suspended:
                self.hold_started(entry, now)
            return
        if entry.state == EntryState.FINISHED:
            return
        if terminal is not None:
            self._finish(entry, terminal, now)
            return
        if entry.state in (EntryState.PENDING, EntryState.INADMISSIBLE):
            if kind.signature(obj) != entry.sig:
                self.submit(entry, now)
            if not suspended and not entry.writing:
                if recorded_admission(obj) is None:
                    self.writer.write_suspend(entry, restore=False)
                    if entry.state == EntryState.PENDING:
                        self.hold_started(entry, now)
                elif entry.state == EntryState.PENDING:
                    self._admitted_unbeknown(entry, now)
        elif entry.state == EntryState.ADMITTED:
            if suspended and not entry.writing:
                # Someone else suspended an admitted workload: give its quota back and requeue it.
                log.info("%s %s was suspended from outside: requeueing it", kind.kind, key)
                self.state.finish(key, now)
                entry.move(EntryState.PENDING)
                entry.admission = None
                entry.condition("Admitted", False, "Suspended", f"the {kind.kind} was suspended", now)
                entry.condition("QuotaReserved", False, "Pending", "requeued after an outside suspend", now)
                self.submit(entry, now)
                self.statuses.mark(entry, now, urgent=True)
        elif entry.state == EntryState.EVICTING:
            self.maybe_eviction_done(entry, now)

    def _admitted_unbeknown(self, entry: Entry, now: float) -> None:
        """Our admission patch went through though its answer was lost (the connection cut by an
        API-server restart, an error after etcd committed it): the object runs with our admission
        record while the engine holds it queued, its quota free for others. It is charged as
        recorded if that fits; if not, it is stopped (eviction reason ``AdmissionUnconfirmed``)."""
        recorded = recorded_admission(entry.obj)
        spec = entry.spec
        if recorded is None or spec is None or not isinstance(recorded.get("clusterQueue"), str):
            return
        flavors = recorded_flavors(recorded, spec)
        admission, why = self.state.engine.restore(self.runtimes.engine_spec(entry, spec), recorded["clusterQueue"],
                                                   flavors, now)
        if admission is not None and not why:
            log.warning("%s %s runs with an admission whose answer was lost: charged to %s as recorded",
                        entry.kind.kind, entry.key, admission.cluster_queue)
            self.mark_admitted(entry, admission, now)
            return
        if admission is not None:  # charged over quota: take it back and queue the gang again
            self.state.finish(entry.key, now)
            self.state.engine.submit(self.runtimes.engine_spec(entry, spec), now)
        message = f"it runs with an admission whose answer was lost and that no longer fits: {why}"
        log.warning("%s %s: %s; suspending it", entry.kind.kind, entry.key, message)
        self.writer.write_suspend(entry, restore=True, eviction=("AdmissionUnconfirmed", message))

    def hold_started(self, entry: Entry, now: float) -> None:
        """An unsuspended workload without an admission may have pods running (a suspended Job's
        pods run until they terminate): its ClusterQueue is charged for it, and the nodes for its
        bound pods, until they are gone, as for an evicted gang; then it is queued. Otherwise the
        queue's quota looked free while they ran, and gangq admitted more on top of them."""
        spec = entry.spec
        if spec is None:
            return
        admission, why = self.state.engine.hold_started(self.runtimes.engine_spec(entry, spec), now)
        if admission is None:
            log.info("%s %s runs unsuspended and cannot be charged to a ClusterQueue (%s): queued as it is",
                     entry.kind.kind, entry.key, why)
            return
        entry.move(EntryState.EVICTING)
        entry.admission = admission
        entry.cluster_queue = admission.cluster_queue
        entry.reason = STARTED_BEFORE_ADMISSION
        entry.message = (f"stopping: it was created unsuspended; its pods are charged to ClusterQueue "
                         f"{admission.cluster_queue} until they are gone, then it is queued")
        if why:
            entry.message += f" ({why})"
        entry.condition("QuotaReserved", False, STARTED_BEFORE_ADMISSION, entry.message, now)
        self.resync.started(entry.key, now)
        self.statuses.mark(entry, now, urgent=True)
        if not entry.kind.started(entry.obj):
            self.unreported_starts.add(entry.key)

    def _started_before_queued(self, entry: Entry) -> None:
        """Its pods ran before gangq saw it: outside every quota for that while. Said on the object
        and counted: an admin who installed gangq without its webhook sees what slipped past."""
        message = (f"{entry.kind.kind} {entry.key} started before gangq could suspend it: its pods ran outside "
                   "the queue's quota until now (install the admission webhook to suspend at creation)")
        log.warning("%s", message)
        self.writer.post_event(entry, "Warning", STARTED_BEFORE_ADMISSION, message)
        metrics = self.state.metrics
        if metrics is not None:
            metrics.started_before_admission_total.labels(entry.kind.kind).inc()

    def forget(self, entry: Entry, now: float) -> None:
        if entry.state == EntryState.PENDING and entry.cluster_queue:
            self.fronts.add(entry.cluster_queue)
        self.child_jobs.pop(entry.key, None)
        self.unreported_starts.discard(entry.key)
        self.resync.forget(entry.key)
        self.state.finish(entry.key, now)
        self.state.entries.pop(entry.key, None)
        entry.due = None

    # ------------------------------------------------------------------------------------------
    # Workload spec.active (Kueue's switch to park a gang, and to bring back a deactivated one)
    # ------------------------------------------------------------------------------------------

    def activation_changed(self, obj: dict[str, Any]) -> bool:
        """Does this Workload event say other than what the controller knows of ``spec.active``?
        Checked in the watch handler, before the inbox: every status write of ours comes back as
        an event, and only an admin's flip of the switch matters."""
        owner = workload_owner(obj)
        entry = self.state.entries.get(owner[0]) if owner is not None else None
        return entry is not None and workload_active(obj) != entry.active

    def workload_event(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        """An admin set a Workload's ``spec.active``: deactivate (an admitted gang is evicted and
        not requeued) or reactivate its gang."""
        owner = workload_owner(obj)
        if owner is None or event_type == "DELETED":
            return
        entry = self.state.entries.get(owner[0])
        if entry is None or (owner[1] and entry.uid and owner[1] != entry.uid):
            return
        active = workload_active(obj)
        if not active and entry.active:
            log.info("Workload %s: spec.active is false: deactivating %s %s", key, entry.kind.kind, entry.key)
            self.deactivate(entry, DEACTIVATED_BY_ADMIN, now)
        elif active and not entry.active:
            log.info("Workload %s: spec.active is true: queueing %s %s again", key, entry.kind.kind, entry.key)
            self.reactivate(entry, now)

    def deactivate(self, entry: Entry, message: str, now: float) -> None:
        entry.active = False
        self.state.engine.deactivate(entry.key, now, message)
        if entry.state == EntryState.INADMISSIBLE:
            return  # not in the engine; its spec error is what its Workload says
        if entry.state == EntryState.PENDING:
            self._set_deactivated(entry, message, now)

    def _set_deactivated(self, entry: Entry, message: str, now: float) -> None:
        if entry.cluster_queue:
            self.fronts.add(entry.cluster_queue)
        entry.reason, entry.message = "Deactivated", f"{message}; {reactivate_hint(entry)}"
        entry.cluster_queue = None
        entry.condition("QuotaReserved", False, "Deactivated", entry.message, now)
        self.statuses.mark(entry, now, urgent=True)

    def reactivate(self, entry: Entry, now: float) -> None:
        entry.active = True
        self.state.engine.reactivate(entry.key, now)
        entry.requeue = None  # as Kueue: the pods-ready eviction count starts again
        if entry.state == EntryState.PENDING:
            entry.reason, entry.message = "Pending", "reactivated: queued again"
            entry.condition("QuotaReserved", False, "Pending", entry.message, now)
            self.statuses.mark(entry, now, urgent=True)

    def _finish(self, entry: Entry, terminal: str, now: float) -> None:
        self.runtimes.finished(entry, terminal == js.COND_COMPLETED, now)
        self.state.finish(entry.key, now)
        self.resync.forget(entry.key)
        self.finished[entry.uid] = None
        if len(self.finished) > FINISHED_REMEMBERED:
            del self.finished[next(iter(self.finished))]
        entry.move(EntryState.FINISHED)
        reason = "Succeeded" if terminal == js.COND_COMPLETED else "Failed"
        entry.condition("Finished", True, reason, f"{entry.kind.kind} {terminal}", now)
        self.statuses.mark(entry, now, urgent=True)

    # ------------------------------------------------------------------------------------------
    # Pods of a gang
    # ------------------------------------------------------------------------------------------

    def pod_seen(self, gang: str, pod_key: str, *, gone: bool) -> None:
        """A pod of ``gang`` came, changed or went: the gang's live pods (an evicted gang is stopped
        when none is left)."""
        pods = self.gang_pods.setdefault(gang, set())
        if gone:
            pods.discard(pod_key)
        else:
            pods.add(pod_key)
        if not pods:
            del self.gang_pods[gang]

    def pods_changed(self, gang: str, now: float) -> None:
        """The engine has the gang's pods as they are now: PodsReady, and the end of an eviction."""
        entry = self.state.entries.get(gang)
        if entry is None:
            return
        if entry.state == EntryState.PENDING and not entry.kind.gates_pods and self.gang_pods.get(gang):
            # Pods of a queued gang that gangq never admitted: its operator created them from a view
            # in which the object still ran unsuspended (it was created so, and gangq's suspension
            # ended before they came). They run outside every quota: charged and reported as a
            # start before admission, held until they are gone.
            self.unreported_starts.add(gang)
            self.hold_started(entry, now)
        if gang in self.unreported_starts and self.gang_pods.get(gang):
            self.unreported_starts.discard(gang)
            self._started_before_queued(entry)
        self._update_running(entry, now)
        if entry.state == EntryState.EVICTING:
            self.maybe_eviction_done(entry, now)

    def _update_running(self, entry: Entry, now: float) -> None:
        if entry.state != EntryState.ADMITTED or entry.spec is None:
            return
        running = 0
        pods = self.state.engine.pods
        for pod_key in self.gang_pods.get(entry.key, ()):
            pod = pods.get(pod_key)
            if pod is not None and pod.running:
                running += 1
        need = entry.spec.min_member or entry.spec.total_pods
        ready = running >= need
        current = entry.conditions.get("PodsReady", {}).get("status")
        if ready and current != "True":
            entry.condition("PodsReady", True, "PodsReady", f"{running} of {need} pods running", now)
            metrics = self.state.metrics
            if metrics is not None:
                with contextlib.suppress(Exception):
                    metrics.observe_pods_ready(entry.key, now)
            self.statuses.mark(entry, now, urgent=True)

    def resynced(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        """A stopping gang's pods and child Jobs as the API server lists them
        (:mod:`gangq.operator.evictions`): what is gone there is gone here."""
        entry = self.state.entries.get(key)
        if entry is None or entry.state != EntryState.EVICTING:
            return
        listed = set(obj.get("pods") or [])
        for pod_key in self.gang_pods.get(key, set()) - listed:
            log.info("%s %s: pod %s is gone (its deletion was not seen)", entry.kind.kind, key, pod_key)
            self.pod_seen(key, pod_key, gone=True)
            self.state.engine.delete_pod(pod_key)
        jobs = set(obj.get("jobs") or [])
        if jobs and entry.kind.has_child_jobs:
            self.child_jobs[key] = jobs
        else:
            self.child_jobs.pop(key, None)
        # a consistent read that finds nothing left confirms what the watches said; one that finds
        # something waits for the next watch event or resync (no read after read)
        entry.stop_confirmed = "read" if not listed and not jobs else ""
        if not entry.kind.suspended(entry.obj) and not entry.writing:
            # the suspend did not go through (its retries failed): send it again
            self.writer.write_suspend(entry, restore=True, eviction=(entry.reason, entry.message))
            return
        self.maybe_eviction_done(entry, now, confirm=False)

    def watches_say_stopped(self, entry: Entry) -> bool:
        """Is the object suspended (no patch of ours in flight), its last pod gone and (a JobSet)
        no child Job left that could still start pods, as the watches show it?"""
        if entry.writing or not entry.kind.suspended(entry.obj):
            return False
        return not self.gang_pods.get(entry.key) and not self.child_jobs.get(entry.key)

    def _stop_confirmed(self, entry: Entry, now: float) -> None:
        """The watch streams prove the gang has stopped (gangq.operator.evictions)."""
        entry.stop_confirmed = "streams"
        self.maybe_eviction_done(entry, now, confirm=False)

    def maybe_eviction_done(self, entry: Entry, now: float, *, confirm: bool = True) -> None:
        """An evicted gang gives its quota back once the object is suspended, its last pod is gone
        and (a JobSet) no child Job is left that could still start pods: a Job created just before
        the eviction starts its pods after it, on quota the next gang was given meanwhile. And
        once that is confirmed: by the watch streams, or by a read from the API server."""
        if entry.writing or not entry.kind.suspended(entry.obj):
            return
        if self.gang_pods.get(entry.key) or self.child_jobs.get(entry.key):
            entry.stop_confirmed = ""
            return
        if not entry.stop_confirmed:
            if confirm:
                self.resync.confirm(entry, now)  # see gangq.operator.evictions
            return
        by = entry.stop_confirmed
        self.resync.released(entry.key, by, now)
        entry.stop_confirmed = ""
        log.info("%s %s has stopped (confirmed by %s): its quota in ClusterQueue %s is free", entry.kind.kind,
                 entry.key, "its watch streams" if by == "streams" else "a read", entry.cluster_queue)
        self.state.engine.eviction_done(entry.key, now)
        self.unreported_starts.discard(entry.key)
        self._write_stopped(entry)
        entry.move(EntryState.PENDING)
        entry.admission = None
        entry.cluster_queue = None
        view = self.state.engine.workload(entry.key)
        if not entry.active:
            self._set_deactivated(entry, view.message if view is not None else DEACTIVATED_BY_ADMIN, now)
            return
        entry.condition("QuotaReserved", False, "Pending", "evicted; back in the queue", now)
        if view is not None:
            entry.reason, entry.message = self.statuses.explain_pending(view.reason or "Pending", view.message,
                                                                        view.cluster_queue)
            if view.cluster_queue:
                self.fronts.add(view.cluster_queue)
        self.statuses.mark(entry, now, urgent=True)

    def _write_stopped(self, entry: Entry) -> None:
        """What the kind writes once its gang has stopped (a TrainJob's podSpecOverrides put back,
        which its webhook refuses while the gang runs), when there is something to write."""
        try:
            ops = entry.kind.stopped_ops(entry.obj)
        except SpecError as err:
            log.warning("%s %s: nothing restored once stopped: %s", entry.kind.kind, entry.key, err)
            return
        if ops:
            self.writer.write_stopped(entry)

    # ------------------------------------------------------------------------------------------
    # Outcomes of our patches of the queued objects
    # ------------------------------------------------------------------------------------------

    def written(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        """A patch of ours to a queued object is answered (``obj["object"]``: the object as patched, if
        any)."""
        entry = self.state.entries.get(key)
        if entry is None:
            return
        entry.writing = False
        new = obj.get("object")
        if new and resource_version(new) >= entry.rv:
            entry.obj = new
            entry.rv = resource_version(new)
            self.state.rvs[(entry.kind.plural, object_key(new))] = entry.rv
        if obj.get("objects"):
            self.objects_written(obj["objects"], now)
        if entry.state == EntryState.EVICTING:
            self.maybe_eviction_done(entry, now)

    def admission_failed(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        """The API server refused an admission patch: the gang goes back to its queue."""
        entry = self.state.entries.get(key)
        if entry is None:
            return
        entry.writing = False
        if obj.get("objects"):
            self.objects_written(obj["objects"], now)
        if entry.state != EntryState.ADMITTED:
            return
        log.warning("%s %s: admission write failed (%s); requeueing", entry.kind.kind, key, obj.get("error"))
        metrics = self.state.metrics
        if metrics is not None and entry.cluster_queue:
            with contextlib.suppress(Exception):
                metrics.admission_error(entry.cluster_queue, "PatchFailed")
        self.state.finish(key, now)
        entry.move(EntryState.PENDING)
        entry.admission = None
        current = obj.get("object")
        if isinstance(current, dict) and resource_version(current) >= entry.rv:
            entry.obj = current  # as read after the failure
            entry.rv = resource_version(current)
        self.submit(entry, now)
        if not entry.kind.suspended(entry.obj) and recorded_admission(entry.obj) is not None:
            self._admitted_unbeknown(entry, now)  # an earlier admission of ours went through after all

    # ------------------------------------------------------------------------------------------
    # Decisions
    # ------------------------------------------------------------------------------------------

    def handle(self, decisions: list[Decision], now: float) -> None:
        """Apply the engine's decisions: admissions and evictions become patches of the objects, pending
        reasons Workload status (a new reason is written, rate-limited; a new message with the same
        reason — the free quota moved — rides along with the next write)."""
        for d in decisions:
            entry = self.state.entries.get(d.workload)
            if entry is None:
                continue
            if isinstance(d, Admission):
                log.info("%s %s admitted by ClusterQueue %s", entry.kind.kind, entry.key, d.cluster_queue)
                self.fronts.add(d.cluster_queue)
                self.mark_admitted(entry, d, now)
                self.writer.write_admission(entry, d)
            elif isinstance(d, Eviction):
                self._evict(entry, d, now)
            elif isinstance(d, PendingUpdate):
                if d.reason == "Deactivated":
                    if not entry.active:
                        continue  # said already, with how to undo it (_set_deactivated)
                    self.deactivate(entry, d.message, now)  # the engine deactivated it: record it
                    continue
                if d.cluster_queue:
                    self.fronts.add(d.cluster_queue)
                reason, message = self.statuses.explain_pending(d.reason, d.message, d.cluster_queue)
                reason_changed = reason != entry.reason or d.cluster_queue != entry.cluster_queue
                if d.reason == "LocalQueueNotFound" and queue_name(entry.obj) is None:
                    # queued to its namespace's default LocalQueue for want of a label
                    message += (f": the {entry.kind.kind} has no gangq.io/queue-name label; label it with a "
                                f"LocalQueue of namespace {entry.namespace}, or create LocalQueue "
                                f"'{entry.lq.partition('/')[2]}' there")
                entry.reason, entry.message = reason, message
                entry.cluster_queue = d.cluster_queue
                entry.condition("QuotaReserved", False, reason, message, now)
                if reason_changed or not entry.created:
                    # A new reason reaches a Workload already written within workloadDelaySeconds: a
                    # gang left showing "ClusterQueueInactive" for a minute after the admin fixed the
                    # queue sends its owner looking for a problem that is gone. Only the first write
                    # of plain queueing waits (pendingDelaySeconds), and message-only changes ride along.
                    urgent = reason not in ORDINARY_PENDING or (reason_changed and entry.created)
                    self.statuses.mark(entry, now, urgent=urgent)

    def mark_new_fronts(self, now: float) -> None:
        """Each ClusterQueue whose first pending gang may have changed: that gang's Workload says
        it is next (:meth:`Statuses.became_next`)."""
        if not self.fronts:
            return
        engine = self.state.engine
        for cq in self.fronts:
            first = engine.pending_workloads(cq, limit=1)
            entry = self.state.entries.get(first[0].key) if first else None
            if entry is not None:
                self.statuses.became_next(entry, now)
        self.fronts.clear()

    def mark_admitted(self, entry: Entry, d: Admission, now: float) -> None:
        entry.move(EntryState.ADMITTED)
        entry.admission = d
        entry.cluster_queue = d.cluster_queue
        entry.reason, entry.message = "Admitted", f"admitted by ClusterQueue {d.cluster_queue}"
        if entry.requeue:  # Kueue keeps the count of pods-ready evictions; the requeue time is past
            entry.requeue = {"count": entry.requeue.get("count", 0)}
        cq = d.cluster_queue
        entry.condition("QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", now)
        entry.condition("Admitted", True, "Admitted", f"The workload is admitted by ClusterQueue {cq}", now)
        entry.condition("Evicted", False, "Admitted", "admitted", now, only_if_present=True)
        entry.condition("Preempted", False, "Admitted", "admitted", now, only_if_present=True)
        if d.provisioning:  # its pods wait for nodes an autoscaler adds (gangq.core.provisioning)
            nodes = provisioning_text(d.provisioning)
            entry.message += f"; Provisioning: its pods wait for {nodes}"
            entry.condition("PodsReady", False, "Provisioning", f"waiting for {nodes} to run the gang's pods", now)
        else:
            entry.condition("PodsReady", False, "WaitForStart", "waiting for the gang's pods to run", now)
        self.statuses.mark(entry, now, urgent=True)

    def _evict(self, entry: Entry, d: Eviction, now: float) -> None:
        log.info("%s %s evicted from ClusterQueue %s (%s: %s): stopping its pods", entry.kind.kind, entry.key,
                 d.cluster_queue, d.reason, d.message)
        entry.move(EntryState.EVICTING)
        self.resync.started(entry.key, now)
        entry.reason, entry.message = d.reason, d.message
        reason = d.reason
        if reason == "InactiveClusterQueue":
            reason = "ClusterQueueStopped"
        entry.condition("Evicted", True, reason, d.message, now)
        entry.condition("Admitted", False, "NoReservation", "evicted", now)
        entry.condition("PodsReady", False, "Evicted", "the gang is stopped", now, only_if_present=True)
        if d.reason == "Preempted":
            preemptor = self.state.entries.get(d.preemptor or "")
            lq = self.state.engine.local_queues.get(preemptor.lq) if preemptor is not None else None
            same = lq is not None and lq.cluster_queue == d.cluster_queue
            entry.condition("Preempted", True, "InClusterQueue" if same else "InCohortReclamation", d.message, now)
        if d.requeue_at is not None:
            count = int((entry.requeue or {}).get("count", 0)) + 1
            entry.requeue = {"count": count, "requeueAt": rfc3339(d.requeue_at)}
        if d.deactivated and entry.active:
            # Over the pods-ready backoff limit: the Workload says so where an admin flips it back.
            count = int((entry.requeue or {}).get("count", 0)) + 1
            entry.requeue = {"count": count}
            entry.active = False
            self.statuses.write_active(entry)
        self.statuses.mark(entry, now, urgent=True)
        self.writer.write_suspend(entry, restore=True, event=(d.reason, d.message))


def recorded_flavors(recorded: Mapping[str, Any], spec: WorkloadSpec) -> list[dict[str, str]]:
    """The flavors (resource → flavor) per pod set, in the spec's order, of a recorded admission."""
    by_name = {a.get("name"): a.get("flavors") or {} for a in recorded.get("podSetAssignments") or []
               if isinstance(a, dict)}
    return [dict(by_name.get(ps.name) or {}) for ps in spec.pod_sets]


def provisioning_text(provisioning: dict[str, int]) -> str:
    """``4 new nodes of NodePool 'gpu'`` for an admission's ``provisioning``."""
    return ", ".join(f"{n} new node{'' if n == 1 else 's'} of NodePool {pool!r}"
                     for pool, n in sorted(provisioning.items()))
