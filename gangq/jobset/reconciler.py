"""The JobSet reconciler: an observed JobSet, its child Jobs and whether its Service exists in; actions out.

No I/O and no clock: time is an argument. The order of decisions follows upstream's controller
(kubernetes-sigs/jobset ``pkg/controllers``): managedBy, child Jobs sorted into the current attempt (active,
succeeded, failed) and earlier attempts, replicatedJobsStatus, the terminal path (delete active Jobs, TTL), deletion of
earlier attempts' Jobs, the failure policy, the success policy, the headless Service, Job creation (dependsOn, InOrder
startup, BlockingRecreate), and suspend / resume. gangq's differences: a suspended JobSet with no Job of its current
attempt (a queued JobSet waiting for admission, or one evicted mid-restart) gets no Jobs, Service or ConfigMap
(jobset#535); an invalid JobSet is failed with a condition and an Event instead of being rejected by a webhook; and
the opt-in framework wiring (:mod:`gangq.jobset.frameworks`).

The caller writes ``Result.status`` first (guarded by the JobSet's resourceVersion) and applies the other actions only
if that write succeeded, so that a reconcile of a stale cache never acts twice.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from gangq.api.jobset import JobSet, dump, plain_json, with_defaults
from gangq.api.meta import Meta, condition_true, conditions, find_condition, parse_timestamp, rfc3339
from gangq.core.errors import SpecError

from . import constants as c
from . import frameworks
from .validation import Violation, pods_per_job, validate

log = logging.getLogger(__name__)

JsonObj = dict[str, Any]


# --- actions ------------------------------------------------------------------------------------------------------


class Event:
    """A Kubernetes Event about the JobSet."""

    __slots__ = ("message", "reason", "type")

    def __init__(self, type: str, reason: str, message: str) -> None:
        self.type = type
        self.reason = reason
        self.message = message

    def __repr__(self) -> str:
        return f"Event({self.type}, {self.reason}, {self.message!r})"


class JobUpdate:
    """A JSON merge patch for a child Job; ``clear_start_time`` first sets ``status.startTime`` to null (the API
    server allows pod template changes of a suspended Job only before it has started)."""

    __slots__ = ("clear_start_time", "name", "patch")

    def __init__(self, name: str, patch: JsonObj, clear_start_time: bool = False) -> None:
        self.name = name
        self.patch = patch
        self.clear_start_time = clear_start_time

    def __repr__(self) -> str:
        return f"JobUpdate({self.name}, {self.patch!r}, clear_start_time={self.clear_start_time})"


class Result:
    """What to do, in this order: write ``status`` (when not None); create the Service and ConfigMap; delete
    ``delete_jobs`` (propagation Foreground); create ``create_jobs``; apply ``update_jobs``; post ``events``; delete
    the JobSet when ``delete_jobset``; reconcile again after ``requeue_after`` seconds when set."""

    __slots__ = ("create_configmap", "create_jobs", "create_service", "delete_jobs", "delete_jobset", "events",
                 "requeue_after", "skipped", "status", "update_jobs")

    def __init__(self) -> None:
        self.status: JsonObj | None = None
        self.create_jobs: list[JsonObj] = []
        self.delete_jobs: list[str] = []
        self.update_jobs: list[JobUpdate] = []
        self.create_service: JsonObj | None = None
        self.create_configmap: JsonObj | None = None
        self.events: list[Event] = []
        self.delete_jobset = False
        self.requeue_after: float | None = None
        self.skipped: str | None = None

    def __repr__(self) -> str:
        fields = {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) not in (None, [], False)}
        return f"Result({fields})"


# --- helpers ------------------------------------------------------------------------------------------------------


def parse_time(value: str | None) -> float | None:
    """An RFC 3339 time as epoch seconds; None when absent or unreadable."""
    if not value:
        return None
    try:
        return parse_timestamp(value)
    except ValueError:
        return None


def job_hash_key(namespace: str, job_name: str) -> str:
    """Upstream's ``job-key``: the SHA-1 hex digest of ``<namespace>/<jobName>``."""
    return hashlib.sha1(f"{namespace}/{job_name}".encode()).hexdigest()


