"""Shared helpers of the operator's end-to-end tests (sandbox + controller in a thread).

``FakeJobSetRunner`` stands in for a JobSet controller (the sandbox runs Jobs, not JobSets): for
every unsuspended JobSet it creates the gang's pods (bare pods with upstream's JobSet labels and
the admitted pod template, so the sandbox scheduler and kubelet run them) and marks the JobSet
Completed when they all succeeded; it deletes the pods of a suspended JobSet. ``pods=False``
marks a JobSet Completed ``run-seconds`` after it was unsuspended, without pods (as Kueue's
performance runner does).
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from gangq.integrations.jobset import JOBSET
from gangq.operator.config import OperatorConfig, parse_config
from gangq.operator.install import crd_documents
from gangq.operator.kube import Credentials
from gangq.operator.operator import OperatorThread
from gangq.sandbox.errors import ApiError
from tests.clusters import LEASE_NAMESPACE, Cluster, controller_kubeconfig, is_real

HERE = Path(__file__).parent
JS_GROUP = "jobset.x-k8s.io"
RUN_SECONDS = "sandbox.gangq.io/run-seconds"
START_DELAY = "sandbox.gangq.io/start-delay-seconds"

FAST_CONFIG: dict[str, Any] = {
    "podsReady": {"enable": False},
    "status": {"workloadDelaySeconds": 0.05, "pendingDelaySeconds": 0.1, "pendingMinIntervalSeconds": 0.3,
               "queueIntervalSeconds": 0.2},
    "leaderElection": {"leaseDurationSeconds": 2, "renewIntervalSeconds": 0.5},
    "metricsPort": None,
}


def wait_for(cond: Callable[[], Any], timeout: float = 15.0, what: str = "condition", every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def install(sb: Cluster) -> None:
    """The gangq CRDs and the JobSet CRD (crds/); the real control plane has them installed
    already, with the controller's RBAC (tests/conftest.py's ``real_cluster``)."""
    if is_real(sb):
        return
    for doc in crd_documents():
        sb.call(sb.store.create, "apiextensions.k8s.io", "customresourcedefinitions", doc)


PLURALS = {
    "ResourceFlavor": ("gangq.io", "resourceflavors", False),
    "ClusterQueue": ("gangq.io", "clusterqueues", False),
    "Cohort": ("gangq.io", "cohorts", False),
    "Topology": ("gangq.io", "topologies", False),
    "AdmissionCheck": ("gangq.io", "admissionchecks", False),
    "LocalQueue": ("gangq.io", "localqueues", True),
    "WorkloadPriorityClass": ("gangq.io", "workloadpriorityclasses", False),
    "Namespace": ("", "namespaces", False),
    "JobSet": (JS_GROUP, "jobsets", True),
    "Job": ("batch", "jobs", True),
}


def apply(sb: Cluster, docs: Iterable[dict[str, Any]] | str) -> None:
    if isinstance(docs, str):
        docs = [d for d in yaml.safe_load_all(docs) if d]
    for doc in docs:
        group, plural, namespaced = PLURALS[doc["kind"]]
        ns = doc["metadata"].get("namespace", "default") if namespaced else None
        sb.call(sb.store.create, group, plural, copy.deepcopy(doc), namespace=ns)


def namespace(sb: Cluster, name: str, labels: dict[str, str] | None = None) -> None:
    apply(sb, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}])


def cluster_queue(
    name: str,
    quotas: dict[str, Any],
    *,
    flavor: str = "default",
    cohort: str | None = None,
    strategy: str = "BestEffortFIFO",
    preemption: dict[str, Any] | None = None,
    borrowing_limit: dict[str, Any] | None = None,
    namespace_selector: dict[str, Any] | None = None,
    admission_mode: str | None = None,
) -> dict[str, Any]:
    resources = []
    for res, nominal in quotas.items():
        q: dict[str, Any] = {"name": res, "nominalQuota": nominal}
        if borrowing_limit and res in borrowing_limit:
            q["borrowingLimit"] = borrowing_limit[res]
        resources.append(q)
    spec: dict[str, Any] = {
        "namespaceSelector": {} if namespace_selector is None else namespace_selector,
        "queueingStrategy": strategy,
        "resourceGroups": [{"coveredResources": list(quotas), "flavors": [{"name": flavor, "resources": resources}]}],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    if admission_mode:
        spec["admissionMode"] = admission_mode
    return {"apiVersion": "gangq.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def flavor(name: str = "default", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": labels} if labels else {}}


def local_queue(name: str, cq: str, ns: str = "default") -> dict[str, Any]:
    return {"apiVersion": "gangq.io/v1alpha1", "kind": "LocalQueue", "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterQueue": cq}}


def jobset(
    name: str,
    queue: str | None,
    *,
    ns: str = "default",
    replicas: int = 1,
    parallelism: int = 1,
    requests: dict[str, Any] | None = None,
    run_seconds: float = 0.5,
    priority_class: str | None = None,
    suspend: bool = True,
    annotations: dict[str, str] | None = None,
    start_delay: float | None = None,
) -> dict[str, Any]:
    labels = {"gangq.io/queue-name": queue} if queue else {}
    if priority_class:
        labels["gangq.io/priority-class"] = priority_class
    req = {k: str(v) for k, v in (requests or {"cpu": 1}).items()}
    pod_ann = {RUN_SECONDS: str(run_seconds)}
    if start_delay is not None:
        pod_ann[START_DELAY] = str(start_delay)
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": dict(annotations or {})},
        "spec": {
            "suspend": suspend,
            "replicatedJobs": [{
                "name": "worker",
                "replicas": replicas,
                "template": {"spec": {
                    "parallelism": parallelism, "completions": parallelism,
                    "template": {
                        "metadata": {"annotations": pod_ann},
                        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                                 "containers": [{"name": "main", "image": "busybox",
                                                 "resources": {"requests": req, "limits": {
                                                     k: v for k, v in req.items() if k == "nvidia.com/gpu"}}}]},
                    },
                }},
            }],
        },
    }


class FakeJobSetRunner:
    """A stand-in JobSet controller for the tests (see the module docstring)."""

    def __init__(self, sb: Cluster, *, pods: bool = True, interval: float = 0.05) -> None:
        self.sb = sb
        self.pods = pods
        self.interval = interval
        self.started_at: dict[str, float] = {}  # uid -> when first seen running
        self.created: dict[str, int] = {}  # uid -> attempt whose pods exist
        self.unsuspends: dict[str, int] = {}  # "ns/name" -> times seen going from suspended to running
        self._was_running: dict[str, bool] = {}
        self.max_running: dict[str, int] = {}
        self.order: list[str] = []  # JobSets in the order they were first seen running
        self.concurrent_peak = 0  # most JobSets running at once
        self.pods_peak = 0  # most gang pods Running at once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeJobSetRunner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sb.call(self._tick)
            except Exception:  # the sandbox may be stopping
                if self._stop.is_set():
                    return
            time.sleep(self.interval)

    def _tick(self) -> None:
        store = self.sb.store
        jobsets = store.list(JS_GROUP, "jobsets")["items"]
        pods_by_js: dict[str, list[dict[str, Any]]] = {}
        all_pods = store.list("", "pods", label_selector="jobset.sigs.k8s.io/jobset-name")["items"]
        self.pods_peak = max(self.pods_peak, sum(1 for p in all_pods if p["status"].get("phase") == "Running"))
        for pod in all_pods:
            meta = pod["metadata"]
            pods_by_js.setdefault(f"{meta['namespace']}/{meta['labels']['jobset.sigs.k8s.io/jobset-name']}",
                                  []).append(pod)
        now = time.monotonic()
        self.concurrent_peak = max(self.concurrent_peak, sum(
            1 for js in jobsets if not js["spec"].get("suspend") and JOBSET.terminal(js) is None))
        for js in jobsets:
            meta = js["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            uid = meta["uid"]
            pods = pods_by_js.get(key, [])
            running = not js["spec"].get("suspend") and JOBSET.terminal(js) is None
            if running and not self._was_running.get(uid):
                self.unsuspends[key] = self.unsuspends.get(key, 0) + 1
                if key not in self.order:
                    self.order.append(key)
            self._was_running[uid] = running
            if not running:
                for pod in pods:
                    if pod["status"].get("phase") not in ("Succeeded", "Failed"):
                        store.delete("", "pods", meta["namespace"], pod["metadata"]["name"], grace_period_seconds=0)
                self.created.pop(uid, None)
                self.started_at.pop(uid, None)
                continue
            self.started_at.setdefault(uid, now)
            live = [p for p in pods if p["metadata"].get("labels", {}).get("test.gangq.io/uid") == uid]
            n_running = sum(1 for p in live if p["status"].get("phase") == "Running")
            self.max_running[key] = max(self.max_running.get(key, 0), n_running)
            if not self.pods:
                rjob = js["spec"]["replicatedJobs"][0]
                secs = float(rjob["template"]["spec"]["template"]["metadata"]["annotations"].get(RUN_SECONDS, 0.5))
                if now - self.started_at[uid] >= secs:
                    self._complete(js, "Completed")
                continue
            if uid not in self.created:
                self._create_pods(js)
                self.created[uid] = 1
                continue
            if live and all(p["status"].get("phase") == "Succeeded" for p in live):
                self._complete(js, "Completed")
            elif any(p["status"].get("phase") == "Failed" for p in live):
                self._complete(js, "Failed")

    def _complete(self, js: dict[str, Any], cond: str) -> None:
        meta = js["metadata"]
        status = {"conditions": [{"type": cond, "status": "True", "reason": "AllJobsCompleted",
                                  "message": "jobset completed", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                  "terminalState": cond}
        self.sb.store.patch(JS_GROUP, "jobsets", meta["namespace"], meta["name"], {"status": status}, "merge",
                            subresource="status")

    def _create_pods(self, js: dict[str, Any]) -> None:
        meta = js["metadata"]
        for rjob in js["spec"]["replicatedJobs"]:
            job = rjob["template"]["spec"]
            tmpl = job["template"]
            per_job = min(job.get("parallelism", 1), job.get("completions", job.get("parallelism", 1)))
            for j in range(rjob.get("replicas", 1)):
                for k in range(per_job):
                    labels = dict((tmpl.get("metadata") or {}).get("labels") or {})
                    labels.update({
                        "jobset.sigs.k8s.io/jobset-name": meta["name"],
                        "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                        "test.gangq.io/uid": meta["uid"],
                    })
                    pod = {
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"{meta['name']}-{rjob['name']}-{j}-{k}", "namespace": meta["namespace"],
                                     "labels": labels,
                                     "annotations": dict((tmpl.get("metadata") or {}).get("annotations") or {})},
                        "spec": copy.deepcopy(tmpl["spec"]),
                    }
                    self.sb.store.create("", "pods", pod, namespace=meta["namespace"])


def operator_config(**overrides: Any) -> OperatorConfig:
    data = copy.deepcopy(FAST_CONFIG)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    return parse_config(data, "test")


def lease_namespace(sb: Cluster) -> str:
    """Where the controller holds its Lease: the install's namespace on a real control plane (its
    RBAC grants Leases there only)."""
    return LEASE_NAMESPACE if is_real(sb) else "default"


def operator_thread(sb: Cluster, config: OperatorConfig | None = None, identity: str = "op-1",
                    jobset_controller: str = "external", kubeconfig: Path | None = None) -> OperatorThread:
    """A controller replica for ``sb``, started, under the controller's credentials (or those of
    ``kubeconfig``, e.g. ``ControllerFaults.kubeconfig``)."""
    config = config or operator_config()
    if is_real(sb):
        election = config.leader_election.model_copy(update={"namespace": lease_namespace(sb)})
        config = config.model_copy(update={"leader_election": election})
    creds = Credentials.load(kubeconfig or controller_kubeconfig(sb))
    return OperatorThread(creds, config, identity=identity, jobset_controller=jobset_controller).start()  # type: ignore[arg-type]


def start_operator(sb: Cluster, config: OperatorConfig | None = None, identity: str = "op-1",
                   jobset_controller: str = "external") -> OperatorThread:
    """``operator_thread`` once it leads."""
    op = operator_thread(sb, config, identity, jobset_controller)
    wait_for(lambda: op.leading or op.error, 20, f"operator {identity} to lead")
    assert op.error is None, op.error
    return op


def get(sb: Cluster, kind: str, name: str, ns: str | None = "default") -> dict[str, Any] | None:
    plurals = {"JobSet": (JS_GROUP, "jobsets"), "Workload": ("gangq.io", "workloads"),
               "ClusterQueue": ("gangq.io", "clusterqueues"), "LocalQueue": ("gangq.io", "localqueues"),
               "AdmissionCheck": ("gangq.io", "admissionchecks")}
    group, plural = plurals[kind]
    try:
        return sb.call(sb.store.get, group, plural, ns if kind in ("JobSet", "Workload", "LocalQueue") else None, name)
    except Exception:
        return None


def admitted(sb: Cluster, name: str, ns: str = "default") -> bool:
    js = get(sb, "JobSet", name, ns)
    return bool(js) and js["spec"].get("suspend") is False and "gangq.io/admission" in (
        js["metadata"].get("annotations") or {})


def finished(sb: Cluster, name: str, ns: str = "default") -> bool:
    js = get(sb, "JobSet", name, ns)
    return bool(js) and JOBSET.terminal(js) is not None


def workload_status(sb: Cluster, name: str, ns: str = "default") -> dict[str, Any]:
    wl = get(sb, "Workload", f"jobset-{name}", ns)
    return (wl or {}).get("status") or {}


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), None)


def schemaless_crd(group: str, version: str, kind: str, plural: str, scope: str = "Namespaced") -> dict[str, Any]:
    """A CRD of an upstream kind that keeps whatever it is given (a status subresource too): for
    tests of gangq's side of a kind whose operator does not run."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": scope,
                     "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


