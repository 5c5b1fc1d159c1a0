"""Deletion: finalizers, cascading deletion through ownerReferences (background, foreground,
orphan), namespaces, collections, graceful pod deletion and binding.

The real server's garbage collector and namespace controller act some time after the request:
cases wait (:class:`Wait`) for what they do before the request under test.
"""

from __future__ import annotations

from typing import Any

from tests.conformance.corpus.objects import BY_NAME, MERGE, configmap, create, delete, get, node, patch, pod_spec
from tests.conformance.model import Case, Pause, Req, Step, Wait

CM = BY_NAME["configmap"]
WL = BY_NAME["workload"]
CQ = BY_NAME["clusterqueue"]
NSK = BY_NAME["namespace"]
JOB = BY_NAME["job"]
POD = BY_NAME["pod"]
NODE = BY_NAME["node"]
HOLD = ["example.com/hold"]


def _owned(
    name: str,
    owner_uid: str = "{owner}",
    *,
    block: bool = False,
    finalizers: list[str] | None = None,
    kind: str = "ConfigMap",
    owner: str = "owner",
) -> Req:
    ref: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "name": owner, "uid": owner_uid}
    if block:
        ref["blockOwnerDeletion"] = True
    meta: dict[str, Any] = {"ownerReferences": [ref]}
    if finalizers:
        meta["finalizers"] = finalizers
    return Req("POST", CM.collection, configmap(name, **meta))


OWNER: tuple[Step, ...] = (Req("POST", CM.collection, configmap("owner"), save={"owner": "metadata.uid"}),)
FAMILY: tuple[Step, ...] = (*OWNER, _owned("child"))


def _policy(policy: str) -> dict[str, Any]:
    return {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy}


FINALIZERS = [
    Case("finalizer/delete-sets-deletion-timestamp", (create(CM, "a", finalizers=HOLD),), delete(CM, "a")),
    Case("finalizer/get-while-terminating", (create(CM, "a", finalizers=HOLD), delete(CM, "a")), get(CM, "a")),
    Case("finalizer/delete-again", (create(CM, "a", finalizers=HOLD), delete(CM, "a")), delete(CM, "a")),
    Case(
        "finalizer/remove-last-deletes",
        (create(CM, "a", finalizers=HOLD), delete(CM, "a")),
        patch(CM, "a", {"metadata": {"finalizers": None}}),
    ),
    Case(
        "finalizer/gone-after-removal",
        (create(CM, "a", finalizers=HOLD), delete(CM, "a"), patch(CM, "a", {"metadata": {"finalizers": None}})),
        get(CM, "a"),
    ),
    Case(
        "finalizer/remove-one-of-two",
        (create(CM, "a", finalizers=[*HOLD, "example.com/other"]), delete(CM, "a")),
        patch(CM, "a", {"metadata": {"finalizers": ["example.com/other"]}}),
    ),
    Case(
        "finalizer/add-while-terminating",
        (create(CM, "a", finalizers=HOLD), delete(CM, "a")),
        patch(CM, "a", {"metadata": {"finalizers": [*HOLD, "example.com/late"]}}),
    ),
    Case(
        "finalizer/update-while-terminating",
        (create(CM, "a", finalizers=HOLD), delete(CM, "a")),
        patch(CM, "a", {"data": {"late": "write"}}),
    ),
    Case(
        "finalizer/clear-deletion-timestamp-ignored",
        (create(CM, "a", finalizers=HOLD), delete(CM, "a")),
        patch(CM, "a", {"metadata": {"deletionTimestamp": None}}),
    ),
    Case("finalizer/custom-delete", (create(WL, "a", finalizers=HOLD),), delete(WL, "a")),
    Case(
        "finalizer/custom-remove-last",
        (create(WL, "a", finalizers=HOLD), delete(WL, "a")),
        patch(WL, "a", {"metadata": {"finalizers": []}}),
    ),
    Case("finalizer/cluster-scoped-custom", (create(CQ, "a", finalizers=HOLD), delete(CQ, "a")), get(CQ, "a")),
    Case("finalizer/added-by-update-no-delete", (create(CM, "a"),), patch(CM, "a", {"metadata": {"finalizers": HOLD}})),
]

