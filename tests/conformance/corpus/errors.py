"""Error answers: 404, 409 (AlreadyExists, Conflict), 422 (Invalid names and metadata, schema
violations of the CRDs), 400 and 405, and the preconditions of a delete."""

from __future__ import annotations

from typing import Any

from tests.conformance.corpus.objects import BY_NAME, MERGE, configmap, create, delete, patch, secret
from tests.conformance.model import Case, Edit, Req

CM = BY_NAME["configmap"]
NSK = BY_NAME["namespace"]
CQ = BY_NAME["clusterqueue"]
LQ = BY_NAME["localqueue"]
WL = BY_NAME["workload"]
JS = BY_NAME["jobset"]
COHORT = BY_NAME["cohort"]
WPC = BY_NAME["workloadpriorityclass"]
POD = BY_NAME["pod"]


def _cm_named(name: str) -> Req:
    return Req("POST", CM.collection, configmap(name))


def _cm_meta(**metadata: Any) -> Req:
    return Req("POST", CM.collection, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata})


def _workload(**spec: Any) -> Req:
    body = WL.body("a")
    body["spec"] = {**body["spec"], **spec}
    return Req("POST", WL.collection, {**body, "spec": {k: v for k, v in body["spec"].items() if v is not None}})


def _cq(**spec: Any) -> Req:
    body = CQ.body("a")
    body["spec"] = {**body["spec"], **spec}
    return Req("POST", CQ.collection, body)


NAMES = [
    Case("invalid/name-uppercase", (), _cm_named("Bad")),
    Case("invalid/name-underscore", (), _cm_named("a_b")),
    Case("invalid/name-too-long", (), _cm_named("a" * 254)),
    Case("invalid/name-dots-allowed", (), _cm_named("a.b.c")),
    Case("invalid/name-missing", (), _cm_meta()),
    Case("invalid/generate-name-invalid", (), _cm_meta(generateName="Bad-")),
    Case("invalid/namespace-name-with-dot", (), Req("POST", NSK.collection, {"metadata": {"name": "{ns}.x"}})),
    Case("invalid/namespace-name-too-long", (), Req("POST", NSK.collection, {"metadata": {"name": "{ns}" + "x" * 60}})),
    Case("invalid/custom-name", (), Req("POST", CQ.collection, {**CQ.body("a"), "metadata": {"name": "Bad_Name"}})),
    Case("invalid/label-value", (), _cm_meta(name="a", labels={"k": "bad value"})),
    Case("invalid/label-key", (), _cm_meta(name="a", labels={"-bad": "v"})),
    Case("invalid/annotation-key", (), _cm_meta(name="a", annotations={"a/b/c": "v"})),
    Case("invalid/finalizer-name", (), _cm_meta(name="a", finalizers=["no-slash"])),
    Case(
        "invalid/owner-reference-without-uid",
        (),
        _cm_meta(name="a", ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "o"}]),
    ),
    Case("invalid/configmap-key", (), Req("POST", CM.collection, configmap("a", {"bad key": "v"}))),
    Case(
        "invalid/secret-type-immutable",
        (create(BY_NAME["secret"], "a"),),
        patch(BY_NAME["secret"], "a", {"type": "kubernetes.io/tls"}),
    ),
    Case(
        "invalid/pod-no-containers",
        (),
        Req("POST", POD.collection, {"metadata": {"name": "a"}, "spec": {"containers": []}}),
    ),
    Case("invalid/pod-spec-immutable", (create(POD, "a"),), patch(POD, "a", {"spec": {"restartPolicy": "Never"}})),
]

