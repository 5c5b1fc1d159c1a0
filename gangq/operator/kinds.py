"""One handler per watched kind, in an explicit table: a watch event → the engine and the caches.

:meth:`Kinds.apply` drops what the engine must not see again — an event older than one already
applied (kopf's initial list after the restart's own), and a configuration object whose relevant
part did not change (our own status writes come back as MODIFIED events, and an upsert re-routes
every pending workload) — then calls the kind's handler. Bad input never stops the loop: an
invalid queue object is reported on its status and left out of the engine (a ResourceFlavor,
which has no status, on the status of the ClusterQueues that name it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from gangq.api import nodepools, queues
from gangq.api.meta import Meta, object_key, resource_version
from gangq.core import PodInfo
from gangq.core.errors import SpecError
from gangq.core.model import ClusterQueueSpec, TopologySpec
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.job import JOB
from gangq.integrations.podgroup import PODGROUP
from gangq.integrations.registry import BY_PLURAL, REFERENCED_BY, pod_gang
from gangq.operator.evictions import RESYNCED
from gangq.operator.gangs import Gangs
from gangq.operator.podgroups import PodGroupFeed
from gangq.operator.state import ControllerState
from gangq.operator.status import Statuses
from gangq.operator.topologypods import TopologyPods
from gangq.operator.translate import CONFIG_KINDS, CQ_FINALIZER, NAMESPACED, node_spec, pod_requests, relevant
from gangq.operator.writer import ADMISSION_FAILED, WRITTEN

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any], str, float], None]
"""``(event type, object, key, now)``."""

_NEVER_APPLIED = object()  # not None: an object without ``spec`` (Kueue's example ResourceFlavor) is applied too


class Kinds:
    """The per-kind handlers and the table :meth:`apply` dispatches on."""

    def __init__(self, state: ControllerState, gangs: Gangs, statuses: Statuses) -> None:
        self.state = state
        self.engine = state.engine
        self.gangs = gangs
        self.statuses = statuses
        self._applied: dict[tuple[str, str], Any] = {}  # what the engine last got per configuration object
        self._bound_pods: set[str] = set()  # pods on a node that the engine holds
        self.deleting_queues: dict[str, dict[str, Any]] = {}  # ClusterQueues deleting, with our finalizer on
        self.pod_groups = PodGroupFeed(gangs)
        self.topology_pods = TopologyPods(state, gangs.writer)
        gangs.objects_written = self.pod_groups.written
        self.topologies: dict[str, TopologySpec] = {}  # the valid Topologies
        self.topology_errors: dict[str, str] = {}  # Topology name -> why it is invalid
        self.flavor_specs: dict[str, Any] = {}  # ResourceFlavor name -> its spec (re-applied when its Topology changes)
        self.admission_checks: dict[str, queues.AdmissionCheck] = {}
        self.pool_problems: dict[str, str] = {}  # NodePool -> why gangq counts none of its nodes
        self.cq_checks: dict[str, list[queues.CheckRef]] = {}  # ClusterQueue -> the admission checks it names
        self.cq_specs: dict[str, ClusterQueueSpec] = {}  # ClusterQueue -> its spec as parsed (re-applied on a check)
        statuses.admission_checks = self.admission_checks  # reported on their status
        self.handlers: dict[str, Handler] = {
            "topologies": self.topology,
            "resourceflavors": self.resource_flavor,
            "admissionchecks": self.admission_check,
            "cohorts": self.cohort,
            "clusterqueues": self.cluster_queue,
            "localqueues": self.local_queue,
            "workloadpriorityclasses": self.workload_priority_class,
            "priorityclasses": self.priority_class,
            "namespaces": self.namespace,
            "nodes": self.node,
            "nodepools": self.node_pool,
            "pods": self.pod,
            **{plural: gangs.queued_kind_event(kind) for plural, kind in BY_PLURAL.items()},
            **{plural: self.reference_event(plural) for plural in REFERENCED_BY},
            JOB.plural: gangs.job_event,  # a JobSet's child Jobs come through the same watch
            PODGROUP.plural: self.pod_groups.podgroup_event,  # a group's gang is assembled with its pods
            "workloads": gangs.workload_event,
        }
        self.outcomes: dict[str, Handler] = {WRITTEN: gangs.written, ADMISSION_FAILED: gangs.admission_failed,
                                             RESYNCED: gangs.resynced}

    def apply(self, plural: str, event_type: str, obj: dict[str, Any], now: float) -> None:
        """One watch event (or the outcome of one of our writes) on the scheduling loop."""
        outcome = self.outcomes.get(plural)
        if outcome is not None:
            outcome(event_type, obj, obj["key"], now)
            return
        if plural in NAMESPACED and not self.state.watched_namespace(obj):
            return  # `namespaces` is set and this one is not in it (the restart lists are cluster-wide)
        key = object_key(obj)
        rv = resource_version(obj)
        rvs = self.state.rvs
        seen = rvs.get((plural, key), 0)
        if event_type != "DELETED" and rv and rv < seen:
            return  # older than what we already applied (e.g. kopf's initial list after ours)
        if event_type != "DELETED" and rv and rv == seen and plural not in BY_PLURAL:
            return
        if event_type == "DELETED":
            rvs.pop((plural, key), None)
        elif rv:
            rvs[(plural, key)] = rv
        if plural in CONFIG_KINDS:
            part = relevant(plural, obj)
            if event_type == "DELETED":
                self._applied.pop((plural, key), None)
            elif self._applied.get((plural, key), _NEVER_APPLIED) == part:
                return
            else:
                self._applied[(plural, key)] = part
        self.handlers[plural](event_type, obj, key, now)

    # ------------------------------------------------------------------------------------------
    # Queues
    # ------------------------------------------------------------------------------------------

    def topology(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        """A Topology: its levels are what the flavors naming it (``spec.topologyName``) get, so
        each of them is applied again. An invalid Topology counts as missing (its flavors are left
        out, their ClusterQueues inactive) and its error is told on those ClusterQueues' status; a
        Topology has no status."""
        self.topologies.pop(key, None)
        self.topology_errors.pop(key, None)
        if event_type != "DELETED":
            try:
                self.topologies[key] = queues.topology(key, obj.get("spec"))
            except SpecError as err:
                log.warning("%s", err)
                self.topology_errors[key] = str(err)
        for flavor, spec in list(self.flavor_specs.items()):
            try:
                _, wanted = queues.parse_resource_flavor(flavor, spec)
            except SpecError:
                continue
            if wanted == key:
                self._apply_flavor(flavor)

    def resource_flavor(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        """An invalid flavor is left out of the engine (an older valid version too: its queues must
        not admit with a spec the admin replaced), and so is one naming a Topology that does not
        exist (Kueue's ``TopologyNotFound``); a ResourceFlavor has no status, so the error is told
        on the status of every ClusterQueue that names it (see ``Statuses.flavor_errors``)."""
        if event_type == "DELETED":
            self.flavor_specs.pop(key, None)
            self.engine.delete_flavor(key)
            self.statuses.flavor_errors.pop(key, None)
            self.statuses.missing_topologies.pop(key, None)
            return
        self.flavor_specs[key] = obj.get("spec")
        self._apply_flavor(key)

    def _apply_flavor(self, key: str) -> None:
        self.statuses.missing_topologies.pop(key, None)
        try:
            self.engine.upsert_flavor(queues.resource_flavor(key, self.flavor_specs[key], self.topologies))
        except queues.TopologyNotFound as err:
            invalid = self.topology_errors.get(err.topology_name)
            message = str(err) if invalid is None else f"{err}: the Topology is invalid: {invalid}"
            log.warning("%s", message)
            self.engine.delete_flavor(key)
            self.statuses.flavor_errors[key] = message
            self.statuses.missing_topologies[key] = err.topology_name
        except SpecError as err:
            log.warning("%s", err)
            self.engine.delete_flavor(key)
            self.statuses.flavor_errors[key] = str(err)
        else:
            self.statuses.flavor_errors.pop(key, None)

    def admission_check(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        """An AdmissionCheck is accepted and reported (its status says gangq does not run its
        controller); every ClusterQueue naming it is applied again, as its inactive reason names
        the check."""
        kind_key = f"ac:{key}"
        self.admission_checks.pop(key, None)
        if event_type == "DELETED":
            self.statuses.queue_deleted(kind_key)
        else:
            problem: SpecError | None = None
            try:
                self.admission_checks[key] = queues.admission_check(key, obj.get("spec"))
            except SpecError as err:
                log.warning("%s", err)
                problem = err
            self.statuses.queue_seen(kind_key, problem)
        for cq, refs in self.cq_checks.items():
            if any(r.name == key for r in refs) and cq in self.cq_specs:
                self._upsert_cluster_queue(cq, self.cq_specs[cq])

    def _upsert_cluster_queue(self, key: str, spec: ClusterQueueSpec) -> None:
        """Give the engine a ClusterQueue. One that names admission checks admits nothing (gangq runs
        no admission-check controller; :func:`gangq.api.queues.admission_check_problem`): the engine
        gets it held (``stopPolicy: Hold`` unless it is stopped already: its admitted gangs run on,
        as in an inactive Kueue ClusterQueue) and its status and its Workloads say why."""
        problem = queues.admission_check_problem(key, self.cq_checks.get(key, []), self.admission_checks)
        if problem is None:
            self.statuses.check_problems.pop(key, None)
            self.engine.upsert_cluster_queue(spec)
            return
        self.statuses.check_problems[key] = problem
        held = ClusterQueueSpec(key, spec.resource_groups, spec.cohort, spec.queueing_strategy,
                                spec.namespace_selector, spec.preemption, spec.flavor_fungibility,
                                spec.stop_policy if spec.stop_policy != "None" else "Hold",
                                spec.fair_sharing_weight, spec.admission_mode)
        self.engine.upsert_cluster_queue(held)

    def cohort(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        """An invalid Cohort (a parent cycle, bad quota) is left out of the engine and reported on
        its status, like a ClusterQueue."""
        kind_key = f"co:{key}"
        if event_type == "DELETED":
            self.engine.delete_cohort(key)
            self.statuses.queue_deleted(kind_key)
            return
        problem: SpecError | None = None
        try:
            self.engine.upsert_cohort(queues.cohort(key, obj.get("spec")))
        except SpecError as err:
            log.warning("%s", err)
            problem = err
            self.engine.delete_cohort(key)
        self.statuses.queue_seen(kind_key, problem)

    def cluster_queue(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        kind_key = f"cq:{key}"
        if event_type == "DELETED":
            self.engine.delete_cluster_queue(key)
            self.statuses.queue_deleted(kind_key)
            self.statuses.check_problems.pop(key, None)
            self.deleting_queues.pop(key, None)
            self.cq_checks.pop(key, None)
            self.cq_specs.pop(key, None)
            return
        meta = Meta(obj)
        deleting = meta.deleting
        if deleting and self.state.recovered.is_set():
            # It admits nothing more; its admitted gangs keep running and their quota until they
            # are done, then the finalizer goes (release_deleted_queues).
            self.engine.delete_cluster_queue(key)
            self.deleting_queues[key] = obj
            return
        problem: SpecError | None = None
        self.cq_checks.pop(key, None)
        self.cq_specs.pop(key, None)
        try:
            spec = queues.cluster_queue(key, obj.get("spec"))
            self.cq_checks[key] = queues.admission_checks(key, obj.get("spec"))
            self._upsert_cluster_queue(key, spec)
            self.cq_specs[key] = spec
        except SpecError as err:
            log.warning("%s", err)
            problem = err
            self.statuses.check_problems.pop(key, None)
            self.engine.delete_cluster_queue(key)
        if deleting:  # during recovery: kept until the gangs admitted to it are restored
            self.deleting_queues[key] = obj
            return
        self.statuses.queue_seen(kind_key, problem)
        if CQ_FINALIZER not in meta.finalizers:
            self.gangs.writer.write_cq_finalizer(key, obj, add=True)

    def recovery_objects(self, kind: WorkloadKind, listed: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The objects of a queued kind a restart puts back: those listed; for pod groups, the
        groups assembled from the listed PodGroups and pods (their gang objects; the admission is
        recorded on the pods), held back from the gangs until :meth:`recovered_object` queues
        them or the recovery ends."""
        if kind is PODGROUP:
            return self.pod_groups.recover(listed[kind.plural], listed["pods"])
        return listed[kind.plural]

    def recovered_object(self, kind: WorkloadKind, obj: dict[str, Any], now: float) -> None:
        """Queue one of :meth:`recovery_objects` as its watch event would."""
        if kind is PODGROUP:
            self.pod_groups.hand_on(obj, now)
        else:
            self.apply(kind.plural, "ADDED", obj, now)

    def delete_queues_after_recovery(self) -> None:
        """The ClusterQueues that were being deleted when the controller started: deleted in the
        engine once recovery has restored the gangs admitted to them."""
        for key in self.deleting_queues:
            self.engine.delete_cluster_queue(key)

    def release_deleted_queues(self) -> None:
        """Take the finalizer off deleting ClusterQueues that have no admitted gang left."""
        if not self.deleting_queues:
            return
        for key, obj in list(self.deleting_queues.items()):
            view = self.engine.cluster_queue(key)
            if view is None or view.admitted == 0:
                del self.deleting_queues[key]
                if CQ_FINALIZER in Meta(obj).finalizers:
                    self.gangs.writer.write_cq_finalizer(key, obj, add=False)

    def local_queue(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        kind_key = f"lq:{key}"
        ns, _, name = key.partition("/")
        if event_type == "DELETED":
            self.engine.delete_local_queue(ns, name)
            self.statuses.queue_deleted(kind_key)
            return
        problem: SpecError | None = None
        try:
            self.engine.upsert_local_queue(queues.local_queue(ns, name, obj.get("spec")))
        except SpecError as err:
            log.warning("%s", err)
            problem = err
            self.engine.delete_local_queue(ns, name)
        self.statuses.queue_seen(kind_key, problem)

    def workload_priority_class(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        _set_priority(self.gangs.workload_priority_classes, event_type, obj, key)
        self.gangs.retry_invalid(now)

    def priority_class(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        _set_priority(self.gangs.priority_classes, event_type, obj, key)
        self.gangs.retry_invalid(now)

    def reference_event(self, plural: str) -> Handler:
        """The handler of an object queued kinds build their gangs from (a TrainJob's runtime):
        each kind that names it hears of it, and one whose waiting gangs may map differently now
        maps them again (:meth:`Gangs.remap`)."""
        kinds = REFERENCED_BY[plural]
        resource = next(r for r in kinds[0].reference_resources if r.plural == plural)

        def handle(event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
            for kind in kinds:
                if kind.reference_event(resource, event_type, obj):
                    self.gangs.remap(kind, now)
        return handle

    def references_listed(self, plural: str, objects: list[dict[str, Any]]) -> None:
        """Every object of a reference resource as a restart lists them, to each kind that names
        it (:meth:`WorkloadKind.reference_listed`: what a kind heard of before and is not listed
        is gone); their versions are kept, so the watch's initial list of the same is dropped."""
        kinds = REFERENCED_BY[plural]
        resource = next(r for r in kinds[0].reference_resources if r.plural == plural)
        for obj in objects:
            rv = resource_version(obj)
            if rv:
                self.state.rvs[(plural, object_key(obj))] = rv
        for kind in kinds:
            kind.reference_listed(resource, list(objects))

    # ------------------------------------------------------------------------------------------
    # The cluster
    # ------------------------------------------------------------------------------------------

    def namespace(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        if event_type == "DELETED":
            self.engine.delete_namespace(key)
            self.state.namespace_labels.pop(key, None)
        else:
            labels = dict(Meta(obj).labels)
            self.engine.upsert_namespace(key, labels)
            self.state.namespace_labels[key] = labels

    def node(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        if event_type == "DELETED":
            self.engine.delete_node(key)
        else:
            self.engine.upsert_node(node_spec(obj))

    def node_pool(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        """A Karpenter NodePool: the nodes it may still add count in the node check
        (:mod:`gangq.core.provisioning`). One without ``gangq.io/node-resources``, or with bad
        input, counts for nothing, and the log says why once per change."""
        problem = ""
        spec = None
        if event_type != "DELETED":
            try:
                spec = nodepools.node_pool(obj)
            except SpecError as err:
                problem = str(err)
            else:
                if spec is None:
                    problem = (f"NodePool {key} has no annotation {nodepools.NODE_RESOURCES} (what one of its nodes "
                               f"offers, e.g. nvidia.com/gpu=8,cpu=64,memory=512Gi)")
            if spec is not None:
                try:
                    self.engine.upsert_provisioner(spec)
                except SpecError as err:
                    problem, spec = str(err), None
        if spec is None:
            self.engine.delete_provisioner(key)
        if problem and self.pool_problems.get(key) != problem:
            log.warning("%s: gangq counts none of the nodes it may add", problem)
        if problem:
            self.pool_problems[key] = problem
        else:
            self.pool_problems.pop(key, None)

    def pod(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        """Every bound pod uses node capacity; a gang's pods replace its planned placement and
        count towards PodsReady. Terminal and deleted pods leave the engine."""
        owner = pod_gang(obj)
        gang, pod_set = owner if owner is not None else (None, None)
        phase = (obj.get("status") or {}).get("phase")
        node = (obj.get("spec") or {}).get("nodeName")
        gone = event_type == "DELETED" or phase in ("Succeeded", "Failed")
        if gang is not None:
            self.gangs.pod_seen(gang, key, gone=gone)
            self.topology_pods.pod_event(gang, pod_set, key, obj, gone)
        if gone or not node:
            if key in self._bound_pods:
                self._bound_pods.discard(key)
                self.engine.delete_pod(key)
        else:
            try:
                requests = pod_requests(obj)
            except SpecError as err:
                log.warning("pod %s: %s", key, err)
                requests = {}
            self.engine.update_pod(
                PodInfo(key, node, requests, workload=gang, pod_set=pod_set, running=phase == "Running")
            )
            self._bound_pods.add(key)
        if gang is not None:
            self.gangs.pods_changed(gang, now)
            if PODGROUP.pod_owner(obj) == owner:  # a pod group's: its gang is assembled from its pods
                self.pod_groups.pod_event(event_type, obj, now)


def _set_priority(classes: dict[str, int], event_type: str, obj: dict[str, Any], key: str) -> None:
    if event_type == "DELETED":
        classes.pop(key, None)
    else:
        value = obj.get("value")
        if isinstance(value, int) and not isinstance(value, bool):
            classes[key] = value
