"""End to end on the sandbox: the embedded JobSet controller under kopf, the sandbox's Job controller and kubelet."""

from __future__ import annotations

from gangq.jobset import constants as c

from .conftest import Cluster, jobset, wait_for


def test_jobsets_complete_fail_and_restart(jobset_cluster: Cluster) -> None:
    cl = jobset_cluster
    cl.create_jobset(jobset("ok", [{"name": "driver"}, {"name": "worker", "replicas": 2, "pods": 2}]))
    cl.create_jobset(jobset("flaky", [{"name": "worker", "replicas": 2}], exit_code=1,
                            failurePolicy={"maxRestarts": 1}))
    cl.create_jobset(jobset("doomed", [{"name": "bad", "exit_code": 3}, {"name": "slow", "run_seconds": 60}]))
    generated = jobset("", [{"name": "w"}])
    generated["metadata"] = {"generateName": "gen-"}
    gen_name = cl.create_jobset(generated)["metadata"]["name"]
    assert gen_name.startswith("gen-") and len(gen_name) == 9

    # children of "ok": names, labels, owner, Service, pod hostnames
    jobs = wait_for(lambda: len(cl.jobs("ok")) == 3 and cl.jobs("ok"), 10, "the Jobs of 'ok'")
    assert sorted(jobs) == ["ok-driver-0", "ok-worker-0", "ok-worker-1"]
    js = cl.jobset("ok")
    assert js is not None
    labels = jobs["ok-worker-1"]["metadata"]["labels"]
    assert labels[c.JOBSET_NAME_KEY] == "ok" and labels[c.REPLICATED_JOB_NAME_KEY] == "worker"
    assert labels[c.JOB_INDEX_KEY] == "1" and labels[c.JOB_GLOBAL_INDEX_KEY] == "2"
    assert labels[c.RESTARTS_KEY] == "0" and labels[c.GLOBAL_REPLICAS_KEY] == "3"
    assert labels[c.JOBSET_UID_KEY] == js["metadata"]["uid"]
    owner = jobs["ok-worker-1"]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("JobSet", "ok",
                                                                                js["metadata"]["uid"], True)
    svc = wait_for(lambda: cl.list("", "services", f"{c.JOBSET_NAME_KEY}=ok"), 5, "the Service")[0]
    assert svc["metadata"]["name"] == "ok" and svc["spec"]["clusterIP"] == "None"
    pods = wait_for(lambda: len(cl.pods("ok")) >= 5 and cl.pods("ok"), 10, "the pods of 'ok'")
    hosts = sorted(f"{p['spec']['hostname']}.{p['spec']['subdomain']}" for p in pods)
    assert hosts[:5] == ["ok-driver-0-0.ok", "ok-worker-0-0.ok", "ok-worker-0-1.ok", "ok-worker-1-0.ok",
                         "ok-worker-1-1.ok"]
    assert all(p["metadata"]["labels"][c.JOBSET_NAME_KEY] == "ok" for p in pods)

    done = cl.wait_condition("ok", "Completed")
    assert done["reason"] == "AllJobsCompleted"
    js = cl.jobset("ok")
    assert js is not None and js["status"]["terminalState"] == "Completed"
    assert {s["name"]: s["succeeded"] for s in js["status"]["replicatedJobsStatus"]} == {"driver": 1, "worker": 2}

    # "flaky" fails, restarts once with the next restart-attempt, then fails for good
    failed = cl.wait_condition("flaky", "Failed", 30)
    assert failed["reason"] == "ReachedMaxRestarts", failed
    js = cl.jobset("flaky")
    assert js is not None and js["status"]["restarts"] == 1 and js["status"]["restartsCountTowardsMax"] == 1
    assert {j["metadata"]["labels"][c.RESTARTS_KEY] for j in cl.jobs("flaky").values()} == {"1"}
    # The controller posts a sync's Events after its status write, so the Failed condition can be
    # seen before the Event that goes with it exists: wait for it (wait_condition waits likewise).
    wait_for(
        lambda: "ReachedMaxRestarts" in [e["reason"] for e in cl.events("flaky")], 5, "the ReachedMaxRestarts Event"
    )
    reasons = [e["reason"] for e in cl.events("flaky")]
    assert "RestartJobSetFailurePolicyAction" in reasons and "ReachedMaxRestarts" in reasons

    # "doomed": no failure policy -> Failed at the first failure, its still-running Job is deleted
    failed = cl.wait_condition("doomed", "Failed", 20)
    assert failed["reason"] == "FailedJobs"
    assert failed["message"].endswith("(first failed job: doomed-bad-0)")
    wait_for(lambda: list(cl.jobs("doomed")) == ["doomed-bad-0"], 10, "the active Job of 'doomed' deleted")
    wait_for(lambda: "FailedJobs" in [e["reason"] for e in cl.events("doomed")], 5, "the FailedJobs Event")
    assert [e["reason"] for e in cl.events("doomed")].count("FailedJobs") == 1

    # generateName: children and Service named after the name the API server chose
    cl.wait_condition(gen_name, "Completed", 10)
    assert list(cl.jobs(gen_name)) == [f"{gen_name}-w-0"]
    assert [s["metadata"]["name"] for s in cl.list("", "services", f"{c.JOBSET_NAME_KEY}={gen_name}")] == [gen_name]


