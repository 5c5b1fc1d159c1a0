"""Install gangq as the install manifests do, and wait until the controller's RBAC is in force."""

from __future__ import annotations

from gangq.controlplane import install as installer
from gangq.controlplane.launcher import ControlPlane
from tests.controlplane.kube import kubectl, wait_for


def install(cp: ControlPlane) -> None:
    installer.install(cp)
    wait_for(lambda: kubectl(cp, "auth", "can-i", "list", "jobsets.jobset.x-k8s.io", who="controller",
                             check=False).strip() == "yes", 30, "the controller's RBAC")
