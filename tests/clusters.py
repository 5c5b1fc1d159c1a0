"""One end-to-end suite, two control planes: the sandbox (emulated) and a real one.

The end-to-end tests drive a cluster through the surface of ``gangq.sandbox.runtime.Sandbox``:
``.store`` (create / get / list / patch / replace / delete of the sandbox's ``Store``),
``.call(fn, ...)``, ``.kubeconfig``, ``.url`` and ``.env()``. ``RealCluster`` offers the same
surface over a real kube-apiserver, so a test written once runs on both (``cluster_factory`` in
``tests/conftest.py`` is parametrized ``emulated`` / ``real``). Each also says which kubeconfig the
controller runs under: on the real control plane that is the install's ServiceAccount, so a
permission missing from ``deploy/base`` fails the test that needs it.

One real control plane serves the whole session; ``RealCluster.reset`` returns it to a clean
state before each test (no gangq objects, no test namespaces, the test's nodes), which costs
seconds where starting a control plane costs tens of them.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gangq.controlplane.launcher import ControlPlane
from gangq.sandbox.errors import ApiError
from gangq.sandbox.runtime import Sandbox
from tests.conformance.client import Endpoint

T = TypeVar("T")

CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
# The namespaces a real control plane starts with, and gangq's own: never removed by a reset.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease", "gangq-system"})
# What a test leaves behind in a namespace, deleted by a reset (Jobs before their pods).
NAMESPACED = (
    ("jobset.x-k8s.io", "jobsets"), ("gangq.io", "workloads"), ("gangq.io", "localqueues"),
    ("batch", "jobs"), ("", "pods"), ("", "services"), ("", "events"), ("coordination.k8s.io", "leases"),
)
CLUSTER_SCOPED = (
    ("gangq.io", "clusterqueues"), ("gangq.io", "resourceflavors"), ("gangq.io", "cohorts"),
    ("gangq.io", "workloadpriorityclasses"), ("gangq.io", "topologies"), ("gangq.io", "admissionchecks"),
)
# The API server's own Service: not a test's, never deleted.
KEEP = frozenset({("services", "default", "kubernetes")})
LEASE_NAMESPACE = "gangq-system"  # where the install lets the controller hold its Lease


def controller_kubeconfig(cluster: Cluster) -> Path:
    """The kubeconfig the controller runs under: the install's ServiceAccount on a real control
    plane; the sandbox has no authorization."""
    return cluster.controller_kubeconfig if isinstance(cluster, RealCluster) else cluster.kubeconfig


def is_real(cluster: Cluster) -> bool:
    return isinstance(cluster, RealCluster)


class RemoteStore:
    """The sandbox ``Store``'s read and write methods as requests to an API server; failures raise
    the sandbox's ``ApiError`` with the server's code, reason and message."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._versions: dict[str, str] = {"": "v1"}

    # -- paths ---------------------------------------------------------------------------------
    def _version(self, group: str) -> str:
        if group not in self._versions:
            answer = self.endpoint.request("GET", f"/apis/{group}")
            if answer.status != 200:
                raise ApiError(404, "NotFound", f"the server has no API group {group!r}")
            self._versions[group] = answer.body["preferredVersion"]["version"]
        return self._versions[group]

    def path(self, group: str, plural: str, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None, **query: Any) -> str:
        base = "/api/v1" if group == "" else f"/apis/{group}/{self._version(group)}"
        parts = [base] + ([f"namespaces/{namespace}"] if namespace else []) + [plural]
        parts += [name] if name else []
        parts += [subresource] if subresource else []
        params = {k: v for k, v in query.items() if v is not None}
        return "/".join(parts) + (f"?{urllib.parse.urlencode(params)}" if params else "")

    def _call(self, method: str, path: str, body: Any = None, content_type: str | None = None) -> Any:
        # 429 (a CRD's storage still initialising, a priority-and-fairness rejection) is retried
        # for a while, as client-go does.
        deadline = time.monotonic() + 15.0
        answer = self.endpoint.request(method, path, body, content_type=content_type)
        while answer.status == 429 and time.monotonic() < deadline:
            time.sleep(0.2)
            answer = self.endpoint.request(method, path, body, content_type=content_type)
        if answer.status >= 400:
            status = answer.body if isinstance(answer.body, dict) else {}
            raise ApiError(answer.status, str(status.get("reason", "")), str(status.get("message", answer.body)),
                           details=status.get("details"))
        return answer.body

    # -- the Store's surface -------------------------------------------------------------------
    def create(self, group: str, plural: str, obj: dict[str, Any], *, namespace: str | None = None) -> Any:
        return self._call("POST", self.path(group, plural, namespace), obj)

    def get(self, group: str, plural: str, namespace: str | None, name: str) -> Any:
        return self._call("GET", self.path(group, plural, namespace, name))

    def list(self, group: str, plural: str, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, limit: int | None = None,
             continue_token: str | None = None) -> Any:
        return self._call("GET", self.path(group, plural, namespace, labelSelector=label_selector,
                                           fieldSelector=field_selector, limit=limit, **{"continue": continue_token}))

    def patch(self, group: str, plural: str, namespace: str | None, name: str, patch: Any, patch_type: str, *,
              subresource: str | None = None) -> Any:
        content_type = CONTENT_TYPES.get(patch_type, patch_type)
        manager = "e2e-tests" if content_type == CONTENT_TYPES["apply"] else None
        body = json.dumps(patch) if not isinstance(patch, (str, bytes)) else patch
        return self._call("PATCH", self.path(group, plural, namespace, name, subresource, fieldManager=manager),
                          body, content_type)

    def replace(self, group: str, plural: str, namespace: str | None, name: str, obj: dict[str, Any], *,
                subresource: str | None = None) -> Any:
        return self._call("PUT", self.path(group, plural, namespace, name, subresource), obj)

    def delete(self, group: str, plural: str, namespace: str | None, name: str, *,
               propagation_policy: str | None = None, grace_period_seconds: int | None = None,
               preconditions: dict[str, Any] | None = None) -> Any:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy is not None:
            body["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if preconditions is not None:
            body["preconditions"] = preconditions
        return self._call("DELETE", self.path(group, plural, namespace, name), body)


class RealCluster:
    """A real control plane behind the sandbox's surface (see the module docstring)."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.store = RemoteStore(Endpoint("real", cp.url, token=cp.pki.identities["admin"].token,
                                          ca_file=str(cp.pki.ca_cert)))
        self.kubeconfig = cp.kubeconfig("admin")
        self.controller_kubeconfig = cp.kubeconfig("controller")
        self.url = cp.url

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` here: a remote store needs no event loop of its own."""
        return fn(*args, **kwargs)

    def env(self) -> dict[str, str]:
        import os

        return {**os.environ, "KUBECONFIG": str(self.kubeconfig),
                "KUBECACHEDIR": str(self.kubeconfig.parent / "kubectl-cache")}

    # -- between tests -------------------------------------------------------------------------
    def reset(self, nodes: str | None, timeout: float = 60.0) -> None:
        """Remove what earlier tests left (gangq's objects, their namespaces' contents, the test
        namespaces themselves) and make the nodes those of ``nodes`` (a node SPEC; None: none)."""
        store = self.store
        namespaces = [n["metadata"]["name"] for n in store.list("", "namespaces")["items"]]
        for ns in namespaces:
            if ns in ("kube-system", "kube-public", "kube-node-lease"):
                continue
            for group, plural in NAMESPACED:
                if ns == LEASE_NAMESPACE and plural != "leases":
                    continue
                self._delete_all(group, plural, ns)
        for group, plural in CLUSTER_SCOPED:
            self._delete_all(group, plural, None)
        with contextlib.suppress(ApiError):  # what a controller learned from earlier tests' gangs
            store.delete("", "configmaps", LEASE_NAMESPACE, "gangq-runtimes")
        for ns in namespaces:
            if ns not in SYSTEM_NAMESPACES:
                with contextlib.suppress(ApiError):
                    store.delete("", "namespaces", None, ns)
        store.patch("", "namespaces", None, "default", [{"op": "replace", "path": "/metadata/labels",
                                                         "value": {"kubernetes.io/metadata.name": "default"}}],
                    "json")
        self.cp.replace_nodes(nodes)
        deadline = time.monotonic() + timeout
        while True:
            left = self._leftovers()
            if not left:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the real control plane did not come clean within {timeout:.0f} s: {left}")
            time.sleep(0.2)

    def _delete_all(self, group: str, plural: str, namespace: str | None) -> None:
        for item in self.store.list(group, plural, namespace)["items"]:
            meta = item["metadata"]
            if (plural, namespace, meta["name"]) in KEEP:
                continue
            if meta.get("finalizers"):  # the controller that would remove them is stopped
                with contextlib.suppress(ApiError):
                    self.store.patch(group, plural, namespace, meta["name"],
                                     [{"op": "remove", "path": "/metadata/finalizers"}], "json")
            with contextlib.suppress(ApiError):
                self.store.delete(group, plural, namespace, meta["name"], propagation_policy="Background",
                                  grace_period_seconds=0 if plural == "pods" else None)

    def _leftovers(self) -> list[str]:
        left = [f"namespace {n['metadata']['name']}" for n in self.store.list("", "namespaces")["items"]
                if n["metadata"]["name"] not in SYSTEM_NAMESPACES]
        for group, plural in NAMESPACED:
            if plural in ("events", "leases"):
                continue
            items = self.store.list(group, plural)["items"]
            left += [f"{plural} {i['metadata']['namespace']}/{i['metadata']['name']}" for i in items
                     if (plural, i["metadata"]["namespace"], i["metadata"]["name"]) not in KEEP]
        for group, plural in CLUSTER_SCOPED:
            left += [f"{plural} {i['metadata']['name']}" for i in self.store.list(group, plural)["items"]]
        return left


Cluster = Sandbox | RealCluster


class ControllerFaults:
    """Faults on the controller's requests, the same rules on either control plane: the sandbox's
    own fault injection, or a fault proxy (``gangq.controlplane.faultproxy``) in front of the real
    kube-apiserver. ``kubeconfig`` is what the controller must run under for the faults to reach it."""

    def __init__(self, cluster: Cluster, workdir: Path) -> None:
        self.cluster = cluster
        self.proxy = None
        if isinstance(cluster, RealCluster):
            from gangq.controlplane.faultproxy import FaultProxy

            cp = cluster.cp
            self.proxy = FaultProxy(cp.url, cp.pki.ca_cert).start()
            self.kubeconfig = self.proxy.kubeconfig(workdir / "faulty-controller.kubeconfig",
                                                    cp.pki.identities["controller"].token)
        else:
            self.kubeconfig = cluster.kubeconfig

    def add_rule(self, verb: str, resource: str, **kwargs: Any) -> None:
        if self.proxy is not None:
            self.proxy.call(self.proxy.faults.add_rule, verb=verb, resource=resource, **kwargs)
        else:
            assert isinstance(self.cluster, Sandbox)
            self.cluster.call(self.cluster.faults.add_rule, verb=verb, resource=resource, **kwargs)

    def clear(self) -> None:
        if self.proxy is not None:
            self.proxy.call(self.proxy.faults.clear)
        else:
            assert isinstance(self.cluster, Sandbox)
            self.cluster.call(self.cluster.faults.clear)

    def requests(self, verb: str, resource: str, code: int) -> int:
        """How many such requests the controller sent (answered ``code``)."""
        faults = self.proxy.faults if self.proxy is not None else self.cluster.faults  # type: ignore[union-attr]
        counts = (self.proxy.call if self.proxy is not None else self.cluster.call)(faults.requests)
        return sum(r["count"] for r in counts["requests"]
                   if (r["verb"], r["resource"], r["code"]) == (verb, resource, code))

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
