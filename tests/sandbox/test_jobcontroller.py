from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gangq.sandbox.jobcontroller import (
    COMPLETION_INDEX,
    TRACKING_FINALIZER,
    JobSpecError,
    format_indexes,
    job_parameters,
    parse_indexes,
    random_suffix,
    reconcile,
)

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def job(name: str = "train", **spec: Any) -> dict:
    template = {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "restartPolicy": spec.pop("restartPolicy", "Never"),
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }
    if "subdomain" in spec:
        template["spec"]["subdomain"] = spec.pop("subdomain")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"template": template, **spec},
        "status": {},
    }


def apply(j: dict, pods: list[dict], acts: Any) -> tuple[dict, list[dict]]:
    """Apply the actions the way the cluster executor would (finalizers off, deletes mark deletionTimestamp)."""
    j = copy.deepcopy(j)
    by_name = {p["metadata"]["name"]: copy.deepcopy(p) for p in pods}
    for p in acts.untrack + acts.delete:
        q = by_name[p["metadata"]["name"]]
        q["metadata"]["finalizers"] = [f for f in q["metadata"].get("finalizers", []) if f != TRACKING_FINALIZER]
    for p in acts.delete:
        by_name[p["metadata"]["name"]]["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    for p in acts.create:
        q = copy.deepcopy(p)
        q["metadata"]["creationTimestamp"] = "2026-01-01T12:00:00Z"
        by_name[q["metadata"]["name"]] = q
    if acts.status is not None:
        j["status"] = acts.status
    return j, list(by_name.values())


def set_phase(pods: list[dict], phase: str, names: list[str] | None = None, ready: bool = False) -> None:
    for p in pods:
        if names is None or p["metadata"]["name"] in names:
            p["status"] = {"phase": phase}
            if ready:
                p["status"]["conditions"] = [{"type": "Ready", "status": "True"}]


def cond(j: dict, ctype: str) -> dict | None:
    return next((c for c in j["status"].get("conditions", []) if c["type"] == ctype), None)


def test_nonindexed_runs_to_complete() -> None:
    j = job(parallelism=4, completions=4)
    acts = reconcile(j, [], NOW)
    assert len(acts.create) == 4 and not acts.delete
    p = acts.create[0]
    name = p["metadata"]["name"]
    assert name.startswith("train-") and len(name) == len("train-") + 5
    labels = p["metadata"]["labels"]
    assert labels["app"] == "x"
    assert labels["job-name"] == labels["batch.kubernetes.io/job-name"] == "train"
    assert labels["controller-uid"] == labels["batch.kubernetes.io/controller-uid"] == "uid-train"
    assert COMPLETION_INDEX not in labels
    assert p["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": "uid-train",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert p["metadata"]["finalizers"] == [TRACKING_FINALIZER]
    assert "hostname" not in p["spec"]
    assert acts.status is not None
    assert acts.status["active"] == 4 and acts.status["startTime"] == "2026-01-01T12:00:00Z"
    assert acts.status["ready"] == 0
    assert ("Normal", "SuccessfulCreate", f"Created pod: {name}") in acts.events
    j, pods = apply(j, [], acts)
    # steady state: nothing to do
    again = reconcile(j, pods, NOW + timedelta(seconds=1))
    assert not again.create and not again.delete and again.status is None
    set_phase(pods, "Running", ready=True)
    acts = reconcile(j, pods, NOW)
    assert acts.status is not None and acts.status["ready"] == 4
    j, pods = apply(j, pods, acts)
    set_phase(pods, "Succeeded", names=[pods[0]["metadata"]["name"]])
    acts = reconcile(j, pods, NOW)
    assert [p["metadata"]["name"] for p in acts.untrack] == [pods[0]["metadata"]["name"]]
    assert not acts.create  # completions - succeeded = 3 pods still wanted and active
    j, pods = apply(j, pods, acts)
    assert j["status"]["succeeded"] == 1 and j["status"]["active"] == 3
    # counted once: reconciling again does not count the same pod again
    acts = reconcile(j, pods, NOW)
    assert acts.status is None
    set_phase(pods, "Succeeded")
    done = NOW + timedelta(seconds=5)
    acts = reconcile(j, pods, done)
    j, pods = apply(j, pods, acts)
    st = j["status"]
    assert st["succeeded"] == 4 and "active" not in st and "failed" not in st
    complete = cond(j, "Complete")
    assert complete is not None and complete["status"] == "True" and complete["reason"] == "CompletionsReached"
    assert complete["message"] == "Reached expected number of succeeded pods"
    assert st["completionTime"] == "2026-01-01T12:00:05Z"
    assert all(TRACKING_FINALIZER not in p["metadata"]["finalizers"] for p in pods)
    # finished pods are kept
    assert not acts.delete
    assert reconcile(j, pods, done).status is None


def test_indexed_names_labels_hostname_env() -> None:
    j = job(parallelism=2, completions=4, completionMode="Indexed", subdomain="svc")
    acts = reconcile(j, [], NOW)
    assert len(acts.create) == 2
    for i, p in enumerate(acts.create):
        assert p["metadata"]["name"].startswith(f"train-{i}-") and len(p["metadata"]["name"]) == len("train-0-") + 5
        assert p["metadata"]["labels"][COMPLETION_INDEX] == str(i)
        assert p["metadata"]["annotations"][COMPLETION_INDEX] == str(i)
        assert p["spec"]["hostname"] == f"train-{i}" and p["spec"]["subdomain"] == "svc"
        env = p["spec"]["containers"][0]["env"]
        assert env == [
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
            }
        ]
    j, pods = apply(j, [], acts)
    set_phase(pods, "Succeeded", names=[pods[1]["metadata"]["name"]])
    acts = reconcile(j, pods, NOW)
    # index 1 done -> the next free indexes are 2 (index 0 still active)
    assert [p["metadata"]["labels"][COMPLETION_INDEX] for p in acts.create] == ["2"]
    j, pods = apply(j, pods, acts)
    assert j["status"]["completedIndexes"] == "1" and j["status"]["succeeded"] == 1
    set_phase(pods, "Succeeded")
    acts = reconcile(j, pods, NOW)
    j, pods = apply(j, pods, acts)
    assert j["status"]["completedIndexes"] == "0-2"
    assert [p["metadata"]["labels"][COMPLETION_INDEX] for p in acts.create] == ["3"]
    set_phase(pods, "Succeeded")
    j, pods = apply(j, pods, reconcile(j, pods, NOW))
    assert j["status"]["completedIndexes"] == "0-3" and cond(j, "Complete") is not None


def test_indexed_failed_index_is_recreated_with_same_index() -> None:
    j = job(parallelism=2, completions=2, completionMode="Indexed", backoffLimit=3)
    j, pods = apply(j, [], reconcile(j, [], NOW))
    set_phase(pods, "Failed", names=[pods[0]["metadata"]["name"]])
    acts = reconcile(j, pods, NOW)
    assert [p["metadata"]["labels"][COMPLETION_INDEX] for p in acts.create] == ["0"]
    assert acts.create[0]["metadata"]["name"] != pods[0]["metadata"]["name"]
    j, pods = apply(j, pods, acts)
    assert j["status"]["failed"] == 1 and j["status"]["active"] == 2


def test_backoff_limit_exceeded_with_restart_never() -> None:
    j = job(parallelism=2, completions=2, backoffLimit=1)
    j, pods = apply(j, [], reconcile(j, [], NOW))
    set_phase(pods, "Failed", names=[pods[0]["metadata"]["name"]])
    acts = reconcile(j, pods, NOW)
    assert len(acts.create) == 1  # failed pod replaced
    j, pods = apply(j, pods, acts)
    assert j["status"]["failed"] == 1 and cond(j, "Failed") is None
    set_phase(pods, "Running", ready=True)
    set_phase(pods, "Failed", names=[pods[1]["metadata"]["name"]])
    for p in pods[:1]:
        p["status"] = {"phase": "Failed"}
    acts = reconcile(j, pods, NOW)
    assert not acts.create
    j, pods = apply(j, pods, acts)
    failed = cond(j, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"] == "Job has reached the specified backoff limit"
    assert cond(j, "FailureTarget") is not None
    # the still-running pod is deleted and, since the Job failed, counted as failed too
    assert [p["metadata"]["name"] for p in acts.delete] == [pods[2]["metadata"]["name"]]
    assert j["status"]["failed"] == 3
    assert ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit") in acts.events
    assert reconcile(j, pods, NOW).status is None


def test_backoff_limit_counts_restarts_with_on_failure() -> None:
    j = job(parallelism=1, completions=1, backoffLimit=2, restartPolicy="OnFailure")
    j, pods = apply(j, [], reconcile(j, [], NOW))
    pods[0]["status"] = {"phase": "Running", "containerStatuses": [{"name": "main", "restartCount": 1}]}
    assert cond(*[apply(j, pods, reconcile(j, pods, NOW))[0], "Failed"]) is None
    pods[0]["status"]["containerStatuses"][0]["restartCount"] = 2
    acts = reconcile(j, pods, NOW)
    j2, _ = apply(j, pods, acts)
    assert cond(j2, "Failed")["reason"] == "BackoffLimitExceeded"  # type: ignore[index]
    assert len(acts.delete) == 1


def test_active_deadline() -> None:
    j = job(parallelism=1, completions=1, activeDeadlineSeconds=10)
    acts = reconcile(j, [], NOW)
    assert acts.requeue_after == pytest.approx(10)
    j, pods = apply(j, [], acts)
    acts = reconcile(j, pods, NOW + timedelta(seconds=4))
    assert acts.requeue_after == pytest.approx(6)
    acts = reconcile(j, pods, NOW + timedelta(seconds=10))
    j, pods = apply(j, pods, acts)
    failed = cond(j, "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded"
    assert failed["message"] == "Job was active longer than specified deadline"
    assert len(acts.delete) == 1 and acts.requeue_after is None


def test_suspend_and_resume() -> None:
    j = job(parallelism=3, completions=3, activeDeadlineSeconds=100)
    j, pods = apply(j, [], reconcile(j, [], NOW))
    j["spec"]["suspend"] = True
    later = NOW + timedelta(seconds=50)
    acts = reconcile(j, pods, later)
    assert len(acts.delete) == 3 and not acts.create
    j, pods = apply(j, pods, acts)
    s = cond(j, "Suspended")
    assert s is not None and (s["status"], s["reason"], s["message"]) == ("True", "JobSuspended", "Job suspended")
    assert "active" not in j["status"] and j["status"]["terminating"] == 3
    assert "failed" not in j["status"]  # pods deleted by the controller are not failures
    assert ("Normal", "Suspended", "Job suspended") in acts.events
    # while suspended the deadline does not fire
    assert cond(apply(j, pods, reconcile(j, pods, NOW + timedelta(seconds=500)))[0], "Failed") is None
    j["spec"]["suspend"] = False
    resumed = NOW + timedelta(seconds=600)
    acts = reconcile(j, pods, resumed)
    assert len(acts.create) == 3
    j, pods = apply(j, pods, acts)
    s = cond(j, "Suspended")
    assert s is not None and (s["status"], s["reason"], s["message"]) == ("False", "JobResumed", "Job resumed")
    assert j["status"]["startTime"] == "2026-01-01T12:10:00Z"
    assert acts.requeue_after == pytest.approx(100)


def test_created_suspended_has_no_start_time_and_no_pods() -> None:
    j = job(parallelism=2, completions=2, suspend=True)
    acts = reconcile(j, [], NOW)
    assert not acts.create
    assert acts.status is not None and "startTime" not in acts.status
    assert cond({"status": acts.status}, "Suspended")["reason"] == "JobSuspended"  # type: ignore[index]


def test_work_queue_semantics() -> None:
    j = job(parallelism=3)  # completions unset -> work queue
    assert job_parameters(j)[1] is None
    j, pods = apply(j, [], reconcile(j, [], NOW))
    assert len(pods) == 3
    set_phase(pods, "Succeeded", names=[pods[0]["metadata"]["name"]])
    acts = reconcile(j, pods, NOW)
    assert not acts.create and not acts.delete  # no new pods after the first success, the others keep running
    j, pods = apply(j, pods, acts)
    assert cond(j, "Complete") is None
    set_phase(pods, "Succeeded")
    j, pods = apply(j, pods, reconcile(j, pods, NOW))
    assert cond(j, "Complete") is not None and j["status"]["succeeded"] == 3


def test_pod_deleted_by_someone_else_counts_as_failed_and_is_replaced() -> None:
    j = job(parallelism=1, completions=1)
    j, pods = apply(j, [], reconcile(j, [], NOW))
    pods[0]["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:01Z"
    acts = reconcile(j, pods, NOW)
    assert len(acts.untrack) == 1 and len(acts.create) == 1
    j, pods = apply(j, pods, acts)
    assert j["status"]["failed"] == 1 and j["status"]["terminating"] == 1


def test_scale_down_deletes_unready_first_and_ignores_foreign_pods() -> None:
    j = job(parallelism=3, completions=10)
    j, pods = apply(j, [], reconcile(j, [], NOW))
    set_phase(pods, "Running", ready=True, names=[pods[0]["metadata"]["name"], pods[1]["metadata"]["name"]])
    foreign = {
        "metadata": {"name": "other", "ownerReferences": [{"uid": "x", "controller": True}]},
        "status": {"phase": "Running"},
    }
    j["spec"]["parallelism"] = 2
    acts = reconcile(j, [*pods, foreign], NOW)
    assert [p["metadata"]["name"] for p in acts.delete] == [pods[2]["metadata"]["name"]]


def test_failure_backoff_delays_replacement() -> None:
    j = job(parallelism=1, completions=1, backoffLimit=5)
    j, pods = apply(j, [], reconcile(j, [], NOW))
    pods[0]["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {"name": "main", "state": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T12:00:00Z"}}}
        ],
    }
    acts = reconcile(j, pods, NOW + timedelta(seconds=3), failure_backoff_seconds=10)
    assert not acts.create and acts.requeue_after == pytest.approx(7)
    acts = reconcile(j, pods, NOW + timedelta(seconds=11), failure_backoff_seconds=10)
    assert len(acts.create) == 1


