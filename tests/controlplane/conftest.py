"""The real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok),
one per test session, for the real-control-plane tier.

The binaries are built from the Go modules of ``hack/control-plane`` on first use and cached
(``gangq.controlplane.build``). Where Go is not installed and nothing is cached, these tests are
skipped with the reason; with ``GANGQ_REQUIRE_REAL_CLUSTER=1`` (``.ci/run`` sets it) a missing
control plane fails them instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gangq.controlplane.build import bin_dir, go_binary, missing
from gangq.controlplane.launcher import ControlPlane, ControlPlaneError

REQUIRE_ENV = "GANGQ_REQUIRE_REAL_CLUSTER"


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if go_binary() is None and missing(bin_dir()):
        _unavailable("Go is not installed and the control-plane binaries are not built")
    cp = ControlPlane(workdir=tmp_path_factory.mktemp("control-plane"), audit=True)
    try:
        cp.start()
    except ControlPlaneError as err:
        _unavailable(f"the real control plane did not start: {err}")
    yield cp
    cp.stop()
