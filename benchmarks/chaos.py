"""Chaos: a burst of gangs through two ``gangq run`` replicas with leader election while faults hit
the controllers and the API server; an independent watcher checks gangq's safety rules at every
watch event.

    python benchmarks/chaos.py [--quick] [--control-plane emulated|real] [--seed N] --json OUT.json

The cluster: 4 nodes of 8 cpu, two ClusterQueues of 12 cpu in one cohort (they borrow from each
other; ``withinClusterQueue: LowerPriority``, ``reclaimWithinCohort: Any``), two
WorkloadPriorityClasses. The gangs: JobSets of 1–3 pods of 1–4 cpu that run 2–5 s, a fifth of them
high priority, submitted over the first part of the run (300; ``--quick`` 60). Each replica is
``python -m gangq.operator run`` with the embedded JobSet reconciler, talking to the API server
through a fault-injecting proxy (:mod:`gangq.controlplane.faultproxy`, on both control planes);
the watcher and the runner talk to the API server directly.

Faults, at random moments (seeded), each kind in turn in a shuffled order: ``kill9_leader``,
``kill9_standby`` (restarted a second later, as a Deployment would), ``sigterm_leader_in_burst``
(SIGTERM to the leader half a second after a burst of submissions), ``drop_watches``,
``expire_watches`` (every stream ended with an ERROR 410 event, as for a too old
resourceVersion), ``storm_5xx`` and
``storm_429`` (half of all requests for 4 s), ``conflicts_409`` (half of the JobSet patches for
4 s), ``latency`` (300 ms on every request for 5 s); on the real control plane also
``apiserver_restart`` and ``etcd_kill9`` (restarted with its data kept).

A leader that cannot renew its Lease within two thirds of its duration (an API-server restart longer than
that) stops leading and exits, as controller-runtime's managers do; the run starts it again and
lists it in ``unplanned_controller_exits``.

The watcher's rules, each a violation when broken:

- ``unsuspended_without_admission``: a JobSet runs without the ``gangq.io/admission`` record;
- ``over_quota``: at an admission, the running JobSets of a ClusterQueue — with the evicted ones
  whose pods still run, charged with the admission their eviction record names — use more cpu
  than it may (its nominal quota plus what it may borrow), or the cohort's more than its queues'
  nominal quotas together. A pod counts as still running unless its deletion's resourceVersion
  comes before the admission's (checked once the pods' watch stream has passed the admission's
  resourceVersion: pods and JobSets come through separate streams);
- ``over_nodes``: those JobSets use more cpu than the nodes have;
- ``suspended_without_eviction_record``: a running JobSet is suspended without a new
  ``gangq.io/eviction`` record (written in the suspending patch itself);
- ``admitted_twice``: a running JobSet's admission record changes without a suspension between;
- ``partly_running``: an admitted gang has some pods running and others not for more than 30 s
  (outside API-server outages; read again from the API server before it counts).

On the real control plane kwok plays the kubelet; it drops a pod's completion when the API
server answers its status patch with an error it does not retry (500, while etcd restarts), so the
run sets an annotation on a pod still Running 15 s past its run time, and kwok plays the pod's
stages again, as a kubelet retries its status updates (``pods_kubelet_retried`` lists them).

At the end every gang must have finished. Writes ``{"faults_injected", "faults_by_kind",
"violations", "violation_examples", "gangs_submitted", "gangs_finished", "max_recovery_seconds",
"leader_failovers", ...}``: ``max_recovery_seconds`` is, over the faults, the longest time from the
end of a fault to the next admission (while gangs were waiting); ``failover_seconds`` the times from
a leader's death to a new leader holding the Lease (a fault that kills the leader first waits up to the
lease duration + 5 s for a live replica to hold it; ``failovers_not_seen_details`` names each kill
after which no leader came, or before which none was). Targets: every fault kind injected, 0 violations,
every gang finished, failover ≤ lease duration + 5 s; the exit code is 1 when one is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gangq.api.quantity import parse_quantity  # noqa: E402
from gangq.controlplane.faultproxy import FaultProxy  # noqa: E402
from gangq.jobset.reconciler import parse_time  # noqa: E402
from gangq.sandbox.runtime import free_port  # noqa: E402

NODES = "4x{cpu:8,memory:32Gi}"
NODE_CPU_MILLI = 4 * 8000
QUEUES = {"cq-a": 12, "cq-b": 12}  # nominal cpu; each may borrow all of the other's
LEASE_DURATION = 6.0
GRACE_SECONDS = 30.0
SETTLE_SECONDS = 2.0  # a quota check waits at least this long for pod deletions reported late (Watcher.admitted_at)
CATCH_UP_SECONDS = 120.0  # ... and at most this long past it for the pods' watch to reach the admission
JS_PATH = "/apis/jobset.x-k8s.io/v1alpha2"
RUN_SECONDS = "sandbox.gangq.io/run-seconds"
COMMON_FAULTS = ("kill9_leader", "kill9_standby", "sigterm_leader_in_burst", "drop_watches", "expire_watches",
                 "storm_5xx", "storm_429", "conflicts_409", "latency")
REAL_FAULTS = ("apiserver_restart", "etcd_kill9")
KUBELET_RETRY_AFTER = 15.0  # seconds past a pod's run time before its status update is retried (real plane)


# ----------------------------------------------------------------------------------------------
# The control planes
# ----------------------------------------------------------------------------------------------

class EmulatedPlane:
    """The sandbox (API emulator with nodes, scheduler, Job controller and kubelet) in its own process."""

    name = "emulated"
    lease_namespace = "default"
    faults = COMMON_FAULTS

    def __init__(self, tmp: Path) -> None:
        from gangq.sandbox.runtime import Sandbox

        self.sb = Sandbox(mode="subprocess", nodes=NODES, kubeconfig=tmp / "admin.kubeconfig").start()
        self.url = self.sb.url
        self.ca_file: Path | None = None
        self.token = ""
        self.controller_token = "sandbox"
        self.admin_kubeconfig = self.sb.kubeconfig

    def install(self) -> None:
        from gangq.operator.install import install_crds
        from gangq.operator.kube import Credentials, KubeClient

        async def go() -> None:
            client = KubeClient(Credentials.load(self.admin_kubeconfig))
            try:
                await install_crds(client)
            finally:
                await client.close()

        asyncio.run(go())

    def restart(self, name: str, *, hard: bool) -> None:
        raise NotImplementedError(name)

    def stop(self) -> None:
        self.sb.stop()


class RealPlane:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (``gangq.controlplane``)."""

    name = "real"
    faults = COMMON_FAULTS + REAL_FAULTS

    def __init__(self, tmp: Path) -> None:
        from gangq.controlplane.launcher import ControlPlane
        from gangq.controlplane.pki import CONTROLLER_NAMESPACE

        self.lease_namespace = CONTROLLER_NAMESPACE
        self.cp = ControlPlane(workdir=tmp / "control-plane", nodes=NODES,
                               announce=lambda line: print(line, file=sys.stderr))
        self.cp.start()
        self.url = self.cp.url
        self.ca_file = self.cp.pki.ca_cert
        self.token = self.cp.pki.identities["admin"].token
        self.controller_token = self.cp.pki.identities["controller"].token
        self.admin_kubeconfig = self.cp.kubeconfig("admin")

    def install(self) -> None:
        from gangq.controlplane.install import install

        install(self.cp, embedded_jobset=True)

    def restart(self, name: str, *, hard: bool) -> None:
        self.cp.restart(name, hard=hard, down_seconds=1.0)

    def stop(self) -> None:
        self.cp.stop()


