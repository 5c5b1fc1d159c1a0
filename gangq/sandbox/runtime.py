"""Starting the sandbox: API server + simulated cluster, in-process (background thread) or as a subprocess.

    with Sandbox() as sb:                      # 4 GPU nodes, free port, kubeconfig in a temp dir
        subprocess.run(["kubectl", "--kubeconfig", str(sb.kubeconfig), "get", "nodes"])

`up()` is `gangq sandbox up`: the same, in the foreground, until interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar, cast

from aiohttp import web

from gangq.controlplane.faults import Faults
from gangq.controlplane.processes import free_port
from gangq.sandbox.server import make_app
from gangq.sandbox.store import Store

__all__ = ["Sandbox", "SandboxServer", "free_port", "up", "write_kubeconfig"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def write_kubeconfig(path: Path | str, server: str, *, namespace: str = "default", name: str = "gangq-sandbox",
                     token: str | None = None) -> Path:
    """Write a kubeconfig whose current context points at `server` (plain HTTP). `token`: the
    sandbox's user token (see SandboxServer), sent by clients and checked only by its TokenReview."""
    import yaml

    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": {"token": token} if token else {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
    }
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return p


def _nodes(spec: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC, parse_node_spec

    if spec is None:
        return parse_node_spec(DEFAULT_NODE_SPEC)
    if isinstance(spec, str):
        return parse_node_spec(spec)
    return list(spec)


class SandboxServer:
    """Store + HTTP server + (optionally) the simulated cluster, on the *current* asyncio loop."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        nodes: str | list[dict[str, Any]] | None = None,
        cluster: bool = True,
        kubelet: Any = None,
        state_file: Path | str | None = None,
        history: int = 20000,
        bookmark_interval: float = 30.0,
        faults: Faults | None = None,
        cluster_options: dict[str, Any] | None = None,
        token: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        # The token of the sandbox's one user (written into its kubeconfig). The sandbox authorizes
        # nothing: every request may do everything. Only its TokenReview and SubjectAccessReview
        # read the token, for servers that delegate to them (gangq's pending-workloads API).
        self.token = token or secrets.token_hex(16)
        self.state_file = Path(state_file) if state_file else None
        self.store = Store(history=history, bookmark_interval=bookmark_interval)
        if self.state_file is not None and self.state_file.exists():
            state = json.loads(self.state_file.read_text())
            self.store.load_state(state)
            log.info("sandbox: loaded %d objects from %s", len(state.get("objects", [])), self.state_file)
        self.faults = faults or Faults()
        self.app = make_app(self.store, faults=self.faults, bookmark_interval=bookmark_interval, token=self.token)
        self._cluster_wanted = cluster
        self._nodes_spec = nodes
        self._kubelet = kubelet
        self._cluster_options = cluster_options or {}
        self.cluster: Any = None
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=1.0, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        if self.port == 0:
            # loop.create_server's server: typed AbstractServer, which does not declare .sockets
            server = cast(asyncio.Server | None, site._server)
            assert server is not None
            self.port = int(server.sockets[0].getsockname()[1])
        if self._cluster_wanted:
            from gangq.sandbox.cluster import SimulatedCluster

            self.cluster = SimulatedCluster(self.store, _nodes(self._nodes_spec), kubelet=self._kubelet,
                                            **self._cluster_options)
            await self.cluster.start()
        log.info("sandbox API server listening on %s", self.url)

    async def stop(self) -> None:
        if self.cluster is not None:
            await self.cluster.stop()
            self.cluster = None
        self.store.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.state_file is not None:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.state_file.with_suffix(self.state_file.suffix + ".tmp")
            tmp.write_text(json.dumps(self.store.dump_state()))
            tmp.replace(self.state_file)
            log.info("sandbox: state saved to %s", self.state_file)


class Sandbox:
    """A running sandbox and its kubeconfig, as a context manager.

    mode="thread" (default): everything runs in this process on a private event loop in a
    background thread; `.store`, `.faults` and `.cluster` are live objects — touch them only via
    `.call(fn, *args)`, which runs `fn` on the sandbox loop. mode="subprocess": `gangq sandbox up`
    in a child process (only the kubeconfig and HTTP are available).
    """

    def __init__(
        self,
        *,
        nodes: str | list[dict[str, Any]] | None = None,
        cluster: bool = True,
        mode: str = "thread",
        port: int = 0,
        host: str = "127.0.0.1",
        kubeconfig: Path | str | None = None,
        state_file: Path | str | None = None,
        kubelet: Any = None,
        bookmark_interval: float = 30.0,
        history: int = 20000,
        cluster_options: dict[str, Any] | None = None,
        startup_timeout: float = 20.0,
    ) -> None:
        if mode not in ("thread", "subprocess"):
            raise ValueError(f"Sandbox mode must be 'thread' or 'subprocess', got {mode!r}")
        self.mode = mode
        self.host = host
        self.port = port
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if kubeconfig is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="gangq-sandbox-")
            kubeconfig = Path(self._tmp.name) / "kubeconfig"
        self.kubeconfig = Path(kubeconfig)
        self._kw: dict[str, Any] = {
            "nodes": nodes,
            "cluster": cluster,
            "kubelet": kubelet,
            "state_file": state_file,
            "history": history,
            "bookmark_interval": bookmark_interval,
            "cluster_options": cluster_options,
        }
        self.startup_timeout = startup_timeout
        self.server: SandboxServer | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.log_path: Path | None = None  # subprocess mode: the server's stderr

    # ------------------------------------------------------------------ accessors
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def store(self) -> Store:
        assert self.server is not None, "Sandbox.store is only available in thread mode once started"
        return self.server.store

    @property
    def faults(self) -> Faults:
        assert self.server is not None, "Sandbox.faults is only available in thread mode once started"
        return self.server.faults

    @property
    def cluster(self) -> Any:
        return self.server.cluster if self.server is not None else None

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` on the sandbox loop (thread mode) and return its result."""
        assert self.loop is not None, "Sandbox.call needs a started thread-mode sandbox"

        async def run() -> T:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def env(self) -> dict[str, str]:
        """os.environ plus KUBECONFIG pointing at this sandbox, and a private kubectl cache directory
        (KUBECACHEDIR) so discovery cached from an earlier sandbox on the same port is never reused."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig),
                "KUBECACHEDIR": str(self.kubeconfig.parent / "kubectl-cache")}

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Sandbox:
        if self.mode == "thread":
            self._start_thread()
            assert self.server is not None
            write_kubeconfig(self.kubeconfig, self.url, token=self.server.token)
        else:
            self._start_subprocess()  # the child writes the kubeconfig, with its token
        return self

    def _start_thread(self) -> None:
        ready: Future[None] = Future()
        loop = asyncio.new_event_loop()
        self.loop = loop

        def main() -> None:
            asyncio.set_event_loop(loop)
            try:
                self.server = SandboxServer(host=self.host, port=self.port, **self._kw)
                loop.run_until_complete(self.server.start())
                self.port = self.server.port
                ready.set_result(None)
            except BaseException as e:
                ready.set_exception(e)
                loop.close()
                return
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=main, name="gangq-sandbox", daemon=True)
        self._thread.start()
        ready.result(self.startup_timeout)

    def _kubeconfig_written(self) -> bool:
        """Whether the child wrote this sandbox's kubeconfig (it does so right after it listens)."""
        try:
            return f"server: {self.url}" in self.kubeconfig.read_text() and "token:" in self.kubeconfig.read_text()
        except OSError:
            return False

    def _start_subprocess(self) -> None:
        if self.port == 0:
            self.port = free_port(self.host)
        cmd = [sys.executable, "-m", "gangq.sandbox.cli", "up", "--port", str(self.port),
               "--kubeconfig-out", str(self.kubeconfig), "--host", self.host]
        nodes = self._kw["nodes"]
        if isinstance(nodes, str):
            cmd += ["--nodes", nodes]
        elif nodes is not None:
            raise ValueError("Sandbox(mode='subprocess') takes nodes as a spec string")
        if not self._kw["cluster"]:
            cmd.append("--no-cluster")
        if self._kw["state_file"]:
            cmd += ["--state-file", str(self._kw["state_file"])]
        if self._kw["bookmark_interval"] != 30.0:
            cmd += ["--bookmark-interval", str(self._kw["bookmark_interval"])]
        if self._tmp is not None:
            self.log_path = Path(self._tmp.name) / "sandbox.log"
        else:
            fd, name = tempfile.mkstemp(prefix="gangq-sandbox-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self._proc.poll() is not None:
                err = self.log_path.read_text(errors="replace")
                raise RuntimeError(f"gangq sandbox up exited with {self._proc.returncode}: {err[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200 and self._kubeconfig_written():
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self._proc.kill()
                raise RuntimeError(f"gangq sandbox up did not answer on {self.url} within {self.startup_timeout}s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.mode == "thread" and self.loop is not None and self.server is not None:
            loop = self.loop
            server = self.server
            if loop.is_running():
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(15)
                loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(10)
            self.loop = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGINT)
                try:
                    self._proc.wait(10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def up(
    port: int = 6443,
    kubeconfig_out: Path | str | None = None,
    nodes: str | None = None,
    state_file: Path | str | None = None,
    *,
    host: str = "127.0.0.1",
    cluster: bool = True,
    bookmark_interval: float = 30.0,
    announce: Callable[[str], None] | None = None,
) -> None:
    """`gangq sandbox up`: serve in the foreground until SIGINT/SIGTERM, then save the state file."""
    kubeconfig = Path(kubeconfig_out) if kubeconfig_out else Path.home() / ".kube" / "gangq-sandbox.yaml"
    if nodes is not None:
        _nodes(nodes)  # fail early (NodeSpecError names the group) before binding the port

    async def main() -> None:
        server = SandboxServer(host=host, port=port, nodes=nodes, cluster=cluster, state_file=state_file,
                               bookmark_interval=bookmark_interval)
        await server.start()
        write_kubeconfig(kubeconfig, server.url, token=server.token)
        if announce is not None:
            announce(f"export KUBECONFIG={kubeconfig}")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await server.stop()

    asyncio.run(main())