def job_name(jobset: str, rjob: str, index: int) -> str:
    return f"{jobset}-{rjob}-{index}"


_EXCLUSIVE = {
    c.COND_STARTUP_IN_PROGRESS: c.COND_STARTUP_COMPLETED,
    c.COND_STARTUP_COMPLETED: c.COND_STARTUP_IN_PROGRESS,
}


def set_condition(status: JsonObj, ctype: str, cstatus: str, reason: str, message: str, now: float,
                  events: list[Event] | None = None, event_type: str = "Normal") -> bool:
    """Upstream's semantics: a condition of the same type and status is left alone; one with another status is
    replaced; a new one is added only when True; StartupPolicyInProgress and StartupPolicyCompleted exclude each
    other. An Event (reason and message of the condition) is queued on change."""
    conditions: list[JsonObj] = status.setdefault("conditions", [])
    changed = found = False
    new = {"type": ctype, "status": cstatus, "reason": reason, "message": message, "lastTransitionTime": rfc3339(now)}
    for i, cond in enumerate(conditions):
        if cond.get("type") == ctype:
            found = True
            if cond.get("status") != cstatus:
                conditions[i] = new
                changed = True
        elif _EXCLUSIVE.get(ctype) == cond.get("type") and cond.get("status") == "True" and cstatus == "True":
            conditions[i] = dict(cond, status="False", lastTransitionTime=new["lastTransitionTime"])
            changed = True
    if not found and cstatus == "True":
        conditions.append(new)
        changed = True
    if changed and events is not None:
        events.append(Event(event_type, reason, message))
    return changed


def _merge_maps(old: Mapping[str, str] | None, new: Mapping[str, str] | None) -> dict[str, str] | None:
    if not old and not new:
        return None
    out = dict(old or {})
    out.update(new or {})
    return out


def _merge_lists(old: list[Any] | None, new: list[Any] | None) -> list[Any] | None:
    if not old and not new:
        return None
    out = list(old or [])
    for item in new or []:
        if item not in out:
            out.append(item)
    return out


class ChildJob:
    """A child Job as the reconciler reads it."""

    __slots__ = ("attempt", "deleting", "failure", "finished", "name", "obj", "rjob")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj
        meta = Meta(obj)
        labels = meta.labels
        self.name: str = meta.name
        self.rjob: str = labels.get(c.REPLICATED_JOB_NAME_KEY, "")
        try:
            self.attempt: int = int(labels.get(c.RESTARTS_KEY, ""))
        except ValueError:
            self.attempt = -1
        self.deleting = meta.deleting
        self.finished = ""
        self.failure: Mapping[str, Any] | None = None
        for cond in conditions(obj):
            if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
                self.finished = cond["type"]
                if cond["type"] == "Failed":
                    self.failure = cond
                break

    @property
    def suspended(self) -> bool:
        return bool((self.obj.get("spec") or {}).get("suspend"))

    @property
    def failure_time(self) -> str:
        return (self.failure or {}).get("lastTransitionTime") or ""


class Children:
    __slots__ = ("active", "failed", "previous", "succeeded")

    def __init__(self) -> None:
        self.active: list[ChildJob] = []
        self.succeeded: list[ChildJob] = []
        self.failed: list[ChildJob] = []
        self.previous: list[ChildJob] = []

    def current(self) -> list[ChildJob]:
        return self.active + self.succeeded + self.failed

    def names(self) -> set[str]:
        return {j.name for j in self.active + self.succeeded + self.failed + self.previous}


def owned_by(job: Mapping[str, Any], uid: str | None, name: str) -> bool:
    for ref in Meta(job).owner_references:
        if ref.controller and ref.kind == c.KIND:
            return ref.uid == uid if uid else ref.name == name
    return False


def classify(jobs: Iterable[Mapping[str, Any]], restarts: int, uid: str | None, name: str) -> Children:
    children = Children()
    for obj in sorted(jobs, key=lambda j: Meta(j).name):
        if not owned_by(obj, uid, name):
            continue
        job = ChildJob(obj)
        if job.attempt < restarts:
            children.previous.append(job)
        elif job.finished == "Failed":
            children.failed.append(job)
        elif job.finished == "Complete":
            children.succeeded.append(job)
        else:
            children.active.append(job)
    return children


