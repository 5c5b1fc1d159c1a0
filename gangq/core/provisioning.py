"""Nodes a node autoscaler may add (a Karpenter NodePool's headroom), counted as nodes.

The problem it solves: a suspended job creates no pod, so no autoscaler scales up for it; if the
node check counted only the nodes that exist, a gang bigger than them would wait for ever on a
cluster whose node pools start at zero. So each pool's headroom — the nodes it may still add
within its limits — is put into the node index as *provisional* nodes: empty nodes with the
labels, taints and allocatable of the pool's nodes. The node check, the topology domains (by the
labels the pool's nodes carry), the caches and the "never fits" test see them as they see any
node, and a gang planned onto one is admitted with the reason ``Provisioning``: its pods are
created, stay pending, and the autoscaler adds the nodes for them.

A provisional node that pods are planned onto is *claimed*. It stays until a node of its pool
appears, which then takes its planned pods over (the autoscaler made that node for them), so the
gang's capacity stays charged from admission to binding and no other gang is admitted into it.

Headroom: for each limited resource, (limit − capacity in use) // one node's amount; the smallest
of them, at most ``max_new_nodes``. The capacity in use is the larger of what the autoscaler
reports (nodes it is still launching included) and the allocatable of the pool's nodes that exist.
Claimed provisional nodes are part of the headroom: unclaimed ones are added or taken away so that
both together make the headroom, and claimed ones are never taken away.
"""

from __future__ import annotations

from collections.abc import Iterable

from gangq.core.model import NodeSpec, ProvisionerSpec
from gangq.core.nodes import NodeIndex, NodeState
from gangq.core.queue import Workload
from gangq.core.units import format_amount

PROVISIONAL_PREFIX = "provisional:"
"""Provisional node names start with it (``:`` is in no Kubernetes object name)."""


class PoolHeadroom:
    """One autoscaler pool: its spec, its nodes that exist, and its provisional nodes."""

    __slots__ = ("claimed", "next_id", "real", "said", "spec", "virtual")

    def __init__(self, spec: ProvisionerSpec) -> None:
        self.spec = spec
        self.real: dict[str, None] = {}
        self.virtual: dict[str, None] = {}
        self.next_id = 0
        self.said = ""  # what a failed node check last said of it (describe)
        self.claimed = 0  # its claimed provisional nodes when it was last synced


class SyncResult:
    """What a sync changed: provisional nodes added and taken away, and pools whose description
    (what a failed node check says of them) changed."""

    __slots__ = ("added", "described", "removed")

    def __init__(self) -> None:
        self.added = 0
        self.removed = 0
        self.described = 0


