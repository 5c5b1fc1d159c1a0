"""pydantic models of gangq's queue objects, with Kueue v1beta2 field names, and their conversion to
core specs. ``gangq.io/v1alpha1`` and Kueue's ``kueue.x-k8s.io/v1beta1|v1beta2`` are accepted."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gangq.api.quantity import QuantityError, parse_quantity
from gangq.core.errors import SpecError
from gangq.core.model import (
    ClusterQueueSpec,
    CohortSpec,
    FlavorFungibility,
    FlavorQuotas,
    FlavorSpec,
    FungibilityPolicy,
    LocalQueueSpec,
    PreemptionSpec,
    ResourceGroup,
    ResourceQuota,
    TopologySpec,
)
from gangq.core.selectors import LabelRequirement, LabelSelector, Taint, Toleration

API_VERSIONS = ("gangq.io/v1alpha1", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")
Quantity = str | int | float
M = TypeVar("M", bound=BaseModel)


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class TaintModel(_Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class TolerationModel(_Model):
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    toleration_seconds: int | None = Field(default=None, alias="tolerationSeconds")


class ResourceFlavorSpecModel(_Model):
    node_labels: dict[str, str] = Field(default_factory=dict, alias="nodeLabels")
    node_taints: list[TaintModel] = Field(default_factory=list, alias="nodeTaints")
    tolerations: list[TolerationModel] = Field(default_factory=list)
    topology_name: str | None = Field(default=None, alias="topologyName")


class ResourceQuotaModel(_Model):
    name: str
    nominal_quota: Quantity = Field(alias="nominalQuota")
    borrowing_limit: Quantity | None = Field(default=None, alias="borrowingLimit")
    lending_limit: Quantity | None = Field(default=None, alias="lendingLimit")


class FlavorQuotasModel(_Model):
    name: str
    resources: list[ResourceQuotaModel]


class ResourceGroupModel(_Model):
    covered_resources: list[str] = Field(alias="coveredResources")
    flavors: list[FlavorQuotasModel]


class LabelSelectorRequirementModel(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelectorModel(_Model):
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirementModel] = Field(default_factory=list, alias="matchExpressions")


class BorrowWithinCohortModel(_Model):
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = Field(default=None, alias="maxPriorityThreshold")


class PreemptionModel(_Model):
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        default="Never", alias="withinClusterQueue"
    )
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        default="Never", alias="reclaimWithinCohort"
    )
    borrow_within_cohort: BorrowWithinCohortModel | None = Field(default=None, alias="borrowWithinCohort")


_FUNGIBILITY: dict[str, FungibilityPolicy] = {
    "MayStopSearch": "MayStopSearch",
    "TryNextFlavor": "TryNextFlavor",
    "Borrow": "MayStopSearch",
    "Preempt": "MayStopSearch",
}


class FlavorFungibilityModel(_Model):
    when_can_borrow: Literal["MayStopSearch", "TryNextFlavor", "Borrow"] = Field(
        default="MayStopSearch", alias="whenCanBorrow"
    )
    when_can_preempt: Literal["MayStopSearch", "TryNextFlavor", "Preempt"] = Field(
        default="TryNextFlavor", alias="whenCanPreempt"
    )


class FairSharingModel(_Model):
    weight: Quantity = 1


class TopologyLevelModel(_Model):
    node_label: str = Field(alias="nodeLabel")


class TopologySpecModel(_Model):
    levels: list[TopologyLevelModel] = Field(default_factory=list)


class AdmissionCheckParametersModel(_Model):
    api_group: str = Field(alias="apiGroup")
    kind: str
    name: str


class AdmissionCheckSpecModel(_Model):
    controller_name: str = Field(alias="controllerName")
    parameters: AdmissionCheckParametersModel | None = None
    retry_delay_minutes: int | None = Field(default=None, alias="retryDelayMinutes")  # v1beta1, deprecated


class AdmissionCheckStrategyRuleModel(_Model):
    name: str
    on_flavors: list[str] = Field(default_factory=list, alias="onFlavors")


class AdmissionChecksStrategyModel(_Model):
    admission_checks: list[AdmissionCheckStrategyRuleModel] = Field(default_factory=list, alias="admissionChecks")


class ClusterQueueSpecModel(_Model):
    resource_groups: list[ResourceGroupModel] = Field(default_factory=list, alias="resourceGroups")
    cohort_name: str | None = Field(default=None, alias="cohortName")
    cohort: str | None = None  # Kueue v1beta1 spelling
    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO"] = Field(
        default="BestEffortFIFO", alias="queueingStrategy"
    )
    namespace_selector: LabelSelectorModel | None = Field(default=None, alias="namespaceSelector")
    preemption: PreemptionModel | None = None
    flavor_fungibility: FlavorFungibilityModel | None = Field(default=None, alias="flavorFungibility")
    stop_policy: Literal["None", "Hold", "HoldAndDrain"] = Field(default="None", alias="stopPolicy")
    fair_sharing: FairSharingModel | None = Field(default=None, alias="fairSharing")
    admission_mode: Literal["QuotaAndNodes", "QuotaOnly"] = Field(default="QuotaAndNodes", alias="admissionMode")
    admission_checks: list[str] = Field(default_factory=list, alias="admissionChecks")  # v1beta1 only
    admission_checks_strategy: AdmissionChecksStrategyModel | None = Field(default=None,
                                                                           alias="admissionChecksStrategy")


class CohortSpecModel(_Model):
    parent_name: str | None = Field(default=None, alias="parentName")
    resource_groups: list[ResourceGroupModel] = Field(default_factory=list, alias="resourceGroups")
    fair_sharing: FairSharingModel | None = Field(default=None, alias="fairSharing")


class LocalQueueSpecModel(_Model):
    cluster_queue: str = Field(alias="clusterQueue")
    stop_policy: Literal["None", "Hold", "HoldAndDrain"] = Field(default="None", alias="stopPolicy")


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def parse_model(model: type[M], data: Any, kind: str, name: str, prefix: str) -> M:
    """Validate ``data`` as ``model``; a failure becomes a SpecError naming kind, name and field."""
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as err:
        first = err.errors()[0]
        path = _field_path((prefix, *first["loc"]))
        raise SpecError(kind, name, path, first["msg"]) from err


def _quantity(kind: str, name: str, field: str, value: Quantity | None, resource: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_quantity(value, resource)
    except QuantityError as err:
        raise SpecError(kind, name, field, str(err)) from err


def _groups(kind: str, name: str, groups: list[ResourceGroupModel]) -> list[ResourceGroup]:
    out = []
    for gi, group in enumerate(groups):
        flavors = []
        for fi, flavor in enumerate(group.flavors):
            quotas = []
            for ri, q in enumerate(flavor.resources):
                base = f"spec.resourceGroups[{gi}].flavors[{fi}].resources[{ri}]"
                nominal = _quantity(kind, name, f"{base}.nominalQuota", q.nominal_quota, q.name)
                assert nominal is not None
                quotas.append(
                    ResourceQuota(
                        q.name,
                        nominal,
                        _quantity(kind, name, f"{base}.borrowingLimit", q.borrowing_limit, q.name),
                        _quantity(kind, name, f"{base}.lendingLimit", q.lending_limit, q.name),
                    )
                )
            flavors.append(FlavorQuotas(flavor.name, quotas))
        out.append(ResourceGroup(group.covered_resources, flavors))
    return out


def _weight(kind: str, name: str, fair: FairSharingModel | None) -> float:
    if fair is None:
        return 1.0
    milli = _quantity(kind, name, "spec.fairSharing.weight", fair.weight, "cpu")
    assert milli is not None
    return milli / 1000


def _selector(name: str, model: LabelSelectorModel | None) -> LabelSelector | None:
    """The namespace selector; a requirement the selector type refuses (``In`` without values,
    ``Exists`` with values) is a SpecError naming it, not a crash of the caller."""
    if model is None:
        return None
    requirements = []
    for i, r in enumerate(model.match_expressions):
        try:
            requirements.append(LabelRequirement(r.key, r.operator, r.values))
        except ValueError as err:
            raise SpecError("ClusterQueue", name, f"spec.namespaceSelector.matchExpressions[{i}]", str(err)) from err
    return LabelSelector(model.match_labels, requirements)


class TopologyNotFound(SpecError):
    """A ResourceFlavor names a Topology that does not exist: the flavor cannot be used until it
    does (Kueue: its ClusterQueues are inactive, reason ``TopologyNotFound``)."""

    def __init__(self, flavor: str, topology_name: str) -> None:
        self.flavor = flavor
        self.topology_name = topology_name
        super().__init__("ResourceFlavor", flavor, "spec.topologyName",
                         f"Topology {topology_name!r} does not exist: the ClusterQueues using this flavor are "
                         f"inactive until it is created")


def resource_flavor(name: str, spec: Any, topologies: Mapping[str, TopologySpec] | None = None) -> FlavorSpec:
    """A ResourceFlavor (:func:`parse_resource_flavor`) with its ``spec.topologyName`` resolved in
    ``topologies`` into ``FlavorSpec.topology``; a name not there raises :class:`TopologyNotFound`."""
    flavor, wanted = parse_resource_flavor(name, spec)
    if wanted is not None:
        flavor.topology = (topologies or {}).get(wanted)
        if flavor.topology is None:
            raise TopologyNotFound(name, wanted)
    return flavor


def parse_resource_flavor(name: str, spec: Any) -> tuple[FlavorSpec, str | None]:
    """A ResourceFlavor without its topology, and the name of the Topology it names. A taint or
    toleration Kubernetes would refuse on a pod (an empty key with operator Equal, a value with
    operator Exists) is a SpecError naming it: the flavor's tolerations are copied into admitted
    pod templates."""
    kind = "ResourceFlavor"
    m = parse_model(ResourceFlavorSpecModel, spec, kind, name, "spec")
    taints = []
    for i, t in enumerate(m.node_taints):
        try:
            taints.append(Taint(t.key, t.value, t.effect))
        except ValueError as err:
            raise SpecError(kind, name, f"spec.nodeTaints[{i}]", str(err)) from err
    tolerations = []
    for i, tol in enumerate(m.tolerations):
        field = f"spec.tolerations[{i}]"
        if tol.operator == "Exists" and tol.value:
            raise SpecError(kind, name, f"{field}.value", "must be empty when operator is Exists")
        try:
            tolerations.append(Toleration(tol.key, tol.operator, tol.value, tol.effect))
        except ValueError as err:
            raise SpecError(kind, name, field, str(err)) from err
    if m.topology_name is not None and not m.topology_name:
        raise SpecError(kind, name, "spec.topologyName", "must not be empty (omit it for a flavor without topology)")
    return FlavorSpec(name, m.node_labels, taints, tolerations), m.topology_name


def cluster_queue(name: str, spec: Any) -> ClusterQueueSpec:
    kind = "ClusterQueue"
    m = parse_model(ClusterQueueSpecModel, spec, kind, name, "spec")
    p = m.preemption or PreemptionModel()
    bwc = p.borrow_within_cohort or BorrowWithinCohortModel()
    f = m.flavor_fungibility or FlavorFungibilityModel()
    out = ClusterQueueSpec(
        name,
        _groups(kind, name, m.resource_groups),
        cohort=m.cohort_name or m.cohort,
        queueing_strategy=m.queueing_strategy,
        namespace_selector=_selector(name, m.namespace_selector),
        preemption=PreemptionSpec(
            p.within_cluster_queue, p.reclaim_within_cohort, bwc.policy, bwc.max_priority_threshold
        ),
        flavor_fungibility=FlavorFungibility(_FUNGIBILITY[f.when_can_borrow], _FUNGIBILITY[f.when_can_preempt]),
        stop_policy=m.stop_policy,
        fair_sharing_weight=_weight(kind, name, m.fair_sharing),
        admission_mode=m.admission_mode,
    )
    out.validate()
    return out


def cohort(name: str, spec: Any) -> CohortSpec:
    m = parse_model(CohortSpecModel, spec, "Cohort", name, "spec")
    out = CohortSpec(
        name, m.parent_name, _groups("Cohort", name, m.resource_groups), _weight("Cohort", name, m.fair_sharing)
    )
    out.validate()
    return out


def local_queue(namespace: str, name: str, spec: Any) -> LocalQueueSpec:
    m = parse_model(LocalQueueSpecModel, spec, "LocalQueue", f"{namespace}/{name}", "spec")
    return LocalQueueSpec(namespace, name, m.cluster_queue, m.stop_policy)


# --- Topology ----------------------------------------------------------------------------------

MAX_TOPOLOGY_LEVELS: Final = 16
"""Kueue's limit on a Topology's levels."""
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (``[prefix/]name``: a DNS subdomain of at most 253
    characters, a name of at most 63 alphanumerics, ``-``, ``_``, ``.``), or None."""
    prefix, slash, label = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"{key!r} is not a valid label key: its prefix must be a DNS subdomain (e.g. example.com/rack)"
    if not label or len(label) > 63 or not _LABEL_NAME.match(label):
        return (f"{key!r} is not a valid label key: its name must be 1 to 63 letters, digits, '-', '_' or '.', "
                f"starting and ending with a letter or digit")
    return None


