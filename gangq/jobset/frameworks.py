"""Opt-in wiring for distributed-training frameworks (JobSet annotation ``gangq.io/framework``).

Every address comes from the JobSet's own DNS names, ``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>``
(the pod hostname the Job controller sets, ``<job>-<completionIndex>``, under the headless Service). Pods are ranked
globally in replicatedJob order, then job index, then completion index. A rank is a literal when the Job runs one pod,
and comes from the pod's completion index through the downward API (``$(GANGQ_POD_INDEX)``) when the Job is the first
of the ranking (offset 0). Kubernetes cannot add numbers in an env var, so for a Job with several pods and a non-zero
offset the per-pod variables are left out and :func:`framework_env` reports it (the reconciler posts a Warning Event);
``GANGQ_RANK_OFFSET`` + ``GANGQ_POD_INDEX`` are always there for a launcher script to add up.
"""

from __future__ import annotations

import json
from typing import Any

from gangq.api.jobset import JobSet

from . import constants as c
from .validation import pods_per_job

DEFAULT_PORTS = {"pytorch": 29500, "tensorflow": 2222, "jax": 1234, "mpi": 0}
MPI_HOSTFILE_DIR = "/etc/mpi"
MPI_HOSTFILE_KEY = "hostfile"
MPI_VOLUME = "gangq-mpi-hostfile"
POD_INDEX_ENV = "GANGQ_POD_INDEX"
RANK_OFFSET_ENV = "GANGQ_RANK_OFFSET"
_INDEX_REF = f"$({POD_INDEX_ENV})"


def framework_of(js: JobSet) -> str | None:
    return (js.metadata.annotations or {}).get(c.FRAMEWORK_ANNOTATION)


def subdomain_of(js: JobSet) -> str:
    network = js.spec.network
    return (network.subdomain if network is not None else None) or (js.metadata.name or "")


def pod_host(js: JobSet, rjob: str, job_index: int, pod_index: int, subdomain: str | None = None) -> str:
    return f"{js.metadata.name}-{rjob}-{job_index}-{pod_index}.{subdomain or subdomain_of(js)}"


def mpi_configmap_name(js: JobSet) -> str:
    return f"{js.metadata.name}-mpi-hostfile"


class Layout:
    """Pods per Job and pod offsets of a JobSet's replicatedJobs, in spec order."""

    __slots__ = ("names", "offsets", "pods", "replicas", "total")

    def __init__(self, js: JobSet) -> None:
        self.names: list[str] = []
        self.replicas: list[int] = []
        self.pods: list[int] = []
        self.offsets: list[int] = []
        total = 0
        for rjob in js.replicated_jobs():
            replicas = 1 if rjob.replicas is None else rjob.replicas
            ppj = pods_per_job(rjob.template.spec)
            self.names.append(rjob.name)
            self.replicas.append(replicas)
            self.pods.append(ppj)
            self.offsets.append(total)
            total += replicas * ppj
        self.total = total

    def index(self, name: str) -> int:
        return self.names.index(name)


def _per_pod(offset: int, pods: int) -> str | None:
    """``offset + completion index`` as an env value, or None when Kubernetes cannot express it."""
    if pods == 1:
        return str(offset)
    if offset == 0:
        return _INDEX_REF
    return None


def _port(js: JobSet, framework: str) -> int:
    raw = (js.metadata.annotations or {}).get(c.FRAMEWORK_PORT_ANNOTATION)
    return int(raw) if raw and raw.isdigit() else DEFAULT_PORTS[framework]


def _coordinator_host(js: JobSet, subdomain: str) -> str:
    coord = js.spec.coordinator
    if coord is not None:
        return pod_host(js, coord.replicated_job, coord.job_index or 0, coord.pod_index or 0, subdomain)
    first = js.replicated_jobs()[0].name
    return pod_host(js, first, 0, 0, subdomain)