Plane = EmulatedPlane | RealPlane


# ----------------------------------------------------------------------------------------------
# The objects
# ----------------------------------------------------------------------------------------------

def queue_objects() -> list[dict[str, Any]]:
    g = "gangq.io/v1alpha1"
    docs: list[dict[str, Any]] = [
        {"apiVersion": g, "kind": "ResourceFlavor", "metadata": {"name": "default"}, "spec": {"nodeLabels": {}}},
        {"apiVersion": g, "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 100},
        {"apiVersion": g, "kind": "WorkloadPriorityClass", "metadata": {"name": "low"}, "value": 0},
    ]
    for name, cpu in QUEUES.items():
        docs.append({"apiVersion": g, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": {
            "cohort": "pool",
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": "default", "resources": [
                {"name": "cpu", "nominalQuota": str(cpu)}, {"name": "memory", "nominalQuota": "96Gi"}]}]}],
        }})
        docs.append({"apiVersion": g, "kind": "LocalQueue", "metadata": {"name": name.replace("cq", "lq"),
                                                                         "namespace": "default"},
                     "spec": {"clusterQueue": name}})
    return docs


@dataclass
class Gang:
    name: str
    queue: str
    pods: int
    cpu: int
    run_seconds: float
    priority: str

    def jobset(self) -> dict[str, Any]:
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": self.name, "namespace": "default",
                         "labels": {"gangq.io/queue-name": self.queue, "gangq.io/priority-class": self.priority}},
            "spec": {"suspend": True, "replicatedJobs": [{"name": "w", "replicas": self.pods, "template": {"spec": {
                "parallelism": 1, "completions": 1, "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": {RUN_SECONDS: str(self.run_seconds)}},
                    "spec": {"restartPolicy": "Never", "containers": [{
                        "name": "c", "image": "busybox",
                        "resources": {"requests": {"cpu": str(self.cpu), "memory": "1Gi"}}}]},
                }}}}]},
        }


def plan(count: int, rng: random.Random) -> list[Gang]:
    return [Gang(f"g{i:04d}", rng.choice(["lq-a", "lq-b"]), rng.randint(1, 3), rng.randint(1, 4),
                 round(rng.uniform(2.0, 5.0), 1), "high" if rng.random() < 0.2 else "low") for i in range(count)]


# ----------------------------------------------------------------------------------------------
# The API, directly (the runner and the watcher are not behind the fault proxy)
# ----------------------------------------------------------------------------------------------