def topology(name: str, spec: Any) -> TopologySpec:
    """A Topology (Kueue's ``spec.levels[].nodeLabel``, top level first), checked as Kueue's CRD
    checks it: 1 to 16 levels, each a valid label key, no level twice, ``kubernetes.io/hostname``
    only as the last level."""
    kind = "Topology"
    m = parse_model(TopologySpecModel, spec, kind, name, "spec")
    if not m.levels:
        raise SpecError(kind, name, "spec.levels", "must list at least one level (a node label key)")
    if len(m.levels) > MAX_TOPOLOGY_LEVELS:
        raise SpecError(kind, name, "spec.levels",
                        f"must list at most {MAX_TOPOLOGY_LEVELS} levels, got {len(m.levels)}")
    seen: dict[str, int] = {}
    for i, level in enumerate(m.levels):
        field = f"spec.levels[{i}].nodeLabel"
        label = level.node_label
        problem = label_key_problem(label)
        if problem is not None:
            raise SpecError(kind, name, field, problem)
        if label in seen:
            raise SpecError(kind, name, field,
                            f"{label!r} is already spec.levels[{seen[label]}]: levels must be unique")
        seen[label] = i
        if label == HOSTNAME_LABEL and i != len(m.levels) - 1:
            raise SpecError(kind, name, field, f"{HOSTNAME_LABEL} can only be the lowest (last) level")
    return TopologySpec(name, [level.node_label for level in m.levels])


