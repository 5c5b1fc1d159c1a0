"""Install the CRDs of ``crds/`` and queue objects (``policies/quickstart.yaml``) into a cluster."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from gangq.operator.kube import ApiError, KubeClient, resource_path
from gangq.resources import crd_dir, policy_file

log = logging.getLogger(__name__)

CRD_DIR = crd_dir()
QUICKSTART = policy_file("quickstart.yaml")

_PLURALS = {
    "ResourceFlavor": ("gangq.io", "v1alpha1", "resourceflavors", False),
    "ClusterQueue": ("gangq.io", "v1alpha1", "clusterqueues", False),
    "Cohort": ("gangq.io", "v1alpha1", "cohorts", False),
    "LocalQueue": ("gangq.io", "v1alpha1", "localqueues", True),
    "WorkloadPriorityClass": ("gangq.io", "v1alpha1", "workloadpriorityclasses", False),
    "Namespace": ("", "v1", "namespaces", False),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets", True),
}


def crd_documents(paths: Iterable[Path] | None = None) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in ``paths`` (default: all YAML files of ``crds/``)."""
    files = sorted(CRD_DIR.glob("*.yaml")) if paths is None else list(paths)
    docs: list[dict[str, Any]] = []
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    return docs


async def _wait_served(client: KubeClient, crd: dict[str, Any], timeout: float = 10.0) -> None:
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("served", True))
    path = resource_path(spec["group"], version, spec["names"]["plural"])
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            await client.request("GET", path, params={"limit": "1"})
            return
        except ApiError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def install_crds(client: KubeClient, paths: Iterable[Path] | None = None) -> list[str]:
    """Create or update the CRDs; wait until each is served. Returns their names."""
    names = []
    base = resource_path("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    docs = crd_documents(paths)
    for crd in docs:
        name = crd["metadata"]["name"]
        try:
            await client.create(base, crd)
        except ApiError as err:
            if err.status != 409:
                raise
            current = await client.get(f"{base}/{name}")
            body = dict(crd)
            body["metadata"] = {**crd["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
            await client.replace(f"{base}/{name}", body)
        names.append(name)
    for crd in docs:
        await _wait_served(client, crd)
    log.info("installed %d CRDs: %s", len(names), ", ".join(names))
    return names


async def apply_objects(client: KubeClient, docs: Iterable[dict[str, Any]]) -> None:
    """Create the objects (queue configuration, namespaces, JobSets); existing ones are replaced."""
    for doc in docs:
        kind = doc.get("kind", "")
        if kind not in _PLURALS:
            raise ValueError(f"cannot apply kind {kind!r}")
        group, version, plural, namespaced = _PLURALS[kind]
        meta = doc.get("metadata") or {}
        ns = (meta.get("namespace") or "default") if namespaced else None
        base = resource_path(group, version, plural, ns)
        try:
            await client.create(base, doc)
        except ApiError as err:
            if err.status != 409:
                raise
            current = await client.get(f"{base}/{meta['name']}")
            body = dict(doc)
            body["metadata"] = {**meta, "resourceVersion": current["metadata"]["resourceVersion"]}
            await client.replace(f"{base}/{meta['name']}", body)


def load_yaml(path: Path | str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if isinstance(d, dict)]
