"""The real control plane itself: what gangq's real-control-plane tier relies on."""

from __future__ import annotations

import datetime
import json
import ssl
import urllib.request
from pathlib import Path

import pytest
import yaml

from gangq.controlplane.build import KUBERNETES_VERSION
from gangq.controlplane.launcher import ControlPlane
from tests.controlplane.kube import get, job, json_out, kubectl, namespace, wait_for


def _time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_kubectl_shows_the_pinned_server_version(control_plane: ControlPlane) -> None:
    version = json_out(kubectl(control_plane, "version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == KUBERNETES_VERSION


def test_nodes_of_the_spec_are_ready_with_their_capacity(control_plane: ControlPlane) -> None:
    nodes = get(control_plane, "/api/v1/nodes")["items"]
    assert len(nodes) == 4
    for node in nodes:
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"


def test_job_pods_are_bound_by_the_scheduler_and_follow_the_sandbox_annotations(control_plane: ControlPlane) -> None:
    ns = namespace(control_plane, "annotations")
    annotations = {"sandbox.gangq.io/start-delay-seconds": "1", "sandbox.gangq.io/run-seconds": "2"}
    kubectl(control_plane, "apply", "-n", ns, "-f", "-", input=[job("ok", annotations=annotations)])
    done = wait_for(lambda: (j := get(control_plane, f"/apis/batch/v1/namespaces/{ns}/jobs/ok"))
                    and j.get("status", {}).get("succeeded") == 2 and j, 60, "the Job to succeed")
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in done["status"]["conditions"])
    pods = get(control_plane, f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name%3Dok")["items"]
    node_names = {n["metadata"]["name"] for n in get(control_plane, "/api/v1/nodes")["items"]}
    for pod in pods:
        assert pod["spec"]["nodeName"] in node_names  # bound by kube-scheduler
        assert pod["status"]["phase"] == "Succeeded"
        state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert state["exitCode"] == 0
        scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        # ran for run-seconds after it started, start-delay after it was bound
        assert (_time(state["finishedAt"]) - _time(pod["status"]["startTime"])).total_seconds() >= 1.5
        assert (_time(pod["status"]["startTime"]) - _time(scheduled["lastTransitionTime"])).total_seconds() >= 0.5


def test_a_non_zero_exit_code_fails_the_pod_and_the_job(control_plane: ControlPlane) -> None:
    ns = namespace(control_plane, "exitcode")
    annotations = {"sandbox.gangq.io/run-seconds": "0.5", "sandbox.gangq.io/exit-code": "3"}
    kubectl(control_plane, "apply", "-n", ns, "-f", "-", input=[job("bad", pods=1, annotations=annotations)])
    failed = wait_for(lambda: (j := get(control_plane, f"/apis/batch/v1/namespaces/{ns}/jobs/bad"))
                      and any(c["type"] == "Failed" and c["status"] == "True"
                              for c in j.get("status", {}).get("conditions", [])) and j, 60, "the Job to fail")
    assert failed["status"]["failed"] == 1
    (pod,) = get(control_plane, f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name%3Dbad")["items"]
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


def test_a_pod_that_runs_forever_stays_running_until_deleted(control_plane: ControlPlane) -> None:
    ns = namespace(control_plane, "forever")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "annotations": {"sandbox.gangq.io/run-seconds": "-1"}},
           "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    kubectl(control_plane, "apply", "-n", ns, "-f", "-", input=[pod])
    wait_for(lambda: (p := get(control_plane, f"/api/v1/namespaces/{ns}/pods/p"))
             and p["status"].get("phase") == "Running", 30, "the pod to run")
    import time

    time.sleep(2.5)  # past the default run time of 1 s
    assert get(control_plane, f"/api/v1/namespaces/{ns}/pods/p")["status"]["phase"] == "Running"
    kubectl(control_plane, "delete", "-n", ns, "pod", "p", "--wait=false")
    wait_for(lambda: get(control_plane, f"/api/v1/namespaces/{ns}/pods/p") is None, 30, "the pod to be removed")


def test_deleting_a_job_deletes_its_pods_through_the_garbage_collector(control_plane: ControlPlane) -> None:
    ns = namespace(control_plane, "cascade")
    annotations = {"sandbox.gangq.io/run-seconds": "-1"}
    kubectl(control_plane, "apply", "-n", ns, "-f", "-", input=[job("long", annotations=annotations)])
    pods = f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name%3Dlong"
    wait_for(lambda: len(get(control_plane, pods)["items"]) == 2, 30, "the Job's pods")
    kubectl(control_plane, "delete", "-n", ns, "job", "long", "--cascade=background", "--wait=false")
    wait_for(lambda: not get(control_plane, pods)["items"], 60, "the garbage collector to delete the pods")


def test_the_admins_certificate_kubeconfig_authenticates_as_the_admin(control_plane: ControlPlane,
                                                                      tmp_path: Path) -> None:
    """envtest (Kueue's runner) copies only the certificates of a kubeconfig: the embedded one
    has no token, and the API server takes its client certificate as the admin's."""
    path = control_plane.pki.kubeconfig(tmp_path / "embedded", control_plane.url, "admin", embed=True)
    user = yaml.safe_load(path.read_text())["users"][0]["user"]
    assert set(user) == {"client-certificate-data", "client-key-data"}
    ctx = ssl.create_default_context(cafile=str(control_plane.pki.ca_cert))
    ctx.load_cert_chain(control_plane.pki.admin_cert, control_plane.pki.admin_key)
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    req = urllib.request.Request(control_plane.url + "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                 data=json.dumps(review).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
        info = json.loads(resp.read())["status"]["userInfo"]
    assert info["username"] == "gangq-admin" and "system:masters" in info["groups"]


def test_a_port_taken_before_the_api_server_binds_it_is_chosen_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between choosing a free port and kube-apiserver binding it, another process may take it;
    the control plane chooses new ports and starts instead of failing."""
    import socket

    from gangq.controlplane import launcher
    from tests.conftest import require_real_control_plane

    require_real_control_plane()
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    taken_port = taken.getsockname()[1]
    monkeypatch.setattr(launcher, "free_port", lambda: taken_port)  # the constructor's choice
    cp = ControlPlane(workdir=tmp_path / "cp", nodes="1x{cpu:4}")
    monkeypatch.undo()
    try:
        assert cp.port == taken_port
        cp.start()
        assert cp.port != taken_port
        assert cp.server_version() == KUBERNETES_VERSION
        assert not (tmp_path / "cp" / "kube-apiserver.log").read_text().count("address already in use")
    finally:
        cp.stop()
        taken.close()


def test_free_ports_are_chosen_below_the_ephemeral_range() -> None:
    """Client connections take their source ports from the ephemeral range; a listener's port
    chosen there can be taken before the listener binds it."""
    from gangq.controlplane.processes import ephemeral_range, free_port

    low, _ = ephemeral_range()
    ports = {free_port() for _ in range(20)}
    assert all(10000 <= port < low for port in ports)
    assert len(ports) > 1
