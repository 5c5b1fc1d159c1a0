"""An in-memory stand-in for the API server and the Job controller, to drive the pure JobSet reconciler."""

from __future__ import annotations

import copy
from typing import Any

from gangq.api.meta import rfc3339
from gangq.jobset.reconciler import Result, reconcile


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def make_jobset(name: str = "js", *, rjobs: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    """A JobSet with replicatedJobs given as {name, replicas, completions, ...} shorthands."""
    rjobs = rjobs if rjobs is not None else [{"name": "worker", "replicas": 2}]
    replicated = []
    for r in rjobs:
        pods = r.get("pods", 1)
        job_spec: dict[str, Any] = {"parallelism": pods, "completions": pods,
                                    "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}
        if "template" in r:
            job_spec["template"] = r["template"]
        entry: dict[str, Any] = {"name": r["name"], "replicas": r.get("replicas", 1),
                                 "template": {"spec": job_spec}}
        if "dependsOn" in r:
            entry["dependsOn"] = r["dependsOn"]
        replicated.append(entry)
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"replicatedJobs": replicated, **spec}}


class World:
    """Applies a Result the way the API server + garbage collector would; deletions can be held back."""

    def __init__(self, jobset: dict[str, Any], now: float = 1_000_000.0) -> None:
        self.js = jobset
        self.jobs: dict[str, dict[str, Any]] = {}
        self.service: dict[str, Any] | None = None
        self.configmap: dict[str, Any] | None = None
        self.now = now
        self.events: list[tuple[str, str, str]] = []
        self.deleted_jobset = False
        self.hold_deletes = False  # True: deleted Jobs get a deletionTimestamp and stay until release()
        self.results: list[Result] = []

    def step(self) -> Result:
        res = reconcile(self.js, list(self.jobs.values()), service_exists=self.service is not None,
                        configmap_exists=self.configmap is not None, now=self.now)
        self.results.append(res)
        if res.status is not None:
            self.js = dict(self.js, status=res.status)
        if res.create_service is not None:
            self.service = res.create_service
        if res.create_configmap is not None:
            self.configmap = res.create_configmap
        for name in res.delete_jobs:
            if self.hold_deletes:
                self.jobs[name]["metadata"]["deletionTimestamp"] = rfc3339(self.now)
            else:
                del self.jobs[name]
        for job in res.create_jobs:
            name = job["metadata"]["name"]
            assert name not in self.jobs, f"created {name} twice"
            self.jobs[name] = copy.deepcopy(job)
        for upd in res.update_jobs:
            job = self.jobs[upd.name]
            if upd.clear_start_time:
                job.setdefault("status", {}).pop("startTime", None)
            self.jobs[upd.name] = merge_patch(job, upd.patch)
        self.events += [(e.type, e.reason, e.message) for e in res.events]
        self.deleted_jobset = self.deleted_jobset or res.delete_jobset
        return res

    def settle(self, limit: int = 10) -> None:
        for _ in range(limit):
            res = self.step()
            if not (res.status or res.create_jobs or res.delete_jobs or res.update_jobs or res.create_service):
                return
        raise AssertionError("the reconciler did not settle")

    def release(self) -> None:
        """The garbage collector finishes the held deletions."""
        for name in [n for n, j in self.jobs.items() if j["metadata"].get("deletionTimestamp")]:
            del self.jobs[name]

    # --- the Job controller -----------------------------------------------------------------------------------
    def _condition(self, name: str, ctype: str, reason: str, message: str) -> None:
        job = self.jobs[name]
        status = job.setdefault("status", {})
        status["conditions"] = [{"type": ctype, "status": "True", "reason": reason, "message": message,
                                 "lastTransitionTime": rfc3339(self.now)}]
        status["active"] = 0
        status["ready"] = 0

    def run(self, name: str, ready: bool = True) -> None:
        job = self.jobs[name]
        pods = job["spec"].get("parallelism", 1)
        job["status"] = {"active": pods, "ready": pods if ready else 0, "startTime": rfc3339(self.now)}

    def complete(self, name: str) -> None:
        self._condition(name, "Complete", "CompletionsReached", "Reached expected number of succeeded pods")
        self.jobs[name]["status"]["succeeded"] = self.jobs[name]["spec"].get("completions", 1)

    def fail(self, name: str, reason: str = "BackoffLimitExceeded",
             message: str = "Job has reached the specified backoff limit") -> None:
        self._condition(name, "Failed", reason, message)

    # --- reading ----------------------------------------------------------------------------------------------
    def condition(self, ctype: str) -> dict[str, Any] | None:
        for cond in (self.js.get("status") or {}).get("conditions") or []:
            if cond["type"] == ctype:
                return cond
        return None

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.events]

    def attempts(self) -> set[str]:
        return {j["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for j in self.jobs.values()}