def framework_env(js: JobSet, rjob_index: int, job_index: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The env vars to inject into every container of Job ``job_index`` of replicatedJob ``rjob_index``, and
    warnings (variables that cannot be set per pod for this layout)."""
    framework = framework_of(js)
    if framework is None:
        return [], []
    layout = Layout(js)
    subdomain = subdomain_of(js)
    ppj = layout.pods[rjob_index]
    rjob_name = layout.names[rjob_index]
    offset = layout.offsets[rjob_index] + job_index * ppj
    env: list[dict[str, Any]] = [
        {"name": POD_INDEX_ENV,
         "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{c.COMPLETION_INDEX_ANNOTATION}']"}}},
        {"name": RANK_OFFSET_ENV, "value": str(offset)},
    ]
    warnings: list[str] = []
    rank = _per_pod(offset, ppj)
    port = _port(js, framework)
    coordinator = _coordinator_host(js, subdomain)

    def per_pod(name: str, value: str | None) -> None:
        if value is None:
            warnings.append(f"{name} is not set in Job {js.metadata.name}-{rjob_name}-{job_index}: its {ppj} pods "
                            f"start at rank {offset}; use {RANK_OFFSET_ENV} + {POD_INDEX_ENV}")
        else:
            env.append({"name": name, "value": value})

    if framework == "pytorch":
        env += [{"name": "MASTER_ADDR", "value": coordinator}, {"name": "MASTER_PORT", "value": str(port)},
                {"name": "WORLD_SIZE", "value": str(layout.total)}]
        per_pod("RANK", rank)
        env += [{"name": "PET_MASTER_ADDR", "value": coordinator}, {"name": "PET_MASTER_PORT", "value": str(port)},
                {"name": "PET_NNODES", "value": str(layout.total)},
                {"name": "PET_NPROC_PER_NODE",
                 "value": (js.metadata.annotations or {}).get(c.NPROC_PER_NODE_ANNOTATION, "1")}]
        per_pod("PET_NODE_RANK", rank)
    elif framework == "jax":
        env += [{"name": "JAX_COORDINATOR_ADDRESS", "value": f"{coordinator}:{port}"},
                {"name": "JAX_COORDINATOR_PORT", "value": str(port)},
                {"name": "JAX_NUM_PROCESSES", "value": str(layout.total)}]
        per_pod("JAX_PROCESS_ID", rank)
    elif framework == "tensorflow":
        cluster = {
            name: [pod_host(js, name, j, p, subdomain) + f":{port}"
                   for j in range(layout.replicas[i]) for p in range(layout.pods[i])]
            for i, name in enumerate(layout.names)
        }
        task_index = _per_pod(job_index * ppj, ppj)
        if task_index is not None:
            text = json.dumps({"cluster": cluster, "task": {"type": rjob_name, "index": "__INDEX__"}},
                              separators=(",", ":"))
            task_index_json = task_index if task_index == _INDEX_REF else str(int(task_index))
            env.append({"name": "TF_CONFIG", "value": text.replace('"__INDEX__"', task_index_json)})
        else:
            per_pod("TF_CONFIG", None)
    elif framework == "mpi":
        launcher = (js.metadata.annotations or {}).get(c.MPI_LAUNCHER_ANNOTATION, "launcher")
        env += [{"name": "GANGQ_MPI_WORLD_SIZE", "value": str(_mpi_world(js, layout, launcher))}]
        if rjob_name == launcher:
            path = f"{MPI_HOSTFILE_DIR}/{MPI_HOSTFILE_KEY}"
            env += [{"name": "OMPI_MCA_orte_default_hostfile", "value": path},
                    {"name": "OMPI_MCA_rmaps_base_mapping_policy", "value": "slot"},
                    {"name": "I_MPI_HYDRA_HOST_FILE", "value": path}]
    return env, warnings


def _mpi_slots(js: JobSet) -> int:
    raw = (js.metadata.annotations or {}).get(c.MPI_SLOTS_ANNOTATION, "1")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def _mpi_world(js: JobSet, layout: Layout, launcher: str) -> int:
    workers = sum(layout.replicas[i] * layout.pods[i] for i, n in enumerate(layout.names) if n != launcher)
    return workers * _mpi_slots(js)


def mpi_hostfile(js: JobSet) -> str:
    """One line per worker pod: ``<host> slots=<n>`` (every replicatedJob but the launcher)."""
    layout = Layout(js)
    subdomain = subdomain_of(js)
    launcher = (js.metadata.annotations or {}).get(c.MPI_LAUNCHER_ANNOTATION, "launcher")
    slots = _mpi_slots(js)
    lines = [f"{pod_host(js, name, j, p, subdomain)} slots={slots}"
             for i, name in enumerate(layout.names) if name != launcher
             for j in range(layout.replicas[i]) for p in range(layout.pods[i])]
    return "\n".join(lines) + "\n"


def mpi_configmap(js: JobSet, owner_ref: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": mpi_configmap_name(js), "namespace": js.metadata.namespace,
                     "labels": {c.JOBSET_NAME_KEY: js.metadata.name or ""},
                     "ownerReferences": [owner_ref]},
        "data": {MPI_HOSTFILE_KEY: mpi_hostfile(js)},
    }


def inject(job: dict[str, Any], js: JobSet, rjob_index: int, job_index: int) -> list[str]:
    """Add the framework's env vars to every container of a Job being built (a name the container already sets is
    left alone), and for MPI mount the hostfile into the launcher. Returns the warnings."""
    framework = framework_of(js)
    if framework is None:
        return []
    env, warnings = framework_env(js, rjob_index, job_index)
    pod_spec = job["spec"]["template"].setdefault("spec", {})
    is_launcher = framework == "mpi" and js.replicated_jobs()[rjob_index].name == (
        (js.metadata.annotations or {}).get(c.MPI_LAUNCHER_ANNOTATION, "launcher"))
    for container in pod_spec.get("containers") or []:
        existing = container.get("env") or []
        taken = {e.get("name") for e in existing}
        container["env"] = [e for e in env if e["name"] not in taken] + existing
        if is_launcher:
            mounts = container.setdefault("volumeMounts", [])
            if not any(m.get("name") == MPI_VOLUME for m in mounts):
                mounts.append({"name": MPI_VOLUME, "mountPath": MPI_HOSTFILE_DIR, "readOnly": True})
    if is_launcher:
        volumes = pod_spec.setdefault("volumes", [])
        if not any(v.get("name") == MPI_VOLUME for v in volumes):
            volumes.append({"name": MPI_VOLUME, "configMap": {"name": mpi_configmap_name(js)}})
    return warnings
