"""The admission engine: events in, decisions out.

Shells (the kopf operator, the simulator, benchmarks) tell the engine what exists — flavors,
cohorts, ClusterQueues, LocalQueues, namespaces, nodes, pods, workloads — and call
:meth:`Engine.schedule` with the current time. It answers with decisions: :class:`Admission` (a whole
gang, flavors assigned, pods planned onto nodes), :class:`Eviction` (preemption, pods-ready
timeout, stopped queue) and :class:`PendingUpdate` (a pending workload's reason changed).

The engine does no I/O and reads no clock: time is an argument, iteration orders are insertion or
sort orders, so the same events in the same order give the same decisions.

:class:`Engine` is the facade of the events and queries; each rule lives in the module named after
it: :mod:`~gangq.core.placement`, :mod:`~gangq.core.claims`, :mod:`~gangq.core.reservations`,
:mod:`~gangq.core.retry`, :mod:`~gangq.core.preemption`, :mod:`~gangq.core.attempt`,
:mod:`~gangq.core.cycle`, :mod:`~gangq.core.reasons`, :mod:`~gangq.core.routing`,
:mod:`~gangq.core.capacity`, :mod:`~gangq.core.timers`, over the shared :mod:`~gangq.core.state`,
the pending queues (:mod:`~gangq.core.queue`) and the admitted-state cache
(:mod:`~gangq.core.quota`, :mod:`~gangq.core.nodes`).
"""

from __future__ import annotations

from collections.abc import Mapping

from mypy_extensions import mypyc_attr

from gangq.core.attempt import Attempt
from gangq.core.capacity import Capacity
from gangq.core.claims import Claims
from gangq.core.config import EngineConfig
from gangq.core.cycle import SchedulingCycle
from gangq.core.decisions import (
    Admission,
    Decision,
    PendingUpdate,
    PodSetAssignment,
)
from gangq.core.errors import SpecError
from gangq.core.flavors import flavor_options
from gangq.core.model import (
    ClusterQueueSpec,
    CohortSpec,
    FlavorResource,
    FlavorSpec,
    LocalQueueSpec,
    NodeSpec,
    PodInfo,
    ProvisionerSpec,
    WorkloadSpec,
    flavor_resource,
)
from gangq.core.placement import Placement
from gangq.core.preemption import Preemption
from gangq.core.provisioning import PROVISIONAL_PREFIX, SyncResult
from gangq.core.queue import ClusterQueueState, Workload
from gangq.core.reasons import Reasons
from gangq.core.reservations import Reservations
from gangq.core.retries import REASONS, RetryReason, reason_label
from gangq.core.retry import IncrementalRetry, RetryPolicy
from gangq.core.routing import Routing
from gangq.core.scratch import QueueScratch
from gangq.core.state import EngineState
from gangq.core.timers import Timers
from gangq.core.units import format_amount
from gangq.core.views import ClusterQueueView, PendingView, WorkloadView


