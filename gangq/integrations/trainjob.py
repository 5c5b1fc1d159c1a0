"""Kubeflow Trainer v2 TrainJob (``trainer.kubeflow.org/v1alpha1``), held to the Trainer v2.0.0
controller.

A TrainJob names a runtime (``spec.runtimeRef``: a namespaced TrainingRuntime or a
ClusterTrainingRuntime, the default) whose ``spec.template`` is a JobSet template; the Trainer
creates one JobSet of the TrainJob's name from it, controlled by the TrainJob. So the TrainJob's
gang is that JobSet's, worked out before the JobSet exists, as the Trainer builds it:

- one pod set per replicatedJob of the runtime's template, named after it (Kueue's names);
- pods per Job: the Job's ``parallelism`` (at least 1); for the replicatedJob labelled
  ``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` the runtime's ``mlPolicy.numNodes``
  instead, and ``spec.trainer.numNodes`` over both (with ``mlPolicy.mpi`` it sizes the
  replicatedJob named ``node`` instead, one less with ``runLauncherAsNode``);
- Jobs per replicatedJob: 1 for the trainer and initializer steps (the Trainer runs one),
  ``replicas`` for any other;
- the pod template: the runtime's, with ``spec.podSpecOverrides`` merged in order (node selector
  keys added, tolerations replaced, as the Trainer's strategic merge does) and
  ``spec.trainer.resourcesPerNode`` as the trainer step's ``node`` container's resources.

The runtime is another object: the controller watches TrainingRuntimes and
ClusterTrainingRuntimes (:attr:`TrainJobKind.reference_resources`) into :class:`Runtimes`, which
the kind reads. A TrainJob whose runtime does not exist (yet) is inadmissible with a reason that
says so, and is mapped again when the runtime appears or changes (its signature carries the
runtime's version).

Admission: the Trainer lets a TrainJob carry node selectors and tolerations only through
``spec.podSpecOverrides``, and its webhook lets that list change only while the TrainJob is
suspended and its JobSet has no active Job, and lets each replicatedJob be named by one override
only. So the admission is two patches of the TrainJob (:meth:`TrainJobKind.admission_writes`):
first, still suspended, the flavors merged into the override of each admitted replicatedJob (one
is added where the user wrote none; an override naming several replicatedJobs is split), the list
as the user wrote it recorded in annotation ``gangq.io/original-pod-spec-overrides``; then the
admission record and ``spec.suspend: false``. The eviction suspends; once the gang has stopped
(its pods gone, its Jobs suspended) the recorded list is put back
(:meth:`TrainJobKind.stopped_ops`). A re-admission always starts from the recorded list, so flavors
never pile up.

The TrainJob shares its gang key with its JobSet (``namespace/name``): the JobSet is the
TrainJob's by construction (same namespace and name, controlled by it), so the JobSet's pods,
child Jobs and the embedded JobSet controller's bookkeeping, all keyed by the JobSet, are the
TrainJob's gang's. The JobSet itself is not queued (the JobSet kind's ``ours`` reads
:attr:`TrainJobKind.child_resources`).

Finished once its ``Complete`` or ``Failed`` condition is true (the Trainer copies them from its
JobSet). Nothing here does I/O.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gangq.api.batchjob import terminal_condition
from gangq.api.meta import Meta
from gangq.core.decisions import Admission
from gangq.core.errors import SpecError
from gangq.core.model import FlavorSpec
from gangq.integrations import podsets
from gangq.integrations.interface import ObjectWrite, WorkloadKind
from gangq.integrations.jobset import JOBSET
from gangq.integrations.podsets import Patch, PodSet, Resource, object_name, pointer, toleration_identity

GROUP: Final = "trainer.kubeflow.org"
VERSION: Final = "v1alpha1"
KIND: Final = "TrainJob"
PLURAL: Final = "trainjobs"
TRAINING_RUNTIME: Final = "TrainingRuntime"
CLUSTER_TRAINING_RUNTIME: Final = "ClusterTrainingRuntime"
TRAINING_RUNTIMES: Final = Resource(GROUP, VERSION, "trainingruntimes")
CLUSTER_TRAINING_RUNTIMES: Final = Resource(GROUP, VERSION, "clustertrainingruntimes")
PODGROUPS: Final = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups")
"""The coscheduling PodGroup the Trainer creates for a runtime with ``podGroupPolicy``."""

ANCESTOR_LABEL: Final = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP: Final = "trainer"
INITIALIZER_STEPS: Final = frozenset({"dataset-initializer", "model-initializer"})
NODE: Final = "node"
"""The trainer container's name, and the MPI runtime's worker replicatedJob's."""
TRAINER_CONTROLLER: Final = "trainer.kubeflow.org/trainjob-controller"
"""``spec.managedBy`` of a TrainJob the Trainer runs (also when unset)."""
COMPLETE: Final = "Complete"
FAILED: Final = "Failed"

