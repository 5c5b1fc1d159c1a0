"""Topology-aware placement of a pod set: all its pods in one domain of a Topology level (a block,
a rack), or in as few domains as possible.

A flavor's Topology (:class:`~gangq.core.model.TopologySpec`) lists node label keys from the top
level down; a node's domain at a level is its values of that label and of every label above it.
A pod set asks (:class:`~gangq.core.model.TopologyRequest`, from Kueue's ``podset-*-topology``
annotations) for:

- ``Required``: every pod in one domain of the level, or the gang waits;
- ``Preferred``: one domain of the level if one can hold them all, else one domain of the level
  above (and so on up), else as few domains of the level as possible;
- ``Unconstrained``: anywhere (the plain placement);

and, with ``slice_level``/``slice_size``, each slice of that many pods in one domain of the slice
level (inside the pod set's domain when one is required).

The domain is chosen by **best fit**: of the domains that can hold the pod set, the one with the
least room for it. First fit, or the emptiest domain, leaves every domain partly used and turns
away the next gang that needs a whole one (the fragmentation that makes big multi-node jobs wait
in a busy fleet). Within the chosen domain pods are placed as everywhere else (best-fit nodes).
``EngineConfig.topology_fit = "FirstFit"`` picks the first domain by label values that can hold the
pod set instead: the baseline best fit is measured against (``gangq simulate``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gangq.core.model import TopologyRequest
from gangq.core.nodes import NodeIndex, NodePool, NodeState


def level_name(label: str) -> str:
    """A level's name for messages: its label key without the prefix (``topology-rack`` → ``rack``)."""
    name = label.rsplit("/", 1)[-1]
    return name.removeprefix("topology-") if name != "hostname" else "host"


class Domain:
    """The nodes of one domain (of one level) that a pod set may use, and how many of its pods
    they can take now."""

    __slots__ = ("key", "nodes", "room")

    def __init__(self, key: tuple[str, ...]) -> None:
        self.key = key
        self.nodes: list[NodeState] = []
        self.room = 0


def domains(
    pools: Sequence[NodePool], levels: Sequence[str], depth: int, requests: Mapping[str, int], limit: int
) -> list[Domain]:
    """The domains at ``levels[depth]`` of the candidate pools' schedulable nodes, each with the
    number of pods of ``requests`` (at most ``limit`` per node) its nodes can take now; nodes
    without a label of those levels belong to no domain. Sorted by key."""
    by_key: dict[tuple[str, ...], Domain] = {}
    wanted = levels[: depth + 1]
    for pool in pools:
        key: list[str] = []
        for label in wanted:
            value = pool.labels.get(label)
            if value is None:
                break
            key.append(value)
        if len(key) < len(wanted):
            continue
        k = tuple(key)
        domain = by_key.get(k)
        if domain is None:
            domain = by_key[k] = Domain(k)
        for node in pool.nodes.values():
            if node.schedulable:
                domain.nodes.append(node)
                domain.room += node.how_many(requests, limit)
    return [by_key[k] for k in sorted(by_key)]