def replicated_jobs_status(js: JobSet, children: Children) -> list[JsonObj]:
    counts: dict[str, JsonObj] = {
        r.name: {"name": r.name, "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
        for r in js.replicated_jobs()
    }
    for job in children.active:
        st = counts.get(job.rjob)
        if st is None:
            continue
        spec = job.obj.get("spec") or {}
        status = job.obj.get("status") or {}
        parallelism = spec.get("parallelism")
        pods = 1 if parallelism is None else parallelism
        if spec.get("completions") is not None:
            pods = min(pods, spec["completions"])
        if (status.get("succeeded") or 0) + (status.get("ready") or 0) >= pods:
            st["ready"] += 1
        if (status.get("active") or 0) > 0:
            st["active"] += 1
        if spec.get("suspend"):
            st["suspended"] += 1
    for job in children.succeeded:
        if job.rjob in counts:
            counts[job.rjob]["succeeded"] += 1
    for job in children.failed:
        if job.rjob in counts:
            counts[job.rjob]["failed"] += 1
    return list(counts.values())


def _dependency_reached(rjob: Any, replicas: Mapping[str, int], statuses: Mapping[str, JsonObj]) -> bool:
    for dep in rjob.depends_on or []:
        st = statuses.get(dep.name)
        if st is None:
            return False
        want = replicas.get(dep.name, 0)
        if dep.status == "Complete" and st["succeeded"] != want:
            return False
        if dep.status == "Ready" and st["ready"] + st["failed"] + st["succeeded"] != want:
            return False
    return True


def _all_started(replicas: int, st: JsonObj | None) -> bool:
    return st is not None and st["ready"] + st["succeeded"] >= replicas


# --- the reconciler -----------------------------------------------------------------------------------------------


class Reconciler:
    """Reconciles one JobSet. Build one per call (cheap); :meth:`run` returns the :class:`Result`."""

    def __init__(self, obj: Mapping[str, Any], jobs: Iterable[Mapping[str, Any]], *, service_exists: bool,
                 now: float, configmap_exists: bool = False) -> None:
        self.obj = obj
        self.jobs = list(jobs)
        self.service_exists = service_exists
        self.configmap_exists = configmap_exists
        self.now = now
        self.result = Result()
        self.old_status: JsonObj = plain_json(obj.get("status") or {})
        self.status: JsonObj = copy.deepcopy(self.old_status)
        meta = Meta(obj)
        self.name: str = meta.name
        self.namespace: str = meta.namespace_or_default
        self.uid: str | None = meta.uid or None

    # entry point
    def run(self) -> Result:
        res = self.result
        if Meta(self.obj).deleting:
            res.skipped = "being deleted"
            return res
        managed_by = (self.obj.get("spec") or {}).get("managedBy")
        if managed_by and managed_by != c.CONTROLLER_NAME:
            res.skipped = f"managed by {managed_by}"
            return res
        violations: list[Violation]
        js: JobSet | None = None
        try:
            js = with_defaults(self.obj)
        except SpecError as err:
            violations = [Violation(err.field, err.message)]
        else:
            violations = validate(js)
        if js is None or violations:
            self._invalid(violations, js)
        else:
            self._reconcile(js)
        self._shape_status()
        if self.status != self.old_status:
            res.status = self.status
        return res

    def _shape_status(self) -> None:
        """The status as upstream's Go types serialize it: ``restarts`` always present (it has no
        ``omitempty``), ``conditions`` left out while empty (it has), and ``replicatedJobsStatus`` in
        descending name order (upstream sorts it so, in place, to compare it with the stored one)."""
        if not self.status:
            return
        self.status.setdefault("restarts", 0)
        if self.status.get("conditions") == []:
            del self.status["conditions"]
        if self.status.get("replicatedJobsStatus"):
            self.status["replicatedJobsStatus"] = sorted(self.status["replicatedJobsStatus"],
                                                         key=lambda s: s["name"], reverse=True)

    def _invalid(self, violations: list[Violation], js: JobSet | None) -> None:
        message = "; ".join(str(v) for v in violations)
        if not self._finished():
            self._fail(c.VALIDATION_FAILED_REASON, f"invalid JobSet: {message}")
        if js is not None:
            children = classify(self.jobs, self.status.get("restarts") or 0, self.uid, self.name)
            self._finish(js, children)

    def _finished(self) -> bool:
        conds = self.status.get("conditions")
        return condition_true(conds, c.COND_COMPLETED) or condition_true(conds, c.COND_FAILED)

    def _fail(self, reason: str, message: str) -> None:
        set_condition(self.status, c.COND_FAILED, "True", reason, message, self.now, self.result.events, "Warning")
        self.status["terminalState"] = c.TERMINAL_FAILED

    def _complete(self) -> None:
        set_condition(self.status, c.COND_COMPLETED, "True", c.ALL_JOBS_COMPLETED_REASON,
                      c.ALL_JOBS_COMPLETED_MESSAGE, self.now, self.result.events)
        self.status["terminalState"] = c.TERMINAL_COMPLETED

    def _finish(self, js: JobSet, children: Children) -> None:
        """Terminal: delete the active Jobs, then the JobSet once its TTL has passed."""
        res = self.result
        res.delete_jobs += [j.name for j in children.active + children.previous if not j.deleting]
        ttl = js.spec.ttl_seconds_after_finished
        if ttl is None:
            return
        conds = self.status.get("conditions")
        cond = find_condition(conds, c.COND_COMPLETED)
        if cond is None or cond.get("status") != "True":
            cond = find_condition(conds, c.COND_FAILED)
        finished_at = parse_time((cond or {}).get("lastTransitionTime"))
        if finished_at is None:
            finished_at = self.now
        expires = finished_at + ttl
        if self.now >= expires:
            res.delete_jobset = True
        else:
            res.requeue_after = expires - self.now

    def _reconcile(self, js: JobSet) -> None:
        res = self.result
        restarts = self.status.get("restarts") or 0
        children = classify(self.jobs, restarts, self.uid, self.name)
        statuses = replicated_jobs_status(js, children)
        self.status["replicatedJobsStatus"] = statuses
        if self._finished():
            self._finish(js, children)
            return
        res.delete_jobs += [j.name for j in children.previous if not j.deleting]
        if children.failed:
            self._failure_policy(js, children)
            if self._finished():
                self._finish(js, children)
            return
        if children.succeeded and self._success_policy_met(js, children):
            self._complete()
            self._finish(js, children)
            return
        suspended = bool(js.spec.suspend)
        by_name = {s["name"]: s for s in statuses}
        if suspended and not children.current():
            # gangq: a queued (or evicted while restarting) JobSet holds no children until it is admitted.
            set_condition(self.status, c.COND_SUSPENDED, "True", c.SUSPENDED_REASON, c.SUSPENDED_MESSAGE,
                          self.now, res.events)
            return
        self._ensure_service(js)
        self._ensure_configmap(js)
        self._create_jobs(js, children, by_name, suspended)
        if suspended:
            for job in children.active:
                if not job.suspended:
                    res.update_jobs.append(JobUpdate(job.name, {"spec": {"suspend": True}}))
            set_condition(self.status, c.COND_SUSPENDED, "True", c.SUSPENDED_REASON, c.SUSPENDED_MESSAGE,
                          self.now, res.events)
        else:
            self._resume(js, children, by_name)

    # --- policies -------------------------------------------------------------------------------------------------
    def _success_policy_met(self, js: JobSet, children: Children) -> bool:
        policy = js.spec.success_policy
        targets = (policy.target_replicated_jobs if policy else None) or []
        matching = sum(1 for j in children.succeeded if not targets or j.rjob in targets)
        if policy is not None and policy.operator == "Any":
            return matching >= 1
        expected = sum((1 if r.replicas is None else r.replicas) for r in js.replicated_jobs()
                       if not targets or r.name in targets)
        return matching >= expected

    def _failure_policy(self, js: JobSet, children: Children) -> None:
        res = self.result
        first = min(children.failed, key=lambda j: j.failure_time)
        fp = js.spec.failure_policy
        if fp is None:
            self._fail(c.FAILED_JOBS_REASON, f"{c.FAILED_JOBS_MESSAGE} (first failed job: {first.name})")
            return
        action = "RestartJobSet"
        matched = first
        for rule in fp.rules or []:
            found: ChildJob | None = None
            for job in children.failed:
                if _rule_applies(rule, job) and (found is None or job.failure_time < found.failure_time):
                    found = job
            if found is not None:
                action, matched = rule.action, found
                log.debug("JobSet %s/%s: failure policy rule %s matches Job %s", self.namespace, self.name,
                          rule.name, found.name)
                break
        suffix = f" (first failed job: {matched.name})"
        if action == "FailJobSet":
            self._fail(c.FAIL_JOBSET_ACTION_REASON, c.FAIL_JOBSET_ACTION_MESSAGE + suffix)
            return
        counts = action in ("RestartJobSet", "RestartJob")
        if counts and (self.status.get("restartsCountTowardsMax") or 0) >= (fp.max_restarts or 0):
            self._fail(c.REACHED_MAX_RESTARTS_REASON, c.REACHED_MAX_RESTARTS_MESSAGE + suffix)
            return
        self.status["restarts"] = (self.status.get("restarts") or 0) + 1
        if counts:
            self.status["restartsCountTowardsMax"] = (self.status.get("restartsCountTowardsMax") or 0) + 1
            res.events.append(Event("Warning", c.RESTART_JOBSET_ACTION_REASON,
                                    c.RESTART_JOBSET_ACTION_MESSAGE + suffix))
        else:
            res.events.append(Event("Warning", c.RESTART_IGNORE_MAX_ACTION_REASON,
                                    c.RESTART_IGNORE_MAX_ACTION_MESSAGE + suffix))

    # --- children -------------------------------------------------------------------------------------------------
    def owner_reference(self) -> JsonObj:
        return {"apiVersion": c.API_VERSION, "kind": c.KIND, "name": self.name, "uid": self.uid or "",
                "controller": True, "blockOwnerDeletion": True}

    def _dns(self, js: JobSet) -> bool:
        return bool(js.spec.network and js.spec.network.enable_dns_hostnames)

    def _ensure_service(self, js: JobSet) -> None:
        if not self._dns(js) or self.service_exists:
            return
        network = js.spec.network
        self.result.create_service = {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": frameworks.subdomain_of(js), "namespace": self.namespace,
                         "labels": {c.JOBSET_NAME_KEY: self.name},
                         "ownerReferences": [self.owner_reference()]},
            "spec": {"clusterIP": "None", "selector": {c.JOBSET_NAME_KEY: self.name},
                     "publishNotReadyAddresses": network is None or network.publish_not_ready_addresses is not False},
        }

    def _ensure_configmap(self, js: JobSet) -> None:
        if frameworks.framework_of(js) == "mpi" and not self.configmap_exists:
            self.result.create_configmap = frameworks.mpi_configmap(js, self.owner_reference())

    def _create_jobs(self, js: JobSet, children: Children, statuses: Mapping[str, JsonObj], suspended: bool) -> None:
        blocking = (js.spec.failure_policy is not None and js.spec.failure_policy.restart_strategy == "BlockingRecreate"
                    and bool(children.previous))
        in_order = js.spec.startup_policy is not None and js.spec.startup_policy.startup_policy_order == "InOrder"
        existing = children.names()
        replicas: dict[str, int] = {}
        builder = _JobBuilder(js, self)
        for index, rjob in enumerate(js.replicated_jobs()):
            n = 1 if rjob.replicas is None else rjob.replicas
            replicas[rjob.name] = n
            if not _dependency_reached(rjob, replicas, statuses):
                continue
            if not suspended and in_order and _all_started(n, statuses.get(rjob.name)):
                continue
            if not blocking:
                for job_index in range(n):
                    if job_name(self.name, rjob.name, job_index) not in existing:
                        self.result.create_jobs.append(builder.build(index, job_index, suspended))
            if not suspended and in_order:
                set_condition(self.status, c.COND_STARTUP_IN_PROGRESS, "True", c.IN_ORDER_IN_PROGRESS_REASON,
                              c.IN_ORDER_IN_PROGRESS_MESSAGE, self.now, self.result.events)
                return
        if not suspended and in_order:
            set_condition(self.status, c.COND_STARTUP_COMPLETED, "True", c.IN_ORDER_COMPLETED_REASON,
                          c.IN_ORDER_COMPLETED_MESSAGE, self.now, self.result.events)

    def _resume(self, js: JobSet, children: Children, statuses: Mapping[str, JsonObj]) -> None:
        in_order = js.spec.startup_policy is not None and js.spec.startup_policy.startup_policy_order == "InOrder"
        by_rjob: dict[str, list[ChildJob]] = {}
        for job in children.active:
            by_rjob.setdefault(job.rjob, []).append(job)
        replicas: dict[str, int] = {}
        templates = {r.name: dump(r.template.spec.template) for r in js.replicated_jobs()}
        for rjob in js.replicated_jobs():
            n = 1 if rjob.replicas is None else rjob.replicas
            replicas[rjob.name] = n
            if not _dependency_reached(rjob, replicas, statuses):
                continue
            if in_order and _all_started(n, statuses.get(rjob.name)):
                continue
            for job in by_rjob.get(rjob.name, []):
                if job.suspended:
                    self.result.update_jobs.append(_resume_update(job, templates[rjob.name]))
            if in_order:
                set_condition(self.status, c.COND_STARTUP_IN_PROGRESS, "True", c.IN_ORDER_IN_PROGRESS_REASON,
                              c.IN_ORDER_IN_PROGRESS_MESSAGE, self.now, self.result.events)
                return
        set_condition(self.status, c.COND_SUSPENDED, "False", c.RESUMED_REASON, c.RESUMED_MESSAGE, self.now,
                      self.result.events)