class Provisioning:
    """Every autoscaler pool, and which nodes are provisional (see the module docstring)."""

    __slots__ = ("node_pool", "nodes", "pools", "virtual")

    def __init__(self, nodes: NodeIndex) -> None:
        self.nodes = nodes
        self.pools: dict[str, PoolHeadroom] = {}
        self.virtual: dict[str, str] = {}  # provisional node -> its pool
        self.node_pool: dict[str, str] = {}  # node of a pool, that exists -> the pool

    # -- the pools -------------------------------------------------------------------------------

    def upsert(self, spec: ProvisionerSpec, workloads: Iterable[Workload], out: SyncResult) -> None:
        """Add or change a pool; its nodes that exist are those labelled with its name."""
        pool = self.pools.get(spec.name)
        if pool is None:
            pool = self.pools[spec.name] = PoolHeadroom(spec)
        changed = pool.spec.labels != spec.labels or pool.spec.taints != spec.taints or (
            pool.spec.node_allocatable != spec.node_allocatable
        )
        pool.spec = spec
        if changed:  # its provisional nodes no longer look like its nodes: the unclaimed go
            for name in [n for n in pool.virtual if not self._claimed(n)]:
                self._remove_virtual(pool, name, out)
        pool.real = {}
        for name, node in self.nodes.nodes.items():
            if name not in self.virtual and node.labels.get(spec.node_label) == spec.name:
                pool.real[name] = None
                self.node_pool[name] = spec.name
        self.sync(pool, workloads, out)

    def delete(self, name: str, out: SyncResult) -> None:
        """A pool is gone: its unclaimed provisional nodes go (claimed ones stay, see sync)."""
        pool = self.pools.pop(name, None)
        if pool is None:
            return
        for node in pool.real:
            self.node_pool.pop(node, None)
        for node in list(pool.virtual):
            if self._claimed(node):
                continue  # its gang's pods are planned there; they bind where they can
            self._remove_virtual(pool, node, out)
        out.described += 1

    # -- nodes that exist ------------------------------------------------------------------------

    def node_upserted(self, node: NodeState, workloads: Iterable[Workload], out: SyncResult) -> None:
        """A node was added or changed: when it joins a pool, it takes over the pods planned onto
        one of the pool's claimed provisional nodes, and the headroom is counted again."""
        name = node.name
        before = self.node_pool.get(name)
        after = None
        for pool in self.pools.values():
            if node.labels.get(pool.spec.node_label) == pool.spec.name:
                after = pool.spec.name
                break
        if before is not None and before != after:
            old = self.pools.get(before)
            self.node_pool.pop(name, None)
            if old is not None:
                old.real.pop(name, None)
                self.sync(old, workloads, out)
        if after is None:
            return
        pool = self.pools[after]
        self.node_pool[name] = after
        pool.real[name] = None
        if all(node.free.get(r, 0) == v for r, v in node.allocatable.items()):
            # An empty node of the pool (new, or its capacity just reported): the autoscaler made
            # it for pods planned onto a provisional node, if any are.
            self._hand_over(pool, node, workloads, out)
        self.sync(pool, workloads, out)

    def node_removed(self, name: str, workloads: Iterable[Workload], out: SyncResult) -> None:
        pool_name = self.node_pool.pop(name, None)
        pool = self.pools.get(pool_name) if pool_name is not None else None
        if pool is not None:
            pool.real.pop(name, None)
            self.sync(pool, workloads, out)

    # -- headroom --------------------------------------------------------------------------------

    def headroom(self, pool: PoolHeadroom) -> tuple[int, str]:
        """How many nodes the pool may still add (provisional ones included), and what bounds it."""
        spec = pool.spec
        shape = spec.node_allocatable
        n = spec.max_new_nodes
        why = f"gangq counts at most {n} new nodes of it (annotation gangq.io/max-new-nodes)"
        for resource, limit in sorted(spec.limits.items()):
            if resource == "nodes":
                used = max(spec.in_use.get("nodes", 0), len(pool.real))
                fits = limit - used
            else:
                per = shape.get(resource, 0)
                if per <= 0:
                    continue  # its nodes add none of it
                used = max(spec.in_use.get(resource, 0), self._real_total(pool, resource))
                fits = (limit - used) // per
            if fits < n:
                n = fits
                why = (
                    f"its limit of {format_amount(resource, limit)} {resource} "
                    f"({format_amount(resource, used)} in use)"
                )
        return max(n, 0), why

    def _real_total(self, pool: PoolHeadroom, resource: str) -> int:
        nodes = self.nodes.nodes
        return sum(nodes[name].allocatable.get(resource, 0) for name in pool.real if name in nodes)

    def resync(self, workloads: Iterable[Workload], out: SyncResult) -> None:
        """Sync each pool whose provisional nodes were claimed or given up since its last sync (a
        gang admitted onto them, its pods bound elsewhere, the gang gone)."""
        for pool in self.pools.values():
            if sum(1 for name in pool.virtual if self._claimed(name)) != pool.claimed:
                self.sync(pool, workloads, out)

    def sync(self, pool: PoolHeadroom, workloads: Iterable[Workload], out: SyncResult) -> None:
        """Make the pool's provisional nodes its headroom: claimed ones stay, unclaimed ones are
        added or taken away."""
        want, _ = self.headroom(pool)
        claimed = [name for name in pool.virtual if self._claimed(name)]
        unclaimed = [name for name in pool.virtual if name not in claimed]
        keep = max(want - len(claimed), 0)
        for name in unclaimed[keep:]:
            self._remove_virtual(pool, name, out)
        for _ in range(keep - len(unclaimed)):
            name = f"{PROVISIONAL_PREFIX}{pool.spec.name}-{pool.next_id}"
            pool.next_id += 1
            pool.virtual[name] = None
            self.virtual[name] = pool.spec.name
            spec = pool.spec
            self.nodes.upsert(NodeSpec(name, spec.node_allocatable, spec.labels, spec.taints))
            out.added += 1
        pool.claimed = len(claimed)
        said = self.describe(pool)
        if said != pool.said:
            pool.said = said
            out.described += 1

    def _claimed(self, name: str) -> bool:
        node = self.nodes.nodes.get(name)
        if node is None:
            return False
        free = node.free
        return any(free.get(r, 0) != v for r, v in node.allocatable.items())

    def _remove_virtual(self, pool: PoolHeadroom, name: str, out: SyncResult) -> None:
        pool.virtual.pop(name, None)
        self.virtual.pop(name, None)
        self.nodes.remove(name)
        out.removed += 1

    def _hand_over(self, pool: PoolHeadroom, node: NodeState, workloads: Iterable[Workload], out: SyncResult) -> None:
        """A node of the pool appeared: the pods planned onto the claimed provisional node they fit
        best move to it, and that provisional node goes."""
        best: str | None = None
        best_used = -1
        for name in pool.virtual:
            virtual = self.nodes.nodes.get(name)
            if virtual is None or not self._claimed(name):
                continue
            used = {r: v - virtual.free.get(r, 0) for r, v in virtual.allocatable.items()}
            if all(node.free.get(r, 0) >= v for r, v in used.items() if v > 0):
                total = sum(used.values())
                if total > best_used:
                    best, best_used = name, total
        if best is None:
            return
        for wl in workloads:
            held = wl.held.get(best)
            if held is None:
                continue
            for slot in [s for s in wl.planned if s[1] == best]:
                count = wl.planned.pop(slot)
                moved = (slot[0], node.name)
                wl.planned[moved] = wl.planned.get(moved, 0) + count
                requests = wl.spec.pod_sets[slot[0]].requests
                wl.hold(best, requests, -count)
                wl.hold(node.name, requests, count)
                self.nodes.allocate(node, requests, count)
        self._remove_virtual(pool, best, out)

    # -- what the node check says ---------------------------------------------------------------

    def describe(self, pool: PoolHeadroom) -> str:
        """``NodePool 'gpu' may add at most 4 nodes (its limit of 32 nvidia.com/gpu (0 in use))``:
        the pool's headroom in all, the nodes planned for admitted gangs included."""
        n, why = self.headroom(pool)
        nodes = "no nodes" if n == 0 else f"at most {n} node{'' if n == 1 else 's'}"
        return f"NodePool {pool.spec.name!r} may add {nodes} ({why})"
