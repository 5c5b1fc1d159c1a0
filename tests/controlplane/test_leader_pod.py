"""The leader's pod label follows the Lease, on the real control plane: two ``gangq run`` replicas as
the install's ServiceAccount, each told its pod by the Downward API's variables; only the leader's
pod carries ``gangq.io/leader=true`` (the pending-workloads API's Service selects it, so
kube-apiserver never sends a request to a standby, which could only answer 503). A stale label left
on a pod by an earlier leader is removed when a replica starts there; when the leader stops, its
label goes and the new leader's pod gets it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gangq.controlplane.launcher import ControlPlane
from gangq.controlplane.pki import CONTROLLER_NAMESPACE
from gangq.controlplane.processes import stop_process
from gangq.operator.leaderpod import LEADER_LABEL, POD_NAME_ENV, POD_NAMESPACE_ENV
from tests.controlplane.install import install
from tests.controlplane.kube import RUN_CONFIG, gangq_command, get, kubectl, wait_for

ROOT = Path(__file__).resolve().parents[2]
PODS = ("gangq-controller-a", "gangq-controller-b")
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{CONTROLLER_NAMESPACE}/leases/gangq-controller"


def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": CONTROLLER_NAMESPACE,
                         "labels": {"app.kubernetes.io/name": "gangq", "app.kubernetes.io/component": "controller",
                                    **labels},
                         "annotations": {"sandbox.gangq.io/run-seconds": "inf"}},
            "spec": {"containers": [{"name": "controller", "image": "ghcr.io/gangq/gangq:0.1.0"}]}}


def leader_labels(cp: ControlPlane) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PODS:
        found = get(cp, f"/api/v1/namespaces/{CONTROLLER_NAMESPACE}/pods/{name}") or {}
        out[name] = ((found.get("metadata") or {}).get("labels") or {}).get(LEADER_LABEL)
    return out


@contextlib.contextmanager
def replica(cp: ControlPlane, workdir: Path, pod_name: str) -> Iterator[subprocess.Popen[bytes]]:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(RUN_CONFIG))
    env = {**os.environ, POD_NAME_ENV: pod_name, POD_NAMESPACE_ENV: CONTROLLER_NAMESPACE, "KUBECONFIG": ""}
    with (workdir / "gangq.log").open("wb") as out:
        proc = subprocess.Popen([*gangq_command(), "run", "--kubeconfig", str(cp.kubeconfig("controller")),
                                 "--config", str(workdir / "config.yaml")], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
    try:
        yield proc
    finally:
        stop_process(proc)


def test_only_the_leaders_pod_is_labelled_and_the_label_follows_the_lease(
        control_plane: ControlPlane, tmp_path: Path) -> None:
    cp = control_plane
    install(cp)
    manifests = [d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "visibility.yaml").read_text())
                 if d and d["kind"] in ("Role", "RoleBinding") and d["metadata"]["name"] == "gangq-leader-pod"]
    assert len(manifests) == 2
    kubectl(cp, "apply", "--server-side", "-f", "-", input=manifests)
    # b carries the label an earlier leader in its pod left behind
    kubectl(cp, "apply", "--server-side", "-f", "-", input=[pod(PODS[0], {}), pod(PODS[1], {LEADER_LABEL: "true"})])
    lease_duration = RUN_CONFIG["leaderElection"]["leaseDurationSeconds"]
    try:
        with replica(cp, tmp_path / "a", PODS[0]) as first:
            wait_for(lambda: leader_labels(cp)[PODS[0]] == "true", 60, "the first replica to lead and label its pod")
            assert leader_labels(cp)[PODS[1]] == "true"  # no replica runs there yet
            with replica(cp, tmp_path / "b", PODS[1]) as second:
                wait_for(lambda: leader_labels(cp) == {PODS[0]: "true", PODS[1]: None}, 30,
                         "the standby to remove the stale label from its pod")
                first.send_signal(signal.SIGTERM)
                assert first.wait(10) == 0
                wait_for(lambda: leader_labels(cp) == {PODS[0]: None, PODS[1]: "true"}, lease_duration + 15,
                         "the label to move with the Lease")
                holder = (get(cp, LEASE) or {}).get("spec", {}).get("holderIdentity", "")
                assert str(second.pid) in holder, holder
            wait_for(lambda: leader_labels(cp)[PODS[1]] is None, 10, "the label gone with its leader")
    finally:
        kubectl(cp, "delete", "--ignore-not-found", "--wait=false", "-n", CONTROLLER_NAMESPACE, "pod", *PODS,
                check=False)
        kubectl(cp, "delete", "--ignore-not-found", "-f", "-", input=manifests, check=False)
