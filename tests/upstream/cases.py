"""The JobSet cases of the differential test: each runs once under the upstream JobSet controller
and once under gangq's embedded reconciler (``tests/upstream/test_jobset_differential.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable

from .harness import INF, Case, Run, jobset, rjob


def _until_running_then(action: str) -> Callable[[Run], None]:
    def script(run: Run) -> None:
        run.wait(run.running_pods, "a running pod")
        if action == "suspend":  # and, for when the Jobs resume, pods that finish
            run.patch([{"op": "replace", "path": "/spec/suspend", "value": True},
                       {"op": "replace", "value": "1", "path": "/spec/replicatedJobs/0/template/spec/template/"
                        "metadata/annotations/sandbox.gangq.io~1run-seconds"}], "json")
            run.wait(lambda: run.condition("Suspended") and not run.running_pods(), "the suspension")
            run.wait(lambda: all(j["spec"].get("suspend") for j in run.jobs()), "suspended Jobs")
            run.wait(lambda: run.rjob_status(suspended=2, active=0, ready=0), "the suspension in the status")
            run.milestone("suspended")
            run.patch({"spec": {"suspend": False}})
        elif action == "delete":  # once the JobSet's status says every Job runs
            run.wait(lambda: run.rjob_status(active=2, ready=2), "every Job active and ready in the status")
            run.milestone("running")
            run.delete()
        elif action == "heal":  # the pods of the next attempt succeed
            run.patch([{"op": "replace", "value": "0", "path": "/spec/replicatedJobs/0/template/spec/template/"
                        "metadata/annotations/sandbox.gangq.io~1exit-code"}], "json")
    return script


def _created_suspended(run: Run) -> None:
    run.wait(lambda: run.condition("Suspended"), "Suspended")
    time.sleep(1.0)  # what the controller makes of a suspended JobSet
    run.milestone("queued")
    run.patch({"spec": {"suspend": False}})


def _first_jobs(run: Run) -> None:
    """The Jobs that exist as soon as there are any (dependsOn and InOrder hold the rest back)."""
    # upstream writes the status after creating the Jobs, gangq before: wait for both
    run.wait(lambda: run.jobs() and (run.jobset() or {}).get("status"), "the first Jobs and a status")
    run.milestone("started")


def _gone(run: Run) -> bool:
    return run.jobset() is None and not run.jobs()


def _ttl(run: Run) -> None:
    run.wait(lambda: run.condition("Completed"), "Completed")
    run.milestone("completed")


def _left_alone(run: Run) -> bool:
    time.sleep(3.0)
    return True


CASES: list[Case] = [
    Case(jobset("basic", [rjob("main")])),
    Case(jobset("replicated", [rjob("driver"), rjob("worker", replicas=3, pods=2)])),
    Case(jobset("indexed", [rjob("worker", pods=2, completions=4)])),
    Case(jobset("nonindexed", [rjob("worker", pods=3, mode="NonIndexed")])),
    Case(jobset("success-any", [rjob("leader"), rjob("worker", replicas=2, run=INF)],
                success={"operator": "Any", "targetReplicatedJobs": ["leader"]})),
    Case(jobset("success-all-targeted", [rjob("driver", run=INF), rjob("worker", replicas=2)],
                success={"operator": "All", "targetReplicatedJobs": ["worker"]})),
    Case(jobset("job-fails", [rjob("bad", exit=3), rjob("slow", run=INF)])),
    Case(jobset("job-fails-on-failure", [rjob("bad", exit=3, backoff=1, restart="OnFailure")])),
    Case(jobset("max-restarts", [rjob("bad", exit=1)], failure={"maxRestarts": 2})),
    Case(jobset("blocking-recreate", [rjob("bad", exit=1), rjob("other", replicas=2, run=INF)],
                failure={"maxRestarts": 1, "restartStrategy": "BlockingRecreate"})),
    Case(jobset("rule-on-reason", [rjob("bad", exit=3, job_spec={"podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]}})],
                failure={"maxRestarts": 3, "rules": [
                    {"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]})),
    Case(jobset("rule-target-miss", [rjob("bad", exit=1), rjob("other", run=INF)],
                failure={"maxRestarts": 1, "rules": [
                    {"action": "FailJobSet", "targetReplicatedJobs": ["other"]}]})),
    Case(jobset("rule-message", [rjob("bad", exit=1)],
                failure={"maxRestarts": 3, "rules": [
                    {"action": "FailJobSet", "onJobFailureMessagePatterns": ["backoff limit"]}]})),
    Case(jobset("restart-then-complete", [rjob("flaky", exit=1, run=4)], failure={"maxRestarts": 2}),
         script=_until_running_then("heal")),
    Case(jobset("rule-ignore-max", [rjob("flaky", exit=1, run=4)],
                failure={"maxRestarts": 0, "rules": [
                    {"action": "RestartJobSetAndIgnoreMaxRestarts",
                     "onJobFailureReasons": ["BackoffLimitExceeded"]}]}),
         script=_until_running_then("heal")),
    Case(jobset("startup-in-order", [rjob("a", start_delay=1, run=3), rjob("b", replicas=2, start_delay=1, run=2),
                                     rjob("c")], startup="InOrder"),
         script=_first_jobs),
    # a runs long enough that "started" is seen before it completes on a loaded machine (b starts then)
    Case(jobset("depends-complete", [rjob("a", run=6), rjob("b", replicas=2, depends_on=[
        {"name": "a", "status": "Complete"}])]), script=_first_jobs),
    Case(jobset("depends-ready", [rjob("a", start_delay=1, run=3), rjob("b", depends_on=[
        {"name": "a", "status": "Ready"}])]), script=_first_jobs),
    Case(jobset("network-subdomain", [rjob("w", replicas=2)],
                network={"subdomain": "custom-domain", "publishNotReadyAddresses": False})),
    Case(jobset("network-no-dns", [rjob("w", replicas=2)], network={"enableDNSHostnames": False})),
    Case(jobset("ttl", [rjob("w")], ttlSecondsAfterFinished=2), script=_ttl, done=_gone),
    Case(jobset("suspend-resume", [rjob("w", replicas=2, run=INF)], suspend=False),
         script=_until_running_then("suspend")),
    Case(jobset("created-suspended", [rjob("w", replicas=2)], suspend=True), script=_created_suspended),
    Case(jobset("deleted-mid-run", [rjob("w", replicas=2, run=INF)]), script=_until_running_then("delete"),
         done=_gone),
    Case(jobset("labels-groups", [
        rjob("driver", group="ctl", job_meta={"labels": {"tier": "driver"}, "annotations": {"note": "d"}},
             pod_meta={"labels": {"pod-label": "x"}, "annotations": {"pod-note": "y"}}),
        rjob("worker", replicas=2, pods=2, group="compute", job_meta={"labels": {"tier": "worker"}})],
        labels={"team": "a"}, annotations={"owner": "me"},
        coordinator={"replicatedJob": "worker", "jobIndex": 1, "podIndex": 1})),
    Case(jobset("framework-pytorch", [rjob("master"), rjob("worker", replicas=2)],
                annotations={"gangq.io/framework": "pytorch"})),
    Case(jobset("managed-elsewhere", [rjob("w")], managedBy="example.com/other-controller"), done=_left_alone),
]
