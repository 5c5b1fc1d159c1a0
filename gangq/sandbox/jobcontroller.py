"""The sandbox's batch/v1 Job controller as a pure function: ``reconcile(job, pods, now) -> JobActions``.

Modelled on kube-controller-manager's Job controller (pod tracking with the ``batch.kubernetes.io/job-tracking``
finalizer):

* pods are created with the tracking finalizer; a finished pod (Succeeded, Failed, or deleted by someone else before
  it succeeded) is counted once into ``status.succeeded`` / ``status.failed`` and its finalizer is removed;
* pods the controller deletes itself because of suspension, scale-down or completion have their finalizer removed
  first, so they are not counted as failed; the active pods deleted because the Job failed (backoff limit, deadline)
  are counted as failed, as with the real controller's deleteActivePods;
* ``completions`` unset with ``parallelism`` set is the work-queue mode: the Job completes once a pod succeeded and no
  pod is active, and no new pods are created after the first success;
* NonIndexed pods are named ``<job>-<suffix>``, Indexed ones ``<job>-<index>-<suffix>`` with hostname
  ``<job>-<index>``, the template's subdomain and the completion index as label, annotation and the
  ``JOB_COMPLETION_INDEX`` env var;
* ``backoffLimit`` counts failed pods (restartPolicy Never) plus container restarts of active pods (OnFailure), like
  ``pastBackoffLimitOnFailure``; ``activeDeadlineSeconds`` runs from ``status.startTime``, which is set when the Job
  first runs and reset on resume.

Simplifications (documented in docs/sandbox-cluster.md): terminal conditions are added at once (``FailureTarget`` +
``Failed``, ``SuccessCriteriaMet`` + ``Complete``) instead of waiting for the terminating pods to go away; no
podFailurePolicy, successPolicy, backoffLimitPerIndex, podReplacementPolicy=Failed, or elastic Indexed Jobs; pod
re-creation after a failure waits ``failure_backoff_seconds * 2**(n-1)`` (default 0 in the sandbox, 10 s in Kubernetes).
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

JOB_CONTROLLER_NAME = "kubernetes.io/job-controller"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
LABEL_JOB_NAME_LEGACY = "job-name"
LABEL_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LABEL_CONTROLLER_UID_LEGACY = "controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"

REASON_BACKOFF = "BackoffLimitExceeded"
MSG_BACKOFF = "Job has reached the specified backoff limit"
REASON_DEADLINE = "DeadlineExceeded"
MSG_DEADLINE = "Job was active longer than specified deadline"
REASON_COMPLETIONS = "CompletionsReached"
MSG_COMPLETIONS = "Reached expected number of succeeded pods"
REASON_SUSPENDED = "JobSuspended"
MSG_SUSPENDED = "Job suspended"
REASON_RESUMED = "JobResumed"
MSG_RESUMED = "Job resumed"
MAX_FAILURE_BACKOFF_SECONDS = 600.0

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet


class JobSpecError(ValueError):
    """A Job whose spec the controller cannot act on (the message names the Job and the field)."""


def fmt_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(s: str | None) -> datetime | None:
    if not s:
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None


def random_suffix(seed: str) -> str:
    """Five characters from the generateName alphabet, derived from ``seed`` (deterministic, random-looking)."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:5])


def parse_indexes(text: str | None) -> set[int]:
    """'0-3,5' -> {0, 1, 2, 3, 5} (``status.completedIndexes`` syntax)."""
    out: set[int] = set()
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                out.update(range(int(lo), int(hi) + 1))
            else:
                out.add(int(part))
        except ValueError:
            log.warning("ignoring malformed completedIndexes interval %r", part)
    return out


def format_indexes(indexes: Iterable[int]) -> str:
    """{0, 1, 2, 3, 5} -> '0-3,5'."""
    ordered = sorted(set(indexes))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


