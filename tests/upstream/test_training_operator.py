"""gangq queues PyTorchJobs that the Kubeflow training operator (v1.8.1, built from
``hack/upstream/training-operator``, its CRDs from the pinned module) runs with gang scheduling
(``--gang-scheduler-name=scheduler-plugins``), on the real control plane with kwok's nodes.

With gang scheduling the operator creates a coscheduling PodGroup (``scheduling.x-k8s.io/v1alpha1``)
for a job once the job runs, and gives the job's pods ``schedulerName: scheduler-plugins`` and the
PodGroup's label. A second kube-scheduler of the control plane's build, with one profile of that
name, binds them (:func:`tests.upstream.operators.named_scheduler`): it stands in for
scheduler-plugins' coscheduling, which a user running the operator this way has serve that name.
What gangq promises does not depend on that scheduler holding a gang back: gangq admits the gang
whole, and its pods reach a scheduler only then.

Two PyTorchJobs with ``minAvailable`` that fit the ClusterQueue's quota but not the node together
run one at a time: no job is admitted while pods of another that has not finished are alive, and no
pod is bound before its job is admitted (both checked at every poll). A job is Succeeded once its
master is, and gangq then gives its quota back as Kueue does; a worker still running after that
keeps its node capacity (a pod of no gang) and the next job is admitted only where it fits beside it.
The PodGroup the operator writes for each carries
the ``minMember`` and ``minResources`` of the Workload gangq wrote: one job's derived from
``minAvailable`` as the operator derives them, the other's its own
``schedulingPolicy.minResources``. The PodGroups are the jobs' gangs, never Workloads of their own.
Both finish (kwok completes their pods). An eviction (the Workload deactivated) stops the whole
job — the operator deletes its pods and its PodGroup — and the next job is admitted only once those
pods are gone.

Where a job's replica types ask for different resources, the operator sums ``minAvailable`` pods
taken in a random order of replica types on each reconcile (its PriorityClass lister is never
filled): its PodGroup then carries one of those sums, and gangq charges the most of them, resource
by resource (:func:`gangq.integrations.kubeflow.operator_min_resources`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangq.api.pods import FieldContext, exact_quantity
from gangq.api.quantity import to_canonical
from gangq.sandbox.errors import ApiError
from tests.clusters import RealCluster
from tests.controlplane.kube import get, wait_for

from .beside import QUEUE, GangWatch, Pods, gangq_beside, operator_binary, pod_live
from .operators import named_scheduler, training_operator, training_operator_crds

NS = "kubeflow-queue"
NODES = "1x{cpu:4,memory:16Gi}[pool=kf]"
GANG_SCHEDULER = "scheduler-plugins"
JOB_NAME = "training.kubeflow.org/job-name"
POD_GROUP = "scheduling.x-k8s.io/pod-group"
ADMISSION = "gangq.io/admission"
GI = 2**30


@pytest.fixture(scope="session")
def training_operator_binary() -> Path:
    """The training operator's binary."""
    return operator_binary("training-operator", "training-operator")


def _delete_jobs(store: Any) -> None:
    """Delete what is left of the test's PyTorchJobs (their pods, Services and PodGroups follow
    them through their ownerReferences)."""
    for obj in store.list("kubeflow.org", "pytorchjobs", NS)["items"]:
        with contextlib.suppress(ApiError):
            store.delete("kubeflow.org", "pytorchjobs", NS, obj["metadata"]["name"], propagation_policy="Background")


