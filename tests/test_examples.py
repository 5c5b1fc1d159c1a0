"""The files the README and the docs tell people to apply are applied, with kubectl, to each control
plane serving gangq's CRDs (the real one validating them): they cannot rot into something the API
server rejects."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gangq.operator.install import CRD_DIR, crd_documents
from tests.clusters import Cluster, is_real

ROOT = Path(__file__).resolve().parent.parent
APPLIED = sorted(
    p
    for p in [*ROOT.glob("policies/*.yaml"), *ROOT.glob("examples/jobsets/*.yaml"), *ROOT.glob("examples/jobs/*.yaml"),
              *ROOT.glob("examples/pods/*.yaml")]
    if any(isinstance(d, dict) and d.get("kind") for d in yaml.safe_load_all(p.read_text()))
)


def _kubectl(sb: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(sb.kubeconfig), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_readme_names_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "examples/jobsets/hello-gang.yaml" in readme
    for rel in ("examples/jobsets/hello-gang.yaml", "policies/quickstart.yaml", "policies/operator-config.yaml"):
        assert (ROOT / rel).exists(), rel
    assert len(APPLIED) >= 5


@pytest.mark.parametrize("path", APPLIED, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_applies_to_a_cluster_with_gangq_crds(cluster_factory: Callable[..., Cluster], path: Path) -> None:
    sb = cluster_factory(cluster=False)
    if not is_real(sb):  # the real control plane has gangq installed
        for doc in crd_documents(sorted(CRD_DIR.glob("*.yaml"))):
            sb.call(sb.store.create, "apiextensions.k8s.io", "customresourcedefinitions", doc)
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    for ns in sorted({d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")} - {"default"}):
        assert _kubectl(sb, "create", "namespace", ns).returncode == 0
    result = _kubectl(sb, "apply", "-f", str(path))
    assert result.returncode == 0, result.stderr
    # Every object is there, as applied (names and kinds), and reads back.
    for doc in docs:
        meta = doc["metadata"]
        args = ["get", doc["kind"].lower(), meta["name"], "-o", "yaml"]
        if meta.get("namespace"):
            args += ["-n", meta["namespace"]]
        got = _kubectl(sb, *args)
        assert got.returncode == 0, got.stderr
        assert yaml.safe_load(got.stdout)["metadata"]["name"] == meta["name"]