class JobActions:
    """What one reconcile wants done, in order: untrack (remove finalizer), delete, create, then the status patch."""

    __slots__ = ("create", "delete", "events", "requeue_after", "status", "untrack")

    def __init__(self) -> None:
        self.create: list[dict[str, Any]] = []
        self.delete: list[dict[str, Any]] = []  # pods to delete (their finalizer is removed first)
        self.untrack: list[dict[str, Any]] = []  # finished pods that were counted: remove the tracking finalizer
        self.status: dict[str, Any] | None = None  # the new full status when it changed
        self.requeue_after: float | None = None
        self.events: list[tuple[str, str, str]] = []  # (type, reason, message)

    def __repr__(self) -> str:
        return (f"JobActions(create={[p['metadata']['name'] for p in self.create]}, "
                f"delete={[p['metadata']['name'] for p in self.delete]}, untrack={len(self.untrack)}, "
                f"status={self.status}, requeue_after={self.requeue_after})")


def _cond(conds: list[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    for c in conds:
        if c.get("type") == ctype:
            return c
    return None


def is_finished(job: dict[str, Any]) -> bool:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return True
    return False


def _set_cond(conds: list[dict[str, Any]], ctype: str, status: str, reason: str, message: str, now: str,
              *, add_if_missing: bool = True) -> bool:
    c = _cond(conds, ctype)
    if c is None:
        if not add_if_missing:
            return False
        conds.append({"type": ctype, "status": status, "lastProbeTime": now, "lastTransitionTime": now,
                      "reason": reason, "message": message})
        return True
    if c.get("status") == status and c.get("reason") == reason and c.get("message") == message:
        return False
    if c.get("status") != status:
        c["lastTransitionTime"] = now
    c.update(status=status, reason=reason, message=message, lastProbeTime=now)
    return True


def pod_index(pod: dict[str, Any]) -> int:
    meta = pod.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(COMPLETION_INDEX)
    if raw is None:
        raw = (meta.get("labels") or {}).get(COMPLETION_INDEX)
    try:
        return int(raw) if raw is not None else -1
    except ValueError:
        return -1


def _phase(pod: dict[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _is_ready(pod: dict[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            status: str | None = c.get("status")
            return status == "True"
    return False


def _restarts(pod: dict[str, Any]) -> int:
    st = pod.get("status") or {}
    total = 0
    for cs in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or []):
        total += int(cs.get("restartCount") or 0)
    return total


def _tracked(pod: dict[str, Any]) -> bool:
    return TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])


def _removal_key(pod: dict[str, Any]) -> tuple[bool, int, bool, tuple[int, ...], int]:
    """Which active pods to delete first (like controller.ActivePods): unbound, pending, not ready, newest."""
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(_phase(pod), 0)
    created = (pod.get("metadata") or {}).get("creationTimestamp") or ""
    return (bool((pod.get("spec") or {}).get("nodeName")), phase_rank, _is_ready(pod), _neg(created),
            -pod_index(pod))


def _neg(s: str) -> tuple[int, ...]:
    return tuple(-ord(ch) for ch in s)


def _int_field(spec: dict[str, Any], field: str, job_name: str, default: int | None) -> int | None:
    v = spec.get(field, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise JobSpecError(f"Job {job_name}: spec.{field} must be a non-negative integer, got {v!r}")
    return v


def job_parameters(job: dict[str, Any]) -> tuple[int, int | None, int, bool, str]:
    """(parallelism, completions or None, backoffLimit, indexed, restartPolicy), with the API server's defaults."""
    spec = job.get("spec") or {}
    name = (job.get("metadata") or {}).get("name", "")
    completions: int | None = 1
    parallelism: int | None
    if spec.get("completions") is None and spec.get("parallelism") is None:
        parallelism = 1
    else:
        parallelism = _int_field(spec, "parallelism", name, 1)
        completions = _int_field(spec, "completions", name, None)
    if parallelism is None:
        parallelism = 1
    backoff = _int_field(spec, "backoffLimit", name, 6)
    if backoff is None:
        backoff = 6
    mode = spec.get("completionMode") or "NonIndexed"
    if mode not in ("NonIndexed", "Indexed"):
        raise JobSpecError(f"Job {name}: spec.completionMode must be NonIndexed or Indexed, got {mode!r}")
    indexed = mode == "Indexed"
    if indexed and completions is None:
        raise JobSpecError(f"Job {name}: spec.completions is required when spec.completionMode is Indexed")
    restart = (((spec.get("template") or {}).get("spec") or {}).get("restartPolicy")) or "Never"
    return parallelism, completions, backoff, indexed, restart


def owned_by(pod: dict[str, Any], job_uid: str) -> bool:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("uid") == job_uid and ref.get("controller"):
            return True
    return False


def controller_owner(pod: dict[str, Any]) -> dict[str, Any] | None:
    ref: dict[str, Any]
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def make_pod(job: dict[str, Any], index: int | None, suffix: str) -> dict[str, Any]:
    """A pod from the Job's template, as the Job controller creates it."""
    meta = job["metadata"]
    name, uid, ns = meta["name"], meta.get("uid", ""), meta.get("namespace", "default")
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    labels = dict(tmeta.get("labels") or {})
    annotations = dict(tmeta.get("annotations") or {})
    labels.update({LABEL_CONTROLLER_UID: uid, LABEL_CONTROLLER_UID_LEGACY: uid,
                   LABEL_JOB_NAME: name, LABEL_JOB_NAME_LEGACY: name})
    pod_name = f"{name}-{suffix}"
    if index is not None:
        pod_name = f"{name}-{index}-{suffix}"
        labels[COMPLETION_INDEX] = str(index)
        annotations[COMPLETION_INDEX] = str(index)
        spec["hostname"] = f"{name}-{index}"
        env_entry = {"name": COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}}
        for key in ("initContainers", "containers"):
            for c in spec.get(key) or []:
                env = [e for e in c.get("env") or [] if e.get("name") != COMPLETION_INDEX_ENV]
                c["env"] = [*env, env_entry]
    pod_meta: dict[str, Any] = {
        "name": pod_name,
        "generateName": pod_name[: -len(suffix)],
        "namespace": ns,
        "labels": labels,
        "ownerReferences": [{"apiVersion": job.get("apiVersion", "batch/v1"), "kind": "Job", "name": name,
                             "uid": uid, "controller": True, "blockOwnerDeletion": True}],
        "finalizers": [TRACKING_FINALIZER],
    }
    if annotations:
        pod_meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def _latest_failure(pods: list[dict[str, Any]]) -> datetime | None:
    latest: datetime | None = None
    for p in pods:
        if _phase(p) != "Failed":
            continue
        st = p.get("status") or {}
        for cs in st.get("containerStatuses") or []:
            t = parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            if t is not None and (latest is None or t > latest):
                latest = t
    return latest


def reconcile(job: dict[str, Any], pods: list[dict[str, Any]], now: datetime, *,
              suffix: Callable[[str], str] | None = None, failure_backoff_seconds: float = 0.0) -> JobActions:
    """Compare the observed Job and its pods and decide what to do. Pure: inputs are not modified.

    ``pods`` are the pods controlled by this Job (ownerReference with controller=true and the Job's uid); others
    are ignored. ``suffix(seed)`` returns the random part of a new pod's name.
    """
    acts = JobActions()
    meta = job.get("metadata") or {}
    uid = meta.get("uid", "")
    name = meta.get("name", "")
    pods = [p for p in pods if owned_by(p, uid)]
    old_status = (job.get("status") or {})
    status = copy.deepcopy(old_status)
    conds: list[dict[str, Any]] = status.setdefault("conditions", [])
    nows = fmt_time(now)
    gen_suffix = suffix or random_suffix

    managed_by = (job.get("spec") or {}).get("managedBy")
    if managed_by and managed_by != JOB_CONTROLLER_NAME:
        return acts  # another controller (e.g. MultiKueue) owns this Job's pods and status

    if is_finished(job) or meta.get("deletionTimestamp"):
        # a finished (or deleted) Job only releases its pods' finalizers and deletes what is still running
        for p in pods:
            if _tracked(p):
                acts.untrack.append(p)
            if is_finished(job) and not (p.get("metadata") or {}).get("deletionTimestamp") \
                    and _phase(p) not in ("Succeeded", "Failed"):
                acts.delete.append(p)
        return acts

    parallelism, completions, backoff_limit, indexed, restart_policy = job_parameters(job)
    spec = job.get("spec") or {}
    suspended = bool(spec.get("suspend"))

    # --- account finished pods (once: those still carrying the tracking finalizer)
    completed = parse_indexes(status.get("completedIndexes")) if indexed else set()
    succeeded = int(status.get("succeeded") or 0)
    failed = int(status.get("failed") or 0)
    active: list[dict[str, Any]] = []
    terminating = 0
    for p in pods:
        phase = _phase(p)
        deleting = bool((p.get("metadata") or {}).get("deletionTimestamp"))
        if phase == "Succeeded":
            if _tracked(p):
                acts.untrack.append(p)
                if indexed:
                    idx = pod_index(p)
                    if 0 <= idx < (completions or 0):
                        completed.add(idx)
                else:
                    succeeded += 1
        elif phase == "Failed" or deleting:
            if deleting and phase != "Failed":
                terminating += 1
            if _tracked(p):
                acts.untrack.append(p)
                failed += 1
        else:
            active.append(p)
    if indexed:
        succeeded = len(completed)

    # --- suspend / resume and startTime
    if suspended:
        if _set_cond(conds, "Suspended", "True", REASON_SUSPENDED, MSG_SUSPENDED, nows):
            acts.events.append(("Normal", "Suspended", MSG_SUSPENDED))
    else:
        if _set_cond(conds, "Suspended", "False", REASON_RESUMED, MSG_RESUMED, nows, add_if_missing=False):
            acts.events.append(("Normal", "Resumed", MSG_RESUMED))
            status["startTime"] = nows
        if not status.get("startTime"):
            status["startTime"] = nows

    # --- terminal decisions
    finished_reason: str | None = None
    finished_message = ""
    restarts = sum(_restarts(p) for p in active) if restart_policy == "OnFailure" else 0
    past_restarts = restart_policy == "OnFailure" and (restarts > 0 if backoff_limit == 0 else
                                                       restarts >= backoff_limit)
    if failed > backoff_limit or past_restarts:
        finished_reason, finished_message = REASON_BACKOFF, MSG_BACKOFF
    elif not suspended and spec.get("activeDeadlineSeconds") is not None:
        start = parse_time(status.get("startTime"))
        deadline = float(spec["activeDeadlineSeconds"])
        if start is not None:
            remaining = deadline - (now - start).total_seconds()
            if remaining <= 0:
                finished_reason, finished_message = REASON_DEADLINE, MSG_DEADLINE
            else:
                acts.requeue_after = remaining

    complete = False
    if finished_reason is None:
        if completions is None:
            complete = succeeded > 0 and not active
        elif indexed:
            complete = all(i in completed for i in range(completions))
        else:
            complete = succeeded >= completions

    if finished_reason is not None:
        # like deleteActivePods: the pods killed because the Job failed are counted as failed
        failed += sum(1 for p in active if _tracked(p))
        acts.delete.extend(active)
        active = []
        _set_cond(conds, "FailureTarget", "True", finished_reason, finished_message, nows)
        _set_cond(conds, "Failed", "True", finished_reason, finished_message, nows)
        acts.events.append(("Warning", finished_reason, finished_message))
        acts.requeue_after = None
    elif complete:
        acts.delete.extend(active)
        active = []
        _set_cond(conds, "SuccessCriteriaMet", "True", REASON_COMPLETIONS, MSG_COMPLETIONS, nows)
        _set_cond(conds, "Complete", "True", REASON_COMPLETIONS, MSG_COMPLETIONS, nows)
        status["completionTime"] = nows
        acts.events.append(("Normal", "Completed", "Job completed"))
        acts.requeue_after = None
    elif suspended:
        acts.delete.extend(active)
        active = []
    else:
        active = _manage(job, acts, active, pods, now, parallelism, completions, indexed, succeeded, completed,
                         failed, failure_backoff_seconds, gen_suffix)

    # --- counters (zero counters are omitted, like the real controller's omitempty fields)
    n_active = len(active) + len(acts.create)
    for key, value in (("active", n_active), ("succeeded", succeeded), ("failed", failed)):
        if value:
            status[key] = value
        else:
            status.pop(key, None)
    status["ready"] = sum(1 for p in active if _is_ready(p))
    status["terminating"] = terminating + len(acts.delete)
    status["uncountedTerminatedPods"] = {}
    if indexed:
        text = format_indexes(completed)
        if text:
            status["completedIndexes"] = text
        else:
            status.pop("completedIndexes", None)
    if not conds:
        status.pop("conditions")
    if status != old_status:
        acts.status = status
    for p in acts.create:
        acts.events.append(("Normal", "SuccessfulCreate", f"Created pod: {p['metadata']['name']}"))
    for p in acts.delete:
        acts.events.append(("Normal", "SuccessfulDelete", f"Deleted pod: {p['metadata']['name']}"))
    log.debug("reconciled Job %s/%s: %r", meta.get("namespace"), name, acts)
    return acts


def _manage(job: dict[str, Any], acts: JobActions, active: list[dict[str, Any]], pods: list[dict[str, Any]],
            now: datetime, parallelism: int, completions: int | None, indexed: bool, succeeded: int,
            completed: set[int], failed: int, failure_backoff_seconds: float,
            gen_suffix: Callable[[str], str]) -> list[dict[str, Any]]:
    """Create or delete pods so that the right number are active; returns the pods that stay active."""
    uid = job["metadata"].get("uid", "")
    if completions is None:
        want = len(active) if succeeded > 0 else parallelism
    else:
        want = min(parallelism, max(0, completions - succeeded))

    keep = list(active)
    if indexed:
        seen: set[int] = set()
        keep = []
        for p in sorted(active, key=lambda q: (not _is_ready(q), (q.get("metadata") or {}).get("name", ""))):
            idx = pod_index(p)
            if idx < 0 or idx >= (completions or 0) or idx in completed or idx in seen:
                acts.delete.append(p)  # out of range, already completed, or a duplicate for its index
            else:
                seen.add(idx)
                keep.append(p)
    if len(keep) > want:
        keep.sort(key=_removal_key)
        excess = len(keep) - want
        acts.delete.extend(keep[:excess])
        keep = keep[excess:]
    missing = want - len(keep)
    if missing <= 0:
        return keep

    if failure_backoff_seconds > 0 and failed > 0:
        last = _latest_failure(pods)
        if last is not None:
            delay = min(MAX_FAILURE_BACKOFF_SECONDS, failure_backoff_seconds * 2 ** (failed - 1))
            wait = delay - (now - last).total_seconds()
            if wait > 0:
                acts.requeue_after = wait if acts.requeue_after is None else min(acts.requeue_after, wait)
                return keep

    existing_names = {(p.get("metadata") or {}).get("name") for p in pods}
    if indexed:
        busy = {pod_index(p) for p in keep}
        free = [i for i in range(completions or 0) if i not in completed and i not in busy]
        targets: list[int | None] = list(free[:missing])
    else:
        targets = [None] * missing
    attempt = len(pods)
    for index in targets:
        while True:
            attempt += 1
            seed = f"{uid}/{index}/{attempt}"
            pod = make_pod(job, index, gen_suffix(seed))
            if pod["metadata"]["name"] not in existing_names:
                break
        existing_names.add(pod["metadata"]["name"])
        acts.create.append(pod)
    return keep
