"""The quota tree: ClusterQueues and Cohorts, nominal quota, borrowing and lending, usage.

Every node (a ClusterQueue leaf or a Cohort) has, per (flavor, resource):

- ``nominal``: its own quota (a Cohort may have quota of its own, for its children to borrow);
- ``subtree``: nominal plus what its children make lendable to it;
- ``guaranteed``: the part of ``subtree`` that only this node may use (``subtree - lendingLimit``);
- ``usage``: for a ClusterQueue, what its admitted workloads hold; for a Cohort, what its children
  use beyond their guaranteed part (their "spill" into the shared pool).

``available(node, fr)`` is how much more the node may take right now: its unused guaranteed part
plus what the parent has available, capped by the node's borrowing limit. This is the same model as
Kueue's hierarchical cohorts, so a config ported from Kueue admits the same amounts.

Usage changes are propagated incrementally (O(depth)); subtree quota is recomputed when specs change.
"""

from __future__ import annotations

from collections.abc import Iterator

from gangq.core.errors import SpecError
from gangq.core.model import FlavorResource, ResourceGroup, flavor_resource


class QuotaNode:
    """One ClusterQueue or Cohort in the borrowing tree."""

    __slots__ = (
        "borrowing_limit",
        "children",
        "declared",
        "guaranteed",
        "is_cohort",
        "lending_limit",
        "memo",
        "memo_version",
        "name",
        "nominal",
        "parent",
        "parent_name",
        "released",
        "stamp",
        "subtree",
        "top",
        "usage",
        "usage_version",
        "weight",
    )

    def __init__(self, name: str, is_cohort: bool) -> None:
        self.name = name
        self.is_cohort = is_cohort
        self.parent_name: str | None = None
        self.parent: QuotaNode | None = None
        self.children: dict[str, QuotaNode] = {}
        self.nominal: dict[FlavorResource, int] = {}
        self.borrowing_limit: dict[FlavorResource, int] = {}
        self.lending_limit: dict[FlavorResource, int] = {}
        self.subtree: dict[FlavorResource, int] = {}
        self.guaranteed: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        self.usage_version = 0  # bumped whenever this node's own usage or quota changes
        # A cohort's availability per flavor-resource, valid while the stamp of its tree is
        # ``memo_version`` (see QuotaTree.available).
        self.memo: dict[FlavorResource, int] = {}
        self.memo_version = -1
        # On a tree's root: the QuotaTree version of the tree's last change (see tree_stamp).
        self.stamp = 0
        # On a tree's root: per flavor-resource, the total quota its ClusterQueues ever gave back
        # (what admitted gangs released; counted by the engine, what-ifs excluded). Ever growing,
        # so the difference of two readings bounds how much more any queue of the tree may take.
        self.released: dict[FlavorResource, int] = {}
        self.top: QuotaNode = self  # the root of its tree (set by QuotaTree.recompute)
        self.weight = 1.0
        # A cohort named by a ClusterQueue but never created as an object exists implicitly.
        self.declared = not is_cohort

    def set_groups(self, groups: tuple[ResourceGroup, ...]) -> None:
        self.usage_version += 1
        self.nominal = {}
        self.borrowing_limit = {}
        self.lending_limit = {}
        for group in groups:
            for flavor in group.flavors:
                for quota in flavor.resources:
                    fr = flavor_resource(flavor.name, quota.name)
                    self.nominal[fr] = quota.nominal
                    if quota.borrowing_limit is not None:
                        self.borrowing_limit[fr] = quota.borrowing_limit
                    if quota.lending_limit is not None:
                        self.lending_limit[fr] = quota.lending_limit

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def lendable(self, fr: FlavorResource) -> int:
        """What this node contributes to its parent's pool."""
        sub = self.subtree.get(fr, 0)
        limit = self.lending_limit.get(fr)
        return sub if limit is None else min(sub, limit)

    def borrowing(self, fr: FlavorResource) -> int:
        """How much of ``fr`` this node uses beyond its nominal quota."""
        return max(0, self.usage.get(fr, 0) - self.nominal.get(fr, 0))


