"""Rendered install manifests (kubectl kustomize, offline), shared by the deploy tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("plain", "external-jobset", "no-webhook")
_CACHE: dict[str, list[dict[str, Any]]] = {}


def kustomize(path: Path) -> list[dict[str, Any]]:
    key = str(path)
    if key not in _CACHE:
        kubectl = shutil.which("kubectl") or "/usr/bin/kubectl"
        result = subprocess.run(
            [kubectl, "kustomize", str(path)], capture_output=True, text=True, check=False, timeout=60
        )
        assert result.returncode == 0, f"kubectl kustomize {path.relative_to(ROOT)} failed:\n{result.stderr}"
        _CACHE[key] = [d for d in yaml.safe_load_all(result.stdout) if d]
    return _CACHE[key]


@pytest.fixture(params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    name: str = request.param
    return name, kustomize(DEPLOY / "overlays" / name)


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
