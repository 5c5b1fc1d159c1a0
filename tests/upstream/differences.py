"""The deliberate differences between gangq's embedded JobSet reconciler and the upstream JobSet
controller, as the differential test (``test_jobset_differential.py``) sees them: each entry names
the cases it applies to and the paths (``<snapshot>.<field path>`` of the normalised state, the
children keyed by name) at which they differ, and says why the difference is kept
(docs/jobset.md, "Held to upstream", lists them too).

A case an entry applies to must differ at one of its paths at least, and only at paths the
entries applying to it cover: a difference that goes away, or a new one, fails the test.
Patterns: ``*`` matches any run of characters, ``[*]`` any list index.
"""

from __future__ import annotations

from tests.conformance.differences import Difference

from .cases import CASES


def _has_service(obj: dict) -> bool:  # type: ignore[type-arg]
    spec = obj["spec"]
    return bool(spec["network"]["enableDNSHostnames"]) and not spec.get("managedBy")


DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        "service-label",
        "gangq labels the headless Service `jobset.sigs.k8s.io/jobset-name: <jobset>` (upstream sets no "
        "label): the embedded controller watches Services with that label selector, so that a deleted "
        "Service is recreated without caching every Service of the cluster.",
        tuple(c.name for c in CASES if _has_service(c.obj)),
        ("*.services.*.metadata.labels",),
    ),
    Difference(
        "queued-jobset-has-no-children",
        "A suspended JobSet that has no Job of its current attempt (a queued JobSet) gets no Jobs and no "
        "Service until it is resumed (jobset#535); upstream creates all of them at once, suspended. The "
        "Jobs created at the resumption therefore never were suspended: their status has no "
        "`Suspended=False` (JobResumed) condition.",
        ("created-suspended",),
        ("queued.jobs.*", "queued.services.*", "queued.jobset.status.replicatedJobsStatus[*].suspended",
         "final.jobs.*.status.conditions"),
    ),
    Difference(
        "framework-wiring",
        "The opt-in `gangq.io/framework` annotation injects the framework's environment variables into "
        "every container; upstream ignores the annotation.",
        ("framework-pytorch",),
        ("final.jobs.*.spec.template.spec.containers[*].env",),
    ),
)
