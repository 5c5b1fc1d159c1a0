"""Watches: the events after a resourceVersion, through selectors, of custom and cluster-scoped
objects, and bookmarks.

410 Gone for a resourceVersion older than the server remembers is not compared: a real server's
watch cache serves an old resourceVersion or answers 410 depending on how far its window has moved
since it started, which a test session does not control (``tests/sandbox`` covers the sandbox's
410).

Each watch starts from a resourceVersion saved before the case's writes, so that it reads them
from the server's history without racing them. The bookmark compared is the one that ends the
initial events of a streaming list: when periodic bookmarks come is each server's choice (a real
one sends them about once a minute).
"""

from __future__ import annotations

from tests.conformance.corpus.objects import BY_NAME, MERGE, configmap, create, delete, patch
from tests.conformance.model import TABLE, Case, Req, Step, Watch

CM = BY_NAME["configmap"]
WL = BY_NAME["workload"]
CQ = BY_NAME["clusterqueue"]
NODE = BY_NAME["node"]

MARK = Req("GET", CM.collection, save={"rv": "metadata.resourceVersion"})


def _mark(kind_collection: str, query: str = "") -> Req:
    """Save the collection's resourceVersion as ``rv`` (a cluster-scoped one's own objects only, so
    that the other objects of the servers stay out of the comparison)."""
    return Req("GET", kind_collection + query, save={"rv": "metadata.resourceVersion"})


LIFECYCLE: tuple[Step, ...] = (
    MARK,
    Req("POST", CM.collection, configmap("a")),
    patch(CM, "a", {"data": {"b": "2"}}),
    delete(CM, "a"),
)


def _watch(path: str, events: int, query: str = "", seconds: float = 5.0, accept: str | None = None) -> Req:
    sep = "&" if "?" in path else "?"
    return Req("GET", f"{path}{sep}watch=1&resourceVersion={{rv}}{query}", watch=Watch(events, seconds), accept=accept)