# --- AdmissionCheck ------------------------------------------------------------------------------

PROVISIONING_REQUEST_CONTROLLER: Final = "kueue.x-k8s.io/provisioning-request"
"""The controllerName of Kueue's ProvisioningRequest admission check (cluster-autoscaler's)."""
MULTIKUEUE_CONTROLLER: Final = "kueue.x-k8s.io/multikueue"


@dataclass(frozen=True, slots=True)
class AdmissionCheck:
    """An AdmissionCheck object: the controller that would decide it, and its parameters."""

    name: str
    controller_name: str
    parameters: tuple[str, str, str] | None = None  # (apiGroup, kind, name)


@dataclass(frozen=True, slots=True)
class CheckRef:
    """A ClusterQueue's use of an AdmissionCheck: its name, the flavors it applies to (empty: all)
    and the field that names it."""

    name: str
    on_flavors: tuple[str, ...]
    field: str


def admission_check(name: str, spec: Any) -> AdmissionCheck:
    """An AdmissionCheck; ``spec.controllerName`` is required and not empty."""
    kind = "AdmissionCheck"
    m = parse_model(AdmissionCheckSpecModel, spec, kind, name, "spec")
    if not m.controller_name:
        raise SpecError(kind, name, "spec.controllerName", "must not be empty")
    p = m.parameters
    return AdmissionCheck(name, m.controller_name, (p.api_group, p.kind, p.name) if p is not None else None)


