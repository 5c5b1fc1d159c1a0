"""The bad-input corpus: malformed and hostile queue objects, JobSets and annotations, as data.

Each :class:`Case` is applied through the API server (``runner.py``). Its last object is the bad
one; the objects before it are valid and must be accepted. The case says how it must end:

- ``rejected``: the API server answers 4xx and its error (message or ``details.causes[].field``)
  names ``field``. This is what the CRD schemas (and the API server's own metadata rules) can say.
- ``reported``: the object is accepted and the controller reports it where its owner looks: a
  JobSet's Workload (``status.reason`` = ``reason``, and ``InvalidSpec`` also means state
  ``Inadmissible``), or a queue object's condition ``Active`` False with ``reason``. The message
  must contain ``names`` (by default ``field``): what a schema cannot say, the controller says.

``emulated`` records where the sandbox's API server ends a case differently from the real
kube-apiserver (the reference), with ``note`` saying why; no other difference is allowed.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal

Outcome = Literal["rejected", "reported"]

NAMESPACE: Final = "badinput"
FLAVOR: Final = "bi-default"
CLUSTER_QUEUE: Final = "bi-cq"
LOCAL_QUEUE: Final = "bi-lq"
COHORT: Final = "bi-cohort"
API: Final = "gangq.io/v1alpha1"
QUOTA: Final = {"cpu": 64, "memory": "256Gi", "nvidia.com/gpu": 8}
MEGABYTE: Final = "x" * (1 << 20)
CEL_NOTE: Final = ("the sandbox does not evaluate CRD CEL rules (x-kubernetes-validations): the object "
                   "reaches the controller, which reports the same rule on the field")


@dataclass(frozen=True)
class Case:
    """One bad input (see the module docstring)."""

    name: str
    category: str
    objects: tuple[dict[str, Any], ...]
    field: str
    outcome: Outcome
    reason: str = "InvalidSpec"
    names: str | None = None
    watch: tuple[str, str] | None = None  # (kind, name) carrying the report, when not the bad object
    emulated: Outcome | None = None
    note: str = ""

    @property
    def subject(self) -> dict[str, Any]:
        return self.objects[-1]

    @property
    def expected_text(self) -> str:
        return self.names if self.names is not None else self.field

    def outcome_on(self, plane: str) -> Outcome:
        return self.emulated if plane == "emulated" and self.emulated is not None else self.outcome


@dataclass
class _Builder:
    cases: list[Case] = field(default_factory=list)

    def add(self, name: str, category: str, objects: list[dict[str, Any]], fld: str, outcome: Outcome,
            **kw: Any) -> None:
        self.cases.append(Case(name, category, tuple(objects), fld, outcome, **kw))


# --- object builders --------------------------------------------------------------------------


def base_objects() -> list[dict[str, Any]]:
    """The valid configuration every case uses: a namespace, a flavor, a ClusterQueue, a LocalQueue."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        resource_flavor(FLAVOR),
        cluster_queue(CLUSTER_QUEUE),
        local_queue(LOCAL_QUEUE, CLUSTER_QUEUE),
    ]


def resource_flavor(name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec or {}}


def quota(resources: dict[str, Any], flavor: str = FLAVOR) -> dict[str, Any]:
    return {"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in resources.items()]}


def groups(resources: dict[str, Any] | None = None, flavor: str = FLAVOR) -> list[dict[str, Any]]:
    res = resources or dict(QUOTA)
    return [{"coveredResources": list(res), "flavors": [quota(res, flavor)]}]


def cluster_queue(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"namespaceSelector": {}, "admissionMode": "QuotaOnly", "resourceGroups": groups()}
    body.update(spec)
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": body}


def cohort(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, cq: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"clusterQueue": cq, **spec}}


def priority_class(name: str, **body: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, **body}


def jobset(name: str, *, queue: str | None = LOCAL_QUEUE, replicas: Any = 2, parallelism: Any = 1,
           requests: dict[str, Any] | None = None, annotations: dict[str, str] | None = None,
           labels: dict[str, str] | None = None, suspend: Any = True) -> dict[str, Any]:
    """A small valid JobSet (``replicas`` Jobs of ``parallelism`` pods) to spoil one field of."""
    meta_labels = {"gangq.io/queue-name": queue} if queue else {}
    meta_labels.update(labels or {})
    container = {"name": "main", "image": "busybox",
                 "resources": {"requests": requests if requests is not None else {"cpu": "1"}}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": meta_labels,
                     "annotations": dict(annotations or {})},
        "spec": {"suspend": suspend, "replicatedJobs": [{
            "name": "worker", "replicas": replicas,
            "template": {"spec": {"parallelism": parallelism, "completions": parallelism, "template": {
                "metadata": {"annotations": {"sandbox.gangq.io/run-seconds": "0.5"}},
                "spec": {"restartPolicy": "Never", "containers": [container]}}}},
        }]},
    }


