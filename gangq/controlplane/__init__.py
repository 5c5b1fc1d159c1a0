"""A real Kubernetes control plane on this machine: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, built from their Go modules (``hack/control-plane``) and started on
loopback. It is the reference that the emulated sandbox (``gangq.sandbox``) is held to."""

import enum


class ControlPlaneKind(enum.StrEnum):
    """Which control plane ``gangq sandbox up`` and ``gangq run --sandbox`` start."""

    emulated = "emulated"  # gangq.sandbox: the API emulator with its simulated cluster
    real = "real"  # gangq.controlplane: etcd, kube-apiserver, controller-manager, scheduler, kwok