def admission_checks(name: str, spec: Any) -> list[CheckRef]:
    """The AdmissionChecks a ClusterQueue's spec names: ``spec.admissionChecks`` (Kueue v1beta1)
    or ``spec.admissionChecksStrategy.admissionChecks[]`` (both: an error, as in Kueue)."""
    kind = "ClusterQueue"
    m = parse_model(ClusterQueueSpecModel, spec, kind, name, "spec")
    strategy = m.admission_checks_strategy
    if m.admission_checks and strategy is not None:
        raise SpecError(kind, name, "spec.admissionChecksStrategy",
                        "cannot be used along with spec.admissionChecks")
    refs: list[CheckRef] = []
    seen: set[str] = set()
    if strategy is not None:
        for i, rule in enumerate(strategy.admission_checks):
            field = f"spec.admissionChecksStrategy.admissionChecks[{i}].name"
            if rule.name in seen:
                raise SpecError(kind, name, field, f"AdmissionCheck {rule.name!r} is listed twice")
            seen.add(rule.name)
            refs.append(CheckRef(rule.name, tuple(rule.on_flavors), field))
    for i, check in enumerate(m.admission_checks):
        field = f"spec.admissionChecks[{i}]"
        if check in seen:
            raise SpecError(kind, name, field, f"AdmissionCheck {check!r} is listed twice")
        seen.add(check)
        refs.append(CheckRef(check, (), field))
    return refs