def pod_spec(js: dict[str, Any], index: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = js["spec"]["replicatedJobs"][index]["template"]["spec"]["template"]["spec"]
    return spec


def job_spec(js: dict[str, Any], index: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = js["spec"]["replicatedJobs"][index]["template"]["spec"]
    return spec


POD: Final = "spec.replicatedJobs[0].template.spec.template.spec"
JOB: Final = "spec.replicatedJobs[0].template.spec"


def _edited(js: dict[str, Any], where: str, key: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(js)
    target = {"pod": pod_spec, "job": job_spec}[where](out)
    target[key] = value
    return out


# --- the cases --------------------------------------------------------------------------------


def _flavors(b: _Builder) -> None:
    cat = "ResourceFlavor"
    rejected = {
        "rf-taint-effect": ({"nodeTaints": [{"key": "k", "effect": "Sometimes"}]}, "spec.nodeTaints[0].effect"),
        "rf-taint-no-key": ({"nodeTaints": [{"value": "v", "effect": "NoSchedule"}]}, "spec.nodeTaints[0].key"),
        "rf-taint-no-effect": ({"nodeTaints": [{"key": "k"}]}, "spec.nodeTaints[0].effect"),
        "rf-tol-operator": ({"tolerations": [{"key": "k", "operator": "Maybe"}]}, "spec.tolerations[0].operator"),
        "rf-tol-effect": ({"tolerations": [{"key": "k", "effect": "Never"}]}, "spec.tolerations[0].effect"),
        "rf-tol-seconds": ({"tolerations": [{"key": "k", "tolerationSeconds": "soon"}]},
                           "spec.tolerations[0].tolerationSeconds"),
        "rf-nine-labels": ({"nodeLabels": {f"k{i}": "v" for i in range(9)}}, "spec.nodeLabels"),
        "rf-label-not-string": ({"nodeLabels": {"zone": 5}}, "spec.nodeLabels.zone"),
        "rf-label-megabyte": ({"nodeLabels": {"zone": MEGABYTE}}, "spec.nodeLabels.zone"),
        "rf-label-bad-value": ({"nodeLabels": {"zone": "a b/c"}}, "spec.nodeLabels.zone"),
        "rf-nine-taints": ({"nodeTaints": [{"key": f"k{i}", "effect": "NoSchedule"} for i in range(9)]},
                           "spec.nodeTaints"),
        "rf-taints-not-list": ({"nodeTaints": "gpu=true:NoSchedule"}, "spec.nodeTaints"),
    }
    for name, (spec, fld) in rejected.items():
        b.add(name, cat, [resource_flavor(name, spec)], fld, "rejected")
    b.add("rf-spec-string", cat, [{**resource_flavor("rf-spec-string"), "spec": "gpu"}], "spec", "rejected")
    b.add("rf-name-invalid", cat, [resource_flavor("Bad_Flavor")], "metadata.name", "rejected")
    reported = {
        "rf-tol-exists-value": ({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
                                "spec.tolerations[0].value"),
        "rf-tol-empty-key": ({"tolerations": [{"operator": "Equal", "value": "v"}]}, "spec.tolerations[0]"),
    }
    for name, (spec, fld) in reported.items():
        cq = cluster_queue(f"{name}-cq", resourceGroups=groups(flavor=name))
        b.add(name, cat, [cq, resource_flavor(name, spec)], fld, "reported", reason="FlavorNotFound",
              watch=("ClusterQueue", f"{name}-cq"))


QUOTA_FIELDS: Final = ("nominalQuota", "borrowingLimit", "lendingLimit")
BAD_QUANTITIES: Final[dict[str, tuple[Any, Outcome]]] = {
    "garbage": ("abc", "rejected"),          # not a quantity: the schema's pattern
    "suffix": ("12XYZ", "rejected"),         # unknown suffix: the pattern
    "bool": (True, "rejected"),              # neither integer nor string
    "negative": ("-1", "reported"),          # a valid quantity, but no quota is negative
    "huge": ("1e30", "reported"),            # beyond a 64-bit integer
    "hostile": ("1e999999999", "reported"),  # a billion-digit number: must not hang the controller
}


def _quota_variants(b: _Builder) -> None:
    """Every quota field of a ClusterQueue and of a Cohort × every kind of bad quantity."""
    for kind in ("ClusterQueue", "Cohort"):
        for fld in QUOTA_FIELDS:
            for label, (value, outcome) in BAD_QUANTITIES.items():
                name = f"{'cq' if kind == 'ClusterQueue' else 'co'}-{fld.lower()}-{label}"
                res: dict[str, Any] = {"name": "cpu", "nominalQuota": 8}
                res[fld] = value
                rgs = [{"coveredResources": ["cpu"], "flavors": [{"name": FLAVOR, "resources": [res]}]}]
                obj = (cluster_queue(name, resourceGroups=rgs, cohortName=COHORT) if kind == "ClusterQueue"
                       else cohort(name, parentName=COHORT, resourceGroups=rgs))
                path = f"spec.resourceGroups[0].flavors[0].resources[0].{fld}"
                b.add(name, kind, [obj], path, outcome)


def _cluster_queues(b: _Builder) -> None:
    cat = "ClusterQueue"
    two = {"cpu": 8, "memory": "16Gi"}
    dup_flavor = {"coveredResources": ["cpu"], "flavors": [quota({"cpu": 8}), quota({"cpu": 4})]}
    rejected: dict[str, tuple[dict[str, Any], str]] = {
        "cq-strategy": ({"queueingStrategy": "Random"}, "spec.queueingStrategy"),
        "cq-admission-mode": ({"admissionMode": "Whatever"}, "spec.admissionMode"),
        "cq-stop-policy": ({"stopPolicy": "Pause"}, "spec.stopPolicy"),
        "cq-within-cq": ({"preemption": {"withinClusterQueue": "Always"}}, "spec.preemption.withinClusterQueue"),
        "cq-reclaim": ({"preemption": {"reclaimWithinCohort": "Some"}}, "spec.preemption.reclaimWithinCohort"),
        "cq-borrow-policy": ({"preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "Any"}}},
                             "spec.preemption.borrowWithinCohort.policy"),
        "cq-max-prio-string": ({"preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": {
            "policy": "LowerPriority", "maxPriorityThreshold": "high"}}},
            "spec.preemption.borrowWithinCohort.maxPriorityThreshold"),
        "cq-fungibility": ({"flavorFungibility": {"whenCanBorrow": "Steal"}}, "spec.flavorFungibility.whenCanBorrow"),
        "cq-cohort-name": ({"cohortName": "Not_A_Name"}, "spec.cohortName"),
        "cq-cohort-long": ({"cohortName": "c" * 64}, "spec.cohortName"),
        "cq-ns-operator": ({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Like"}]}},
                           "spec.namespaceSelector.matchExpressions[0].operator"),
        "cq-groups-17": ({"resourceGroups": [{"coveredResources": [f"r{i}"], "flavors": [quota({f"r{i}": 1})]}
                                             for i in range(17)]}, "spec.resourceGroups"),
        "cq-covered-empty": ({"resourceGroups": [{"coveredResources": [], "flavors": [quota({"cpu": 1})]}]},
                             "spec.resourceGroups[0].coveredResources"),
        "cq-flavors-empty": ({"resourceGroups": [{"coveredResources": ["cpu"], "flavors": []}]},
                             "spec.resourceGroups[0].flavors"),
        "cq-flavor-twice": ({"resourceGroups": [dup_flavor]}, "spec.resourceGroups[0].flavors[1]"),
        "cq-resource-twice": ({"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{
            "name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": 1}, {"name": "cpu", "nominalQuota": 2}]}]}]},
            "spec.resourceGroups[0].flavors[0].resources[1]"),
        "cq-no-nominal": ({"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{
            "name": FLAVOR, "resources": [{"name": "cpu"}]}]}]},
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"),
        "cq-flavor-name": ({"resourceGroups": groups({"cpu": 1}, flavor="Bad_Flavor")},
                           "spec.resourceGroups[0].flavors[0].name"),
        "cq-groups-string": ({"resourceGroups": "cpu=8"}, "spec.resourceGroups"),
        "cq-weight-garbage": ({"fairSharing": {"weight": "heavy"}}, "spec.fairSharing.weight"),
    }
    for name, (spec, fld) in rejected.items():
        b.add(name, cat, [cluster_queue(name, **spec)], fld, "rejected")
    b.add("cq-borrow-no-reclaim", cat, [cluster_queue("cq-borrow-no-reclaim", cohortName=COHORT, preemption={
        "reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}})],
        "spec.preemption", "rejected", emulated="reported", note=CEL_NOTE)
    b.add("cq-name-invalid", cat, [cluster_queue("Bad_Queue")], "metadata.name", "rejected")
    b.add("cq-label-megabyte", cat, [_with_meta(cluster_queue("cq-label-megabyte"), labels={"big": MEGABYTE})],
          "metadata.labels", "rejected")
    b.add("cq-annotations-300k", cat, [_with_meta(cluster_queue("cq-annotations-300k"),
                                                  annotations={"a": "x" * 150_000, "b": "y" * 150_000})],
          "metadata.annotations", "rejected")
    reported: dict[str, tuple[dict[str, Any], str]] = {
        "cq-borrowing-no-cohort": ({"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{
            "name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": 8, "borrowingLimit": 4}]}]}]},
            "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit"),
        "cq-lending-no-cohort": ({"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{
            "name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": 8, "lendingLimit": 4}]}]}]},
            "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit"),
        "cq-flavor-two-groups": ({"resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [quota({"cpu": 8})]},
            {"coveredResources": ["memory"], "flavors": [quota({"memory": "8Gi"})]}]},
            "spec.resourceGroups[1].flavors[0].name"),
        "cq-resource-two-groups": ({"resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [quota({"cpu": 8})]},
            {"coveredResources": ["cpu"], "flavors": [quota({"cpu": 8}, flavor="bi-other")]}]},
            "spec.resourceGroups[1].coveredResources"),
        "cq-resources-mismatch": ({"resourceGroups": [{"coveredResources": ["cpu", "memory"],
                                                       "flavors": [quota({"memory": "8Gi", "cpu": 8})]}]},
                                  "spec.resourceGroups[0].flavors[0].resources"),
        "cq-resources-missing": ({"resourceGroups": [{"coveredResources": list(two), "flavors": [quota({"cpu": 8})]}]},
                                 "spec.resourceGroups[0].flavors[0].resources"),
        "cq-ns-in-no-values": ({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In"}]}},
                               "spec.namespaceSelector.matchExpressions[0]"),
        "cq-ns-exists-values": ({"namespaceSelector": {"matchExpressions": [
            {"key": "team", "operator": "Exists", "values": ["a"]}]}}, "spec.namespaceSelector.matchExpressions[0]"),
        "cq-weight-negative": ({"fairSharing": {"weight": "-1"}}, "spec.fairSharing.weight"),
        "cq-weight-huge": ({"fairSharing": {"weight": "1e999999999"}}, "spec.fairSharing.weight"),
    }
    for name, (spec, fld) in reported.items():
        b.add(name, cat, [cluster_queue(name, **spec)], fld, "reported")
    b.add("cq-unknown-flavor", cat, [cluster_queue("cq-unknown-flavor", resourceGroups=groups(flavor="bi-nowhere"))],
          "spec.resourceGroups[0].flavors[0].name", "reported", reason="FlavorNotFound", names="'bi-nowhere'")


