"""Shared fixtures: the sandbox (Kubernetes API emulator + simulated cluster) and the real control
plane for end-to-end tests.

- `sandbox`: a fresh in-process sandbox per test (4 GPU nodes, kubelet runs pods for 1 s by default).
- `sandbox_session`: one sandbox shared by the whole session (tests must use their own namespaces).
- `sandbox_factory`: build sandboxes with options, e.g. `sandbox_factory(nodes="2x{cpu:4}", cluster=False)`.
Each yields a `gangq.sandbox.runtime.Sandbox`: `.kubeconfig` (a path), `.url`, `.env()`, and in thread
mode `.store` / `.faults` / `.cluster` (touch them through `.call(fn, ...)`).
- `control_plane`: one real control plane (etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler, kwok) per session, built from hack/control-plane on first use (cached).
- `cluster_factory`: the end-to-end tests' cluster, parametrized `emulated` (a sandbox) / `real`
  (the session's control plane with gangq installed, reset for the test): `cluster_factory(nodes=...)`
  or `cluster_factory(cluster=False)` (no nodes). See tests/clusters.py.

Where Go is not installed and nothing is cached, the real-control-plane tests are skipped with the
reason; with GANGQ_REQUIRE_REAL_CLUSTER=1 (.ci/run sets it) a missing control plane fails them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from gangq.controlplane.launcher import ControlPlane
    from gangq.sandbox.runtime import Sandbox
    from tests.clusters import RealCluster

REQUIRE_ENV = "GANGQ_REQUIRE_REAL_CLUSTER"


@pytest.fixture
def sandbox_factory() -> Iterator[Callable[..., Sandbox]]:
    from gangq.sandbox.runtime import Sandbox

    started: list[Sandbox] = []

    def make(**kwargs: Any) -> Sandbox:
        sb = Sandbox(**kwargs).start()
        started.append(sb)
        return sb

    yield make
    for sb in reversed(started):
        sb.stop()


@pytest.fixture
def sandbox(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory()


@pytest.fixture(scope="session")
def sandbox_session() -> Iterator[Sandbox]:
    from gangq.sandbox.runtime import Sandbox

    with Sandbox() as sb:
        yield sb


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1)")
    pytest.skip(reason)


def required_tool(name: str) -> str:
    """The path of a tool of Debian's ``prometheus`` package, or the tier's skip (failure under
    REQUIRE_ENV, which asks for the whole real tier)."""
    import shutil

    path = shutil.which(name)
    if path is None:
        _unavailable(f"{name} is not installed (Debian: apt-get install prometheus)")
    assert path is not None
    return path


def require_real_control_plane() -> None:
    """The tier's skip (failure under REQUIRE_ENV) where no real control plane can be built."""
    from gangq.controlplane.build import bin_dir, go_binary, missing

    if go_binary() is None and missing(bin_dir()):
        _unavailable("Go is not installed and the control-plane binaries are not built")


def start_control_plane(workdir: Path, *, audit: bool = False) -> ControlPlane:
    """A real control plane in ``workdir``, or the tier's skip (failure under REQUIRE_ENV)."""
    from gangq.controlplane.launcher import ControlPlane, ControlPlaneError

    require_real_control_plane()
    cp = ControlPlane(workdir=workdir, audit=audit)
    try:
        cp.start()
    except ControlPlaneError as err:
        _unavailable(f"the real control plane did not start: {err}")
    return cp


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = start_control_plane(tmp_path_factory.mktemp("control-plane"), audit=True)
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def real_cluster(control_plane: ControlPlane) -> RealCluster:
    """The session's control plane with gangq installed as the install manifests do."""
    from tests.clusters import RealCluster
    from tests.controlplane.install import install

    install(control_plane)
    return RealCluster(control_plane)


@pytest.fixture(params=["emulated", "real"])
def cluster_factory(
    request: pytest.FixtureRequest, sandbox_factory: Callable[..., Sandbox]
) -> Iterator[Callable[..., Sandbox | RealCluster]]:
    """The end-to-end tests' cluster on each control plane (see the module docstring)."""
    if request.param == "emulated":
        yield sandbox_factory
        return
    from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC

    real: RealCluster = request.getfixturevalue("real_cluster")

    def make(*, nodes: str | None = None, cluster: bool = True, kubelet: Any = None) -> RealCluster:
        # kubelet: the emulated kubelet's options; kwok's Stages give pods the same behaviour.
        real.reset((nodes or DEFAULT_NODE_SPEC) if cluster else None)
        return real

    yield make
    real.cp.replace_nodes(DEFAULT_NODE_SPEC)  # the other real-control-plane tests expect the default nodes


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test on the session's real control plane goes to one pytest-xdist worker
    (``--dist loadgroup``): one control plane per run, not one per worker."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        fixtures = getattr(item, "fixturenames", ())
        if "real" in params.values() or any(f.endswith(("control_plane", "real_cluster")) for f in fixtures):
            item.add_marker(pytest.mark.xdist_group("real-control-plane"))