class Api:
    def __init__(self, plane: Plane) -> None:
        self.url = plane.url
        self.headers = {"Authorization": f"Bearer {plane.token}"} if plane.token else {}
        self.ssl: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=str(plane.ca_file)) if plane.ca_file is not None else False)

    def session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl, limit=32), headers=self.headers,
                                     timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))

    async def request(self, session: aiohttp.ClientSession, method: str, path: str, body: Any = None,
                      attempts: int = 60) -> tuple[int, Any]:
        """A request retried through outages (5xx, 429, refused connections) for up to a minute."""
        for attempt in range(attempts):
            try:
                async with session.request(method, self.url + path, json=body,
                                           timeout=aiohttp.ClientTimeout(total=15)) as resp:
                    data = await resp.json(content_type=None)
                    if resp.status < 429 or attempt == attempts - 1:
                        return resp.status, data
            except (aiohttp.ClientError, TimeoutError, ValueError):
                if attempt == attempts - 1:
                    raise
            await asyncio.sleep(1.0)
        raise AssertionError("unreachable")


# ----------------------------------------------------------------------------------------------
# The watcher
# ----------------------------------------------------------------------------------------------

@dataclass
class JobSetSeen:
    running: bool = False
    suspended: bool = True
    terminal: str | None = None
    admission: str | None = None
    eviction: str | None = None
    cq: str | None = None
    cpu_milli: int = 0


