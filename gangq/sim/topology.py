"""Topology in the simulator: node labels per level, what multi-pod gangs ask for, and the figures
that say how well placement kept gangs together.

- :class:`TopologyLayout` (``--topology-layout hosts-per-rack=H,racks-per-block=R``) labels the
  Philly replay's generated nodes: per VC, consecutive hosts of 8 GPUs form racks of ``H`` hosts
  and consecutive racks form blocks of ``R`` racks (the last rack or block of a VC may be smaller).
- :func:`parse_request` (``--topology-request MODE:LEVEL``) is what every pod set of more than one
  pod asks for; single-pod pod sets ask nothing.
- :class:`TopologyMeter` measures, from the engine's admissions and pending view:
  *locality* (per admission of a gang of more than one pod, how many domains of each level its
  pods landed in) and *fragmentation* (sampled every ``sample_every`` simulated seconds: free
  capacity in domains too small for the waiting head of each ClusterQueue, and whether a head
  waited although its ClusterQueue's nodes had enough free in total).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gangq.core.model import FlavorSpec, NodeSpec, TopologyRequest, TopologySpec
from gangq.core.topology import level_name

BLOCK_LABEL = "gangq.io/topology-block"
RACK_LABEL = "gangq.io/topology-rack"
HOST_LABEL = "kubernetes.io/hostname"
DEFAULT_SAMPLE_EVERY = 600.0


class TopologyLayout:
    """Racks of ``hosts_per_rack`` consecutive nodes and blocks of ``racks_per_block`` consecutive
    racks, per group of nodes (a Philly VC)."""

    __slots__ = ("hosts_per_rack", "racks_per_block")

    def __init__(self, hosts_per_rack: int = 4, racks_per_block: int = 4) -> None:
        self.hosts_per_rack = hosts_per_rack
        self.racks_per_block = racks_per_block

    @classmethod
    def parse(cls, text: str, option: str = "--topology-layout") -> TopologyLayout:
        """``hosts-per-rack=H,racks-per-block=R`` (either may be left out: 4 each)."""
        values = {"hosts-per-rack": 4, "racks-per-block": 4}
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or key not in values:
                raise ValueError(
                    f"{option}: expected hosts-per-rack=H,racks-per-block=R, got {part!r}"
                )
            try:
                number = int(value)
            except ValueError:
                number = 0
            if number < 1:
                raise ValueError(f"{option}: {key} must be a positive integer, got {value!r}")
            values[key] = number
        return cls(values["hosts-per-rack"], values["racks-per-block"])

    def spec(self, name: str = "racks") -> TopologySpec:
        return TopologySpec(name, [BLOCK_LABEL, RACK_LABEL, HOST_LABEL])

    def labels(self, group: str, index: int, node_name: str) -> dict[str, str]:
        """The topology labels of the ``index``-th node of ``group``."""
        rack = index // self.hosts_per_rack
        block = rack // self.racks_per_block
        return {
            BLOCK_LABEL: f"{group}-b{block}",
            RACK_LABEL: f"{group}-b{block}-r{rack}",
            HOST_LABEL: node_name,
        }

    def info(self) -> dict[str, int]:
        return {"hosts_per_rack": self.hosts_per_rack, "racks_per_block": self.racks_per_block}


def resolve_level(levels: Sequence[str], name: str) -> str | None:
    """A level given by its label key or its short name (``rack``, ``block``, ``host``)."""
    for label in levels:
        if name in (label, level_name(label)):
            return label
    return None


def parse_request(text: str, levels: Sequence[str], option: str = "--topology-request") -> TopologyRequest:
    """``required:LEVEL`` or ``preferred:LEVEL`` (LEVEL: a short name or a label key of ``levels``)."""
    mode_text, sep, level_text = text.partition(":")
    modes = {"required": "Required", "preferred": "Preferred"}
    mode = modes.get(mode_text.strip().lower())
    if not sep or mode is None:
        raise ValueError(f"{option}: expected required:LEVEL or preferred:LEVEL, got {text!r}")
    level = resolve_level(levels, level_text.strip())
    if level is None:
        known = ", ".join(level_name(label) for label in levels) or "none: give a topology"
        raise ValueError(f"{option}: unknown level {level_text.strip()!r} (levels: {known})")
    return TopologyRequest("Required" if mode == "Required" else "Preferred", level)


def parse_topology(doc: Any) -> TopologySpec:
    """A cluster file's ``topology:``: a list of node label keys from the top level down, or
    ``{name: NAME, levels: [...]}``. Raises ValueError naming the field."""
    name = "cluster"
    levels = doc
    if isinstance(doc, Mapping):
        unknown = {k for k in doc if not str(k).startswith("__")} - {"name", "levels"}
        if unknown:
            raise ValueError(f"{sorted(unknown)[0]}: unknown field")
        name = str(doc.get("name") or name)
        levels = doc.get("levels")
    if not isinstance(levels, list) or not levels or not all(isinstance(x, str) and x for x in levels):
        raise ValueError("levels: must be a non-empty list of node label keys")
    if len(set(levels)) != len(levels):
        raise ValueError("levels: a label key appears twice")
    return TopologySpec(name, levels)


def with_topology(flavor: FlavorSpec, topology: TopologySpec | None) -> FlavorSpec:
    """The flavor with ``topology`` when it has none of its own."""
    if topology is None or flavor.topology is not None:
        return flavor
    return FlavorSpec(flavor.name, flavor.node_labels, flavor.node_taints, flavor.tolerations, topology)


def with_hostname(node: NodeSpec, topology: TopologySpec | None) -> NodeSpec:
    """A node's hostname label, as Kubernetes sets it, when the topology has the host level."""
    if topology is None or HOST_LABEL not in topology.levels or HOST_LABEL in node.labels:
        return node
    return NodeSpec(node.name, node.allocatable, {**node.labels, HOST_LABEL: node.name}, node.taints)


