"""Shutdown, end to end on both control planes: ``gangq run`` exits within 5 s of SIGTERM even when
the API server has become unreachable (a Deployment's rollout or a node drain waits for it, and a
controller that hangs in shutdown holds the Lease past its grace period)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from gangq.controlplane.faultproxy import FaultProxy
from tests.clusters import RealCluster, is_real
from tests.controlplane.kube import gangq_command
from tests.operator.helpers import (
    FAST_CONFIG,
    Cluster,
    FakeJobSetRunner,
    admitted,
    apply,
    cluster_queue,
    flavor,
    install,
    jobset,
    lease_namespace,
    local_queue,
    wait_for,
)


def test_sigterm_exits_within_5_s_when_the_api_server_is_unreachable(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 4}, admission_mode="QuotaOnly"), local_queue("q", "cq")])
    real = sb if isinstance(sb, RealCluster) else None
    proxy = FaultProxy(sb.url, real.cp.pki.ca_cert if real else None).start()
    kubeconfig = proxy.kubeconfig(tmp_path / "kubeconfig",
                                  real.cp.pki.identities["controller"].token if real else "sandbox")
    # A Lease that outlives the outage before the signal: this is about SIGTERM; a leader whose
    # Lease runs out first stops by itself, with an error (test_recovery_e2e.py).
    election = {**FAST_CONFIG["leaderElection"], "namespace": lease_namespace(sb), "leaseDurationSeconds": 15,
                "renewIntervalSeconds": 2}
    config = {**FAST_CONFIG, "leaderElection": election}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    log = tmp_path / "gangq.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*gangq_command(), "run", "--kubeconfig", str(kubeconfig), "--config",
                                 str(tmp_path / "config.yaml"), "--jobset-controller", "external"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        with FakeJobSetRunner(sb, pods=False):
            apply(sb, [jobset("working", "q", requests={"cpu": 2}, run_seconds=60)])
            wait_for(lambda: admitted(sb, "working") or proc.poll() is not None, 30, "the controller to admit")
            assert proc.poll() is None, log.read_text()[-3000:]
            proxy.stop()  # from here on every request is refused
            time.sleep(1.0)  # the controller notices: watches broken, writes failing and retrying
            assert proc.poll() is None, log.read_text()[-3000:]  # still running: the signal is what stops it
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            took = time.monotonic() - sent
        assert proc.returncode == 0, log.read_text()[-3000:]
        plane = "real" if is_real(sb) else "emulated"
        assert took <= 5.0, f"took {took:.1f} s to exit ({plane}):\n{log.read_text()[-3000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
        proxy.stop()
