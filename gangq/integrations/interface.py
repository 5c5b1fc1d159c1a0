"""The one interface every kind of workload gangq queues implements (:class:`WorkloadKind`), and
the pod sets a kind describes its gang with (:class:`~gangq.integrations.podsets.PodSet`).

A kind answers *what* (its pod sets, whether it is suspended, started or finished, which pods are
its own) and *how* (the JSON Patch operations that suspend, admit and evict it); the controller
decides *when*. The gang rules themselves — requests per pod, min-member, priority, runtime limit,
the flavors' node labels and tolerations injected into pod templates and restored on eviction —
are kind-neutral (:mod:`gangq.integrations.podsets`): a kind only says where its pod templates are.

Adding a kind is one module implementing this interface, one line in
:mod:`gangq.integrations.registry`, its RBAC in ``deploy/base`` and a row in the docs
(docs/integrating-a-kind.md); the contract test (``tests/integrations/test_contract.py``) runs
every registered kind through the same checks.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gangq.api.meta import Meta
from gangq.core.decisions import Admission
from gangq.core.model import FlavorSpec, WorkloadSpec
from gangq.integrations import podsets
from gangq.integrations.podsets import Patch, PodSet, Resource

QUEUE_VERBS: Final = ("get", "list", "watch", "patch")
"""What the controller does to a queued kind: watch it, suspend it, admit and evict it."""


@dataclass(frozen=True, slots=True)
class ObjectWrite:
    """One API write of an admission or an eviction that is not one patch of the queued object
    itself (a pod group's: one per member pod). ``patch``: JSON Patch operations for the object at
    ``path``; None deletes it. ``uid``: the object's uid, a precondition of the deletion (a patch
    tests it among its operations). ``subresource``: ``status`` for a status write."""

    path: str
    patch: Patch | None
    uid: str = ""
    subresource: str = ""



class WorkloadKind:
    """One kind of workload gangq queues (see the module docstring).

    Subclasses set the class attributes and implement the methods that raise
    ``NotImplementedError``; the others have defaults that fit a kind with ``spec.suspend``.
    """

    kind: str
    group: str
    version: str
    plural: str
    workload_prefix: str  # the Workload object's name is this + the object's name
    owner_label: str  # on the Workload: the object's name
    suspend_path: str = "/spec/suspend"
    optional: bool = False  # its CRD may not be served (nothing to queue then; watched once it is)
    has_child_jobs: bool = False  # its pods come through Jobs it creates (an eviction waits for them)
    gates_pods: bool = False  # its pods are gated at creation (the mutating webhook is sent pods)
    pod_priority: int = 0  # pod_owner is asked in descending order: a more specific kind first
    child_resources: tuple[Resource, ...] = ()  # objects it creates that the controller reads (RBAC)
    docs: str = ""  # a one-line description: pod sets, suspension, completion (the docs table)
    pod_sets_field: str = "spec"  # where the object lists its pod sets (errors name it)
    queue_verbs: tuple[str, ...] = QUEUE_VERBS  # its RBAC (a kind patched through its pods needs no patch)
    reference_resources: tuple[Resource, ...] = ()
    """Other objects its gangs are built from (a TrainJob's runtimes): the controller watches them
    (get, list, watch), lists them before the kind at a restart, and hands each event to
    :meth:`reference_event`."""

    # --- identity -------------------------------------------------------------------------

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> Resource:
        return Resource(self.group, self.version, self.plural)

    def key(self, namespace: str, name: str) -> str:
        """The engine's key of the object's gang: apart from every other kind's of the same name
        (JobSets keep the bare ``namespace/name``)."""
        return f"{namespace}/{self.plural}:{name}"

    def key_of(self, obj: Mapping[str, Any]) -> str:
        meta = Meta(obj)
        return self.key(meta.namespace_or_default, meta.name)

    def path(self, namespace: str, name: str) -> str:
        """The object's API path."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{base}/namespaces/{namespace}/{self.plural}/{name}"

    def workload_name(self, name: str) -> str:
        """The Workload's name: the prefix and the object's name, shortened to an object name's 253
        characters."""
        full = f"{self.workload_prefix}{name}"
        return full if len(full) <= 253 else full[:240] + "-" + secrets.token_hex(4)

    def workload_name_of(self, obj: Mapping[str, Any]) -> str:
        """The name of the object's Workload (:meth:`workload_name` of its name)."""
        return self.workload_name(Meta(obj).name)

    # --- what it is -----------------------------------------------------------------------

    def ours(self, obj: Mapping[str, Any]) -> bool:
        """Does gangq queue this object itself, queue label aside? False for one that another
        queued object controls (a TrainJob's JobSet, a JobSet's Jobs): that object is the gang."""
        return True

    def pod_sets(self, obj: Mapping[str, Any]) -> list[PodSet]:
        """The object's pod sets, in the order of its spec (may raise ``SpecError``)."""
        raise NotImplementedError

    def pod_set_names(self, obj: Mapping[str, Any]) -> list[str]:
        """The pod sets' names, for the Workload of an object that does not map to a gang."""
        try:
            return [ps.name for ps in self.pod_sets(obj)] or ["main"]
        except Exception:  # a malformed object: its Workload still gets a name
            return ["main"]

    def gang_view(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """The document its pod sets' paths point into: the object itself, or the object with
        what its controller adds written out (a RayJob's default submitter, a TrainJob's runtime
        resolved with its overrides). Read only, never written back."""
        return obj

    def to_workload(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int],
                    workload_priority_classes: Mapping[str, int], default_queue: str | None = None) -> WorkloadSpec:
        """The gang; ``default_queue`` for an object without a queue label. Raises
        ``NotQueuedError`` without a queue and ``SpecError`` naming the object's field."""
        view = self.gang_view(obj)
        return podsets.to_workload(self.kind, view, self.pod_sets(obj), key=self.key_of(obj),
                                   priority_classes=priority_classes,
                                   workload_priority_classes=workload_priority_classes,
                                   default_queue=default_queue, runtime_limit=self.runtime_limit(obj),
                                   sets_field=self.pod_sets_field)

    def runtime_limit(self, obj: Mapping[str, Any]) -> float | None:
        """An upper bound of its run time from its own spec (a deadline), or None."""
        return None

    def signature(self, obj: Mapping[str, Any]) -> tuple[Any, ...]:
        """What the gang is built from besides the spec (a change resubmits it)."""
        return podsets.signature(obj)

    def reference_event(self, resource: Resource, event_type: str, obj: Mapping[str, Any]) -> bool:
        """A watch event of one of :attr:`reference_resources`; True when the kind's waiting
        objects may map differently now (the controller maps again those whose
        :meth:`signature` changed, and the inadmissible ones). None by default."""
        return False

    def reference_listed(self, resource: Resource, objects: list[Mapping[str, Any]]) -> None:
        """Every object of one of :attr:`reference_resources`, as a restart lists them: the kind
        keeps these and forgets any other it heard of before (one deleted while this replica did
        not lead). By default each is an ``ADDED`` :meth:`reference_event`: a kind that keeps
        what it heard overrides this to forget first."""
        for obj in objects:
            self.reference_event(resource, "ADDED", obj)

    # --- its state ------------------------------------------------------------------------

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool((obj.get("spec") or {}).get("suspend"))

    def started(self, obj: Mapping[str, Any]) -> bool:
        """Have pods of this object started (it ran before gangq could suspend it)?"""
        raise NotImplementedError

    def terminal(self, obj: Mapping[str, Any]) -> str | None:
        """``Completed`` / ``Failed`` once finished, else None."""
        raise NotImplementedError

    # --- its pods -------------------------------------------------------------------------

    def pod_selector(self, name: str) -> str:
        """The label selector of the object's pods."""
        raise NotImplementedError

    def pod_query(self, obj: Mapping[str, Any]) -> dict[str, str]:
        """The list parameters that select the object's pods (its :meth:`pod_selector`)."""
        return {"labelSelector": self.pod_selector(Meta(obj).name)}

    def pod_owner(self, pod: Mapping[str, Any]) -> tuple[str, str | None] | None:
        """The gang key and pod set of a pod of this kind, or None for another kind's pod."""
        raise NotImplementedError

    # --- the writes -----------------------------------------------------------------------

    def suspend_ops(self, obj: Mapping[str, Any]) -> Patch:
        """JSON Patch operations that suspend the object (and nothing else)."""
        return [{"op": "add", "path": self.suspend_path, "value": True}]

    def unsuspend_ops(self, obj: Mapping[str, Any]) -> Patch:
        """JSON Patch operations that let the object run (and nothing else)."""
        return [{"op": "add", "path": self.suspend_path, "value": False}]

    def admission_ops(self, obj: Mapping[str, Any], admission: Admission,
                      flavors: Mapping[str, FlavorSpec]) -> Patch:
        """JSON Patch operations that admit the suspended object: the flavors injected into its
        pod templates (originals recorded), then unsuspended."""
        return [*podsets.admission_ops(self.kind, obj, self.pod_sets(obj), admission, flavors, self.pod_sets_field),
                *self.unsuspend_ops(obj)]

    def eviction_ops(self, obj: Mapping[str, Any]) -> Patch:
        """JSON Patch operations that undo the admission's pod-template changes and suspend."""
        return [*podsets.restore_ops(self.kind, obj, self.pod_sets(obj)), *self.suspend_ops(obj)]

    def stopped_ops(self, obj: Mapping[str, Any]) -> Patch:
        """JSON Patch operations written once an evicted gang has stopped (its pods gone, its
        child Jobs quiet): none by default, :meth:`eviction_ops` restores at once. For a kind whose
        own webhook refuses the restore while its pods run (a TrainJob's podSpecOverrides)."""
        return []

    def admission_writes(self, obj: Mapping[str, Any], admission: Admission, flavors: Mapping[str, FlavorSpec],
                         record: str) -> list[ObjectWrite] | None:
        """The API writes that admit the object, ``record`` (the admission as annotation
        ``gangq.io/admission`` keeps it) among them; None (every kind with a suspend field): one
        JSON Patch of the object — its uid tested, :meth:`admission_ops`, the record, the suspend
        field tested true and set false — that the controller re-reads and recomputes on a
        conflict. A kind without one object to patch (a pod group) returns its writes."""
        return None

    def eviction_writes(self, obj: Mapping[str, Any]) -> list[ObjectWrite] | None:
        """The API writes that stop the admitted object; None (the default): one JSON Patch of the
        object with :meth:`eviction_ops` and the eviction recorded on it."""
        return None

    def status_writes(self, obj: Mapping[str, Any]) -> list[ObjectWrite]:
        """Writes of the object's own status that gangq keeps (a PodGroup's phase and counts,
        where no coscheduling controller does); none for a kind whose own controller writes it."""
        return []

    def owner_reference(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The controller ownerReference of the object's Workload: the object itself."""
        meta = Meta(obj)
        return {"apiVersion": self.api_version, "kind": self.kind, "name": meta.name,
                "uid": meta.uid, "controller": True, "blockOwnerDeletion": True}
