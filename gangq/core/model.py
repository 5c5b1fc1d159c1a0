"""The specs the admission engine consumes: plain ``__slots__`` classes with integer quantities.

These are the core's input vocabulary. ``gangq.api`` turns Kubernetes objects (pydantic models,
quantities as strings) into them; the simulator builds them from traces. Quantities are integers in
the resource's canonical unit: ``cpu`` in millicores, ``memory`` and storage in bytes, everything
else (``nvidia.com/gpu``, ``pods`` ...) in units.

``validate()`` on each spec raises :class:`~gangq.core.errors.SpecError` naming object and field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from gangq.core.errors import SpecError
from gangq.core.selectors import LabelSelector, NodeAffinity, Taint, Toleration

QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
WithinClusterQueuePolicy = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
ReclaimWithinCohortPolicy = Literal["Never", "LowerPriority", "Any"]
BorrowWithinCohortPolicy = Literal["Never", "LowerPriority"]
FungibilityPolicy = Literal["MayStopSearch", "TryNextFlavor"]
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
AdmissionMode = Literal["QuotaAndNodes", "QuotaOnly"]
TopologyMode = Literal["Required", "Preferred", "Unconstrained"]

FlavorResource = tuple[Any, ...]
"""(flavor name, resource name): the unit of quota accounting. Typed as a plain tuple on purpose,
like OrderKey (gangq.core.workload): mypyc keeps a fixed-shape tuple unboxed in locals and builds
a new tuple object for every dict lookup it is then used in, and quota arithmetic is made of such
lookups."""

_FLAVOR_RESOURCES: dict[FlavorResource, FlavorResource] = {}


def flavor_resource(flavor: str, resource: str) -> FlavorResource:
    """The one shared tuple for ``(flavor, resource)``.

    Quota dicts (a ClusterQueue's, its cohorts', a gang's flavor options) are keyed by these
    tuples and looked up by each other's keys all the time; when every key is the same object, a
    lookup that finds its entry stops at the identity check instead of comparing both strings.
    Grows
    with the (flavor, resource) pairs ever configured or requested, which are few.
    """
    fr = (flavor, resource)
    return _FLAVOR_RESOURCES.setdefault(fr, fr)


class ResourceQuota:
    """Quota of one resource in one flavor of a ClusterQueue or Cohort.

    ``borrowing_limit`` / ``lending_limit`` of ``None`` mean unlimited (Kueue's nil).
    """

    __slots__ = ("borrowing_limit", "lending_limit", "name", "nominal")

    def __init__(
        self,
        name: str,
        nominal: int,
        borrowing_limit: int | None = None,
        lending_limit: int | None = None,
    ) -> None:
        self.name = name
        self.nominal = nominal
        self.borrowing_limit = borrowing_limit
        self.lending_limit = lending_limit


class FlavorQuotas:
    """The quotas of one flavor inside a resource group."""

    __slots__ = ("name", "resources")

    def __init__(self, name: str, resources: Sequence[ResourceQuota]) -> None:
        self.name = name
        self.resources = tuple(resources)


class ResourceGroup:
    """Resources that are assigned a flavor together, and the flavors to try, in order."""

    __slots__ = ("covered_resources", "flavors")

    def __init__(self, covered_resources: Sequence[str], flavors: Sequence[FlavorQuotas]) -> None:
        self.covered_resources = tuple(covered_resources)
        self.flavors = tuple(flavors)


def validate_resource_groups(kind: str, name: str, groups: Sequence[ResourceGroup], has_parent: bool) -> None:
    """Checks shared by ClusterQueue and Cohort resource groups."""
    seen_resources: dict[str, int] = {}
    seen_flavors: dict[str, int] = {}
    for gi, group in enumerate(groups):
        base = f"spec.resourceGroups[{gi}]"
        if not group.covered_resources:
            raise SpecError(kind, name, f"{base}.coveredResources", "must list at least one resource")
        for resource in group.covered_resources:
            if resource in seen_resources:
                raise SpecError(
                    kind,
                    name,
                    f"{base}.coveredResources",
                    f"resource {resource!r} is already covered by resourceGroups[{seen_resources[resource]}]",
                )
            seen_resources[resource] = gi
        for fi, flavor in enumerate(group.flavors):
            fbase = f"{base}.flavors[{fi}]"
            if flavor.name in seen_flavors:
                raise SpecError(
                    kind,
                    name,
                    f"{fbase}.name",
                    f"flavor {flavor.name!r} already appears in resourceGroups[{seen_flavors[flavor.name]}]",
                )
            seen_flavors[flavor.name] = gi
            names = [r.name for r in flavor.resources]
            if names != list(group.covered_resources):
                raise SpecError(
                    kind,
                    name,
                    f"{fbase}.resources",
                    f"must list exactly the covered resources in order {list(group.covered_resources)}, got {names}",
                )
            for ri, quota in enumerate(flavor.resources):
                rbase = f"{fbase}.resources[{ri}]"
                if quota.nominal < 0:
                    raise SpecError(kind, name, f"{rbase}.nominalQuota", f"must not be negative, got {quota.nominal}")
                if quota.borrowing_limit is not None:
                    if quota.borrowing_limit < 0:
                        raise SpecError(kind, name, f"{rbase}.borrowingLimit", "must not be negative")
                    if not has_parent:
                        raise SpecError(
                            kind,
                            name,
                            f"{rbase}.borrowingLimit",
                            "must not be set without a cohort (there is nothing to borrow from)",
                        )
                if quota.lending_limit is not None:
                    if quota.lending_limit < 0:
                        raise SpecError(kind, name, f"{rbase}.lendingLimit", "must not be negative")
                    if not has_parent:
                        raise SpecError(
                            kind,
                            name,
                            f"{rbase}.lendingLimit",
                            "must not be set without a cohort (there is nobody to lend to)",
                        )


class TopologySpec:
    """A Topology (Kueue's ``Topology``): the node label keys of its levels, from the top level
    (e.g. a block) to the bottom one (e.g. ``kubernetes.io/hostname``). A node's domain at a level
    is the values of its labels of that level and every level above it."""

    __slots__ = ("levels", "name")

    def __init__(self, name: str, levels: Sequence[str]) -> None:
        self.name = name
        self.levels: list[str] = list(levels)

    def signature(self) -> tuple[object, ...]:
        return (self.name, tuple(self.levels))


class FlavorSpec:
    """A ResourceFlavor: the node labels that select its nodes, their taints, tolerations
    injected into admitted pods, and the Topology of its nodes (``topology``, resolved from
    ``spec.topologyName``; None: the flavor has no topology)."""

    __slots__ = ("name", "node_labels", "node_taints", "tolerations", "topology")

    def __init__(
        self,
        name: str,
        node_labels: Mapping[str, str] | None = None,
        node_taints: Sequence[Taint] = (),
        tolerations: Sequence[Toleration] = (),
        topology: TopologySpec | None = None,
    ) -> None:
        self.name = name
        self.node_labels: dict[str, str] = dict(node_labels or {})
        self.node_taints = tuple(node_taints)
        self.tolerations = tuple(tolerations)
        self.topology = topology


class PreemptionSpec:
    """A ClusterQueue's preemption policy (Kueue's ``spec.preemption``)."""

    __slots__ = ("borrow_within_cohort", "max_priority_threshold", "reclaim_within_cohort", "within_cluster_queue")

    def __init__(
        self,
        within_cluster_queue: WithinClusterQueuePolicy = "Never",
        reclaim_within_cohort: ReclaimWithinCohortPolicy = "Never",
        borrow_within_cohort: BorrowWithinCohortPolicy = "Never",
        max_priority_threshold: int | None = None,
    ) -> None:
        self.within_cluster_queue: WithinClusterQueuePolicy = within_cluster_queue
        self.reclaim_within_cohort: ReclaimWithinCohortPolicy = reclaim_within_cohort
        self.borrow_within_cohort: BorrowWithinCohortPolicy = borrow_within_cohort
        self.max_priority_threshold = max_priority_threshold


class FlavorFungibility:
    """Whether to stop at the first flavor that fits by borrowing / preempting, or try the next."""

    __slots__ = ("when_can_borrow", "when_can_preempt")

    def __init__(
        self,
        when_can_borrow: FungibilityPolicy = "MayStopSearch",
        when_can_preempt: FungibilityPolicy = "TryNextFlavor",
    ) -> None:
        self.when_can_borrow: FungibilityPolicy = when_can_borrow
        self.when_can_preempt: FungibilityPolicy = when_can_preempt


class ClusterQueueSpec:
    """A ClusterQueue: quota per flavor × resource, a cohort to borrow from, queueing and
    preemption policy.

    ``namespace_selector`` of ``None`` selects no namespace; an empty selector selects all.
    ``admission_mode`` ``QuotaOnly`` switches the node check off for this queue.
    """

    __slots__ = (
        "admission_mode",
        "cohort",
        "fair_sharing_weight",
        "flavor_fungibility",
        "name",
        "namespace_selector",
        "preemption",
        "queueing_strategy",
        "resource_groups",
        "stop_policy",
    )

    def __init__(
        self,
        name: str,
        resource_groups: Sequence[ResourceGroup] = (),
        cohort: str | None = None,
        queueing_strategy: QueueingStrategy = "BestEffortFIFO",
        namespace_selector: LabelSelector | None = None,
        preemption: PreemptionSpec | None = None,
        flavor_fungibility: FlavorFungibility | None = None,
        stop_policy: StopPolicy = "None",
        fair_sharing_weight: float = 1.0,
        admission_mode: AdmissionMode = "QuotaAndNodes",
    ) -> None:
        self.name = name
        self.cohort = cohort or None
        self.resource_groups = tuple(resource_groups)
        self.queueing_strategy: QueueingStrategy = queueing_strategy
        self.namespace_selector = namespace_selector if namespace_selector is not None else None
        self.preemption = preemption or PreemptionSpec()
        self.flavor_fungibility = flavor_fungibility or FlavorFungibility()
        self.stop_policy: StopPolicy = stop_policy
        self.fair_sharing_weight = fair_sharing_weight
        self.admission_mode: AdmissionMode = admission_mode

    def validate(self) -> None:
        kind = "ClusterQueue"
        if self.queueing_strategy not in ("StrictFIFO", "BestEffortFIFO"):
            raise SpecError(kind, self.name, "spec.queueingStrategy", f"unknown strategy {self.queueing_strategy!r}")
        if self.stop_policy not in ("None", "Hold", "HoldAndDrain"):
            raise SpecError(kind, self.name, "spec.stopPolicy", f"unknown policy {self.stop_policy!r}")
        if self.admission_mode not in ("QuotaAndNodes", "QuotaOnly"):
            raise SpecError(kind, self.name, "spec.admissionMode", f"unknown mode {self.admission_mode!r}")
        if self.fair_sharing_weight < 0:
            raise SpecError(kind, self.name, "spec.fairSharing.weight", "must not be negative")
        p = self.preemption
        if p.within_cluster_queue not in ("Never", "LowerPriority", "LowerOrNewerEqualPriority"):
            raise SpecError(
                kind, self.name, "spec.preemption.withinClusterQueue", f"unknown policy {p.within_cluster_queue!r}"
            )
        if p.reclaim_within_cohort not in ("Never", "LowerPriority", "Any"):
            raise SpecError(
                kind, self.name, "spec.preemption.reclaimWithinCohort", f"unknown policy {p.reclaim_within_cohort!r}"
            )
        if p.borrow_within_cohort not in ("Never", "LowerPriority"):
            raise SpecError(
                kind,
                self.name,
                "spec.preemption.borrowWithinCohort.policy",
                f"unknown policy {p.borrow_within_cohort!r}",
            )
        if p.reclaim_within_cohort == "Never" and p.borrow_within_cohort != "Never":
            raise SpecError(
                kind,
                self.name,
                "spec.preemption.borrowWithinCohort.policy",
                "requires reclaimWithinCohort other than Never",
            )
        f = self.flavor_fungibility
        for field, value in (("whenCanBorrow", f.when_can_borrow), ("whenCanPreempt", f.when_can_preempt)):
            if value not in ("MayStopSearch", "TryNextFlavor"):
                raise SpecError(kind, self.name, f"spec.flavorFungibility.{field}", f"unknown policy {value!r}")
        validate_resource_groups(kind, self.name, self.resource_groups, self.cohort is not None)


class CohortSpec:
    """A Cohort: a node of the borrowing tree, optionally with a parent and quota of its own."""

    __slots__ = ("fair_sharing_weight", "name", "parent", "resource_groups")

    def __init__(
        self,
        name: str,
        parent: str | None = None,
        resource_groups: Sequence[ResourceGroup] = (),
        fair_sharing_weight: float = 1.0,
    ) -> None:
        self.name = name
        self.parent = parent or None
        self.resource_groups = tuple(resource_groups)
        self.fair_sharing_weight = fair_sharing_weight

    def validate(self) -> None:
        if self.parent == self.name:
            raise SpecError("Cohort", self.name, "spec.parentName", "a cohort cannot be its own parent")
        if self.fair_sharing_weight < 0:
            raise SpecError("Cohort", self.name, "spec.fairSharing.weight", "must not be negative")
        validate_resource_groups("Cohort", self.name, self.resource_groups, self.parent is not None)


class LocalQueueSpec:
    """A namespaced LocalQueue pointing at a ClusterQueue."""

    __slots__ = ("cluster_queue", "name", "namespace", "stop_policy")

    def __init__(self, namespace: str, name: str, cluster_queue: str, stop_policy: StopPolicy = "None") -> None:
        self.namespace = namespace
        self.name = name
        self.cluster_queue = cluster_queue
        self.stop_policy: StopPolicy = stop_policy

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class TopologyRequest:
    """Where a pod set's pods must be, in the levels of its flavor's Topology (Kueue's
    ``PodSetTopologyRequest``, from the ``podset-*-topology`` annotations).

    ``mode``: ``Required`` (every pod in one domain of ``level``), ``Preferred`` (in as few
    domains as possible, starting at ``level``) or ``Unconstrained`` (anywhere). ``level``: a node
    label key, one of the topology's levels (None for ``Unconstrained``). ``slice_level`` and
    ``slice_size``: besides, each slice of ``slice_size`` consecutive pods in one domain of
    ``slice_level`` (both or neither set; the size divides the pod set's count); ``exclusive``:
    each slice in a domain of its own (a JobSet's exclusive placement, whose pod affinities keep
    two child Jobs out of one domain)."""

    __slots__ = ("exclusive", "level", "mode", "slice_level", "slice_size")

    def __init__(
        self,
        mode: TopologyMode,
        level: str | None,
        slice_level: str | None = None,
        slice_size: int | None = None,
        exclusive: bool = False,
    ) -> None:
        self.mode: TopologyMode = mode
        self.level = level
        self.slice_level = slice_level
        self.slice_size = slice_size
        self.exclusive = exclusive

    def signature(self) -> tuple[object, ...]:
        return (self.mode, self.level, self.slice_level, self.slice_size, self.exclusive)


class PodSetSpec:
    """A group of identical pods of a gang: ``count`` pods each requesting ``requests``.
    ``topology``: where its pods must be in its flavor's Topology (None: no request)."""

    __slots__ = ("count", "name", "node_affinity", "node_selector", "requests", "tolerations", "topology")

    def __init__(
        self,
        name: str,
        count: int,
        requests: Mapping[str, int],
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Toleration] = (),
        node_affinity: NodeAffinity = (),
        topology: TopologyRequest | None = None,
    ) -> None:
        self.name = name
        self.count = count
        self.requests: dict[str, int] = {k: v for k, v in requests.items() if v}
        self.node_selector: dict[str, str] = dict(node_selector or {})
        self.tolerations = tuple(tolerations)
        # Required node affinity (requiredDuringSchedulingIgnoredDuringExecution): terms ORed.
        self.node_affinity: NodeAffinity = tuple(tuple(term) for term in node_affinity)
        self.topology = topology

    def placement_signature(self) -> tuple[object, ...]:
        """Where its pods may run, as a hashable value: nodeSelector, tolerations, affinity,
        topology request."""
        return (
            tuple(sorted(self.node_selector.items())),
            tuple(t.signature() for t in self.tolerations),
            tuple(tuple(r.signature() for r in term) for term in self.node_affinity),
            self.topology.signature() if self.topology is not None else None,
        )


class WorkloadSpec:
    """The gang to admit.

    ``min_member``: pods that must be placeable at the same time (default: all pods).
    ``min_resources``: an aggregate that must fit the free node capacity of the assigned flavors.
    ``runtime_limit``: seconds the gang may run once admitted (e.g. activeDeadlineSeconds); the
    engine uses it to compute reservations for starving gangs.
    ``pods_ready_timeout``: seconds this gang has to get ``min_member`` pods running once admitted,
    instead of the engine's ``EngineConfig.pods_ready_timeout`` (None: the engine's). A gang that
    carries its own deadline (a coscheduling PodGroup's ``scheduleTimeoutSeconds``) is evicted at
    that deadline even where the engine's pods-ready timeout is off.
    """

    __slots__ = (
        "creation_time",
        "key",
        "min_member",
        "min_resources",
        "namespace",
        "pod_sets",
        "pods_ready_timeout",
        "priority",
        "priority_class",
        "queue_name",
        "runtime_estimated",
        "runtime_limit",
    )

    def __init__(
        self,
        key: str,
        namespace: str,
        queue_name: str,
        pod_sets: Sequence[PodSetSpec],
        priority: int = 0,
        creation_time: float = 0.0,
        min_member: int | None = None,
        min_resources: Mapping[str, int] | None = None,
        runtime_limit: float | None = None,
        priority_class: str = "",
        pods_ready_timeout: float | None = None,
        runtime_estimated: bool = False,
    ) -> None:
        self.key = key
        self.namespace = namespace
        self.queue_name = queue_name
        self.pod_sets = tuple(pod_sets)
        self.priority = priority
        self.creation_time = creation_time
        self.min_member = min_member
        self.min_resources: dict[str, int] | None = dict(min_resources) if min_resources else None
        self.runtime_limit = runtime_limit
        self.priority_class = priority_class
        self.pods_ready_timeout = pods_ready_timeout
        # ``runtime_limit`` is an estimate learned from finished gangs, not declared (shown as such).
        self.runtime_estimated = runtime_estimated

    @property
    def total_pods(self) -> int:
        return sum(ps.count for ps in self.pod_sets)

    def validate(self) -> None:
        kind = "Workload"
        if not self.pod_sets:
            raise SpecError(kind, self.key, "spec.podSets", "must have at least one pod set")
        names: set[str] = set()
        for i, ps in enumerate(self.pod_sets):
            if ps.name in names:
                raise SpecError(kind, self.key, f"spec.podSets[{i}].name", f"duplicate pod set name {ps.name!r}")
            names.add(ps.name)
            if ps.count < 0:
                raise SpecError(kind, self.key, f"spec.podSets[{i}].count", "must not be negative")
            for resource, amount in ps.requests.items():
                if amount < 0:
                    raise SpecError(kind, self.key, f"spec.podSets[{i}].requests[{resource}]", "must not be negative")
        total = self.total_pods
        if total == 0:
            raise SpecError(kind, self.key, "spec.podSets", "the gang has no pods")
        if self.min_member is not None and not 1 <= self.min_member <= total:
            raise SpecError(
                kind,
                self.key,
                "spec.minMember",
                f"must be between 1 and the gang's {total} pods, got {self.min_member}",
            )
        if self.min_resources:
            for resource, amount in self.min_resources.items():
                if amount < 0:
                    raise SpecError(kind, self.key, f"spec.minResources[{resource}]", "must not be negative")
        if self.runtime_limit is not None and self.runtime_limit <= 0:
            raise SpecError(kind, self.key, "spec.runtimeLimit", "must be positive")
        if self.pods_ready_timeout is not None and self.pods_ready_timeout <= 0:
            raise SpecError(kind, self.key, "spec.podsReadyTimeout", "must be positive")


class NodeSpec:
    """A node: labels, taints, allocatable resources, and whether it takes new pods."""

    __slots__ = ("allocatable", "labels", "name", "taints", "unschedulable")

    def __init__(
        self,
        name: str,
        allocatable: Mapping[str, int],
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Taint] = (),
        unschedulable: bool = False,
    ) -> None:
        self.name = name
        self.allocatable: dict[str, int] = dict(allocatable)
        self.labels: dict[str, str] = dict(labels or {})
        self.taints = tuple(taints)
        self.unschedulable = unschedulable


class ProvisionerSpec:
    """A node autoscaler's pool (a Karpenter NodePool) as the engine sees it: the nodes it may add.

    Every node it adds carries ``labels`` and ``taints`` and offers ``node_allocatable``. It may add
    nodes while the capacity of its nodes stays within ``limits`` (per resource; ``nodes`` counts
    nodes); ``in_use`` is the capacity the autoscaler reports for the pool, nodes it is still
    launching included. ``max_new_nodes`` bounds what a pool without a limit is counted for.
    Its existing nodes are the nodes labelled ``node_label`` = ``name``.
    """

    __slots__ = ("in_use", "labels", "limits", "max_new_nodes", "name", "node_allocatable", "node_label", "taints")

    def __init__(
        self,
        name: str,
        node_allocatable: Mapping[str, int],
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Taint] = (),
        limits: Mapping[str, int] | None = None,
        in_use: Mapping[str, int] | None = None,
        max_new_nodes: int = 32,
        node_label: str = "karpenter.sh/nodepool",
    ) -> None:
        self.name = name
        self.node_allocatable: dict[str, int] = dict(node_allocatable)
        self.labels: dict[str, str] = dict(labels or {})
        self.labels[node_label] = name
        self.taints = tuple(taints)
        self.limits: dict[str, int] = dict(limits or {})
        self.in_use: dict[str, int] = dict(in_use or {})
        self.max_new_nodes = max_new_nodes
        self.node_label = node_label

    def validate(self) -> None:
        kind = "NodePool"
        if not any(v > 0 for v in self.node_allocatable.values()):
            raise SpecError(kind, self.name, "node resources", "a node of the pool offers no resources")
        for resource, amount in (*self.node_allocatable.items(), *self.limits.items()):
            if amount < 0:
                raise SpecError(kind, self.name, f"resources[{resource}]", "must not be negative")
        if self.max_new_nodes < 0:
            raise SpecError(kind, self.name, "max new nodes", "must not be negative")


class PodInfo:
    """A pod bound to a node, as the shell observes it.

    ``workload`` / ``pod_set`` name the gang the pod belongs to (``None`` for pods gangq does not
    manage). ``running`` is true once the pod is Running (it counts towards PodsReady).
    """

    __slots__ = ("key", "node", "pod_set", "requests", "running", "workload")

    def __init__(
        self,
        key: str,
        node: str,
        requests: Mapping[str, int],
        workload: str | None = None,
        pod_set: str | None = None,
        running: bool = False,
    ) -> None:
        self.key = key
        self.node = node
        self.requests: dict[str, int] = {k: v for k, v in requests.items() if v}
        self.workload = workload
        self.pod_set = pod_set
        self.running = running