def _with_meta(obj: dict[str, Any], **meta: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].update(meta)
    return out


def _cohorts(b: _Builder) -> None:
    cat = "Cohort"
    b.add("co-parent-pattern", cat, [cohort("co-parent-pattern", parentName="Up_There")], "spec.parentName",
          "rejected")
    b.add("co-parent-empty", cat, [cohort("co-parent-empty", parentName="")], "spec.parentName", "rejected")
    b.add("co-parent-long", cat, [cohort("co-parent-long", parentName="p" * 64)], "spec.parentName", "rejected")
    b.add("co-groups-string", cat, [cohort("co-groups-string", resourceGroups={"cpu": 8})], "spec.resourceGroups",
          "rejected")
    b.add("co-self-parent", cat, [cohort("co-self-parent", parentName="co-self-parent")], "spec.parentName",
          "reported")
    b.add("co-cycle-2", cat, [cohort("co-cycle-2a", parentName="co-cycle-2b"),
                              cohort("co-cycle-2b", parentName="co-cycle-2a")], "spec.parentName", "reported")
    b.add("co-cycle-3", cat, [cohort("co-cycle-3a", parentName="co-cycle-3b"),
                              cohort("co-cycle-3b", parentName="co-cycle-3c"),
                              cohort("co-cycle-3c", parentName="co-cycle-3a")], "spec.parentName", "reported")
    b.add("co-borrowing-no-parent", cat, [cohort("co-borrowing-no-parent", resourceGroups=[
        {"coveredResources": ["cpu"], "flavors": [{"name": FLAVOR, "resources": [
            {"name": "cpu", "nominalQuota": 8, "borrowingLimit": 2}]}]}])],
        "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit", "reported")
    b.add("co-flavor-two-groups", cat, [cohort("co-flavor-two-groups", resourceGroups=[
        {"coveredResources": ["cpu"], "flavors": [quota({"cpu": 8})]},
        {"coveredResources": ["memory"], "flavors": [quota({"memory": "8Gi"})]}])],
        "spec.resourceGroups[1].flavors[0].name", "reported")
    b.add("co-weight-negative", cat, [cohort("co-weight-negative", fairSharing={"weight": "-2"})],
          "spec.fairSharing.weight", "reported")