@contextlib.contextmanager
def crds_served(sb: Cluster, docs: list[dict[str, Any]]) -> Iterator[None]:
    """``docs`` (CRDs) created after gangq started (a kind whose CRD appears later is watched from
    then on), served until the block ends, then deleted. One already there (the session's real
    control plane keeps an upstream operator's CRDs from tests/upstream, with their schemas and
    validation rules) is deleted first, so the test's objects meet only the test's CRD."""
    for doc in docs:
        name = doc["metadata"]["name"]
        with contextlib.suppress(ApiError):
            sb.call(sb.store.delete, "apiextensions.k8s.io", "customresourcedefinitions", None, name)

        def gone(name: str = name) -> bool:
            try:
                sb.call(sb.store.get, "apiextensions.k8s.io", "customresourcedefinitions", None, name)
            except ApiError as err:
                return err.code == 404
            return False

        wait_for(gone, 120, f"CRD {name} gone")
        sb.call(sb.store.create, "apiextensions.k8s.io", "customresourcedefinitions", copy.deepcopy(doc))

    def served() -> bool:
        try:
            for doc in docs:
                spec = doc["spec"]
                namespace = "default" if spec["scope"] == "Namespaced" else None
                sb.call(sb.store.list, spec["group"], spec["names"]["plural"], namespace)
        except ApiError:
            return False
        return True

    wait_for(served, 30, "the CRDs to be served")
    try:
        yield
    finally:
        for doc in docs:
            with contextlib.suppress(ApiError):
                sb.call(sb.store.delete, "apiextensions.k8s.io", "customresourcedefinitions", None,
                        doc["metadata"]["name"])
