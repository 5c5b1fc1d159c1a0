"""The kinds the corpus exercises: where each is served, a small valid object of it, and the
shorthands the topic modules build their requests with.

Cluster-scoped objects are named after the case's namespace (``{ns}-name``) and labelled
``case: {ns}``, so that cases never share them and a case lists only its own. Pods name a scheduler
that does not exist, and Jobs are suspended and managed by another controller (``spec.managedBy``):
neither server's controllers act on them while a case runs (the real control plane has a scheduler,
a Job controller and kwok; the sandbox runs none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.conformance.model import APPLY, JSON_PATCH, MERGE, STRATEGIC, Req

NS = "/api/v1/namespaces/{ns}"
GANGQ = "/apis/gangq.io/v1alpha1"
CASE_LABEL = {"case": "{ns}"}
CONTAINER = {"name": "main", "image": "busybox"}


def meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, **extra}


def cluster_meta(name: str, **metadata: Any) -> dict[str, Any]:
    """Metadata of a cluster-scoped object: labelled with its case, whatever else it carries."""
    return {"name": name, **metadata, "labels": {**CASE_LABEL, **metadata.get("labels", {})}}


def configmap(name: str, data: dict[str, str] | None = None, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(name, **metadata),
        "data": data if data is not None else {"a": "1"},
    }


def secret(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(name, **metadata),
        "type": "Opaque",
        "data": {"token": "c2VjcmV0"},
    }


def pod_spec(**extra: Any) -> dict[str, Any]:
    return {
        "schedulerName": "conformance",
        "automountServiceAccountToken": False,
        "containers": [dict(CONTAINER)],
        **extra,
    }


def pod(name: str, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta(name, **metadata), "spec": pod_spec()}


def service(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(name, **metadata),
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }


def job(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(name, **metadata),
        "spec": {
            "suspend": True,
            "managedBy": "example.com/conformance",
            "template": {"spec": {**pod_spec(), "restartPolicy": "Never"}},
        },
    }


def lease(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta(name, **metadata),
        "spec": {"holderIdentity": "conformance", "leaseDurationSeconds": 15},
    }


def event(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": meta(name, **metadata),
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "subject", "namespace": "{ns}"},
        "reason": "Tested",
        "message": "a conformance event",
        "type": "Normal",
        "source": {"component": "conformance"},
    }


def namespace(name: str, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": cluster_meta(name, **metadata)}


def node(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": cluster_meta(name, **metadata),
        "spec": {"unschedulable": True, "taints": [{"key": "conformance", "effect": "NoSchedule"}]},
    }


def cluster_queue(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gangq.io/v1alpha1",
        "kind": "ClusterQueue",
        "metadata": cluster_meta(name, **metadata),
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "8"}]}],
                }
            ],
        },
    }


def local_queue(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gangq.io/v1alpha1",
        "kind": "LocalQueue",
        "metadata": meta(name, **metadata),
        "spec": {"clusterQueue": "cq"},
    }


def workload(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gangq.io/v1alpha1",
        "kind": "Workload",
        "metadata": meta(name, **metadata),
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 2, "requests": {"cpu": "1"}}]},
    }


def jobset(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta(name, **metadata),
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "workers",
                    "template": {"spec": {"template": {"spec": {**pod_spec(), "restartPolicy": "Never"}}}},
                }
            ],
        },
    }


def resource_flavor(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gangq.io/v1alpha1",
        "kind": "ResourceFlavor",
        "metadata": cluster_meta(name, **metadata),
        "spec": {"nodeLabels": {"gpu": "a100"}},
    }


def cohort(name: str, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "gangq.io/v1alpha1", "kind": "Cohort", "metadata": cluster_meta(name, **metadata), "spec": {}}


def priority_class(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gangq.io/v1alpha1",
        "kind": "WorkloadPriorityClass",
        "metadata": cluster_meta(name, **metadata),
        "value": 100,
        "description": "high",
    }


@dataclass(frozen=True)
class Kind:
    """A kind as the corpus uses it: ``collection`` is its collection's path, ``make(name)`` a
    valid object, ``cluster`` whether it is cluster-scoped (its names are then ``{ns}-name``),
    ``custom`` whether a CRD serves it."""

    name: str
    collection: str
    make: Callable[..., dict[str, Any]]
    cluster: bool = False
    custom: bool = False

    def named(self, name: str) -> str:
        return f"{{ns}}-{name}" if self.cluster else name

    def path(self, name: str | None = None, sub: str | None = None) -> str:
        out = self.collection if name is None else f"{self.collection}/{self.named(name)}"
        return f"{out}/{sub}" if sub else out

    def body(self, name: str, **metadata: Any) -> dict[str, Any]:
        return self.make(self.named(name), **metadata)

    def listing(self, query: str = "") -> str:
        """The collection's path; a cluster-scoped one selects the case's own objects."""
        parts = [q for q in (query, "labelSelector=case%3D{ns}" if self.cluster else "") if q]
        return self.collection + ("?" + "&".join(parts) if parts else "")


KINDS: tuple[Kind, ...] = (
    Kind("configmap", f"{NS}/configmaps", configmap),
    Kind("secret", f"{NS}/secrets", secret),
    Kind("pod", f"{NS}/pods", pod),
    Kind("service", f"{NS}/services", service),
    Kind("job", "/apis/batch/v1/namespaces/{ns}/jobs", job),
    Kind("lease", "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", lease),
    Kind("event", f"{NS}/events", event),
    Kind("namespace", "/api/v1/namespaces", namespace, cluster=True),
    Kind("node", "/api/v1/nodes", node, cluster=True),
    Kind("clusterqueue", f"{GANGQ}/clusterqueues", cluster_queue, cluster=True, custom=True),
    Kind("localqueue", f"{GANGQ}/namespaces/{{ns}}/localqueues", local_queue, custom=True),
    Kind("workload", f"{GANGQ}/namespaces/{{ns}}/workloads", workload, custom=True),
    Kind("jobset", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", jobset, custom=True),
    Kind("resourceflavor", f"{GANGQ}/resourceflavors", resource_flavor, cluster=True, custom=True),
    Kind("cohort", f"{GANGQ}/cohorts", cohort, cluster=True, custom=True),
    Kind("workloadpriorityclass", f"{GANGQ}/workloadpriorityclasses", priority_class, cluster=True, custom=True),
)
BY_NAME = {k.name: k for k in KINDS}


def create(kind: Kind, name: str, save: dict[str, str] | None = None, **metadata: Any) -> Req:
    return Req("POST", kind.collection, kind.body(name, **metadata), save=save or {})


def get(
    kind: Kind, name: str, sub: str | None = None, save: dict[str, str] | None = None, accept: str | None = None
) -> Req:
    return Req("GET", kind.path(name, sub), save=save or {}, accept=accept)


def delete(kind: Kind, name: str, options: dict[str, Any] | None = None, query: str = "") -> Req:
    path = kind.path(name) + (f"?{query}" if query else "")
    return Req("DELETE", path, options)


def patch(kind: Kind, name: str, body: Any, content_type: str = MERGE, sub: str | None = None, query: str = "") -> Req:
    path = kind.path(name, sub) + (f"?{query}" if query else "")
    return Req("PATCH", path, body, content_type=content_type)


def apply(kind: Kind, name: str, body: Any, manager: str, *, force: bool = False, sub: str | None = None) -> Req:
    query = f"fieldManager={manager}" + ("&force=true" if force else "")
    return patch(kind, name, body, APPLY, sub, query)


__all__ = [
    "APPLY",
    "BY_NAME",
    "JSON_PATCH",
    "KINDS",
    "MERGE",
    "STRATEGIC",
    "Kind",
    "apply",
    "create",
    "delete",
    "get",
    "patch",
]
