"""Build the control-plane binaries from the Go modules pinned in ``hack/control-plane``.

Four wrapper modules pin the components, each in its own module so that their dependency
graphs do not mix (etcd, kwok and Helm pin other versions of shared libraries than Kubernetes does):

- ``kubernetes``: kube-apiserver, kube-controller-manager, kube-scheduler and kubectl;
- ``etcd``: the etcd server;
- ``kwok``: kwok, which runs simulated nodes and pods against the API server;
- ``helm``: Helm, which lints, renders and installs the chart ``deploy/helm/gangq``.

The binaries go into a cache keyed by what pins them (every ``go.mod`` and ``go.sum`` and the
Go version), ``~/.cache/gangq/control-plane/<key>/bin``, or ``$GANGQ_CONTROL_PLANE_BIN`` when set.
A build with all binaries present does nothing; a build writes into a temporary directory and
renames it into place, so an interrupted build never leaves a half-filled cache.
Nothing is fetched but Go modules, through the Go module proxy (``GOTOOLCHAIN=local``: the
machine's Go, never a downloaded toolchain).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from gangq.resources import data_dir

log = logging.getLogger(__name__)

BIN_ENV = "GANGQ_CONTROL_PLANE_BIN"
KUBERNETES_VERSION = "v1.36.3"


@dataclass(frozen=True)
class Binary:
    """One binary: its name in the cache, the wrapper module that pins it and its Go package."""

    name: str
    module: str
    package: str


BINARIES: tuple[Binary, ...] = (
    Binary("etcd", "etcd", "go.etcd.io/etcd/server/v3"),
    Binary("kube-apiserver", "kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver"),
    Binary("kube-controller-manager", "kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager"),
    Binary("kube-scheduler", "kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler"),
    Binary("kubectl", "kubernetes", "k8s.io/kubernetes/cmd/kubectl"),
    Binary("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok"),
    Binary("helm", "helm", "helm.sh/helm/v4/cmd/helm"),
)
HELM_MODULE = "helm.sh/helm/v4"


class BuildError(RuntimeError):
    """Go is missing, or a component did not build."""


def modules_dir() -> Path:
    """``hack/control-plane`` of the checkout, or its copy bundled in the installed package."""
    return data_dir("control-plane")


def go_binary() -> str | None:
    return shutil.which("go")


def _go_version(go: str) -> str:
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True, env=_go_env())
    return out.stdout.strip()


def cache_key(go: str | None = None) -> str:
    """A digest of every pinning file and of the Go version: a change of any pin builds anew."""
    digest = hashlib.sha256()
    root = modules_dir()
    for path in sorted(root.glob("*/go.*")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    go = go or go_binary()
    if go is not None:
        digest.update(_go_version(go).encode())
    return digest.hexdigest()[:16]


def bin_dir(go: str | None = None) -> Path:
    """Where the binaries are (or will be) for the current pins."""
    override = os.environ.get(BIN_ENV)
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "gangq" / "control-plane" / cache_key(go) / "bin"


def missing(directory: Path) -> list[str]:
    return [b.name for b in BINARIES if not (directory / b.name).is_file()]


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "local"
    env.setdefault("CGO_ENABLED", "0")
    return env


def pinned_version(module: str, path: str) -> str:
    """The version of ``path`` that ``module``'s ``go.mod`` requires."""
    for line in (modules_dir() / module / "go.mod").read_text().splitlines():
        words = line.split()
        if path in words and words.index(path) + 1 < len(words):
            return words[words.index(path) + 1]
    raise BuildError(f"{module}/go.mod does not require {path}")


