"""Load queue configurations (multi-document YAML, the files an admin ``kubectl apply``-s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gangq.api import queues
from gangq.api.meta import Meta
from gangq.core.errors import SpecError
from gangq.core.model import ClusterQueueSpec, CohortSpec, FlavorSpec, LocalQueueSpec, TopologySpec


class QueueConfig:
    """The queue objects of one or more YAML files, as core specs.

    ``flavors`` holds the flavors the engine gets: a flavor whose ``spec.topologyName`` names a
    Topology the configuration does not define is in ``unresolved_flavors`` instead (flavor →
    Topology), as the controller leaves it out until the Topology exists. ``admission_checks``:
    the AdmissionCheck objects; ``cluster_queue_checks``: the checks each ClusterQueue names (a
    ClusterQueue naming any is inactive under gangq, see :meth:`inactive`)."""

    def __init__(self) -> None:
        self.flavors: dict[str, FlavorSpec] = {}
        self.cohorts: dict[str, CohortSpec] = {}
        self.cluster_queues: dict[str, ClusterQueueSpec] = {}
        self.local_queues: dict[str, LocalQueueSpec] = {}
        self.priority_classes: dict[str, int] = {}
        self.topologies: dict[str, TopologySpec] = {}
        self.admission_checks: dict[str, queues.AdmissionCheck] = {}
        self.cluster_queue_checks: dict[str, list[queues.CheckRef]] = {}
        self.unresolved_flavors: dict[str, str] = {}
        self.flavor_specs: dict[str, Any] = {}

    def resolve_flavors(self) -> None:
        """(Re)build the flavors from their specs with the Topologies defined so far."""
        self.flavors.clear()
        self.unresolved_flavors.clear()
        for name, spec in self.flavor_specs.items():
            try:
                self.flavors[name] = queues.resource_flavor(name, spec, self.topologies)
            except queues.TopologyNotFound as err:
                self.unresolved_flavors[name] = err.topology_name

    def add_flavor(self, name: str, spec: Any) -> None:
        """A ResourceFlavor, checked now; its Topology is resolved by :meth:`resolve_flavors`."""
        queues.parse_resource_flavor(name, spec)
        self.flavor_specs[name] = spec

    def inactive(self, name: str) -> tuple[str, str] | None:
        """Why ClusterQueue ``name`` admits nothing under gangq because of its admission checks
        (``(reason, message)``, :func:`gangq.api.queues.admission_check_problem`), or None."""
        return queues.admission_check_problem(name, self.cluster_queue_checks.get(name, []), self.admission_checks)

    def problems(self) -> list[str]:
        """Warnings: references to objects that the configuration does not define, and ClusterQueues
        that admit nothing because of their admission checks."""
        out = []
        for cq in self.cluster_queues.values():
            for gi, group in enumerate(cq.resource_groups):
                for fi, flavor in enumerate(group.flavors):
                    topology = self.unresolved_flavors.get(flavor.name)
                    if topology is not None:
                        out.append(
                            f"ClusterQueue {cq.name!r}: spec.resourceGroups[{gi}].flavors[{fi}].name: "
                            f"ResourceFlavor {flavor.name!r} names Topology {topology!r} (spec.topologyName), "
                            f"which is not defined (the queue stays inactive until it is, reason TopologyNotFound)"
                        )
                    elif flavor.name not in self.flavors:
                        out.append(
                            f"ClusterQueue {cq.name!r}: spec.resourceGroups[{gi}].flavors[{fi}].name: "
                            f"ResourceFlavor {flavor.name!r} is not defined (the queue stays inactive until it is)"
                        )
            inactive = self.inactive(cq.name)
            if inactive is not None:
                out.append(f"{inactive[1]} (reason {inactive[0]})")
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
            _unique(config.flavor_specs, kind, name)
            config.add_flavor(name, spec)
        elif kind == "Topology":
            _unique(config.topologies, kind, name)
            config.topologies[name] = queues.topology(name, spec)
        elif kind == "AdmissionCheck":
            _unique(config.admission_checks, kind, name)
            config.admission_checks[name] = queues.admission_check(name, spec)
        elif kind == "ClusterQueue":
            _unique(config.cluster_queues, kind, name)
            config.cluster_queues[name] = queues.cluster_queue(name, spec)
            config.cluster_queue_checks[name] = queues.admission_checks(name, spec)
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
    config.resolve_flavors()
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
