"""A kwok-style kubelet for the sandbox's simulated nodes.

Pods bound to a simulated node become Running and Ready after ``sandbox.gangq.io/start-delay-seconds`` (default
``KubeletConfig.start_delay_seconds``), their containers exit after ``sandbox.gangq.io/run-seconds`` (default
``KubeletConfig.default_run_seconds``; negative or ``inf`` = run forever) with exit code ``sandbox.gangq.io/exit-code``
(default ``KubeletConfig.default_exit_code``). The exit code and the pod's restartPolicy decide what follows: phase
Succeeded (0) or Failed (non-zero, reason Error), or an immediate in-place container restart (restartCount + 1;
OnFailure with a non-zero code, Always with any code; no CrashLoopBackOff delay). A pod with a deletionTimestamp is
killed (phase Failed, exit code 137, unless it already finished) and removed with a grace-0 delete once its grace
period, capped by ``KubeletConfig.max_grace_seconds``, has elapsed.

The status builders below are pure; :class:`Kubelet` runs them on timers against the Store.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gangq.sandbox.errors import ApiError

log = logging.getLogger(__name__)

ANN_RUN_SECONDS = "sandbox.gangq.io/run-seconds"
ANN_EXIT_CODE = "sandbox.gangq.io/exit-code"
ANN_START_DELAY = "sandbox.gangq.io/start-delay-seconds"
KILLED_EXIT_CODE = 137
MERGE = "application/merge-patch+json"


@dataclass
class KubeletConfig:
    """Defaults of the simulated kubelet (pod annotations override them per pod)."""

    default_run_seconds: float = 1.0
    default_exit_code: int = 0
    start_delay_seconds: float = 0.0
    max_grace_seconds: float | None = None  # cap on deletion grace periods (tests); None = honour them fully
    pod_cidr: str = "10.244"  # pod IPs are <pod_cidr>.<node index>.<n>

    def __post_init__(self) -> None:
        if self.start_delay_seconds < 0:
            raise ValueError(f"KubeletConfig.start_delay_seconds must be >= 0, got {self.start_delay_seconds}")
        if not 0 <= self.default_exit_code <= 255:
            raise ValueError(f"KubeletConfig.default_exit_code must be 0..255, got {self.default_exit_code}")
        if self.max_grace_seconds is not None and self.max_grace_seconds < 0:
            raise ValueError(f"KubeletConfig.max_grace_seconds must be >= 0, got {self.max_grace_seconds}")


class PodTiming:
    __slots__ = ("exit_code", "problems", "run_seconds", "start_delay")

    def __init__(self, start_delay: float, run_seconds: float | None, exit_code: int, problems: list[str]) -> None:
        self.start_delay = start_delay
        self.run_seconds = run_seconds  # None: runs forever
        self.exit_code = exit_code
        self.problems = problems  # annotation values that were ignored (for a warning event)


def pod_timing(pod: dict[str, Any], cfg: KubeletConfig) -> PodTiming:
    """Read the sandbox annotations; invalid values fall back to the defaults and are reported in ``problems``."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    problems: list[str] = []

    def number(key: str, default: float) -> float:
        raw = ann.get(key)
        if raw is None:
            return default
        try:
            value = float(str(raw).strip())
        except ValueError:
            problems.append(f"annotation {key}={raw!r} is not a number; using {default}")
            return default
        if math.isnan(value):
            problems.append(f"annotation {key}={raw!r} is not a number; using {default}")
            return default
        return value

    delay = number(ANN_START_DELAY, cfg.start_delay_seconds)
    if delay < 0 or math.isinf(delay):
        problems.append(f"annotation {ANN_START_DELAY}={ann.get(ANN_START_DELAY)!r} must be a finite number >= 0; "
                        f"using {cfg.start_delay_seconds}")
        delay = cfg.start_delay_seconds
    run = number(ANN_RUN_SECONDS, cfg.default_run_seconds)
    run_seconds = None if run < 0 or math.isinf(run) else run
    code = cfg.default_exit_code
    raw_code = ann.get(ANN_EXIT_CODE)
    if raw_code is not None:
        try:
            code = int(str(raw_code).strip())
            if not 0 <= code <= 255:
                raise ValueError
        except ValueError:
            problems.append(f"annotation {ANN_EXIT_CODE}={raw_code!r} must be an integer 0..255; "
                            f"using {cfg.default_exit_code}")
            code = cfg.default_exit_code
    return PodTiming(delay, run_seconds, code, problems)