def _rule_applies(rule: Any, job: ChildJob) -> bool:
    failure = job.failure or {}
    if rule.on_job_failure_reasons and failure.get("reason") not in rule.on_job_failure_reasons:
        return False
    if rule.on_job_failure_message_patterns:
        message = failure.get("message") or ""
        if not any(re.search(p, message) for p in rule.on_job_failure_message_patterns):
            return False
    if not job.rjob:
        return False
    return not rule.target_replicated_jobs or job.rjob in rule.target_replicated_jobs


def _resume_update(job: ChildJob, template: Mapping[str, Any]) -> JobUpdate:
    """Unsuspend a Job, merging the replicatedJob's pod template labels, annotations, nodeSelector, tolerations and
    schedulingGates into the Job's (how gangq's flavor assignment reaches a JobSet's existing Jobs)."""
    jt = ((job.obj.get("spec") or {}).get("template") or {})
    jmeta, jspec = Meta(jt), jt.get("spec") or {}
    tmeta, tspec = Meta(template), template.get("spec") or {}
    meta_patch: JsonObj = {}
    spec_patch: JsonObj = {}
    for key, old, new in (("labels", jmeta.labels, tmeta.labels),
                          ("annotations", jmeta.annotations, tmeta.annotations)):
        merged = _merge_maps(old, new)
        if merged is not None and merged != old:
            meta_patch[key] = merged
    merged_ns = _merge_maps(jspec.get("nodeSelector"), tspec.get("nodeSelector"))
    if merged_ns is not None and merged_ns != jspec.get("nodeSelector"):
        spec_patch["nodeSelector"] = merged_ns
    for key in ("tolerations", "schedulingGates"):
        merged_list = _merge_lists(jspec.get(key), tspec.get(key))
        if merged_list is not None and merged_list != jspec.get(key):
            spec_patch[key] = merged_list
    patch: JsonObj = {"spec": {"suspend": False}}
    if meta_patch or spec_patch:
        tpatch: JsonObj = {}
        if meta_patch:
            tpatch["metadata"] = meta_patch
        if spec_patch:
            tpatch["spec"] = spec_patch
        patch["spec"]["template"] = tpatch
    started = bool((job.obj.get("status") or {}).get("startTime"))
    return JobUpdate(job.name, patch, clear_start_time=started and bool(meta_patch or spec_patch))


