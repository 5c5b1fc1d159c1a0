"""Per-kind registry strategies: what creating, updating and deleting means for each kind.

Modelled on the kube-apiserver's `rest.RESTCreateStrategy` / `RESTUpdateStrategy` /
`RESTDeleteStrategy`: the generic store (store.py) does what every kind shares and asks the kind's
`Strategy` for the rest. `strategy_for(info)` picks it from `STRATEGIES` (built-in kinds by
(group, plural)); custom resources get `CustomResourceStrategy` (structural-schema pruning, defaults
and validation), and every other kind the no-op `Strategy`.

Only what controllers and clients rely on is modelled: Pod and Job defaulting and immutability,
namespace finalizers and phase, Service cluster IPs, CRD validation and acceptedNames, and the
defaults and validation of admission webhook configurations (webhookconfig.py).

`decode_defaults` is what the real server applies while it decodes a request body (scheme defaults,
CRD structural defaults, the built-in mutating admission plugins), before admission webhooks see the
object. The sandbox applies the same defaults again later (`prepare_for_create`, `apply_schema`), so
it only matters to what a webhook is sent.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from gangq.sandbox import schema, webhookconfig
from gangq.sandbox.builtin import ResourceInfo
from gangq.sandbox.errors import invalid
from gangq.sandbox.metadata import now

__all__ = ["STRATEGIES", "Strategy", "StrategyContext", "served_resource", "strategy_for"]

PODS = ("", "pods")
JOBS = ("batch", "jobs")
NAMESPACES = ("", "namespaces")
SERVICES = ("", "services")
NODES = ("", "nodes")
EVENTS = ("", "events")
CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")
MUTATING_WEBHOOKS = (webhookconfig.GROUP, webhookconfig.MUTATING)
VALIDATING_WEBHOOKS = (webhookconfig.GROUP, webhookconfig.VALIDATING)


class StrategyContext(Protocol):
    """What a strategy may ask of the store."""

    def upcoming_resource_version(self) -> int:
        """The resourceVersion the write being prepared will get."""
        ...

    def served_elsewhere(self, key: tuple[str, str], crd_name: str) -> bool:
        """Whether resource `key` is already served, other than by the CRD named `crd_name`."""
        ...


class Strategy:
    """A kind with nothing of its own: no defaults, any update valid, Background deletion, no grace."""

    __slots__ = ()

    #: what a DELETE without propagationPolicy does to dependents
    default_propagation = "Background"

    def decode_defaults(self, info: ResourceInfo, obj: dict[str, Any], *, create: bool) -> dict[str, Any]:
        """`obj` with the defaults the real server applies while decoding a request body, before admission
        webhooks (see the module docstring); in place or a new dict. It must accept invalid objects."""
        return obj

    def prepare_for_create(self, ctx: StrategyContext, info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
        """Validate a new object and fill in its defaults, in place (422 when invalid)."""

    def validate_update(
        self, ctx: StrategyContext, info: ResourceInfo, old: dict[str, Any], new: dict[str, Any], name: str
    ) -> None:
        """422 when the update from `old` to `new` is not allowed (immutable fields...)."""

    def prepare_for_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Adjust the validated candidate `new` in place (fields the server owns)."""

    def apply_schema(self, info: ResourceInfo, obj: dict[str, Any], name: str) -> dict[str, Any]:
        """The object as stored after schema pruning, defaulting and validation (none for built-in kinds)."""
        return obj

    def deletion_grace(self, obj: dict[str, Any], grace: int | None) -> int:
        """Seconds the object stays, marked for deletion, before it goes (0: at once)."""
        return 0

    def pending_grace(self, obj: dict[str, Any]) -> bool:
        """Whether an object marked for deletion with no finalizers left still waits out its grace period."""
        return False


class CustomResourceStrategy(Strategy):
    """Custom resources: their CRD's structural schema prunes, defaults and validates them."""

    __slots__ = ()

    def decode_defaults(self, info: ResourceInfo, obj: dict[str, Any], *, create: bool) -> dict[str, Any]:
        """Pruning and structural defaults, as the real server's decoder applies them."""
        if info.schema is None:
            return obj
        out = schema.apply_defaults(schema.prune(obj, info.schema), info.schema)
        meta = out.get("metadata")
        if isinstance(meta, dict):
            out["metadata"] = dict(meta)
        return out

    def apply_schema(self, info: ResourceInfo, obj: dict[str, Any], name: str) -> dict[str, Any]:
        if info.schema is None:
            return obj
        obj = schema.prune(obj, info.schema)
        obj = schema.apply_defaults(obj, info.schema)
        errors = schema.validate(obj, info.schema)
        if errors:
            raise invalid(info, name, [(f, schema.error_cause_reason(m), m) for f, m in errors])
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            obj["metadata"] = dict(meta)
        return obj


