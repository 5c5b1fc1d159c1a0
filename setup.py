"""Build hook: compile the admission engine (``gangq/core``) with mypyc when possible.

The core is plain, strictly typed Python (``mypy --strict gangq/core``); mypyc, which ships with
mypy, compiles exactly that source into C extension modules, which roughly halves the engine's
CPU time per admission (benchmarks/engine_scaling.py reports ``core_compiled``). Nothing changes
in behaviour: ``tests/engine/test_compiled_core.py`` replays random worlds through the installed
core and the source tree and requires identical decisions.

The compiled build is optional, never required:

- ``GANGQ_PURE_PYTHON=1 pip install .`` installs the pure-Python core;
- editable installs (``pip install -e .``) always use the source, so that edits take effect;
- without mypyc or a C compiler the build warns and falls back to the pure-Python core.

Everything else (metadata, dependencies, entry points) lives in ``pyproject.toml``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CORE = HERE / "gangq" / "core"
PURE_ENV = "GANGQ_PURE_PYTHON"
# Not compiled: the package's __init__, and errors.py, whose SpecError the API layer subclasses
# (a compiled class cannot have interpreted subclasses).
_PURE = ("__init__.py", "errors.py")


def _warn(message: str) -> None:
    sys.stderr.write(f"gangq build: {message}\n")


def _editable() -> bool:
    """True for ``pip install -e`` (PEP 660 builds an editable wheel)."""
    return any(arg.startswith("editable_wheel") or arg == "develop" for arg in sys.argv[1:])


def _builds_extensions() -> bool:
    """Only the commands that build a wheel or extensions need mypyc's translation (the build
    backend also runs this script for metadata, where it would only cost time)."""
    return any(arg in ("bdist_wheel", "build", "build_ext", "install") for arg in sys.argv[1:])


def _core_extensions() -> list[Any]:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        _warn(f"{PURE_ENV} is set: installing the pure-Python core")
        return []
    if _editable() or not _builds_extensions():
        return []  # editable: the source tree is imported, compiled modules would shadow edits
    try:
        from mypyc.build import mypycify
    except ImportError as exc:  # pragma: no cover - mypy is a build requirement
        _warn(f"mypyc is not available ({exc}): installing the pure-Python core")
        return []
    modules = sorted(str(p.relative_to(HERE)) for p in CORE.glob("*.py") if p.name not in _PURE)
    try:
        return list(mypycify(modules, opt_level="3", debug_level="0"))
    except Exception as exc:  # a mypy error must not make gangq uninstallable
        _warn(f"mypyc could not translate gangq/core ({exc}): installing the pure-Python core")
        return []


class OptionalBuildExt(build_ext):
    """Build the compiled core, or none of it: a missing compiler falls back to the pure core.

    The core is all or nothing, because mypyc's per-module shims import one shared library: a
    partial build would leave modules that cannot be imported.
    """

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all, say
            _warn(f"building extensions failed ({exc}): installing the pure-Python core")
            self._remove_outputs(self.extensions)
            self.extensions = []

    def build_extensions(self) -> None:
        self.check_extensions_list(self.extensions)
        try:
            for ext in self.extensions:
                self.build_extension(ext)
        except Exception as exc:
            _warn(f"compiling gangq/core failed ({exc}): installing the pure-Python core")
            self._remove_outputs(self.extensions)
            self.extensions = []

    def _remove_outputs(self, extensions: list[Any]) -> None:
        for ext in extensions:
            path = Path(self.get_ext_fullpath(ext.name))
            if path.exists():
                path.unlink()


class BuildPyWithData(build_py):
    """Copy ``crds/``, ``policies/``, ``hack/control-plane/`` and ``deploy/`` into the package as
    ``gangq/_data/`` (see gangq/resources.py): ``gangq run`` installs those CRDs and quick-start
    queues, ``gangq simulate --scenario kueue-baseline`` reads its queues, and the real control
    plane is built from those Go modules and given the install's RBAC, from wherever gangq is
    installed."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # the checkout's directories are used as they are
        bundled = (
            ("crds", "crds"), ("policies", "policies"), ("control-plane", "hack/control-plane"), ("deploy", "deploy")
        )
        for name, where in bundled:
            source = HERE / where
            if source.is_dir():
                target = Path(self.build_lib) / "gangq" / "_data" / name
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(source, target)


setup(
    ext_modules=_core_extensions(),
    cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyWithData},
)
