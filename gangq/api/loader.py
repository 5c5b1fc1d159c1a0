"""Load queue configurations (multi-document YAML, the files an admin ``kubectl apply``-s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gangq.api import queues
from gangq.api.meta import Meta
from gangq.core.errors import SpecError
from gangq.core.model import ClusterQueueSpec, CohortSpec, FlavorSpec, LocalQueueSpec


class QueueConfig:
    """The queue objects of one or more YAML files, as core specs."""

    def __init__(self) -> None:
        self.flavors: dict[str, FlavorSpec] = {}
        self.cohorts: dict[str, CohortSpec] = {}
        self.cluster_queues: dict[str, ClusterQueueSpec] = {}
        self.local_queues: dict[str, LocalQueueSpec] = {}
        self.priority_classes: dict[str, int] = {}

    def problems(self) -> list[str]:
        """Warnings: references to objects that the configuration does not define."""
        out = []
        for cq in self.cluster_queues.values():
            for gi, group in enumerate(cq.resource_groups):
                for fi, flavor in enumerate(group.flavors):
                    if flavor.name not in self.flavors:
                        out.append(
                            f"ClusterQueue {cq.name!r}: spec.resourceGroups[{gi}].flavors[{fi}].name: "
                            f"ResourceFlavor {flavor.name!r} is not defined (the queue stays inactive until it is)"
                        )
        for lq in self.local_queues.values():
            if lq.cluster_queue not in self.cluster_queues:
                out.append(f"LocalQueue {lq.key}: spec.clusterQueue: ClusterQueue {lq.cluster_queue!r} is not defined")
        return out


def load_documents(source: str | Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a file path or of YAML text."""
    text = Path(source).read_text() if isinstance(source, Path) or "\n" not in str(source) else str(source)
    docs = [d for d in yaml.safe_load_all(text) if d]
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise SpecError("document", str(i), "", "is not a mapping")
    return docs


def parse_queue_config(docs: list[dict[str, Any]], into: QueueConfig | None = None) -> QueueConfig:
    """Parse queue objects into core specs; raises SpecError naming object and field."""
    config = into or QueueConfig()
    for doc in docs:
        kind = str(doc.get("kind", ""))
        meta = Meta(doc)
        name = meta.name
        api_version = doc.get("apiVersion", "")
        if not name:
            raise SpecError(kind or "object", "?", "metadata.name", "is required")
        if kind == "WorkloadPriorityClass":
            value = doc.get("value")
            if not isinstance(value, int) or isinstance(value, bool):
                raise SpecError(kind, name, "value", "must be an integer")
            config.priority_classes[name] = value
            continue
        if api_version not in queues.API_VERSIONS:
            raise SpecError(kind, name, "apiVersion", f"{api_version!r} is not one of {', '.join(queues.API_VERSIONS)}")
        spec = doc.get("spec")
        if kind == "ResourceFlavor":
            _unique(config.flavors, kind, name)
            config.flavors[name] = queues.resource_flavor(name, spec)
        elif kind == "ClusterQueue":
            _unique(config.cluster_queues, kind, name)
            config.cluster_queues[name] = queues.cluster_queue(name, spec)
        elif kind == "Cohort":
            _unique(config.cohorts, kind, name)
            config.cohorts[name] = queues.cohort(name, spec)
        elif kind == "LocalQueue":
            namespace = meta.namespace_or_default
            lq = queues.local_queue(namespace, name, spec)
            _unique(config.local_queues, kind, lq.key)
            config.local_queues[lq.key] = lq
        else:
            raise SpecError(kind or "object", name, "kind", f"unknown kind {kind!r}")
    _check_cohort_cycles(config)
    return config


def _unique(existing: dict[str, Any], kind: str, name: str) -> None:
    if name in existing:
        raise SpecError(kind, name, "metadata.name", "is defined twice")


def _check_cohort_cycles(config: QueueConfig) -> None:
    for name in config.cohorts:
        seen = {name}
        parent = config.cohorts[name].parent
        while parent is not None:
            if parent in seen:
                raise SpecError(
                    "Cohort", name, "spec.parentName", f"parent {config.cohorts[name].parent!r} makes a cycle"
                )
            seen.add(parent)
            parent = config.cohorts[parent].parent if parent in config.cohorts else None
