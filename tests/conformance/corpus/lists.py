"""Lists: label and field selectors, limit and continue, lists across namespaces, metadata-only
lists."""

from __future__ import annotations

from urllib.parse import quote

from tests.conformance.corpus.objects import BY_NAME, configmap, create, event, pod_spec
from tests.conformance.model import Case, Req, Step

CM = BY_NAME["configmap"]
POD = BY_NAME["pod"]
SECRET = BY_NAME["secret"]
EVENT = BY_NAME["event"]
NODE = BY_NAME["node"]
NSK = BY_NAME["namespace"]
CQ = BY_NAME["clusterqueue"]
WL = BY_NAME["workload"]

LABELLED: tuple[Step, ...] = (
    Req("POST", CM.collection, configmap("web-front", labels={"app": "web", "tier": "front", "owner": "{ns}"})),
    Req("POST", CM.collection, configmap("web-back", labels={"app": "web", "tier": "back", "owner": "{ns}"})),
    Req("POST", CM.collection, configmap("db", labels={"app": "db", "owner": "{ns}"})),
    Req("POST", CM.collection, configmap("plain")),
)

LABEL_SELECTORS = {
    "equals": "app=web",
    "double-equals": "app==web",
    "not-equals": "app!=web",
    "in": "app in (web,db)",
    "notin": "app notin (web)",
    "exists": "tier",
    "not-exists": "!tier",
    "and": "app=web,tier=back",
    "no-match": "app=cache",
    "empty-value": "app=",
    "malformed": "app in web",
    "bad-value": "app=a b",
}

FIELD_SELECTORS = {
    "name": ("configmaps", "metadata.name=db"),
    "name-not": ("configmaps", "metadata.name!=db"),
    "namespace": ("configmaps", "metadata.namespace={ns}"),
    "unsupported": ("configmaps", "data.a=1"),
    "malformed": ("configmaps", "metadata.name"),
}


def _pods() -> tuple[Step, ...]:
    return (
        Req("POST", POD.collection, {"metadata": {"name": "p1", "labels": {"app": "web"}}, "spec": pod_spec()}),
        Req("POST", POD.collection, {"metadata": {"name": "p2"}, "spec": {**pod_spec(), "restartPolicy": "Never"}}),
    )


def _paged(n: int) -> tuple[Step, ...]:
    return tuple(Req("POST", CM.collection, configmap(f"c{i}")) for i in range(n))