def fmt_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _container_id(pod: dict[str, Any], name: str, restart: int) -> str:
    uid = (pod.get("metadata") or {}).get("uid", "")
    return "containerd://" + hashlib.sha256(f"{uid}/{name}/{restart}".encode()).hexdigest()


def _image_id(image: str) -> str:
    return f"{image}@sha256:" + hashlib.sha256(image.encode()).hexdigest()


def _kept_conditions(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """Conditions the kubelet does not own (kept as they are), with PodScheduled made True."""
    out = []
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Initialized", "Ready", "ContainersReady", "PodReadyToStartContainers", "PodScheduled"):
            continue
        out.append(c)
    sched = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"
                  and c.get("status") == "True"), None)
    return [sched or {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": None},
            *out]


def _cond(ctype: str, status: str, now: str, reason: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": now}
    if reason:
        c["reason"] = reason
    return c


def _init_statuses(pod: dict[str, Any], started: str) -> list[dict[str, Any]]:
    out = []
    for c in (pod.get("spec") or {}).get("initContainers") or []:
        name, image = c.get("name", ""), c.get("image", "")
        if c.get("restartPolicy") == "Always":  # sidecar: keeps running
            state: dict[str, Any] = {"running": {"startedAt": started}}
            ready = True
        else:
            state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started,
                                    "finishedAt": started, "containerID": _container_id(pod, name, 0)}}
            ready = False
        out.append({"name": name, "image": image, "imageID": _image_id(image),
                    "containerID": _container_id(pod, name, 0), "ready": ready, "started": ready,
                    "restartCount": 0, "state": state, "lastState": {}})
    return out


def pending_status(pod: dict[str, Any], host_ip: str, now: datetime) -> dict[str, Any]:
    """Bound, containers being created (shown while the start delay runs)."""
    nows = fmt_time(now)
    containers = [{"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "", "ready": False,
                   "started": False, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}},
                   "lastState": {}} for c in (pod.get("spec") or {}).get("containers") or []]
    conds = [*_kept_conditions(pod), _cond("PodReadyToStartContainers", "False", nows),
             _cond("Initialized", "True", nows), _cond("Ready", "False", nows, "ContainersNotReady"),
             _cond("ContainersReady", "False", nows, "ContainersNotReady")]
    status = dict(pod.get("status") or {})
    status.update(phase="Pending", hostIP=host_ip, hostIPs=[{"ip": host_ip}], startTime=status.get("startTime") or nows,
                  conditions=conds, containerStatuses=containers)
    return status


def running_status(pod: dict[str, Any], host_ip: str, pod_ip: str, now: datetime) -> dict[str, Any]:
    """All containers running and ready."""
    nows = fmt_time(now)
    containers = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        name, image = c.get("name", ""), c.get("image", "")
        containers.append({"name": name, "image": image, "imageID": _image_id(image),
                           "containerID": _container_id(pod, name, 0), "ready": True, "started": True,
                           "restartCount": 0, "state": {"running": {"startedAt": nows}}, "lastState": {}})
    conds = [*_kept_conditions(pod), _cond("PodReadyToStartContainers", "True", nows),
             _cond("Initialized", "True", nows), _cond("Ready", "True", nows), _cond("ContainersReady", "True", nows)]
    status = dict(pod.get("status") or {})
    status.update(phase="Running", hostIP=host_ip, hostIPs=[{"ip": host_ip}], podIP=pod_ip, podIPs=[{"ip": pod_ip}],
                  startTime=status.get("startTime") or nows, conditions=conds, containerStatuses=containers)
    init = _init_statuses(pod, nows)
    if init:
        status["initContainerStatuses"] = init
    return status


def _terminated(cs: dict[str, Any], code: int, now: str, pod: dict[str, Any]) -> dict[str, Any]:
    started = ((cs.get("state") or {}).get("running") or {}).get("startedAt") or now
    reason = "Completed" if code == 0 else "Error"
    return {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now,
            "containerID": cs.get("containerID") or _container_id(pod, cs.get("name", ""), 0)}