def admission_check_problem(
    cluster_queue: str, refs: Sequence[CheckRef], checks: Mapping[str, AdmissionCheck]
) -> tuple[str, str] | None:
    """Why a ClusterQueue that names admission checks admits nothing: ``(reason, message)`` with
    Kueue's reasons (``AdmissionCheckNotFound`` when one does not exist, else
    ``AdmissionCheckInactive``), or None without checks. gangq runs no admission-check controller,
    so no workload could ever pass a check: the queue is inactive rather than admitting gangs
    whose checks nobody decides (or admitting them unchecked)."""
    if not refs:
        return None
    missing = [r for r in refs if r.name not in checks]
    parts: list[str] = []
    if missing:
        parts.append("references missing AdmissionCheck(s): " + ", ".join(r.name for r in missing))
    for ref in refs:
        check = checks.get(ref.name)
        if check is None:
            continue
        if check.controller_name == PROVISIONING_REQUEST_CONTROLLER:
            parts.append(f"AdmissionCheck {check.name!r} ({ref.field}) is a ProvisioningRequest check "
                         f"(controllerName {PROVISIONING_REQUEST_CONTROLLER}): cluster-autoscaler's "
                         f"ProvisioningRequest is not supported by gangq (see docs/api.md, AdmissionCheck)")
        else:
            parts.append(f"AdmissionCheck {check.name!r} ({ref.field}) needs controller "
                         f"{check.controller_name!r}")
    reason = "AdmissionCheckNotFound" if missing else "AdmissionCheckInactive"
    message = (f"ClusterQueue {cluster_queue!r} is inactive: " + "; ".join(parts)
               + "; gangq does not run admission-check controllers, so no workload could pass its checks: "
                 "remove them from the ClusterQueue to admit with gangq")
    return reason, message