class _JobBuilder:
    """Builds child Jobs with upstream's names, labels, annotations and owner reference."""

    __slots__ = ("coordinator", "global_index", "global_replicas", "group_index", "group_replicas", "js",
                 "parent", "restarts", "subdomain")

    def __init__(self, js: JobSet, parent: Reconciler) -> None:
        self.js = js
        self.parent = parent
        self.restarts = str(parent.status.get("restarts") or 0)
        self.subdomain = frameworks.subdomain_of(js) if parent._dns(js) else None
        rjobs = js.replicated_jobs()
        total = 0
        self.global_index: list[int] = []
        self.group_index: list[int] = []
        group_totals: dict[str, int] = {}
        for rjob in rjobs:
            n = 1 if rjob.replicas is None else rjob.replicas
            group = rjob.group_name or "default"
            self.global_index.append(total)
            self.group_index.append(group_totals.get(group, 0))
            group_totals[group] = group_totals.get(group, 0) + n
            total += n
        self.global_replicas = str(total)
        self.group_replicas = group_totals
        coord = js.spec.coordinator
        self.coordinator = (frameworks.pod_host(js, coord.replicated_job, coord.job_index or 0, coord.pod_index or 0)
                            if coord is not None else None)

    def _labels(self, rjob_index: int, job_index: int) -> dict[str, str]:
        parent = self.parent
        rjob = self.js.replicated_jobs()[rjob_index]
        name = job_name(parent.name, rjob.name, job_index)
        group = rjob.group_name or "default"
        out = {
            c.JOBSET_NAME_KEY: parent.name,
            c.JOBSET_UID_KEY: parent.uid or "",
            c.REPLICATED_JOB_NAME_KEY: rjob.name,
            c.RESTARTS_KEY: self.restarts,
            c.REPLICATED_JOB_REPLICAS_KEY: str(1 if rjob.replicas is None else rjob.replicas),
            c.GLOBAL_REPLICAS_KEY: self.global_replicas,
            c.JOB_INDEX_KEY: str(job_index),
            c.JOB_KEY: job_hash_key(parent.namespace, name),
            c.JOB_GLOBAL_INDEX_KEY: str(self.global_index[rjob_index] + job_index),
            c.GROUP_NAME_KEY: group,
            c.GROUP_REPLICAS_KEY: str(self.group_replicas[group]),
            c.JOB_GROUP_INDEX_KEY: str(self.group_index[rjob_index] + job_index),
        }
        if self.coordinator is not None:
            out[c.COORDINATOR_KEY] = self.coordinator
        return out

    def build(self, rjob_index: int, job_index: int, suspended: bool) -> JsonObj:
        parent = self.parent
        rjob = self.js.replicated_jobs()[rjob_index]
        template = dump(rjob.template)
        ours = self._labels(rjob_index, job_index)
        jobset_annotations = self.js.metadata.annotations or {}
        tmeta = Meta(template)
        # The JobSet's exclusive placement, else the replicatedJob's (upstream lets the latter win).
        placement = tmeta.annotations if c.EXCLUSIVE_KEY in tmeta.annotations else jobset_annotations
        extra_annotations = {k: placement[k] for k in (c.EXCLUSIVE_KEY, c.NODE_SELECTOR_STRATEGY_KEY)
                             if k in placement}
        job: JsonObj = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {
                "name": job_name(parent.name, rjob.name, job_index),
                "namespace": parent.namespace,
                "labels": {**tmeta.labels, **ours},
                "annotations": {**tmeta.annotations, **extra_annotations, **ours},
                "ownerReferences": [parent.owner_reference()],
            },
            "spec": template["spec"],
        }
        spec = job["spec"]
        pod = spec.setdefault("template", {})
        pmeta = pod.setdefault("metadata", {}) or {}
        pod["metadata"] = pmeta
        pmeta["labels"] = {**(pmeta.get("labels") or {}), **ours}
        pmeta["annotations"] = {**(pmeta.get("annotations") or {}), **extra_annotations, **ours}
        pspec = pod.setdefault("spec", {})
        if self.subdomain is not None:
            pspec["subdomain"] = self.subdomain
        spec["suspend"] = suspended
        exclusive_placement(job)
        for warning in frameworks.inject(job, self.js, rjob_index, job_index):
            parent.result.events.append(Event("Warning", c.FRAMEWORK_WARNING_REASON, warning))
        return job


