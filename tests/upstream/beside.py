"""gangq beside an upstream operator on the session's real control plane (``tests/upstream``):
the operator's binary built from its pin, a namespace with a LocalQueue of a 16-cpu ClusterQueue
on the kwok nodes of one pool, the operator's CRDs, and gangq's controller (``gangq run``) running
while the test does."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from gangq.controlplane import upstream
from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC
from gangq.controlplane.pki import CONTROLLER_NAMESPACE
from tests.clusters import RealCluster
from tests.conftest import _unavailable, require_real_control_plane
from tests.controlplane.kube import RUN_CONFIG, gangq_run, get, wait_for

from .operators import install_crds

QUEUE = {"gangq.io/queue-name": "user-queue"}
"""The label that queues a test's workloads in its namespace's LocalQueue."""


def operator_binary(name: str, binary: str) -> Path:
    """The upstream operator ``name``'s ``binary`` (:data:`gangq.controlplane.upstream.OPERATOR_TOOLS`),
    built from its pin when missing (Go is needed the first time only)."""
    from gangq.controlplane.build import BuildError, go_binary

    require_real_control_plane()
    if go_binary() is None and not (upstream.bin_dir(name) / binary).is_file():
        _unavailable(f"Go is not installed and {name}'s {binary} is not built")
    try:
        return upstream.build_operator(name) / binary
    except BuildError as err:
        _unavailable(f"{name}'s {binary} did not build: {err}")
        raise


DEFAULT_QUOTA = {"cpu": "16", "memory": "64Gi"}


def create_queues(store: Any, namespace: str, flavor: str, pool: str,
                  quota: dict[str, str] | None = None) -> None:
    """ResourceFlavor ``flavor`` (nodes labelled ``pool=<pool>``), ClusterQueue ``cq`` of ``quota``
    (16 cpu and 64Gi unless given) on it, and LocalQueue ``user-queue`` in ``namespace``."""
    quota = quota or DEFAULT_QUOTA
    store.create("gangq.io", "resourceflavors", {
        "apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": flavor},
        "spec": {"nodeLabels": {"pool": pool}}})
    store.create("gangq.io", "clusterqueues", {
        "apiVersion": "gangq.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": "cq"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": list(quota), "flavors": [
            {"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in quota.items()]}]}]}})
    store.create("gangq.io", "localqueues", {"apiVersion": "gangq.io/v1alpha1", "kind": "LocalQueue",
                                             "metadata": {"name": "user-queue"}, "spec": {"clusterQueue": "cq"}},
                 namespace=namespace)


@contextlib.contextmanager
def gangq_beside(real_cluster: RealCluster, tmp_path: Path, *, namespace: str, nodes: str, pool: str,
                 crds: Sequence[dict[str, Any]], operators: Sequence[contextlib.AbstractContextManager[Any]],
                 cleanup: Callable[[Any], None], quota: dict[str, str] | None = None) -> Iterator[RealCluster]:
    """The session's control plane with ``nodes``, ``crds`` served, ``namespace`` and its queues
    (flavor ``<pool>-nodes``, ``quota`` as :func:`create_queues` takes it), the ``operators``
    started and gangq's controller holding its lease; on exit ``cleanup(store)`` deletes what the
    test left while the operators still run, and the nodes are put back."""
    real_cluster.reset(nodes)
    cp = real_cluster.cp
    install_crds(cp, crds)
    store = real_cluster.store
    store.create("", "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(lambda: get(cp, f"/api/v1/namespaces/{namespace}/serviceaccounts/default"), 30, "the default SA")
    create_queues(store, namespace, f"{pool}-nodes", pool, quota)
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{CONTROLLER_NAMESPACE}/leases/gangq-controller"
    with contextlib.ExitStack() as stack:
        for operator in operators:
            stack.enter_context(operator)
        stack.enter_context(gangq_run(real_cluster.controller_kubeconfig, RUN_CONFIG, tmp_path,
                                      lambda: get(cp, lease), "the controller to take its lease"))
        try:
            yield real_cluster
        finally:
            cleanup(store)
    real_cluster.reset(DEFAULT_NODE_SPEC)


Pods = dict[str, list[dict[str, Any]]]
"""A namespace's pods by gang."""


def pod_live(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class GangWatch:
    """Polls a namespace's pods by gang. Every :meth:`poll` checks that no pod is bound before its
    gang's admission (:meth:`admitted`, read before and after the pods) and then the test's own
    rules (:meth:`check`); :attr:`bound` is when a pod of each gang was first seen bound."""

    def __init__(self, store: Any, namespace: str) -> None:
        self.store = store
        self.namespace = namespace
        self.ever_admitted: set[str] = set()
        self.bound: dict[str, float] = {}

    def admitted(self) -> set[str]:
        """The gangs admitted and not finished."""
        raise NotImplementedError

    def gang_of(self, pod: dict[str, Any]) -> str | None:
        """The gang a pod belongs to (None: a pod of no gang, which fails the poll)."""
        raise NotImplementedError

    def check(self, before: set[str], alive: Pods, every: Pods) -> None:
        """The test's own rules at every poll: ``before``, the gangs admitted before the pods were
        read; ``alive``, their unfinished pods; ``every``, all their pods."""

    def poll(self) -> Pods:
        """The pods of each gang (finished ones too), after checking the rules."""
        before = self.admitted()
        self.ever_admitted |= before
        pods = self.store.list("", "pods", self.namespace)["items"]
        self.ever_admitted |= self.admitted()
        alive: Pods = {}
        every: Pods = {}
        for pod in pods:
            gang = self.gang_of(pod)
            assert gang is not None, f"a pod of no gang: {pod['metadata']['name']} {pod['metadata'].get('labels')}"
            every.setdefault(gang, []).append(pod)
            if pod_live(pod):
                alive.setdefault(gang, []).append(pod)
            if pod["spec"].get("nodeName"):
                assert gang in self.ever_admitted, f"pod {pod['metadata']['name']} of {gang} bound before admission"
                self.bound.setdefault(gang, time.monotonic())
        self.check(before, alive, every)
        return every

    def wait(self, cond: Callable[[Pods], Any], timeout: float, what: str) -> Pods:
        """Poll until ``cond(pods of each gang)`` holds; the pods of each gang then."""
        last: Pods = {}

        def check() -> Any:
            last.clear()
            last.update(self.poll())
            return cond(last)

        wait_for(check, timeout, what)
        return last
