"""What a CRD's structural schema does to an object besides validating it: pruning of unknown
fields, fields that keep what is unknown, and defaults."""

from __future__ import annotations

from typing import Any

from tests.conformance.corpus.objects import BY_NAME, MERGE, create, get, patch
from tests.conformance.model import Case, Req

CQ = BY_NAME["clusterqueue"]
LQ = BY_NAME["localqueue"]
WL = BY_NAME["workload"]
JS = BY_NAME["jobset"]
WPC = BY_NAME["workloadpriorityclass"]


def _with(kind_name: str, **top: Any) -> Req:
    kind = BY_NAME[kind_name]
    return Req("POST", kind.collection, {**kind.body("a"), **top})


def _spec(kind_name: str, **spec: Any) -> Req:
    kind = BY_NAME[kind_name]
    body = kind.body("a")
    return Req("POST", kind.collection, {**body, "spec": {**body["spec"], **spec}})


_JOB_TEMPLATE = {"spec": {"template": {"spec": {"containers": [{"name": "m", "image": "busybox"}]}}}}

CASES: list[Case] = [
    Case("prune/unknown-spec-field", (), _spec("clusterqueue", bogus={"x": 1})),
    Case("prune/unknown-top-level-field", (), _with("workload", extra="x")),
    Case(
        "prune/unknown-nested-in-list-item", (), _spec("workload", podSets=[{"name": "main", "count": 1, "bogus": 2}])
    ),
    Case("prune/unknown-metadata-field", (), _with("localqueue", metadata={"name": "a", "bogus": "x"})),
    Case("prune/on-update", (create(CQ, "a"),), patch(CQ, "a", {"spec": {"bogus": 1}})),
    Case(
        "prune/preserve-unknown-fields-kept",
        (),
        _spec(
            "jobset",
            replicatedJobs=[
                {
                    "name": "w",
                    "template": {
                        "metadata": {"anything": {"goes": 1}},
                        "spec": {"template": {"spec": {"extra": True}}, "extraJobField": 3},
                    },
                }
            ],
        ),
    ),
    Case("prune/status-on-create-dropped", (), _with("workload", status={"state": "Admitted"})),
    Case(
        "prune/strict-reports-unknown",
        (),
        Req("POST", WL.collection + "?fieldValidation=Strict", {**WL.body("a"), "extra": "x"}),
    ),
    Case(
        "prune/ignore-drops-unknown",
        (),
        Req("POST", WL.collection + "?fieldValidation=Ignore", {**WL.body("a"), "extra": "x"}),
    ),
    Case(
        "prune/warn-drops-unknown",
        (),
        Req("POST", WL.collection + "?fieldValidation=Warn", {**WL.body("a"), "extra": "x"}),
    ),
    Case("default/cluster-queue-strategy", (), create(CQ, "a")),
    Case("default/local-queue-stop-policy", (), create(LQ, "a")),
    Case(
        "default/jobset-replicas-and-group",
        (),
        _spec(
            "jobset",
            replicatedJobs=[
                {"name": "w", "template": _JOB_TEMPLATE},
                {"name": "v", "replicas": 3, "template": _JOB_TEMPLATE},
            ],
        ),
    ),
    Case("default/nested-object-when-present", (), _spec("jobset", failurePolicy={"maxRestarts": 2})),
    Case("default/not-when-parent-absent", (), create(JS, "a")),
    Case("default/explicit-value-kept", (), _spec("clusterqueue", queueingStrategy="StrictFIFO")),
    Case(
        "default/reapplied-after-removal",
        (create(CQ, "a"),),
        patch(CQ, "a", {"spec": {"queueingStrategy": None}}, MERGE),
    ),
    Case("default/on-read", (create(LQ, "a"),), get(LQ, "a")),
    Case("default/int-or-string-kept", (), _spec("workload", minResources={"cpu": 2, "memory": "1Gi"})),
    Case("default/number-kept", (), _spec("workload", runtimeLimitSeconds=1.5)),
    Case("default/integer-float-rejected", (), _spec("workload", priority=1.5)),
]