SCHEMA = [
    Case("schema/workload-missing-queue-name", (), _workload(queueName=None)),
    Case("schema/workload-empty-pod-sets", (), _workload(podSets=[])),
    Case("schema/workload-min-member-zero", (), _workload(minMember=0)),
    Case("schema/workload-wrong-type", (), _workload(priority="high")),
    Case("schema/workload-bad-quantity", (), _workload(minResources={"cpu": "lots"})),
    Case("schema/workload-queue-name-pattern", (), _workload(queueName="Not_A_Name")),
    Case("schema/workload-pod-set-missing-count", (), _workload(podSets=[{"name": "main"}])),
    Case(
        "schema/workload-pod-sets-immutable",
        (create(WL, "a"),),
        patch(WL, "a", {"spec": {"podSets": [{"name": "main", "count": 5}]}}),
    ),
    Case(
        "schema/workload-duplicate-map-keys",
        (),
        _workload(podSets=[{"name": "a", "count": 1}, {"name": "a", "count": 2}]),
    ),
    Case("schema/workload-several-violations", (), _workload(queueName=None, minMember=0, priority="x")),
    Case("schema/cluster-queue-enum", (), _cq(queueingStrategy="Random")),
    Case(
        "schema/cluster-queue-quantity",
        (),
        _cq(
            resourceGroups=[
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "eight"}]}],
                }
            ]
        ),
    ),
    Case(
        "schema/cluster-queue-cel-preemption",
        (),
        _cq(preemption={"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}}),
    ),
    Case("schema/local-queue-cel-immutable", (create(LQ, "a"),), patch(LQ, "a", {"spec": {"clusterQueue": "other"}})),
    Case("schema/local-queue-missing-cluster-queue", (), Req("POST", LQ.collection, {**LQ.body("a"), "spec": {}})),
    Case(
        "schema/cohort-empty-parent",
        (),
        Req("POST", COHORT.collection, {**COHORT.body("a"), "spec": {"parentName": ""}}),
    ),
    Case(
        "schema/priority-class-missing-value",
        (),
        Req("POST", WPC.collection, {k: v for k, v in WPC.body("a").items() if k != "value"}),
    ),
    Case(
        "schema/jobset-replicas-negative",
        (),
        Req(
            "POST",
            JS.collection,
            {
                **JS.body("a"),
                "spec": {"replicatedJobs": [{"name": "w", "replicas": -1, "template": {"spec": {"template": {}}}}]},
            },
        ),
    ),
    Case("schema/spec-not-an-object", (), Req("POST", CQ.collection, {**CQ.body("a"), "spec": "nope"})),
]

ERRORS = [
    Case(
        "error/create-in-missing-namespace",
        (),
        Req("POST", "/api/v1/namespaces/{ns}-nowhere/configmaps", configmap("a")),
    ),
    Case(
        "error/custom-create-in-missing-namespace",
        (),
        Req("POST", "/apis/gangq.io/v1alpha1/namespaces/{ns}-nowhere/workloads", WL.body("a")),
    ),
    Case("error/kind-mismatch", (), Req("POST", CM.collection, secret("a"))),
    Case("error/api-version-mismatch", (), Req("POST", CM.collection, {**configmap("a"), "apiVersion": "v2"})),
    Case("error/namespace-mismatch", (), Req("POST", CM.collection, configmap("a", namespace="other"))),
    Case("error/put-name-mismatch", (create(CM, "a", save={"obj": ""}),), Req("PUT", CM.path("b"), Edit("obj", {}))),
    Case("error/malformed-json", (), Req("POST", CM.collection, "{not json")),
    Case("error/body-not-an-object", (), Req("POST", CM.collection, [1, 2])),
    Case("error/put-on-collection", (), Req("PUT", CM.collection, configmap("a"))),
    Case("error/post-on-object", (create(CM, "a"),), Req("POST", CM.path("a"), configmap("a"))),
    Case(
        "error/put-without-resource-version", (create(CM, "a"),), Req("PUT", CM.path("a"), configmap("a", {"x": "1"}))
    ),
    Case("error/custom-put-without-resource-version", (create(WL, "a"),), Req("PUT", WL.path("a"), WL.body("a"))),
    Case(
        "error/put-stale-in-body",
        (create(CM, "a"),),
        Req("PUT", CM.path("a"), configmap("a", {"x": "1"}, resourceVersion="1")),
    ),
    Case(
        "error/delete-precondition-uid",
        (create(CM, "a"),),
        delete(CM, "a", {"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}),
    ),
    Case(
        "error/delete-precondition-resource-version",
        (create(CM, "a"),),
        delete(CM, "a", {"preconditions": {"resourceVersion": "1"}}),
    ),
    Case(
        "error/delete-precondition-met",
        (create(CM, "a", save={"uid": "metadata.uid"}),),
        delete(CM, "a", {"preconditions": {"uid": "{uid}"}}),
    ),
    Case("error/unknown-field-kept-or-dropped", (), Req("POST", CM.collection, {**configmap("a"), "unknownTop": "x"})),
    Case(
        "error/strict-unknown-field",
        (),
        Req("POST", CM.collection + "?fieldValidation=Strict", {**configmap("a"), "unknownTop": "x"}),
    ),
    Case(
        "error/strict-unknown-field-custom",
        (),
        Req(
            "POST",
            CQ.collection + "?fieldValidation=Strict",
            {**CQ.body("a"), "spec": {**CQ.body("a")["spec"], "bogus": 1}},
        ),
    ),
    Case("error/bad-field-validation-value", (), Req("POST", CM.collection + "?fieldValidation=Loud", configmap("a"))),
    Case("error/dry-run-create", (), Req("POST", CM.collection + "?dryRun=All", configmap("a"))),
    Case("error/dry-run-bad-value", (), Req("POST", CM.collection + "?dryRun=Some", configmap("a"))),
    Case(
        "error/merge-patch-stale",
        (create(CM, "a"),),
        patch(CM, "a", {"metadata": {"resourceVersion": "2"}, "data": {"x": "1"}}, MERGE),
    ),
    Case(
        "error/namespace-terminating",
        (
            Req(
                "POST",
                NSK.collection,
                {**NSK.body("t"), "metadata": {**NSK.body("t")["metadata"], "finalizers": ["example.com/hold"]}},
            ),
            delete(NSK, "t"),
        ),
        Req("POST", "/api/v1/namespaces/{ns}-t/configmaps", configmap("a")),
    ),
]

CASES: list[Case] = [*NAMES, *SCHEMA, *ERRORS]
