"""Karpenter with its kwok cloud provider beside the real control plane: a real node autoscaler
whose NodePools provision and consolidate kwok nodes.

The binary is Karpenter's ``kwok`` main package (``sigs.k8s.io/karpenter/kwok``), pinned in
``hack/upstream/karpenter`` and built by ``python -m gangq.controlplane.upstream karpenter`` into
``~/.cache/gangq/upstream/karpenter-<key>/bin/karpenter-kwok``. It is Karpenter's core controllers
(provisioning, disruption and consolidation, NodeClaim lifecycle, NodePool limits and readiness)
with a cloud provider whose instances are Node objects annotated ``kwok.x-k8s.io/node: fake``: the
control plane's kwok (which manages nodes with that annotation) makes them Ready, and
kube-scheduler binds pods to them.

What it needs, read from its source:

- the kubeconfig in ``KUBECONFIG`` (its flags are its own flag set; there is no ``--kubeconfig``);
- the CRDs NodePool, NodeClaim, NodeOverlay, CapacityBuffer (``kwok/charts/crds``: the NodePool's
  there also reserves the ``karpenter.kwok.sh`` label domain) and KWOKNodeClass
  (``kwok/apis/crds``), taken from the pinned module's source in the Go module cache;
- a KWOKNodeClass whose status says ``Ready``: nothing in the kwok provider sets it, and a NodePool
  whose node class is not Ready provisions nothing (:func:`node_class` writes it with the status);
- its instance types: by default 144 CPU-only types embedded in the binary (``c``/``s``/``m``
  families, 1 to 256 cpu, no ``nvidia.com/gpu``); ``--instance-types-file-path`` (or
  ``INSTANCE_TYPES_FILE_PATH``) replaces them with a JSON list of ``{name, offerings, architecture,
  operatingSystems, resources}``. :func:`instance_types` writes one with GPU nodes shaped like the
  control plane's default nodes (8 ``nvidia.com/gpu``, 64 cpu, 512Gi) and a CPU-only type.

It runs with leader election off, its metrics and health probes on free ports (it binds them on
every interface: its flags take a port, not an address) and no webhooks (Karpenter has none since
v1). Its batching window is shortened (``--batch-idle-duration=1s``, ``--batch-max-duration=3s``)
so that a scale-up starts within seconds.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from gangq.controlplane import upstream
from gangq.controlplane.processes import free_port, stop_process

__all__ = [
    "KARPENTER_MODULE",
    "Api",
    "Karpenter",
    "KarpenterError",
    "crds",
    "install",
    "instance_types",
    "kubectl_apply",
    "lift_not_ready_taints",
    "node_class",
    "node_pool",
]

KARPENTER_MODULE = "sigs.k8s.io/karpenter"
BINARY = "karpenter-kwok"
NODE_CLASS_GROUP = "karpenter.kwok.sh"
ZONE = "test-zone-a"


class KarpenterError(RuntimeError):
    """Karpenter exited, or did not become ready."""


def crds() -> list[dict[str, Any]]:
    """Karpenter's CRDs with the kwok provider's NodePool, and the KWOKNodeClass, from the pinned
    module's source (downloaded into the Go module cache if needed)."""
    source = upstream.source_dir("karpenter", KARPENTER_MODULE) / "kwok"
    files = [*sorted((source / "charts" / "crds").glob("*.yaml")), *sorted((source / "apis" / "crds").glob("*.yaml"))]
    docs = [d for path in files for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if d.get("kind") == "CustomResourceDefinition"]


def _offering(capacity_type: str, price: float) -> dict[str, Any]:
    return {"Price": price, "Available": True, "Requirements": [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity_type]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE]}]}


def instance_types(gpus: int = 8, cpu: int = 64, memory: str = "512Gi") -> list[dict[str, Any]]:
    """The kwok provider's instance types as its JSON file holds them: ``gpu-<gpus>x-amd64-linux``
    (``gpus`` nvidia.com/gpu, ``cpu``, ``memory``) and ``cpu-16x-amd64-linux`` (16 cpu, 64Gi, no
    GPU), each on-demand in one zone."""
    def one(name: str, resources: dict[str, str], price: float) -> dict[str, Any]:
        return {"name": name, "architecture": "amd64", "operatingSystems": ["linux"],
                "resources": {**resources, "pods": "110"}, "offerings": [_offering("on-demand", price)]}

    return [
        one(f"gpu-{gpus}x-amd64-linux", {"cpu": str(cpu), "memory": memory, "nvidia.com/gpu": str(gpus)}, 32.0),
        one("cpu-16x-amd64-linux", {"cpu": "16", "memory": "64Gi"}, 0.8),
    ]


