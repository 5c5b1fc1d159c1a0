"""The operator's configuration file (YAML; example: policies/operator-config.yaml; docs/operator.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gangq.core.config import EngineConfig
from gangq.core.errors import SpecError
from gangq.core.selectors import LabelRequirement, LabelSelector


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PodsReadyConfig(_Model):
    enable: bool = True
    timeout_seconds: float = Field(default=300.0, alias="timeoutSeconds", gt=0)
    backoff_base_seconds: float = Field(default=60.0, alias="backoffBaseSeconds", ge=0)
    backoff_max_seconds: float = Field(default=3600.0, alias="backoffMaxSeconds", ge=0)
    backoff_limit: int | None = Field(default=None, alias="backoffLimit", ge=0)
    requeue_timestamp: Literal["Creation", "Eviction"] = Field(default="Eviction", alias="requeueTimestamp")


class StarvationConfig(_Model):
    timeout_seconds: float = Field(default=1800.0, alias="timeoutSeconds", ge=0)


class TopologyConfig(_Model):
    """Topology-aware placement (docs/engine.md, Topology): which of the domains that can hold a
    pod set it goes to (``BestFit``: the one with the least room left, so whole domains stay free
    for big gangs; ``FirstFit``: the first by label values)."""

    fit: Literal["BestFit", "FirstFit"] = "BestFit"


class FairSharingConfig(_Model):
    enable: bool = False


class ApiConfig(_Model):
    qps: float = Field(default=500.0, gt=0)
    burst: int = Field(default=1000, ge=1)


class StatusConfig(_Model):
    """How often status is written (the write budget, docs/operator.md)."""

    workload_delay_seconds: float = Field(default=2.0, alias="workloadDelaySeconds", ge=0)
    # 5 s, not longer: until then ``kubectl get workloads`` does not show a queued workload at all, and a
    # researcher asking "why is my job pending?" finds nothing to read.
    pending_delay_seconds: float = Field(default=5.0, alias="pendingDelaySeconds", ge=0)
    pending_min_interval_seconds: float = Field(default=60.0, alias="pendingMinIntervalSeconds", ge=0)
    queue_interval_seconds: float = Field(default=5.0, alias="queueIntervalSeconds", gt=0)


class PreemptionConfig(_Model):
    """Engine preemption settings (docs/engine.md, Preemption)."""

    budget: int | None = Field(default=None, ge=1)  # a gang evicted this many times is no longer a victim
    # a gang evicted before and admitted again less than this long ago is a victim only when no
    # other victim set will do (0: off)
    grace_seconds: float = Field(default=300.0, alias="graceSeconds", ge=0)
    # a gang preempted this many times is admitted again only where no waiting gang preempts it
    # again (null: off)
    shelter_after: int | None = Field(default=2, alias="shelterAfter", ge=1)
    # a gang may preempt only once it has waited this long since it was queued (0: at once)
    delay_seconds: float = Field(default=5.0, alias="delaySeconds", ge=0)


class EventsConfig(_Model):
    admission: bool = True
    eviction: bool = True


class LeaderElectionConfig(_Model):
    enable: bool = True
    namespace: str = "default"
    lease_name: str = Field(default="gangq-controller", alias="leaseName")
    lease_duration_seconds: float = Field(default=15.0, alias="leaseDurationSeconds", gt=0)
    renew_interval_seconds: float = Field(default=5.0, alias="renewIntervalSeconds", gt=0)


class SelectorRequirementConfig(_Model):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_fit_the_operator(self) -> SelectorRequirementConfig:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class NamespaceSelectorConfig(_Model):
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[SelectorRequirementConfig] = Field(default_factory=list, alias="matchExpressions")

    def selector(self) -> LabelSelector:
        """The selector the engine's label matching evaluates."""
        requirements = [LabelRequirement(r.key, r.operator, list(r.values)) for r in self.match_expressions]
        return LabelSelector(dict(self.match_labels), requirements)


class WebhookConfig(_Model):
    """The admission webhook server (:mod:`gangq.operator.webhook`, docs/operator.md "Admission
    webhook"). Off unless ``port`` is set: without registered webhook configurations nothing calls
    it, and the Deployment's webhook component turns it on."""

    port: int = Field(default=0, ge=0, le=65535)  # 0: off
    # Loopback unless set, as metricsBind: the API server of a pod's cluster reaches it on the
    # pod's IP, so the webhook component sets 0.0.0.0; a laptop run serves no network.
    bind: str = Field(default="127.0.0.1", min_length=1)
    # tls.crt / tls.key, e.g. a mounted Secret written by cert-manager: used as is, reloaded when
    # they change. Unset: gangq keeps its own CA and certificate in ``secretName``.
    cert_dir: str | None = Field(default=None, alias="certDir")
    hosts: list[str] = Field(default_factory=list)  # extra DNS names / IP addresses of the certificate
    service_name: str = Field(default="gangq-webhook", alias="serviceName", min_length=1)
    namespace: str = Field(default="gangq-system", min_length=1)  # of the Service and the Secret
    secret_name: str = Field(default="gangq-webhook-cert", alias="secretName", min_length=1)
    # The MutatingWebhookConfiguration and ValidatingWebhookConfiguration whose caBundle gangq keeps.
    configuration_name: str = Field(default="gangq-webhook", alias="configurationName", min_length=1)


