"""Kueue's scheduler-performance "baseline" through the real controller, in real time, on the
sandbox or on a real kube-apiserver + etcd, or on both side by side.

    python benchmarks/kueue_baseline_e2e.py --json OUT.json [--scale 1.0] [--config FILE]
        [--control-plane emulated|real|both] [--kind jobset|job]

Setup (../shared/references/README.md, section 1): 5 cohorts × 6 ClusterQueues (cpu 20 nominal,
borrowingLimit 100, reclaimWithinCohort Any, withinClusterQueue LowerPriority), 3 classes per
queue (small 350 × 1 cpu / 0.2 s every 0.1 s, medium 100 × 5 cpu / 0.5 s every 0.5 s, large
50 × 20 cpu / 1 s every 1.2 s) = 15,000 single-pod JobSets. The queue objects are
``policies/kueue-baseline.yaml`` with ``admissionMode: QuotaOnly`` (Kueue's test has no nodes).

Three processes: the control plane (the sandbox API server, ``gangq sandbox up --no-cluster``; or
``gangq.controlplane``'s real one, gangq installed from its manifests), the controller
(``python -m gangq.operator run --jobset-controller external``: no JobSet reconciler, as Kueue's
test runs without job controllers), and this runner. The runner creates each JobSet (suspended,
labelled with its LocalQueue and WorkloadPriorityClass) at its time, watches JobSets, and when one
is unsuspended marks it Completed (status subresource) after its runtime, as Kueue's runner does.

``--kind job`` (``kind`` in the output) submits the same workloads as batch/v1 Jobs: each Job's
spec is the JobSet's one replicatedJob template (the same pods, requests and runtime per class),
with the same labels, and ``spec.managedBy: gangq.io/kueue-baseline-runner``, so no Job controller
acts on them (the real control plane's kube-controller-manager would otherwise create their pods;
the JobSets have no JobSet controller either). The runner marks a Job finished as a Job controller does: ``startTime``
(when it saw it unsuspended), ``completionTime``, ``succeeded: 1`` and the conditions
``SuccessCriteriaMet`` and ``Complete``. gangq names their Workloads ``job-<name>``; the runner's
watch, its time to admission (create → seen unsuspended) and the write counts are the JobSets'.
A controller that exits before every workload has finished (a lost Lease) ends the run with an
error and the end of its log.

Figures: ``wall_seconds`` (first create → last completion), ``min_cq_usage_pct`` (per ClusterQueue
cpu·s used × 100 / (nominalQuota × wall), minimum; Kueue's measure), ``avg_time_to_admission_s``
per class (create → seen unsuspended), ``api_writes_per_workload`` (every write request the
sandbox counted, minus the runner's own creates and status patches; on the real control plane
the controller's writes in the API server's audit log; over the number of workloads;
``writes_by_resource`` itemises them), ``controller_cpu_seconds`` and
``controller_peak_rss_mb`` (from /proc of the controller process), and ``controller_summary``: the
controller's own account (cycles, admissions, evictions, writes, Workload status writes by state,
mean latencies, GC time), read from its Prometheus ``/metrics`` endpoint just before it is stopped
(:func:`gangq.observability.metrics.controller_summary`). Same-run baseline: the engine alone on the
same workload in the simulator (``engine_alone``), plus Kueue's published means (``kueue``) and the
ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from gangq.api.quantity import parse_quantity  # noqa: E402
from gangq.gc_tuning import tune_gc  # noqa: E402
from gangq.observability.metrics import controller_summary  # noqa: E402
from gangq.operator.install import apply_objects, install_crds, load_yaml  # noqa: E402
from gangq.operator.kube import Credentials, KubeClient, resource_path  # noqa: E402
from gangq.sandbox.runtime import Sandbox, free_port  # noqa: E402

CLASSES = (  # name, count per ClusterQueue, cpu, runtime (s), created every (s)
    ("small", 350, 1, 0.2, 0.1),
    ("medium", 100, 5, 0.5, 0.5),
    ("large", 50, 20, 1.0, 1.2),
)
KUEUE = {
    "wall_seconds": 351.0,
    "min_cq_usage_pct": 55.9,
    "avg_time_to_admission_s": {"small": 215.5, "medium": 76.8, "large": 16.5},
}
TARGETS = {"wall_seconds": 90.0, "min_cq_usage_pct": 70.0, "api_writes_per_workload": 3.0}
NOMINAL_CPU = 20.0
CQ_SETTLE_SECONDS = 30.0  # after the last completion, how long the ClusterQueue record waits for usage 0
CONTROLLER_AGENTS = ("gangq", "kopf")  # the controller's user agents in the audit log
RUNNER_AGENT = "gangq-kueue-baseline-runner/1"

CONTROLLER_CONFIG: dict[str, Any] = {
    "podsReady": {"enable": False},  # no pods in this test
    "api": {"qps": 2000, "burst": 4000},
    "metricsPort": None,  # a free port, chosen when the controller starts
}


def jobset(name: str, queue: str, cls: str, cpu: int) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"gangq.io/queue-name": queue, "gangq.io/priority-class": cls},
        },
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "main",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [
                                        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": str(cpu)}}}
                                    ],
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


RUNNER_MANAGER = "gangq.io/kueue-baseline-runner"
"""``spec.managedBy`` of the benchmark's Jobs: the runner, not a Job controller, finishes them."""