def test_queued_jobset_waits_without_children_then_runs_and_suspends(jobset_cluster: Cluster) -> None:
    cl = jobset_cluster
    cl.create_jobset(jobset("queued", [{"name": "worker", "replicas": 2}], suspend=True, run_seconds=60))
    cl.wait_condition("queued", "Suspended", 10)
    assert cl.jobs("queued") == {} and not cl.list("", "services", f"{c.JOBSET_NAME_KEY}=queued")
    # admission, as gangq does it: flavor nodeSelector into the pod template, suspend false
    cl.patch_jobset("queued", [
        {"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/spec/nodeSelector",
         "value": {"pool": "a"}},
        {"op": "replace", "path": "/spec/suspend", "value": False}], "json")
    pods = wait_for(lambda: [p for p in cl.pods("queued") if p["status"].get("phase") == "Running"], 15,
                    "running pods")
    assert all(p["spec"]["nodeSelector"] == {"pool": "a"} for p in pods)
    assert (cl.jobset("queued") or {})["status"]["conditions"][0]["type"] == "Suspended"
    # eviction: suspend the running JobSet (and restore the template)
    cl.patch_jobset("queued", [
        {"op": "remove", "path": "/spec/replicatedJobs/0/template/spec/template/spec/nodeSelector"},
        {"op": "replace", "path": "/spec/suspend", "value": True}], "json")
    wait_for(lambda: all(j["spec"].get("suspend") for j in cl.jobs("queued").values()), 10, "suspended Jobs")
    wait_for(lambda: not [p for p in cl.pods("queued") if p["status"].get("phase") == "Running"], 10,
             "the pods gone")
    js = wait_for(lambda: ((cl.jobset("queued") or {}).get("status") or {}).get("replicatedJobsStatus", [{}])[0]
                  .get("suspended") == 2 and cl.jobset("queued"), 10, "suspended count")
    assert js["status"]["replicatedJobsStatus"][0]["suspended"] == 2
    # re-admitted on the other flavor: existing Jobs get the merged template and resume
    cl.patch_jobset("queued", [
        {"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/spec/nodeSelector",
         "value": {"pool": "b"}},
        {"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/metadata/labels",
         "value": {"flavor": "b"}},
        {"op": "replace", "path": "/spec/suspend", "value": False}], "json")
    pods = wait_for(lambda: [p for p in cl.pods("queued") if p["status"].get("phase") == "Running"
                             and p["spec"].get("nodeSelector") == {"pool": "b"}], 15, "pods on pool b")
    assert all(p["metadata"]["labels"]["flavor"] == "b" for p in pods)
    # a deleted Service is recreated
    svc = cl.list("", "services", f"{c.JOBSET_NAME_KEY}=queued")[0]
    cl.sb.call(cl.sb.store.delete, "", "services", "default", "queued")
    wait_for(lambda: (s := cl.list("", "services", f"{c.JOBSET_NAME_KEY}=queued"))
             and s[0]["metadata"]["uid"] != svc["metadata"]["uid"], 10, "the Service recreated")
    job = cl.jobs("queued")["queued-worker-0"]
    assert job["spec"]["template"]["metadata"]["labels"][c.JOBSET_NAME_KEY] == "queued"
    assert cl.condition("queued", "Suspended") is None
    reasons = [e["reason"] for e in cl.events("queued")]
    assert "SuspendedJobs" in reasons and "ResumeJobs" in reasons


def test_in_order_startup_ttl_invalid_and_foreign_jobsets(jobset_cluster: Cluster) -> None:
    cl = jobset_cluster
    # The first job's pods take 6 s to become Ready, so that "the second job waits for it" is
    # checked while it is certainly not Ready (without the delay a loaded machine let it get
    # Ready, and the second job legitimately created, before the check ran).
    # The TTL runs from the Completed condition's lastTransitionTime, which has whole seconds (as
    # in Kubernetes): with a TTL of 1 s the JobSet could be deleted a few ms after the condition
    # was written, and a CI run once never saw it. With 3 s it stays visible for 2 s at least.
    # The second job runs 3 s: StartupPolicyCompleted is written when a reconcile sees it started,
    # and a job that finished within half a second on a loaded machine completed the JobSet first.
    cl.create_jobset(jobset("ordered", [{"name": "a", "run_seconds": 2, "start_delay": 6},
                                        {"name": "b", "run_seconds": 3}],
                            startupPolicy={"startupPolicyOrder": "InOrder"}, ttlSecondsAfterFinished=3))
    invalid = jobset("invalid", [{"name": "a"}, {"name": "b"}])
    invalid["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "b", "status": "Ready"}]
    cl.create_jobset(invalid)
    cl.create_jobset(jobset("foreign", [{"name": "a"}], managedBy="kueue.x-k8s.io/multikueue"))

    failed = cl.wait_condition("invalid", "Failed", 10)
    assert failed["reason"] == "ValidationFailed"
    assert "spec.replicatedJobs[0].dependsOn[0].name" in failed["message"]
    events = wait_for(lambda: cl.events("invalid"), 5, "the ValidationFailed Event")
    assert events[0]["type"] == "Warning" and events[0]["message"] == failed["message"]
    assert cl.jobs("invalid") == {}
    wait_for(lambda: "ordered-a-0" in cl.jobs("ordered"), 10, "the first Job")
    assert "ordered-b-0" not in cl.jobs("ordered")
    cl.wait_condition("ordered", "StartupPolicyInProgress", 5)
    assert "ordered-b-0" not in cl.jobs("ordered")
    cl.wait_condition("ordered", "StartupPolicyCompleted", 10 + 6)  # the budget it had, plus the delay
    cl.wait_condition("ordered", "Completed", 15 + 6)
    wait_for(lambda: cl.jobset("ordered") is None, 10, "the TTL deletion")
    # by now the JobSet managed by another controller would long have run: it was left alone
    assert cl.jobs("foreign") == {} and "status" not in (cl.jobset("foreign") or {"status": 1})