# Tests extend this class from Python (counting what the engine tries, or with every retry shortcut
# off); mypyc allows that only when asked.
@mypyc_attr(allow_interpreted_subclasses=True)
class Engine:
    """The gang admission engine. Not thread-safe: drive it from one task.

    ``retry``: which waiting gangs a retry tries (:mod:`~gangq.core.retry`); the default,
    :class:`~gangq.core.retry.IncrementalRetry`, decides as :class:`~gangq.core.retry.FullRetry`.
    """

    def __init__(self, config: EngineConfig | None = None, retry: RetryPolicy | None = None) -> None:
        s = self.s = EngineState(config or EngineConfig())
        # What the shells read (the same objects as the state's).
        self.config = s.world.config
        self.quota = s.world.quota
        self.nodes = s.world.nodes
        self.flavors = s.world.flavors
        self.cluster_queues = s.world.cluster_queues
        self.cohort_specs = s.world.cohort_specs
        self.local_queues = s.world.local_queues
        self.namespaces = s.world.namespaces
        self.workloads = s.world.workloads
        self.pods = s.world.pods
        self.placement = Placement(s)
        self.claims = Claims(s, self.placement)
        self.reservations = Reservations(s, self.placement, self.claims)
        self.retry = retry if retry is not None else IncrementalRetry()
        self.retry.bind(s, self.placement, self.claims, self.reservations)
        self.preemption = Preemption(s, self.placement, self.claims, self.reservations)
        self.attempt = Attempt(s, self.placement, self.claims, self.reservations, self.preemption)
        self.reasons = Reasons(s, self.placement, self.claims, self.reservations)
        self.routing = Routing(s)
        self.capacity = Capacity(s, self.retry)
        self.timers = Timers(s, self.routing)
        self.cycle = SchedulingCycle(s, self.retry, self.attempt, self.reservations, self.reasons, self.claims)

    def upsert_flavor(self, spec: FlavorSpec) -> None:
        self.s.world.flavors[spec.name] = spec
        self._config_changed()

    def delete_flavor(self, name: str) -> None:
        self.s.world.flavors.pop(name, None)
        self._config_changed()

    def upsert_cohort(self, spec: CohortSpec) -> None:
        spec.validate()
        self.s.world.quota.set_cohort(spec.name, spec.parent, spec.resource_groups, spec.fair_sharing_weight)
        self.s.world.cohort_specs[spec.name] = spec
        self._config_changed()

    def delete_cohort(self, name: str) -> None:
        self.s.world.cohort_specs.pop(name, None)
        self.s.world.quota.remove_cohort(name)
        self._config_changed()

    def upsert_cluster_queue(self, spec: ClusterQueueSpec) -> None:
        spec.validate()
        node = self.s.world.quota.set_cluster_queue(
            spec.name, spec.cohort, spec.resource_groups, spec.fair_sharing_weight
        )
        cq = self.s.world.cluster_queues.get(spec.name)
        if cq is None:
            cq = ClusterQueueState(spec, node)
            self.s.world.cluster_queues[spec.name] = cq
            self.s.book.scratch[spec.name] = QueueScratch()
        cq.deleted = False
        cq.set_spec(spec)
        if spec.stop_policy == "HoldAndDrain":
            self.s.book.drain["cq:" + spec.name] = None
        self._config_changed()

    def delete_cluster_queue(self, name: str) -> None:
        """Delete a ClusterQueue. Its pending workloads become unrouted; admitted ones keep their
        quota until they finish (like Kueue's resource-in-use finalizer)."""
        cq = self.s.world.cluster_queues.get(name)
        if cq is None:
            return
        cq.deleted = True
        for key in list(cq.ordered()):
            wl = self.s.world.workloads[key[3]]
            cq.discard(wl)
            wl.cq = None
            self.s.book.unrouted[wl.key] = wl
        if not cq.admitted:
            self.s.forget_cluster_queue(cq)
        self._config_changed()

    def upsert_local_queue(self, spec: LocalQueueSpec) -> None:
        self.s.world.local_queues[spec.key] = spec
        if spec.stop_policy == "HoldAndDrain":
            self.s.book.drain["lq:" + spec.key] = None
        self._config_changed()

    def delete_local_queue(self, namespace: str, name: str) -> None:
        self.s.world.local_queues.pop(f"{namespace}/{name}", None)
        self._config_changed()

    def upsert_namespace(self, name: str, labels: dict[str, str]) -> None:
        self.s.world.namespaces[name] = dict(labels)
        self._config_changed()

    def delete_namespace(self, name: str) -> None:
        self.s.world.namespaces.pop(name, None)
        self._config_changed()

    def _config_changed(self) -> None:
        """Specs changed: recheck which queues are active, re-route every pending workload."""
        self.s.world.trees.clear()
        self.s.world.version += 1
        self.s.world.config_version += 1
        self.reservations.cache.clear()
        self.reservations.promised.clear()
        self.placement.shapes.clear()
        self.placement.groups.clear()
        for cq in self.s.world.cluster_queues.values():
            missing = [
                f
                for group in cq.spec.resource_groups
                for f in (fl.name for fl in group.flavors)
                if f not in self.s.world.flavors
            ]
            if cq.deleted:
                cq.inactive_reason = f"ClusterQueue {cq.name!r} is being deleted"
            elif missing:
                cq.inactive_reason = f"ClusterQueue {cq.name!r} is inactive: flavor {missing[0]!r} not found"
            else:
                cq.inactive_reason = None
        # Re-route every pending workload: LocalQueue targets, namespaces or selectors may have moved.
        for cq in list(self.s.world.cluster_queues.values()):
            for key in list(cq.ordered()):
                wl = self.s.world.workloads[key[3]]
                target, _, _ = self.routing.target(wl)
                if target is not cq:
                    cq.discard(wl)
                    wl.cq = None
                    self.s.book.unrouted[wl.key] = wl
            self.s.retry(RetryReason.SPEC_CHANGED, cq)
        for wl in list(self.s.book.unrouted.values()):
            if wl.requeue_at is None and not wl.deactivated:
                self.routing.route(wl)

    def upsert_node(self, spec: NodeSpec) -> None:
        if spec.name.startswith(PROVISIONAL_PREFIX):
            raise SpecError("Node", spec.name, "metadata.name", f"{PROVISIONAL_PREFIX!r} names the engine's own nodes")
        old = self.s.world.nodes.nodes.get(spec.name)
        changed = old is not None and not old.describes(spec)
        node = self.s.world.nodes.upsert(spec)
        provisioning = self.s.world.provisioning
        out = SyncResult()
        if provisioning.pools or spec.name in provisioning.node_pool:
            provisioning.node_upserted(node, self.s.world.workloads.values(), out)
        if changed:
            self.capacity.nodes_changed()
        self._provisional_nodes_changed(out)
        self.capacity.capacity_freed()

    def delete_node(self, name: str) -> None:
        if name.startswith(PROVISIONAL_PREFIX):
            return  # not a node of the cluster's
        if self.s.world.nodes.remove(name) is not None:
            out = SyncResult()
            self.s.world.provisioning.node_removed(name, self.s.world.workloads.values(), out)
            self.s.world.version += 1
            self.capacity.nodes_changed()
            self._provisional_nodes_changed(out)

    def upsert_provisioner(self, spec: ProvisionerSpec) -> None:
        """A node autoscaler's pool (a Karpenter NodePool): the nodes it may still add count in the
        node check as provisional nodes (see :mod:`gangq.core.provisioning`)."""
        spec.validate()
        out = SyncResult()
        self.s.world.provisioning.upsert(spec, self.s.world.workloads.values(), out)
        self._provisional_nodes_changed(out)

    def delete_provisioner(self, name: str) -> None:
        out = SyncResult()
        self.s.world.provisioning.delete(name, out)
        self._provisional_nodes_changed(out)

    def _provisional_nodes_changed(self, out: SyncResult) -> None:
        s = self.s
        if out.removed:
            s.world.version += 1
            self.capacity.nodes_changed()
        if out.added:
            self.capacity.capacity_freed()
        if out.described:
            # What a pool may add is part of the reason of every gang that waits for nodes it
            # could make: those are tried in full again (their node marks are keyed on the config
            # version), so that the reason says what the pool may add now.
            s.world.version += 1
            s.world.config_version += 1
            for cq in s.world.cluster_queues.values():
                if cq.spec.admission_mode == "QuotaAndNodes":
                    s.retry(RetryReason.NODE_POOL_CHANGED, cq)

    def update_pod(self, pod: PodInfo) -> None:
        """A pod is bound to a node (or changed phase). Pods of admitted gangs replace the gang's
        planned pods; other pods just use node capacity."""
        self.capacity.update_pod(pod)

    def delete_pod(self, key: str) -> None:
        """A pod is gone (deleted, or terminal): its node capacity is free again."""
        self.capacity.delete_pod(key)

    def pods_ready(self, key: str, ready: bool = True) -> None:
        """Shells that observe readiness directly (e.g. from JobSet status) report it here."""
        wl = self.s.world.workloads.get(key)
        if wl is not None and wl.state == "Admitted":
            wl.pods_ready = ready or wl.pods_ready

    def submit(self, spec: WorkloadSpec, now: float) -> None:
        """Queue a new workload, or update a pending one (priority, pod sets, queue)."""
        spec.validate()
        wl = self.s.world.workloads.get(spec.key)
        if wl is not None:
            if wl.state != "Pending":
                return  # admitted gangs are immutable; the shell evicts to change them
            self.routing.unqueue(wl)
            fresh = Workload(spec, wl.seq, now)
            fresh.set_queue_ts(wl.queue_ts if spec.creation_time == wl.spec.creation_time else spec.creation_time)
            # The same gang, resubmitted (a spec or label change, or the shell's own patch seen
            # again): its admission history stays, or the preemption budget would count from zero
            # and a requeue timer (whose token is the admission count) would never fire.
            fresh.admit_count = wl.admit_count
            fresh.admitted_at = wl.admitted_at
            fresh.ready_evictions = wl.ready_evictions
            fresh.requeue_at = wl.requeue_at
            fresh.deactivated = wl.deactivated
            fresh.emitted = wl.emitted
            fresh.pending_since = wl.pending_since
            wl = fresh
        else:
            self.s.world.seq += 1
            wl = Workload(spec, self.s.world.seq, now)
        self.s.world.workloads[spec.key] = wl
        if spec.runtime_limit is not None:
            self.s.book.limited[spec.key] = None
        else:
            self.s.book.limited.pop(spec.key, None)
        if wl.deactivated:
            self.s.set_reason(wl, "Deactivated", wl.message)
            self.s.book.unrouted[wl.key] = wl
        elif wl.requeue_at is not None and wl.requeue_at > now:
            self.s.book.unrouted[wl.key] = wl
        else:
            self.routing.route(wl)

    def finish(self, key: str, now: float, *, keep_pods: bool = False) -> None:
        """The workload finished or was deleted: release everything it holds and forget it.

        ``keep_pods``: its bound pods the shell has not reported gone keep their nodes until it
        does (:meth:`delete_pod`), as any pod's do. For a shell that reports every pod's end: a
        finished gang's pods can outlive it (a finished RayJob's cluster stays until KubeRay
        deletes it, after its TTL), and a gang placed onto their nodes meanwhile would wait there,
        holding quota, with nothing running. Without it (a simulation that never reports pods)
        they are taken to be gone with the gang."""
        wl = self.s.world.workloads.pop(key, None)
        if wl is None:
            return
        if wl.state == "Pending":
            self._leave_queue(wl)
        else:
            self.capacity.release(wl)
            if keep_pods:
                self.capacity.detach_pods(wl)
            else:
                self.capacity.forget_pods(wl)
        wl.state = "Finished"
        self.s.book.updates.pop(key, None)
        self.reservations.forget(key)
        self.s.book.limited.pop(key, None)
        self.placement.reachable.pop(key, None)

    def _leave_queue(self, wl: Workload) -> None:
        """Pending ``wl`` leaves its queue (finished, deleted or deactivated): its claim ends (the
        other preemptors' reservations counted it, see Reservations.charge_claims), and the gangs
        it preempted that waited for it may go (EngineState.release_held)."""
        self.routing.unqueue(wl)
        if wl.key in self.s.book.claimants:
            del self.s.book.claimants[wl.key]
            self.s.world.version += 1
        if wl.holding:
            self.s.release_held(wl)

    def eviction_done(self, key: str, now: float) -> None:
        """An evicted gang has stopped (JobSet suspended, pods gone): release it and requeue it."""
        wl = self.s.world.workloads.get(key)
        if wl is None or wl.state != "Evicting":
            return
        self.capacity.release(wl)
        self.capacity.forget_pods(wl)
        wl.state = "Pending"
        wl.admission = None
        wl.running = 0
        wl.pods_ready = False
        wl.pending_since = now
        preemptor = self.s.world.workloads.get(wl.evicted_by) if wl.evicted_by is not None else None
        wl.evicted_by = None
        if preemptor is not None and preemptor.state == "Pending" and preemptor.claim:
            self.s.hold_for_preemptor(wl, preemptor, now)
        elif (shelter := self.s.world.config.preemption_shelter) is not None and wl.preempted >= shelter:
            self.s.hold_until(wl, now)
        if (
            preemptor is not None
            and preemptor.state == "Pending"
            and key in preemptor.victims
            and not any(self.s.stopping(victim) for victim in preemptor.victims)
        ):
            # Its victims' capacity is free: it goes first (see SchedulingCycle.try_preemptors).
            self.s.book.ready_preemptors[preemptor.key] = None
        if wl.deactivated:
            self.s.set_reason(wl, "Deactivated", wl.message)
            self.s.book.unrouted[wl.key] = wl
            return
        requeue_at = wl.evict_requeue_at
        wl.evict_requeue_at = None
        if requeue_at is not None and requeue_at > now:
            wl.requeue_at = requeue_at
            self.s.set_reason(wl, "Backoff", f"requeued after backoff at t={requeue_at:.0f}")
            self.s.book.unrouted[wl.key] = wl
            self.s.add_timer(requeue_at, "requeue", wl.key, wl.admit_count)
            return
        self.routing.route(wl)

    def restore(
        self, spec: WorkloadSpec, cluster_queue: str, flavors: list[dict[str, str]], now: float
    ) -> tuple[Admission | None, str]:
        """Put back a gang that was admitted before a restart, with the flavors it was given.

        Its pods run with those flavors' node labels, so it is charged exactly there (choosing
        again could pick another flavor and charge quota the pods do not use). ``flavors`` has one
        mapping (resource → flavor) per pod set, in order; report the gang's pods after it.

        A gang that takes more than its queue may take now (the quota shrank while the controller
        was down) is restored all the same, charged over quota: its pods run and use those
        resources, and suspending a training job because an admin lowered a quota is what Kueue
        does not do either; ``why`` then says by how much, for the shell to report. Returns the
        admission and ``why``, or None and why it cannot be restored (unknown or inactive
        ClusterQueue, a flavor the queue does not have); the shell then suspends the gang and
        queues it.
        """
        spec.validate()
        existing = self.s.world.workloads.get(spec.key)
        if existing is not None and existing.state != "Pending":
            return existing.admission, ""
        cq = self.s.world.cluster_queues.get(cluster_queue)
        if cq is None or cq.deleted:
            return None, f"ClusterQueue {cluster_queue!r} does not exist"
        if cq.inactive_reason:
            return None, f"ClusterQueue {cluster_queue!r} is inactive: {cq.inactive_reason}"
        if len(flavors) != len(spec.pod_sets):
            return None, f"the admission names {len(flavors)} pod sets, the workload has {len(spec.pod_sets)}"
        usage: dict[FlavorResource, int] = {}
        for ps, mapping in zip(spec.pod_sets, flavors, strict=True):
            for resource, amount in ps.requests.items():
                if amount <= 0 or ps.count == 0:
                    continue
                flavor = mapping.get(resource)
                fr = flavor_resource(flavor or "", resource)
                if flavor is None or fr not in cq.node.nominal:
                    return None, (
                        f"pod set {ps.name!r}: ClusterQueue {cluster_queue!r} has no quota for {resource} in "
                        f"flavor {flavor!r}"
                    )
                usage[fr] = usage.get(fr, 0) + amount * ps.count
        over: list[str] = []
        for fr, need in usage.items():
            available = self.s.world.quota.available(cq.node, fr)
            if need > available:
                over.append(f"{format_amount(fr[1], need)} {fr[1]} in flavor {fr[0]} where ClusterQueue "
                            f"{cluster_queue!r} has {format_amount(fr[1], available)} available")
        if existing is not None:
            self.routing.unqueue(existing)
            self.s.world.workloads.pop(spec.key, None)
        self.s.world.seq += 1
        wl = Workload(spec, self.s.world.seq, now)
        self.s.world.workloads[spec.key] = wl
        if spec.runtime_limit is not None:
            self.s.book.limited[spec.key] = None
        for fr, need in usage.items():
            self.s.world.quota.add_usage(cq.node, fr, need)
        wl.cq = cq
        borrowing = any(cq.node.usage.get(fr, 0) > cq.node.nominal.get(fr, 0) for fr in usage)
        pod_sets = tuple(
            PodSetAssignment(ps.name, ps.count, dict(mapping), dict(ps.requests), {})
            for ps, mapping in zip(spec.pod_sets, flavors, strict=True)
        )
        admission = Admission(wl.key, cq.name, pod_sets, borrowing, now, dict(usage))
        wl.state = "Admitted"
        wl.usage = usage
        wl.admission = admission
        wl.admitted_at = now
        wl.admit_count = 1
        wl.message = f"admitted by ClusterQueue {cq.name!r} (restored)"
        cq.admitted[wl.key] = wl
        cq.admitted_total += 1
        if spec.runtime_limit is not None:
            wl.end_time = now + spec.runtime_limit
            self.s.book.running_by_end.add((wl.end_time, wl.seq, wl.key))
        for pod_key in list(existing.pods) if existing is not None else ():
            pod = self.s.world.pods.get(pod_key)
            if pod is not None:  # reported while it was queued: now they are an admitted gang's pods
                self.capacity.delete_pod(pod_key)
                self.capacity.update_pod(pod)
        self.s.world.version += 1
        self.s.start_ready_timer(wl, now)
        return admission, ("over quota: " + "; ".join(over)) if over else ""

    def deactivate(self, key: str, now: float, message: str) -> None:
        """Take a workload out of queueing until :meth:`reactivate` (Kueue's ``spec.active:
        false``, set by an admin): a queued gang leaves its queue with reason ``Deactivated``; an
        admitted one is evicted at the next :meth:`schedule` and not requeued when it has stopped.

        An admin needs a way to park a gang without deleting it (and its history), and the same
        switch is what brings back a gang deactivated after too many pods-ready timeouts.
        """
        wl = self.s.world.workloads.get(key)
        if wl is None or wl.deactivated:
            return
        wl.deactivated = True
        wl.message = message
        if wl.state == "Pending":
            self._leave_queue(wl)
            wl.requeue_at = None
            self.s.book.unrouted[wl.key] = wl
            self.s.set_reason(wl, "Deactivated", message)
        elif wl.state == "Admitted":
            self.s.book.drain[f"wl:{key}"] = None
        # Evicting: eviction_done keeps it out of its queue.

    def restore_stopping(
        self, spec: WorkloadSpec, cluster_queue: str, flavors: list[dict[str, str]], now: float
    ) -> tuple[Admission | None, str]:
        """Put back a gang that was being evicted when the controller stopped (suspended, its pods
        still running), with the flavors it was admitted with. It holds that quota and those nodes
        until its pods are gone (:meth:`eviction_done`), as it would have without the restart: a
        restart between the suspend and the end of the pods otherwise gave its quota to the next
        gang while its pods still ran. Returns what :meth:`restore` returns."""
        return self._restore_as_stopping(spec, cluster_queue, flavors, now, "stopping: evicted before a restart")

    def _restore_as_stopping(
        self, spec: WorkloadSpec, cluster_queue: str, flavors: list[dict[str, str]], now: float, message: str
    ) -> tuple[Admission | None, str]:
        """:meth:`restore`, then hold the gang as one being evicted until :meth:`eviction_done`."""
        admission, why = self.restore(spec, cluster_queue, flavors, now)
        wl = self.s.world.workloads.get(spec.key)
        if admission is not None and wl is not None and wl.state == "Admitted":
            wl.state = "Evicting"
            wl.message = message
            self.s.world.version += 1
        return admission, why

    def hold_started(self, spec: WorkloadSpec, now: float) -> tuple[Admission | None, str]:
        """Charge a gang whose pods may have started before its admission (it was created
        unsuspended, with no webhook to suspend it at creation) and hold it as an evicted gang
        until its pods are gone (:meth:`eviction_done`), which then queues it.

        Without this its ClusterQueue's quota looked free while its pods still ran (a suspended
        Job's pods run until they terminate), and gangq admitted other gangs, or the same one
        again, on top of them: the queue ran over quota for as long as they took to stop.

        It is charged to the ClusterQueue of its LocalQueue with the flavors the queue would try
        first, over quota if need be (its pods run whatever the quota says, as a restored gang's
        do). Returns what :meth:`restore` returns; (None, why) when it cannot be charged (no
        ClusterQueue for it, no flavor for its requests): it is then queued as usual.
        """
        spec.validate()
        existing = self.s.world.workloads.get(spec.key)
        if existing is not None and existing.state != "Pending":
            return existing.admission, ""
        probe = Workload(spec, 0, now)
        cq, _, why = self.routing.target(probe)
        if cq is None:
            return None, why
        options = flavor_options(cq.spec, self.s.world.flavors, spec.pod_sets)
        if options.why or not options.combos:
            return None, options.why or f"ClusterQueue {cq.name!r} has no flavor for its requests"
        flavors: list[dict[str, str]] = [{} for _ in spec.pod_sets]
        for choice in options.combos[0]:
            flavors[choice.index] = dict(choice.flavors)
        return self._restore_as_stopping(spec, cq.name, flavors, now, "stopping: started before its admission")

    def reactivate(self, key: str, now: float) -> None:
        """Put a deactivated workload back in its queue (an admin's explicit decision); its count
        of pods-ready evictions starts again at zero."""
        wl = self.s.world.workloads.get(key)
        if wl is None or not wl.deactivated:
            return
        wl.deactivated = False
        wl.ready_evictions = 0
        wl.requeue_at = None
        if wl.state == "Pending":
            self.s.book.unrouted.pop(wl.key, None)
            self.routing.route(wl)

    def schedule(self, now: float) -> list[Decision]:
        """Run timers (pods-ready timeouts, backoff), drains, then one scheduling cycle that admits
        as many whole gangs as fit. Returns the decisions, in the order they were taken."""
        decisions: list[Decision] = []
        if self.s.world.provisioning.pools:
            out = SyncResult()
            self.s.world.provisioning.resync(self.s.world.workloads.values(), out)
            self._provisional_nodes_changed(out)
        self.timers.run(now, decisions)
        self.timers.run_drains(now, decisions)
        # Another cycle at once after one that admitted and left queues to retry, or whose
        # changes asked for it (EngineState.repeat_cycle): see docs/engine.md, "Retry reasons",
        # for why, and why it ends.
        while True:
            asked = self.s.call.cycle_again
            if not (self.cycle.run(now, decisions) or self.s.call.cycle_again != asked) or not self.s.book.dirty:
                break
        for name in self.s.book.deferred_preemptions:
            # PREEMPTION_DEFERRED: see Preemption.admitted_now.
            deferred = self.s.world.cluster_queues.get(name)
            if deferred is not None:
                self.s.retry(RetryReason.PREEMPTION_DEFERRED, deferred)
        self.s.book.deferred_preemptions.clear()
        if self.s.book.cite_ended:
            self.reasons.refresh_citations(now)
        for key in self.s.book.updates:
            wl = self.s.world.workloads.get(key)
            if wl is None or wl.state != "Pending":
                continue
            current = (wl.reason, wl.message)
            if wl.emitted != current:
                wl.emitted = current
                decisions.append(PendingUpdate(wl.key, wl.cq.name if wl.cq else None, wl.reason, wl.message, now))
        self.s.book.updates.clear()
        return decisions

    def next_wakeup(self) -> float | None:
        """The earliest time at which :meth:`schedule` has timed work (None: only events matter)."""
        return self.timers.next_wakeup()

    def retry_counts(self) -> dict[str, int]:
        """Retries asked for since the engine started, per reason (:class:`RetryReason`, by its
        metric label): every reason, zeros included."""
        counts = self.s.book.retry_counts
        return {reason_label(reason): counts[reason] for reason in REASONS}

    def position(self, key: str) -> tuple[int, int] | None:
        """(1-based position, queue length) of a pending workload in its ClusterQueue."""
        return self.reasons.position(key)

    def workload(self, key: str) -> WorkloadView | None:
        """What a person asks about one workload: state, queue, reason, position."""
        return self.reasons.workload_view(key)

    def pending_workloads(self, cluster_queue: str, limit: int | None = None, offset: int = 0) -> list[PendingView]:
        """The pending workloads of a ClusterQueue in admission order (Kueue's visibility API)."""
        return self.reasons.pending_views(cluster_queue, limit, offset)

    def cluster_queue(self, name: str) -> ClusterQueueView | None:
        """Status of a ClusterQueue: active or why not, pending / admitted counts, usage."""
        return self.reasons.cluster_queue_view(name)

    def check_invariants(self) -> None:
        """Assert the engine's invariants (used by tests and the simulator's debug mode)."""
        for cq in self.s.world.cluster_queues.values():
            usage: dict[FlavorResource, int] = {}
            for wl in cq.admitted.values():
                assert wl.state in ("Admitted", "Evicting"), wl.key
                assert wl.cq is cq, wl.key
                for fr, amount in wl.usage.items():
                    usage[fr] = usage.get(fr, 0) + amount
            for fr in set(usage) | set(cq.node.usage):
                assert usage.get(fr, 0) == cq.node.usage.get(fr, 0), (cq.name, fr)
        pods = self.s.world.pods
        for wl in self.s.world.workloads.values():
            if wl.state in ("Admitted", "Evicting"):
                # What it holds: its planned pods and the pods bound while it was admitted.
                held: dict[str, dict[str, int]] = {}
                slots = [(node, wl.spec.pod_sets[index].requests, count) for (index, node), count in wl.planned.items()]
                slots += [(pods[key].node, pods[key].requests, 1) for key, holds in wl.pods.items() if holds]
                for node, requests, count in slots:
                    amounts = held.setdefault(node, {})
                    for resource, amount in requests.items():
                        amounts[resource] = amounts.get(resource, 0) + amount * count
                assert _nonzero(wl.held) == _nonzero(held), wl.key
            if wl.state == "Pending":
                assert wl.reason, wl.key
                assert not wl.planned and all(not any(h.values()) for h in wl.held.values()), wl.key
                in_queue = wl.cq is not None and wl.queued is not None
                assert in_queue != (wl.key in self.s.book.unrouted), wl.key
        if self.s.world.quota.log is not None or self.s.world.nodes.log is not None:
            raise AssertionError("a statement was left open")


def _nonzero(held: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Amounts per node and resource, without the zero ones (for comparisons)."""
    out = {node: {r: v for r, v in amounts.items() if v} for node, amounts in held.items()}
    return {node: amounts for node, amounts in out.items() if amounts}


__all__ = ["Engine", "SpecError"]