CASCADE = [
    Case("gc/background-response", FAMILY, delete(CM, "owner", _policy("Background"))),
    Case(
        "gc/background-dependent-gone",
        (*FAMILY, delete(CM, "owner", _policy("Background")), Wait(CM.path("child"), status=404)),
        get(CM, "child"),
    ),
    Case(
        "gc/default-is-background", (*FAMILY, delete(CM, "owner"), Wait(CM.path("child"), status=404)), get(CM, "child")
    ),
    Case("gc/foreground-response", FAMILY, delete(CM, "owner", _policy("Foreground"))),
    Case(
        "gc/foreground-all-gone",
        (*FAMILY, delete(CM, "owner", _policy("Foreground")), Wait(CM.path("owner"), status=404)),
        get(CM, "child"),
    ),
    Case(
        "gc/foreground-blocked-by-dependent-finalizer",
        (
            *OWNER,
            _owned("child", block=True, finalizers=HOLD),
            Pause(),
            delete(CM, "owner", _policy("Foreground")),
            Wait(CM.path("child"), field="metadata.deletionTimestamp"),
        ),
        get(CM, "owner"),
    ),
    Case(
        "gc/foreground-dependent-terminating",
        (
            *OWNER,
            _owned("child", block=True, finalizers=HOLD),
            Pause(),
            delete(CM, "owner", _policy("Foreground")),
            Wait(CM.path("child"), field="metadata.deletionTimestamp"),
        ),
        get(CM, "child"),
    ),
    Case("gc/orphan-response", FAMILY, delete(CM, "owner", _policy("Orphan"))),
    Case(
        "gc/orphan-dependent-kept",
        (
            *FAMILY,
            Pause(),
            delete(CM, "owner", _policy("Orphan")),
            Wait(CM.path("child"), field="metadata.ownerReferences", present=False),
        ),
        get(CM, "child"),
    ),
    Case("gc/orphan-dependents-query", (*FAMILY,), Req("DELETE", CM.path("owner") + "?orphanDependents=true")),
    Case("gc/propagation-query", FAMILY, Req("DELETE", CM.path("owner") + "?propagationPolicy=Foreground")),
    Case("gc/bad-propagation-policy", FAMILY, delete(CM, "owner", _policy("Sideways"))),
    Case(
        "gc/custom-dependent",
        (
            *OWNER,
            Req(
                "POST",
                WL.collection,
                {
                    **WL.body("w"),
                    "metadata": {
                        "name": "w",
                        "ownerReferences": [
                            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "{owner}"}
                        ],
                    },
                },
            ),
            delete(CM, "owner"),
            Wait(WL.path("w"), status=404),
        ),
        get(WL, "w"),
    ),
    Case(
        "gc/two-owners-one-left",
        (
            *OWNER,
            Req("POST", CM.collection, configmap("owner2"), save={"o2": "metadata.uid"}),
            Req(
                "POST",
                CM.collection,
                configmap(
                    "child",
                    ownerReferences=[
                        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "{owner}"},
                        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner2", "uid": "{o2}"},
                    ],
                ),
            ),
            delete(CM, "owner"),
            Wait(CM.path("owner"), status=404),
            Wait(CM.path("child"), field="metadata.ownerReferences.1", present=False),
        ),
        get(CM, "child"),
    ),
    Case(
        "gc/job-default-orphans",
        (
            create(JOB, "j", save={"job": "metadata.uid"}),
            Req(
                "POST",
                POD.collection,
                {
                    "metadata": {
                        "name": "jp",
                        "ownerReferences": [
                            {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "{job}", "controller": True}
                        ],
                    },
                    "spec": pod_spec(),
                },
            ),
            Pause(),
            delete(JOB, "j"),
            Wait(JOB.path("j"), status=404),
            Wait(POD.path("jp"), field="metadata.ownerReferences", present=False),
        ),
        get(POD, "jp"),
    ),
    Case(
        "gc/job-background",
        (
            create(JOB, "j", save={"job": "metadata.uid"}),
            Req(
                "POST",
                POD.collection,
                {
                    "metadata": {
                        "name": "jp",
                        "ownerReferences": [
                            {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "{job}", "controller": True}
                        ],
                    },
                    "spec": pod_spec(),
                },
            ),
            delete(JOB, "j", _policy("Background")),
            Wait(POD.path("jp"), status=404),
        ),
        get(POD, "jp"),
    ),
    Case(
        "gc/missing-owner-collected",
        (_owned("child", "00000000-0000-0000-0000-00000000abcd"), Wait(CM.path("child"), status=404, seconds=8)),
        get(CM, "child"),
    ),
]