def finished_status(pod: dict[str, Any], exit_code: int, now: datetime) -> dict[str, Any]:
    """The containers exited with ``exit_code`` and will not restart: phase Succeeded (0) or Failed."""
    nows = fmt_time(now)
    status = dict(pod.get("status") or {})
    phase = "Succeeded" if exit_code == 0 else "Failed"
    reason = "PodCompleted" if exit_code == 0 else "PodFailed"
    containers = []
    for cs in status.get("containerStatuses") or []:
        if "terminated" in (cs.get("state") or {}):
            containers.append(cs)
            continue
        containers.append(dict(cs, ready=False, started=False, state={"terminated": _terminated(cs, exit_code, nows,
                                                                                                pod)}))
    init = []
    for cs in status.get("initContainerStatuses") or []:
        if "running" in (cs.get("state") or {}):  # sidecars are stopped when the main containers finish
            cs = dict(cs, ready=False, started=False, state={"terminated": _terminated(cs, 0, nows, pod)})
        init.append(cs)
    conds = [*_kept_conditions(pod), _cond("PodReadyToStartContainers", "False", nows),
             _cond("Initialized", "True", nows), _cond("Ready", "False", nows, reason),
             _cond("ContainersReady", "False", nows, reason)]
    status.update(phase=phase, conditions=conds, containerStatuses=containers)
    if init:
        status["initContainerStatuses"] = init
    return status


def restarted_status(pod: dict[str, Any], exit_code: int, now: datetime) -> dict[str, Any]:
    """The containers exited with ``exit_code`` and were restarted in place (restartCount + 1)."""
    nows = fmt_time(now)
    status = dict(pod.get("status") or {})
    containers = []
    for cs in status.get("containerStatuses") or []:
        count = int(cs.get("restartCount") or 0) + 1
        containers.append(dict(cs, restartCount=count, ready=True, started=True,
                               containerID=_container_id(pod, cs.get("name", ""), count),
                               lastState={"terminated": _terminated(cs, exit_code, nows, pod)},
                               state={"running": {"startedAt": nows}}))
    status["containerStatuses"] = containers
    return status


def restarts_container(restart_policy: str, exit_code: int) -> bool:
    return restart_policy == "Always" or (restart_policy == "OnFailure" and exit_code != 0)


class _PodRecord:
    __slots__ = ("bound_at", "deleted", "deletion_seen_at", "started_at", "timer", "uid", "warned")

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.bound_at: float | None = None
        self.started_at: float | None = None
        self.deletion_seen_at: float | None = None
        self.deleted = False
        self.warned = False
        self.timer: asyncio.TimerHandle | None = None