def job(name: str, queue: str, cls: str, cpu: int) -> dict[str, Any]:
    """The JobSet of :func:`jobset` as a batch/v1 Job: its one replicatedJob's spec."""
    js = jobset(name, queue, cls, cpu)
    spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": js["metadata"],
        "spec": {"suspend": True, "managedBy": RUNNER_MANAGER, **spec},
    }


def _rfc3339(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))


def jobset_finished(started: float, finished: float) -> dict[str, Any]:
    """The JobSet status patch that marks it Completed (``started``, ``finished``: wall clock)."""
    return {
        "status": {
            "terminalState": "Completed",
            "conditions": [
                {
                    "type": "Completed",
                    "status": "True",
                    "reason": "AllJobsCompleted",
                    "message": "done",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    }


def job_finished(started: float, finished: float) -> dict[str, Any]:
    """The Job status patch that marks it complete, as kube-controller-manager's Job controller
    does (the real API server refuses ``Complete`` without ``startTime``, ``completionTime`` and
    ``SuccessCriteriaMet``)."""
    end = _rfc3339(finished)

    def condition(kind: str) -> dict[str, str]:
        return {"type": kind, "status": "True", "reason": "CompletionsReached",
                "message": "Reached expected number of succeeded pods",
                "lastProbeTime": end, "lastTransitionTime": end}

    return {
        "status": {
            "startTime": _rfc3339(started),
            "completionTime": end,
            "active": 0,
            "ready": 0,
            "succeeded": 1,
            "conditions": [condition("SuccessCriteriaMet"), condition("Complete")],
        }
    }


@dataclass(frozen=True)
class WorkloadApi:
    """One kind the runner submits: its collection, its resource as the write counts name it, its
    manifest and its finished status."""

    kind: str
    collection: str  # the namespace default's collection, under the API server's URL
    resource: str
    manifest: Callable[[str, str, str, int], dict[str, Any]]
    finished: Callable[[float, float], dict[str, Any]]


KINDS: dict[str, WorkloadApi] = {
    "jobset": WorkloadApi("jobset", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
                          "jobsets.jobset.x-k8s.io", jobset, jobset_finished),
    "job": WorkloadApi("job", "/apis/batch/v1/namespaces/default/jobs", "jobs.batch", job, job_finished),
}


def proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds, peak RSS MiB) of a live process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    peak = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return cpu, peak


class QuotaRecorder:
    """Kueue's performance recorder (``test/performance/scheduler/runner/recorder``) on gangq's
    ClusterQueues: every ClusterQueue event (the initial list, then each status change) is a
    sample of its ``status.flavorsUsage`` cpu total, the quota its admitted workloads hold, and
    the cpu·s used are the sum of each sample's usage × the time until the next one. As Kueue's
    summary does for a class of ClusterQueues: the used cpu·s and the nominal quotas of all of
    them added up, elapsed from the first event to the last. So ``usage_pct`` is Kueue's checker
    formula on the same kind of record as Kueue's side of ``benchmarks/vs_kueue.py``."""

    __slots__ = ("broken_streams", "queues")

    def __init__(self) -> None:
        # name -> [first event, last event, cpu held since it, cpu·s used, nominal cpu]
        self.queues: dict[str, list[float]] = {}
        self.broken_streams: list[str] = []  # the watch's, resumed from where they broke

    @staticmethod
    def _cpu(entries: Any, field: str) -> float:
        total = 0.0
        for flavor in entries or []:
            for res in flavor.get("resources") or []:
                if res.get("name") == "cpu" and res.get(field) is not None:
                    total += parse_quantity(res[field], "cpu") / 1000.0
        return total

    def observe(self, obj: dict[str, Any], now: float) -> None:
        name = str(obj["metadata"]["name"])
        held = self._cpu((obj.get("status") or {}).get("flavorsUsage"), "total")
        nominal = sum(self._cpu(group.get("flavors"), "nominalQuota")
                      for group in (obj.get("spec") or {}).get("resourceGroups") or [])
        q = self.queues.get(name)
        if q is None:
            self.queues[name] = [now, now, held, 0.0, nominal]
            return
        q[3] += q[2] * (now - q[1])
        q[1], q[2], q[4] = now, held, nominal

    def idle(self) -> bool:
        """Every ClusterQueue's last sample holds no quota."""
        return all(q[2] == 0.0 for q in self.queues.values())

    def summary(self) -> dict[str, Any]:
        if not self.queues:
            return {"usage_pct": None, "cpu_seconds_used": 0.0, "nominal_cpu": 0.0, "elapsed_seconds": 0.0,
                    "cluster_queues": 0, "idle_at_end": True}
        used = sum(q[3] for q in self.queues.values())
        nominal = sum(q[4] for q in self.queues.values())
        elapsed = max(q[1] for q in self.queues.values()) - min(q[0] for q in self.queues.values())
        pct = round(100.0 * used / (nominal * elapsed), 2) if nominal and elapsed > 0 else None
        return {"usage_pct": pct, "cpu_seconds_used": round(used, 2), "nominal_cpu": nominal,
                "elapsed_seconds": round(elapsed, 2), "cluster_queues": len(self.queues), "idle_at_end": self.idle(),
                "broken_streams": self.broken_streams[:10],
                "held_at_end": {n: q[2] for n, q in sorted(self.queues.items()) if q[2]}}


async def watch_events(
    session: aiohttp.ClientSession, collection: str, rv: str, broken: list[str]
) -> AsyncIterator[dict[str, Any]]:
    """The watch events of ``collection`` from ``rv`` on, BOOKMARKs included. A stream that breaks
    is watched again from the last resourceVersion seen (noted in ``broken``); after an ERROR
    event (yielded: a resourceVersion too old) the watch starts again from ``"0"``, whose ADDED
    events replay what exists."""
    while True:
        url = f"{collection}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as r:
                async for line in r.content:
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    if ev["type"] == "ERROR":
                        rv = "0"
                        yield ev
                        break
                    rv = ev["object"]["metadata"].get("resourceVersion", rv)
                    yield ev
        except (aiohttp.ClientError, TimeoutError) as err:
            broken.append(f"{type(err).__name__}: {err}")
            await asyncio.sleep(0.2)


class Runner:
    def __init__(self, url: str, plan: list[tuple[float, str, str, str, int, float]],
                 api: WorkloadApi = KINDS["jobset"]) -> None:
        self.url = url
        self.api = api
        self.collection = url + api.collection
        self.plan = plan  # (offset, name, queue, class, cpu, runtime)
        self.info = {name: (queue, cls, cpu, runtime) for _, name, queue, cls, cpu, runtime in plan}
        self.created: dict[str, float] = {}
        self.admitted: dict[str, float] = {}
        self.completed: dict[str, float] = {}
        self.running: dict[str, float] = {}  # name -> when its current run started
        self.timers: dict[str, asyncio.Task[None]] = {}
        self.used_before: dict[str, float] = {}  # seconds run before evictions
        self.evictions = 0
        self.writes = {f"create {api.resource}": 0, f"patch {api.resource}/status": 0}
        self.done = asyncio.Event()
        self.errors: list[str] = []
        self.t0 = 0.0
        self.start_rv = "0"
        self.rtt = {"create": [0, 0.0], "complete": [0, 0.0]}  # requests, seconds: the API server's answer time
        self.quota = QuotaRecorder()
        self.broken_streams: list[str] = []  # the JobSet watch's, resumed from where they broke

    async def run(self, session: aiohttp.ClientSession) -> None:
        cq_watcher = asyncio.ensure_future(self.watch_cluster_queues(session))
        async with session.get(self.collection) as r:
            self.start_rv = (await r.json())["metadata"]["resourceVersion"]
        watcher = asyncio.ensure_future(self.watch(session))
        sem = asyncio.Semaphore(64)
        tasks: set[asyncio.Task[None]] = set()
        self.t0 = time.monotonic() + 0.2
        for offset, name, queue, cls, cpu, _ in self.plan:
            delay = self.t0 + offset - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.ensure_future(self.create(session, sem, name, queue, cls, cpu))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await self.done.wait()
        watcher.cancel()
        # as Kueue's recorder, until the ClusterQueues' status shows no quota held (gangq writes
        # it at most every status.queueIntervalSeconds)
        deadline = time.monotonic() + CQ_SETTLE_SECONDS
        while not self.quota.idle() and time.monotonic() < deadline and not cq_watcher.done():
            await asyncio.sleep(0.2)
        cq_watcher.cancel()

    async def watch_cluster_queues(self, session: aiohttp.ClientSession) -> None:
        """Feed :attr:`quota` every ClusterQueue event, from a list at the start of the run."""
        collection = self.url + resource_path("gangq.io", "v1alpha1", "clusterqueues")
        async with session.get(collection) as r:
            listed = await r.json()
        now = time.monotonic()
        for obj in listed.get("items") or []:
            self.quota.observe(obj, now)
        events = watch_events(session, collection, listed["metadata"]["resourceVersion"], self.quota.broken_streams)
        async for ev in events:
            if ev["type"] == "ERROR":
                self.errors.append(f"ClusterQueue watch: {ev['object']}")
                return
            if ev["type"] in ("ADDED", "MODIFIED"):
                self.quota.observe(ev["object"], time.monotonic())

    async def create(
        self, session: aiohttp.ClientSession, sem: asyncio.Semaphore, name: str, queue: str, cls: str, cpu: int
    ) -> None:
        async with sem:
            self.created[name] = t = time.monotonic()
            async with session.post(self.collection, json=self.api.manifest(name, queue, cls, cpu)) as r:
                if r.status != 201:
                    self.errors.append(f"create {name}: {r.status}")
                self.writes[f"create {self.api.resource}"] += 1
            self.rtt["create"][0] += 1
            self.rtt["create"][1] += time.monotonic() - t

    async def complete(self, session: aiohttp.ClientSession, name: str, runtime: float) -> None:
        await asyncio.sleep(runtime)
        finished_at = time.monotonic()
        self.timers.pop(name, None)
        wall = time.time()
        status = self.api.finished(wall - (finished_at - self.running.get(name, finished_at)), wall)
        async with session.patch(
            f"{self.collection}/{name}/status",
            data=json.dumps(status),
            headers={"Content-Type": "application/merge-patch+json"},
        ) as r:
            if r.status != 200:
                self.errors.append(f"complete {name}: {r.status}")
            self.writes[f"patch {self.api.resource}/status"] += 1
        self.rtt["complete"][0] += 1
        self.rtt["complete"][1] += time.monotonic() - finished_at
        self.completed[name] = finished_at
        self.used_before[name] = self.used_before.get(name, 0.0) + finished_at - self.running.pop(name, finished_at)
        if len(self.completed) == len(self.plan):
            self.done.set()

    async def watch(self, session: aiohttp.ClientSession) -> None:
        tasks: set[asyncio.Task[None]] = set()
        async for ev in watch_events(session, self.collection, self.start_rv, self.broken_streams):
            obj = ev["object"]
            if ev["type"] == "ERROR":
                self.errors.append(f"watch: {obj}")
                continue
            if ev["type"] == "BOOKMARK":
                continue
            name = obj["metadata"]["name"]
            if name not in self.info or name in self.completed:
                continue
            running = obj["spec"].get("suspend") is False
            now = time.monotonic()
            if running and name not in self.running:
                self.admitted.setdefault(name, now)  # time to admission: the first one
                self.running[name] = now
                task = asyncio.ensure_future(self.complete(session, name, self.info[name][3]))
                self.timers[name] = task
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            elif not running and name in self.running:
                # evicted before its runtime was over: the cpu was used until now; it runs
                # its whole runtime again once re-admitted (Kueue's runner restarts it too)
                self.used_before[name] = self.used_before.get(name, 0.0) + now - self.running.pop(name)
                self.evictions += 1
                timer = self.timers.pop(name, None)
                if timer is not None:
                    timer.cancel()


def plan(scale: float) -> tuple[list[tuple[float, str, str, str, int, float]], list[str]]:
    config = load_yaml(ROOT / "policies" / "kueue-baseline.yaml")
    queues = [d["metadata"]["name"] for d in config if d["kind"] == "LocalQueue"]
    out = []
    for q in queues:
        for cls, count, cpu, runtime, every in CLASSES:
            for i in range(max(1, int(count * scale))):
                out.append((round(i * every, 6), f"{q}-{cls}-{i}", q, cls, cpu, runtime))
    out.sort()
    return out, queues


def engine_alone(scale: float) -> dict[str, Any]:
    from gangq.sim.policies import make_policy
    from gangq.sim.report import summarize
    from gangq.sim.scenario import kueue_baseline
    from gangq.sim.simulator import Simulator

    t = time.perf_counter()
    summary = summarize(Simulator(kueue_baseline(scale), make_policy("gangq")).run())
    return {
        "wall_seconds": summary["makespan_s"],
        "min_cq_usage_pct": summary["min_cq_usage_pct"],
        "avg_time_to_admission_s": {c: v["avg_wait_s"] for c, v in summary["classes"].items()},
        "simulation_cpu_seconds": time.perf_counter() - t,
    }


async def setup(kubeconfig: Path, *, crds: bool) -> None:
    """The baseline's queues (``admissionMode: QuotaOnly``), and gangq's CRDs when ``crds``."""
    client = KubeClient(Credentials.load(kubeconfig))
    try:
        if crds:
            await install_crds(client)
        docs = load_yaml(ROOT / "policies" / "kueue-baseline.yaml")
        for doc in docs:
            if doc["kind"] == "ClusterQueue":
                doc["spec"]["admissionMode"] = "QuotaOnly"
        await apply_objects(client, docs)
    finally:
        await client.close()


async def lease_holder(kubeconfig: Path, namespace: str) -> str | None:
    client = KubeClient(Credentials.load(kubeconfig))
    try:
        lease = await client.get(resource_path("coordination.k8s.io", "v1", "leases", namespace, "gangq-controller"))
        return (lease.get("spec") or {}).get("holderIdentity")
    except Exception:
        return None
    finally:
        await client.close()


class EmulatedPlane:
    """The sandbox in its own process (``gangq sandbox up --no-cluster``). gangq's writes: every
    write the sandbox counted, minus the runner's."""

    name = "emulated"
    lease_namespace = "default"

    def __init__(self, tmp: Path) -> None:
        self.sb = Sandbox(mode="subprocess", cluster=False, kubeconfig=tmp / "kubeconfig").start()
        self.url = self.sb.url
        self.kubeconfig = self.controller_kubeconfig = self.sb.kubeconfig
        asyncio.run(setup(self.kubeconfig, crds=True))

    def connector(self) -> aiohttp.TCPConnector:
        return aiohttp.TCPConnector(limit=128)

    def headers(self) -> dict[str, str]:
        return {}

    def start_counting(self) -> None:
        urllib.request.urlopen(urllib.request.Request(self.url + "/debug/requests", method="DELETE")).read()

    def _rows(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.url + "/debug/requests") as r:
            return list(json.loads(r.read())["requests"])

    def writes(self, runner_writes: dict[str, int]) -> dict[str, int]:
        by_resource: dict[str, int] = {}
        for row in self._rows():
            if row["verb"] in WRITE_VERBS and row["code"] < 300:
                key = f"{row['verb']} {row['resource']}"
                by_resource[key] = by_resource.get(key, 0) + row["count"]
        for key, count in runner_writes.items():
            by_resource[key] = by_resource.get(key, 0) - count
        return {k: v for k, v in sorted(by_resource.items()) if v}

    def failed_requests(self) -> int:
        return sum(r["count"] for r in self._rows() if r["code"] >= 400)

    def server_cpu_seconds(self) -> float | None:
        return proc_stats(self.sb._proc.pid)[0] if self.sb._proc is not None else None

    def stop(self) -> None:
        self.sb.stop()


class RealPlane:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok built from
    hack/control-plane (``gangq.controlplane``), gangq installed as the install manifests do, the
    controller under the install's RBAC. gangq's writes: the controller's (user agents ``gangq``
    and ``kopf``), from the API server's audit log of every write
    (:data:`gangq.controlplane.audit.WRITES_POLICY`, as ``benchmarks/vs_kueue.py`` logs Kueue's)."""

    name = "real"
    agents = CONTROLLER_AGENTS

    def __init__(self, tmp: Path) -> None:
        from gangq.controlplane.audit import WRITES_POLICY, WriteCounter
        from gangq.controlplane.install import install
        from gangq.controlplane.launcher import ControlPlane
        from gangq.controlplane.pki import CONTROLLER_NAMESPACE, CONTROLLER_USER

        self.user = CONTROLLER_USER
        self.lease_namespace = CONTROLLER_NAMESPACE
        self.cp = ControlPlane(workdir=tmp / "control-plane", announce=lambda line: print(line, file=sys.stderr),
                               audit=WRITES_POLICY)
        self.cp.start()
        install(self.cp, embedded_jobset=False)
        self.url = self.cp.url
        self.kubeconfig = self.cp.kubeconfig("admin")
        self.controller_kubeconfig = self.cp.kubeconfig("controller")
        asyncio.run(setup(self.kubeconfig, crds=False))
        self.counter = WriteCounter(self.cp.audit_log)

    def connector(self) -> aiohttp.TCPConnector:
        import ssl

        return aiohttp.TCPConnector(limit=128, ssl=ssl.create_default_context(cafile=str(self.cp.pki.ca_cert)))

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.cp.pki.identities['admin'].token}", "User-Agent": RUNNER_AGENT}

    def start_counting(self) -> None:
        self.counter.reset()

    def writes(self, runner_writes: dict[str, int]) -> dict[str, int]:
        return self.counter.read().by_resource(self.agents)

    def writes_by_agent(self) -> dict[str, int]:
        return self.counter.read().per_agent()

    def failed_requests(self) -> int:
        self.counter.read()
        return sum(self.counter.failed[a] for a in self.agents)

    def server_cpu_seconds(self) -> float | None:
        return round(sum(proc_stats(p.popen.pid)[0] for p in self.cp.processes
                         if p.name in ("kube-apiserver", "etcd") and p.popen is not None), 2)

    def stop(self) -> None:
        self.cp.stop()


Plane = EmulatedPlane | RealPlane
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


def writes_in_flight(metrics_port: int) -> float:
    """The controller's ``gangq_api_writes_in_flight``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as r:
        for family in text_string_to_metric_families(r.read().decode()):
            if family.name == "gangq_api_writes_in_flight":
                return float(family.samples[0].value)
    return 0.0


def _installed_core_compiled() -> bool:
    """Whether the controller ran the mypyc-compiled engine (see setup.py)."""
    out = subprocess.run(
        [sys.executable, "-P", "-c", "import gangq.core as c; print(c.compiled())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip() == "True"


def run_on(plane_name: str, jobs: list[tuple[float, str, str, str, int, float]], config: dict[str, Any],
           baseline: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The baseline on one control plane: its figures, with the same-run engine-alone baseline."""
    tmp = Path(tempfile.mkdtemp(prefix=f"gangq-kueue-e2e-{plane_name}-"))
    config = dict(config)
    if config.get("metricsPort") is None:
        config["metricsPort"] = free_port()
    plane: Plane = EmulatedPlane(tmp) if plane_name == "emulated" else RealPlane(tmp)
    if plane_name == "real":
        config["leaderElection"] = {**config.get("leaderElection", {}), "namespace": plane.lease_namespace}
    (tmp / "config.yaml").write_text(yaml.safe_dump(config))
    controller: subprocess.Popen[bytes] | None = None
    try:
        plane.start_counting()
        log = open(tmp / "controller.log", "wb")  # noqa: SIM115
        controller = subprocess.Popen(
            [
                sys.executable,
                "-P",  # the installed gangq (compiled core, see setup.py), not the checkout in cwd
                *(["-m", "cProfile", "-o", str(args.profile)] if args.profile else []),
                "-m",
                "gangq.operator",
                "run",
                "--kubeconfig",
                str(plane.controller_kubeconfig),
                "--config",
                str(tmp / "config.yaml"),
                "--jobset-controller",
                "external",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        deadline = time.monotonic() + 30
        while asyncio.run(lease_holder(plane.kubeconfig, plane.lease_namespace)) is None:
            if time.monotonic() > deadline or controller.poll() is not None:
                raise RuntimeError(f"the controller did not start: {(tmp / 'controller.log').read_text()[-2000:]}")
            time.sleep(0.2)
        time.sleep(2.0)  # recovery + kopf's initial lists
        runner = Runner(plane.url, jobs, KINDS[args.kind])

        proc = controller

        async def go() -> None:
            async with aiohttp.ClientSession(connector=plane.connector(), headers=plane.headers()) as session:
                run = asyncio.ensure_future(runner.run(session))
                while not run.done():
                    await asyncio.wait({run}, timeout=1.0)
                    if proc.poll() is not None and not run.done():
                        # a controller that exits (a lost Lease) finishes nothing more: fail, not wait
                        run.cancel()
                        raise RuntimeError(
                            f"the controller exited with {proc.returncode} after {len(runner.completed)} of "
                            f"{len(jobs)} workloads finished: {(tmp / 'controller.log').read_text()[-2000:]}")
                await run

        runner_cpu0 = time.process_time()
        asyncio.run(go())
        runner_cpu = time.process_time() - runner_cpu0
        # let the controller write the status it delays (status.workloadDelaySeconds), then stop it
        # (it waits for its writes in flight) and only then count: every write it sends is counted
        delay = float((config.get("status") or {}).get("workloadDelaySeconds", 2.0))
        time.sleep(delay + 1.0)
        # until the controller has no write in flight (its Events wait behind admissions on a slow
        # API server) and no write reached the API server for 3 s
        settle_deadline, last, still = time.monotonic() + 300, -1, 0
        while still < 3 and time.monotonic() < settle_deadline:
            total = sum(plane.writes(runner.writes).values())
            idle = writes_in_flight(config["metricsPort"]) == 0
            still = still + 1 if total == last and idle else 0
            last = total
            time.sleep(1.0)
        cpu_s, rss_mb = proc_stats(controller.pid)
        with urllib.request.urlopen(f"http://127.0.0.1:{config['metricsPort']}/metrics") as r:
            summary = controller_summary(text_string_to_metric_families(r.read().decode()))
        controller.send_signal(2)
        try:
            controller.wait(30)
        except subprocess.TimeoutExpired:
            controller.kill()
        server_cpu = plane.server_cpu_seconds()
        by_resource = plane.writes(runner.writes)
        by_agent = plane.writes_by_agent() if isinstance(plane, RealPlane) else None
        failed = plane.failed_requests()
    finally:
        if controller is not None and controller.poll() is None:
            controller.kill()
        plane.stop()
    wall = max(runner.completed.values()) - min(runner.created.values())
    used: dict[str, float] = {}
    waits: dict[str, list[float]] = {c: [] for c, *_ in CLASSES}
    for name, (queue, cls, cpu, _) in runner.info.items():
        used[queue] = used.get(queue, 0.0) + cpu * runner.used_before[name]
        waits[cls].append(runner.admitted[name] - runner.created[name])
    gangq_writes = sum(by_resource.values())
    n = len(jobs)
    result: dict[str, Any] = {
        "control_plane": plane_name,
        "kind": args.kind,
        "wall_seconds": round(wall, 2),
        "min_cq_usage_pct": round(min(100.0 * u / (NOMINAL_CPU * wall) for u in used.values()), 2),
        "avg_time_to_admission_s": {c: round(sum(w) / len(w), 3) for c, w in waits.items()},
        "api_writes_per_workload": round(gangq_writes / n, 3),
        "controller_cpu_seconds": round(cpu_s, 2),
        "controller_peak_rss_mb": round(rss_mb, 1),
        "api_server_cpu_seconds": server_cpu,
        "runner_cpu_seconds": round(runner_cpu, 2),
        "runner_request_ms": {k: round(1000 * t / n, 2) if n else None for k, (n, t) in runner.rtt.items()},
        "workloads": n,
        "evictions_seen_by_runner": runner.evictions,
        "scale": args.scale,
        "writes_by_resource": by_resource,
        "writes_by_agent": by_agent,
        "cq_cpu_seconds_used": {q: round(u, 3) for q, u in sorted(used.items())},
        "cq_status_usage": runner.quota.summary(),
        "failed_requests": failed,
        "runner_errors": runner.errors[:20],
        "runner_broken_streams": runner.broken_streams[:10],
        "controller_summary": summary,
        "controller_config": config,
    }
    result["ratios"] = {
        "wall_over_kueue": round(wall / KUEUE["wall_seconds"], 3),
        "wall_over_engine_alone": round(wall / baseline["wall_seconds"], 3) if baseline["wall_seconds"] else None,
        "admission_over_kueue": {
            c: round(result["avg_time_to_admission_s"][c] / KUEUE["avg_time_to_admission_s"][c], 3)
            for c in KUEUE["avg_time_to_admission_s"]
        },
    }
    result["targets"] = {
        "wall_seconds<=90": wall <= TARGETS["wall_seconds"],
        "min_cq_usage_pct>=70": result["min_cq_usage_pct"] >= TARGETS["min_cq_usage_pct"],
        "admission<=half_kueue": all(v <= 0.5 for v in result["ratios"]["admission_over_kueue"].values()),
        "api_writes_per_workload<=3": result["api_writes_per_workload"] <= TARGETS["api_writes_per_workload"],
    }
    return result


def side_by_side(emulated: dict[str, Any], real: dict[str, Any]) -> dict[str, Any]:
    """The real control plane's figures over the emulator's (> 1: slower or more on the real one)."""

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    return {
        "wall_seconds": ratio(real["wall_seconds"], emulated["wall_seconds"]),
        "min_cq_usage_pct": ratio(real["min_cq_usage_pct"], emulated["min_cq_usage_pct"]),
        "avg_time_to_admission_s": {
            c: ratio(real["avg_time_to_admission_s"][c], emulated["avg_time_to_admission_s"][c])
            for c in emulated["avg_time_to_admission_s"]
        },
        "api_writes_per_workload": ratio(real["api_writes_per_workload"], emulated["api_writes_per_workload"]),
        "controller_cpu_seconds": ratio(real["controller_cpu_seconds"], emulated["controller_cpu_seconds"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the workloads per class")
    parser.add_argument("--config", type=Path, help="controller configuration (merged over the benchmark's)")
    parser.add_argument("--profile", type=Path, help="run the controller under cProfile, writing this file")
    parser.add_argument("--control-plane", choices=("emulated", "real", "both"), default="emulated",
                        help="the sandbox (default), a real kube-apiserver + etcd (gangq.controlplane), or both "
                             "one after the other, side by side in one report")
    parser.add_argument("--kind", choices=tuple(KINDS), default="jobset",
                        help="submit the workloads as JobSets (default) or as batch/v1 Jobs")
    args = parser.parse_args()
    tune_gc()  # the runner holds 15,000 workloads' records: the controller's thresholds

    jobs, _ = plan(args.scale)
    baseline = engine_alone(args.scale)
    config = dict(CONTROLLER_CONFIG)
    if args.config:
        for key, value in (yaml.safe_load(args.config.read_text()) or {}).items():
            config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    planes = ("emulated", "real") if args.control_plane == "both" else (args.control_plane,)
    results = {name: run_on(name, jobs, config, baseline, args) for name in planes}
    common = {
        "kind": args.kind,
        "engine_alone": baseline,
        "kueue": KUEUE,
        "quota_bound_wall_seconds": 66.0 if args.scale == 1.0 else None,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()},
        "core_compiled": _installed_core_compiled(),
    }
    if len(results) == 1:
        report = {**results[planes[0]], **common}
    else:
        report = {**results, "real_over_emulated": side_by_side(results["emulated"], results["real"]), **common}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