def test_finished_job_releases_finalizers_and_stops_running_pods() -> None:
    j = job(parallelism=2, completions=2)
    j, pods = apply(j, [], reconcile(j, [], NOW))
    j["status"]["conditions"] = [{"type": "Failed", "status": "True"}]
    acts = reconcile(j, pods, NOW)
    assert len(acts.untrack) == 2 and len(acts.delete) == 2 and not acts.create and acts.status is None


def test_index_formatting() -> None:
    assert format_indexes([5, 0, 1, 2, 3, 7, 8]) == "0-3,5,7-8"
    assert parse_indexes("0-3,5,7-8") == {0, 1, 2, 3, 5, 7, 8}
    assert format_indexes([]) == "" and parse_indexes("") == set()
    s = random_suffix("a")
    assert len(s) == 5 and s == random_suffix("a") and s != random_suffix("b")


def test_defaults_and_bad_spec() -> None:
    assert job_parameters(job())[:3] == (1, 1, 6)
    with pytest.raises(JobSpecError, match=r"Job train: spec.parallelism"):
        job_parameters(job(parallelism=-1))
    with pytest.raises(JobSpecError, match="completions is required"):
        job_parameters(job(parallelism=2, completionMode="Indexed"))


def test_jobs_managed_by_another_controller_are_left_alone() -> None:
    j = job(parallelism=2, completions=2, managedBy="kueue.x-k8s.io/multikueue")
    acts = reconcile(j, [], NOW)
    assert not acts.create and acts.status is None
    j["spec"]["managedBy"] = "kubernetes.io/job-controller"
    assert len(reconcile(j, [], NOW).create) == 2