def _slices_in(
    domain: Domain, levels: Sequence[str], slice_depth: int, requests: Mapping[str, int], size: int, exclusive: bool
) -> int:
    """How many slices of ``size`` pods fit in ``domain``, each inside one domain of ``slice_depth``
    (``exclusive``: at most one per such domain)."""
    rooms: dict[tuple[str, ...], int] = {}
    wanted = levels[: slice_depth + 1]
    for node in domain.nodes:
        key = tuple(node.labels.get(label, "") for label in wanted)
        rooms[key] = rooms.get(key, 0) + node.how_many(requests, size)
    if exclusive:
        return sum(1 for room in rooms.values() if room >= size)
    return sum(room // size for room in rooms.values())


class TopologyPlacement:
    """The outcome of placing one pod set by its topology request: pods per node, how many were
    placed, the labels of the one domain that holds them all (empty if several), and why not."""

    __slots__ = ("domain_labels", "placed", "pods", "why")

    def __init__(self) -> None:
        self.pods: dict[str, int] = {}
        self.placed = 0
        self.domain_labels: dict[str, str] = {}
        self.why = ""


def place_pod_set(
    nodes: NodeIndex,
    pools: Sequence[NodePool],
    levels: Sequence[str],
    request: TopologyRequest,
    requests: Mapping[str, int],
    count: int,
    first_fit: bool = False,
) -> TopologyPlacement:
    """Place ``count`` pods of ``requests`` on the candidate pools' nodes as ``request`` asks,
    charging them (the caller's statement undoes it if the gang does not fit); see the module
    docstring for the rule (``first_fit``: the first domain by key that can hold them, not the best
    fit)."""
    out = TopologyPlacement()
    depth = _depth(levels, request.level)
    slice_depth = _depth(levels, request.slice_level)
    size = request.slice_size or 0
    if depth < 0:
        # Unconstrained: anywhere, slices aside (checked below, within the whole flavor).
        depth = -1
    chosen: list[Domain] = []
    if depth >= 0:
        for d in range(depth, -1, -1):
            candidates = [
                dom
                for dom in domains(pools, levels, d, requests, count)
                if dom.room >= count
                and (
                    size <= 0
                    or _slices_in(dom, levels, slice_depth, requests, size, request.exclusive) >= count // size
                )
            ]
            if candidates:
                # Candidates are sorted by key: the first is first fit's choice.
                chosen = [candidates[0] if first_fit else min(candidates, key=lambda dom: (dom.room, dom.key))]
                break
            if request.mode == "Required":
                break
        if not chosen:
            level = domains(pools, levels, depth, requests, count)
            if request.mode == "Required":
                best = max(level, key=lambda dom: dom.room, default=None)  # the first such, by key
                where = f"{level_name(levels[depth])} {best.key[-1]}" if best is not None else "none"
                most = best.room if best is not None else 0
                out.why = (
                    f"needs {count} pods in one {level_name(levels[depth])} ({levels[depth]}): "
                    f"at most {most} fit in one ({where})"
                )
                return out
            # Preferred, and no single domain at any level: as few domains of the level as can.
            level.sort(key=lambda dom: (-dom.room, dom.key))
            total = 0
            for dom in level:
                if total >= count:
                    break
                chosen.append(dom)
                total += dom.room
    if not chosen:
        everywhere = Domain(())
        for pool in pools:
            everywhere.nodes.extend(node for node in pool.nodes.values() if node.schedulable)
        chosen = [everywhere]
    left = count
    for dom in chosen:
        if size > 0:
            left = _place_slices(nodes, dom, levels, slice_depth, requests, size, request.exclusive, left, out)
        else:
            left = _place_in(nodes, dom.nodes, requests, left, out)
        if left == 0:
            break
    out.placed = count - left
    if left:
        out.why = f"only {out.placed} of {count} pods fit in the chosen {level_name(levels[max(depth, 0)])} domains"
    elif len(chosen) == 1 and chosen[0].key:
        out.domain_labels = dict(zip(levels, chosen[0].key, strict=False))
    return out


def shared_domain(levels: Sequence[str], request: TopologyRequest, planned: Sequence[NodeState]) -> dict[str, str]:
    """The labels of the deepest domain that holds every planned node of a pod set, from the top
    level down, no deeper than the requested level (for ``Unconstrained``: no deeper than the
    slice level); empty when the nodes share no top-level domain."""
    stop = _depth(levels, request.level)
    if stop < 0:
        stop = _depth(levels, request.slice_level)
    out: dict[str, str] = {}
    for label in levels[: stop + 1]:
        values = {node.labels.get(label) for node in planned}
        if len(values) != 1:
            break
        value = values.pop()
        if value is None:
            break
        out[label] = value
    return out


def pod_domains(
    levels: Sequence[str], request: TopologyRequest, planned: Sequence[tuple[NodeState, int]], shared: Mapping[str, str]
) -> list[tuple[dict[str, str], int]]:
    """Where each of a pod set's pods must go when its one shared domain (``shared``) does not say
    enough: the domains of the deepest level its request names (the slice level, or the level),
    with the planned pods in each, in label order. Empty when the shared domain is that deep
    already, or a planned node has no label of those levels (its pods are then held to the shared
    domain only)."""
    depth = max(_depth(levels, request.level), _depth(levels, request.slice_level))
    if depth < 0 or depth + 1 <= len(shared):
        return []
    wanted = levels[: depth + 1]
    counts: dict[tuple[str, ...], int] = {}
    for node, count in planned:
        key: list[str] = []
        for label in wanted:
            value = node.labels.get(label)
            if value is None:
                return []
            key.append(value)
        k = tuple(key)
        counts[k] = counts.get(k, 0) + count
    return [(dict(zip(wanted, k, strict=True)), counts[k]) for k in sorted(counts)]


def _depth(levels: Sequence[str], label: str | None) -> int:
    if label is None:
        return -1
    try:
        return list(levels).index(label)
    except ValueError:
        return -1


def _place_in(nodes: NodeIndex, candidates: list[NodeState], requests: Mapping[str, int], left: int,
              out: TopologyPlacement) -> int:
    """Best fit within a domain: each time, the node that takes pods with the least room left."""
    resources = sorted(requests)
    while left > 0:
        best: NodeState | None = None
        best_key: tuple[int, ...] = ()
        for node in candidates:
            n = node.how_many(requests, left)
            if n <= 0:
                continue
            key = tuple(node.free.get(r, 0) for r in resources)
            if best is None or key < best_key:
                best, best_key = node, key
        if best is None:
            return left
        n = best.how_many(requests, left)
        nodes.allocate(best, requests, n)
        out.pods[best.name] = out.pods.get(best.name, 0) + n
        left -= n
    return left


def _place_slices(nodes: NodeIndex, dom: Domain, levels: Sequence[str], slice_depth: int,
                  requests: Mapping[str, int], size: int, exclusive: bool, left: int, out: TopologyPlacement) -> int:
    """Slice by slice: each slice of ``size`` pods in the sub-domain of ``slice_depth`` with the
    least room that holds a whole slice (best fit again); ``exclusive``: a sub-domain holds one
    slice at most."""
    wanted = levels[: slice_depth + 1]
    groups: dict[tuple[str, ...], list[NodeState]] = {}
    for node in dom.nodes:
        groups.setdefault(tuple(node.labels.get(label, "") for label in wanted), []).append(node)
    while left > 0:
        fitting = []
        for key, members in groups.items():
            room = sum(node.how_many(requests, size) for node in members)
            if room >= size:
                fitting.append((room, key))
        if not fitting:
            return left
        _, key = min(fitting)
        if _place_in(nodes, groups[key], requests, size, out):
            return left  # cannot happen: the room was counted on these nodes
        if exclusive:
            del groups[key]
        left -= size
    return left