CASES: list[Case] = [
    Case("watch/lifecycle-after-resource-version", LIFECYCLE, _watch(CM.collection, 3)),
    Case(
        "watch/legacy-prefix",
        LIFECYCLE,
        Req("GET", "/api/v1/watch/namespaces/{ns}/configmaps?resourceVersion={rv}", watch=Watch(3)),
    ),
    Case(
        "watch/from-middle",
        (
            Req("POST", CM.collection, configmap("a")),
            patch(CM, "a", {"data": {"b": "2"}}, MERGE),
            Req("GET", CM.path("a"), save={"rv": "metadata.resourceVersion"}),
            patch(CM, "a", {"data": {"c": "3"}}, MERGE),
        ),
        _watch(CM.collection, 1),
    ),
    Case(
        "watch/label-selector-enter-and-leave",
        (
            MARK,
            Req("POST", CM.collection, configmap("a", labels={"app": "web"})),
            Req("POST", CM.collection, configmap("b")),
            patch(CM, "b", {"metadata": {"labels": {"app": "web"}}}),
            patch(CM, "a", {"metadata": {"labels": {"app": "db"}}}),
        ),
        _watch(CM.collection, 3, "&labelSelector=app%3Dweb"),
    ),
    Case(
        "watch/field-selector-name",
        (
            MARK,
            Req("POST", CM.collection, configmap("a")),
            Req("POST", CM.collection, configmap("b")),
            patch(CM, "b", {"data": {"x": "1"}}),
        ),
        _watch(CM.collection, 2, "&fieldSelector=metadata.name%3Db"),
    ),
    Case(
        "watch/single-object",
        (
            MARK,
            Req("POST", CM.collection, configmap("a")),
            Req("POST", CM.collection, configmap("b")),
            patch(CM, "a", {"data": {"x": "1"}}),
        ),
        _watch(CM.collection + "?fieldSelector=metadata.name%3Da", 2),
    ),
    Case(
        "watch/custom-selectable-field-enter-and-leave",
        (
            _mark(WL.collection),
            create(WL, "a"),
            create(WL, "b"),
            patch(WL, "b", {"spec": {"active": False}}),
            patch(WL, "b", {"status": {"state": "Pending"}}, sub="status"),
            patch(WL, "b", {"spec": {"active": True}}),
        ),
        _watch(WL.collection, 3, "&fieldSelector=spec.active%3Dfalse"),
    ),
    Case(
        "watch/custom",
        (
            _mark(WL.collection),
            create(WL, "a"),
            patch(WL, "a", {"status": {"state": "Admitted"}}, sub="status"),
            delete(WL, "a"),
        ),
        _watch(WL.collection, 3),
    ),
    Case(
        "watch/custom-finalizer",
        (
            _mark(WL.collection),
            create(WL, "a", finalizers=["example.com/hold"]),
            delete(WL, "a"),
            patch(WL, "a", {"metadata": {"finalizers": None}}),
        ),
        _watch(WL.collection, 3),
    ),
    Case(
        "watch/cluster-scoped-by-label",
        (
            _mark(CQ.collection, "?labelSelector=case%3D{ns}"),
            create(CQ, "a"),
            patch(CQ, "a", {"spec": {"queueingStrategy": "StrictFIFO"}}),
        ),
        _watch(CQ.collection, 2, "&labelSelector=case%3D{ns}"),
    ),
    Case(
        "watch/nodes-by-label",
        (
            _mark(NODE.collection, "?labelSelector=case%3D{ns}"),
            create(NODE, "a"),
            patch(NODE, "a", {"status": {"capacity": {"cpu": "2"}}}, sub="status"),
        ),
        _watch(NODE.collection, 2, "&labelSelector=case%3D{ns}"),
    ),
    Case(
        "watch/all-namespaces-by-label",
        (MARK, Req("POST", CM.collection, configmap("a", labels={"owner": "{ns}"}))),
        Req("GET", "/api/v1/configmaps?watch=1&resourceVersion={rv}&labelSelector=owner%3D{ns}", watch=Watch(1)),
    ),
    Case(
        "watch/no-op-write-sends-nothing",
        (
            MARK,
            Req("POST", CM.collection, configmap("a")),
            patch(CM, "a", {"data": {"a": "1"}}),
            Req("POST", CM.collection, configmap("b")),
        ),
        _watch(CM.collection, 2),
    ),
    Case(
        "watch/initial-events-resource-version-0",
        (Req("POST", CM.collection, configmap("b")), Req("POST", CM.collection, configmap("a"))),
        Req("GET", f"{CM.collection}?watch=1&resourceVersion=0", watch=Watch(2, unordered=True)),
    ),
    Case(
        "watch/initial-events-no-resource-version",
        (Req("POST", CM.collection, configmap("b")), Req("POST", CM.collection, configmap("a"))),
        Req("GET", f"{CM.collection}?watch=1", watch=Watch(2, unordered=True)),
    ),
    Case(
        "watch/streaming-list-initial-events-end",
        (Req("POST", CM.collection, configmap("a")), Req("POST", CM.collection, configmap("b"))),
        Req(
            "GET",
            f"{CM.collection}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
            "&allowWatchBookmarks=true",
            watch=Watch(3),
        ),
    ),
    Case(
        "watch/timeout-ends-stream",
        (MARK, Req("POST", CM.collection, configmap("a"))),
        _watch(CM.collection, 100, "&timeoutSeconds=1", seconds=5),
    ),
    Case("watch/bad-resource-version", (), Req("GET", f"{CM.collection}?watch=1&resourceVersion=abc", watch=Watch(1))),
    Case("watch/table", (MARK, Req("POST", CM.collection, configmap("a"))), _watch(CM.collection, 1, accept=TABLE)),
    Case(
        "watch/deleted-carries-last-state",
        (
            MARK,
            Req("POST", CM.collection, configmap("a", finalizers=["example.com/hold"])),
            delete(CM, "a"),
            patch(CM, "a", {"metadata": {"finalizers": None}}),
        ),
        _watch(CM.collection, 3),
    ),
]
