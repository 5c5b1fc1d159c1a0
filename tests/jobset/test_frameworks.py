"""Framework wiring (annotation gangq.io/framework), checked on the Jobs the reconciler builds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gangq.jobset import constants as c

from .envresolve import resolve_env
from .world import World, make_jobset


def _pods(w: World) -> list[tuple[str, dict[str, str]]]:
    """Every pod the Jobs would run, with its resolved env (as the Job controller and kubelet would make it)."""
    out = []
    for name, job in sorted(w.jobs.items()):
        for index in range(job["spec"]["completions"]):
            tmpl = job["spec"]["template"]
            meta = tmpl["metadata"]
            pod = {"metadata": {"annotations": {**meta["annotations"], c.COMPLETION_INDEX_ANNOTATION: str(index)},
                                "labels": meta["labels"]}}
            env = resolve_env(pod, tmpl["spec"]["containers"][0])
            out.append((f"{name}-{index}", env))
    return out


def _world(framework: str, rjobs: list[dict[str, Any]], **annotations: str) -> World:
    js = make_jobset("tr", rjobs=rjobs)
    js["metadata"]["annotations"] = {c.FRAMEWORK_ANNOTATION: framework, **annotations}
    w = World(js)
    w.step()
    return w


@pytest.mark.parametrize("layout", ["one job many pods", "many jobs one pod", "master and workers"])
def test_pytorch_ranks(layout: str) -> None:
    rjobs = {"one job many pods": [{"name": "worker", "pods": 3}],
             "many jobs one pod": [{"name": "worker", "replicas": 3}],
             "master and workers": [{"name": "master"}, {"name": "worker", "replicas": 2}]}[layout]
    w = _world("pytorch", rjobs)
    pods = _pods(w)
    assert [env["RANK"] for _, env in pods] == ["0", "1", "2"]
    first = pods[0][0]
    for _, env in pods:
        assert env["MASTER_ADDR"] == f"{first}.tr" == env["PET_MASTER_ADDR"]
        assert env["MASTER_PORT"] == "29500" and env["WORLD_SIZE"] == "3" and env["PET_NNODES"] == "3"
        assert env["PET_NODE_RANK"] == env["RANK"]
    assert not [e for e in w.events if e[1] == c.FRAMEWORK_WARNING_REASON]


def test_pytorch_coordinator_port_and_user_env_win() -> None:
    js = make_jobset("tr", rjobs=[{"name": "a"}, {"name": "b", "replicas": 2}], coordinator={"replicatedJob": "b",
                                                                                            "jobIndex": 1})
    js["metadata"]["annotations"] = {c.FRAMEWORK_ANNOTATION: "pytorch", c.FRAMEWORK_PORT_ANNOTATION: "1234"}
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MASTER_PORT", "value": "7"}]
    w = World(js)
    w.step()
    pods = dict(_pods(w))
    assert pods["tr-b-0-0"]["MASTER_ADDR"] == "tr-b-1-0.tr" and pods["tr-b-0-0"]["MASTER_PORT"] == "1234"
    assert pods["tr-a-0-0"]["MASTER_PORT"] == "7"  # the container's own value is kept


def test_rank_that_kubernetes_cannot_express_is_reported() -> None:
    w = _world("pytorch", [{"name": "master"}, {"name": "worker", "pods": 2}])
    pods = dict(_pods(w))
    assert pods["tr-master-0-0"]["RANK"] == "0"
    assert "RANK" not in pods["tr-worker-0-1"]
    assert pods["tr-worker-0-1"]["GANGQ_RANK_OFFSET"] == "1" and pods["tr-worker-0-1"]["GANGQ_POD_INDEX"] == "1"
    warnings = [m for _, r, m in w.events if r == c.FRAMEWORK_WARNING_REASON]
    assert warnings and "RANK is not set in Job tr-worker-0" in warnings[0]


def test_tensorflow_config_per_task_type() -> None:
    w = _world("tensorflow", [{"name": "chief"}, {"name": "worker", "pods": 2}, {"name": "ps", "replicas": 2}])
    configs = {name: json.loads(env["TF_CONFIG"]) for name, env in _pods(w)}
    cluster = {"chief": ["tr-chief-0-0.tr:2222"], "worker": ["tr-worker-0-0.tr:2222", "tr-worker-0-1.tr:2222"],
               "ps": ["tr-ps-0-0.tr:2222", "tr-ps-1-0.tr:2222"]}
    assert all(cfg["cluster"] == cluster for cfg in configs.values())
    assert {n: (cfg["task"]["type"], cfg["task"]["index"]) for n, cfg in configs.items()} == {
        "tr-chief-0-0": ("chief", 0), "tr-worker-0-0": ("worker", 0), "tr-worker-0-1": ("worker", 1),
        "tr-ps-0-0": ("ps", 0), "tr-ps-1-0": ("ps", 1)}


def test_jax() -> None:
    w = _world("jax", [{"name": "worker", "replicas": 2, "pods": 1}, {"name": "extra", "pods": 1}])
    pods = _pods(w)
    assert [env["JAX_PROCESS_ID"] for _, env in pods] == ["2", "0", "1"]  # sorted by Job name: extra (rank 2) first
    assert all(env["JAX_COORDINATOR_ADDRESS"] == "tr-worker-0-0.tr:1234" for _, env in pods)
    assert all(env["JAX_NUM_PROCESSES"] == "3" for _, env in pods)


def test_mpi_hostfile_configmap_mounted_into_launcher() -> None:
    w = _world("mpi", [{"name": "launcher"}, {"name": "worker", "replicas": 2, "pods": 2}],
               **{c.MPI_SLOTS_ANNOTATION: "4"})
    cm = w.configmap
    assert cm is not None and cm["metadata"]["name"] == "tr-mpi-hostfile"
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "uid-tr"
    assert cm["data"]["hostfile"].splitlines() == [
        "tr-worker-0-0.tr slots=4", "tr-worker-0-1.tr slots=4", "tr-worker-1-0.tr slots=4", "tr-worker-1-1.tr slots=4"]
    launcher = w.jobs["tr-launcher-0"]["spec"]["template"]["spec"]
    assert launcher["volumes"] == [{"name": "gangq-mpi-hostfile", "configMap": {"name": "tr-mpi-hostfile"}}]
    assert launcher["containers"][0]["volumeMounts"] == [
        {"name": "gangq-mpi-hostfile", "mountPath": "/etc/mpi", "readOnly": True}]
    env = dict(_pods(w))["tr-launcher-0-0"]
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile" and env["GANGQ_MPI_WORLD_SIZE"] == "16"
    assert "volumes" not in w.jobs["tr-worker-0"]["spec"]["template"]["spec"]
    assert w.step().create_configmap is None  # created once


def test_no_framework_wiring_while_queued_and_none_without_annotation() -> None:
    js = make_jobset("tr", rjobs=[{"name": "launcher"}, {"name": "worker"}], suspend=True)
    js["metadata"]["annotations"] = {c.FRAMEWORK_ANNOTATION: "mpi"}
    w = World(js)
    w.step()
    assert w.configmap is None and not w.jobs
    w = World(make_jobset("tr"))
    w.step()
    assert "env" not in w.jobs["tr-worker-0"]["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(("annotations", "message"), [
    ({c.FRAMEWORK_ANNOTATION: "horovod"}, "unknown framework 'horovod'"),
    ({c.FRAMEWORK_ANNOTATION: "mpi"}, "the MPI launcher replicatedJob 'launcher' does not exist"),
    ({c.FRAMEWORK_ANNOTATION: "pytorch", c.FRAMEWORK_PORT_ANNOTATION: "http"}, "must be a port number"),
])
def test_invalid_framework_annotations(annotations: dict[str, str], message: str) -> None:
    js = make_jobset("tr")
    js["metadata"]["annotations"] = annotations
    w = World(js)
    w.step()
    cond = w.condition("Failed")
    assert cond is not None and message in cond["message"] and not w.jobs
