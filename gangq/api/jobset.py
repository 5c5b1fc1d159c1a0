"""pydantic models of ``jobset.x-k8s.io/v1alpha2`` JobSet, with upstream's field names.

The models type what gangq reads (the admission side) and what the embedded reconciler needs, and
keep everything else: every model allows unknown fields, and every optional field defaults to
``None``, so that ``model_dump(by_alias=True, exclude_none=True)`` gives back the JSON that was
parsed, without adding a field (:func:`dump` does the same and also keeps explicit nulls). The
operator patches these objects; it must never drop or invent a field.

Defaults that upstream's webhook and CRD schema apply are not applied on parsing; call
:func:`with_defaults` for them (the mapping to a gang reads the effective values itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from gangq.core.errors import SpecError

API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"

Quantity = str | int | float
CompletionMode = Literal["NonIndexed", "Indexed"]
DependsOnStatus = Literal["Ready", "Complete"]
Operator = Literal["All", "Any"]
FailurePolicyAction = Literal[
    "FailJobSet",
    "RestartJobSet",
    "RestartJobSetAndIgnoreMaxRestarts",
    # Newer upstream releases; accepted so that their JobSets parse, see docs/api.md.
    "RestartJob",
    "RestartJobAndIgnoreMaxRestarts",
]
RestartStrategy = Literal["Recreate", "BlockingRecreate", "InPlaceRestart"]
StartupPolicyOrder = Literal["AnyOrder", "InOrder"]
PodRestartPolicy = Literal["Always", "OnFailure", "Never"]

# Reasons a failed Job's condition can carry, the only values upstream's webhook accepts in
# failurePolicy.rules[].onJobFailureReasons.
JOB_FAILURE_REASONS = (
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
)
DEFAULT_GROUP_NAME = "default"
DEFAULT_RULE_NAME = "failurePolicyRule{}"


class K8sModel(BaseModel):
    """Base of every model here: camelCase aliases, unknown fields kept, no type coercion."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        strict=True,
        validate_assignment=False,
    )


# --- metadata ---------------------------------------------------------------------------------


class ObjectMeta(K8sModel):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[dict[str, Any]] | None = None
    finalizers: list[str] | None = None


# --- pods ---------------------------------------------------------------------------------------


class ResourceRequirements(K8sModel):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None
    claims: list[dict[str, Any]] | None = None


class Container(K8sModel):
    """A container or init container. ``restart_policy: Always`` on an init container makes it a
    sidecar (it runs for the pod's whole life)."""

    name: str
    image: str | None = None
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None