class VisibilityConfig(_Model):
    """The pending-workloads API (:mod:`gangq.operator.visibility`, docs/observability.md): HTTPS on
    its own port, every request authenticated (a bearer token through TokenReview, or the API
    server's front-proxy client certificate) and authorized (SubjectAccessReview). Off unless
    ``port`` is set: the install sets 8443 and registers it as an APIService."""

    port: int = Field(default=0, ge=0, le=65535)  # 0: off
    # Loopback unless set: the install sets 0.0.0.0 (kube-apiserver reaches it on the pod's IP).
    bind: str = Field(default="127.0.0.1", min_length=1)
    # tls.crt / tls.key (e.g. a cert-manager Secret), reloaded when they change. Unset: gangq keeps
    # a CA and certificate in ``secretName`` and writes the CA into the APIService's caBundle.
    cert_dir: str | None = Field(default=None, alias="certDir")
    hosts: list[str] = Field(default_factory=list)  # extra DNS names / IP addresses of the certificate
    service_name: str = Field(default="gangq-visibility", alias="serviceName", min_length=1)
    namespace: str = Field(default="gangq-system", min_length=1)  # of the Service and the Secret
    secret_name: str = Field(default="gangq-visibility-cert", alias="secretName", min_length=1)
    api_service_name: str = Field(default="v1alpha1.visibility.gangq.io", alias="apiServiceName", min_length=1)
    # Authentication and authorization decisions are kept this long (a busy ``gangq queue`` costs
    # the API server one TokenReview and one SubjectAccessReview per user and queue per period).
    cache_seconds: float = Field(default=10.0, alias="cacheSeconds", ge=0)
    cache_size: int = Field(default=4096, alias="cacheSize", ge=1)


def _system_namespaces() -> NamespaceSelectorConfig:
    return NamespaceSelectorConfig.model_validate({"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": ["kube-system", "kube-public", "kube-node-lease", "gangq-system"]}]})


class OperatorConfig(_Model):
    """Everything an admin sets for ``gangq run --config FILE``."""

    pods_ready: PodsReadyConfig = Field(default_factory=PodsReadyConfig, alias="podsReady")
    starvation: StarvationConfig = Field(default_factory=StarvationConfig)
    fair_sharing: FairSharingConfig = Field(default_factory=FairSharingConfig, alias="fairSharing")
    topology: TopologyConfig = Field(default_factory=TopologyConfig)
    preemption: PreemptionConfig = Field(default_factory=PreemptionConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)
    status: StatusConfig = Field(default_factory=StatusConfig)
    events: EventsConfig = Field(default_factory=EventsConfig)
    leader_election: LeaderElectionConfig = Field(default_factory=LeaderElectionConfig, alias="leaderElection")
    metrics_port: int | None = Field(default=8080, alias="metricsPort", ge=0, le=65535)
    # Loopback unless set: the pending-workloads API names every queued job, and a controller run
    # on a laptop (or with the embedded sandbox) should not serve that to the network. The
    # Deployment sets 0.0.0.0 for its probes and Prometheus.
    metrics_bind: str = Field(default="127.0.0.1", alias="metricsBind", min_length=1)
    namespaces: list[str] = Field(default_factory=list)
    # Kueue's manageJobsWithoutQueueName: in the namespaces the selector picks, a workload without
    # a queue label is queued to the namespace's LocalQueue "default" (or held, saying how to
    # submit it, when there is none) — no way around the queue for a forgotten label.
    manage_jobs_without_queue_name: bool = Field(default=False, alias="manageJobsWithoutQueueName")
    managed_jobs_namespace_selector: NamespaceSelectorConfig = Field(
        default_factory=_system_namespaces, alias="managedJobsNamespaceSelector")
    webhook: WebhookConfig = Field(default_factory=WebhookConfig)
    visibility: VisibilityConfig = Field(default_factory=VisibilityConfig)

    def engine_config(self) -> EngineConfig:
        pr = self.pods_ready
        return EngineConfig(
            pods_ready_timeout=pr.timeout_seconds if pr.enable else None,
            backoff_base=pr.backoff_base_seconds,
            backoff_max=max(pr.backoff_max_seconds, pr.backoff_base_seconds),
            backoff_limit=pr.backoff_limit,
            requeue_timestamp=pr.requeue_timestamp,
            starvation_timeout=self.starvation.timeout_seconds,
            fair_sharing=self.fair_sharing.enable,
            preemption_budget=self.preemption.budget,
            preemption_grace=self.preemption.grace_seconds,
            preemption_shelter=self.preemption.shelter_after,
            preemption_delay=self.preemption.delay_seconds,
            topology_fit=self.topology.fit,
        )


def parse_config(data: Any, source: str = "config") -> OperatorConfig:
    """An :class:`OperatorConfig` from a mapping; SpecError names the field that is wrong."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError("OperatorConfig", source, "", "must be a mapping")
    try:
        return OperatorConfig.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise SpecError("OperatorConfig", source, field, first["msg"]) from err


def load_config(path: str | Path | None) -> OperatorConfig:
    """Read a config file (``None``: the defaults)."""
    if path is None:
        return OperatorConfig()
    p = Path(path)
    return parse_config(yaml.safe_load(p.read_text()), str(p))
