"""Framework wiring end to end: the env and hostfile in the pods the sandbox's Job controller creates."""

from __future__ import annotations

import json
from typing import Any

from gangq.jobset import constants as c

from .conftest import Cluster, jobset, wait_for
from .envresolve import resolve_env


def _with(framework: str, obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["annotations"] = {c.FRAMEWORK_ANNOTATION: framework}
    return obj


def _envs(cl: Cluster, name: str, count: int) -> dict[str, dict[str, str]]:
    pods = wait_for(lambda: len(cl.pods(name)) >= count and cl.pods(name), 15, f"the pods of {name}")
    return {f"{p['spec']['hostname']}.{p['spec']['subdomain']}": resolve_env(p, p["spec"]["containers"][0])
            for p in pods}


def test_framework_env_in_created_pods(jobset_cluster: Cluster) -> None:
    cl = jobset_cluster
    cl.create_jobset(_with("pytorch", jobset("pt", [{"name": "worker", "pods": 3}], run_seconds=30)))
    cl.create_jobset(_with("tensorflow", jobset("tf", [{"name": "chief"}, {"name": "worker", "replicas": 2}],
                                                run_seconds=30)))
    cl.create_jobset(_with("jax", jobset("jx", [{"name": "host", "replicas": 2}], run_seconds=30)))
    cl.create_jobset(_with("mpi", jobset("mp", [{"name": "launcher"}, {"name": "worker", "pods": 2}],
                                         run_seconds=30)))

    pt = _envs(cl, "pt", 3)
    assert sorted(pt) == ["pt-worker-0-0.pt", "pt-worker-0-1.pt", "pt-worker-0-2.pt"]
    for host, env in pt.items():
        assert env["MASTER_ADDR"] == "pt-worker-0-0.pt" and env["MASTER_PORT"] == "29500"
        assert env["WORLD_SIZE"] == "3" and env["RANK"] == host.split(".")[0][-1] == env["PET_NODE_RANK"]

    tf = _envs(cl, "tf", 3)
    for host, env in tf.items():
        cfg = json.loads(env["TF_CONFIG"])
        assert cfg["cluster"] == {"chief": ["tf-chief-0-0.tf:2222"],
                                  "worker": ["tf-worker-0-0.tf:2222", "tf-worker-1-0.tf:2222"]}
        assert f"{cfg['task']['type']}-{cfg['task']['index']}" == {
            "tf-chief-0-0.tf": "chief-0", "tf-worker-0-0.tf": "worker-0", "tf-worker-1-0.tf": "worker-1"}[host]

    jx = _envs(cl, "jx", 2)
    assert {h: e["JAX_PROCESS_ID"] for h, e in jx.items()} == {"jx-host-0-0.jx": "0", "jx-host-1-0.jx": "1"}
    assert all(e["JAX_COORDINATOR_ADDRESS"] == "jx-host-0-0.jx:1234" and e["JAX_NUM_PROCESSES"] == "2"
               for e in jx.values())

    cm = wait_for(lambda: cl.list("", "configmaps", f"{c.JOBSET_NAME_KEY}=mp"), 10, "the hostfile ConfigMap")[0]
    assert cm["data"]["hostfile"] == "mp-worker-0-0.mp slots=1\nmp-worker-0-1.mp slots=1\n"
    launcher = next(p for p in wait_for(lambda: len(cl.pods("mp")) >= 3 and cl.pods("mp"), 15, "mpi pods")
                    if p["metadata"]["labels"][c.REPLICATED_JOB_NAME_KEY] == "launcher")
    volume = next(v for v in launcher["spec"]["volumes"] if v["name"] == "gangq-mpi-hostfile")
    assert volume["configMap"]["name"] == "mp-mpi-hostfile"  # a real API server adds defaultMode
    mounts = launcher["spec"]["containers"][0]["volumeMounts"]
    assert any(m["mountPath"] == "/etc/mpi" for m in mounts)
    assert resolve_env(launcher, launcher["spec"]["containers"][0])["OMPI_MCA_orte_default_hostfile"] == \
        "/etc/mpi/hostfile"
