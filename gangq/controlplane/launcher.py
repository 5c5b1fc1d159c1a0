"""Start and stop a real Kubernetes control plane on loopback.

``ControlPlane.start()`` runs, in order, each waited for before the next:

1. etcd, on a temporary data directory without fsync (its durability is not what is tested);
2. kube-apiserver: TLS with a self-signed CA, bearer-token authentication, RBAC authorization,
   service-account signing keys, the aggregation layer's front-proxy CA and client certificate
   (:mod:`gangq.controlplane.pki`);
3. kube-controller-manager with the controllers a batch cluster needs (Jobs, garbage collection,
   namespaces, service accounts and their tokens, TTL after finished, pod GC, endpoint slices) and
   no node lifecycle (kwok's nodes have no kubelet heartbeat to judge them by);
4. kube-scheduler;
5. the nodes of ``--nodes`` (the emulated sandbox's syntax and default: :mod:`gangq.controlplane.nodespec`),
   created through the API with kwok's annotation, and kwok managing them with gangq's Stages
   (:mod:`gangq.controlplane.kwok`).

Every process logs to a file of the working directory; a component that exits or does not become
ready in time stops the whole control plane with an error naming it and the end of its log.
``stop()`` terminates every process it started (SIGTERM, then SIGKILL) and removes the working
directory unless asked to keep it.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from gangq.controlplane import kwok
from gangq.controlplane.build import BuildError, bin_dir, build, missing
from gangq.controlplane.pki import FRONT_PROXY_CLIENT, Pki
from gangq.controlplane.processes import free_port

log = logging.getLogger(__name__)

SERVICE_CIDR = "10.0.0.0/24"
CONTROLLERS = (
    "job-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "ttl-after-finished-controller",
    "pod-garbage-collector-controller",
    "endpointslice-controller",
)
READY_TIMEOUT = 90.0
LISTEN_ATTEMPTS = 3


def _same_node(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    labels = existing["metadata"].get("labels") or {}
    return (
        all(labels.get(k) == v for k, v in (wanted["metadata"].get("labels") or {}).items())
        and (existing.get("spec", {}).get("taints") or []) == (wanted.get("spec", {}).get("taints") or [])
        and (existing.get("status", {}).get("allocatable") or {}) == (wanted.get("status", {}).get("allocatable") or {})
    )


class ControlPlaneError(RuntimeError):
    """A component is missing, died, or did not become ready."""


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux prctl PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


class Process:
    """One component: its command line, log file and process."""

    def __init__(self, name: str, argv: list[str], logfile: Path) -> None:
        self.name = name
        self.argv = argv
        self.logfile = logfile
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # A session of its own, so that a Ctrl-C in the terminal reaches gangq, which stops the
        # components in order. Started from the main thread, a component also gets SIGTERM when
        # gangq dies without stopping it (PR_SET_PDEATHSIG fires when the starting thread exits).
        main = threading.current_thread() is threading.main_thread()
        with self.logfile.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=_die_with_parent if main and sys.platform == "linux" else None,
            )

    def check(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with code {self.popen.returncode}; "
                f"the end of {self.logfile}:\n{_tail(self.logfile)}"
            )

    def stop(self, grace: float = 5.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on loopback."""

    def __init__(
        self,
        *,
        port: int = 0,
        nodes: str | None = None,
        workdir: Path | None = None,
        keep_workdir: bool = False,
        announce: Callable[[str], None] | None = None,
        extra_apiserver_args: Iterable[str] = (),
        audit: bool | list[dict[str, Any]] = False,
    ) -> None:
        self._own_port = not port
        self.port = port or free_port()
        self.nodes = nodes
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="gangq-control-plane."))
        self.keep_workdir = keep_workdir
        self.announce = announce or log.info
        self.extra_apiserver_args = list(extra_apiserver_args)
        # kube-apiserver's audit log (JSON lines, Metadata level): who did what, for the tests of
        # the controller's rights and for counting API writes per workload.
        # ``audit`` may be the policy's rules instead (e.g. only one user's writes); True logs
        # every request at Metadata level.
        self.audit_log: Path | None = self.workdir / "audit.log" if audit else None
        self.audit_rules: list[dict[str, Any]] = audit if isinstance(audit, list) else [{"level": "Metadata"}]
        self.pki = Pki(self.workdir / "pki")
        self.processes: list[Process] = []
        self.bin: Path = bin_dir()
        self.url = f"https://127.0.0.1:{self.port}"
        self._ssl: ssl.SSLContext | None = None  # trusts the CA once pki.write() made it
        self._kubeconfigs: dict[str, Path] = {}  # who -> the kubeconfig written for this start

    # -- kubeconfigs ---------------------------------------------------------------------------
    def kubeconfig(self, who: str = "admin", path: Path | None = None) -> Path:
        """A kubeconfig for ``who`` (admin, controller, ...), written in the working directory
        (once) unless ``path`` says where."""
        if path is not None:
            return self.pki.kubeconfig(path, self.url, who)
        if who not in self._kubeconfigs:
            self._kubeconfigs[who] = self.pki.kubeconfig(self.workdir / f"{who}.kubeconfig", self.url, who)
        return self._kubeconfigs[who]

    @property
    def kubectl(self) -> Path:
        return self.bin / "kubectl"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, *, build_missing: bool = True) -> None:
        try:
            self._start(build_missing)
        except BaseException:
            self.stop()
            raise

    def _start(self, build_missing: bool) -> None:
        if missing(self.bin):
            if not build_missing:
                raise ControlPlaneError(
                    f"control-plane binaries missing in {self.bin}: {', '.join(missing(self.bin))} "
                    "(build them with: python -m gangq.controlplane.build)"
                )
            try:
                self.bin = build(progress=self.announce)
            except BuildError as err:
                raise ControlPlaneError(str(err)) from err
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki.write()
        for attempt in range(1, LISTEN_ATTEMPTS + 1):
            try:
                self._start_storage_and_apiserver()
                break
            except ControlPlaneError as err:
                # Another process bound a chosen port between free_port() and the component's own
                # bind: choose new ports and start again (a port given by the caller is kept).
                if "address already in use" not in str(err) or attempt == LISTEN_ATTEMPTS:
                    raise
                self.announce(f"a port was taken before it was bound; starting again ({err})")
                self.stop_processes()
                shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
                for name in ("etcd", "kube-apiserver"):
                    (self.workdir / f"{name}.log").unlink(missing_ok=True)
                if self._own_port:
                    self.port = free_port()
                    self.url = f"https://127.0.0.1:{self.port}"
                    self._kubeconfigs.clear()
        self._start_controllers_and_nodes()

    def _start_storage_and_apiserver(self) -> None:
        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.announce(f"starting etcd on {etcd_url}")
        self._run("etcd", [
            "--name=gangq", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=gangq=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=8589934592",
        ])
        self._wait("etcd", lambda: self._http_ok(f"{etcd_url}/health"))
        self.announce(f"starting kube-apiserver on {self.url}")
        self._run("kube-apiserver", [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            f"--tls-cert-file={self.pki.serving_cert}", f"--tls-private-key-file={self.pki.serving_key}",
            f"--token-auth-file={self.pki.token_file}", f"--client-ca-file={self.pki.ca_cert}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={self.pki.sa_pub}",
            f"--service-account-signing-key-file={self.pki.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # The "kubernetes" Service's endpoints would be 127.0.0.1, which Endpoints reject (no
            # pod here needs to reach the API server through the Service).
            "--endpoint-reconciler-type=none",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            "--allow-privileged=true", "--profiling=false",
            # The aggregation layer, as kubeadm configures it: the front-proxy CA and its client
            # certificate for requests forwarded to APIServices (gangq's pending-workloads API).
            f"--requestheader-client-ca-file={self.pki.front_proxy_ca}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.pki.front_proxy_client_cert}",
            f"--proxy-client-key-file={self.pki.front_proxy_client_key}",
            *self._audit_args(),
            *self.extra_apiserver_args,
        ])
        self._wait("kube-apiserver", self._apiserver_ready)

    def _start_controllers_and_nodes(self) -> None:
        self.announce("starting kube-controller-manager and kube-scheduler")
        self._run("kube-controller-manager", [
            f"--kubeconfig={self.kubeconfig('controller-manager')}",
            f"--controllers={','.join(CONTROLLERS)}",
            f"--service-account-private-key-file={self.pki.sa_key}",
            f"--root-ca-file={self.pki.ca_cert}",
            # each controller as its own ServiceAccount, with the bootstrap RBAC of its role (as
            # kubeadm runs it): the controller-manager user itself may do little
            "--use-service-account-credentials=true",
            "--leader-elect=false", "--secure-port=0",
            "--kube-api-qps=200", "--kube-api-burst=400",
        ])
        self._run("kube-scheduler", [
            f"--kubeconfig={self.kubeconfig('scheduler')}",
            "--leader-elect=false", "--secure-port=0",
            "--kube-api-qps=200", "--kube-api-burst=400",
        ])
        self._create_nodes()
        self.announce("starting kwok")
        config = self.workdir / "kwok.yaml"
        config.write_text(kwok.stages())
        self._run("kwok", [
            f"--kubeconfig={self.kubeconfig('kwok')}",
            f"--config={config}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={kwok.NODE_ANNOTATION}={kwok.NODE_ANNOTATION_VALUE}",
            "--node-lease-duration-seconds=0",
            "--cidr=10.244.0.1/16",  # pod IPs, apart from the nodes' and the Services' ranges
            "--server-address=",
        ])
        self._wait("kube-scheduler and the default ServiceAccount", self._default_service_account)
        self.announce(f"control plane ready: {self.url} ({self.server_version()})")

    def stop(self) -> None:
        self.stop_processes()
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def stop_processes(self) -> None:
        """Stop every component started, the last first; the working directory stays."""
        for process in reversed(self.processes):
            try:
                process.stop()
            except OSError as err:  # already gone
                log.debug("stopping %s: %s", process.name, err)
        self.processes.clear()

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def restart(self, name: str, *, hard: bool = False, down_seconds: float = 0.0) -> None:
        """Stop one component (SIGKILL when ``hard``, else SIGTERM) and start it again with the same
        arguments — etcd with its data directory kept — then wait until the API server is ready.
        The chaos suite's API-server restarts and etcd crashes (benchmarks/chaos.py)."""
        process = next((p for p in self.processes if p.name == name), None)
        if process is None:
            raise ControlPlaneError(f"no component named {name!r}")
        if hard and process.popen is not None and process.popen.poll() is None:
            process.popen.kill()
            process.popen.wait(10)
        else:
            process.stop()
        time.sleep(down_seconds)
        process.start()
        self._wait(f"kube-apiserver after restarting {name}", self._apiserver_ready)

    def check(self) -> None:
        """Raise :class:`ControlPlaneError` if a component has exited."""
        for process in self.processes:
            process.check()

    # -- helpers -------------------------------------------------------------------------------
    def _audit_args(self) -> list[str]:
        if self.audit_log is None:
            return []
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump({
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": self.audit_rules,
        }))
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
                "--audit-log-mode=blocking", "--audit-log-maxbackup=0", "--audit-log-maxsize=0"]

    def audit_events(self) -> list[dict[str, Any]]:
        """Every event of the audit log so far (empty without ``audit=True``)."""
        if self.audit_log is None or not self.audit_log.exists():
            return []
        return [json.loads(line) for line in self.audit_log.read_text().splitlines() if line.strip()]

    def _run(self, name: str, args: list[str]) -> Process:
        process = Process(name, [str(self.bin / name), *args], self.workdir / f"{name}.log")
        process.start()
        self.processes.append(process)
        return process

    def _wait(self, what: str, ready: Callable[[], bool], timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            if ready():
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name}:\n{_tail(p.logfile, 8)}" for p in self.processes)
                raise ControlPlaneError(f"{what} not ready after {timeout:.0f} s\n{logs}")
            time.sleep(0.2)

    @staticmethod
    def _http_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def raw_request(
        self, method: str, path: str, body: Any = None, *, who: str = "admin", content_type: str = "application/json"
    ) -> bytes:
        """One API request as ``who``; returns the body. Raises urllib's HTTPError."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.pki.identities[who].token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, timeout=10, context=self._ssl) as resp:
            return bytes(resp.read())

    def request(
        self, method: str, path: str, body: Any = None, *, who: str = "admin", content_type: str = "application/json"
    ) -> Any:
        """One API request as ``who``; returns the decoded JSON body. Raises urllib's HTTPError."""
        text = self.raw_request(method, path, body, who=who, content_type=content_type)
        return json.loads(text) if text else None

    def _apiserver_ready(self) -> bool:
        try:
            return self.raw_request("GET", "/readyz") == b"ok"
        except (urllib.error.URLError, OSError):
            return False

    def _default_service_account(self) -> bool:
        try:
            self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
        except (urllib.error.URLError, OSError):
            return False
        return True

    def server_version(self) -> str:
        return str(self.request("GET", "/version").get("gitVersion", "?"))

    def _create_nodes(self) -> None:
        from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC, parse_node_spec

        specs = parse_node_spec(self.nodes or DEFAULT_NODE_SPEC)
        self.announce(f"creating {len(specs)} kwok nodes")
        for node in specs:
            self._create_node(node)

    def _create_node(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        node["metadata"].setdefault("annotations", {})[kwok.NODE_ANNOTATION] = kwok.NODE_ANNOTATION_VALUE
        status = node.pop("status", None)
        taints = node.get("spec", {}).get("taints", [])
        self.request("POST", "/api/v1/nodes", node)
        # Merge patches, not updates: kwok writes the node as soon as it exists.
        merge = "application/merge-patch+json"
        if status is not None:
            self.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, content_type=merge)
        # The API server taints a new node not-ready (TaintNodesByCondition); the node lifecycle
        # controller, which would lift it once the node reports Ready, does not run here.
        self.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None}}, content_type=merge)

    def replace_nodes(self, spec: str | None) -> None:
        """Make the nodes those of ``spec`` (a node SPEC as ``--nodes`` takes; None: no nodes).
        A node that already exists with the same labels, taints and allocatable stays as it is."""
        from gangq.controlplane.nodespec import parse_node_spec

        wanted = {n["metadata"]["name"]: n for n in (parse_node_spec(spec) if spec else [])}
        for node in self.request("GET", "/api/v1/nodes")["items"]:
            name = node["metadata"]["name"]
            want = wanted.get(name)
            if want is not None and _same_node(node, want):
                del wanted[name]
                continue
            self.request("DELETE", f"/api/v1/nodes/{name}")
        for node in wanted.values():
            self._create_node(node)

    def apply(self, documents: Iterable[dict[str, Any]], *, who: str = "admin") -> None:
        """``kubectl apply --server-side`` of ``documents`` as ``who``."""
        text = yaml.safe_dump_all(list(documents))
        done = subprocess.run(
            [str(self.kubectl), f"--kubeconfig={self.kubeconfig(who)}", "apply", "--server-side",
             "--force-conflicts", "-f", "-"],
            input=text, capture_output=True, text=True, env={**os.environ, "KUBECONFIG": ""},
        )
        if done.returncode != 0:
            raise ControlPlaneError(f"kubectl apply failed: {done.stderr.strip()}")