# ---------------------------------------------------------------------------------------------- pods


def _qos(spec: dict[str, Any]) -> str:
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or str(req.get(r, lim[r])) != str(lim[r]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


_POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds")


def _without_mutable(spec: dict[str, Any]) -> dict[str, Any]:
    s = {k: v for k, v in spec.items() if k not in _POD_MUTABLE}
    s["containers"] = [{k: v for k, v in c.items() if k != "image"} for c in spec.get("containers") or []]
    s["initContainers"] = [{k: v for k, v in c.items() if k != "image"} for c in spec.get("initContainers") or []]
    return s


def pod_spec_defaults(spec: dict[str, Any]) -> None:
    """The defaults of a pod spec, a pod's or a template's (a Job's pod template gets them when the
    Job is created, as on a real server): containers' pull policy, termination message and
    resources; restart policy, grace period, DNS policy, scheduler and security context."""
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        if isinstance(c, dict):
            image = str(c.get("image") or "")
            tag = image.rsplit("/", 1)[-1]
            pull = "Always" if ":" not in tag or tag.endswith(":latest") else "IfNotPresent"
            c.setdefault("imagePullPolicy", pull)
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})


def _pod_defaults(spec: dict[str, Any]) -> None:
    """A pod's defaults: its spec's, requests from limits, and those of the admission plugins that run
    before webhooks (Priority, ServiceAccount, DefaultTolerationSeconds). Tolerates invalid specs."""
    pod_spec_defaults(spec)
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = c.get("resources") if isinstance(c, dict) else None
        if isinstance(res, dict) and res.get("limits") and not res.get("requests"):
            res["requests"] = dict(res["limits"])
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    tols = spec.setdefault("tolerations", [])
    if isinstance(tols, list):
        have = {t.get("key") for t in tols if isinstance(t, dict)}
        for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if k not in have:
                tols.append({"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})


class PodStrategy(Strategy):
    """Pods: required containers, kubelet-facing defaults, an immutable spec, graceful deletion."""

    __slots__ = ()

    def decode_defaults(self, info: ResourceInfo, obj: dict[str, Any], *, create: bool) -> dict[str, Any]:
        spec = obj.get("spec")
        if create and isinstance(spec, dict):
            _pod_defaults(spec)
        return obj

    def prepare_for_create(self, ctx: StrategyContext, info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise invalid(info, name, [("spec", "FieldValueRequired", "Required value")])
        containers = spec.get("containers")
        causes: list[tuple[str, str, str]] = []
        if not isinstance(containers, list) or not containers:
            causes.append(("spec.containers", "FieldValueRequired", "Required value"))
        else:
            for i, c in enumerate(containers):
                if not isinstance(c, dict) or not c.get("name"):
                    causes.append((f"spec.containers[{i}].name", "FieldValueRequired", "Required value"))
                    continue
                if not c.get("image"):
                    causes.append((f"spec.containers[{i}].image", "FieldValueRequired", "Required value"))
        if spec.get("restartPolicy", "Always") not in ("Always", "OnFailure", "Never"):
            causes.append(("spec.restartPolicy", "FieldValueNotSupported",
                           'Unsupported value: supported values: "Always", "OnFailure", "Never"'))
        if causes:
            raise invalid(info, name, causes)
        _pod_defaults(spec)
        status: dict[str, Any] = {"phase": "Pending", "qosClass": _qos(spec)}
        if spec.get("schedulingGates"):
            status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                     "message": "Scheduling is blocked due to non-empty scheduling gates",
                                     "lastProbeTime": None, "lastTransitionTime": now()}]
        obj["status"] = status

    def validate_update(
        self, ctx: StrategyContext, info: ResourceInfo, old: dict[str, Any], new: dict[str, Any], name: str
    ) -> None:
        os_ = old.get("spec") or {}
        ns_ = new.get("spec") or {}
        if os_ == ns_:
            return
        if os_.get("schedulingGates"):
            # A gated pod may get node-selector entries (kube-apiserver's mutable scheduling
            # directives): how a queueing controller puts its flavor's node labels on a pod it
            # holds. Entries it had cannot change or go.
            old_sel = os_.get("nodeSelector") or {}
            new_sel = ns_.get("nodeSelector") or {}
            if any(new_sel.get(k) != v for k, v in old_sel.items()):
                raise invalid(info, name, [("spec.nodeSelector", "FieldValueInvalid",
                                            "Invalid value: only additions to spec.nodeSelector are allowed "
                                            "(no mutations or deletions)")])
            os_ = {k: v for k, v in os_.items() if k != "nodeSelector"}
            if "nodeSelector" in ns_:
                os_["nodeSelector"] = ns_["nodeSelector"]
        if _without_mutable(os_) != _without_mutable(ns_):
            raise invalid(info, name, [("spec", "FieldValueForbidden",
                                        "Forbidden: pod updates may not change fields other than "
                                        "`spec.containers[*].image`,"
                                        "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
                                        "`spec.tolerations` "
                                        "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                                        "(allow it to be set to 1 if it was previously negative)")])
        old_gates = {g.get("name") for g in os_.get("schedulingGates") or ()}
        new_gates = {g.get("name") for g in ns_.get("schedulingGates") or ()}
        if new_gates - old_gates:
            raise invalid(info, name, [("spec.schedulingGates", "FieldValueForbidden",
                                        "Forbidden: only deletion is allowed, but found new scheduling gate")])

    def deletion_grace(self, obj: dict[str, Any], grace: int | None) -> int:
        """The request's grace, else spec.terminationGracePeriodSeconds; 0 for a pod no kubelet runs."""
        spec = obj.get("spec") or {}
        phase = (obj.get("status") or {}).get("phase")
        g = grace if grace is not None else spec.get("terminationGracePeriodSeconds", 30)
        g = max(0, int(g or 0))
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            g = 0
        return g

    def pending_grace(self, obj: dict[str, Any]) -> bool:
        """A pod whose deletion is graceful stays until the kubelet deletes it with grace 0."""
        return bool(obj["metadata"].get("deletionGracePeriodSeconds"))


# ---------------------------------------------------------------------------------------------- jobs


def _job_spec_defaults(spec: dict[str, Any]) -> None:
    """The scheme defaults of a Job's spec (counts, backoff, mode, suspend, replacement policy)."""
    spec.setdefault("manualSelector", False)
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("backoffLimit", 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6)
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")


class JobStrategy(Strategy):
    """batch/v1 Jobs: the generated selector and labels, count defaults, an immutable selector and mode."""

    __slots__ = ()

    #: the REST default of batch/v1 Jobs, kept for clients that rely on it
    default_propagation = "Orphan"

    def decode_defaults(self, info: ResourceInfo, obj: dict[str, Any], *, create: bool) -> dict[str, Any]:
        spec = obj.get("spec")
        if not create or not isinstance(spec, dict):
            return obj
        template = spec.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            pod_spec_defaults(template["spec"])
        _job_spec_defaults(spec)
        tlabels = (template.get("metadata") or {}).get("labels") if isinstance(template, dict) else None
        meta = obj.get("metadata")
        if isinstance(meta, dict) and tlabels and isinstance(tlabels, dict) and not meta.get("labels"):
            meta["labels"] = dict(tlabels)
        return obj

    def prepare_for_create(self, ctx: StrategyContext, info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise invalid(info, name, [("spec", "FieldValueRequired", "Required value")])
        template = spec.get("template")
        if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
            raise invalid(info, name, [("spec.template.spec", "FieldValueRequired", "Required value")])
        tspec = template["spec"]
        if tspec.get("restartPolicy") not in ("OnFailure", "Never"):
            raise invalid(info, name, [("spec.template.spec.restartPolicy", "FieldValueRequired",
                                        "Required value: valid values: \"OnFailure\", \"Never\"")])
        if not tspec.get("containers"):
            raise invalid(info, name, [("spec.template.spec.containers", "FieldValueRequired", "Required value")])
        pod_spec_defaults(tspec)
        _job_spec_defaults(spec)
        if spec["completionMode"] == "Indexed" and spec.get("completions") is None:
            raise invalid(info, name, [("spec.completions", "FieldValueRequired",
                                        "Required value: when completion mode is Indexed")])
        uid = obj["metadata"]["uid"]
        labels = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
        if not spec.get("manualSelector"):
            if spec.get("selector") is not None:
                raise invalid(info, name, [("spec.selector", "FieldValueInvalid",
                                            "Invalid value: `selector` will be auto-generated")])
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            tmeta = template.setdefault("metadata", {})
            tmeta["labels"] = {**(tmeta.get("labels") or {}), **labels}
        obj["status"] = {}
        if not obj["metadata"].get("labels"):
            tlabels = (template.get("metadata") or {}).get("labels")
            if tlabels:
                obj["metadata"]["labels"] = dict(tlabels)

    def validate_update(
        self, ctx: StrategyContext, info: ResourceInfo, old: dict[str, Any], new: dict[str, Any], name: str
    ) -> None:
        os_, ns_ = old.get("spec") or {}, new.get("spec") or {}
        if os_.get("selector") != ns_.get("selector"):
            raise invalid(info, name, [("spec.selector", "FieldValueInvalid", "Invalid value: field is immutable")])
        if os_.get("completionMode") != ns_.get("completionMode"):
            raise invalid(info, name, [("spec.completionMode", "FieldValueInvalid",
                                        "Invalid value: field is immutable")])


# ------------------------------------------------------------------------------ namespaces, services, nodes


class NamespaceStrategy(Strategy):
    """Namespaces: the `kubernetes` finalizer, phase Active, the kubernetes.io/metadata.name label."""

    __slots__ = ()

    def prepare_for_create(self, ctx: StrategyContext, info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = name


class ServiceStrategy(Strategy):
    """Services: type ClusterIP with an allocated cluster IP, port defaults."""

    __slots__ = ()

    def prepare_for_create(self, ctx: StrategyContext, info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        if spec.get("clusterIP") is None:
            n = ctx.upcoming_resource_version()
            spec["clusterIP"] = f"10.96.{(n >> 8) & 255}.{n & 255}"
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                p.setdefault("targetPort", p.get("port"))
        _session_affinity_defaults(spec)
        obj["status"] = {"loadBalancer": {}}

    def prepare_for_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        spec = new.get("spec")
        if isinstance(spec, dict):
            _session_affinity_defaults(spec)


def _session_affinity_defaults(spec: dict[str, Any]) -> None:
    """ClientIP session affinity times out after 3 hours unless the Service says otherwise."""
    if spec.get("sessionAffinity") == "ClientIP":
        spec.setdefault("sessionAffinityConfig", {"clientIP": {"timeoutSeconds": 10800}})


class EventStrategy(Strategy):
    """core/v1 Events: the reporting fields a real server always serialises (empty when not given)."""

    __slots__ = ()

    def prepare_for_create(self, ctx: StrategyContext, info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
        obj.setdefault("reportingComponent", "")
        obj.setdefault("reportingInstance", "")

    def prepare_for_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        new.setdefault("reportingComponent", "")
        new.setdefault("reportingInstance", "")


class NodeStrategy(Strategy):
    """Nodes: an empty spec at least."""

    __slots__ = ()

    def prepare_for_create(self, ctx: StrategyContext, info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
        obj.setdefault("spec", {})


# ------------------------------------------------------------------------------ webhook configurations


class WebhookConfigurationStrategy(Strategy):
    """Mutating/ValidatingWebhookConfigurations: their v1 defaults and validation (webhookconfig.py)."""

    __slots__ = ("mutating",)

    def __init__(self, *, mutating: bool) -> None:
        self.mutating = mutating

    def _check(self, info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
        webhookconfig.default_configuration(obj, mutating=self.mutating)
        causes = webhookconfig.configuration_problems(obj, mutating=self.mutating)
        if causes:
            raise invalid(info, name, causes)

    def prepare_for_create(self, ctx: StrategyContext, info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
        self._check(info, obj, name)

    def validate_update(
        self, ctx: StrategyContext, info: ResourceInfo, old: dict[str, Any], new: dict[str, Any], name: str
    ) -> None:
        self._check(info, new, name)  # the body's defaults first, as the real server's decoding applies them


# ---------------------------------------------------------------------------------------------- CRDs


class CRDStrategy(Strategy):
    """CustomResourceDefinitions: names, scope and one storage version; accepted at once (Established)."""

    __slots__ = ()

    def prepare_for_create(self, ctx: StrategyContext, info: ResourceInfo, obj: dict[str, Any], name: str) -> None:
        _validate_crd(ctx, info, obj, name, creating=True)
        names = obj["spec"]["names"]
        accepted = dict(names)
        accepted.setdefault("singular", names["kind"].lower())
        accepted.setdefault("listKind", names["kind"] + "List")
        stamp = now()
        obj["status"] = {
            "acceptedNames": accepted,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": stamp},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": stamp},
            ],
            "storedVersions": [v["name"] for v in obj["spec"]["versions"] if v.get("storage")],
        }

    def validate_update(
        self, ctx: StrategyContext, info: ResourceInfo, old: dict[str, Any], new: dict[str, Any], name: str
    ) -> None:
        _validate_crd(ctx, info, new, name, creating=False)
        for f in ("group", "scope"):
            if (old.get("spec") or {}).get(f) != (new.get("spec") or {}).get(f):
                raise invalid(info, name, [(f"spec.{f}", "FieldValueInvalid", "Invalid value: field is immutable")])
        if (old["spec"].get("names") or {}).get("plural") != (new["spec"].get("names") or {}).get("plural"):
            raise invalid(info, name, [("spec.names.plural", "FieldValueInvalid",
                                        "Invalid value: field is immutable")])

    def prepare_for_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        if "status" in old:
            new["status"] = dict(old["status"], acceptedNames=dict(new["spec"]["names"]))


def _validate_crd(ctx: StrategyContext, info: ResourceInfo, obj: dict[str, Any], name: str, *, creating: bool) -> None:
    spec = obj.get("spec")
    causes: list[tuple[str, str, str]] = []
    if not isinstance(spec, dict):
        raise invalid(info, name, [("spec", "FieldValueRequired", "Required value")])
    group = spec.get("group")
    names: dict[str, Any] = cast(dict[str, Any], spec.get("names")) if isinstance(spec.get("names"), dict) else {}
    if not group:
        causes.append(("spec.group", "FieldValueRequired", "Required value"))
    for f in ("plural", "kind"):
        if not names.get(f):
            causes.append((f"spec.names.{f}", "FieldValueRequired", "Required value"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(("spec.scope", "FieldValueNotSupported",
                       'Unsupported value: supported values: "Cluster", "Namespaced"'))
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        causes.append(("spec.versions", "FieldValueRequired", "Required value: must have at least one version"))
    else:
        storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
        if len(storage) != 1:
            causes.append(("spec.versions", "FieldValueInvalid",
                           "Invalid value: must have exactly one version marked as storage version"))
    if group and names.get("plural") and name != f"{names['plural']}.{group}":
        causes.append(("metadata.name", "FieldValueInvalid",
                       f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
    if causes:
        raise invalid(info, name, causes)
    if creating:
        assert group  # a missing group is one of the causes raised above
        key = (group, names["plural"])
        if ctx.served_elsewhere(key, name):
            raise invalid(info, name, [("spec.names.plural", "FieldValueInvalid",
                                        f'Invalid value: "{names["plural"]}": is already served by the server')])


def served_resource(crd: dict[str, Any]) -> ResourceInfo | None:
    """The resource a CRD serves (its storage version, else its first served one); None if none is served."""
    spec = crd["spec"]
    versions = [v for v in spec["versions"] if v.get("served", True)]
    if not versions:
        return None
    v = next((v for v in versions if v.get("storage")), versions[0])
    names = spec["names"]
    subres = frozenset(k for k in (v.get("subresources") or {}) if k in ("status", "scale"))
    openapi = (v.get("schema") or {}).get("openAPIV3Schema")
    info = ResourceInfo(
        spec["group"],
        v["name"],
        names["plural"],
        names["kind"],
        singular=names.get("singular") or names["kind"].lower(),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        subresources=subres,
        schema=openapi,
        printer_columns=v.get("additionalPrinterColumns") or [],
        custom=True,
        selectable_fields=tuple(
            str(f["jsonPath"]).lstrip(".") for f in v.get("selectableFields") or () if f.get("jsonPath")
        ),
    )
    if names.get("listKind"):
        info.list_kind = names["listKind"]
    return info


STRATEGIES: dict[tuple[str, str], Strategy] = {
    PODS: PodStrategy(),
    JOBS: JobStrategy(),
    NAMESPACES: NamespaceStrategy(),
    SERVICES: ServiceStrategy(),
    NODES: NodeStrategy(),
    EVENTS: EventStrategy(),
    CRDS: CRDStrategy(),
    MUTATING_WEBHOOKS: WebhookConfigurationStrategy(mutating=True),
    VALIDATING_WEBHOOKS: WebhookConfigurationStrategy(mutating=False),
}
_GENERIC = Strategy()
_CUSTOM = CustomResourceStrategy()


def strategy_for(info: ResourceInfo) -> Strategy:
    """The strategy of a served resource."""
    strategy = STRATEGIES.get(info.key)
    if strategy is not None:
        return strategy
    return _CUSTOM if info.custom else _GENERIC
