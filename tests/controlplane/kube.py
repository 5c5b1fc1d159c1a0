"""kubectl and REST helpers for the real-control-plane tests."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from gangq.controlplane.launcher import ControlPlane
from gangq.controlplane.pki import CONTROLLER_NAMESPACE
from gangq.controlplane.processes import stop_process
from tests.operator import helpers

RUN_CONFIG: dict[str, Any] = {
    "metricsPort": 0,
    "podsReady": {"enable": False},
    "status": {"workloadDelaySeconds": 0.1, "pendingDelaySeconds": 0.2, "pendingMinIntervalSeconds": 0.5,
               "queueIntervalSeconds": 0.5},
    "leaderElection": {"enable": True, "namespace": CONTROLLER_NAMESPACE, "leaseName": "gangq-controller",
                       "leaseDurationSeconds": 4, "renewIntervalSeconds": 1},
}
"""A ``gangq run`` configuration for tests: fast status writes, no pods-ready wait, a short Lease."""

def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll every 0.2 s: many conditions here run kubectl or ask a real API server."""
    return helpers.wait_for(cond, timeout, what, every=0.2)


def gangq_command() -> list[str]:
    """The ``gangq`` command of this environment."""
    exe = shutil.which("gangq", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-c", "from gangq.cli import app; app()"]


@contextlib.contextmanager
def gangq_run(kubeconfig: Path, config: dict[str, Any], workdir: Path, ready: Callable[[], Any],
              what: str, *extra: str) -> Iterator[Path]:
    """``gangq run --kubeconfig KUBECONFIG --config CONFIG`` in a process of its own until the
    block ends (then SIGTERM); waits for ``ready()`` first. Yields its log file."""
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    log = workdir / "gangq.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*gangq_command(), "run", "--kubeconfig", str(kubeconfig), "--config",
                                 str(workdir / "config.yaml"), *extra], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: proc.poll() is not None or ready(), 60, what)
        assert proc.poll() is None, log.read_text()[-3000:]
        yield log
    finally:
        stop_process(proc)


def kubectl(cp: ControlPlane, *args: str, who: str = "admin", input: Any = None, check: bool = True,
            timeout: float = 60) -> str:
    """Run the pinned kubectl as ``who``; ``input`` (documents or text) goes to stdin."""
    text = input if input is None or isinstance(input, str) else yaml.safe_dump_all(list(input))
    done = subprocess.run(
        [str(cp.kubectl), f"--kubeconfig={cp.kubeconfig(who)}", *args],
        input=text, capture_output=True, text=True, env={**os.environ, "KUBECONFIG": ""}, timeout=timeout,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout if done.returncode == 0 else done.stderr


def get(cp: ControlPlane, path: str, who: str = "admin") -> Any:
    try:
        return cp.request("GET", path, who=who)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def namespace(cp: ControlPlane, name: str) -> str:
    kubectl(cp, "create", "namespace", name)
    wait_for(lambda: get(cp, f"/api/v1/namespaces/{name}/serviceaccounts/default"), 30, f"{name}'s default SA")
    return name


def job(name: str, *, pods: int = 2, annotations: dict[str, str] | None = None, backoff_limit: int = 0,
        requests: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox",
                                    "resources": {"requests": requests or {"cpu": "1"}}}],
                },
            },
        },
    }


def json_out(text: str) -> Any:
    return json.loads(text)