def node_class(name: str = "default") -> dict[str, Any]:
    """A KWOKNodeClass with the ``Ready`` condition in its status (apply it, then its status)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"apiVersion": f"{NODE_CLASS_GROUP}/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": name},
            "spec": {}, "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": now}]}}


def node_pool(name: str, *, labels: dict[str, str] | None = None, limits: dict[str, str] | None = None,
              consolidate_after: str = "Never", instance_type: str | None = None, node_class_name: str = "default",
              taints: Sequence[dict[str, str]] = (), annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A NodePool of on-demand linux nodes of ``node_class_name`` (``instance_type`` only, if
    given), its nodes labelled ``labels`` and tainted ``taints``, within ``limits``; empty or
    underused nodes are consolidated ``consolidate_after`` (a duration, or ``Never``) after their
    last pod change, all at once if need be (budget 100%); ``annotations`` on the NodePool."""
    requirements: list[dict[str, Any]] = [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]
    if instance_type is not None:
        requirements.append({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]})
    spec: dict[str, Any] = {
        "template": {"metadata": {"labels": dict(labels or {})}, "spec": {
            "requirements": requirements, "expireAfter": "Never", "taints": list(taints),
            "nodeClassRef": {"group": NODE_CLASS_GROUP, "kind": "KWOKNodeClass", "name": node_class_name}}},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": consolidate_after,
                       "budgets": [{"nodes": "100%"}]},
    }
    if limits:
        spec["limits"] = dict(limits)
    metadata: dict[str, Any] = {"name": name}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": metadata, "spec": spec}


def kubectl_apply(kubectl: Path, kubeconfig: Path, documents: Sequence[dict[str, Any]]) -> None:
    """``kubectl apply --server-side`` of ``documents``; a status in a document is applied to the
    status subresource after the object."""
    def run(*args: str, stdin: str) -> None:
        done = subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", *args], input=stdin,
                              capture_output=True, text=True, timeout=120, env={**os.environ, "KUBECONFIG": ""})
        if done.returncode != 0:
            raise KarpenterError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")

    run("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(list(documents)))
    with_status = [d for d in documents if d.get("status")]
    if with_status:
        run("apply", "--server-side", "--force-conflicts", "--subresource=status", "-f", "-",
            stdin=yaml.safe_dump_all(with_status))


def install(kubectl: Path, kubeconfig: Path, timeout: float = 60.0) -> None:
    """Karpenter's CRDs (established before returning) and the Ready KWOKNodeClass ``default``."""
    documents = crds()
    kubectl_apply(kubectl, kubeconfig, documents)
    names = [f"crd/{d['metadata']['name']}" for d in documents]
    done = subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", "wait", "--for=condition=Established",
                           f"--timeout={timeout:.0f}s", *names], capture_output=True, text=True, timeout=timeout + 30,
                          env={**os.environ, "KUBECONFIG": ""})
    if done.returncode != 0:
        raise KarpenterError(f"Karpenter's CRDs not established: {done.stderr.strip()}")
    kubectl_apply(kubectl, kubeconfig, [node_class()])