NAMESPACES = [
    Case("namespace/delete-response", (create(NSK, "a"),), delete(NSK, "a")),
    Case(
        "namespace/contents-deleted",
        (
            create(NSK, "a"),
            Req("POST", "/api/v1/namespaces/{ns}-a/configmaps", configmap("c")),
            delete(NSK, "a"),
            Wait("/api/v1/namespaces/{ns}-a/configmaps/c", status=404),
        ),
        Req("GET", "/api/v1/namespaces/{ns}-a/configmaps"),
    ),
    Case(
        "namespace/held-by-finalizer",
        (
            create(NSK, "a"),
            Req("POST", "/api/v1/namespaces/{ns}-a/configmaps", configmap("c", finalizers=HOLD)),
            delete(NSK, "a"),
            Wait("/api/v1/namespaces/{ns}-a/configmaps/c", field="metadata.deletionTimestamp"),
            # the namespace controller reports what is left; the sandbox has no such conditions
            Wait(NSK.path("a"), field="status.conditions", seconds=10),
        ),
        get(NSK, "a"),
    ),
    Case("namespace/default-labels", (), Req("POST", NSK.collection, {"metadata": {"name": "{ns}-plain"}})),
    Case("namespace/spec-finalizers", (create(NSK, "a"),), get(NSK, "a")),
]

COLLECTIONS = [
    Case(
        "collection/delete-by-label",
        (
            Req("POST", CM.collection, configmap("a", labels={"app": "web"})),
            Req("POST", CM.collection, configmap("b", labels={"app": "web"})),
            Req("POST", CM.collection, configmap("c")),
        ),
        Req("DELETE", CM.collection + "?labelSelector=app%3Dweb"),
    ),
    Case(
        "collection/after-delete",
        (
            Req("POST", CM.collection, configmap("a", labels={"app": "web"})),
            Req("POST", CM.collection, configmap("c")),
            Req("DELETE", CM.collection + "?labelSelector=app%3Dweb"),
        ),
        Req("GET", CM.collection),
    ),
    Case("collection/custom", (create(WL, "a"), create(WL, "b")), Req("DELETE", WL.collection)),
]

PODS = [
    Case("pod/delete-unbound-immediate", (create(POD, "a"),), delete(POD, "a")),
    Case(
        "pod/bind",
        (Req("POST", NODE.collection, node("{ns}-n")), create(POD, "a")),
        Req(
            "POST",
            POD.path("a", "binding"),
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "a"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "{ns}-n"},
            },
        ),
    ),
    Case(
        "pod/bound",
        (
            Req("POST", NODE.collection, node("{ns}-n")),
            create(POD, "a"),
            Req(
                "POST",
                POD.path("a", "binding"),
                {"metadata": {"name": "a"}, "target": {"kind": "Node", "name": "{ns}-n"}},
            ),
        ),
        get(POD, "a"),
    ),
    Case(
        "pod/bind-twice",
        (
            Req("POST", NODE.collection, node("{ns}-n")),
            create(POD, "a"),
            Req(
                "POST",
                POD.path("a", "binding"),
                {"metadata": {"name": "a"}, "target": {"kind": "Node", "name": "{ns}-n"}},
            ),
        ),
        Req(
            "POST", POD.path("a", "binding"), {"metadata": {"name": "a"}, "target": {"kind": "Node", "name": "{ns}-n"}}
        ),
    ),
    Case(
        "pod/delete-bound-graceful",
        (
            Req("POST", NODE.collection, node("{ns}-n")),
            Req("POST", POD.collection, {"metadata": {"name": "a"}, "spec": {**pod_spec(), "nodeName": "{ns}-n"}}),
        ),
        delete(POD, "a"),
    ),
    Case(
        "pod/delete-bound-grace-zero",
        (
            Req("POST", NODE.collection, node("{ns}-n")),
            Req("POST", POD.collection, {"metadata": {"name": "a"}, "spec": {**pod_spec(), "nodeName": "{ns}-n"}}),
        ),
        delete(POD, "a", {"gracePeriodSeconds": 0}),
    ),
    Case(
        "pod/delete-finished",
        (create(POD, "a"), patch(POD, "a", {"status": {"phase": "Succeeded"}}, MERGE, sub="status")),
        delete(POD, "a"),
    ),
]

CASES: list[Case] = [*FINALIZERS, *CASCADE, *NAMESPACES, *COLLECTIONS, *PODS]