@dataclass
class Watcher:
    """Watches JobSets and pods on the API server and checks the rules of the module docstring at
    every event (see :meth:`jobset_event`, :meth:`pod_event` and :meth:`suspects`)."""

    api: Api
    violations: list[dict[str, Any]] = field(default_factory=list)
    jobsets: dict[str, JobSetSeen] = field(default_factory=dict)
    pods: dict[str, tuple[str, str, bool]] = field(default_factory=dict)  # pod -> (gang, phase, bound)
    admissions: list[tuple[float, str]] = field(default_factory=list)
    first_admitted: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    evictions: int = 0
    outages: list[tuple[float, float]] = field(default_factory=list)  # API-server outages (start, end)
    partial_since: dict[str, float] = field(default_factory=dict)
    events: int = 0
    gone: dict[str, tuple[str, int]] = field(default_factory=dict)  # pod -> (gang, resourceVersion it went at)
    pods_rv: int = 0  # the pods' watch has delivered every event up to this resourceVersion
    pending_checks: list[Any] = field(default_factory=list)  # (due, admitted JobSet, its rv, running, stopping)

    def violation(self, kind: str, name: str, detail: str) -> None:
        self.violations.append({"kind": kind, "jobset": name, "detail": detail, "at": round(time.time(), 3)})

    # -- JobSets -----------------------------------------------------------------------------------
    def jobset_event(self, obj: dict[str, Any]) -> None:
        self.events += 1
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        ann = meta.get("annotations") or {}
        suspended = bool((obj.get("spec") or {}).get("suspend"))
        terminal = _terminal(obj)
        admission = ann.get("gangq.io/admission")
        eviction = ann.get("gangq.io/eviction")
        prev = self.jobsets.get(name) or JobSetSeen()
        running = not suspended and terminal is None
        if not suspended and admission is None:
            self.violation("unsuspended_without_admission", name, "spec.suspend is false without gangq.io/admission")
        if prev.running and running and admission != prev.admission:
            self.violation("admitted_twice", name, f"admission changed while running: {prev.admission} -> {admission}")
        if prev.running and suspended and terminal is None:
            self.evictions += 1
            if eviction is None or eviction == prev.eviction:
                self.violation("suspended_without_eviction_record", name, f"gangq.io/eviction is {eviction!r}")
        now = time.time()
        if running and not prev.running:
            self.admissions.append((now, name))
            self.first_admitted.setdefault(name, now)
        if terminal is not None and name not in self.finished:
            self.finished[name] = now
        if running:
            cq, cpu = _usage(admission)
        elif suspended and terminal is None:  # evicted: its pods may still run on that admission
            cq, cpu = _usage(_eviction_admission(eviction))
        else:
            cq, cpu = None, 0
        self.jobsets[name] = JobSetSeen(running, suspended, terminal, admission, eviction, cq, cpu)
        if running and not prev.running:
            self.admitted_at(name, _rv(obj), now)

    def admitted_at(self, name: str, rv: int, now: float) -> None:
        """Usage can only grow at an admission: note who runs now, and which evicted JobSets may
        still have pods, to check at :data:`SETTLE_SECONDS` (:meth:`check_quota`). The JobSets'
        watch is in resourceVersion order, the pods' watch is another stream: a pod deleted before
        the admission may be reported after it, so what counts is whether its deletion's
        resourceVersion (etcd's one counter) comes before the admission's."""
        running = {n: (s.cq, s.cpu_milli) for n, s in self.jobsets.items() if s.running and s.cq is not None}
        pods: dict[str, set[str]] = {}
        for pod, (gang, _phase, _bound) in self.pods.items():
            pods.setdefault(gang, set()).add(pod)
        stopping = {n: (s.cq, s.cpu_milli, pods[n]) for n, s in self.jobsets.items()
                    if not s.running and s.suspended and s.terminal is None and s.cq is not None and n in pods}
        self.pending_checks.append((now + SETTLE_SECONDS, name, rv, running, stopping))

    def run_checks(self, now: float) -> None:
        """The quota checks whose admission the pods' stream has caught up with (every pod deletion
        before it seen), or that waited :data:`CATCH_UP_SECONDS` for it."""
        while self.pending_checks:
            due, name, rv, running, stopping = self.pending_checks[0]
            if now < due or (self.pods_rv < rv and now < due + CATCH_UP_SECONDS):
                return
            self.pending_checks.pop(0)
            self.check_quota(name, rv, running, stopping)

    def check_quota(self, name: str, rv: int, running: dict[str, tuple[str | None, int]],
                    stopping: dict[str, tuple[str | None, int, set[str]]]) -> None:
        """At the admission of ``name`` (resourceVersion ``rv``): the running JobSets, and the
        evicted ones with a pod seen then and not deleted before ``rv`` (charged with the admission
        their eviction record names), fit their queues, the cohort and the nodes."""
        charged = list(running.values())
        still: list[str] = []  # the evicted JobSets charged, for the violation's detail
        for js_name, (cq, cpu, pods) in stopping.items():
            if any(pod not in self.gone or self.gone[pod][1] > rv for pod in pods):
                charged.append((cq, cpu))
                still.append(f"{js_name} ({sorted(pods)}, gone at {[self.gone.get(p, ('', None))[1] for p in pods]})")
        by_cq: dict[str, int] = {}
        for cq, cpu in charged:
            if cq is not None:
                by_cq[cq] = by_cq.get(cq, 0) + cpu
        cohort = sum(QUEUES.values()) * 1000
        total = sum(by_cq.values())
        for cq, used in by_cq.items():
            if used > cohort:  # nominal plus everything it may borrow: the whole cohort
                self.violation("over_quota", name, f"ClusterQueue {cq} runs {used}m cpu, may use {cohort}m")
        if total > cohort:
            self.violation("over_quota", name, f"cohort pool runs {total}m cpu of {cohort}m nominal at "
                                               f"resourceVersion {rv}: {len(running)} running, evicted with pods: "
                                               f"{'; '.join(still) or 'none'}")
        if total > NODE_CPU_MILLI:
            self.violation("over_nodes", name, f"{total}m cpu running on nodes of {NODE_CPU_MILLI}m")

    # -- pods ------------------------------------------------------------------------------------
    def pod_event(self, event_type: str, obj: dict[str, Any]) -> None:
        self.events += 1
        meta = obj.get("metadata") or {}
        key = str(meta.get("name"))
        gang = (meta.get("labels") or {}).get("jobset.sigs.k8s.io/jobset-name")
        if gang is None:
            return
        phase = str((obj.get("status") or {}).get("phase") or "Pending")
        if event_type == "DELETED" or phase in ("Succeeded", "Failed"):
            if self.pods.pop(key, None) is not None or key not in self.gone:
                self.gone[key] = (gang, _rv(obj))
        else:
            self.pods[key] = (gang, phase, bool((obj.get("spec") or {}).get("nodeName")))

    def suspects(self, now: float) -> list[tuple[str, str]]:
        """Admitted gangs partly running (some pods running, others not) for longer than the grace
        period (outside API-server outages, when nothing can progress), as (gang, what) — in the
        watcher's own view, which :meth:`confirm` reads again before it counts a violation."""
        running: dict[str, int] = {}
        waiting: dict[str, int] = {}
        for gang, phase, _bound in self.pods.values():
            if phase == "Running":
                running[gang] = running.get(gang, 0) + 1
            else:
                waiting[gang] = waiting.get(gang, 0) + 1
        bad = set()
        for gang in running:
            seen = self.jobsets.get(gang)
            if waiting.get(gang) and seen is not None and seen.running:
                bad.add(gang)
        for gang in list(self.partial_since):
            if gang not in bad:
                del self.partial_since[gang]
        out = []
        for gang in bad:
            since = self.partial_since.setdefault(gang, now)
            lost = sum(max(0.0, min(end, now) - max(start, since)) for start, end in self.outages)
            if now - since - lost > GRACE_SECONDS:
                out.append((gang, f"partly running for {now - since:.0f} s"))
                self.partial_since[gang] = now  # looked at once per grace period
        return out

    async def confirm(self, session: aiohttp.ClientSession, gang: str, what: str) -> None:
        """Read the gang's JobSet and pods again; a violation only if they still say so."""
        status, js = await self.api.request(session, "GET", f"{JS_PATH}/namespaces/default/jobsets/{gang}")
        status_pods, pods = await self.api.request(
            session, "GET", f"/api/v1/namespaces/default/pods?labelSelector=jobset.sigs.k8s.io/jobset-name%3D{gang}")
        if status != 200 or status_pods != 200:
            return
        phases = [str((p.get("status") or {}).get("phase") or "Pending") for p in pods.get("items") or []]
        live = [ph for ph in phases if ph not in ("Succeeded", "Failed")]
        running = sum(1 for ph in live if ph == "Running")
        suspended = bool((js.get("spec") or {}).get("suspend"))
        if running and not suspended and _terminal(js) is None and running < len(live):
            self.violation("partly_running", gang, f"{what}: {running} of {len(live)} pods running")

    # -- the watches ------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        async with self.api.session() as session:
            tasks = [asyncio.ensure_future(self._watch(session, f"{JS_PATH}/namespaces/default/jobsets", stop,
                                                       lambda t, o: self.jobset_event(o))),
                     asyncio.ensure_future(self._watch(session, "/api/v1/namespaces/default/pods", stop,
                                                       self.pod_event)),
                     asyncio.ensure_future(self._pods_loop(session, stop))]
            await stop.wait()
            self.run_checks(float("inf"))  # the run is over: every check left is made as it stands
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _pods_loop(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.run_checks(time.time())
            for gang, what in self.suspects(time.time()):
                await self.confirm(session, gang, what)
            await asyncio.sleep(1.0)

    async def _watch(self, session: aiohttp.ClientSession, path: str, stop: asyncio.Event, handle: Any) -> None:
        """List, then watch from the list's resourceVersion; list again after any break (an
        API-server restart, an expired resourceVersion)."""
        while not stop.is_set():
            try:
                status, listing = await self.api.request(session, "GET", path)
                if status != 200:
                    raise aiohttp.ClientError(f"list {path}: {status}")
                items = listing.get("items") or []
                listed = {str((item.get("metadata") or {}).get("name")) for item in items}
                for item in items:
                    handle("ADDED", item)
                pods = path.endswith("/pods")
                if pods:  # deleted while the watch was down: no DELETED event comes
                    list_rv = int(listing["metadata"].get("resourceVersion") or 0)
                    for gone in set(self.pods) - listed:  # gone by the list's resourceVersion at the latest
                        self.gone.setdefault(gone, (self.pods.pop(gone)[0], list_rv))
                    self.pods_rv = max(self.pods_rv, list_rv)
                rv = listing["metadata"]["resourceVersion"]
                url = f"{self.api.url}{path}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}"
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=None, sock_read=90)) as resp:
                    if resp.status != 200:
                        raise aiohttp.ClientError(f"watch {path}: {resp.status}")
                    async for line in resp.content:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event.get("type") == "ERROR":
                            break
                        if event.get("type") != "BOOKMARK":
                            handle(event["type"], event["object"])
                        if pods:  # the pods' stream has delivered everything up to here
                            self.pods_rv = max(self.pods_rv, _rv(event.get("object") or {}))
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError):
                await asyncio.sleep(0.5)


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _terminal(obj: dict[str, Any]) -> str | None:
    status = obj.get("status") or {}
    if status.get("terminalState"):
        return str(status["terminalState"])
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Completed", "Failed") and cond.get("status") == "True":
            return str(cond["type"])
    return None


