"""The real control plane behind ``gangq sandbox up --control-plane real`` and
``gangq run --sandbox --control-plane real``: start it, write its kubeconfigs, stop it on
Ctrl-C / SIGTERM."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from gangq.controlplane.launcher import ControlPlane


def controller_kubeconfig_path(admin: Path) -> Path:
    """Where the controller's kubeconfig goes, beside the admin one: ``X.yaml`` → ``X-controller.yaml``."""
    return admin.with_name(f"{admin.stem}-controller{admin.suffix or '.yaml'}")


def start(
    *, port: int, kubeconfig_out: Path, nodes: str | None, announce: Callable[[str], None]
) -> ControlPlane:
    """Start the control plane and write both kubeconfigs: the admin's at ``kubeconfig_out`` and the
    controller's (the install's ServiceAccount) beside it."""
    cp = ControlPlane(port=port, nodes=nodes, announce=announce)
    cp.start()
    cp.kubeconfig("admin", kubeconfig_out)
    cp.kubeconfig("controller", controller_kubeconfig_path(kubeconfig_out))
    return cp


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve(*, port: int, kubeconfig_out: Path, nodes: str | None, announce: Callable[[str], None]) -> None:
    """``gangq sandbox up --control-plane real``: run until SIGINT or SIGTERM (also during startup),
    then stop every process and remove the temporary files."""
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    cp: ControlPlane | None = None
    try:
        cp = start(port=port, kubeconfig_out=kubeconfig_out, nodes=nodes, announce=announce)
        announce(f"export KUBECONFIG={kubeconfig_out}")
        announce(f"controller kubeconfig (the install's RBAC): {controller_kubeconfig_path(kubeconfig_out)}")
        while True:
            time.sleep(1.0)
            cp.check()
    except KeyboardInterrupt:
        pass
    finally:
        if cp is not None:
            announce("stopping the control plane")
            cp.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
