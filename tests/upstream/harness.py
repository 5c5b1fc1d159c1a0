"""Runs a set of JobSet cases under one JobSet controller on a real control plane and records what
the controller made of each: the child Jobs, the Services, the JobSet's status and its Events,
normalised so that two runs in two namespaces compare equal when the controllers behave alike.

A case is a fully specified JobSet (what upstream's defaulting webhook would have stored), a
script that acts on it while it runs (suspend, resume, delete, patch), and a predicate saying when
it has ended. Its snapshots: ``final`` once it has ended and nothing changes any more, and any
milestone the script records on the way.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import http.client
import json
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gangq.sandbox.errors import ApiError
from tests.clusters import RealCluster

GROUP, PLURAL = "jobset.x-k8s.io", "jobsets"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
INF = -1  # run-seconds: forever

JsonObj = dict[str, Any]


# --- building fully specified JobSets -------------------------------------------------------------


def rjob(name: str, *, replicas: int = 1, pods: int = 1, completions: int | None = None,
         mode: str = "Indexed", backoff: int = 0, group: str = "default", run: float = 1, exit: int = 0,
         start_delay: float | None = None, restart: str = "Never", depends_on: list[JsonObj] | None = None,
         job_meta: JsonObj | None = None, pod_meta: JsonObj | None = None, job_spec: JsonObj | None = None,
         pod_spec: JsonObj | None = None) -> JsonObj:
    """One replicatedJob whose pods run ``run`` seconds on kwok's nodes and exit with ``exit``."""
    annotations = {"sandbox.gangq.io/run-seconds": str(run), "sandbox.gangq.io/exit-code": str(exit)}
    if start_delay is not None:
        annotations["sandbox.gangq.io/start-delay-seconds"] = str(start_delay)
    meta = copy.deepcopy(pod_meta or {})
    meta["annotations"] = {**annotations, **meta.get("annotations", {})}
    spec: JsonObj = {"restartPolicy": restart, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "100m"}}}], **(pod_spec or {})}
    out: JsonObj = {"name": name, "replicas": replicas, "groupName": group, "template": {
        **({"metadata": job_meta} if job_meta else {}),
        "spec": {"parallelism": pods, "completions": pods if completions is None else completions,
                 "completionMode": mode, "backoffLimit": backoff, **(job_spec or {}),
                 "template": {"metadata": meta, "spec": spec}}}}
    if depends_on:
        out["dependsOn"] = depends_on
    return out


def jobset(name: str, rjobs: list[JsonObj], *, success: JsonObj | None = None, startup: str = "AnyOrder",
           failure: JsonObj | None = None, network: JsonObj | None = None, labels: JsonObj | None = None,
           annotations: JsonObj | None = None, **spec: Any) -> JsonObj:
    """A JobSet with every field upstream's webhook defaults set (its webhook does not run here)."""
    net = {"enableDNSHostnames": True, "publishNotReadyAddresses": True, **(network or {})}
    full: JsonObj = {"replicatedJobs": rjobs, "successPolicy": success or {"operator": "All"},
                     "startupPolicy": {"startupPolicyOrder": startup}, "network": net, **spec}
    if failure is not None:
        failure = {"restartStrategy": "Recreate", **failure}
        failure["rules"] = [{"name": f"failurePolicyRule{i}", **r} for i, r in enumerate(failure.get("rules", []))]
        full["failurePolicy"] = failure
    meta: JsonObj = {"name": name}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": f"{GROUP}/v1alpha2", "kind": "JobSet", "metadata": meta, "spec": full}


# --- cases ------------------------------------------------------------------------------------------


def _terminal(run: Run) -> bool:
    return run.condition("Completed") or run.condition("Failed")


@dataclass
class Case:
    """``obj``: the JobSet; ``script(run)``: what the test does while it runs; ``done(run)``: when it has ended."""

    obj: JsonObj
    script: Callable[[Run], None] | None = None
    done: Callable[[Run], bool] = _terminal
    timeout: float = 60.0

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


@dataclass
class Outcome:
    snapshots: dict[str, JsonObj] = field(default_factory=dict)
    error: str | None = None


# One line of upstream's JobCreationFailed message (its errors joined by newlines).
_CREATE_CONFLICT = re.compile(
    r'job "[^"]+" creation failed with error: (?:object is being deleted: )?\S+ "[^"]+" already exists')


def stale_cache_retry(event: JsonObj) -> bool:
    """A JobCreationFailed Event all of whose errors are "already exists": the controller created a
    Job, reconciled again before its informer cache showed that Job, and created it again. The API
    server refuses the second create and the next reconcile sees the Job, so nothing about the JobSet
    differs; whether the race happens depends only on watch latency (upstream keeps no record of the
    creates in flight), so it is not part of what the controllers decide."""
    if event.get("reason") != "JobCreationFailed":
        return False
    lines = str(event.get("message", "")).splitlines()
    return bool(lines) and all(_CREATE_CONFLICT.fullmatch(line) for line in lines)


