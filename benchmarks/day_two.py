"""Day two: with gangs running, a rolling update of the controller's two replicas and an upgrade
that changes its configuration stop no running gang and duplicate no admission, and a new leader
is in place within the Lease duration + 5 s.

    python benchmarks/day_two.py [--control-plane emulated|real] [--seed N] --json OUT.json

The cluster, the gangs' shape, the replicas (``gangq run`` processes with leader election and the
embedded JobSet reconciler) and the watcher are the chaos suite's (:mod:`benchmarks.chaos`), with
no fault injected and no preemption configured (every gang of one priority, no reclaim), so any
eviction is one the roll caused. The gangs are submitted over ``SPREAD_SECONDS``; meanwhile:

1. a rolling update, as the install's Deployment does it (``maxSurge: 1``, ``maxUnavailable: 1``):
   for each old replica in turn a new one starts and the old one gets SIGTERM at the same time, and
   the next step waits until the new one answers ``/readyz``;
2. the same roll again with a changed configuration file, which is what ``helm upgrade`` of a value
   does (the chart's checksum annotation of the configuration rolls the pods).

Rules, each a failure when broken: the watcher's (no JobSet unsuspended without an admission, none
admitted twice, never over quota or the nodes, none suspended without an eviction record, no gang
partly running); no eviction at all (``evictions_seen``); every gang admitted once and finished; after each SIGTERM of
the leader a live replica holds the Lease within ``LEASE_DURATION`` + 5 s (``failover_seconds``).
Writes ``{"rolls", "failover_seconds", "violations", "violation_examples", "evictions_seen",
"gangs_submitted", "gangs_finished", "targets", ...}``; exit code 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.chaos import (  # noqa: E402
    LEASE_DURATION,
    Api,
    EmulatedPlane,
    Gang,
    Plane,
    RealPlane,
    Replica,
    Watcher,
    _count,
    plan,
    queue_objects,
    set_up,
)
from gangq.controlplane.faultproxy import FaultProxy  # noqa: E402

GANGS = 40
SPREAD_SECONDS = 30.0
ROLL_AT = (5.0, 17.0)  # seconds after the first submission: the rolling update, then the upgrade
FINISH_TIMEOUT = 150.0


def config(plane: Plane, workload_delay: float) -> dict[str, Any]:
    return {
        "leaderElection": {"namespace": plane.lease_namespace, "leaseDurationSeconds": LEASE_DURATION,
                           "renewIntervalSeconds": 2.0},
        "podsReady": {"enable": False},
        "status": {"workloadDelaySeconds": workload_delay},
        "api": {"qps": 500, "burst": 1000},
    }


def no_preemption(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chaos suite's queues without their preemption policy: nothing may evict a running gang."""
    for doc in docs:
        if doc["kind"] == "ClusterQueue":
            doc["spec"].pop("preemption", None)
    return docs


