"""Build the upstream controllers' tools from the Go modules pinned in ``hack/upstream``.

``hack/upstream/kueue`` pins ``sigs.k8s.io/kueue`` and names, as ``tool`` directives, the two
programs of Kueue's scheduler performance test: its runner
(``test/performance/scheduler/runner``: generates the queues and workloads, plays the workloads'
runtimes, records ``summary.yaml``) and ``minimalkueue`` (Kueue's core controllers and scheduler
without webhooks or job integrations). ``benchmarks/vs_kueue.py`` runs them side by side with
gangq on the same control plane.

The binaries go into a cache keyed like the control plane's (:mod:`gangq.controlplane.build`):
a digest of the module's ``go.mod``/``go.sum`` and of the Go version,
``~/.cache/gangq/upstream/kueue-<key>/bin``. Only Go modules are fetched, through the Go module
proxy, with the machine's Go (``GOTOOLCHAIN=local``). This is for benchmarks run from a checkout:
``hack/upstream`` is not bundled into the installed package.

``AUTOSCALER_TOOLS`` are built the same way (``build_operator``, ``python -m
gangq.controlplane.upstream karpenter``; .ci/run builds them with the operators): Karpenter's kwok
provider (:mod:`gangq.controlplane.karpenter` runs it), kept apart because it runs nodes, not a
queued kind.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from gangq.controlplane.build import (
    Binary,
    BuildError,
    _go_env,
    _go_version,
    build_binaries,
    go_binary,
    run_cli,
)

log = logging.getLogger(__name__)

UPSTREAM_DIR = Path(__file__).resolve().parents[2] / "hack" / "upstream"
KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_TOOLS: tuple[Binary, ...] = (
    Binary("runner", "kueue", f"{KUEUE_MODULE}/test/performance/scheduler/runner"),
    Binary("minimalkueue", "kueue", f"{KUEUE_MODULE}/test/performance/scheduler/minimalkueue"),
)
JOBSET_MODULE = "sigs.k8s.io/jobset"
# The controller manager's main package is the module's root (``main.go``): the JobSet and pod
# reconcilers and the webhooks, as the release image runs them.
JOBSET_TOOLS: tuple[Binary, ...] = (Binary("jobset-manager", "jobset", JOBSET_MODULE),)
# The operators of the other kinds gangq queues, each the main package its release image runs.
OPERATOR_TOOLS: dict[str, tuple[Binary, ...]] = {
    "kuberay": (Binary("ray-operator", "kuberay", "github.com/ray-project/kuberay/ray-operator"),),
    "training-operator": (Binary("training-operator", "training-operator",
                                 "github.com/kubeflow/training-operator/cmd/training-operator.v1"),),
    "trainer": (Binary("trainer-controller-manager", "trainer",
                       "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"),),
}
# Node autoscalers, built like the operators but kept out of OPERATOR_TOOLS, which CI builds on
# every run: Karpenter with its kwok cloud provider (``kwok/``: the core controllers and a cloud
# provider whose instances are kwok nodes).
AUTOSCALER_TOOLS: dict[str, tuple[Binary, ...]] = {
    "karpenter": (Binary("karpenter-kwok", "karpenter", "sigs.k8s.io/karpenter/kwok"),),
}


def module_dir(name: str = "kueue") -> Path:
    return UPSTREAM_DIR / name


def pinned_version(name: str = "kueue", module: str = KUEUE_MODULE) -> str:
    """The version of ``module`` that ``hack/upstream/<name>/go.mod`` requires, e.g. ``v0.19.0``."""
    text = (module_dir(name) / "go.mod").read_text()
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if found is None:
        raise BuildError(f"{module} is not required in {module_dir(name) / 'go.mod'}")
    return found.group(1)


def cache_key(name: str = "kueue", go: str | None = None) -> str:
    digest = hashlib.sha256()
    for path in sorted(module_dir(name).glob("go.*")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    go = go or go_binary()
    if go is not None:
        digest.update(_go_version(go).encode())
    return digest.hexdigest()[:16]


def bin_dir(name: str = "kueue", go: str | None = None) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "gangq" / "upstream" / f"{name}-{cache_key(name, go)}" / "bin"


def build_kueue(progress: Callable[[str], None] | None = None) -> Path:
    """Build Kueue's performance runner and minimalkueue if missing; return their directory."""
    return build_binaries(KUEUE_TOOLS, UPSTREAM_DIR, bin_dir("kueue"), progress)


def build_jobset(progress: Callable[[str], None] | None = None) -> Path:
    """Build the upstream JobSet controller manager if missing; return its directory."""
    return build_binaries(JOBSET_TOOLS, UPSTREAM_DIR, bin_dir("jobset"), progress)


def build_operator(name: str, progress: Callable[[str], None] | None = None) -> Path:
    """Build the upstream operator or autoscaler ``name`` (a key of :data:`OPERATOR_TOOLS` or
    :data:`AUTOSCALER_TOOLS`) if missing; return its directory."""
    tools = OPERATOR_TOOLS[name] if name in OPERATOR_TOOLS else AUTOSCALER_TOOLS[name]
    return build_binaries(tools, UPSTREAM_DIR, bin_dir(name), progress)


def source_dir(name: str = "kueue", module: str = KUEUE_MODULE) -> Path:
    """The pinned module's source in the Go module cache (downloaded if needed): its CRDs and its
    performance configurations are read from there."""
    go = go_binary()
    if go is None:
        raise BuildError("Go is not installed: cannot locate the Kueue module's source")
    done = subprocess.run(
        [go, "mod", "download", "-json", module], cwd=module_dir(name), env=_go_env(), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise BuildError(f"go mod download {module} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    found = re.search(r'"Dir":\s*"([^"]+)"', done.stdout)
    if found is None:
        raise BuildError(f"go mod download {module} gave no source directory:\n{done.stdout[-2000:]}")
    return Path(found.group(1))


def main(argv: list[str] | None = None) -> None:
    """``python -m gangq.controlplane.upstream [kueue|jobset|kuberay|training-operator|trainer|karpenter]``:
    build that upstream's tools (Kueue's by default) if missing, print where."""
    import sys

    which = (sys.argv[1:] if argv is None else argv) or ["kueue"]
    if which[0] in OPERATOR_TOOLS or which[0] in AUTOSCALER_TOOLS:
        name = which[0]
        run_cli(f"building the upstream {name}", lambda progress: build_operator(name, progress),
                lambda target: f"{name} in {target}")
    elif which[0] == "jobset":
        run_cli("building the upstream JobSet controller", build_jobset,
                lambda target: f"JobSet {pinned_version('jobset', JOBSET_MODULE)} controller in {target}")
    elif which[0] == "kueue":
        run_cli("building Kueue's performance tools", build_kueue,
                lambda target: f"Kueue {pinned_version()} tools in {target}")
    else:
        names = "|".join(["kueue", "jobset", *OPERATOR_TOOLS, *AUTOSCALER_TOOLS])
        raise SystemExit(f"usage: python -m gangq.controlplane.upstream [{names}], not {which[0]!r}")


if __name__ == "__main__":
    main()
