"""Apply the bad-input corpus through a cluster's API server with the controller running, and say
how each case ended.

The whole corpus is applied first, then every accepted case is polled at once (one list per kind
per round) until it is reported or :data:`POLL_SECONDS` pass: 190 cases cost one minute at most,
not one timeout each. Afterwards the controller must still be alive: its thread has not failed,
no event made it log an error (``Kinds.apply`` survives an exception but drops the event: bad
input silently ignored), and a good JobSet submitted last is admitted and finishes.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from gangq.sandbox.errors import ApiError
from tests.badinput.corpus import LOCAL_QUEUE, NAMESPACE, Case, base_objects, jobset
from tests.clusters import Cluster, is_real
from tests.operator.helpers import (
    FakeJobSetRunner,
    admitted,
    finished,
    install,
    operator_config,
    start_operator,
    wait_for,
)

Observed = Literal["rejected", "reported", "accepted", "setup-failed"]
POLL_SECONDS: Final = 60.0
GOOD_JOBSET: Final = "bi-good"
RESOURCES: Final[dict[str, tuple[str, str, bool]]] = {
    "Namespace": ("", "namespaces", False),
    "ResourceFlavor": ("gangq.io", "resourceflavors", False),
    "ClusterQueue": ("gangq.io", "clusterqueues", False),
    "Cohort": ("gangq.io", "cohorts", False),
    "LocalQueue": ("gangq.io", "localqueues", True),
    "WorkloadPriorityClass": ("gangq.io", "workloadpriorityclasses", False),
    "JobSet": ("jobset.x-k8s.io", "jobsets", True),
    "Workload": ("gangq.io", "workloads", True),
}
REPORTING_KINDS: Final = ("ClusterQueue", "LocalQueue", "Cohort")


@dataclass
class Observation:
    """How one case ended on one plane: ``rejected`` (with the API server's error), ``reported``
    (with the reason and message), ``accepted`` (neither: silently taken) or ``setup-failed``."""

    case: Case
    outcome: Observed = "accepted"
    reason: str = ""
    text: str = ""
    state: str = ""

    @property
    def names_field(self) -> bool:
        return self.case.expected_text in self.text if self.outcome == "reported" else self.case.field in self.text

    def as_expected(self, plane: str) -> bool:
        """The case ended as the corpus says, with the field named (and the reason expected)."""
        if self.outcome != self.case.outcome_on(plane) or not self.names_field:
            return False
        if self.outcome == "rejected":
            return True
        if self.reason != self.case.reason:
            return False
        return self.case.subject["kind"] != "JobSet" or self.reason != "InvalidSpec" or self.state == "Inadmissible"

    def describe(self) -> str:
        return f"{self.case.name}: {self.outcome} {self.reason} {self.text[:300]!r}"


@dataclass
class Run:
    """The observations of one corpus run, and what the controller did around it."""

    plane: str
    observations: list[Observation] = field(default_factory=list)
    controller_errors: list[str] = field(default_factory=list)
    operator_error: str | None = None
    good_jobset_finished: bool = False
    seconds: float = 0.0

    def unexpected(self) -> list[str]:
        return [o.describe() for o in self.observations if not o.as_expected(self.plane)]


def _create(cluster: Cluster, obj: dict[str, Any]) -> None:
    group, plural, namespaced = RESOURCES[obj["kind"]]
    ns = obj["metadata"].get("namespace", NAMESPACE) if namespaced else None
    cluster.call(cluster.store.create, group, plural, copy.deepcopy(obj), namespace=ns)


def error_text(err: ApiError) -> str:
    """The API server's message and every cause's field and message."""
    causes = (err.details or {}).get("causes") or []
    parts = [err.message] + [f"{c.get('field', '')}: {c.get('message', '')}" for c in causes if isinstance(c, dict)]
    return "\n".join(parts)


def _apply_case(cluster: Cluster, case: Case) -> Observation:
    obs = Observation(case)
    for i, obj in enumerate(case.objects):
        try:
            _create(cluster, obj)
        except ApiError as err:
            if not 400 <= err.code < 500:
                raise
            obs.outcome = "rejected" if i == len(case.objects) - 1 else "setup-failed"
            obs.text = error_text(err)
            return obs
    return obs


def _list(cluster: Cluster, kind: str) -> list[dict[str, Any]]:
    group, plural, namespaced = RESOURCES[kind]
    items: list[dict[str, Any]] = cluster.call(cluster.store.list, group, plural,
                                               NAMESPACE if namespaced else None)["items"]
    return items


def _reports(cluster: Cluster) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(kind, name) → (reason, message, state) of every report visible now: a JobSet's Workload
    that is not plainly queued, a queue object whose ``Active`` condition is False."""
    out: dict[tuple[str, str], tuple[str, str, str]] = {}
    for wl in _list(cluster, "Workload"):
        status = wl.get("status") or {}
        owner = next((r["name"] for r in wl["metadata"].get("ownerReferences") or [] if r.get("kind") == "JobSet"),
                     None)
        if owner and status.get("state") in ("Inadmissible", "Pending") and status.get("reason") != "Pending":
            out[("JobSet", owner)] = (str(status.get("reason")), str(status.get("message")), str(status["state"]))
    for kind in REPORTING_KINDS:
        for obj in _list(cluster, kind):
            for cond in (obj.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "Active" and cond.get("status") == "False":
                    out[(kind, obj["metadata"]["name"])] = (str(cond.get("reason")), str(cond.get("message")), "")
    return out


def _targets(case: Case) -> list[tuple[str, str]]:
    if case.watch is not None:
        return [case.watch]
    return [(o["kind"], o["metadata"]["name"]) for o in reversed(case.objects)
            if o["kind"] in (*REPORTING_KINDS, "JobSet")]


def _poll(cluster: Cluster, waiting: list[Observation], plane: str) -> None:
    deadline = time.monotonic() + POLL_SECONDS
    while True:
        reports = _reports(cluster)
        for obs in waiting:
            for target in _targets(obs.case):
                if target in reports:
                    obs.outcome = "reported"
                    obs.reason, obs.text, obs.state = reports[target]
                    break
        if all(o.as_expected(plane) for o in waiting) or time.monotonic() > deadline:
            return
        time.sleep(0.5)


class _ErrorLog(logging.Handler):
    """Collects the controller's ERROR records (an event it could not apply, a failed thread)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


@contextmanager
def _errors_logged() -> Iterator[_ErrorLog]:
    handler = _ErrorLog()
    logger = logging.getLogger("gangq")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def run_corpus(cluster: Cluster, corpus: list[Case]) -> Run:
    """Apply ``corpus`` on ``cluster`` (fresh, gangq's CRDs not yet installed on a sandbox) with the
    controller running; see the module docstring."""
    plane = "real" if is_real(cluster) else "emulated"
    run = Run(plane)
    started = time.monotonic()
    install(cluster)
    for obj in base_objects():
        _create(cluster, obj)
    with _errors_logged() as errors:
        op = start_operator(cluster, operator_config())
        try:
            run.observations = [_apply_case(cluster, case) for case in corpus]
            _poll(cluster, [o for o in run.observations if o.outcome == "accepted"], plane)
            with FakeJobSetRunner(cluster, pods=False):
                _create(cluster, jobset(GOOD_JOBSET, queue=LOCAL_QUEUE, replicas=2))
                try:
                    wait_for(lambda: admitted(cluster, GOOD_JOBSET, NAMESPACE), 30, "the good JobSet's admission")
                    wait_for(lambda: finished(cluster, GOOD_JOBSET, NAMESPACE), 30, "the good JobSet to finish")
                    run.good_jobset_finished = True
                except AssertionError:
                    run.good_jobset_finished = False
            run.operator_error = None if op.error is None else repr(op.error)
        finally:
            op.stop()
        run.controller_errors = list(errors.messages)
    run.seconds = time.monotonic() - started
    return run
