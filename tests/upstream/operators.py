"""The upstream operators of the kinds gangq queues (``hack/upstream``, built by
:func:`gangq.controlplane.upstream.build_operator`) run out of cluster beside gangq against the
session's real control plane, with their CRDs from the pinned module's source in the Go module
cache (never copied into this repository).

Each runs as the control plane's admin, with leader election off and its metrics and health
probes on free loopback ports; its webhooks stay off (none is registered with the API server).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from gangq.controlplane import upstream
from gangq.controlplane.launcher import ControlPlane
from gangq.sandbox.runtime import free_port
from tests.controlplane.kube import get, wait_for

KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"


def crd_documents(directory: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in the YAML files of ``directory``."""
    docs = [d for path in sorted(directory.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if d.get("kind") == "CustomResourceDefinition"]


def install_crds(cp: ControlPlane, documents: Sequence[dict[str, Any]], timeout: float = 60.0) -> None:
    """Apply ``documents`` (server-side: an upstream CRD can be too large for client-side apply's
    annotation) and wait until the API server serves each."""
    cp.apply(list(documents))
    for crd in documents:
        name = crd["metadata"]["name"]

        def established(name: str = name) -> bool:
            obj = get(cp, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
            return any(c.get("type") == "Established" and c.get("status") == "True"
                       for c in (obj.get("status") or {}).get("conditions") or [])

        wait_for(established, timeout, f"CRD {name} established")


def kuberay_crds() -> list[dict[str, Any]]:
    """KubeRay's CRDs (RayCluster, RayJob, RayService) of the pinned operator module."""
    source = upstream.source_dir("kuberay", KUBERAY_MODULE)
    return crd_documents(source / "config" / "crd" / "bases")


@contextlib.contextmanager
def upstream_operator(name: str, command: Sequence[str], probe: str, log: Path,
                      timeout: float = 60.0) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` until the block ends; waits until ``http://<probe>/readyz`` answers 200.
    Its output goes to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "KUBECONFIG": ""})
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"the upstream {name} exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError, urllib.error.URLError), \
                    urllib.request.urlopen(f"http://{probe}/readyz", timeout=1) as answer:
                if answer.status == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"the upstream {name} not ready within {timeout:.0f} s:\n"
                                     f"{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def kuberay_operator(cp: ControlPlane, binary: Path, workdir: Path) -> Iterator[Path]:
    """KubeRay's ``ray-operator`` against ``cp`` until the block ends (its feature gates at their
    defaults, every namespace watched). Yields its log file."""
    probe = f"127.0.0.1:{free_port()}"
    log = workdir / "ray-operator.log"
    command = [str(binary), f"--kubeconfig={cp.kubeconfig('admin')}", "--enable-leader-election=false",
               f"--metrics-addr=127.0.0.1:{free_port()}", f"--health-probe-bind-address={probe}",
               "--log-stdout-encoder=console"]
    with upstream_operator("KubeRay operator", command, probe, log):
        yield log