class Toleration(K8sModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class PodSchedulingGate(K8sModel):
    name: str


class PodSpec(K8sModel):
    """A pod spec, typed where gangq reads it; everything else (volumes, env, ...) is kept as is."""

    containers: list[Container] | None = None
    init_containers: list[Container] | None = None
    overhead: dict[str, Quantity] | None = None
    resources: ResourceRequirements | None = None  # pod-level resources (PodLevelResources)
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    affinity: dict[str, Any] | None = None
    priority_class_name: str | None = None
    priority: int | None = None
    scheduling_gates: list[PodSchedulingGate] | None = None
    restart_policy: PodRestartPolicy | None = None
    hostname: str | None = None
    subdomain: str | None = None
    active_deadline_seconds: int | None = None


class PodTemplateSpec(K8sModel):
    metadata: ObjectMeta | None = None
    spec: PodSpec | None = None


# --- batch/v1 Job -----------------------------------------------------------------------------


class PodFailurePolicyOnExitCodes(K8sModel):
    container_name: str | None = None
    operator: Literal["In", "NotIn"]
    values: list[int]


class PodFailurePolicyOnPodCondition(K8sModel):
    type: str
    status: str | None = None


class PodFailurePolicyRule(K8sModel):
    action: Literal["FailJob", "FailIndex", "Ignore", "Count"]
    on_exit_codes: PodFailurePolicyOnExitCodes | None = None
    on_pod_conditions: list[PodFailurePolicyOnPodCondition] | None = None


class PodFailurePolicy(K8sModel):
    rules: list[PodFailurePolicyRule]


class JobSpec(K8sModel):
    parallelism: int | None = Field(default=None, ge=0)
    completions: int | None = Field(default=None, ge=0)
    completion_mode: CompletionMode | None = None
    backoff_limit: int | None = Field(default=None, ge=0)
    backoff_limit_per_index: int | None = Field(default=None, ge=0)
    max_failed_indexes: int | None = Field(default=None, ge=0)
    active_deadline_seconds: int | None = Field(default=None, gt=0)
    pod_failure_policy: PodFailurePolicy | None = None
    suspend: bool | None = None
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    pod_replacement_policy: Literal["TerminatingOrFailed", "Failed"] | None = None
    managed_by: str | None = None
    template: PodTemplateSpec


class JobTemplateSpec(K8sModel):
    metadata: ObjectMeta | None = None
    spec: JobSpec


# --- JobSet -----------------------------------------------------------------------------------


class DependsOn(K8sModel):
    name: str
    status: DependsOnStatus


class ReplicatedJob(K8sModel):
    name: str
    group_name: str | None = None
    template: JobTemplateSpec
    replicas: int | None = Field(default=None, ge=0)
    depends_on: list[DependsOn] | None = None


class Network(K8sModel):
    enable_dns_hostnames: bool | None = Field(default=None, alias="enableDNSHostnames")
    subdomain: str | None = None
    publish_not_ready_addresses: bool | None = None


class SuccessPolicy(K8sModel):
    operator: Operator
    target_replicated_jobs: list[str] | None = None


class FailurePolicyRule(K8sModel):
    name: str | None = None  # upstream's webhook defaults it to failurePolicyRule<index>
    action: FailurePolicyAction
    on_job_failure_reasons: list[str] | None = None
    on_job_failure_message_patterns: list[str] | None = None
    target_replicated_jobs: list[str] | None = None


class FailurePolicy(K8sModel):
    max_restarts: int | None = Field(default=None, ge=0)
    restart_strategy: RestartStrategy | None = None
    rules: list[FailurePolicyRule] | None = None


class StartupPolicy(K8sModel):
    startup_policy_order: StartupPolicyOrder


class Coordinator(K8sModel):
    replicated_job: str
    job_index: int | None = Field(default=None, ge=0)
    pod_index: int | None = Field(default=None, ge=0)


class JobSetSpec(K8sModel):
    replicated_jobs: list[ReplicatedJob] | None = None
    network: Network | None = None
    success_policy: SuccessPolicy | None = None
    failure_policy: FailurePolicy | None = None
    startup_policy: StartupPolicy | None = None
    suspend: bool | None = None
    coordinator: Coordinator | None = None
    managed_by: str | None = None
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)


