"""A control plane told not to build its missing binaries names the command that builds them, and
that command exists (its ``--help`` answers without building anything)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gangq.controlplane.build import BIN_ENV
from gangq.controlplane.launcher import ControlPlane, ControlPlaneError


def test_missing_binaries_name_the_command_that_builds_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BIN_ENV, str(tmp_path / "bin"))
    with pytest.raises(ControlPlaneError) as info:
        ControlPlane(workdir=tmp_path / "work").start(build_missing=False)
    hint = re.search(r"build them with: python (-m [\w.]+)\)", str(info.value))
    assert hint, str(info.value)
    command = [sys.executable, *hint.group(1).split(), "--help"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python {hint.group(1)}"), done.stdout