OVERRIDES_ANNOTATION: Final = "gangq.io/original-pod-spec-overrides"
"""``spec.podSpecOverrides`` as the user wrote it (``null``: absent), recorded by the admission."""

_RESOLVED: Final = "gangq:resolvedPodTemplates"
"""Where :meth:`TrainJobKind.resolved` puts the pod templates the Trainer will make."""


# --- runtimes ---------------------------------------------------------------------------------


class Runtimes:
    """The TrainingRuntimes and ClusterTrainingRuntimes the controller's watches have shown, by
    name: what a TrainJob's pod sets are built from."""

    def __init__(self) -> None:
        self._cluster: dict[str, Mapping[str, Any]] = {}
        self._namespaced: dict[tuple[str, str], Mapping[str, Any]] = {}

    def observe(self, resource: Resource, event_type: str, obj: Mapping[str, Any]) -> None:
        """Record a watch event (``ADDED`` / ``MODIFIED`` / ``DELETED``) of either resource."""
        meta = Meta(obj)
        name = meta.name
        if resource == CLUSTER_TRAINING_RUNTIMES:
            if event_type == "DELETED":
                self._cluster.pop(name, None)
            else:
                self._cluster[name] = obj
        elif resource == TRAINING_RUNTIMES:
            key = (meta.namespace_or_default, name)
            if event_type == "DELETED":
                self._namespaced.pop(key, None)
            else:
                self._namespaced[key] = obj
        else:
            raise ValueError(f"{resource.plural} is not a Trainer runtime")

    def get(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        if kind == CLUSTER_TRAINING_RUNTIME:
            return self._cluster.get(name)
        return self._namespaced.get((namespace, name))

    def listed(self, resource: Resource, objects: list[Mapping[str, Any]]) -> None:
        """Every object of either resource, as listed: the others of that resource are gone."""
        if resource == CLUSTER_TRAINING_RUNTIMES:
            self._cluster.clear()
        elif resource == TRAINING_RUNTIMES:
            self._namespaced.clear()
        for obj in objects:
            self.observe(resource, "ADDED", obj)

    def clear(self) -> None:
        self._cluster.clear()
        self._namespaced.clear()


@dataclass(frozen=True, slots=True)
class RuntimeRef:
    kind: str
    name: str


def runtime_ref(obj: Mapping[str, Any]) -> RuntimeRef:
    """The TrainJob's ``spec.runtimeRef`` with the CRD's defaults (group ``trainer.kubeflow.org``,
    kind ``ClusterTrainingRuntime``)."""
    ref = (obj.get("spec") or {}).get("runtimeRef")
    name = object_name(obj)
    if not isinstance(ref, Mapping) or not ref.get("name"):
        raise SpecError(KIND, name, "spec.runtimeRef.name", "is required (the TrainingRuntime or "
                                                             "ClusterTrainingRuntime to run)")
    group = ref.get("apiGroup") or GROUP
    kind = ref.get("kind") or CLUSTER_TRAINING_RUNTIME
    if group != GROUP or kind not in (TRAINING_RUNTIME, CLUSTER_TRAINING_RUNTIME):
        raise SpecError(KIND, name, "spec.runtimeRef", f"names {kind} of API group {group}: the Trainer runs "
                                                       f"only a {TRAINING_RUNTIME} or {CLUSTER_TRAINING_RUNTIME}")
    return RuntimeRef(str(kind), str(ref["name"]))


# --- the JobSet the Trainer builds ------------------------------------------------------------


def _int(value: Any, default: int, name: str, field: str, runtime: str = "") -> int:
    """A non-negative integer field of the TrainJob ``name`` (or, with ``runtime``, of its runtime:
    the error names the TrainJob's ``spec.runtimeRef`` and the runtime's field)."""
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        if runtime:
            raise SpecError(KIND, name, "spec.runtimeRef", f"{runtime}: {field} must be a non-negative integer, "
                                                           f"got {value!r}")
        raise SpecError(KIND, name, field, f"must be a non-negative integer, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class _Step:
    """One replicatedJob of the JobSet the Trainer will create."""

    name: str
    jobs: int
    pods_per_job: int
    template: dict[str, Any]  # the pod template, overrides merged
    field: str  # where its template is, as a user reads it


def _merge_override(template: dict[str, Any], override: Mapping[str, Any], where: str, job: str) -> None:
    """One ``podSpecOverride`` merged into a pod template as the Trainer's strategic merge does for
    what decides placement and requests: ``nodeSelector`` keys added, ``tolerations`` replaced,
    ``serviceAccountName`` replaced, ``schedulingGates`` added by name. Containers it names must
    exist (the Trainer refuses the TrainJob otherwise); their env and volume mounts, and volumes,
    change no pod's requests or placement and are not merged here."""
    spec = template.setdefault("spec", {})
    if override.get("nodeSelector"):
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **override["nodeSelector"]}
    if override.get("tolerations"):
        spec["tolerations"] = copy.deepcopy(list(override["tolerations"]))
    if override.get("serviceAccountName"):
        spec["serviceAccountName"] = override["serviceAccountName"]
    if override.get("schedulingGates"):
        gates = list(spec.get("schedulingGates") or [])
        names = {g.get("name") for g in gates if isinstance(g, Mapping)}
        gates += [copy.deepcopy(g) for g in override["schedulingGates"] if g.get("name") not in names]
        spec["schedulingGates"] = gates
    for field in ("containers", "initContainers"):
        have = {c.get("name") for c in spec.get(field) or [] if isinstance(c, Mapping)}
        for i, container in enumerate(override.get(field) or []):
            if not isinstance(container, Mapping) or container.get("name") not in have:
                cname = container.get("name") if isinstance(container, Mapping) else container
                raise SpecError(KIND, where, f"spec.podSpecOverrides.{field}[{i}].name",
                                f"{cname!r} is not a container of the runtime's replicatedJob {job!r}")


def _steps(obj: Mapping[str, Any], runtime: Mapping[str, Any], ref: RuntimeRef,
           overrides: Sequence[Mapping[str, Any]]) -> list[_Step]:
    name = object_name(obj)
    rname = f"{ref.kind} {ref.name}"
    spec = obj.get("spec") or {}
    rspec = runtime.get("spec") or {}
    ml = rspec.get("mlPolicy")
    ml = ml if isinstance(ml, Mapping) else None
    rjobs = ((rspec.get("template") or {}).get("spec") or {}).get("replicatedJobs")
    base = "spec.template.spec.replicatedJobs"
    if not isinstance(rjobs, list) or not rjobs:
        raise SpecError(KIND, name, "spec.runtimeRef", f"{rname} has no {base}: the gang has no pods")
    names = [str(r.get("name")) if isinstance(r, Mapping) else "" for r in rjobs]
    for i, override in enumerate(overrides):
        for target in override.get("targetJobs") or []:
            if not isinstance(target, Mapping) or target.get("name") not in names:
                raise SpecError(KIND, name, f"spec.podSpecOverrides[{i}].targetJobs",
                                f"names {target!r}, which is not a replicatedJob of {rname} ({', '.join(names)})")
    raw_trainer = spec.get("trainer")
    trainer: Mapping[str, Any] = raw_trainer if isinstance(raw_trainer, Mapping) else {}
    num_nodes = _int(trainer.get("numNodes"), -1, name, "spec.trainer.numNodes")
    ml_nodes = _int((ml or {}).get("numNodes"), 1, name, "spec.mlPolicy.numNodes", rname)
    mpi = (ml or {}).get("mpi")
    mpi = mpi if isinstance(mpi, Mapping) else None
    counts: list[int] = []
    ancestors: list[str | None] = []
    for i, rjob in enumerate(rjobs):
        if not isinstance(rjob, Mapping) or not rjob.get("name"):
            raise SpecError(KIND, name, "spec.runtimeRef", f"{rname}: {base}[{i}].name is required")
        raw_template = rjob.get("template")
        jtemplate: Mapping[str, Any] = raw_template if isinstance(raw_template, Mapping) else {}
        labels = Meta(jtemplate).labels
        ancestor = labels.get(ANCESTOR_LABEL)
        ancestors.append(ancestor)
        count = _int((jtemplate.get("spec") or {}).get("parallelism"), 1, name,
                     f"{base}[{i}].template.spec.parallelism", rname)
        if ancestor == TRAINER_STEP and ml is not None:
            count = ml_nodes
        counts.append(max(count, 1))
    if num_nodes >= 0:  # the Trainer's ML policy plugins: spec.trainer.numNodes over the runtime's
        if mpi is not None:
            target = names.index(NODE) if NODE in names else None
            value = max(num_nodes - 1, 1) if mpi.get("runLauncherAsNode") else num_nodes
        else:
            target = ancestors.index(TRAINER_STEP) if TRAINER_STEP in ancestors else None
            value = num_nodes
        if target is not None:
            counts[target] = value
    trainer_count = counts[ancestors.index(TRAINER_STEP)] if TRAINER_STEP in ancestors else None
    steps = []
    for i, rjob in enumerate(rjobs):
        field = f"{rname}: {base}[{i}].template.spec.template"
        template = copy.deepcopy(((rjob.get("template") or {}).get("spec") or {}).get("template"))
        if not isinstance(template, dict):
            raise SpecError(KIND, name, "spec.runtimeRef",
                            f"{rname}: {base}[{i}].template.spec.template is required (a pod template)")
        for override in overrides:
            if any(isinstance(t, Mapping) and t.get("name") == names[i] for t in override.get("targetJobs") or []):
                _merge_override(template, override, name, names[i])
        ancestor = ancestors[i]
        jobs = _int(rjob.get("replicas"), 1, name, f"{base}[{i}].replicas", rname)
        pods = counts[i]
        if ancestor == TRAINER_STEP or ancestor in INITIALIZER_STEPS:
            jobs = 1
        if ancestor == TRAINER_STEP:
            assert trainer_count is not None
            pods = trainer_count
            _resources_per_node(template, trainer)
        steps.append(_Step(names[i], jobs, pods, template, field))
    return steps


def _resources_per_node(template: dict[str, Any], trainer: Mapping[str, Any]) -> None:
    """``spec.trainer.resourcesPerNode`` replaces the trainer container's resources (when it sets
    limits or requests)."""
    resources = trainer.get("resourcesPerNode")
    if not isinstance(resources, Mapping) or not (resources.get("limits") or resources.get("requests")):
        return
    for container in (template.get("spec") or {}).get("containers") or []:
        if isinstance(container, dict) and container.get("name") == NODE:
            container["resources"] = {k: copy.deepcopy(resources[k]) for k in ("limits", "requests")
                                      if resources.get(k)}


def _overrides(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    value = (obj.get("spec") or {}).get("podSpecOverrides")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(o, Mapping) for o in value):
        raise SpecError(KIND, object_name(obj), "spec.podSpecOverrides", "must be a list of overrides")
    return list(value)


def recorded_overrides(obj: Mapping[str, Any]) -> tuple[bool, list[Mapping[str, Any]] | None]:
    """``(recorded, list)``: the ``spec.podSpecOverrides`` recorded at admission (None: it was
    absent); ``recorded`` is False when nothing is recorded."""
    text = Meta(obj).annotations.get(OVERRIDES_ANNOTATION)
    if text is None:
        return False, None
    field = f"metadata.annotations[{OVERRIDES_ANNOTATION}]"
    try:
        data = json.loads(text)
    except ValueError as err:
        raise SpecError(KIND, object_name(obj), field, f"is not JSON ({err}); it is written by gangq") from err
    if data is not None and (not isinstance(data, list) or not all(isinstance(o, dict) for o in data)):
        raise SpecError(KIND, object_name(obj), field, "must be a list of overrides or null; written by gangq")
    return True, data


def user_overrides(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The overrides the user asked for: as recorded at admission, else as they are."""
    recorded, value = recorded_overrides(obj)
    return list(value or []) if recorded else _overrides(obj)


# --- the kind ---------------------------------------------------------------------------------


class TrainJobKind(WorkloadKind):
    """Kubeflow Trainer v2 TrainJob (see the module docstring)."""

    kind = KIND
    group = GROUP
    version = VERSION
    plural = PLURAL
    workload_prefix = "trainjob-"
    owner_label = "gangq.io/trainjob-name"
    optional = True
    has_child_jobs = True
    pod_priority = 25  # above the JobSet's: its pods carry its JobSet's labels
    child_resources = (JOBSET.resource, PODGROUPS)
    reference_resources = (TRAINING_RUNTIMES, CLUSTER_TRAINING_RUNTIMES)
    pod_sets_field = "spec.runtimeRef"
    docs = ("one pod set per replicatedJob of its runtime (TrainingRuntime / ClusterTrainingRuntime) with "
            "`numNodes`, `resourcesPerNode` and `podSpecOverrides`; `spec.suspend`; flavors through "
            "`podSpecOverrides`; conditions `Complete` / `Failed`")

    def __init__(self) -> None:
        self.runtimes = Runtimes()

    def key(self, namespace: str, name: str) -> str:
        return JOBSET.key(namespace, name)  # its JobSet's (see the module docstring)

    def ours(self, obj: Mapping[str, Any]) -> bool:
        """A TrainJob the Trainer runs here: not one handed to MultiKueue (``spec.managedBy``)."""
        managed_by = (obj.get("spec") or {}).get("managedBy")
        return managed_by in (None, "", TRAINER_CONTROLLER)

    # --- the gang ---------------------------------------------------------------------------

    def runtime(self, obj: Mapping[str, Any]) -> tuple[RuntimeRef, Mapping[str, Any]]:
        ref = runtime_ref(obj)
        namespace = Meta(obj).namespace_or_default
        found = self.runtimes.get(ref.kind, namespace, ref.name)
        if found is None:
            where = "" if ref.kind == CLUSTER_TRAINING_RUNTIME else f" in namespace {namespace}"
            raise SpecError(KIND, object_name(obj), "spec.runtimeRef",
                            f"{ref.kind} {ref.name!r} does not exist{where}: the TrainJob waits for it "
                            f"and is queued once it is created")
        return ref, found

    def resolved(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The TrainJob with the pod templates its JobSet will have (the user's overrides merged,
        gangq's left out) under a key of gangq's own, where :meth:`pod_sets` point."""
        ref, runtime = self.runtime(obj)
        steps = _steps(obj, runtime, ref, user_overrides(obj))
        return {**obj, _RESOLVED: [s.template for s in steps]}

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        """One pod set per replicatedJob; the paths point into :meth:`resolved`."""
        ref, runtime = self.runtime(obj)
        return [PodSet(s.name, s.jobs * s.pods_per_job, (_RESOLVED, i), s.field)
                for i, s in enumerate(_steps(obj, runtime, ref, user_overrides(obj)))]

    def pod_set_names(self, obj: Mapping[str, Any]) -> list[str]:
        try:
            return [ps.name for ps in self.pod_sets(obj)] or ["main"]
        except SpecError:
            return ["main"]

    def gang_view(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """:meth:`resolved`: the pod templates its JobSet will have, which its pod sets point into."""
        return self.resolved(obj)

    def signature(self, obj: Mapping[str, Any]) -> tuple[Any, ...]:
        """Besides the TrainJob's own: its runtime's uid and generation (None while it does not
        exist), so a runtime that appears or changes maps a waiting TrainJob again."""
        try:
            ref = runtime_ref(obj)
        except SpecError:
            return (*podsets.signature(obj), None)
        runtime = self.runtimes.get(ref.kind, Meta(obj).namespace_or_default, ref.name)
        if runtime is None:
            return (*podsets.signature(obj), None)
        meta = Meta(runtime)
        return (*podsets.signature(obj), (meta.uid, meta.generation))

    def reference_event(self, resource: Resource, event_type: str, obj: Mapping[str, Any]) -> bool:
        self.runtimes.observe(resource, event_type, obj)
        return True

    def reference_listed(self, resource: Resource, objects: list[Mapping[str, Any]]) -> None:
        self.runtimes.listed(resource, objects)

    # --- its state --------------------------------------------------------------------------

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        return terminal_condition(obj, COMPLETE)

    def started(self, obj: Mapping[str, Any]) -> bool:
        """Its ``status.jobsStatus`` counts a Job with pods (Trainer v2.0.0 does not fill it: the
        controller learns of a start from the pods)."""
        return any(isinstance(s, Mapping) and (s.get("active") or s.get("ready") or s.get("succeeded")
                                               or s.get("failed"))
                   for s in (obj.get("status") or {}).get("jobsStatus") or [])

    # --- its pods ---------------------------------------------------------------------------

    def pod_selector(self, name: str) -> str:
        """Its JobSet's pods (the Trainer names the JobSet after the TrainJob)."""
        return JOBSET.pod_selector(name)

    def pod_owner(self, pod: Mapping[str, Any]) -> tuple[str, str | None] | None:
        """Its JobSet's pods, under the key the two share."""
        return JOBSET.pod_owner(pod)

    # --- the writes -------------------------------------------------------------------------

    def override_ops(self, obj: Mapping[str, Any], admission: Admission,
                     flavors: Mapping[str, FlavorSpec]) -> Patch:
        """The first admission patch: each admitted replicatedJob's override with the flavors'
        node labels and the full toleration list (the Trainer replaces a template's tolerations
        with an override's), the user's list recorded. Raises ``SpecError``."""
        name = object_name(obj)
        recorded, original = recorded_overrides(obj)
        if not recorded:
            raw = (obj.get("spec") or {}).get("podSpecOverrides")
            original = copy.deepcopy(raw) if raw is not None else None
        user = list(original or [])
        resolved = self.resolved(obj)
        by_name = {ps.name: ps for ps in self.pod_sets(obj)}
        new: list[dict[str, Any]] = [copy.deepcopy(dict(o)) for o in user]
        for assigned in admission.pod_sets:
            ps = by_name.get(assigned.name)
            if ps is None:
                raise SpecError(KIND, name, "spec.runtimeRef", f"its runtime has no replicatedJob {assigned.name!r} "
                                                                "(admitted)")
            before = (podsets.get(resolved, ps.path) or {}).get("spec") or {}
            selector, tols = podsets.admitted_scheduling(KIND, name, ps.field + ".spec", before,
                                                         list(assigned.flavors.values()), flavors, assigned.topology)
            mine = _own_override(new, assigned.name)
            if selector:
                mine["nodeSelector"] = selector
            if tols and [toleration_identity(t) for t in tols] != [
                    toleration_identity(t) for t in before.get("tolerations") or []]:
                mine["tolerations"] = tols
        ops: Patch = [_record_op(obj, json.dumps(original, sort_keys=True, separators=(",", ":")))]
        if new != (obj.get("spec") or {}).get("podSpecOverrides"):
            ops.append({"op": "add", "path": "/spec/podSpecOverrides", "value": new})
        return ops

    def admission_writes(self, obj: Mapping[str, Any], admission: Admission, flavors: Mapping[str, FlavorSpec],
                         record: str) -> list[ObjectWrite] | None:
        """Two patches: the overrides while suspended, then the record and the unsuspension (the
        Trainer's webhook refuses override changes in the write that unsuspends)."""
        meta = Meta(obj)
        path = self.path(meta.namespace_or_default, meta.name)
        uid = meta.uid
        guard: Patch = [{"op": "test", "path": "/metadata/uid", "value": uid},
                        {"op": "test", "path": "/spec/suspend", "value": True}]
        first = self.override_ops(obj, admission, flavors)
        second: Patch = [*guard, {"op": "add", "path": pointer(("metadata", "annotations", _ADMISSION)),
                                  "value": record}, *self.unsuspend_ops(obj)]
        return [ObjectWrite(path, [*guard, *first], uid), ObjectWrite(path, second, uid)]

    def admission_ops(self, obj: Mapping[str, Any], admission: Admission,
                      flavors: Mapping[str, FlavorSpec]) -> Patch:
        """The admission as one patch (overrides and unsuspension together): what
        :meth:`admission_writes` splits in two for the Trainer's webhook."""
        return [*self.override_ops(obj, admission, flavors), *self.unsuspend_ops(obj)]

    def eviction_ops(self, obj: Mapping[str, Any]) -> Patch:
        """Suspend only: the overrides cannot change while the JobSet has active Jobs
        (:meth:`stopped_ops` restores them once the gang has stopped)."""
        return self.suspend_ops(obj)

    def stopped_ops(self, obj: Mapping[str, Any]) -> Patch:
        """Once the evicted gang has stopped: ``spec.podSpecOverrides`` as the user wrote it, the
        record dropped; none when nothing is recorded or the TrainJob runs again."""
        recorded, original = recorded_overrides(obj)
        if not recorded or not self.suspended(obj):
            return []
        ops: Patch = [{"op": "test", "path": "/spec/suspend", "value": True},
                      {"op": "remove", "path": pointer(("metadata", "annotations", OVERRIDES_ANNOTATION))}]
        current = (obj.get("spec") or {}).get("podSpecOverrides")
        if original is None and current is not None:
            ops.append({"op": "remove", "path": "/spec/podSpecOverrides"})
        elif original is not None and current != original:
            ops.append({"op": "add", "path": "/spec/podSpecOverrides", "value": original})
        return ops


_ADMISSION: Final = "gangq.io/admission"
"""The admission record's annotation (the controller's ``ADMISSION_ANNOTATION``)."""


def _own_override(overrides: list[dict[str, Any]], job: str) -> dict[str, Any]:
    """The override that names only ``job`` (its own: the Trainer's webhook lets a replicatedJob
    be named once): the one the user wrote for it alone, or split off one naming several, or a
    new one."""
    for i, override in enumerate(overrides):
        targets = override.get("targetJobs") or []
        if not any(isinstance(t, Mapping) and t.get("name") == job for t in targets):
            continue
        if len(targets) == 1:
            return override
        rest = [t for t in targets if not (isinstance(t, Mapping) and t.get("name") == job)]
        overrides[i] = {**override, "targetJobs": rest}
        mine = {**copy.deepcopy(override), "targetJobs": [{"name": job}]}
        overrides.append(mine)
        return mine
    mine = {"targetJobs": [{"name": job}]}
    overrides.append(mine)
    return mine


def _record_op(obj: Mapping[str, Any], text: str) -> dict[str, Any]:
    annotations = Meta(obj).raw.get("annotations")  # absent and empty patch differently
    if not isinstance(annotations, Mapping):
        return {"op": "add", "path": "/metadata/annotations", "value": {OVERRIDES_ANNOTATION: text}}
    return {"op": "add", "path": pointer(("metadata", "annotations", OVERRIDES_ANNOTATION)), "value": text}


TRAINJOB = TrainJobKind()

__all__ = ["OVERRIDES_ANNOTATION", "TRAINJOB", "Runtimes", "TrainJobKind",
           "recorded_overrides", "runtime_ref", "user_overrides"]