class EventLog:
    """Every Event of a namespace, in the order the API server created them (a watch), each in its
    latest version (an Event recorder that sees the same Event again raises its ``count``)."""

    def __init__(self, cluster: RealCluster, namespace: str) -> None:
        endpoint = cluster.store.endpoint
        self._conn = endpoint._connect(timeout=600)
        self._conn.request("GET", f"/api/v1/namespaces/{namespace}/events?watch=1&timeoutSeconds=600",
                           headers=endpoint._headers(None, None, None))
        self._resp = self._conn.getresponse()
        assert self._resp.status == 200, self._resp.read()
        self._lock = threading.Lock()
        self._events: dict[str, JsonObj] = {}  # by uid, in order of creation
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError, http.client.HTTPException, AttributeError):
            while line := self._resp.readline():
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    with self._lock:
                        self._events[event["object"]["metadata"]["uid"]] = event["object"]

    def of(self, name: str) -> list[JsonObj]:
        """The JobSet ``name``'s Events as ``{type, reason, message, count}``: one entry per distinct
        Event in order of first creation, its count the times it was posted (upstream's recorder counts
        repeats on one Event, gangq posts each). A failed creation of Jobs that already exist is left
        out (``stale_cache_retry``)."""
        out: dict[tuple[str, str, str], JsonObj] = {}
        with self._lock:
            events = list(self._events.values())
        for e in events:
            if e["involvedObject"].get("kind") != "JobSet" or e["involvedObject"].get("name") != name:
                continue
            if stale_cache_retry(e):
                continue
            key = (e.get("type", ""), e.get("reason", ""), e.get("message", ""))
            entry = out.setdefault(key, {"type": key[0], "reason": key[1], "message": key[2], "count": 0})
            entry["count"] += e.get("count") or 1
        return list(out.values())

    def close(self) -> None:
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(2)
        self._conn.close()
        self._thread.join(5)


class Run:
    """One case in one namespace: reads, writes and snapshots for its script."""

    def __init__(self, cluster: RealCluster, namespace: str, case: Case, events: EventLog) -> None:
        self.store = cluster.store
        self.ns = namespace
        self.case = case
        self.name = case.name
        self.events = events
        self.outcome = Outcome()

    # reads
    def jobset(self) -> JsonObj | None:
        try:
            return self.store.get(GROUP, PLURAL, self.ns, self.name)  # type: ignore[no-any-return]
        except ApiError as err:
            if err.code == 404:
                return None
            raise

    def _children(self, group: str, plural: str) -> list[JsonObj]:
        items = self.store.list(group, plural, self.ns, label_selector=f"{JOBSET_NAME}={self.name}")["items"]
        return sorted(items, key=lambda o: o["metadata"]["name"])

    def jobs(self) -> list[JsonObj]:
        return self._children("batch", "jobs")

    def pods(self) -> list[JsonObj]:
        return self._children("", "pods")

    def condition(self, ctype: str) -> bool:
        js = self.jobset() or {}
        return any(c["type"] == ctype and c["status"] == "True" for c in (js.get("status") or {}).get("conditions", []))

    def running_pods(self) -> list[JsonObj]:
        return [p for p in self.pods() if (p.get("status") or {}).get("phase") == "Running"]

    def rjob_status(self, **want: int) -> bool:
        """Whether every entry of ``status.replicatedJobsStatus`` has the counts of ``want``."""
        statuses = ((self.jobset() or {}).get("status") or {}).get("replicatedJobsStatus") or [{}]
        return all(all(s.get(k) == v for k, v in want.items()) for s in statuses)

    def restarts(self) -> int:
        return int(((self.jobset() or {}).get("status") or {}).get("restarts", 0))

    # waits and writes
    def wait(self, cond: Callable[[], Any], what: str, timeout: float | None = None) -> Any:
        deadline = time.monotonic() + (timeout or self.case.timeout)
        while time.monotonic() < deadline:
            value = cond()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: timed out waiting for {what}")

    def patch(self, patch: Any, kind: str = "merge") -> None:
        self.store.patch(GROUP, PLURAL, self.ns, self.name, patch, kind)

    def delete(self) -> None:
        self.store.delete(GROUP, PLURAL, self.ns, self.name, propagation_policy="Background")

    def milestone(self, label: str) -> None:
        """What the controller has made so far; the Jobs' status (the Job controller's, taken at an
        arbitrary moment of their pods' lives) left out."""
        state = normalise(self.ns, self.state())
        for job in state["jobs"]:
            job.pop("status", None)
        self.outcome.snapshots[label] = state

    # snapshots
    def services(self) -> list[JsonObj]:
        """The headless Service, found by its name (upstream's carries no label)."""
        subdomain = (self.case.obj["spec"].get("network") or {}).get("subdomain") or self.name
        try:
            return [self.store.get("", "services", self.ns, subdomain)]
        except ApiError as err:
            if err.code == 404:
                return []
            raise

    def state(self) -> JsonObj:
        return {"jobset": self.jobset(), "jobs": self.jobs(), "services": self.services()}

    def settle(self, quiet: float = 1.5) -> JsonObj:
        """The state once it has not changed for ``quiet`` seconds and no child is being deleted."""
        last, since = None, time.monotonic()
        deadline = time.monotonic() + self.case.timeout
        while time.monotonic() < deadline:
            state = normalise(self.ns, self.state())
            jobs = self.jobs()
            # a finished JobSet's controller deletes the Jobs still running: wait for that too
            deleting = any(o["metadata"].get("deletionTimestamp") for o in jobs) or (
                _finished(state["jobset"]) and any(not _finished(j) for j in jobs))
            if state != last or deleting:
                last, since = state, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return state
            time.sleep(0.25)
        raise AssertionError(f"{self.name}: its state kept changing (or a finished JobSet kept a running Job)")

    def execute(self) -> Outcome:
        try:
            self.store.create(GROUP, PLURAL, copy.deepcopy(self.case.obj), namespace=self.ns)
            if self.case.script is not None:
                self.case.script(self)
            self.wait(lambda: self.case.done(self), "its end")
            self.outcome.snapshots["final"] = self.settle()
        except Exception as err:  # reported per case by the test
            self.outcome.error = f"{type(err).__name__}: {err}"
        return self.outcome


