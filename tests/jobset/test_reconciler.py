"""The pure JobSet reconciler against upstream's controller scenarios (kubernetes-sigs/jobset controller tests)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from gangq.jobset import constants as c
from gangq.jobset.reconciler import job_hash_key, reconcile

from .world import World, make_jobset

TWO_RJOBS = [{"name": "driver", "replicas": 1}, {"name": "worker", "replicas": 2, "pods": 3}]


def test_children_names_labels_annotations_owner_and_service() -> None:
    js = make_jobset("train", rjobs=TWO_RJOBS, coordinator={"replicatedJob": "driver"})
    js["spec"]["replicatedJobs"][1]["groupName"] = "workers"
    js["spec"]["replicatedJobs"][1]["template"]["metadata"] = {"labels": {"team": "a"}}
    w = World(js)
    res = w.step()
    assert sorted(w.jobs) == ["train-driver-0", "train-worker-0", "train-worker-1"]
    job = w.jobs["train-worker-1"]
    labels = job["metadata"]["labels"]
    want = {
        c.JOBSET_NAME_KEY: "train", c.JOBSET_UID_KEY: "uid-train", c.REPLICATED_JOB_NAME_KEY: "worker",
        c.REPLICATED_JOB_REPLICAS_KEY: "2", c.GLOBAL_REPLICAS_KEY: "3", c.JOB_INDEX_KEY: "1",
        c.JOB_GLOBAL_INDEX_KEY: "2", c.RESTARTS_KEY: "0", c.JOB_KEY: job_hash_key("ns", "train-worker-1"),
        c.GROUP_NAME_KEY: "workers", c.GROUP_REPLICAS_KEY: "2", c.JOB_GROUP_INDEX_KEY: "1",
        c.COORDINATOR_KEY: "train-driver-0-0.train", "team": "a",
    }
    assert labels == want
    assert job["metadata"]["annotations"] == {k: v for k, v in want.items() if k != "team"}
    pod_meta = job["spec"]["template"]["metadata"]
    assert pod_meta["labels"] == {k: v for k, v in want.items() if k != "team"}
    assert pod_meta["annotations"][c.JOB_GLOBAL_INDEX_KEY] == "2"
    assert job_hash_key("ns", "train-worker-1") == hashlib.sha1(b"ns/train-worker-1").hexdigest()
    assert job["metadata"]["ownerReferences"] == [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                   "name": "train", "uid": "uid-train", "controller": True,
                                                   "blockOwnerDeletion": True}]
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["subdomain"] == "train"
    assert pod_spec["restartPolicy"] == "OnFailure"  # webhook default
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["suspend"] is False
    svc = res.create_service
    assert svc is not None and svc["metadata"]["name"] == "train"
    assert svc["spec"] == {"clusterIP": "None", "selector": {c.JOBSET_NAME_KEY: "train"},
                           "publishNotReadyAddresses": True}
    assert w.js["status"]["replicatedJobsStatus"] == [  # by descending name, as upstream stores it
        {"name": "worker", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0},
        {"name": "driver", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0},
    ]
    # a second pass creates nothing more; a deleted Service is recreated
    res = w.step()
    assert not res.create_jobs and res.create_service is None
    w.service = None
    assert w.step().create_service is not None


def test_custom_subdomain_and_dns_off() -> None:
    w = World(make_jobset(network={"subdomain": "net"}))
    assert w.step().create_service["metadata"]["name"] == "net"  # type: ignore[index]
    assert w.jobs["js-worker-0"]["spec"]["template"]["spec"]["subdomain"] == "net"
    w = World(make_jobset(network={"enableDNSHostnames": False}))
    res = w.step()
    assert res.create_service is None and len(res.create_jobs) == 2
    assert "subdomain" not in w.jobs["js-worker-0"]["spec"]["template"]["spec"]


def test_generate_name_uses_the_name_the_server_chose() -> None:
    js = make_jobset("gen-x7k2p")
    js["metadata"]["generateName"] = "gen-"
    w = World(js)
    res = w.step()
    assert res.create_service["metadata"]["name"] == "gen-x7k2p"  # type: ignore[index]
    assert sorted(w.jobs) == ["gen-x7k2p-worker-0", "gen-x7k2p-worker-1"]


SUCCESS_CASES: list[tuple[str, dict[str, Any] | None, list[str], bool]] = [
    ("All: every job", None, ["js-driver-0", "js-worker-0", "js-worker-1"], True),
    ("All: one missing", None, ["js-driver-0", "js-worker-0"], False),
    ("All with target: target done", {"operator": "All", "targetReplicatedJobs": ["worker"]},
     ["js-worker-0", "js-worker-1"], True),
    ("All with target: only others", {"operator": "All", "targetReplicatedJobs": ["worker"]},
     ["js-driver-0", "js-worker-0"], False),
    ("Any: one job", {"operator": "Any"}, ["js-worker-1"], True),
    ("Any with target: target done", {"operator": "Any", "targetReplicatedJobs": ["driver"]}, ["js-driver-0"], True),
    ("Any with target: non-target done", {"operator": "Any", "targetReplicatedJobs": ["driver"]},
     ["js-worker-0", "js-worker-1"], False),
]


@pytest.mark.parametrize(("case", "policy", "done", "completed"), SUCCESS_CASES, ids=[x[0] for x in SUCCESS_CASES])
def test_success_policy(case: str, policy: dict[str, Any] | None, done: list[str], completed: bool) -> None:
    spec = {"successPolicy": policy} if policy else {}
    w = World(make_jobset(rjobs=[{"name": "driver"}, {"name": "worker", "replicas": 2}], **spec))
    w.step()
    for name in w.jobs:
        w.run(name)
    for name in done:
        w.complete(name)
    w.step()
    cond = w.condition("Completed")
    if completed:
        assert cond is not None and cond["status"] == "True"
        assert (cond["reason"], cond["message"]) == ("AllJobsCompleted", "jobset completed successfully")
        assert w.js["status"]["terminalState"] == "Completed"
        assert ("Normal", "AllJobsCompleted", "jobset completed successfully") in w.events
        # the Jobs still running are deleted once the JobSet is terminal
        running = [n for n in ["js-driver-0", "js-worker-0", "js-worker-1"] if n not in done]
        assert sorted(w.results[-1].delete_jobs) == running
    else:
        assert cond is None
        assert not w.results[-1].delete_jobs


def test_failed_without_failure_policy_names_the_first_failed_job_and_deletes_active_jobs() -> None:
    w = World(make_jobset(rjobs=[{"name": "worker", "replicas": 3}]))
    w.step()
    w.fail("js-worker-2")
    w.now += 5
    w.fail("js-worker-1")
    w.jobs["js-worker-2"]["status"]["conditions"][0]["lastTransitionTime"] = "1970-01-12T13:46:40Z"
    w.step()
    cond = w.condition("Failed")
    assert cond is not None and cond["reason"] == "FailedJobs"
    assert cond["message"] == "jobset failed due to one or more job failures (first failed job: js-worker-2)"
    assert w.js["status"]["terminalState"] == "Failed"
    assert ("Warning", "FailedJobs", cond["message"]) in w.events
    assert w.results[-1].delete_jobs == ["js-worker-0"]
    assert sorted(w.jobs) == ["js-worker-1", "js-worker-2"]  # finished Jobs are kept
    before = len(w.events)
    w.settle()
    assert len(w.events) == before  # no repeated events


def _restart_world(**fp: Any) -> World:
    w = World(make_jobset(rjobs=TWO_RJOBS, failurePolicy=fp))
    w.step()
    return w


def test_restarts_until_max_restarts_then_fails() -> None:
    w = _restart_world(maxRestarts=2)
    for attempt in (1, 2):
        w.fail("js-worker-1")
        w.step()  # restart decided
        assert w.js["status"]["restarts"] == attempt
        assert w.js["status"]["restartsCountTowardsMax"] == attempt
        assert w.events[-1][:2] == ("Warning", "RestartJobSetFailurePolicyAction")
        assert "first failed job: js-worker-1" in w.events[-1][2]
        w.settle()  # the old attempt's Jobs are deleted, then recreated with the next attempt
        assert w.attempts() == {str(attempt)}
        assert len(w.jobs) == 3
        # upstream has no condition for a restart under way: only the counters and the Event say so
        assert [cond["type"] for cond in w.js["status"].get("conditions", [])] == []
    w.fail("js-driver-0")
    w.step()
    cond = w.condition("Failed")
    assert cond is not None and cond["reason"] == "ReachedMaxRestarts"
    assert cond["message"] == "jobset failed due to reaching max number of restarts (first failed job: js-driver-0)"
    assert w.js["status"]["restarts"] == 2


def test_max_restarts_zero_fails_at_once() -> None:
    w = _restart_world(maxRestarts=0)
    w.fail("js-worker-0")
    w.step()
    assert w.condition("Failed")["reason"] == "ReachedMaxRestarts"  # type: ignore[index]


RULE_CASES: list[tuple[str, list[dict[str, Any]], tuple[str, str, str], str]] = [
    # (case, rules, failed job (name, reason, message), expected outcome: Failed reason or restart event reason)
    ("FailJobSet", [{"action": "FailJobSet"}], ("js-worker-0", "BackoffLimitExceeded", "x"),
     "FailJobSetFailurePolicyAction"),
    ("RestartJobSet", [{"action": "RestartJobSet"}], ("js-worker-0", "BackoffLimitExceeded", "x"),
     "RestartJobSetFailurePolicyAction"),
    ("RestartJobSetAndIgnoreMaxRestarts", [{"action": "RestartJobSetAndIgnoreMaxRestarts"}],
     ("js-worker-0", "BackoffLimitExceeded", "x"), "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction"),
    ("reason matches", [{"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
     ("js-worker-0", "PodFailurePolicy", "x"), "FailJobSetFailurePolicyAction"),
    ("reason does not match: default RestartJobSet",
     [{"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy", "DeadlineExceeded"]}],
     ("js-worker-0", "BackoffLimitExceeded", "x"), "RestartJobSetFailurePolicyAction"),
    ("message pattern matches", [{"action": "FailJobSet", "onJobFailureMessagePatterns": ["exit code [0-9]+$"]}],
     ("js-worker-0", "PodFailurePolicy", "Container main for pod ns/p failed with exit code 42"),
     "FailJobSetFailurePolicyAction"),
    ("message pattern does not match", [{"action": "FailJobSet", "onJobFailureMessagePatterns": ["^OOM"]}],
     ("js-worker-0", "PodFailurePolicy", "exit code 42"), "RestartJobSetFailurePolicyAction"),
    ("target matches", [{"action": "FailJobSet", "targetReplicatedJobs": ["driver"]}],
     ("js-driver-0", "BackoffLimitExceeded", "x"), "FailJobSetFailurePolicyAction"),
    ("target does not match", [{"action": "FailJobSet", "targetReplicatedJobs": ["driver"]}],
     ("js-worker-1", "BackoffLimitExceeded", "x"), "RestartJobSetFailurePolicyAction"),
    ("first matching rule wins",
     [{"action": "RestartJobSetAndIgnoreMaxRestarts", "targetReplicatedJobs": ["worker"]}, {"action": "FailJobSet"}],
     ("js-worker-1", "BackoffLimitExceeded", "x"), "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction"),
    ("rule order: the earlier rule applies though a later one also matches",
     [{"action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]},
      {"action": "RestartJobSet", "onJobFailureReasons": ["DeadlineExceeded"]}],
     ("js-worker-1", "DeadlineExceeded", "x"), "FailJobSetFailurePolicyAction"),
    ("reason and pattern and target all needed",
     [{"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"], "onJobFailureMessagePatterns": ["oom"],
       "targetReplicatedJobs": ["worker"]}],
     ("js-worker-0", "PodFailurePolicy", "killed: signal 9"), "RestartJobSetFailurePolicyAction"),
]


@pytest.mark.parametrize(("case", "rules", "failed", "outcome"), RULE_CASES, ids=[x[0] for x in RULE_CASES])
def test_failure_policy_rules(case: str, rules: list[dict[str, Any]], failed: tuple[str, str, str],
                              outcome: str) -> None:
    w = _restart_world(maxRestarts=3, rules=rules)
    name, reason, message = failed
    w.fail(name, reason, message)
    w.step()
    if outcome.startswith("Fail"):
        cond = w.condition("Failed")
        assert cond is not None and cond["reason"] == outcome
        assert cond["message"] == f"applying FailJobSet failure policy action (first failed job: {name})"
    else:
        assert w.condition("Failed") is None
        assert w.events[-1][1] == outcome
        assert w.js["status"]["restarts"] == 1
        counts = 1 if outcome == "RestartJobSetFailurePolicyAction" else 0
        assert w.js["status"].get("restartsCountTowardsMax", 0) == counts


def test_ignore_max_restarts_restarts_past_the_limit() -> None:
    w = _restart_world(maxRestarts=1, rules=[{"action": "RestartJobSetAndIgnoreMaxRestarts"}])
    for _ in range(3):
        w.fail("js-worker-0")
        w.settle()
    assert w.condition("Failed") is None
    assert w.js["status"]["restarts"] == 3 and w.js["status"].get("restartsCountTowardsMax", 0) == 0


def test_rule_picks_the_earliest_failed_matching_job() -> None:
    w = _restart_world(maxRestarts=3, rules=[{"action": "FailJobSet", "targetReplicatedJobs": ["worker"]}])
    w.fail("js-worker-1")
    w.now -= 10
    w.fail("js-worker-0")
    w.fail("js-driver-0")
    w.now -= 10
    w.step()
    assert w.condition("Failed")["message"].endswith("(first failed job: js-worker-0)")  # type: ignore[index]


@pytest.mark.parametrize("strategy", ["Recreate", "BlockingRecreate"])
def test_recreate_vs_blocking_recreate(strategy: str) -> None:
    w = _restart_world(maxRestarts=2, restartStrategy=strategy)
    w.hold_deletes = True
    w.fail("js-worker-0")
    w.step()
    w.step()  # deletes the whole previous attempt (held: deletionTimestamp set)
    assert all(j["metadata"].get("deletionTimestamp") for j in w.jobs.values())
    # the garbage collector removes one Job of the old attempt
    del w.jobs["js-driver-0"]
    res = w.step()
    created = [j["metadata"]["name"] for j in res.create_jobs]
    assert not res.delete_jobs  # never deletes a Job twice
    if strategy == "Recreate":
        assert created == ["js-driver-0"]
        assert w.jobs["js-driver-0"]["metadata"]["labels"][c.RESTARTS_KEY] == "1"
    else:
        assert created == []
    w.release()
    w.hold_deletes = False
    w.settle()
    assert sorted(w.jobs) == ["js-driver-0", "js-worker-0", "js-worker-1"]
    assert w.attempts() == {"1"}


def test_queued_jobset_gets_no_children_until_admitted() -> None:
    js = make_jobset(suspend=True)
    w = World(js)
    res = w.step()
    assert not res.create_jobs and res.create_service is None and not w.jobs
    cond = w.condition("Suspended")
    assert cond is not None and (cond["status"], cond["reason"], cond["message"]) == (
        "True", "SuspendedJobs", "jobset is suspended")
    w.settle()
    assert not w.jobs
    # gangq admits it: flavor nodeSelector/tolerations on the template, suspend false
    tmpl = w.js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    tmpl["nodeSelector"] = {"gpu": "a100"}
    w.js["spec"]["suspend"] = False
    w.step()
    assert sorted(w.jobs) == ["js-worker-0", "js-worker-1"]
    job = w.jobs["js-worker-0"]
    assert job["spec"]["suspend"] is False
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
    cond = w.condition("Suspended")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "ResumeJobs")
    assert w.service is not None


def test_suspend_running_jobset_then_resume_with_updated_template() -> None:
    w = World(make_jobset())
    w.step()
    for name in w.jobs:
        w.run(name)
    w.step()
    assert w.js["status"]["replicatedJobsStatus"][0]["ready"] == 2
    # eviction: gangq restores the template and suspends
    w.js["spec"]["suspend"] = True
    res = w.step()
    assert sorted(u.name for u in res.update_jobs) == ["js-worker-0", "js-worker-1"]
    assert all(u.patch == {"spec": {"suspend": True}} for u in res.update_jobs)
    assert w.condition("Suspended")["status"] == "True"  # type: ignore[index]
    for job in w.jobs.values():  # the Job controller deletes the pods
        job["status"] = {"startTime": "2026-01-01T00:00:00Z"}
    w.step()
    assert w.js["status"]["replicatedJobsStatus"][0]["suspended"] == 2
    # re-admission on other flavors: the template changes while suspended, then suspend=false
    pod = w.js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["metadata"] = {"labels": {"flavor": "h100"}, "annotations": {"a": "b"}}
    pod["spec"]["nodeSelector"] = {"gpu": "h100"}
    pod["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pod["spec"]["schedulingGates"] = [{"name": "example.com/gate"}]
    w.js["spec"]["suspend"] = False
    res = w.step()
    assert len(res.update_jobs) == 2
    upd = res.update_jobs[0]
    assert upd.clear_start_time
    tspec = upd.patch["spec"]["template"]
    assert upd.patch["spec"]["suspend"] is False
    assert tspec["metadata"]["labels"]["flavor"] == "h100"
    assert tspec["metadata"]["labels"][c.JOBSET_NAME_KEY] == "js"  # merged, not replaced
    assert tspec["metadata"]["annotations"]["a"] == "b"
    assert tspec["spec"]["nodeSelector"] == {"gpu": "h100"}
    assert tspec["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert tspec["spec"]["schedulingGates"] == [{"name": "example.com/gate"}]
    assert w.condition("Suspended")["reason"] == "ResumeJobs"  # type: ignore[index]
    assert not w.step().update_jobs


def test_in_order_startup_creates_one_replicated_job_at_a_time() -> None:
    rjobs = [{"name": "a"}, {"name": "b", "replicas": 2}, {"name": "c"}]
    w = World(make_jobset(rjobs=rjobs, startupPolicy={"startupPolicyOrder": "InOrder"}))
    w.step()
    assert sorted(w.jobs) == ["js-a-0"]
    cond = w.condition("StartupPolicyInProgress")
    assert cond is not None and (cond["status"], cond["reason"], cond["message"]) == (
        "True", "InOrderStartupPolicyInProgress", "in order startup policy is in progress")
    w.step()
    assert sorted(w.jobs) == ["js-a-0"]  # a is not ready yet
    w.run("js-a-0")
    w.step()
    assert sorted(w.jobs) == ["js-a-0", "js-b-0", "js-b-1"]
    w.run("js-b-0")
    w.run("js-b-1", ready=False)
    w.step()
    assert "js-c-0" not in w.jobs
    w.run("js-b-1")
    w.step()
    assert "js-c-0" in w.jobs
    w.run("js-c-0")
    w.step()
    done = w.condition("StartupPolicyCompleted")
    assert done is not None and (done["status"], done["reason"]) == ("True", "InOrderStartupPolicyCompleted")
    assert w.condition("StartupPolicyInProgress")["status"] == "False"  # type: ignore[index]


DEPENDS_CASES = [
    # (case, dependsOn status, what the first replicatedJob reaches, created?)
    ("Ready: not ready", "Ready", "running-not-ready", False),
    ("Ready: ready", "Ready", "ready", True),
    ("Ready: one failed one ready counts", "Ready", "ready", True),
    ("Ready: completed counts", "Ready", "complete", True),
    ("Complete: ready is not enough", "Complete", "ready", False),
    ("Complete: complete", "Complete", "complete", True),
]


@pytest.mark.parametrize(("case", "dep", "state", "created"), DEPENDS_CASES, ids=[x[0] for x in DEPENDS_CASES])
def test_depends_on(case: str, dep: str, state: str, created: bool) -> None:
    rjobs = [{"name": "init", "replicas": 2}, {"name": "main", "dependsOn": [{"name": "init", "status": dep}]}]
    w = World(make_jobset(rjobs=rjobs, successPolicy={"operator": "All", "targetReplicatedJobs": ["main"]}))
    w.step()
    assert sorted(w.jobs) == ["js-init-0", "js-init-1"]
    for name in ("js-init-0", "js-init-1"):
        if state == "complete":
            w.complete(name)
        else:
            w.run(name, ready=state == "ready")
    w.step()
    assert ("js-main-0" in w.jobs) is created


def test_depends_on_chain_with_mixed_statuses() -> None:
    rjobs = [{"name": "a"}, {"name": "b", "dependsOn": [{"name": "a", "status": "Complete"}]},
             {"name": "c", "dependsOn": [{"name": "b", "status": "Ready"}]}]
    w = World(make_jobset(rjobs=rjobs))
    w.step()
    w.run("js-a-0")
    w.step()
    assert sorted(w.jobs) == ["js-a-0"]
    w.complete("js-a-0")
    w.step()
    assert sorted(w.jobs) == ["js-a-0", "js-b-0"]
    w.run("js-b-0")
    w.step()
    assert sorted(w.jobs) == ["js-a-0", "js-b-0", "js-c-0"]


def test_ttl_after_finished_deletes_the_jobset() -> None:
    w = World(make_jobset(ttlSecondsAfterFinished=30))
    w.step()
    for name in list(w.jobs):
        w.complete(name)
    res = w.step()
    assert res.requeue_after == 30 and not res.delete_jobset
    w.now += 10
    assert w.step().requeue_after == 20
    w.now += 20
    assert w.step().delete_jobset


def test_managed_by_another_controller_is_skipped() -> None:
    w = World(make_jobset(managedBy="kueue.x-k8s.io/multikueue"))
    res = w.step()
    assert res.skipped == "managed by kueue.x-k8s.io/multikueue"
    assert not w.jobs and res.status is None
    w = World(make_jobset(managedBy="jobset.sigs.k8s.io/jobset-controller"))
    assert len(w.step().create_jobs) == 2


def test_jobset_being_deleted_is_left_alone() -> None:
    js = make_jobset()
    js["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert reconcile(js, [], service_exists=False, now=0).skipped == "being deleted"


def test_jobs_of_other_owners_are_ignored() -> None:
    w = World(make_jobset())
    w.step()
    stranger = dict(w.jobs["js-worker-0"])
    stranger["metadata"] = dict(stranger["metadata"], name="other", ownerReferences=[
        {"kind": "JobSet", "name": "js", "uid": "another-uid", "controller": True}])
    res = reconcile(w.js, [*w.jobs.values(), stranger], service_exists=True, now=w.now)
    assert res.status is None and not res.delete_jobs


INVALID_CASES = [
    ("dependsOn a later replicatedJob",
     [{"name": "a", "dependsOn": [{"name": "b", "status": "Ready"}]}, {"name": "b"}], {},
     "spec.replicatedJobs[0].dependsOn[0].name: replicatedJob: a cannot depend on replicatedJob: b"),
    ("InOrder with dependsOn", [{"name": "a"}, {"name": "b", "dependsOn": [{"name": "a", "status": "Ready"}]}],
     {"startupPolicy": {"startupPolicyOrder": "InOrder"}},
     "spec.replicatedJobs[1].dependsOn: StartupPolicy InOrder and DependsOn APIs are mutually exclusive"),
    ("Job name too long", [{"name": "w" * 60}], {}, "spec.replicatedJobs[0].name: JobSet name is too long, job names"),
    ("unknown failure reason", [{"name": "a"}],
     {"failurePolicy": {"rules": [{"action": "FailJobSet", "onJobFailureReasons": ["OOMKilled"]}]}},
     "spec.failurePolicy.rules[0].onJobFailureReasons[0]: invalid job failure reason 'OOMKilled'"),
    ("bad rule name", [{"name": "a"}], {"failurePolicy": {"rules": [{"action": "FailJobSet", "name": "1x"}]}},
     "spec.failurePolicy.rules[0].name: invalid failure policy rule name '1x'"),
    ("duplicate rule names", [{"name": "a"}],
     {"failurePolicy": {"rules": [{"action": "FailJobSet", "name": "r"}, {"action": "FailJobSet", "name": "r"}]}},
     "spec.failurePolicy.rules[1].name: rule names are not unique"),
    ("success target unknown", [{"name": "a"}], {"successPolicy": {"operator": "All", "targetReplicatedJobs": ["x"]}},
     "spec.successPolicy.targetReplicatedJobs[0]: invalid replicatedJob name 'x'"),
    ("coordinator job index out of range", [{"name": "a", "replicas": 2}],
     {"coordinator": {"replicatedJob": "a", "jobIndex": 2}},
     "spec.coordinator.jobIndex: coordinator job index 2 is invalid for replicatedJob a"),
    ("coordinator pod index out of range", [{"name": "a", "pods": 2}],
     {"coordinator": {"replicatedJob": "a", "podIndex": 2}},
     "spec.coordinator.podIndex: coordinator pod index 2 is invalid"),
    ("invalid subdomain", [{"name": "a"}], {"network": {"subdomain": "Not_Valid"}},
     "spec.network.subdomain: 'Not_Valid' must be a valid DNS-1123 subdomain"),
    ("bad message pattern", [{"name": "a"}],
     {"failurePolicy": {"rules": [{"action": "FailJobSet", "onJobFailureMessagePatterns": ["("]}]}},
     "spec.failurePolicy.rules[0].onJobFailureMessagePatterns[0]: invalid regular expression '('"),
    ("schema: unknown action", [{"name": "a"}], {"failurePolicy": {"rules": [{"action": "Explode"}]}},
     "spec.failurePolicy.rules[0].action: Input should be 'FailJobSet'"),
]


@pytest.mark.parametrize(("case", "rjobs", "spec", "message"), INVALID_CASES, ids=[x[0] for x in INVALID_CASES])
def test_invalid_jobset_gets_condition_and_event_and_no_children(case: str, rjobs: list[dict[str, Any]],
                                                                  spec: dict[str, Any], message: str) -> None:
    w = World(make_jobset(rjobs=rjobs, **spec))
    res = w.step()
    assert not res.create_jobs and res.create_service is None
    cond = w.condition("Failed")
    assert cond is not None and cond["reason"] == "ValidationFailed", cond
    assert message in cond["message"], cond["message"]
    assert w.events == [("Warning", "ValidationFailed", cond["message"])]
    w.settle()
    assert not w.jobs and len(w.events) == 1


def test_invalid_pod_template_reported() -> None:
    js = make_jobset(rjobs=[{"name": "a", "template": {"spec": {"containers": [{"image": "x"}]}}}])
    w = World(js)
    w.step()
    cond = w.condition("Failed")
    assert cond is not None and cond["reason"] == "ValidationFailed"
    assert "spec.replicatedJobs[0].template.spec.template.spec.containers[0].name" in cond["message"]
    assert not w.jobs


def test_indexed_job_without_completions_is_invalid() -> None:
    js = make_jobset(rjobs=[{"name": "a"}])
    del js["spec"]["replicatedJobs"][0]["template"]["spec"]["completions"]
    w = World(js)
    w.step()
    assert "spec.replicatedJobs[0].template.spec.completions: must be set" in w.condition("Failed")["message"]  # type: ignore[index]


def test_status_is_written_only_on_change() -> None:
    w = World(make_jobset())
    assert w.step().status is not None
    assert w.step().status is None
    w.run("js-worker-0")
    assert w.step().status["replicatedJobsStatus"][0] == {  # type: ignore[index]
        "name": "worker", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}


def test_docs_example_gives_the_jobs_the_docs_list() -> None:
    import re
    from pathlib import Path

    import yaml

    text = (Path(__file__).resolve().parents[2] / "docs" / "jobset.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    js = yaml.safe_load(block.group(1))
    js["metadata"]["uid"] = "u"
    w = World(js)
    res = w.step()
    assert sorted(w.jobs) == ["train-driver-0", "train-worker-0", "train-worker-1"]
    assert res.create_service is not None and res.create_service["metadata"]["name"] == "train"
    assert "`train-worker-1-3.train`" in text


def test_status_is_shaped_as_upstream_serializes_it() -> None:
    """As upstream's Go types write it (held to it by tests/upstream/test_jobset_differential.py):
    ``restarts: 0`` present, no empty ``conditions``, ``replicatedJobsStatus`` by descending name."""
    w = World(make_jobset(rjobs=[{"name": "driver"}, {"name": "worker", "replicas": 2}, {"name": "aux"}]))
    w.step()
    status = w.js["status"]
    assert status["restarts"] == 0
    assert "conditions" not in status
    assert [s["name"] for s in status["replicatedJobsStatus"]] == ["worker", "driver", "aux"]
    before = w.js["status"]
    assert w.step().status is None and w.js["status"] == before  # nothing to write again