@pytest.fixture
def cluster(real_cluster: RealCluster, training_operator_binary: Path, tmp_path: Path) -> Iterator[RealCluster]:
    cp = real_cluster.cp
    operators = [named_scheduler(cp, GANG_SCHEDULER, tmp_path / "scheduler"),
                 training_operator(cp, training_operator_binary, operator_log(tmp_path).parent,
                                   gang_scheduler=GANG_SCHEDULER)]
    with gangq_beside(real_cluster, tmp_path, namespace=NS, nodes=NODES, pool="kf", crds=training_operator_crds(),
                      operators=operators, cleanup=_delete_jobs) as cluster:
        assert get(cp, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.x-k8s.io"), \
            "gangq's install serves the PodGroup CRD (crds/scheduling.x-k8s.io_podgroups.yaml)"
        yield cluster


# --- objects ------------------------------------------------------------------------------------------


def _replica(replicas: int, cpu: str, memory: str, run_seconds: str) -> dict[str, Any]:
    return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {
        "metadata": {"annotations": {"sandbox.gangq.io/run-seconds": run_seconds}},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [
            {"name": "pytorch", "image": "pytorch/pytorch:2.5.1",
             "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}


def pytorchjob(name: str, run_seconds: str, *, master_cpu: int = 1, **scheduling: Any) -> dict[str, Any]:
    """A master of ``master_cpu`` cpu and as many Gi and two workers of 1 cpu and 1Gi, their pods
    running ``run_seconds``; ``minAvailable: 2`` with ``scheduling``."""
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "labels": dict(QUEUE)},
            "spec": {"runPolicy": {"suspend": True, "schedulingPolicy": {"minAvailable": 2, **scheduling}},
                     "pytorchReplicaSpecs": {
                         "Master": _replica(1, str(master_cpu), f"{master_cpu}Gi", run_seconds),
                         "Worker": _replica(2, "1", "1Gi", run_seconds)}}}


def canonical(quantities: dict[str, Any]) -> dict[str, int]:
    ctx = FieldContext("test", "", "")
    return {r: to_canonical(r, exact_quantity(q, ctx, r)) for r, q in quantities.items()}


# --- watching the gangs ----------------------------------------------------------------------------------


def live(pods: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [p for p in pods or [] if pod_live(p)]


def _finished(job: dict[str, Any]) -> bool:
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def operator_log(tmp_path: Path) -> Path:
    """The log of the test's training operator (:func:`cluster`)."""
    return tmp_path / "training-operator" / "training-operator.log"


class Gangs(GangWatch):
    """The PyTorchJobs' pods; every poll also checks that no job is admitted while pods of another
    that has not finished (a stopping one included) are alive. It also gets the operator past a
    stall of its own (:meth:`unstall`)."""

    def __init__(self, store: Any, log: Path) -> None:
        super().__init__(store, NS)
        self.log = log
        self.nudged: dict[str, int] = {}  # job → the operator's failed PodGroup creations seen

    def unstall(self, job: str) -> None:
        """The operator reads a PodGroup it has just created from its cache; when the cache lags,
        it fails the reconcile ("unable to get PodGroup after success creation", then "already
        exists") and waits for the next event of the job, but a PodGroup's own creation event is
        filtered out (it has no replica-type label) and its status write of the same second
        changes nothing: the job stays without pods. A user's touch gets it going; so does this
        one, an annotation of the test's own, once per failure seen in the operator's log."""
        failures = self.log.read_text(errors="replace").count(
            f"Sync PodGroup {NS}/{job}: unable to create PodGroup")
        if failures > self.nudged.get(job, 0):
            self.nudged[job] = failures
            self.store.patch("kubeflow.org", "pytorchjobs", NS, job,
                             {"metadata": {"annotations": {"test.gangq.io/nudge": str(failures)}}}, "merge")

    def jobs(self) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in self.store.list("kubeflow.org", "pytorchjobs", NS)["items"]}

    def admitted(self) -> set[str]:
        """The jobs admitted and not finished (a finished job keeps gangq's admission record)."""
        return {name for name, o in self.jobs().items()
                if ADMISSION in (o["metadata"].get("annotations") or {}) and not o["spec"]["runPolicy"].get("suspend")
                and not _finished(o)}

    def gang_of(self, pod: dict[str, Any]) -> str | None:
        return (pod["metadata"].get("labels") or {}).get(JOB_NAME)

    def check(self, before: set[str], alive: Pods, every: Pods) -> None:
        finished = {name for name, o in self.jobs().items() if _finished(o)} if before else set()
        for job in before:
            others = sorted(g for g in alive if g != job and g not in finished)
            assert not others, f"{job} admitted while pods of {others} are alive: " + ", ".join(
                p["metadata"]["name"] for g in others for p in alive[g])
            if not every.get(job):
                self.unstall(job)


def workloads(store: Any) -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in store.list("gangq.io", "workloads", NS)["items"]}


def podgroup(store: Any, name: str) -> dict[str, Any] | None:
    try:
        return dict(store.get("scheduling.x-k8s.io", "podgroups", NS, name))
    except ApiError as err:
        if err.code == 404:
            return None
        raise


def condition(obj: dict[str, Any], ctype: str) -> bool:
    return any(c["type"] == ctype and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions", []))


def running(pods: list[dict[str, Any]] | None, count: int) -> bool:
    return len(live(pods)) == count and all(p["status"].get("phase") == "Running" for p in live(pods))


# --- the tests -----------------------------------------------------------------------------------------------


def test_pytorchjobs_run_one_at_a_time_and_the_operators_podgroups_carry_what_gangq_charged(
        cluster: RealCluster, tmp_path: Path) -> None:
    store = cluster.store
    # three pods of 1 cpu each (the node has 4), two of them the gang's minimum
    store.create("kubeflow.org", "pytorchjobs", pytorchjob("first", "8"), namespace=NS)
    store.create("kubeflow.org", "pytorchjobs", pytorchjob("second", "8", minResources={"cpu": "2500m",
                                                                                         "memory": "2Gi"}),
                 namespace=NS)
    gangs = Gangs(store, operator_log(tmp_path))
    wait_for(lambda: len(workloads(store)) == 2, 60, "both Workloads")
    wls = workloads(store)
    # gangq's gangs: minAvailable of the job, and min-resources as the operator will write them —
    # any two pods — or as the job says
    first_wl, second_wl = wls["pytorchjob-first"]["spec"], wls["pytorchjob-second"]["spec"]
    assert (first_wl["minMember"], canonical(first_wl["minResources"])) == (2, {"cpu": 2000, "memory": 2 * GI})
    assert (second_wl["minMember"], canonical(second_wl["minResources"])) == (2, {"cpu": 2500, "memory": 2 * GI})

    pods = gangs.wait(lambda pods: running(pods.get("first"), 3) or running(pods.get("second"), 3), 120,
                      "one job's three pods running")
    running_job = "first" if running(pods.get("first"), 3) else "second"
    waiting_job = "second" if running_job == "first" else "first"
    assert not pods.get(waiting_job), f"{waiting_job} has pods beside {running_job}"
    for pod in pods[running_job]:
        assert pod["spec"]["schedulerName"] == GANG_SCHEDULER
        assert pod["metadata"]["labels"][POD_GROUP] == running_job
        assert pod["spec"]["nodeSelector"] == {"pool": "kf"}  # the flavor's node labels, in every template
        assert not pod["spec"].get("schedulingGates")  # the job's pods: never gated as a pod group's
    group = podgroup(store, running_job)
    assert group is not None, f"the operator made no PodGroup for {running_job}"
    owner = [r for r in group["metadata"]["ownerReferences"] if r.get("controller")]
    assert [(r["kind"], r["name"]) for r in owner] == [("PyTorchJob", running_job)]
    wl = wls[f"pytorchjob-{running_job}"]["spec"]
    assert group["spec"]["minMember"] == wl["minMember"]
    assert canonical(group["spec"]["minResources"]) == canonical(wl["minResources"])
    assert podgroup(store, waiting_job) is None  # a suspended job has none
    assert waiting_job not in gangs.ever_admitted

    def finished(name: str) -> bool:
        return condition(store.get("kubeflow.org", "pytorchjobs", NS, name), "Succeeded")

    gangs.wait(lambda pods: finished(running_job) and not live(pods.get(running_job)), 120,
               f"{running_job} to succeed")
    pods = gangs.wait(lambda pods: len(pods.get(waiting_job, [])) == 3, 120, f"{waiting_job}'s pods")
    group = podgroup(store, waiting_job)
    assert group is not None, f"the operator made no PodGroup for {waiting_job}"
    wl = workloads(store)[f"pytorchjob-{waiting_job}"]["spec"]
    assert group["spec"]["minMember"] == wl["minMember"]
    assert canonical(group["spec"]["minResources"]) == canonical(wl["minResources"])
    gangs.wait(lambda pods: finished(waiting_job) and not live(pods.get(waiting_job)), 120, f"{waiting_job} to succeed")
    assert set(gangs.bound) == {"first", "second"} and gangs.bound[running_job] < gangs.bound[waiting_job]

    # the PodGroups were the jobs' gangs, never Workloads of their own
    assert sorted(workloads(store)) == ["pytorchjob-first", "pytorchjob-second"]
    wait_for(lambda: all(condition(w, "Finished") for w in workloads(store).values()), 30, "both Workloads Finished")
    # the operator deletes a finished job's PodGroup
    wait_for(lambda: podgroup(store, "first") is None and podgroup(store, "second") is None, 60,
             "the finished jobs' PodGroups gone")


def test_a_deactivated_pytorchjob_stops_whole_and_the_next_starts_once_its_pods_are_gone(
        cluster: RealCluster, tmp_path: Path) -> None:
    store = cluster.store
    # a master of 2 cpu and 2Gi, two workers of 1 cpu and 1Gi: the node's 4 cpu
    store.create("kubeflow.org", "pytorchjobs", pytorchjob("first", "-1", master_cpu=2), namespace=NS)
    gangs = Gangs(store, operator_log(tmp_path))
    gangs.wait(lambda pods: running(pods.get("first"), 3), 120, "the first job's three pods running")
    store.create("kubeflow.org", "pytorchjobs", pytorchjob("second", "-1", master_cpu=2), namespace=NS)
    wait_for(lambda: "pytorchjob-second" in workloads(store), 60, "the second job's Workload")
    time.sleep(3)  # the node is full: the second job waits
    assert "second" not in gangs.poll() and "second" not in gangs.ever_admitted
    assert podgroup(store, "second") is None
    # the operator sums two pods in a random order of replica types: the master and a worker, or
    # two workers; gangq charged the most of either, resource by resource
    charged = canonical(workloads(store)["pytorchjob-first"]["spec"]["minResources"])
    assert charged == {"cpu": 3000, "memory": 3 * GI}
    group = podgroup(store, "first")
    assert group is not None and group["spec"]["minMember"] == 2
    assert canonical(group["spec"]["minResources"]) in ({"cpu": 3000, "memory": 3 * GI},
                                                         {"cpu": 2000, "memory": 2 * GI})

    store.patch("gangq.io", "workloads", NS, "pytorchjob-first", {"spec": {"active": False}}, "merge")
    second = gangs.wait(lambda pods: running(pods.get("second"), 3), 120, "the second job's pods after the first's")
    assert not live(second.get("first"))  # every pod of the first gone before the second was admitted
    evicted = store.get("kubeflow.org", "pytorchjobs", NS, "first")
    assert evicted["spec"]["runPolicy"]["suspend"] is True
    for rspec in evicted["spec"]["pytorchReplicaSpecs"].values():
        assert "nodeSelector" not in rspec["template"]["spec"]  # the flavor taken out again
    wait_for(lambda: condition(store.get("kubeflow.org", "pytorchjobs", NS, "first"), "Suspended"), 60,
             "the operator to mark the first job suspended")
    assert podgroup(store, "first") is None  # the operator deletes a suspended job's PodGroup
    assert workloads(store)["pytorchjob-first"]["status"].get("admission") is None
    group = podgroup(store, "second")
    assert group is not None and group["spec"]["minMember"] == 2
    assert gangs.ever_admitted == {"first", "second"}