CASES: list[Case] = [
    *(
        Case(f"list/label/{name}", LABELLED, Req("GET", f"{CM.collection}?labelSelector={quote(sel)}"))
        for name, sel in LABEL_SELECTORS.items()
    ),
    *(
        Case(f"list/field/{name}", LABELLED, Req("GET", f"{CM.collection}?fieldSelector={quote(sel)}"))
        for name, (_, sel) in FIELD_SELECTORS.items()
    ),
    Case(
        "list/label-and-field",
        LABELLED,
        Req("GET", f"{CM.collection}?labelSelector=app%3Dweb&fieldSelector=metadata.name%3Dweb-back"),
    ),
    Case("list/all-namespaces-by-label", LABELLED, Req("GET", "/api/v1/configmaps?labelSelector=owner%3D{ns}")),
    Case("list/pods/status-phase", _pods(), Req("GET", f"{POD.collection}?fieldSelector=status.phase%3DPending")),
    Case("list/pods/node-name-empty", _pods(), Req("GET", f"{POD.collection}?fieldSelector=spec.nodeName%3D")),
    Case("list/pods/restart-policy", _pods(), Req("GET", f"{POD.collection}?fieldSelector=spec.restartPolicy%3DNever")),
    Case(
        "list/pods/scheduler-name",
        _pods(),
        Req("GET", f"{POD.collection}?fieldSelector=spec.schedulerName%3Dconformance"),
    ),
    Case("list/pods/unsupported-field", _pods(), Req("GET", f"{POD.collection}?fieldSelector=spec.priority%3D0")),
    Case("list/secrets/type", (create(SECRET, "a"),), Req("GET", f"{SECRET.collection}?fieldSelector=type%3DOpaque")),
    Case(
        "list/events/involved-object",
        (Req("POST", EVENT.collection, event("e1")),),
        Req("GET", f"{EVENT.collection}?fieldSelector=involvedObject.name%3Dsubject,reason%3DTested"),
    ),
    Case(
        "list/events/type",
        (Req("POST", EVENT.collection, event("e1")),),
        Req("GET", f"{EVENT.collection}?fieldSelector=type%3DWarning"),
    ),
    Case(
        "list/nodes/unschedulable",
        (create(NODE, "a"),),
        Req("GET", f"{NODE.collection}?labelSelector=case%3D{{ns}}&fieldSelector=spec.unschedulable%3Dtrue"),
    ),
    Case(
        "list/namespaces/status-phase",
        (create(NSK, "a"),),
        Req("GET", f"{NSK.collection}?labelSelector=case%3D{{ns}}&fieldSelector=status.phase%3DActive"),
    ),
    Case(
        "list/custom/name",
        (create(WL, "a"), create(WL, "b")),
        Req("GET", f"{WL.collection}?fieldSelector=metadata.name%3Db"),
    ),
    Case(
        "list/custom/unsupported-field",
        (create(WL, "a"),),
        Req("GET", f"{WL.collection}?fieldSelector=spec.queueName%3Dlq"),
    ),
    Case(
        "list/custom/label",
        (create(CQ, "a"), create(CQ, "b", labels={"case": "{ns}", "tier": "gold"})),
        Req("GET", f"{CQ.collection}?labelSelector=case%3D{{ns}},tier%3Dgold"),
    ),
    Case("list/limit/first-page", _paged(5), Req("GET", f"{CM.collection}?limit=2")),
    Case(
        "list/limit/second-page",
        (*_paged(5), Req("GET", f"{CM.collection}?limit=2", save={"c": "metadata.continue"})),
        Req("GET", f"{CM.collection}?limit=2&continue={{c}}"),
    ),
    Case(
        "list/limit/last-page",
        (*_paged(5), Req("GET", f"{CM.collection}?limit=3", save={"c": "metadata.continue"})),
        Req("GET", f"{CM.collection}?limit=3&continue={{c}}"),
    ),
    Case("list/limit/larger-than-list", _paged(3), Req("GET", f"{CM.collection}?limit=10")),
    Case("list/limit/exact", _paged(3), Req("GET", f"{CM.collection}?limit=3")),
    Case(
        "list/limit/with-selector",
        (*LABELLED, *_paged(3)),
        Req("GET", f"{CM.collection}?limit=1&labelSelector=app%3Dweb"),
    ),
    Case(
        "list/limit/custom", (create(WL, "a"), create(WL, "b"), create(WL, "c")), Req("GET", f"{WL.collection}?limit=2")
    ),
    Case("list/continue/bad-token", _paged(2), Req("GET", f"{CM.collection}?limit=1&continue=not-a-token")),
    Case(
        "list/continue/sees-later-writes",
        (
            *_paged(3),
            Req("GET", f"{CM.collection}?limit=1", save={"c": "metadata.continue"}),
            Req("POST", CM.collection, configmap("c9")),
        ),
        Req("GET", f"{CM.collection}?limit=5&continue={{c}}"),
    ),
    Case(
        "list/metadata-only",
        LABELLED,
        Req("GET", CM.collection, accept="application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"),
    ),
    Case(
        "list/metadata-only-custom",
        (create(WL, "a"),),
        Req("GET", WL.collection, accept="application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"),
    ),
    Case("list/empty", (), Req("GET", CM.collection)),
    Case("list/unknown-resource", (), Req("GET", "/api/v1/namespaces/{ns}/widgets")),
    Case("list/unknown-group", (), Req("GET", "/apis/example.com/v1/namespaces/{ns}/widgets")),
]