class Kubelet:
    """Runs the pods bound to the simulated nodes. ``sync(key)`` is called by the cluster's work queue."""

    def __init__(self, store: Any, node_names: list[str], config: KubeletConfig,
                 enqueue: Callable[[str], None], emit_event: Callable[[dict[str, Any], str, str, str], None]) -> None:
        self.store = store
        self.config = config
        self.node_index = {n: i for i, n in enumerate(node_names)}
        self._enqueue = enqueue
        self._emit = emit_event
        self._records: dict[str, _PodRecord] = {}
        self._ip_seq: dict[str, int] = {}
        self._host_ips: dict[str, str] = {}

    def add_node(self, name: str, internal_ip: str | None = None) -> None:
        self.node_index.setdefault(name, len(self.node_index))
        if internal_ip:
            self._host_ips[name] = internal_ip

    def host_ip(self, node: str) -> str:
        ip = self._host_ips.get(node)
        if ip:
            return ip
        i = self.node_index.get(node, 0)
        return f"10.0.{i // 250}.{i % 250 + 2}"

    def _pod_ip(self, node: str) -> str:
        n = self._ip_seq.get(node, 0) + 1
        self._ip_seq[node] = n
        idx = self.node_index.get(node, 0)
        return f"{self.config.pod_cidr}.{idx}.{(n - 1) % 253 + 2}"

    def wants(self, pod: dict[str, Any]) -> bool:
        return (pod.get("spec") or {}).get("nodeName") in self.node_index

    def forget(self, key: str) -> None:
        rec = self._records.pop(key, None)
        if rec is not None and rec.timer is not None:
            rec.timer.cancel()

    def stop(self) -> None:
        for key in list(self._records):
            self.forget(key)

    def _at(self, rec: _PodRecord, key: str, delay: float) -> None:
        if rec.timer is not None:
            rec.timer.cancel()
        loop = asyncio.get_running_loop()
        rec.timer = loop.call_later(max(0.0, delay), self._enqueue, key)

    def sync(self, key: str) -> None:
        ns, _, name = key.partition("/")
        try:
            pod = self.store.get("", "pods", ns, name)
        except ApiError as exc:
            if exc.code == 404:
                self.forget(key)
                return
            raise
        if not self.wants(pod):
            self.forget(key)
            return
        meta = pod["metadata"]
        rec = self._records.get(key)
        if rec is None or rec.uid != meta.get("uid"):
            self.forget(key)
            rec = self._records[key] = _PodRecord(meta.get("uid", ""))
        loop_now = asyncio.get_running_loop().time()
        wall = datetime.now(UTC)
        node = pod["spec"]["nodeName"]
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        timing = pod_timing(pod, self.config)
        if timing.problems and not rec.warned:
            rec.warned = True
            for problem in timing.problems:
                self._emit(pod, "Warning", "InvalidSandboxAnnotation", problem)

        if meta.get("deletionTimestamp"):
            self._sync_deleting(key, pod, rec, loop_now, wall, phase)
            return
        if phase in ("Succeeded", "Failed"):
            if rec.timer is not None:
                rec.timer.cancel()
                rec.timer = None
            return
        if rec.bound_at is None:
            rec.bound_at = loop_now
        if phase != "Running":
            due = rec.bound_at + timing.start_delay
            if loop_now < due:
                if not (pod.get("status") or {}).get("hostIP"):
                    self._write(pod, pending_status(pod, self.host_ip(node), wall))
                self._at(rec, key, due - loop_now)
                return
            self._write(pod, running_status(pod, self.host_ip(node), self._pod_ip(node), wall))
            for c in pod["spec"].get("containers") or []:
                self._emit(pod, "Normal", "Started", f"Started container {c.get('name', '')}")
            rec.started_at = loop_now
            if timing.run_seconds is not None:
                self._at(rec, key, timing.run_seconds)
            return
        # Running
        if rec.started_at is None:  # e.g. after a restart from a state file: derive from the status
            rec.started_at = loop_now - self._running_for(pod, wall)
        if timing.run_seconds is None:
            return
        due = rec.started_at + timing.run_seconds
        if loop_now < due:
            self._at(rec, key, due - loop_now)
            return
        policy = pod["spec"].get("restartPolicy") or "Always"
        if restarts_container(policy, timing.exit_code):
            self._write(pod, restarted_status(pod, timing.exit_code, wall))
            if timing.exit_code != 0:
                self._emit(pod, "Warning", "BackOff", "Back-off restarting failed container")
            rec.started_at = loop_now
            self._at(rec, key, timing.run_seconds)
            return
        self._write(pod, finished_status(pod, timing.exit_code, wall))

    def _running_for(self, pod: dict[str, Any], wall: datetime) -> float:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
            if started:
                try:
                    t = datetime.fromisoformat(started.replace("Z", "+00:00"))
                except ValueError:
                    continue
                return max(0.0, (wall - t).total_seconds())
        return 0.0

    def _sync_deleting(self, key: str, pod: dict[str, Any], rec: _PodRecord, loop_now: float, wall: datetime,
                       phase: str) -> None:
        meta = pod["metadata"]
        if rec.deleted:
            return
        if rec.deletion_seen_at is None:
            rec.deletion_seen_at = loop_now
            if phase not in ("Succeeded", "Failed"):
                for c in pod["spec"].get("containers") or []:
                    self._emit(pod, "Normal", "Killing", f"Stopping container {c.get('name', '')}")
        grace = float(meta.get("deletionGracePeriodSeconds") or 0)
        if self.config.max_grace_seconds is not None:
            grace = min(grace, self.config.max_grace_seconds)
        due = rec.deletion_seen_at + grace
        if loop_now < due:
            self._at(rec, key, due - loop_now)
            return
        if phase not in ("Succeeded", "Failed"):
            self._write(pod, finished_status(pod, KILLED_EXIT_CODE, wall))
        rec.deleted = True
        if rec.timer is not None:
            rec.timer.cancel()
            rec.timer = None
        try:
            self.store.delete("", "pods", meta.get("namespace"), meta["name"], grace_period_seconds=0)
        except ApiError as exc:
            if exc.code != 404:
                raise

    def _write(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            self.store.patch("", "pods", meta.get("namespace"), meta["name"], {"status": status}, MERGE,
                             subresource="status")
        except ApiError as exc:
            if exc.code != 404:
                raise
        pod["status"] = status
