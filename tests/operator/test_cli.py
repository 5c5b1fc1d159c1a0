"""``gangq run``: argument errors, and the newcomer's path with the embedded sandbox through kubectl."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gangq.operator.cli import run
from gangq.sandbox.runtime import free_port
from tests.operator.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]

app = typer.Typer()
app.command("run")(run)


@app.callback()
def _cb() -> None:
    """test app"""


def test_run_rejects_a_bad_config_file_naming_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("podsReady:\n  timeoutSeconds: -5\n")
    result = CliRunner().invoke(app, ["run", "--config", str(cfg), "--sandbox"])
    assert result.exit_code == 1
    assert "podsReady.timeoutSeconds" in result.output


def test_run_rejects_unknown_config_keys_and_missing_kubeconfig(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("podsReady:\n  timeout: 5\n")
    result = CliRunner().invoke(app, ["run", "--config", str(cfg)])
    assert result.exit_code == 1 and "podsReady.timeout" in result.output
    result = CliRunner().invoke(app, ["run", "--kubeconfig", str(tmp_path / "nope")])
    assert result.exit_code == 1 and "no such file" in result.output
    result = CliRunner().invoke(app, ["run", "--jobset-controller", "sometimes"])
    assert result.exit_code == 2


def test_run_refuses_a_kubeconfig_variable_that_names_no_file(tmp_path: Path) -> None:
    """$KUBECONFIG set to a missing file is an error, not "no cluster": starting the embedded
    sandbox would leave the admin believing the controller runs against their cluster."""
    missing = tmp_path / "gone.yaml"
    result = CliRunner().invoke(app, ["run"], env={"KUBECONFIG": str(missing), "HOME": str(tmp_path)})
    assert result.exit_code == 1
    assert f"$KUBECONFIG={missing}: no such file" in result.output and "--sandbox" in result.output
    assert "sandbox serving" not in result.output


def _listening_on(pid: int, port: int) -> set[str]:
    import psutil

    return {c.laddr.ip for c in psutil.Process(pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def test_run_sandbox_quickstart_admits_an_example_jobset(tmp_path: Path) -> None:
    port, metrics_port, visibility_port = free_port(), free_port(), free_port()
    kubeconfig = tmp_path / "kubeconfig"
    env = {**os.environ, "HOME": str(tmp_path), "KUBECACHEDIR": str(tmp_path / "cache")}
    env.pop("KUBECONFIG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gangq.operator", "run", "--sandbox", "--sandbox-port", str(port),
         "--kubeconfig-out", str(kubeconfig), "--jobset-controller", "external", "--metrics-port", str(metrics_port),
         "--visibility-port", str(visibility_port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )
    kenv = {**env, "KUBECONFIG": str(kubeconfig)}

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", *args], env=kenv, capture_output=True, text=True, timeout=30)

    try:
        wait_for(lambda: kubeconfig.exists() and kubectl("get", "lq", "user-queue").returncode == 0, 30,
                 "the sandbox with the quick-start queues")
        result = kubectl("apply", "-f", str(ROOT / "examples/jobsets/hello-gang.yaml"))
        assert result.returncode == 0, result.stderr

        def jobset() -> dict[str, object]:
            out = kubectl("get", "jobset", "hello-gang", "-o", "json")
            return json.loads(out.stdout) if out.returncode == 0 else {}

        wait_for(lambda: (jobset().get("spec") or {}).get("suspend") is False, 20, "admission")  # type: ignore[union-attr]
        wl = wait_for(lambda: "Admitted" in (out := kubectl("get", "wl")).stdout and out.stdout, 20, "kubectl get wl")
        assert "user-queue" in wl and "cluster-queue" in wl
        cq = wait_for(lambda: (out := kubectl("get", "cq", "cluster-queue")).stdout.split("\n")[1].split()[-4:-1]
                      == ["0", "1", "8/32"] and out.stdout, 20, "ClusterQueue columns: pending, admitted, GPU")
        assert "BestEffortFIFO" in cq
        # Issue 7's contract: gangq run serves its metrics on --metrics-port.
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
        assert 'gangq_admitted_workloads_total{cluster_queue="cluster-queue"} 1.0' in metrics
        # ... on loopback only
        assert _listening_on(proc.pid, metrics_port) == {"127.0.0.1"}
        # the pending-workloads API: HTTPS on loopback, for the sandbox kubeconfig's token only
        # (the sandbox's TokenReview), its CA beside the kubeconfig, as `gangq queue` finds it
        assert _listening_on(proc.pid, visibility_port) == {"127.0.0.1"}
        url = f"https://127.0.0.1:{visibility_port}"
        from tests.observability.test_http import cli

        page = CliRunner().invoke(cli(), ["queue", "-n", "default", "user-queue", "--url", url, "-o", "json"],
                                  env={"KUBECONFIG": str(kubeconfig)})
        assert page.exit_code == 0 and '"localQueue": "user-queue"' in page.output, page.output
        trust = ssl.create_default_context(cafile=str(tmp_path / "kubeconfig-visibility" / "ca.crt"))
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.urlopen(f"{url}/apis/visibility.gangq.io/v1alpha1/clusterqueues/cluster-queue/"
                                   "pendingworkloads", timeout=10, context=trust)
        assert anonymous.value.code == 401
        # The admission webhook is on by default: a Kueue-style Job without `suspend` is stored
        # suspended (no pod of it starts outside its quota), then admitted and run.
        created = kubectl("apply", "-f", str(ROOT / "examples/jobs/kueue-style-job.yaml"), "-o", "json")
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout)["spec"]["suspend"] is True
        wait_for(lambda: '"Complete"' in kubectl("get", "job", "sample-job", "-o", "json").stdout, 60,
                 "the Kueue-style Job to be admitted and complete")
        # Two PodGroups of minMember 3, pods of 8 GPUs: each pod gated at creation, a group's gates
        # removed together, so never more than one group's 3 pods ungated and unfinished at once
        # (24 GPUs each beside the JobSet's 8 of the queue's 32); all six pods succeed.
        created = kubectl("apply", "-f", str(ROOT / "examples/pods/podgroups.yaml"))
        assert created.returncode == 0, created.stderr
        most, deadline = 0, time.monotonic() + 120
        while True:
            listed = kubectl("get", "pods", "-l", "scheduling.x-k8s.io/pod-group", "-o", "json")
            assert listed.returncode == 0, listed.stderr
            pods = json.loads(listed.stdout)["items"]
            ungated = [p["metadata"]["name"] for p in pods if not p["spec"].get("schedulingGates")
                       and p["status"].get("phase") not in ("Succeeded", "Failed")]
            most = max(most, len(ungated))
            assert most <= 3, ungated
            assert not [p for p in pods if p["status"].get("phase") == "Failed"]
            if len(pods) == 6 and all(p["status"].get("phase") == "Succeeded" for p in pods):
                break
            assert time.monotonic() < deadline, [(p["metadata"]["name"], p["status"].get("phase")) for p in pods]
            time.sleep(0.2)
        assert most == 3
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            output, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    assert proc.returncode == 0, output
    assert f"export KUBECONFIG={kubeconfig}" in output