class DayTwo:
    def __init__(self, plane: Plane, tmp: Path, seed: int) -> None:
        self.plane = plane
        self.tmp = tmp
        self.api = Api(plane)
        self.watcher = Watcher(self.api)
        # The replicas reach the API server through the chaos suite's proxy, with no fault set: the
        # same path as there, so the two runs differ only in what happens to the replicas.
        self.proxy = FaultProxy(plane.url, plane.ca_file).start()
        self.kubeconfig = self.proxy.kubeconfig(tmp / "controller.kubeconfig", plane.controller_token)
        for name, delay in (("config.yaml", 1.0), ("config-upgraded.yaml", 0.5)):
            (tmp / name).write_text(yaml.safe_dump(config(plane, delay)))
        self.replicas = [Replica(i, self.kubeconfig, tmp / "config.yaml", tmp) for i in (1, 2)]
        self.retired: list[Replica] = []
        rng = random.Random(seed)
        self.gangs = [Gang(g.name, g.queue, g.pods, g.cpu, g.run_seconds, "low") for g in plan(GANGS, rng)]
        self.submitted: dict[str, float] = {}
        self.rolls: list[dict[str, Any]] = []

    async def holder(self, session: aiohttp.ClientSession) -> str | None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.plane.lease_namespace}/leases/gangq-controller"
        status, lease = await self.api.request(session, "GET", path, attempts=3)
        if status != 200:
            return None
        holder = (lease.get("spec") or {}).get("holderIdentity")
        return str(holder) if holder else None

    def replica_of(self, identity: str | None) -> Replica | None:
        for replica in self.replicas:
            if identity is not None and replica.pid is not None and f"-{replica.pid}-" in f"-{identity}-":
                return replica
        return None

    async def ready(self, session: aiohttp.ClientSession, replica: Replica, timeout: float = 60.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                async with aiohttp.ClientSession() as probe, probe.get(
                        f"http://127.0.0.1:{replica.metrics_port}/readyz",
                        timeout=aiohttp.ClientTimeout(total=2)) as resp:
                    if resp.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError(f"replica {replica.index} never answered /readyz; logs in {self.tmp}")

    async def roll(self, session: aiohttp.ClientSession, kind: str, config_file: Path) -> None:
        """Replace each replica in turn: a new one starts as the old one is sent SIGTERM."""
        roll: dict[str, Any] = {"kind": kind, "started": round(time.time(), 3), "failover_seconds": []}
        print(f"day two: {kind}", file=sys.stderr, flush=True)
        for position, old in enumerate(list(self.replicas)):
            leader_before = self.replica_of(await self.holder(session))
            new = Replica(10 * (len(self.rolls) + 1) + position, self.kubeconfig, config_file, self.tmp)
            new.start()
            sent = time.time()
            old.signal(signal.SIGTERM)
            self.replicas[self.replicas.index(old)] = new
            self.retired.append(old)
            if old is leader_before:
                while True:
                    holder = self.replica_of(await self.holder(session))
                    if holder is not None and holder is not old:
                        roll["failover_seconds"].append(round(time.time() - sent, 2))
                        break
                    if time.time() - sent > LEASE_DURATION + 30:
                        roll["failover_seconds"].append(None)
                        break
                    await asyncio.sleep(0.1)
            exit_code = await asyncio.get_running_loop().run_in_executor(None, old.wait, 10.0)
            roll.setdefault("old_replica_exit_codes", []).append(exit_code)
            await self.ready(session, new)
        roll["ended"] = round(time.time(), 3)
        self.rolls.append(roll)

    async def submitter(self, session: aiohttp.ClientSession) -> None:
        start = time.time()
        for i, gang in enumerate(self.gangs):
            await asyncio.sleep(max(0.0, start + SPREAD_SECONDS * i / len(self.gangs) - time.time()))
            status, body = await self.api.request(session, "POST", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/"
                                                  "default/jobsets", gang.jobset())
            if status not in (200, 201, 409):
                raise RuntimeError(f"cannot create JobSet {gang.name}: {status} {body}")
            self.submitted.setdefault(gang.name, time.time())

    async def run(self) -> dict[str, Any]:
        stop = asyncio.Event()
        watcher = asyncio.ensure_future(self.watcher.run(stop))
        async with self.api.session() as session:
            for replica in self.replicas:
                replica.start()
            for replica in self.replicas:
                await self.ready(session, replica)
            deadline = time.time() + 60
            while self.replica_of(await self.holder(session)) is None:
                if time.time() > deadline:
                    raise RuntimeError(f"no controller took the Lease; logs in {self.tmp}")
                await asyncio.sleep(0.2)
            started = time.time()
            submitter = asyncio.ensure_future(self.submitter(session))
            for at, (kind, config_file) in zip(ROLL_AT, (("rolling_update", self.tmp / "config.yaml"),
                                                         ("upgrade", self.tmp / "config-upgraded.yaml")),
                                               strict=True):
                await asyncio.sleep(max(0.0, started + at - time.time()))
                await self.roll(session, kind, config_file)
            await submitter
            finish_deadline = time.time() + FINISH_TIMEOUT
            while len(self.watcher.finished) < len(self.gangs) and time.time() < finish_deadline:
                await asyncio.sleep(0.5)
            ended = time.time()
        stop.set()
        await watcher
        return self.report(started, ended)

    def stop(self) -> None:
        for replica in [*self.replicas, *self.retired]:
            replica.stop()
        self.proxy.stop()

    def report(self, started: float, ended: float) -> dict[str, Any]:
        w = self.watcher
        failovers = [f for roll in self.rolls for f in roll["failover_seconds"]]
        finished = sum(1 for g in self.gangs if g.name in w.finished)
        running_at_rolls = [sum(1 for name, t in w.first_admitted.items() if t <= roll["started"]
                                and w.finished.get(name, float("inf")) >= roll["started"]) for roll in self.rolls]
        result: dict[str, Any] = {
            "control_plane": self.plane.name,
            "rolls": self.rolls,
            "gangs_running_when_each_roll_started": running_at_rolls,
            "failover_seconds": failovers,
            "violations": len(w.violations),
            "violations_by_kind": _count(v["kind"] for v in w.violations),
            "violation_examples": w.violations[:10],
            "evictions_seen": w.evictions,
            "admissions_seen": len(w.admissions),
            "gangs_submitted": len(self.submitted),
            "gangs_finished": finished,
            "wall_seconds": round(ended - started, 1),
            "lease_duration_seconds": LEASE_DURATION,
        }
        result["targets"] = {
            "no_violations": not w.violations,
            "no_evictions": w.evictions == 0,
            "every_gang_finished": finished == len(self.gangs),
            "each_gang_admitted_once": len(w.admissions) == len(w.first_admitted) == len(self.gangs),
            "gangs_ran_through_the_rolls": all(n > 0 for n in running_at_rolls),
            "failover<=lease+5s": bool(failovers) and all(f is not None and f <= LEASE_DURATION + 5
                                                          for f in failovers),
        }
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--control-plane", choices=("emulated", "real"), default="emulated")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, required=True, help="where to write the figures")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix=f"gangq-day-two-{args.control_plane}-"))
    t0 = time.time()
    plane: Plane = EmulatedPlane(tmp) if args.control_plane == "emulated" else RealPlane(tmp)
    run: DayTwo | None = None
    try:
        set_up(plane, no_preemption(queue_objects()))
        run = DayTwo(plane, tmp, args.seed)
        result = asyncio.run(run.run())
    finally:
        if run is not None:
            run.stop()
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
