"""The documented differences between the sandbox and a real kube-apiserver: each entry names the
cases it applies to, the paths (of the normalised answers) at which they differ, and why the
difference is kept.

A case an entry applies to must differ at one of its paths at least, and only at paths that the
entries applying to it cover: a difference that goes away (the sandbox was fixed) or a new one
fails the conformance test.

Patterns: in ``cases``, ``*`` matches any run of characters; in ``paths``, ``[*]`` matches any
list index and ``*`` any run of characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property


def _regex(pattern: str) -> re.Pattern[str]:
    text = re.escape(pattern).replace(r"\[\*\]", r"\[\d+\]").replace(r"\*", ".*")
    return re.compile(f"^{text}$")


@dataclass(frozen=True)
class Difference:
    """A kept difference: ``key`` names it, ``reason`` says why it is kept."""

    key: str
    reason: str
    cases: tuple[str, ...]
    paths: tuple[str, ...]

    @cached_property
    def _case_patterns(self) -> list[re.Pattern[str]]:
        return [_regex(p) for p in self.cases]

    @cached_property
    def _path_patterns(self) -> list[re.Pattern[str]]:
        return [_regex(p) for p in self.paths]

    def applies_to(self, case: str) -> bool:
        return any(p.match(case) for p in self._case_patterns)

    def covers(self, path: str) -> bool:
        return any(p.match(path) for p in self._path_patterns)


DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        "list-items-carry-kind",
        "Items of a list of a built-in kind carry `kind` and `apiVersion` in the sandbox, which serves each "
        "item from the object's stored JSON; a real server leaves them out (and keeps them for custom "
        "resources). Clients take the kind from the list.",
        (
            "crud/configmap/list",
            "crud/secret/list",
            "crud/pod/list",
            "crud/service/list",
            "crud/job/list",
            "crud/lease/list",
            "crud/event/list",
            "crud/namespace/list",
            "crud/node/list",
            "list/label/equals",
            "list/label/double-equals",
            "list/label/not-equals",
            "list/label/in",
            "list/label/notin",
            "list/label/exists",
            "list/label/not-exists",
            "list/label/and",
            "list/field/name",
            "list/field/name-not",
            "list/label-and-field",
            "list/all-namespaces-by-label",
            "list/pods/status-phase",
            "list/pods/node-name-empty",
            "list/pods/restart-policy",
            "list/pods/scheduler-name",
            "list/secrets/type",
            "list/events/involved-object",
            "list/nodes/unschedulable",
            "list/namespaces/status-phase",
            "list/limit/first-page",
            "list/limit/second-page",
            "list/limit/last-page",
            "list/limit/larger-than-list",
            "list/limit/exact",
            "list/limit/with-selector",
            "collection/after-delete",
        ),
        (
            "test.body.items[*].apiVersion",
            "test.body.items[*].kind",
        ),
    ),
    Difference(
        "immediate-delete-answers-object",
        "A delete that removes the object at once is answered by a real server with a Status Success naming "
        "it, for every kind whose registry does not return deleted objects (all here but pods, services, "
        "namespaces); the sandbox answers with the deleted object.",
        (
            "crud/configmap/delete",
            "crud/secret/delete",
            "crud/lease/delete",
            "crud/event/delete",
            "crud/node/delete",
            "crud/clusterqueue/delete",
            "crud/localqueue/delete",
            "crud/workload/delete",
            "crud/jobset/delete",
            "crud/resourceflavor/delete",
            "crud/cohort/delete",
            "crud/workloadpriorityclass/delete",
            "error/delete-precondition-met",
            "gc/background-response",
        ),
        ("test.body",),
    ),
    Difference(
        "create-on-update",
        "A PUT to a missing Lease, Event or Service creates it on a real server (their registries allow create "
        "on update; the Service then fails on the copied clusterIP); the sandbox answers 404 for every kind.",
        (
            "crud/service/replace-missing",
            "crud/lease/replace-missing",
            "crud/event/replace-missing",
        ),
        (
            "test.status",
            "test.body",
            "test.body.code",
            "test.body.reason",
            "test.body.details",
        ),
    ),
    Difference(
        "pod-generation",
        "A real server gives pods a `metadata.generation` (moved by spec changes and by the delete); the sandbox "
        "keeps a generation only for Jobs, CRDs and custom resources.",
        (
            "crud/pod/create",
            "crud/pod/create-generate-name",
            "crud/pod/get",
            "crud/pod/list",
            "crud/pod/replace",
            "crud/pod/merge-patch",
            "crud/pod/delete",
            "crud/pod/table",
            "patch/json/pod-image",
            "patch/strategic/pod-container-by-name",
            "patch/strategic/pod-add-toleration",
            "status/pod/patch-status",
            "status/pod/patch-status-ignores-spec",
            "status/pod/patch-main-ignores-status",
            "status/pod/put-status",
            "status/pod/put-main-ignores-status",
            "status/pod/get-status",
            "status/pod/status-labels",
            "list/pods/status-phase",
            "list/pods/node-name-empty",
            "list/pods/restart-policy",
            "list/pods/scheduler-name",
            "gc/job-default-orphans",
            "pod/delete-unbound-immediate",
            "pod/bound",
            "pod/delete-bound-graceful",
            "pod/delete-bound-grace-zero",
            "pod/delete-finished",
            "table/pod-with-status",
        ),
        (
            "test.body.metadata.generation",
            "test.body.items[*].metadata.generation",
            "test.body.rows[*].object.metadata.generation",
        ),
    ),
    Difference(
        "pod-delete-answer",
        "A pod deleted at once is answered by a real server with its last state, `deletionTimestamp` and "
        "`deletionGracePeriodSeconds: 0` set; the sandbox answers with the pod as it was before the delete.",
        (
            "crud/pod/delete",
            "pod/delete-unbound-immediate",
            "pod/delete-bound-grace-zero",
            "pod/delete-finished",
        ),
        (
            "test.body.metadata.deletionTimestamp",
            "test.body.metadata.deletionGracePeriodSeconds",
        ),
    ),
    Difference(
        "node-admission",
        "A real server taints a new Node `node.kubernetes.io/not-ready:NoSchedule` (admission) and always "
        "serialises its `status.daemonEndpoints` and `status.nodeInfo`; the sandbox does neither (its own "
        "simulated nodes are created ready).",
        (
            "crud/node/create",
            "crud/node/create-generate-name",
            "crud/node/get",
            "crud/node/list",
            "crud/node/replace",
            "crud/node/merge-patch",
            "patch/strategic/node-taint-merged",
            "patch/strategic/node-replace-directive",
            "status/node/patch-status",
            "status/node/patch-status-ignores-spec",
            "status/node/patch-main-ignores-status",
            "status/node/put-status",
            "status/node/put-main-ignores-status",
            "status/node/get-status",
            "status/node/status-labels",
            "list/nodes/unschedulable",
            "watch/nodes-by-label",
        ),
        (
            "test.body.spec.taints",
            "test.body.status",
            "test.body.status.daemonEndpoints",
            "test.body.status.nodeInfo",
            "test.body.items[*].spec.taints",
            "test.body.items[*].status",
            "test.events[*].object.spec.taints",
            "test.events[*].object.status",
            "test.events[*].object.status.*",
        ),
    ),
    Difference(
        "zero-values-omitted",
        "`unschedulable: false` is dropped by a real server (a Go field with omitempty); the sandbox keeps the "
        "false it was sent.",
        (
            "status/node/patch-main-ignores-status",
            "status/node/put-main-ignores-status",
        ),
        ("test.body.spec.unschedulable",),
    ),
    Difference(
        "apply-managed-fields",
        "The sandbox does not track `managedFields`; an apply that changes only who manages a field is "
        "therefore a no-op there and keeps the resourceVersion, where a real server writes.",
        (
            "apply/create",
            "apply/same-manager-update",
            "apply/same-manager-drops-field",
            "apply/second-manager-shared-value",
            "apply/second-manager-other-field",
            "apply/conflict-forced",
            "apply/after-update-managers",
            "apply/labels",
            "apply/custom-create-defaulted",
            "apply/custom-forced",
            "apply/custom-status",
            "apply/custom-list-map-merge",
            "apply/yaml-body",
            "apply/create-managers-of-post",
        ),
        (
            "test.body.metadata.managedFields",
            "test.body.metadata.resourceVersion",
        ),
    ),
    Difference(
        "apply-no-conflicts",
        "Server-side apply in the sandbox is create-or-merge: without managedFields there are no conflicts "
        "between field managers, so the apply that a real server refuses with 409 Conflict succeeds.",
        (
            "apply/conflict",
            "apply/conflict-with-update-manager",
            "apply/custom-conflict",
        ),
        (
            "test.status",
            "test.body",
        ),
    ),
    Difference(
        "apply-keeps-dropped-fields",
        "A field a manager stops applying is removed by a real server, and list-map entries of other managers "
        "are kept; the sandbox merges each apply into the object as it is.",
        (
            "apply/same-manager-drops-field",
            "apply/labels",
            "apply/custom-list-map-merge",
        ),
        (
            "test.body.data.b",
            "test.body.metadata.labels.x",
            "test.body.spec.replicatedJobs",
        ),
    ),
    Difference(
        "apply-body-checks",
        "A real server rejects an apply whose body has no kind or names another object (400); the sandbox "
        "creates the object.",
        (
            "apply/missing-kind",
            "apply/name-mismatch",
        ),
        (
            "test.status",
            "test.body",
        ),
    ),
    Difference(
        "crd-validation-rules",
        "The sandbox does not evaluate a CRD's CEL rules (`x-kubernetes-validations`: immutable fields, "
        "cross-field rules); a real server does, and, when the schema already failed, adds a cause (field "
        "`<nil>`) saying the rules were not checked.",
        (
            "patch/merge/custom-list-replaced",
            "patch/json/custom-schema-violation",
            "apply/custom-schema-violation",
            "status/custom-status-schema-violation",
            "schema/workload-missing-queue-name",
            "schema/workload-wrong-type",
            "schema/workload-pod-set-missing-count",
            "schema/workload-pod-sets-immutable",
            "schema/workload-several-violations",
            "schema/cluster-queue-enum",
            "schema/cluster-queue-cel-preemption",
            "schema/local-queue-cel-immutable",
            "schema/local-queue-missing-cluster-queue",
            "schema/cohort-empty-parent",
            "schema/spec-not-an-object",
            "default/integer-float-rejected",
        ),
        (
            "test.status",
            "test.body",
            "test.body.details.causes",
        ),
    ),
    Difference(
        "json-patch-error-details",
        "A JSON patch that cannot be applied is a 422 on both; the sandbox adds details (name, kind, a cause "
        "without field) where a real server gives none.",
        (
            "patch/json/remove-missing",
            "patch/json/test-fails",
            "patch/json/bad-op",
        ),
        ("test.body.details",),
    ),
    Difference(
        "builtin-validation",
        "Kind-specific validation a real server does and the sandbox does not: finalizer names, ConfigMap "
        "keys, a Secret's immutable type, a namespace's status phase, the generated name and the namespace "
        "label derived from a too long name, and the exact field of a pod's container error.",
        (
            "patch/strategic/pod-new-container-rejected",
            "status/namespace-status-phase",
            "invalid/generate-name-invalid",
            "invalid/namespace-name-too-long",
            "invalid/finalizer-name",
            "invalid/configmap-key",
            "invalid/secret-type-immutable",
        ),
        (
            "test.status",
            "test.body",
            "test.body.details.causes",
            "test.body.details.causes[*]",
            "test.body.details.name",
        ),
    ),
    Difference(
        "status-writes-keep-metadata",
        "A write to the status subresource of a built-in kind keeps the labels it changes on a real server; "
        "the sandbox ignores everything but status.",
        (
            "status/node/status-labels",
            "status/pod/status-labels",
            "status/service/status-labels",
        ),
        (
            "test.body.metadata.labels",
            "test.body.metadata.labels.via",
            "test.body.metadata.resourceVersion",
        ),
    ),
    Difference(
        "pod-ips",
        "A real server fills a pod's `status.podIPs` from `status.podIP`; the sandbox stores the status as written.",
        (
            "status/pod/patch-status",
            "status/pod/patch-status-ignores-spec",
            "status/pod/put-status",
            "status/pod/get-status",
        ),
        ("test.body.status.podIPs",),
    ),
    Difference(
        "table-pod-restarts",
        "A pod's Restarts cell is text on a real server (`0`, or `3 (5m ago)` after a recent restart); the "
        "sandbox prints the count as a number.",
        (
            "crud/pod/table",
            "table/pod-with-status",
        ),
        ("test.body.rows[*].cells[*]",),
    ),
    Difference(
        "table-remaining-count",
        "A limited Table carries `remainingItemCount` on a real server; the sandbox gives it on lists but not "
        "on Tables.",
        ("table/limit",),
        ("test.body.metadata.remainingItemCount",),
    ),
    Difference(
        "gc-synchronous",
        "The sandbox's garbage collector works inside the delete request: an orphaning delete (the default for "
        "Jobs) removes the owner at once, where a real server answers with the owner held by the `orphan` "
        "finalizer and its garbage collector finishes later (one more write on the dependents).",
        (
            "crud/job/delete",
            "gc/orphan-response",
            "gc/orphan-dependent-kept",
            "gc/orphan-dependents-query",
            "gc/two-owners-one-left",
            "gc/job-default-orphans",
        ),
        (
            "test.body.metadata.deletionTimestamp",
            "test.body.metadata.deletionGracePeriodSeconds",
            "test.body.metadata.finalizers",
            "test.body.metadata.resourceVersion",
            "test.body.metadata.generation",
        ),
    ),
    Difference(
        "gc-dangling-owner",
        "An object whose owner never existed is collected by a real server's garbage collector; the sandbox "
        "collects dependents only when their owner is deleted.",
        ("gc/missing-owner-collected",),
        (
            "setup[*].wait",
            "test.status",
            "test.body",
        ),
    ),
    Difference(
        "last-finalizer-removal",
        "When an update removes the last finalizer, a real server answers with the resourceVersion the object "
        "had and its DELETED event carries the last stored state (finalizers included); the sandbox answers "
        "and sends the updated object.",
        (
            "watch/custom-finalizer",
            "watch/deleted-carries-last-state",
            "finalizer/remove-last-deletes",
            "finalizer/custom-remove-last",
        ),
        (
            "test.body.metadata.resourceVersion",
            "test.events[*].object.metadata.finalizers",
        ),
    ),
    Difference(
        "watch-bad-resource-version",
        "A watch from a resourceVersion that is not a number is a 500 on a real server (the watch cache fails "
        "to parse it) and a 400 BadRequest in the sandbox.",
        ("watch/bad-resource-version",),
        (
            "test.status",
            "test.body.code",
            "test.body.reason",
        ),
    ),
    Difference(
        "unknown-paths",
        "A path no API group serves is a plain-text `404 page not found` on a real server and a 404 Status in "
        "the sandbox; an unknown resource of a served group is a 404 Status without details on a real server.",
        (
            "list/unknown-resource",
            "list/unknown-group",
        ),
        (
            "test.body",
            "test.body.details",
        ),
    ),
    Difference(
        "continue-snapshot",
        "A continue token lists the snapshot of its first page's resourceVersion on a real server; the sandbox "
        "lists the current objects after the token's key, later writes included.",
        ("list/continue/sees-later-writes",),
        ("test.body.items",),
    ),
    Difference(
        "unknown-fields-of-built-ins",
        "A real server drops fields that a built-in kind (or ObjectMeta) does not have, and with "
        "`fieldValidation=Strict` rejects them; the sandbox keeps unknown fields of built-in kinds and of "
        "metadata.",
        (
            "error/unknown-field-kept-or-dropped",
            "error/strict-unknown-field",
            "prune/unknown-metadata-field",
        ),
        (
            "test.status",
            "test.body",
            "test.body.unknownTop",
            "test.body.metadata.bogus",
        ),
    ),
    Difference(
        "request-option-validation",
        "Invalid request options (`fieldValidation`, `dryRun`, `propagationPolicy`) are a 422 Invalid on the "
        "options kind (`CreateOptions`, `DeleteOptions`) on a real server; the sandbox ignores an unknown "
        "fieldValidation, answers 400 for dryRun, and names the object for propagationPolicy.",
        (
            "error/bad-field-validation-value",
            "error/dry-run-bad-value",
            "gc/bad-propagation-policy",
        ),
        (
            "test.status",
            "test.body",
            "test.body.code",
            "test.body.reason",
            "test.body.details",
            "test.body.details.*",
        ),
    ),
    Difference(
        "status-details-kind",
        "Which name a Status's `details.kind` carries (the Kind or the resource, `pods/binding` for a binding) "
        "and whether a 404 for a missing subresource has details differ between the servers.",
        (
            "status/no-status-subresource",
            "error/custom-put-without-resource-version",
            "error/delete-precondition-uid",
            "error/delete-precondition-resource-version",
            "pod/bind-twice",
        ),
        (
            "test.body.details",
            "test.body.details.kind",
        ),
    ),
    Difference(
        "collection-delete-answer",
        "A delete of a collection is answered by a real server with the list of the objects it deleted; the "
        "sandbox answers with a Status Success.",
        (
            "collection/delete-by-label",
            "collection/custom",
        ),
        ("test.body",),
    ),
    Difference(
        "table-metadata",
        "The Table of a single object and of a watch event carries the object's resourceVersion in its "
        "metadata on a real server; the sandbox leaves that metadata empty.",
        (
            "watch/table",
            "table/single-object",
            "table/custom-single-object",
        ),
        (
            "test.body.metadata.resourceVersion",
            "test.events[*].object.metadata.resourceVersion",
        ),
    ),
    Difference(
        "namespace-removed-at-once",
        "The sandbox removes a deleted namespace and its contents within the delete; a real server's namespace "
        "stays Terminating until its namespace controller has emptied it, seconds later.",
        ("crud/namespace/get-deleted",),
        (
            "test.status",
            "test.body",
        ),
    ),
    Difference(
        "namespace-deletion-conditions",
        "A real server's namespace controller reports the progress of a namespace's deletion in "
        "`status.conditions` (content remaining, finalizers remaining); the sandbox sets only the Terminating "
        "phase (and so does not write the namespace again).",
        ("namespace/held-by-finalizer",),
        (
            "test.body.status.conditions",
            "test.body.metadata.resourceVersion",
            "setup[*].wait",
        ),
    ),
    Difference(
        "strategic-merge-order-and-defaults",
        "A strategic merge patch puts the patch's new list entries first on a real server (last in the "
        "sandbox), and a real server defaults the merged result again (a new port's `targetPort`, `protocol`; "
        "the pod's default tolerations, which it re-adds on update).",
        (
            "patch/strategic/pod-add-toleration",
            "patch/strategic/service-port-merged",
            "patch/strategic/service-port-deleted",
        ),
        (
            "test.body.spec.ports[*].*",
            "test.body.spec.tolerations",
        ),
    ),
    Difference(
        "service-status-validation",
        "A real server validates a Service's load-balancer status (an ingress needs a LoadBalancer Service); "
        "the sandbox stores it.",
        (
            "status/service/patch-status",
            "status/service/patch-status-ignores-spec",
            "status/service/put-status",
            "status/service/get-status",
            "status/service/status-labels",
        ),
        (
            "test.status",
            "test.body",
            "setup[*]",
            "test.body.metadata.resourceVersion",
            "test.body.status.loadBalancer.ingress",
        ),
    ),
    Difference(
        "event-apis-stored-apart",
        "On a real server the two Event APIs (core/v1 and events.k8s.io/v1) are two views of the same objects; "
        "the sandbox stores them apart, so an event posted through one is not found through the other.",
        (
            "crud/event/core-event-through-events-api",
            "crud/event/events-api-event-through-core",
        ),
        (
            "test.status",
            "test.body",
        ),
    ),
    Difference(
        "events-api-deprecated-source",
        "An events.k8s.io/v1 Event always carries `deprecatedSource` (an empty object) on a real server; the "
        "sandbox leaves it out.",
        ("crud/event/events-api-create",),
        ("test.body.deprecatedSource",),
    ),
)