def _eviction_admission(eviction: str | None) -> str | None:
    """The admission an eviction record (``gangq.io/eviction``) names, as admission JSON."""
    try:
        record = json.loads(eviction) if eviction else None
    except ValueError:
        return None
    admission = record.get("admission") if isinstance(record, dict) else None
    return json.dumps(admission) if isinstance(admission, dict) else None


def _usage(admission: str | None) -> tuple[str | None, int]:
    """(ClusterQueue, cpu in millicores) of a ``gangq.io/admission`` record."""
    if admission is None:
        return None, 0
    try:
        record = json.loads(admission)
        cpu = sum(parse_quantity((a.get("resourceUsage") or {}).get("cpu", 0), "cpu")
                  for a in record.get("podSetAssignments") or [])
        return str(record.get("clusterQueue")), int(cpu)
    except (ValueError, TypeError, AttributeError):
        return None, 0


# ----------------------------------------------------------------------------------------------
# The controllers
# ----------------------------------------------------------------------------------------------

class Replica:
    """One ``gangq run`` process; restarted after it dies, as a Deployment would."""

    def __init__(self, index: int, kubeconfig: Path, config: Path, tmp: Path) -> None:
        self.index = index
        self.kubeconfig = kubeconfig
        self.config = config
        self.tmp = tmp
        self.proc: subprocess.Popen[bytes] | None = None
        self.generation = 0
        self.metrics_port = 0  # where the running process serves /healthz and /readyz

    def start(self) -> None:
        self.generation += 1
        self.metrics_port = free_port()
        log = (self.tmp / f"controller-{self.index}-{self.generation}.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "gangq.operator", "run", "--kubeconfig", str(self.kubeconfig),
             "--config", str(self.config), "--metrics-port", str(self.metrics_port)],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.wait(10) is None:
                self.proc.kill()
                self.proc.wait(5)


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------

@dataclass
class Fault:
    kind: str
    start: float
    end: float = 0.0
    failover_seconds: float | None = None
    note: str = ""


