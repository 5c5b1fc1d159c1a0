"""The project's static checks are part of the test suite: ruff everywhere, mypy --strict on all of gangq."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff")
    assert ruff is not None, "ruff is a test dependency: pip install '.[test]'"
    result = _run(ruff, "check", "gangq", "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = _run(sys.executable, "-m", "mypy", "--strict", "gangq")
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_imports_no_shell() -> None:
    """The core stays pure: no Kubernetes client, no kopf, no aiohttp, no shell packages."""
    forbidden = ("kubernetes", "kopf", "aiohttp", "gangq.operator", "gangq.sandbox", "gangq.sim", "gangq.api")
    offenders = []
    for path in sorted((ROOT / "gangq" / "core").glob("*.py")):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(("import ", "from ")):
                module = stripped.split()[1]
                if any(module == f or module.startswith(f + ".") for f in forbidden):
                    offenders.append(f"{path.name}: {stripped}")
    assert not offenders, offenders


def test_the_controller_imports_nothing_of_the_lab() -> None:
    """``gangq run`` against a cluster loads neither test double: the API emulator
    (``gangq.sandbox``) and the real control plane built from Go modules (``gangq.controlplane``)
    are imported only when a quick start starts one. A fresh interpreter: this one has both."""
    check = ("import sys, gangq.operator.cli; "
             "print([m for m in sys.modules if m.startswith(('gangq.sandbox', 'gangq.controlplane'))])")
    result = _run(sys.executable, "-c", check)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout
