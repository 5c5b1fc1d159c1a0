"""pydantic models of gangq's queue objects, with Kueue v1beta2 field names, and their conversion to
core specs. ``gangq.io/v1alpha1`` and Kueue's ``kueue.x-k8s.io/v1beta1|v1beta2`` are accepted."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

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
    admission_checks: list[str] = Field(default_factory=list, alias="admissionChecks")


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


def resource_flavor(name: str, spec: Any) -> FlavorSpec:
    """A ResourceFlavor; a taint or toleration Kubernetes would refuse on a pod (an empty key with
    operator Equal, a value with operator Exists) is a SpecError naming it: the flavor's
    tolerations are copied into admitted pod templates."""
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
    return FlavorSpec(name, m.node_labels, taints, tolerations)


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