def _local_queues(b: _Builder) -> None:
    cat = "LocalQueue"
    no_cq = local_queue("lq-no-cq", CLUSTER_QUEUE)
    del no_cq["spec"]["clusterQueue"]
    b.add("lq-no-cq", cat, [no_cq], "spec.clusterQueue", "rejected")
    b.add("lq-cq-pattern", cat, [local_queue("lq-cq-pattern", "Bad_Queue")], "spec.clusterQueue", "rejected")
    b.add("lq-stop-policy", cat, [local_queue("lq-stop-policy", CLUSTER_QUEUE, stopPolicy="Later")],
          "spec.stopPolicy", "rejected")
    b.add("lq-weight", cat, [local_queue("lq-weight", CLUSTER_QUEUE, fairSharing={"weight": "lots"})],
          "spec.fairSharing.weight", "rejected")
    long_name = local_queue("l" * 254, CLUSTER_QUEUE)
    b.add("lq-name-long", cat, [long_name], "metadata.name", "rejected")
    b.add("lq-cq-missing", cat, [local_queue("lq-cq-missing", "bi-no-such-cq")], "spec.clusterQueue", "reported",
          reason="ClusterQueueDoesNotExist", names="bi-no-such-cq")


def _priority_classes(b: _Builder) -> None:
    cat = "WorkloadPriorityClass"
    b.add("wpc-no-value", cat, [priority_class("wpc-no-value", description="none")], "value", "rejected")
    for name, value in {"wpc-string": "high", "wpc-float": 1.5, "wpc-too-high": 2**31, "wpc-too-low": -(2**31) - 1,
                        "wpc-over-max": 1_000_000_001}.items():
        b.add(name, cat, [priority_class(name, value=value)], "value", "rejected")