class Api:
    """Requests to the API server of a kubeconfig (its current context: a bearer token or a client
    certificate, the cluster's CA), with the standard library only."""

    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        self.server = str(cluster["server"]).rstrip("/")
        self.ssl = ssl.create_default_context()
        if "certificate-authority-data" in cluster:
            self.ssl.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif "certificate-authority" in cluster:
            self.ssl.load_verify_locations(cafile=cluster["certificate-authority"])
        self.token = user.get("token")
        if "client-certificate-data" in user or "client-certificate" in user:
            with tempfile.TemporaryDirectory() as tmp:
                paths = []
                for key in ("client-certificate", "client-key"):
                    if f"{key}-data" in user:
                        path = Path(tmp) / key
                        path.write_bytes(base64.b64decode(user[f"{key}-data"]))
                        paths.append(str(path))
                    else:
                        paths.append(str(user[key]))
                self.ssl.load_cert_chain(paths[0], paths[1])

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> Any:
        """One request; the decoded JSON answer. Raises urllib's HTTPError."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=10, context=self.ssl) as answer:
            text = answer.read()
        return json.loads(text) if text else None


NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def lift_not_ready_taints(api: Api) -> list[str]:
    """Remove the not-ready taint from Karpenter's nodes that kwok reports Ready, as the node
    lifecycle controller would (the control plane does not run it: kwok's nodes have no
    heartbeat). The API server puts that taint on every new node; Karpenter counts a node
    initialized, and the scheduler binds to it, only once it is gone. Returns the nodes lifted."""
    lifted = []
    nodes = api.request("GET", "/api/v1/nodes?labelSelector=karpenter.sh%2Fnodepool")["items"]
    for node in nodes:
        taints = node.get("spec", {}).get("taints") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (node.get("status") or {}).get("conditions") or [])
        if not ready or not any(t.get("key") == NOT_READY_TAINT for t in taints):
            continue
        kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
        patch = [{"op": "test", "path": "/spec/taints", "value": taints},
                 {"op": "replace", "path": "/spec/taints", "value": kept}]
        name = node["metadata"]["name"]
        try:  # a test that fails (Karpenter changed the taints meanwhile): the next round retries
            api.request("PATCH", f"/api/v1/nodes/{name}", patch, content_type="application/json-patch+json")
        except urllib.error.HTTPError as err:
            if err.code not in (404, 409, 422):
                raise
            continue
        lifted.append(name)
    return lifted


class Karpenter:
    """Karpenter's kwok provider against the cluster of ``kubeconfig`` (an admin's), from
    :meth:`start` until :meth:`stop`; its instance types are ``types`` (:func:`instance_types` by
    default) and its log goes to ``workdir/karpenter.log``."""

    def __init__(self, kubeconfig: Path, workdir: Path, *, binary: Path | None = None,
                 types: list[dict[str, Any]] | None = None, log_level: str = "info",
                 extra_args: Sequence[str] = ()) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.binary = binary
        self.types = instance_types() if types is None else types
        self.log_level = log_level
        self.extra_args = list(extra_args)
        self.logfile = workdir / "karpenter.log"
        self.health_port = 0
        self.popen: subprocess.Popen[bytes] | None = None
        self.api = Api(kubeconfig)
        self._stop = threading.Event()
        self._lifecycle: threading.Thread | None = None
        self.lifecycle_error: BaseException | None = None

    def command(self) -> list[str]:
        binary = self.binary or upstream.build_operator("karpenter") / BINARY
        types_file = self.workdir / "instance-types.json"
        types_file.write_text(json.dumps(self.types, indent=1))
        self.health_port = free_port()
        return [str(binary), "--disable-leader-election", f"--metrics-port={free_port()}",
                f"--health-probe-port={self.health_port}", f"--instance-types-file-path={types_file}",
                f"--log-level={self.log_level}", "--batch-idle-duration=1s", "--batch-max-duration=3s",
                *self.extra_args]

    def start(self, timeout: float = 60.0) -> None:
        """Start it and wait until its ``/readyz`` answers (its caches synced, its CRDs served);
        a thread lifts the not-ready taint of its nodes until :meth:`stop`
        (:func:`lift_not_ready_taints`)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = self.command()
        with self.logfile.open("ab") as out:
            self.popen = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
                                          start_new_session=True)
        self._stop.clear()
        self._lifecycle = threading.Thread(target=self._lift_taints, name="karpenter-node-lifecycle", daemon=True)
        self._lifecycle.start()
        deadline = time.monotonic() + timeout
        while not self.ready():
            self.check()
            if time.monotonic() > deadline:
                self.stop()
                raise KarpenterError(f"Karpenter not ready within {timeout:.0f} s; the end of {self.logfile}:\n"
                                     f"{self.tail()}")
            time.sleep(0.2)

    def _lift_taints(self) -> None:
        while not self._stop.wait(0.3):
            try:
                lift_not_ready_taints(self.api)
            except (OSError, urllib.error.URLError) as err:  # the API server gone: stop() is near
                self.lifecycle_error = err
            except BaseException as err:
                self.lifecycle_error = err
                raise

    def ready(self) -> bool:
        with contextlib.suppress(OSError, urllib.error.URLError), \
                urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=1) as answer:
            return bool(answer.status == 200)
        return False

    def check(self) -> None:
        """Raise :class:`KarpenterError` if it has exited, or its node thread has failed."""
        if self._lifecycle is not None and not self._lifecycle.is_alive() and not self._stop.is_set():
            raise KarpenterError(f"lifting the not-ready taints failed: {self.lifecycle_error!r}")
        if self.popen is not None and self.popen.poll() is not None:
            raise KarpenterError(f"Karpenter exited ({self.popen.returncode}); the end of {self.logfile}:\n"
                                 f"{self.tail()}")

    def tail(self, chars: int = 4000) -> str:
        return self.logfile.read_text(errors="replace")[-chars:] if self.logfile.exists() else ""

    def stop(self) -> None:
        self._stop.set()
        if self._lifecycle is not None:
            self._lifecycle.join()
        if self.popen is not None and self.popen.poll() is None:
            stop_process(self.popen)

    def __enter__(self) -> Karpenter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m gangq.controlplane.karpenter --kubeconfig PATH``: build Karpenter's kwok provider
    if missing, install its CRDs and the KWOKNodeClass ``default``, and run it until Ctrl-C."""
    import argparse
    import signal

    from gangq.controlplane.build import bin_dir

    parser = argparse.ArgumentParser(prog="python -m gangq.controlplane.karpenter", description=main.__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True, help="an admin's kubeconfig (gangq sandbox up's)")
    parser.add_argument("--workdir", type=Path, default=None, help="where its log and instance types go")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gangq-karpenter."))
    install(bin_dir() / "kubectl", args.kubeconfig)
    karpenter = Karpenter(args.kubeconfig, workdir)

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    karpenter.start()
    print(f"Karpenter running; log: {karpenter.logfile}; instance types: {workdir / 'instance-types.json'}")
    try:
        while True:
            karpenter.check()
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        karpenter.stop()


if __name__ == "__main__":
    main()
