"""The project's static checks are part of the test suite: ruff everywhere, mypy --strict on all of gangq."""

from __future__ import annotations

import ast
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


# What each part of gangq may import of the others (a module directly in gangq/ counts as a part).
# The engine imports nothing of gangq; object models, kind descriptions and the reconciler's logic
# never reach up into the controller; the lab (the emulator, the real control plane) is imported by
# the controller only inside the functions that start a quick start (checked below).
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "api": {"core"},
    "jobset": {"api", "core"},
    "integrations": {"api", "core", "jobset"},
    "observability": {"core"},
    "sim": {"api", "core", "observability", "resources"},
    "operator": {"api", "core", "integrations", "jobset", "observability", "resources", "gc_tuning", "quickstart",
                 "sandbox", "controlplane"},
    # `gangq sandbox up --control-plane real` starts the real control plane, which reuses the
    # emulator's node specs, fault rules and free_port: the one cycle left between two lab packages
    "sandbox": {"gc_tuning", "quickstart", "controlplane"},
    "controlplane": {"resources", "sandbox"},
    "resources": set(),
    "gc_tuning": set(),
    "quickstart": set(),
}
LAB = ("sandbox", "controlplane")


def _gangq_imports(path: Path) -> list[tuple[str, bool]]:
    """(the part of gangq imported, whether at module level) for every import in ``path``."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
        out += [(n.split(".")[1], id(node) in top) for n in names if n.startswith("gangq.")]
    return out


def test_every_part_imports_only_the_layers_below_it() -> None:
    offenders = []
    for path in sorted((ROOT / "gangq").rglob("*.py")):
        part = path.relative_to(ROOT / "gangq").parts[0].removesuffix(".py")
        if part in ("cli", "__init__", "__main__", "_data"):
            continue
        assert part in LAYERS, f"gangq/{part} is in no layer of LAYERS: add it"
        for imported, module_level in _gangq_imports(path):
            if imported == part:
                continue
            if imported not in LAYERS[part]:
                offenders.append(f"{path.relative_to(ROOT)} imports gangq.{imported}")
            elif part == "operator" and imported in LAB and module_level:
                offenders.append(f"{path.relative_to(ROOT)} imports gangq.{imported} at module level")
    assert not offenders, offenders
