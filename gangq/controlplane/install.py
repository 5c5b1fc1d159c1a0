"""Install gangq into a real control plane as an admin would with the install manifests: the CRDs
(server-side apply, validated by the API server), the controller's namespace and its RBAC from
``deploy/`` (``base/rbac.yaml``, and ``components/embedded-jobset/rbac-jobset-controller.yaml``
when gangq runs the embedded JobSet controller). The controller then runs as the install's ServiceAccount with
exactly those rights."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from gangq.controlplane.launcher import ControlPlane, ControlPlaneError
from gangq.controlplane.pki import CONTROLLER_NAMESPACE
from gangq.resources import crd_dir, data_dir


def rbac_files(*, embedded_jobset: bool = True) -> list[Path]:
    deploy = data_dir("deploy")
    files = [deploy / "base" / "rbac.yaml"]
    if embedded_jobset:
        files.append(deploy / "components" / "embedded-jobset" / "rbac-jobset-controller.yaml")
    return files


def rbac_documents(*, embedded_jobset: bool = True) -> list[dict[str, Any]]:
    files = rbac_files(embedded_jobset=embedded_jobset)
    return [d for path in files for d in yaml.safe_load_all(path.read_text()) if d]


def _kubectl(cp: ControlPlane, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(cp.kubectl), f"--kubeconfig={cp.kubeconfig('admin')}", *args],
        input=stdin, capture_output=True, text=True, timeout=120,
    )
    if done.returncode != 0:
        raise ControlPlaneError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def install(cp: ControlPlane, *, embedded_jobset: bool = True) -> None:
    """CRDs, the controller's namespace and RBAC; idempotent."""
    _kubectl(cp, "apply", "--server-side", "-k", str(crd_dir()))
    _kubectl(cp, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CONTROLLER_NAMESPACE}}
    documents = [namespace, *rbac_documents(embedded_jobset=embedded_jobset)]
    _kubectl(cp, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(documents))