MIN_MEMBER: Final = "gangq.io/min-member"
MIN_RESOURCES: Final = "gangq.io/min-resources"
RUNTIME_LIMIT: Final = "gangq.io/runtime-limit"


def _annotations(b: _Builder) -> None:
    cat = "annotation"
    variants = {
        MIN_MEMBER: {"neg": "-1", "zero": "0", "abc": "abc", "empty": "", "float": "1.5", "over": "3",
                     "plus": "+1", "hex": "0x2", "huge": "9" * 30, "digits": "9" * 5000},
        MIN_RESOURCES: {"abc": "abc", "garbage": "cpu=abc", "neg": "cpu=-1", "huge": "cpu=1e30",
                        "hostile": "nvidia.com/gpu=1e999999999", "noname": "=1", "twice": "cpu=1,cpu=2",
                        "novalue": "cpu=", "empty": "", "comma": "cpu=1,", "badname": "bad name!=1"},
        RUNTIME_LIMIT: {"abc": "abc", "neg": "-5", "zero": "0", "unit": "5x", "empty": "", "nan": "nan",
                        "inf": "inf", "hostile": "1e999999999", "centuries": "99999999999999999999999h",
                        "mixed": "1h-5m"},
    }
    short = {MIN_MEMBER: "mm", MIN_RESOURCES: "mr", RUNTIME_LIMIT: "rl"}
    for key, values in variants.items():
        for label, value in values.items():
            name = f"js-{short[key]}-{label}"
            b.add(name, cat, [jobset(name, annotations={key: value})], f"metadata.annotations[{key}]", "reported")
    b.add("js-mm-unsuspended", cat, [jobset("js-mm-unsuspended", annotations={MIN_MEMBER: "-1"}, suspend=False)],
          f"metadata.annotations[{MIN_MEMBER}]", "reported")
    b.add("js-mm-megabyte", cat, [jobset("js-mm-megabyte", annotations={MIN_MEMBER: "1" * (1 << 20)})],
          "metadata.annotations", "rejected")
    b.add("js-label-megabyte", cat, [jobset("js-label-megabyte", labels={"note": MEGABYTE})], "metadata.labels",
          "rejected")
    b.add("js-queue-long", cat, [jobset("js-queue-long", queue="q" * 64)], "metadata.labels", "rejected")
    b.add("js-queue-nowhere", cat, [jobset("js-queue-nowhere", queue="bi-nowhere")],
          "metadata.labels[gangq.io/queue-name]", "reported", reason="LocalQueueNotFound",
          names=f"LocalQueue {NAMESPACE}/bi-nowhere")
    b.add("js-priority-unknown", cat, [jobset("js-priority-unknown", labels={"gangq.io/priority-class": "bi-vip"})],
          "metadata.labels[gangq.io/priority-class]", "reported")
    b.add("js-kueue-priority-unknown", cat, [jobset("js-kueue-priority-unknown",
                                                    labels={"kueue.x-k8s.io/priority-class": "bi-vip"})],
          "metadata.labels[kueue.x-k8s.io/priority-class]", "reported")


