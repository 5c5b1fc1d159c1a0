"""A real Kubernetes control plane on this machine: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, built from their Go modules (``hack/control-plane``) and started on
loopback. It is the reference that the emulated sandbox (``gangq.sandbox``) is held to.

It imports nothing of the emulator. What both control planes use lives here, below the emulator:
the ``--nodes`` syntax (``nodespec``), the fault rules (``faults``), free ports and stopping a
process (``processes``)."""
