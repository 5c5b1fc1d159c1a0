"""The project's static checks are part of the test suite: ruff everywhere, mypy --strict on all of gangq."""

from __future__ import annotations

import ast
import re
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


# What each part of gangq may import of the others (a module directly in gangq/ counts as a part);
# no part reaches itself through others (checked below). The engine imports nothing of gangq; object
# models, kind descriptions and the reconciler's logic never reach up into the controller; the lab
# (the emulator, the real control plane) is imported by the controller only inside the functions
# that start a quick start (checked below). In the lab the emulator sits above the real control
# plane: it uses the node specs, fault rules and ports kept there, and `gangq sandbox up
# --control-plane real` starts the real one.
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "api": {"core"},
    "jobset": {"api", "core"},
    "integrations": {"api", "core", "jobset"},
    "observability": {"api", "core"},
    "sim": {"api", "core", "observability", "resources"},
    "operator": {"api", "core", "integrations", "jobset", "observability", "resources", "gc_tuning", "quickstart",
                 "sandbox", "controlplane"},
    "sandbox": {"gc_tuning", "quickstart", "controlplane"},
    "controlplane": {"resources"},
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


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (node → the nodes it points to) as the path that closes it, or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                return [*path[path.index(nxt):], nxt]
            if nxt not in done and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        if node not in done and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_every_part_imports_only_the_layers_below_it() -> None:
    cycle = _cycle(LAYERS)
    assert cycle is None, f"LAYERS has a cycle: {' -> '.join(cycle)}"
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


def test_no_module_imports_itself_through_others() -> None:
    """No import cycle between the modules of gangq, counting every import: at module level, inside a
    function, or for types only (under TYPE_CHECKING). A cycle that only a deferred import keeps from
    failing still ties the modules' jobs together."""
    modules: dict[str, Path] = {}
    for path in sorted((ROOT / "gangq").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def module_of(name: str) -> str:  # "gangq.core.Engine" -> "gangq.core"; ends at "gangq"
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported: list[str] = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported += [f"{node.module}.{a.name}" for a in node.names]
        graph[name] = {module_of(n) for n in imported if n.startswith("gangq.")} - {name}
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_every_retry_reason_is_asked_for_and_documented() -> None:
    """Every retry of a ClusterQueue and every repeated cycle names a RetryReason: each reason is
    asked for at some call site of the engine and explained in docs/engine.md's Retry reasons."""
    from gangq.core.retries import RetryReason

    core = ROOT / "gangq" / "core"
    source = "\n".join(p.read_text() for p in core.glob("*.py") if p.name != "retries.py")
    used = set(re.findall(r"RetryReason\.([A-Z_]+)", source))
    assert used == {r.name for r in RetryReason}, "a reason no call site asks for, or a call site with an unknown one"
    doc = (ROOT / "docs" / "engine.md").read_text()
    for reason in RetryReason:
        assert f"| `{reason.name}` |" in doc, f"docs/engine.md's Retry reasons table lacks {reason.name}"


def test_no_retry_bypasses_the_reasons() -> None:
    """Rule modules ask for retries only through EngineState's reasoned methods."""
    for path in (ROOT / "gangq" / "core").glob("*.py"):
        text = path.read_text()
        assert "_retry_queue(" not in text or path.name == "state.py", path.name
        assert "cycle_again += 1" not in text or path.name == "state.py", path.name
