"""Fixtures for the JobSet controller's end-to-end tests: a sandbox with the JobSet CRD and a kopf operator that
runs ``gangq.operator.jobset.register()`` on the default registry."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangq.sandbox.kubelet import KubeletConfig
from gangq.sandbox.runtime import Sandbox
from tests.clusters import RealCluster, controller_kubeconfig, is_real

CRD_PATH = Path(__file__).resolve().parents[2] / "crds" / "jobset.x-k8s.io_jobsets.yaml"
GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"

OPERATOR = textwrap.dedent('''
    import kopf

    from gangq.operator.jobset import register

    # Every test loads this file into the same process: without a fresh registry the handlers
    # of earlier tests (and their controllers, bound to sandboxes already gone) stay registered
    # and act on this test's objects.
    kopf.set_default_registry(kopf.OperatorRegistry())

    @kopf.on.login()
    def login(**kwargs):
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_):
        settings.posting.level = 40
        settings.watching.server_timeout = 60

    register(kopf.get_default_registry())
''')


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Cluster:
    """Helpers over a running sandbox (store calls run on the sandbox loop)."""

    def __init__(self, sb: Sandbox | RealCluster) -> None:
        self.sb = sb

    def create_jobset(self, obj: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
        return self.sb.call(self.sb.store.create, GROUP, PLURAL, obj, namespace=namespace)

    def jobset(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        try:
            return self.sb.call(self.sb.store.get, GROUP, PLURAL, namespace, name)
        except Exception:
            return None

    def patch_jobset(self, name: str, patch: Any, kind: str = "merge", namespace: str = "default") -> None:
        self.sb.call(self.sb.store.patch, GROUP, PLURAL, namespace, name, patch, kind)

    def list(self, group: str, plural: str, selector: str | None = None, namespace: str = "default"
             ) -> list[dict[str, Any]]:
        return self.sb.call(self.sb.store.list, group, plural, namespace, label_selector=selector)["items"]

    def jobs(self, jobset: str) -> dict[str, dict[str, Any]]:
        items = self.list("batch", "jobs", f"jobset.sigs.k8s.io/jobset-name={jobset}")
        return {j["metadata"]["name"]: j for j in items}

    def pods(self, jobset: str) -> list[dict[str, Any]]:
        return self.list("", "pods", f"jobset.sigs.k8s.io/jobset-name={jobset}")

    def condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        js = self.jobset(name) or {}
        for cond in (js.get("status") or {}).get("conditions") or []:
            if cond["type"] == ctype and cond["status"] == "True":
                return cond
        return None

    def wait_condition(self, name: str, ctype: str, timeout: float = 20) -> dict[str, Any]:
        return wait_for(lambda: self.condition(name, ctype), timeout, f"JobSet {name} {ctype}")

    def events(self, name: str) -> list[dict[str, Any]]:
        items = self.sb.call(self.sb.store.list, "", "events", "default",
                             field_selector=f"involvedObject.name={name}")["items"]
        return [e for e in items if e["involvedObject"].get("kind") == "JobSet"]


def jobset(name: str, rjobs: list[dict[str, Any]], *, run_seconds: float = 0.5, exit_code: int = 0,
           **spec: Any) -> dict[str, Any]:
    """A JobSet whose pods run ``run_seconds`` in the sandbox and exit with ``exit_code`` (per
    replicated job: ``run_seconds``, ``exit_code``, and ``start_delay``, the seconds before its
    pods become Running and Ready)."""
    replicated = []
    for r in rjobs:
        pods = r.get("pods", 1)
        annotations = {"sandbox.gangq.io/run-seconds": str(r.get("run_seconds", run_seconds)),
                       "sandbox.gangq.io/exit-code": str(r.get("exit_code", exit_code))}
        if "start_delay" in r:
            annotations["sandbox.gangq.io/start-delay-seconds"] = str(r["start_delay"])
        pod_spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox",
                                                    "resources": {"requests": {"cpu": "100m"}}}],
                                    "terminationGracePeriodSeconds": 1, **r.get("pod", {})}
        entry: dict[str, Any] = {"name": r["name"], "replicas": r.get("replicas", 1), "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": r.get("backoffLimit", 0),
            "template": {"metadata": {"annotations": annotations}, "spec": pod_spec}}}}
        replicated.append(entry)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": replicated, **spec}}


@pytest.fixture
def jobset_cluster(cluster_factory: Callable[..., Sandbox | RealCluster], tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """A cluster (2 nodes labelled pool=a, 2 labelled pool=b) with the JobSet CRD and the
    controller running, on each control plane (under the install's RBAC on the real one)."""
    from kopf.testing import KopfRunner

    sb = cluster_factory(nodes="2x{cpu:64,memory:256Gi}[pool=a];2x{cpu:64,memory:256Gi}[pool=b]",
                         kubelet=KubeletConfig(max_grace_seconds=0.2))
    monkeypatch.setenv("KUBECONFIG", str(controller_kubeconfig(sb)))
    if not is_real(sb):
        sb.call(sb.store.create, "apiextensions.k8s.io", "customresourcedefinitions",
                yaml.safe_load(CRD_PATH.read_text()))
    op = tmp_path / "jobset_operator.py"
    op.write_text(OPERATOR)
    with KopfRunner(["run", "--standalone", "--all-namespaces", str(op)], timeout=60) as runner:
        time.sleep(1.0)  # kopf lists and starts watching
        yield Cluster(sb)
    assert runner.exception is None, runner.output
    assert "Traceback" not in runner.output, runner.output