def exclusive_placement(job: JsonObj) -> None:
    """Exclusive placement of a child Job whose annotations name a topology key
    (``alpha.jobset.sigs.k8s.io/exclusive-topology``): every pod of the Job in one domain of that
    key, and no pod of another JobSet child Job in that domain. Its pod template gets a required
    pod affinity to the Job's own ``job-key`` and a required anti-affinity to every other
    ``job-key``, both over the topology key and all namespaces: the kube-scheduler then binds the
    Job's first pod where no other Job runs (a pod matching its own affinity term may go where no
    pod matches it yet) and the rest beside it. Upstream's pod webhook gives these terms to the
    leader pod and a nodeSelector for the leader's domain to the others; written on the template
    they hold without a pod webhook. Upstream's anti-affinity also matches only pods of the same
    priority (a label its webhook sets); without it exclusivity holds across priorities. With
    ``alpha.jobset.sigs.k8s.io/node-selector`` the Job gets upstream's node-selector strategy
    instead: a nodeSelector ``alpha.jobset.sigs.k8s.io/namespaced-job: <namespace>_<job>`` (nodes
    labelled by the admin beforehand) and a toleration of the ``alpha.jobset.sigs.k8s.io/no-schedule``
    taint."""
    meta = job["metadata"]
    annotations = meta.get("annotations") or {}
    topology_key = annotations.get(c.EXCLUSIVE_KEY)
    if not topology_key:
        return
    pspec = job["spec"]["template"].setdefault("spec", {})
    if c.NODE_SELECTOR_STRATEGY_KEY in annotations:
        selector = pspec.get("nodeSelector") or {}
        pspec["nodeSelector"] = {**selector, c.NAMESPACED_JOB_KEY: f"{meta['namespace']}_{meta['name']}"}
        pspec["tolerations"] = [*(pspec.get("tolerations") or []),
                                {"key": c.NO_SCHEDULE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
        return
    own = (meta.get("labels") or {})[c.JOB_KEY]
    affinity = pspec.get("affinity") or {}
    pod_affinity = dict(affinity.get("podAffinity") or {})
    anti_affinity = dict(affinity.get("podAntiAffinity") or {})
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    pod_affinity[required] = [*(pod_affinity.get(required) or []), {
        "labelSelector": {"matchExpressions": [{"key": c.JOB_KEY, "operator": "In", "values": [own]}]},
        "topologyKey": topology_key, "namespaceSelector": {}}]
    anti_affinity[required] = [*(anti_affinity.get(required) or []), {
        "labelSelector": {"matchExpressions": [{"key": c.JOB_KEY, "operator": "Exists"},
                                               {"key": c.JOB_KEY, "operator": "NotIn", "values": [own]}]},
        "topologyKey": topology_key, "namespaceSelector": {}}]
    pspec["affinity"] = {**affinity, "podAffinity": pod_affinity, "podAntiAffinity": anti_affinity}


def reconcile(obj: Mapping[str, Any], jobs: Iterable[Mapping[str, Any]], *, service_exists: bool, now: float,
              configmap_exists: bool = False) -> Result:
    """Reconcile one JobSet (raw JSON, as read from the API) against its child Jobs."""
    return Reconciler(obj, jobs, service_exists=service_exists, now=now, configmap_exists=configmap_exists).run()


__all__ = ["ChildJob", "Event", "JobUpdate", "Reconciler", "Result", "classify", "exclusive_placement",
           "job_hash_key", "job_name",
           "pods_per_job", "reconcile", "replicated_jobs_status", "set_condition"]
