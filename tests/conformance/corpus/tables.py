"""Table output for kubectl (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``): built-in
columns, a CRD's additionalPrinterColumns, single objects, and includeObject."""

from __future__ import annotations

from tests.conformance.corpus.objects import BY_NAME, MERGE, create, patch
from tests.conformance.model import TABLE, Case, Req

POD = BY_NAME["pod"]
CM = BY_NAME["configmap"]
CQ = BY_NAME["clusterqueue"]
WL = BY_NAME["workload"]
JS = BY_NAME["jobset"]
LEASE = BY_NAME["lease"]

CASES: list[Case] = [
    Case("table/single-object", (create(CM, "a"),), Req("GET", CM.path("a"), accept=TABLE)),
    Case("table/include-object", (create(CM, "a"),), Req("GET", CM.collection + "?includeObject=Object", accept=TABLE)),
    Case("table/include-none", (create(CM, "a"),), Req("GET", CM.collection + "?includeObject=None", accept=TABLE)),
    Case(
        "table/pod-with-status",
        (create(POD, "a"), patch(POD, "a", {"status": {"phase": "Running", "podIP": "10.1.2.3"}}, MERGE, sub="status")),
        Req("GET", POD.collection, accept=TABLE),
    ),
    Case(
        "table/custom-printer-columns-filled",
        (
            create(WL, "a"),
            patch(WL, "a", {"status": {"state": "Admitted", "clusterQueue": "cq", "position": 0}}, sub="status"),
        ),
        Req("GET", WL.collection, accept=TABLE),
    ),
    Case("table/custom-single-object", (create(CQ, "a"),), Req("GET", CQ.path("a"), accept=TABLE)),
    Case("table/custom-empty-list", (), Req("GET", JS.collection, accept=TABLE)),
    Case("table/empty-list", (), Req("GET", CM.collection, accept=TABLE)),
    Case("table/limit", (create(CM, "a"), create(CM, "b")), Req("GET", CM.collection + "?limit=1", accept=TABLE)),
    Case("table/lease-holder", (create(LEASE, "a"),), Req("GET", LEASE.collection, accept=TABLE)),
    Case(
        "table/accept-list-fallback", (create(CM, "a"),), Req("GET", CM.collection, accept=f"{TABLE},application/json")
    ),
]