class Condition(K8sModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None


class ReplicatedJobStatus(K8sModel):
    name: str
    ready: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    active: int | None = None
    suspended: int | None = None


class JobSetStatus(K8sModel):
    conditions: list[Condition] | None = None
    restarts: int | None = None
    restarts_count_towards_max: int | None = None
    terminal_state: str | None = None
    replicated_jobs_status: list[ReplicatedJobStatus] | None = None


class JobSet(K8sModel):
    api_version: Literal["jobset.x-k8s.io/v1alpha2"] | None = None
    kind: Literal["JobSet"] | None = None
    metadata: ObjectMeta
    spec: JobSetSpec
    status: JobSetStatus | None = None

    @property
    def key(self) -> str:
        """``<namespace>/<name>``, the Workload key."""
        return object_key(self.metadata.namespace, self.metadata.name)

    def replicated_jobs(self) -> list[ReplicatedJob]:
        return self.spec.replicated_jobs or []


# --- helpers ----------------------------------------------------------------------------------


def object_key(namespace: str | None, name: str | None) -> str:
    return f"{namespace or 'default'}/{name or '?'}"


def _raw_key(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return object_key(None, None)
    namespace, name = meta.get("namespace"), meta.get("name")
    return object_key(namespace if isinstance(namespace, str) else None, name if isinstance(name, str) else None)


_MAP_FIELDS = frozenset({"labels", "annotations", "nodeSelector", "requests", "limits", "overhead"})
_UNION_TAGS = frozenset({"str", "int", "float"})


def field_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """A pydantic error location as a Kubernetes field path: ``spec.replicatedJobs[0].name``,
    map keys in brackets: ``metadata.labels[app]``, ``resources.limits[nvidia.com/gpu]``."""
    path = prefix
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int) or previous in _MAP_FIELDS or "." in part or "/" in part:
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
        previous = part
    return path


def spec_error(err: ValidationError, kind: str, name: str, prefix: str = "") -> SpecError:
    """The first error of a pydantic validation as a SpecError naming the field."""
    first = err.errors()[0]
    loc = tuple(p for p in first["loc"] if p not in _UNION_TAGS)
    message = first["msg"]
    if len(loc) != len(first["loc"]):  # the only unions are quantities
        message = f"must be a quantity (a string such as 500m or 16Gi, or a number), got {first.get('input')!r}"
    elif first["type"] == "literal_error":
        message = f"{message}, got {first.get('input')!r}"
    return SpecError(kind, name, field_path(loc, prefix) or "(object)", message)


def plain_json(value: Any) -> Any:
    """A deep copy with every mapping as a ``dict`` and every list or tuple as a ``list`` (kopf
    bodies and other read-only views are mappings, not dicts)."""
    if isinstance(value, Mapping):
        return {k: plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    return value


def parse_jobset(obj: Mapping[str, Any] | JobSet) -> JobSet:
    """Validate a JobSet's JSON; a failure is a SpecError naming ``JobSet <ns>/<name>`` and the field."""
    if isinstance(obj, JobSet):
        return obj
    try:
        return JobSet.model_validate(plain_json(obj))
    except ValidationError as err:
        raise spec_error(err, KIND, _raw_key(obj)) from err


def dump(jobset: BaseModel) -> dict[str, Any]:
    """The object's JSON: camelCase names, only the fields that were given or set.

    Round-trips what was parsed, explicit ``null`` s included (Go clients write
    ``metadata: {creationTimestamp: null}`` into templates). ``model_dump(by_alias=True,
    exclude_none=True)`` gives the same JSON for input without nulls.
    """
    return jobset.model_dump(by_alias=True, exclude_unset=True, mode="json")


def with_defaults(obj: Mapping[str, Any] | JobSet) -> JobSet:
    """A copy with the defaults upstream applies at admission (webhook and CRD schema).

    successPolicy ``All``; startupPolicy ``AnyOrder``; per replicatedJob ``replicas: 1``,
    ``groupName: default``, ``completionMode: Indexed`` and pod ``restartPolicy: OnFailure``;
    ``network.enableDNSHostnames`` and ``network.publishNotReadyAddresses`` true; with a
    failurePolicy, ``restartStrategy: Recreate`` and rule names ``failurePolicyRule<index>``.
    """
    js = parse_jobset(obj).model_copy(deep=True)
    spec = js.spec
    if spec.success_policy is None:
        spec.success_policy = SuccessPolicy(operator="All")
    if spec.startup_policy is None:
        spec.startup_policy = StartupPolicy(startup_policy_order="AnyOrder")
    for rjob in spec.replicated_jobs or []:
        if rjob.replicas is None:
            rjob.replicas = 1
        if rjob.group_name is None:
            rjob.group_name = DEFAULT_GROUP_NAME
        job = rjob.template.spec
        if job.completion_mode is None:
            job.completion_mode = "Indexed"
        if job.template.spec is None:
            job.template.spec = PodSpec()
        if job.template.spec.restart_policy is None:
            job.template.spec.restart_policy = "OnFailure"
    if spec.network is None:
        spec.network = Network()
    if spec.network.enable_dns_hostnames is None:
        spec.network.enable_dns_hostnames = True
    if spec.network.publish_not_ready_addresses is None:
        spec.network.publish_not_ready_addresses = True
    if spec.failure_policy is not None:
        if spec.failure_policy.restart_strategy is None:
            spec.failure_policy.restart_strategy = "Recreate"
        for i, rule in enumerate(spec.failure_policy.rules or []):
            if not rule.name:
                rule.name = DEFAULT_RULE_NAME.format(i)
    return js


def effective_replicas(rjob: ReplicatedJob) -> int:
    return 1 if rjob.replicas is None else rjob.replicas


def pod_template_path(index: int) -> str:
    """Field path of replicatedJob ``index``'s pod spec."""
    return f"spec.replicatedJobs[{index}].template.spec.template.spec"
