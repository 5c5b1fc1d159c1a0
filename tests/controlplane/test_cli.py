"""``gangq sandbox up --control-plane real``: starts the real control plane with the sandbox's
options, writes the admin and controller kubeconfigs, and SIGTERM stops every process it started
and removes its temporary files."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import yaml

from gangq.controlplane.build import KUBERNETES_VERSION
from gangq.controlplane.launcher import ControlPlane
from gangq.controlplane.processes import free_port
from tests.controlplane.kube import gangq_command, wait_for


def test_sandbox_up_real_serves_kubectl_and_stops_everything_on_sigterm(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "real.yaml"
    log = tmp_path / "up.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*gangq_command(), "sandbox", "up", "--control-plane", "real", "--port", "0",
             "--kubeconfig-out", str(kubeconfig), "--nodes", "2x{cpu:8,memory:32Gi}"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: proc.poll() is not None or "export KUBECONFIG" in log.read_text(), 120, "the control plane")
        assert proc.poll() is None, log.read_text()
        controller = tmp_path / "real-controller.yaml"
        assert yaml.safe_load(controller.read_text())["users"][0]["name"].startswith("system:serviceaccount:")
        kubectl = [str(control_plane.kubectl), f"--kubeconfig={kubeconfig}"]
        version = subprocess.run([*kubectl, "version", "-o", "yaml"], capture_output=True, text=True, check=True)
        assert yaml.safe_load(version.stdout)["serverVersion"]["gitVersion"] == KUBERNETES_VERSION
        nodes = subprocess.run([*kubectl, "get", "nodes", "-o", "name"], capture_output=True, text=True, check=True)
        assert nodes.stdout.split() == ["node/node-0", "node/node-1"]
        children = psutil.Process(proc.pid).children(recursive=True)
        names = {c.name() for c in children}
        assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} <= names, names
        workdirs = {arg.split("=", 1)[1] for c in children if c.name() == "etcd" for arg in c.cmdline()
                    if arg.startswith("--data-dir=")}
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        assert proc.returncode == 0, log.read_text()
        time.sleep(0.5)
        assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        assert workdirs and not any(os.path.exists(Path(d).parent) for d in workdirs)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sandbox_up_real_refuses_options_of_the_emulator_only() -> None:
    done = subprocess.run([*gangq_command(), "sandbox", "up", "--control-plane", "real", "--state-file", "x.json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--state-file: not with --control-plane real" in done.stdout + done.stderr


def test_gangq_run_sandbox_real_admits_the_example_gang_on_a_real_api_server(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """``gangq run --sandbox --control-plane real``: the real control plane, the install's CRDs and
    RBAC, the quick-start queues; the README's example JobSet is admitted whole and completes."""
    root = Path(__file__).resolve().parents[2]
    kubeconfig = tmp_path / "run.yaml"
    log = tmp_path / "run.log"
    visibility_port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*gangq_command(), "run", "--sandbox", "--control-plane", "real", "--sandbox-port", "0",
             "--kubeconfig-out", str(kubeconfig), "--metrics-port", "0", "--visibility-port", str(visibility_port)],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: proc.poll() is not None or "gangq on a real control plane" in log.read_text(), 180,
                 "gangq run to start")
        assert proc.poll() is None, log.read_text()
        kubectl = [str(control_plane.kubectl), f"--kubeconfig={kubeconfig}"]
        subprocess.run([*kubectl, "apply", "-f", str(root / "examples" / "jobsets" / "hello-gang.yaml")],
                       check=True, capture_output=True, text=True)

        def completed() -> bool:
            out = subprocess.run([*kubectl, "get", "jobsets", "-o", "yaml"], capture_output=True, text=True).stdout
            items = yaml.safe_load(out)["items"]
            return bool(items) and all(
                any(c["type"] == "Completed" and c["status"] == "True" for c in (js.get("status") or {}).get(
                    "conditions", [])) for js in items)

        wait_for(completed, 120, "the example JobSet to complete")
        # the pending-workloads API of the quick start, with the kubeconfig's token (TokenReview and
        # SubjectAccessReview by the real API server, made as the install's ServiceAccount)
        queue = subprocess.run([*gangq_command(), "queue", "cluster-queue", "--kubeconfig", str(kubeconfig),
                                "--url", f"https://127.0.0.1:{visibility_port}", "-o", "json"],
                               capture_output=True, text=True, timeout=60)
        assert queue.returncode == 0 and '"clusterQueue": "cluster-queue"' in queue.stdout, queue.stdout + queue.stderr
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        assert proc.returncode == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
