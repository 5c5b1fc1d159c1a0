"""Status subresources: a write to ``/status`` changes only status, a write to the main resource
ignores status; and the generation, which only spec changes move."""

from __future__ import annotations

from typing import Any

from tests.conformance.corpus.objects import BY_NAME, JSON_PATCH, MERGE, Kind, create, get, patch
from tests.conformance.model import Case, Edit, Req

CQ = BY_NAME["clusterqueue"]
LQ = BY_NAME["localqueue"]
WL = BY_NAME["workload"]
JS = BY_NAME["jobset"]
NODE = BY_NAME["node"]
POD = BY_NAME["pod"]
SVC = BY_NAME["service"]
NSK = BY_NAME["namespace"]
CM = BY_NAME["configmap"]
RF = BY_NAME["resourceflavor"]

# kind, a status it may take, a spec change it may take
STATUS_KINDS: list[tuple[Kind, dict[str, Any], dict[str, Any]]] = [
    (CQ, {"pendingWorkloads": 2, "admittedWorkloads": 1}, {"spec": {"queueingStrategy": "StrictFIFO"}}),
    (LQ, {"pendingWorkloads": 1}, {"spec": {"stopPolicy": "Hold"}}),
    (WL, {"state": "Admitted", "clusterQueue": "cq"}, {"spec": {"priority": 5}}),
    (JS, {"restarts": 1, "terminalState": "Completed"}, {"spec": {"suspend": False}}),
    (NODE, {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}, {"spec": {"unschedulable": False}}),
    (POD, {"phase": "Running", "podIP": "10.1.2.3"}, {"spec": {"activeDeadlineSeconds": 60}}),
    (
        SVC,
        {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}},
        {"spec": {"sessionAffinity": "ClientIP"}},
    ),
]


def cases_for(kind: Kind, status: dict[str, Any], spec_change: dict[str, Any]) -> list[Case]:
    k = kind.name
    return [
        Case(
            f"status/{k}/patch-status", (create(kind, "a"),), patch(kind, "a", {"status": status}, MERGE, sub="status")
        ),
        Case(
            f"status/{k}/patch-status-ignores-spec",
            (create(kind, "a"),),
            patch(kind, "a", {"status": status, **spec_change}, MERGE, sub="status"),
        ),
        Case(
            f"status/{k}/patch-main-ignores-status",
            (create(kind, "a"),),
            patch(kind, "a", {"status": status, **spec_change}, MERGE),
        ),
        Case(
            f"status/{k}/put-status",
            (create(kind, "a"), get(kind, "a", save={"obj": ""})),
            Req("PUT", kind.path("a", "status"), Edit("obj", {"status": status, **spec_change})),
        ),
        Case(
            f"status/{k}/put-main-ignores-status",
            (create(kind, "a"), get(kind, "a", save={"obj": ""})),
            Req("PUT", kind.path("a"), Edit("obj", {"status": status, **spec_change})),
        ),
        Case(
            f"status/{k}/get-status",
            (create(kind, "a"), patch(kind, "a", {"status": status}, MERGE, sub="status")),
            get(kind, "a", "status"),
        ),
        Case(
            f"status/{k}/status-labels",
            (create(kind, "a"),),
            patch(kind, "a", {"metadata": {"labels": {"via": "status"}}}, MERGE, sub="status"),
        ),
    ]


CASES: list[Case] = [
    *(case for kind, status, change in STATUS_KINDS for case in cases_for(kind, status, change)),
    Case(
        "status/custom-json-patch",
        (create(WL, "a"),),
        patch(
            WL,
            "a",
            [{"op": "add", "path": "/status", "value": {"state": "Pending", "position": 3}}],
            JSON_PATCH,
            sub="status",
        ),
    ),
    Case(
        "status/custom-status-schema-violation",
        (create(WL, "a"),),
        patch(WL, "a", {"status": {"state": "Sleeping"}}, MERGE, sub="status"),
    ),
    Case(
        "status/custom-status-pruned",
        (create(WL, "a"),),
        patch(WL, "a", {"status": {"state": "Pending", "unknownField": 1}}, MERGE, sub="status"),
    ),
    Case(
        "status/generation-moves-on-spec",
        (create(CQ, "a"), patch(CQ, "a", {"spec": {"queueingStrategy": "StrictFIFO"}})),
        get(CQ, "a"),
    ),
    Case(
        "status/generation-stays-on-status",
        (create(CQ, "a"), patch(CQ, "a", {"status": {"pendingWorkloads": 1}}, sub="status")),
        get(CQ, "a"),
    ),
    Case("status/no-status-subresource", (create(RF, "a"),), patch(RF, "a", {"status": {"x": 1}}, sub="status")),
    Case("status/configmap-has-none", (create(CM, "a"),), patch(CM, "a", {"data": {"x": "1"}}, sub="status")),
    Case(
        "status/namespace-status-phase",
        (create(NSK, "a"),),
        patch(NSK, "a", {"status": {"phase": "Terminating"}}, sub="status"),
    ),
    Case("status/missing-object", (), patch(CQ, "missing", {"status": {"pendingWorkloads": 1}}, sub="status")),
]
