"""Kubeflow training jobs' names and state: PyTorchJob and TFJob (``kubeflow.org/v1``, the
training operator) and MPIJob (``kubeflow.org/v2beta1``, the MPI operator) — their replica-spec
fields, pod labels, suspension and finished conditions. The kinds themselves are
:mod:`gangq.integrations.kubeflow`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gangq.api.batchjob import terminal_condition

GROUP: Final = "kubeflow.org"
JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
"""The label the Kubeflow operators put on a job's pods: the job's name."""
REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
"""The label of a pod's replica type, in lower case (``master``, ``worker``, ``launcher``)."""
OPERATOR_NAME_LABEL: Final = "training.kubeflow.org/operator-name"
"""The label naming the operator that made a pod (``pytorchjob-controller`` …)."""
SUSPEND_PATH: Final = "/spec/runPolicy/suspend"


@dataclass(frozen=True, slots=True)
class KubeflowKind:
    """What tells one Kubeflow kind from another."""

    kind: str
    version: str
    plural: str
    replica_specs: str  # the spec field of the replica-type map
    operator_name: str  # the value of OPERATOR_NAME_LABEL on its pods

    def key(self, namespace: str, name: str) -> str:
        """The engine's key of the job's gang, apart from other kinds' of the same name."""
        return f"{namespace}/{self.plural}:{name}"


PYTORCHJOB: Final = KubeflowKind("PyTorchJob", "v1", "pytorchjobs", "pytorchReplicaSpecs", "pytorchjob-controller")
TFJOB: Final = KubeflowKind("TFJob", "v1", "tfjobs", "tfReplicaSpecs", "tfjob-controller")
MPIJOB: Final = KubeflowKind("MPIJob", "v2beta1", "mpijobs", "mpiReplicaSpecs", "mpi-operator")
KINDS: Final = (PYTORCHJOB, TFJOB, MPIJOB)

def replica_types(kind: KubeflowKind, job: Mapping[str, Any]) -> list[str]:
    """The job's replica types, in the order of its spec."""
    specs = (job.get("spec") or {}).get(kind.replica_specs)
    return [str(t) for t in specs] if isinstance(specs, Mapping) else []


def pod_set_name(replica_type: str) -> str:
    return replica_type.lower()


def suspended(job: Mapping[str, Any]) -> bool:
    run_policy = (job.get("spec") or {}).get("runPolicy")
    return isinstance(run_policy, Mapping) and bool(run_policy.get("suspend"))


def terminal(job: Mapping[str, Any]) -> str | None:
    """``Completed`` or ``Failed`` (the JobSet's words) once the job has finished, else None."""
    return terminal_condition(job, "Succeeded")


def started(job: Mapping[str, Any]) -> bool:
    """Have the job's pods started (its operator recorded a start time or an active replica)?"""
    status = job.get("status") or {}
    if status.get("startTime"):
        return True
    replicas = status.get("replicaStatuses")
    return isinstance(replicas, Mapping) and any(
        isinstance(s, Mapping) and (s.get("active") or s.get("succeeded") or s.get("failed"))
        for s in replicas.values())


__all__ = [
    "GROUP",
    "JOB_NAME_LABEL",
    "KINDS",
    "MPIJOB",
    "OPERATOR_NAME_LABEL",
    "PYTORCHJOB",
    "REPLICA_TYPE_LABEL",
    "SUSPEND_PATH",
    "TFJOB",
    "KubeflowKind",
    "pod_set_name",
    "replica_types",
    "started",
    "suspended",
    "terminal",
]
