"""``gangq queue`` with no queue named: every ClusterQueue and LocalQueue the user can see, read
from the Kubernetes API (on each control plane), with the counts gangq writes to their status."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import typer
from kubernetes import client, config
from typer.testing import CliRunner

from gangq.observability.cli import queue
from tests.operator.helpers import Cluster, install

GROUP, VERSION = "gangq.io", "v1alpha1"


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(queue)

    @app.callback()
    def main() -> None:
        """test app"""

    return app


def _cq(name: str, cohort: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "8"}]}]}]}
    if cohort:
        spec["cohort"] = cohort
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def test_no_queue_named_lists_every_queue_with_its_counts(cluster_factory: Callable[..., Cluster]) -> None:
    sandbox = cluster_factory(cluster=False)
    install(sandbox)
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(sandbox.kubeconfig)))
    api.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", _cq("gpu-a", cohort="research"))
    api.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", _cq("cpu-b"))
    api.patch_cluster_custom_object_status(GROUP, VERSION, "clusterqueues", "gpu-a", {"status": {
        "pendingWorkloads": 7, "admittedWorkloads": 3, "gpu": "12/16",
        "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    lq = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
          "metadata": {"name": "team", "namespace": "default"}, "spec": {"clusterQueue": "gpu-a"}}
    api.create_namespaced_custom_object(GROUP, VERSION, "default", "localqueues", lq)
    api.patch_namespaced_custom_object_status(GROUP, VERSION, "default", "localqueues", "team", {"status": {
        "pendingWorkloads": 5, "admittedWorkloads": 2}})

    result = CliRunner().invoke(cli(), ["queue", "--kubeconfig", str(sandbox.kubeconfig)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    row = next(line for line in lines if "gpu-a" in line and "research" in line)
    assert "7" in row and "3" in row and "12/16" in row and "True" in row
    assert any("cpu-b" in line for line in lines)
    team = next(line for line in lines if "team" in line)
    assert "default" in team and "gpu-a" in team and "5" in team and "2" in team

    result = CliRunner().invoke(cli(), ["queue", "--kubeconfig", str(sandbox.kubeconfig), "-o", "json"])
    doc = json.loads(result.output)
    assert sorted(c["metadata"]["name"] for c in doc["clusterQueues"]) == ["cpu-b", "gpu-a"]
    assert [q["metadata"]["name"] for q in doc["localQueues"]] == ["team"]


def test_no_cluster_configured_is_a_clear_error(tmp_path: Any) -> None:
    missing = tmp_path / "nope.yaml"
    result = CliRunner().invoke(cli(), ["queue", "--kubeconfig", str(missing)], env={"KUBECONFIG": str(missing)})
    assert result.exit_code == 1
    assert "no cluster configured" in result.output
