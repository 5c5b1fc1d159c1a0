"""The real kubectl (/usr/bin/kubectl) against each control plane: the sandbox must answer it as the
real API server does (``--validate=false`` where a test does not exercise validation)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC
from gangq.sandbox.runtime import Sandbox
from tests.clusters import Cluster, RealCluster

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Phase, type: string, jsonPath: .status.phase}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}, color: {type: string}}}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""

WIDGET = """
apiVersion: example.com/v1
kind: Widget
metadata: {{name: w1}}
spec: {{size: {size}, color: red, junk: 1}}
"""

CONFIGMAP = """
apiVersion: v1
kind: ConfigMap
metadata: {{name: cm1, labels: {{app: demo}}}}
data: {{x: "{x}"}}
"""

JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: done}
spec:
  parallelism: 2
  completions: 2
  template:
    metadata: {annotations: {sandbox.gangq.io/run-seconds: "0.5"}}
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox, resources: {requests: {cpu: "1"}}}]
"""


NODES = "2x{cpu:8,memory:16Gi}"


@pytest.fixture(scope="module", params=["emulated", "real"])
def sb(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    if request.param == "real":
        real: RealCluster = request.getfixturevalue("real_cluster")
        real.reset(NODES)
        yield real
        real.cp.replace_nodes(DEFAULT_NODE_SPEC)
        return
    with Sandbox(nodes=NODES) as s:
        yield s


def kubectl(sb: Cluster, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True, timeout=60, env=sb.env())
    if check and r.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({r.returncode}): {r.stdout}\n{r.stderr}")
    return r


def apply(sb: Cluster, text: str, tmp: Path, *extra: str) -> str:
    f = tmp / "obj.yaml"
    f.write_text(text)
    return kubectl(sb, "apply", "--validate=false", *extra, "-f", str(f)).stdout


def test_discovery_lists_builtins_and_crds_as_they_come_and_go(sb: Cluster, tmp_path: Path) -> None:
    out = kubectl(sb, "api-resources").stdout
    assert "pods" in out and "customresourcedefinitions" in out and "leases" in out
    apply(sb, CRD, tmp_path)
    out = kubectl(sb, "api-resources", "--api-group=example.com").stdout
    assert "widgets" in out and "wd" in out and "Widget" in out


def test_apply_custom_resource_create_then_update_and_printer_columns(sb: Cluster, tmp_path: Path) -> None:
    apply(sb, CRD, tmp_path)
    assert "widget.example.com/w1 created" in apply(sb, WIDGET.format(size=3), tmp_path)
    assert "configured" in apply(sb, WIDGET.format(size=5), tmp_path)
    obj = json.loads(kubectl(sb, "get", "wd", "w1", "-o", "json").stdout)
    assert obj["spec"] == {"size": 5, "color": "red"}  # "junk" pruned by the structural schema
    assert "kubectl.kubernetes.io/last-applied-configuration" in obj["metadata"]["annotations"]
    kubectl(sb, "patch", "wd", "w1", "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Ready"}}')
    lines = kubectl(sb, "get", "widgets").stdout.splitlines()
    assert lines[0].split() == ["NAME", "SIZE", "PHASE"]
    assert lines[1].split() == ["w1", "5", "Ready"]
    r = kubectl(sb, "patch", "wd", "w1", "-p", '{"spec":{"size":7}}', check=False)  # strategic: 415
    assert r.returncode != 0 and "application/strategic-merge-patch+json is not supported" in r.stderr
    assert 'widget.example.com "w1" deleted' in kubectl(sb, "delete", "widget", "w1").stdout
    r = kubectl(sb, "get", "widget", "w1", check=False)
    assert r.returncode != 0 and 'widgets.example.com "w1" not found' in r.stderr


def test_apply_builtin_create_update_and_server_side(sb: Cluster, tmp_path: Path) -> None:
    assert "configmap/cm1 created" in apply(sb, CONFIGMAP.format(x=1), tmp_path)
    assert "configmap/cm1 configured" in apply(sb, CONFIGMAP.format(x=2), tmp_path)
    assert kubectl(sb, "get", "cm", "cm1", "-o", "jsonpath={.data.x}").stdout == "2"
    assert "serverside-applied" in apply(sb, CONFIGMAP.format(x=3), tmp_path, "--server-side")
    assert kubectl(sb, "get", "cm", "-l", "app=demo", "-o", "jsonpath={.items[0].data.x}").stdout == "3"
    assert 'configmap "cm1" deleted' in kubectl(sb, "delete", "cm", "cm1").stdout
    assert "No resources found" in kubectl(sb, "get", "cm", "-l", "app=demo").stderr


def test_wait_for_job_complete_then_describe_shows_events(sb: Cluster, tmp_path: Path) -> None:
    apply(sb, JOB, tmp_path)
    out = kubectl(sb, "wait", "--for=condition=complete", "job/done", "--timeout=30s").stdout
    assert "job.batch/done condition met" in out
    lines = kubectl(sb, "get", "job", "done").stdout.splitlines()
    assert lines[0].split()[:3] == ["NAME", "STATUS", "COMPLETIONS"]
    assert lines[1].split()[:3] == ["done", "Complete", "2/2"]
    desc = kubectl(sb, "describe", "job", "done").stdout
    assert "Pods Statuses:    0 Active (0 Ready) / 2 Succeeded / 0 Failed" in desc
    events = desc[desc.index("Events:"):]
    assert "SuccessfulCreate" in events and "job-controller" in events
    pods = kubectl(sb, "get", "pods", "-l", "job-name=done").stdout.splitlines()
    assert len(pods) == 3 and all("Completed" in p for p in pods[1:])
    kubectl(sb, "delete", "job", "done")


def test_default_validation_is_server_side_and_strict_for_custom_resources(sb: Cluster, tmp_path: Path) -> None:
    f = tmp_path / "obj.yaml"
    f.write_text(CRD)
    kubectl(sb, "apply", "-f", str(f))  # no --validate=false: kubectl reads /openapi/v3, validates server-side
    f.write_text(WIDGET.format(size=1).replace("w1", "strict"))
    r = kubectl(sb, "apply", "-f", str(f), check=False)
    assert r.returncode != 0 and 'strict decoding error: unknown field "spec.junk"' in r.stderr
    f.write_text(WIDGET.format(size=1).replace("w1", "strict").replace(", junk: 1", ""))
    assert "widget.example.com/strict created" in kubectl(sb, "apply", "-f", str(f)).stdout
    f.write_text(CONFIGMAP.format(x=1).replace("cm1", "plain"))
    assert "configmap/plain created" in kubectl(sb, "apply", "-f", str(f)).stdout
    kubectl(sb, "delete", "-f", str(f))