def _p95(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(0.95 * len(ordered)) - 1))]


class _Head:
    """What fragmentation needs of a waiting head: its level (depth) and what must fit in one
    domain of it, and its total need."""

    __slots__ = ("depth", "need", "total")

    def __init__(self, depth: int, need: int, total: int) -> None:
        self.depth = depth
        self.need = need
        self.total = total


class TopologyMeter:
    """Locality and fragmentation of one run (see the module docstring and docs/simulate.md).

    ``nodes``: the cluster; ``topology``: the levels measured; ``cq_nodes``: per ClusterQueue the
    nodes its flavors select; ``request``: what pod sets of more than one pod ask for (its level is
    the locality level; without one, the level above hosts); ``resource``: what is counted free.
    """

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        topology: TopologySpec,
        cq_nodes: Mapping[str, Sequence[str]],
        request: TopologyRequest | None,
        resource: str,
        start: float,
        sample_every: float = DEFAULT_SAMPLE_EVERY,
    ) -> None:
        self.levels = list(topology.levels)
        self.resource = resource
        self.request = request
        depth = self.levels.index(request.level) if request is not None and request.level in self.levels else -1
        self.depth = depth if depth >= 0 else max(0, len(self.levels) - 2)
        self.keys: dict[str, tuple[str, ...]] = {
            n.name: tuple(n.labels.get(label, "") for label in self.levels) for n in nodes
        }
        self.free: dict[str, int] = {n.name: n.allocatable.get(resource, 0) for n in nodes}
        self.cq_nodes = {cq: [n for n in names if n in self.free] for cq, names in cq_nodes.items()}
        self.held: dict[str, list[tuple[str, int]]] = {}
        # Locality, per level: gangs measured, gangs in one domain, domains summed.
        self.gangs = [0] * len(self.levels)
        self.in_one = [0] * len(self.levels)
        self.domains = [0] * len(self.levels)
        # Fragmentation samples.
        self.start = start
        self.sample_every = sample_every
        self.last = start
        self.fragmented: list[float] = []
        self.free_total: list[float] = []
        self.samples_stranded = 0
        self.head_samples = 0
        self.heads_stranded = 0

    # -- locality ------------------------------------------------------------------------------

    def admitted(self, key: str, pod_sets: Sequence[tuple[Mapping[str, int], Mapping[str, int]]]) -> None:
        """A gang was admitted: per pod set, its requests and its placement (node → pods)."""
        held: list[tuple[str, int]] = []
        pods = 0
        for requests, placement in pod_sets:
            per_pod = requests.get(self.resource, 0)
            for node, n in placement.items():
                pods += n
                if node in self.free and per_pod:
                    self.free[node] -= n * per_pod
                    held.append((node, n * per_pod))
        if held:
            self.held[key] = held
        if pods <= 1:
            return
        nodes = {node for _, placement in pod_sets for node in placement if node in self.keys}
        if not nodes:
            return
        for d in range(len(self.levels)):
            count = len({self.keys[node][: d + 1] for node in nodes})
            self.gangs[d] += 1
            self.domains[d] += count
            if count == 1:
                self.in_one[d] += 1

    def released(self, key: str) -> None:
        """A gang finished or stopped: its capacity is free."""
        for node, amount in self.held.pop(key, ()):
            self.free[node] += amount

    # -- fragmentation -------------------------------------------------------------------------

    def due(self, now: float) -> int:
        """How many sample times lie in [last, now): each sees the state as it is now, before the
        events at ``now`` change it."""
        every = self.sample_every
        if now <= self.last:
            return 0
        return math.ceil((now - self.start) / every) - math.ceil((self.last - self.start) / every)

    def sample(self, now: float, heads: Callable[[str], _Head | None], final: bool = False) -> None:
        """Record the samples due before ``now`` (``final``: also one at ``now``)."""
        k = self.due(now) + (1 if final else 0)
        self.last = max(self.last, now)
        if k <= 0:
            return
        fragmented = 0
        free_total = 0
        stranded = False
        n_heads = 0
        n_stranded = 0
        for cq, names in self.cq_nodes.items():
            free = self.free
            free_total += sum(max(0, free[n]) for n in names)
            head = heads(cq)
            if head is None:
                continue
            n_heads += 1
            rooms: dict[tuple[str, ...], int] = {}
            depth = head.depth + 1
            total = 0
            for n in names:
                f = free[n]
                if f > 0:
                    key = self.keys[n][:depth]
                    rooms[key] = rooms.get(key, 0) + f
                    total += f
            fragmented += sum(room for room in rooms.values() if room < head.need)
            if total >= head.total:
                n_stranded += 1
                stranded = True
        self.fragmented.extend([float(fragmented)] * k)
        self.free_total.extend([float(free_total)] * k)
        self.head_samples += n_heads * k
        self.heads_stranded += n_stranded * k
        if stranded:
            self.samples_stranded += k

    def head(self, pod_sets: Sequence[tuple[int, Mapping[str, int]]]) -> _Head:
        """A waiting gang's :class:`_Head`: a gang with a pod set of more than one pod under a
        topology request needs its whole demand in one domain of the request's level; any other
        needs its largest pod on one host (the bottom level)."""
        total = sum(count * req.get(self.resource, 0) for count, req in pod_sets)
        if self.request is not None and any(count > 1 for count, _ in pod_sets):
            return _Head(self.depth, total, total)
        largest = max((req.get(self.resource, 0) for _, req in pod_sets), default=0)
        return _Head(len(self.levels) - 1, largest, total)

    # -- figures -------------------------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        def level(d: int) -> dict[str, Any]:
            gangs = self.gangs[d]
            return {
                "gangs": gangs,
                "share_in_one_domain": self.in_one[d] / gangs if gangs else 0.0,
                "mean_domains_per_gang": self.domains[d] / gangs if gangs else 0.0,
            }

        main = level(self.depth)
        samples = len(self.fragmented)
        return {
            "levels": list(self.levels),
            "request": (
                f"{self.request.mode}:{level_name(self.request.level)}"
                if self.request is not None and self.request.level is not None
                else None
            ),
            "locality": {
                "level": level_name(self.levels[self.depth]),
                **main,
                "by_level": {level_name(label): level(d) for d, label in enumerate(self.levels)},
            },
            "fragmentation": {
                "resource": self.resource,
                "sample_every_s": self.sample_every,
                "samples": samples,
                "fragmented_mean": sum(self.fragmented) / samples if samples else 0.0,
                "fragmented_p95": _p95(self.fragmented),
                "free_mean": sum(self.free_total) / samples if samples else 0.0,
                "share_samples_head_waiting_with_enough_free": self.samples_stranded / samples if samples else 0.0,
                "head_samples": self.head_samples,
                "share_heads_waiting_with_enough_free": (
                    self.heads_stranded / self.head_samples if self.head_samples else 0.0
                ),
            },
        }