def _jobsets(b: _Builder) -> None:
    cat = "JobSet"
    ok = jobset("template")

    def named(name: str, js: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(js)
        out["metadata"]["name"] = name
        return out

    def spec_edit(name: str, **spec: Any) -> dict[str, Any]:
        out = named(name, ok)
        out["spec"].update(spec)
        return out

    reported: dict[str, tuple[dict[str, Any], str]] = {
        "js-no-rjobs": (spec_edit("js-no-rjobs", replicatedJobs=[]), "spec.replicatedJobs"),
        "js-zero-pods": (jobset("js-zero-pods", replicas=0), "spec.replicatedJobs"),
        "js-parallelism-neg": (named("js-parallelism-neg", _edited(ok, "job", "parallelism", -1)),
                               f"{JOB}.parallelism"),
        "js-completions-neg": (named("js-completions-neg", _edited(ok, "job", "completions", -3)),
                               f"{JOB}.completions"),
        "js-no-completions": (named("js-no-completions", _without(ok, "completions")), f"{JOB}.completions"),
        "js-pod-no-spec": (named("js-pod-no-spec", _pod_template(ok, {"metadata": {}})), POD),
        "js-no-containers": (named("js-no-containers", _edited(ok, "pod", "containers", [])), f"{POD}.containers"),
        "js-priority-class-name": (named("js-priority-class-name", _edited(ok, "pod", "priorityClassName", "bi-vip")),
                                   f"{POD}.priorityClassName"),
        "js-node-selector-int": (named("js-node-selector-int", _edited(ok, "pod", "nodeSelector", {"zone": 5})),
                                 f"{POD}.nodeSelector"),
        "js-toleration-op": (named("js-toleration-op", _edited(ok, "pod", "tolerations", [{"key": "k",
                                                                                           "operator": "Maybe"}])),
                             f"{POD}.tolerations[0]"),
        "js-toleration-empty-key": (named("js-toleration-empty-key", _edited(ok, "pod", "tolerations", [
            {"operator": "Equal", "value": "v"}])), f"{POD}.tolerations[0]"),
        "js-affinity-op": (named("js-affinity-op", _edited(ok, "pod", "affinity", _affinity("Near", ["a"]))),
                           f"{POD}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
        "js-affinity-gt": (named("js-affinity-gt", _edited(ok, "pod", "affinity", _affinity("Gt", ["many"]))),
                           f"{POD}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
        "js-overhead": (named("js-overhead", _edited(ok, "pod", "overhead", {"cpu": "lots"})), f"{POD}.overhead"),
        "js-containers-string": (named("js-containers-string", _edited(ok, "pod", "containers", "main")),
                                 f"{POD}.containers"),
    }
    for name, (obj, fld) in reported.items():
        b.add(name, cat, [obj], fld, "reported")
    for res in ("cpu", "memory", "nvidia.com/gpu"):
        for label, value in {"neg": "-1", "garbage": "eight", "huge": "1e30", "hostile": "1e999999999"}.items():
            name = f"js-req-{res.split('/')[-1]}-{label}"
            b.add(name, cat, [jobset(name, requests={res: value})],
                  f"{POD}.containers[0].resources.requests[{res}]", "reported")
    init = named("js-init-neg", ok)
    pod_spec(init)["initContainers"] = [{"name": "init", "image": "busybox",
                                         "resources": {"limits": {"cpu": "-2"}}}]
    b.add("js-init-neg", cat, [init], f"{POD}.initContainers[0].resources.limits[cpu]", "reported")
    b.add("js-10000-replicas", cat, [jobset("js-10000-replicas", replicas=10_000)], "spec.replicatedJobs[0].replicas",
          "reported", reason="NeverFits", names="cpu")
    b.add("js-gpus-never-fit", cat, [jobset("js-gpus-never-fit", requests={"nvidia.com/gpu": "16"})],
          f"{POD}.containers[0].resources.requests[nvidia.com/gpu]", "reported", reason="NeverFits",
          names="nvidia.com/gpu")
    rejected: dict[str, tuple[dict[str, Any], str]] = {
        "js-replicas-neg": (jobset("js-replicas-neg", replicas=-1), "spec.replicatedJobs[0].replicas"),
        "js-replicas-string": (jobset("js-replicas-string", replicas="many"), "spec.replicatedJobs[0].replicas"),
        "js-parallelism-string": (jobset("js-parallelism-string", parallelism="4"), f"{JOB}.parallelism"),
        "js-success-policy": (spec_edit("js-success-policy", successPolicy={"operator": "Most"}),
                              "spec.successPolicy.operator"),
        "js-failure-action": (spec_edit("js-failure-action", failurePolicy={"rules": [{"action": "Panic"}]}),
                              "spec.failurePolicy.rules[0].action"),
        "js-max-restarts-neg": (spec_edit("js-max-restarts-neg", failurePolicy={"maxRestarts": -1}),
                                "spec.failurePolicy.maxRestarts"),
        "js-startup-policy": (spec_edit("js-startup-policy", startupPolicy={"startupPolicyOrder": "Random"}),
                              "spec.startupPolicy.startupPolicyOrder"),
        "js-completion-mode": (named("js-completion-mode", _edited(ok, "job", "completionMode", "Sometimes")),
                               f"{JOB}.completionMode"),
        "js-deadline-string": (named("js-deadline-string", _edited(ok, "job", "activeDeadlineSeconds", "1h")),
                               f"{JOB}.activeDeadlineSeconds"),
        "js-suspend-string": (spec_edit("js-suspend-string", suspend="yes"), "spec.suspend"),
        "js-rjobs-string": (spec_edit("js-rjobs-string", replicatedJobs="worker"), "spec.replicatedJobs"),
        "js-rjob-no-template": (spec_edit("js-rjob-no-template", replicatedJobs=[{"name": "worker"}]),
                                "spec.replicatedJobs[0].template"),
        "js-name-long": (named("j" * 254, ok), "metadata.name"),
        "js-name-invalid": (named("Bad_JobSet", ok), "metadata.name"),
    }
    two = named("js-rjob-twice", ok)
    two["spec"]["replicatedJobs"].append(copy.deepcopy(two["spec"]["replicatedJobs"][0]))
    rejected["js-rjob-twice"] = (two, "spec.replicatedJobs[1]")
    for name, (obj, fld) in rejected.items():
        b.add(name, cat, [obj], fld, "rejected")


def _without(js: dict[str, Any], key: str) -> dict[str, Any]:
    out = copy.deepcopy(js)
    del job_spec(out)[key]
    return out


def _pod_template(js: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(js)
    out["spec"]["replicatedJobs"][0]["template"]["spec"]["template"] = template
    return out


def _affinity(operator: str, values: list[str]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": operator, "values": values}]}]}}}


def cases() -> list[Case]:
    """The whole corpus, in the order it is applied."""
    b = _Builder()
    for add in (_flavors, _cluster_queues, _quota_variants, _cohorts, _local_queues, _priority_classes,
                _annotations, _jobsets):
        add(b)
    return b.cases


def categories(corpus: list[Case]) -> Iterator[str]:
    """The categories in corpus order, each once."""
    seen: dict[str, None] = {}
    for case in corpus:
        seen.setdefault(case.category, None)
    yield from seen
