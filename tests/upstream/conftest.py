"""The upstream tier: gangq held to upstream controllers built from ``hack/upstream`` (cached),
on the session's real control plane (``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangq.controlplane import upstream
from tests.conftest import _unavailable, require_real_control_plane


@pytest.fixture(scope="session")
def jobset_manager() -> Path:
    """The upstream JobSet controller manager, built from the pin when missing: the session builds it
    as it builds the control plane (Go needed the first time only)."""
    from gangq.controlplane.build import BuildError, go_binary

    require_real_control_plane()
    if go_binary() is None and not (upstream.bin_dir("jobset") / "jobset-manager").is_file():
        _unavailable("Go is not installed and the upstream JobSet controller is not built")
    try:
        return upstream.build_jobset() / "jobset-manager"
    except BuildError as err:
        _unavailable(f"the upstream JobSet controller did not build: {err}")
        raise