def _finished(obj: JsonObj | None) -> bool:
    """A JobSet or Job with a True Completed, Complete or Failed condition."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Completed", "Complete", "Failed") and c["status"] == "True" for c in conditions)


def run_cases(cluster: RealCluster, namespace: str, cases: list[Case]) -> dict[str, Outcome]:
    """Every case side by side in ``namespace`` (fresh), under whichever controller runs now."""
    cluster.store.create("", "namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": namespace}})
    deadline = time.monotonic() + 30
    while True:  # pods need the namespace's default ServiceAccount
        try:
            cluster.store.get("", "serviceaccounts", namespace, "default")
            break
        except ApiError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    events = EventLog(cluster, namespace)
    try:
        with ThreadPoolExecutor(len(cases)) as pool:
            runs = [Run(cluster, namespace, case, events) for case in cases]
            outcomes = list(pool.map(Run.execute, runs))
        time.sleep(1.0)  # Events posted after the last status write
        for run, outcome in zip(runs, outcomes, strict=True):
            if "final" in outcome.snapshots:
                outcome.snapshots["final"]["events"] = normalise(namespace, events.of(run.name))
    finally:
        events.close()
    return {run.name: outcome for run, outcome in zip(runs, outcomes, strict=True)}


# --- normalisation ----------------------------------------------------------------------------------

_META_DROPPED = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "namespace",
                 "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")
# A pod's generated name in a message (the Job controller's "for pod <ns>/<job>-<index>-abcde").
_POD_SUFFIX = re.compile(r"(pod <ns>/[a-z0-9-]+-)[a-z0-9]{5}\b")
# Times, and the Job controller's bookkeeping of pods in flight.
_TIMES = frozenset({"lastTransitionTime", "lastProbeTime", "lastUpdateTime", "startTime", "completionTime",
                    "uncountedTerminatedPods", "terminating", "firstTimestamp", "lastTimestamp", "eventTime"})


def normalise(namespace: str, state: Any) -> Any:
    """uids, times, resourceVersions and the namespace taken out; what is left is what a controller
    decided (plus what the API server and the Job controller added to it, the same for both)."""
    uids: dict[str, str] = {}
    if isinstance(state, dict) and state.get("jobset"):
        uids[state["jobset"]["metadata"]["uid"]] = "<jobset-uid>"
    for job in (state.get("jobs") or []) if isinstance(state, dict) else []:
        uids[job["metadata"]["uid"]] = "<job-uid>"
        digest = hashlib.sha1(f"{namespace}/{job['metadata']['name']}".encode()).hexdigest()
        uids[digest] = "<job-key>"

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            dropped = _META_DROPPED if key == "metadata" else _TIMES
            return {k: walk(v, k) for k, v in value.items() if k not in dropped}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if isinstance(value, str):
            if value in uids:
                return uids[value]
            return _POD_SUFFIX.sub(r"\1<pod>", value.replace(namespace, "<ns>"))
        return value

    return walk(state)