class QuotaTree:
    """All quota nodes; computes availability and tracks usage."""

    __slots__ = ("cluster_queues", "cohorts", "log", "version")

    def __init__(self) -> None:
        self.cluster_queues: dict[str, QuotaNode] = {}
        self.cohorts: dict[str, QuotaNode] = {}
        # Bumped on every change of usage or quota (what-ifs included): a cache key for availability.
        self.version = 0
        # Undo log of the open statement, if any: (ClusterQueue node, flavor-resource, delta).
        self.log: list[tuple[QuotaNode, FlavorResource, int]] | None = None

    # -- structure -------------------------------------------------------------------------------

    def _cohort(self, name: str) -> QuotaNode:
        node = self.cohorts.get(name)
        if node is None:
            node = QuotaNode(name, is_cohort=True)
            self.cohorts[name] = node
        return node

    def _attach(self, node: QuotaNode, parent_name: str | None) -> None:
        if node.parent is not None:
            node.parent.children.pop(node.name if not node.is_cohort else "cohort:" + node.name, None)
            old = node.parent
            node.parent = None
            self._collect_implicit(old)
        node.parent_name = parent_name
        if parent_name is not None:
            parent = self._cohort(parent_name)
            parent.children[node.name if not node.is_cohort else "cohort:" + node.name] = node
            node.parent = parent

    def _collect_implicit(self, cohort: QuotaNode) -> None:
        """Forget implicit cohorts that no longer have children."""
        while cohort is not None and not cohort.declared and not cohort.children:
            self.cohorts.pop(cohort.name, None)
            parent = cohort.parent
            if parent is not None:
                parent.children.pop("cohort:" + cohort.name, None)
            cohort.parent = None
            if parent is None:
                break
            cohort = parent

    def set_cluster_queue(
        self, name: str, cohort: str | None, groups: tuple[ResourceGroup, ...], weight: float
    ) -> QuotaNode:
        node = self.cluster_queues.get(name)
        if node is None:
            node = QuotaNode(name, is_cohort=False)
            self.cluster_queues[name] = node
        node.set_groups(groups)
        node.weight = weight
        if node.parent_name != cohort or (cohort is not None and node.parent is None):
            self._attach(node, cohort)
        self.recompute()
        return node

    def remove_cluster_queue(self, name: str) -> None:
        node = self.cluster_queues.pop(name, None)
        if node is None:
            return
        self._attach(node, None)
        self.recompute()

    def set_cohort(self, name: str, parent: str | None, groups: tuple[ResourceGroup, ...], weight: float) -> QuotaNode:
        # Reject cycles before touching the tree.
        seen = {name}
        ancestor = parent
        while ancestor is not None:
            if ancestor in seen:
                raise SpecError("Cohort", name, "spec.parentName", f"parent {parent!r} would create a cycle")
            seen.add(ancestor)
            anc_node = self.cohorts.get(ancestor)
            ancestor = anc_node.parent_name if anc_node is not None else None
        node = self._cohort(name)
        node.declared = True
        node.set_groups(groups)
        node.weight = weight
        if node.parent_name != parent:
            self._attach(node, parent)
        self.recompute()
        return node

    def remove_cohort(self, name: str) -> None:
        node = self.cohorts.get(name)
        if node is None:
            return
        node.declared = False
        node.nominal = {}
        node.borrowing_limit = {}
        node.lending_limit = {}
        node.weight = 1.0
        self._attach(node, None)
        if not node.children:
            self.cohorts.pop(name, None)
        self.recompute()

    def roots(self) -> Iterator[QuotaNode]:
        for node in self.cohorts.values():
            if node.parent is None:
                yield node
        for node in self.cluster_queues.values():
            if node.parent is None:
                yield node

    def tree_cluster_queues(self, root: QuotaNode) -> Iterator[QuotaNode]:
        """The ClusterQueues under ``root``, in a stable order."""
        stack = [root]
        while stack:
            node = stack.pop()
            if not node.is_cohort:
                yield node
            stack.extend(reversed(list(node.children.values())))

    # -- quota arithmetic ------------------------------------------------------------------------

    def recompute(self) -> None:
        """Recompute subtree / guaranteed quota and cohort usage bottom-up (on spec changes)."""
        self.version += 1
        for root in list(self.roots()):
            self._recompute(root)
            root.stamp = self.version
            stack = [root]
            while stack:
                node = stack.pop()
                node.top = root
                stack.extend(node.children.values())

    def tree_stamp(self, node: QuotaNode) -> int:
        """Changes when usage or quota changes anywhere in ``node``'s cohort tree, and only then
        (unlike ``version``, which any tree's change bumps): what a queue may take depends on its
        own tree only, so answers keyed on it stay valid while a thousand other queues admit."""
        return node.top.stamp

    def _recompute(self, node: QuotaNode) -> None:
        subtree = dict(node.nominal)
        if node.is_cohort:
            usage: dict[FlavorResource, int] = {}
            for child in node.children.values():
                self._recompute(child)
                for fr in child.subtree:
                    subtree[fr] = subtree.get(fr, 0) + child.lendable(fr)
                for fr, used in child.usage.items():
                    spill = max(0, used - child.guaranteed.get(fr, 0))
                    if spill:
                        usage[fr] = usage.get(fr, 0) + spill
            node.usage = usage
        node.subtree = subtree
        node.guaranteed = {fr: q - node.lendable(fr) for fr, q in subtree.items() if q - node.lendable(fr) > 0}

    def add_usage(self, node: QuotaNode, fr: FlavorResource, delta: int) -> None:
        """Charge ``delta`` of ``fr`` to a ClusterQueue and propagate the spill up the tree."""
        if self.log is not None:
            self.log.append((node, fr, delta))
        self._propagate(node, fr, delta)

    def undo(self, mark: int) -> None:
        """Roll the open statement's usage changes back to ``mark``."""
        log = self.log
        assert log is not None
        while len(log) > mark:
            node, fr, delta = log.pop()
            self._propagate(node, fr, -delta)

    def _propagate(self, node: QuotaNode, fr: FlavorResource, delta: int) -> None:
        self.version += 1
        old = node.usage.get(fr, 0)
        new = old + delta
        node.usage[fr] = new
        node.usage_version += 1
        while node.parent is not None:
            g = node.guaranteed.get(fr, 0)
            d = max(0, new - g) - max(0, old - g)
            node = node.parent
            if d == 0:
                break
            old = node.usage.get(fr, 0)
            new = old + d
            node.usage[fr] = new
        node.top.stamp = self.version

    def available(self, node: QuotaNode, fr: FlavorResource) -> int:
        """How much more of ``fr`` the node may take now, borrowing included.

        The cohorts' answers are kept until usage or quota next changes: the queues of a cohort
        ask about the same pool many times between two changes.
        """
        used = node.usage.get(fr, 0)
        parent = node.parent
        if parent is None:
            return max(0, node.subtree.get(fr, 0) - used)
        memo = parent.memo
        stamp = parent.top.stamp
        if parent.memo_version != stamp:
            memo.clear()
            parent.memo_version = stamp
        from_parent = memo.get(fr)
        if from_parent is None:
            from_parent = memo[fr] = self.available(parent, fr)
        g = node.guaranteed.get(fr, 0)
        local = max(0, g - used)
        limit = node.borrowing_limit.get(fr)
        if limit is not None:
            stored = node.subtree.get(fr, 0) - g
            cap = stored - max(0, used - g) + limit
            from_parent = min(from_parent, cap)
        return local + max(0, from_parent)

    def potential(self, node: QuotaNode, fr: FlavorResource) -> int:
        """The most ``fr`` the node could ever hold if nothing else in its tree used any.

        Same recursion as :meth:`available` with all usage at zero.
        """
        parent = node.parent
        if parent is None:
            return node.subtree.get(fr, 0)
        g = node.guaranteed.get(fr, 0)
        from_parent = self.potential(parent, fr)
        limit = node.borrowing_limit.get(fr)
        if limit is not None:
            from_parent = min(from_parent, node.subtree.get(fr, 0) - g + limit)
        return g + max(0, from_parent)

    def nominal_headroom(self, node: QuotaNode, fr: FlavorResource) -> int:
        """Unused nominal quota of a ClusterQueue (what it can take without borrowing)."""
        return node.nominal.get(fr, 0) - node.usage.get(fr, 0)