class Chaos:
    def __init__(self, plane: Plane, tmp: Path, args: argparse.Namespace) -> None:
        self.plane = plane
        self.kubelet_retried: list[str] = []  # pods whose status update the run retried for kwok
        self.tmp = tmp
        self.quick = args.quick
        self.rng = random.Random(args.seed)
        self.api = Api(plane)
        self.watcher = Watcher(self.api)
        self.proxy = FaultProxy(plane.url, plane.ca_file).start()
        kubeconfig = self.proxy.kubeconfig(tmp / "controller.kubeconfig", plane.controller_token)
        config = {
            "leaderElection": {"namespace": plane.lease_namespace, "leaseDurationSeconds": LEASE_DURATION,
                               "renewIntervalSeconds": 2.0},
            "podsReady": {"enable": False},
            "status": {"workloadDelaySeconds": 1.0},
            "api": {"qps": 500, "burst": 1000},
        }
        (tmp / "config.yaml").write_text(yaml.safe_dump(config))
        self.replicas = [Replica(i, kubeconfig, tmp / "config.yaml", tmp) for i in (1, 2)]
        self.faults: list[Fault] = []
        self.unplanned_exits: list[dict[str, Any]] = []  # replicas that exited without a fault doing it
        self.restarting: set[int] = set()  # replicas a fault is stopping and starting
        self.gangs = plan(60 if self.quick else 300, self.rng)
        self.submitted: dict[str, float] = {}
        self.lock = threading.Lock()

    # -- the lease -----------------------------------------------------------------------------
    async def holder(self, session: aiohttp.ClientSession) -> str | None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.plane.lease_namespace}/leases/gangq-controller"
        try:
            async with session.get(self.api.url + path, timeout=aiohttp.ClientTimeout(total=3)) as resp:
                if resp.status != 200:
                    return None
                lease = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        spec = lease.get("spec") or {}
        renewed = spec.get("renewTime")
        if not spec.get("holderIdentity") or not renewed:
            return None
        return str(spec["holderIdentity"])

    def replica_of(self, identity: str | None) -> Replica | None:
        for replica in self.replicas:
            if identity is not None and replica.pid is not None and f"-{replica.pid}-" in f"-{identity}-":
                return replica
        return None

    async def leader(self, session: aiohttp.ClientSession) -> Replica | None:
        return self.replica_of(await self.holder(session))

    async def live_leader(self, session: aiohttp.ClientSession, deadline: float) -> tuple[str | None, Replica | None]:
        """The Lease's holder and its replica, once a live replica holds it (or ``deadline`` passes)."""
        while True:
            identity = await self.holder(session)
            leader = self.replica_of(identity)
            if leader is not None or time.time() >= deadline:
                return identity, leader
            await asyncio.sleep(0.2)

    async def wait_new_leader(self, session: aiohttp.ClientSession, old: str | None, since: float) -> float | None:
        """Seconds from ``since`` until a live replica other than ``old`` holds the Lease."""
        deadline = since + LEASE_DURATION + 30
        while time.time() < deadline:
            identity = await self.holder(session)
            if identity is not None and identity != old and self.replica_of(identity) is not None:
                return time.time() - since
            await asyncio.sleep(0.1)
        return None

    # -- submissions ---------------------------------------------------------------------------
    async def submit(self, session: aiohttp.ClientSession, gangs: list[Gang]) -> None:
        for gang in gangs:
            status, body = await self.api.request(session, "POST", f"{JS_PATH}/namespaces/default/jobsets",
                                                  gang.jobset())
            if status not in (200, 201, 409):
                raise RuntimeError(f"cannot create JobSet {gang.name}: {status} {body}")
            self.submitted.setdefault(gang.name, time.time())

    async def submitter(self, session: aiohttp.ClientSession, spread: float, burst: list[Gang]) -> None:
        """Submit the gangs (other than the burst's) evenly over ``spread`` seconds."""
        rest = [g for g in self.gangs if g not in burst]
        start = time.time()
        for i, gang in enumerate(rest):
            await asyncio.sleep(max(0.0, start + spread * i / len(rest) - time.time()))
            await self.submit(session, [gang])

    # -- faults --------------------------------------------------------------------------------
    async def faults_config(self, session: aiohttp.ClientSession, config: dict[str, Any]) -> None:
        async with session.post(self.proxy.url + "/debug/faults", json=config) as resp:
            if resp.status != 200:
                raise RuntimeError(f"fault proxy: {resp.status} {await resp.text()}")

    async def inject(self, kind: str, session: aiohttp.ClientSession, proxy: aiohttp.ClientSession,
                     burst: list[Gang]) -> None:
        fault = Fault(kind, time.time())
        self.faults.append(fault)
        print(f"chaos: {kind}", file=sys.stderr, flush=True)
        if kind in ("kill9_leader", "kill9_standby", "sigterm_leader_in_burst"):
            # A fault that kills the leader needs one: after an earlier fault (a restart, a lost
            # Lease) a replica may be taking over still, and killing nobody is no failover.
            identity, leader = await self.live_leader(session, fault.start + LEASE_DURATION + 5)
            if leader is None and kind != "kill9_standby":
                fault.note = f"no leader held the Lease for {LEASE_DURATION + 5} s before the fault"
                fault.end = time.time()
                return
            fault.start = time.time()
            target = leader if kind != "kill9_standby" else next((r for r in self.replicas if r is not leader), None)
            if target is None:
                fault.end = time.time()
                return
            self.restarting.add(target.index)
            if kind == "sigterm_leader_in_burst":
                await self.submit(session, burst)
                await asyncio.sleep(0.5)
                fault.start = time.time()
                target.signal(signal.SIGTERM)
                await asyncio.get_running_loop().run_in_executor(None, target.wait, 10.0)
            else:
                target.signal(signal.SIGKILL)
                await asyncio.get_running_loop().run_in_executor(None, target.wait, 10.0)
            if target is leader:
                fault.failover_seconds = await self.wait_new_leader(session, identity, fault.start)
            await asyncio.sleep(1.0)
            target.start()
            self.restarting.discard(target.index)
        elif kind == "drop_watches":
            await self.faults_config(proxy, {"dropWatches": True})
        elif kind == "expire_watches":
            await self.faults_config(proxy, {"expireWatches": True})
        elif kind in ("storm_5xx", "storm_429", "conflicts_409", "latency"):
            rule: dict[str, Any] = {
                "storm_5xx": {"verb": "*", "resource": "*", "errorRate": 0.5, "code": 503},
                "storm_429": {"verb": "*", "resource": "*", "errorRate": 0.5, "code": 429, "retryAfterSeconds": 1},
                "conflicts_409": {"verb": "patch", "resource": "jobsets.jobset.x-k8s.io", "errorRate": 0.5,
                                  "code": 409},
                "latency": {"verb": "*", "resource": "*", "latencySeconds": 0.3},
            }[kind]
            await self.faults_config(proxy, {"rules": [rule]})
            await asyncio.sleep(5.0 if kind == "latency" else 4.0)
            await self.faults_config(proxy, {"rules": []})
        elif kind in ("apiserver_restart", "etcd_kill9"):
            start = time.time()
            name, hard = ("kube-apiserver", False) if kind == "apiserver_restart" else ("etcd", True)
            await asyncio.get_running_loop().run_in_executor(None, lambda: self.plane.restart(name, hard=hard))
            self.watcher.outages.append((start, time.time()))
        fault.end = time.time()

    async def kubelet_retries(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        """On the real control plane, a pod still Running ``KUBELET_RETRY_AFTER`` seconds past its
        run time gets its status update again: its annotation ``chaos.gangq.io/kubelet-retry`` is
        set, and kwok, which sees the pod change, plays the pod's stages again.

        kwok v0.8.0 retries a failed status patch only on a refused connection, a timeout, 503 or
        429; an API server whose etcd was just killed answers 500, and kwok drops that pod's
        completion for good: the pod runs forever and its gang never finishes. A kubelet retries
        its status updates until they land; this does it for kwok."""
        if self.plane.name != "real":
            return
        while not stop.is_set():
            await asyncio.sleep(5.0)
            try:
                status, listing = await self.api.request(session, "GET", "/api/v1/namespaces/default/pods", attempts=3)
            except (aiohttp.ClientError, TimeoutError, ValueError):
                continue  # an outage: the next round lists again
            if status != 200:
                continue
            now = time.time()
            for pod in listing.get("items") or []:
                meta, st = pod.get("metadata") or {}, pod.get("status") or {}
                if st.get("phase") != "Running" or meta.get("deletionTimestamp"):
                    continue
                started = [c["state"]["running"].get("startedAt") for c in st.get("containerStatuses") or []
                           if (c.get("state") or {}).get("running")]
                times = [t for t in map(parse_time, started) if t is not None]
                try:
                    run = float((meta.get("annotations") or {}).get(RUN_SECONDS, "1"))
                except ValueError:
                    continue
                if not times:
                    continue
                since = min(times)
                if now - since < run + KUBELET_RETRY_AFTER:
                    continue
                if meta["name"] not in self.kubelet_retried:
                    self.kubelet_retried.append(meta["name"])
                body = {"metadata": {"annotations": {"chaos.gangq.io/kubelet-retry": str(round(now))}}}
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.patch(
                        f"{self.api.url}/api/v1/namespaces/default/pods/{meta['name']}", data=json.dumps(body),
                        headers={"Content-Type": "application/merge-patch+json"},
                        timeout=aiohttp.ClientTimeout(total=15),
                    ) as resp:
                        await resp.read()

    async def supervisor(self, stop: asyncio.Event) -> None:
        """Start again a replica that exited on its own (crash-only: its Deployment would), and
        count it: a controller that exits under a fault is a finding even when nothing is lost."""
        while not stop.is_set():
            for replica in self.replicas:
                proc = replica.proc
                if replica.index in self.restarting or proc is None or proc.poll() is None:
                    continue
                self.unplanned_exits.append({"replica": replica.index, "generation": replica.generation,
                                             "exit_code": proc.returncode, "at": round(time.time(), 1)})
                print(f"chaos: replica {replica.index} exited with {proc.returncode}: restarting it",
                      file=sys.stderr, flush=True)
                await asyncio.sleep(1.0)
                replica.start()
            await asyncio.sleep(0.5)

    async def injector(self, session: aiohttp.ClientSession, until: float, burst: list[Gang]) -> None:
        kinds: list[str] = []
        async with aiohttp.ClientSession() as proxy:
            while time.time() < until:
                await asyncio.sleep(self.rng.uniform(1.5, 3.5) if self.quick else self.rng.uniform(4.0, 9.0))
                if time.time() >= until:
                    break
                if not kinds:
                    kinds = list(self.plane.faults)
                    self.rng.shuffle(kinds)
                kind = kinds.pop()
                if kind == "sigterm_leader_in_burst" and burst[0].name in self.submitted:
                    kind = "kill9_leader"  # the burst is submitted once
                await self.inject(kind, session, proxy, burst)

    # -- the whole run -------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        stop = asyncio.Event()
        watcher = asyncio.ensure_future(self.watcher.run(stop))
        spread = 50.0 if self.quick else 240.0
        fault_window = 90.0 if self.quick else 300.0
        finish_timeout = 150.0 if self.quick else 600.0
        burst = self.gangs[-10:]
        async with self.api.session() as session:
            for replica in self.replicas:
                replica.start()
            deadline = time.time() + 60
            while await self.leader(session) is None:
                if time.time() > deadline:
                    raise RuntimeError(f"no controller took the Lease; logs in {self.tmp}")
                await asyncio.sleep(0.2)
            started = time.time()
            supervisor = asyncio.ensure_future(self.supervisor(stop))
            retries = asyncio.ensure_future(self.kubelet_retries(session, stop))
            submitter = asyncio.ensure_future(self.submitter(session, spread, burst))
            await self.injector(session, started + fault_window, burst)
            await submitter
            if burst[0].name not in self.submitted:
                await self.submit(session, burst)
            finish_deadline = time.time() + finish_timeout
            while len(self.watcher.finished) < len(self.gangs) and time.time() < finish_deadline:
                await asyncio.sleep(0.5)
            ended = time.time()
            retries.cancel()  # it uses the session
            with contextlib.suppress(asyncio.CancelledError):
                await retries
        stop.set()
        await watcher
        await supervisor
        for replica in self.replicas:
            replica.stop()
        return self.report(started, ended)

    def report(self, started: float, ended: float) -> dict[str, Any]:
        w = self.watcher
        by_kind: dict[str, int] = {}
        for fault in self.faults:
            by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1
        recoveries = []
        admissions = sorted(t for t, _ in w.admissions)
        for fault in self.faults:
            waiting = any(t <= fault.end and (name not in w.first_admitted or w.first_admitted[name] > fault.end)
                          for name, t in self.submitted.items())
            if not waiting:
                continue
            after = next((t for t in admissions if t >= fault.end), None)
            recoveries.append((after if after is not None else ended) - fault.end)
        failovers = [f.failover_seconds for f in self.faults if f.failover_seconds is not None]
        missing_failovers = sum(1 for f in self.faults if f.kind in ("kill9_leader", "sigterm_leader_in_burst")
                                and f.failover_seconds is None and f.end > 0)
        finished = sum(1 for g in self.gangs if g.name in w.finished)
        result: dict[str, Any] = {
            "control_plane": self.plane.name,
            "quick": self.quick,
            "faults_injected": len(self.faults),
            "faults_by_kind": dict(sorted(by_kind.items())),
            "fault_kinds_not_injected": sorted(set(self.plane.faults) - set(by_kind)),
            "violations": len(w.violations),
            "violations_by_kind": _count(v["kind"] for v in w.violations),
            "violation_examples": w.violations[:10],
            "gangs_submitted": len(self.submitted),
            "gangs_finished": finished,
            "max_recovery_seconds": round(max(recoveries), 2) if recoveries else 0.0,
            "leader_failovers": len(failovers),
            "failover_seconds": [round(f, 2) for f in failovers],
            "failovers_not_seen": missing_failovers,
            "failovers_not_seen_details": [
                {"kind": f.kind, "at": round(f.start, 1), "note": f.note or f"no other replica held the Lease within "
                                                                         f"{LEASE_DURATION + 30} s"}
                for f in self.faults if f.kind in ("kill9_leader", "sigterm_leader_in_burst")
                and f.failover_seconds is None and f.end > 0],
            "unplanned_controller_exits": self.unplanned_exits,
            "pods_kubelet_retried": self.kubelet_retried,
            "evictions_seen": w.evictions,
            "admissions_seen": len(w.admissions),
            "watch_events": w.events,
            "wall_seconds": round(ended - started, 1),
            "lease_duration_seconds": LEASE_DURATION,
        }
        result["targets"] = {
            "every_fault_kind_injected": not result["fault_kinds_not_injected"],
            "no_violations": not w.violations,
            "every_gang_finished": finished == len(self.gangs),
            "failover<=lease+5s": missing_failovers == 0 and all(f <= LEASE_DURATION + 5 for f in failovers),
        }
        return result


def set_up(plane: Plane, docs: list[dict[str, Any]]) -> None:
    """gangq's CRDs (and RBAC, on the real plane) and the queue objects ``docs`` in ``plane``."""
    from gangq.operator.install import apply_objects
    from gangq.operator.kube import Credentials, KubeClient

    plane.install()

    async def apply() -> None:
        client = KubeClient(Credentials.load(plane.admin_kubeconfig))
        try:
            await apply_objects(client, docs)
        finally:
            await client.close()

    asyncio.run(apply())


def _count(kinds: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind in kinds:
        out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 gangs, at most 3 minutes")
    parser.add_argument("--control-plane", choices=("emulated", "real"), default="emulated")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, required=True, help="where to write the figures")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix=f"gangq-chaos-{args.control_plane}-"))
    t0 = time.time()
    plane: Plane = EmulatedPlane(tmp) if args.control_plane == "emulated" else RealPlane(tmp)
    chaos: Chaos | None = None
    try:
        set_up(plane, queue_objects())
        chaos = Chaos(plane, tmp, args)
        result = asyncio.run(chaos.run())
    finally:
        if chaos is not None:
            for replica in chaos.replicas:
                replica.stop()
            chaos.proxy.stop()
        plane.stop()
    result["total_seconds"] = round(time.time() - t0, 1)
    result["seed"] = args.seed
    result["logs"] = str(tmp)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    sys.exit(0 if all(result["targets"].values()) else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
