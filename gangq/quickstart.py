"""Which control plane a quick start runs (``gangq run --sandbox``, ``gangq sandbox up``).

Only the names: the controller's CLI offers the choice without importing either control plane, so
``gangq run`` against a cluster loads nothing of the lab (``gangq.sandbox``, ``gangq.controlplane``).
"""

import enum


class ControlPlaneKind(enum.StrEnum):
    """Which control plane ``gangq sandbox up`` and ``gangq run --sandbox`` start."""

    emulated = "emulated"  # gangq.sandbox: the API emulator with its simulated cluster
    real = "real"  # gangq.controlplane: etcd, kube-apiserver, controller-manager, scheduler, kwok