def _ldflags(binary: Binary) -> str:
    """Stamp the Kubernetes binaries and Helm with their release, as their upstream builds do, so
    that ``kubectl version`` shows the server's real version and ``helm version`` the pinned one
    rather than a development one."""
    if binary.module == "helm":
        pkg = "helm.sh/helm/v4/internal/version"
        return f"-s -w -X {pkg}.version={pinned_version('helm', HELM_MODULE)} -X {pkg}.gitTreeState=clean"
    if binary.module != "kubernetes":
        return "-s -w"
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    stamps = {
        "gitVersion": KUBERNETES_VERSION,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    flags = " ".join(f"-X {pkg}.{key}={value}" for key, value in stamps.items())
    return f"-s -w {flags}"


def build_binaries(
    binaries: tuple[Binary, ...] | list[Binary],
    modules: Path,
    target: Path,
    progress: Callable[[str], None] | None = None,
    ldflags: Callable[[Binary], str] = lambda _binary: "-s -w",
) -> Path:
    """Build each of ``binaries`` missing from ``target`` (``go build`` in ``modules/<module>``)
    into a staging directory renamed into place, so an interrupted build never leaves a
    half-filled cache. Returns ``target``."""
    say = progress or log.info
    go = go_binary()
    todo = [b for b in binaries if not (target / b.name).is_file()]
    if not todo:
        return target
    if go is None:
        raise BuildError(f"Go is not installed: cannot build {', '.join(b.name for b in todo)} into {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="bin.", dir=target.parent))
    try:
        if target.is_dir():
            for present in target.iterdir():
                shutil.copy2(present, staging / present.name)
        for index, binary in enumerate(todo, 1):
            say(f"building {binary.name} ({index}/{len(todo)}) from {binary.package}")
            started = time.monotonic()
            cmd = [go, "build", "-trimpath", "-ldflags", ldflags(binary), "-o", str(staging / binary.name)]
            cmd.append(binary.package)
            done = subprocess.run(cmd, cwd=modules / binary.module, env=_go_env(), capture_output=True, text=True)
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
                raise BuildError(f"building {binary.name} failed:\n{tail}")
            say(f"built {binary.name} in {time.monotonic() - started:.0f} s")
        if target.is_dir():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def build(progress: Callable[[str], None] | None = None) -> Path:
    """Build every missing binary into the cache and return its directory.

    Raises :class:`BuildError` when Go is not installed or a component fails to build (the
    message carries the end of Go's output)."""
    return build_binaries(BINARIES, modules_dir(), bin_dir(go_binary()), progress, _ldflags)


def build_only(names: Collection[str], progress: Callable[[str], None] | None = None) -> Path:
    """Build those of the binaries ``names`` that are missing into the cache (e.g. helm alone for
    the chart's offline tests, which need no control plane) and return its directory."""
    chosen = [b for b in BINARIES if b.name in names]
    return build_binaries(chosen, modules_dir(), bin_dir(go_binary()), progress, _ldflags)


def run_cli(what: str, build_fn: Callable[[Callable[[str], None]], Path], done: Callable[[Path], str]) -> None:
    """Build with a progress spinner on stderr, print the binaries' directory on stdout; exit 1
    with the error on a :class:`BuildError`. ``what`` names the work, ``done`` the result line."""
    import sys

    from rich.console import Console

    console = Console(stderr=True)
    started = time.monotonic()
    try:
        with console.status(what) as status:

            def progress(line: str) -> None:
                console.log(line)
                status.update(line)

            target = build_fn(progress)
    except BuildError as err:
        console.print(f"[red]error:[/red] {err}", highlight=False)
        sys.exit(1)
    console.log(f"{done(target)} ({time.monotonic() - started:.0f} s)")
    print(target)


def main(argv: list[str] | None = None) -> None:
    """``python -m gangq.controlplane.build``: build what is missing, print where it is."""
    import argparse

    argparse.ArgumentParser(
        prog="python -m gangq.controlplane.build",
        description="Build those of the real control plane's binaries ("
        + ", ".join(b.name for b in BINARIES) + ") that are missing, from the Go modules pinned in "
        f"hack/control-plane, into ${BIN_ENV} or ~/.cache/gangq/control-plane/<key>/bin, and print "
        "that directory.",
    ).parse_args(argv)
    run_cli("building the control plane", lambda progress: build(progress=progress),
            lambda target: f"control-plane binaries in {target}")


if __name__ == "__main__":
    main()
