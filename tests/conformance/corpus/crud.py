"""Create, read, update and delete of every kind in :data:`KINDS`, each as the same dozen cases:
the answers to create, get, list, replace, delete, and their usual errors."""

from __future__ import annotations

from typing import Any

from tests.conformance.corpus.objects import BY_NAME, KINDS, MERGE, Kind, create, delete, get, patch
from tests.conformance.model import TABLE, Case, Edit, Req, Step, Wait

CHANGE = {"metadata": {"labels": {"changed": "yes"}, "annotations": {"note": "edited"}}}


def _gone(kind: Kind, name: str) -> tuple[Step, ...]:
    """What a delete leaves for a controller to finish (a Job's orphaned pods) is gone some time
    later on the real server: wait for it. Not for a namespace, which the namespace controller
    takes many seconds to remove: its get after the delete shows it Terminating."""
    return () if kind.name == "namespace" else (Wait(kind.path(name), status=404),)


def _generated(kind: Kind) -> dict[str, Any]:
    body = kind.body("x")
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = kind.named("gen-")
    return body


def cases_for(kind: Kind) -> list[Case]:
    k = kind.name
    return [
        Case(f"crud/{k}/create", (), create(kind, "a")),
        Case(f"crud/{k}/create-generate-name", (), Req("POST", kind.collection, _generated(kind))),
        Case(f"crud/{k}/get", (create(kind, "a"),), get(kind, "a")),
        Case(f"crud/{k}/list", (create(kind, "a"), create(kind, "b")), Req("GET", kind.listing())),
        Case(
            f"crud/{k}/replace",
            (create(kind, "a"), get(kind, "a", save={"obj": ""})),
            Req("PUT", kind.path("a"), Edit("obj", CHANGE)),
        ),
        Case(
            f"crud/{k}/replace-stale",
            (
                create(kind, "a"),
                get(kind, "a", save={"obj": ""}),
                patch(kind, "a", {"metadata": {"labels": {"first": "write"}}}),
            ),
            Req("PUT", kind.path("a"), Edit("obj", CHANGE)),
        ),
        Case(
            f"crud/{k}/replace-missing",
            (create(kind, "a", save={"obj": ""}),),
            Req(
                "PUT",
                kind.path("zz"),
                Edit("obj", {"metadata": {"name": kind.named("zz"), "resourceVersion": None, "uid": None}}),
            ),
        ),
        Case(f"crud/{k}/merge-patch", (create(kind, "a"),), patch(kind, "a", CHANGE, MERGE)),
        Case(f"crud/{k}/delete", (create(kind, "a"),), delete(kind, "a")),
        Case(f"crud/{k}/get-deleted", (create(kind, "a"), delete(kind, "a"), *_gone(kind, "a")), get(kind, "a")),
        Case(f"crud/{k}/create-existing", (create(kind, "a"),), create(kind, "a")),
        Case(f"crud/{k}/get-missing", (), get(kind, "missing")),
        Case(f"crud/{k}/delete-missing", (), delete(kind, "missing")),
        Case(f"crud/{k}/table", (create(kind, "a"),), Req("GET", kind.listing(), accept=TABLE)),
    ]


EVENTS_API = "/apis/events.k8s.io/v1/namespaces/{ns}/events"
NEW_EVENT = {
    "apiVersion": "events.k8s.io/v1",
    "kind": "Event",
    "metadata": {"name": "e2"},
    "eventTime": "2026-01-01T00:00:00.000000Z",
    "reportingController": "example.com/conformance",
    "reportingInstance": "conformance-1",
    "action": "Test",
    "reason": "Tested",
    "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "name": "subject", "namespace": "{ns}"},
    "note": "an event of the events API",
    "type": "Normal",
}

# The two Event APIs serve the same objects on a real server.
EVENT_APIS = [
    Case("crud/event/events-api-create", (), Req("POST", EVENTS_API, NEW_EVENT)),
    Case(
        "crud/event/core-event-through-events-api",
        (Req("POST", BY_NAME["event"].collection, BY_NAME["event"].body("e1")),),
        Req("GET", f"{EVENTS_API}/e1"),
    ),
    Case(
        "crud/event/events-api-event-through-core",
        (Req("POST", EVENTS_API, NEW_EVENT),),
        Req("GET", BY_NAME["event"].path("e2")),
    ),
]

CASES: list[Case] = [*(case for kind in KINDS for case in cases_for(kind)), *EVENT_APIS]
