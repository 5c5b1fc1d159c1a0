"""Flavor options and node placement of one gang, and the what-if fit tests built on them.

A gang's flavor options (:mod:`~gangq.core.flavors`) are cached on the gang and shared by gangs of
the same shape; its pods are placed on the nodes of the flavors an option assigns
(:class:`~gangq.core.nodes.NodeIndex`). Every "would it fit?" of the other rule modules is asked
here, inside the caller's :class:`~gangq.core.statement.Statement`.
"""

from __future__ import annotations

from collections.abc import Mapping

from mypy_extensions import mypyc_attr

from gangq.core.decisions import PendingReason as _PendingReason
from gangq.core.flavors import (
    Assignment,
    Candidates,
    FlavorOptions,
    GroupCache,
    PodSetChoice,
    assignments,
    flavor_options,
)
from gangq.core.model import (
    FlavorResource,
    PodSetSpec,
    TopologyRequest,
)
from gangq.core.nodes import NodePool
from gangq.core.queue import ClusterQueueState, NodeMark, Workload
from gangq.core.scratch import CycleScratch
from gangq.core.selectors import Toleration, affinity_matches, selector_matches, taints_tolerated
from gangq.core.state import EngineState
from gangq.core.statement import Statement
from gangq.core.topology import place_pod_set
from gangq.core.units import format_amount

_MAX_SHAPES = 100_000


def _pod_set_signature(ps: PodSetSpec) -> tuple[object, ...]:
    """Everything of a pod set that its flavor options depend on."""
    return (ps.name, ps.count, tuple(sorted(ps.requests.items())), ps.placement_signature())


def node_reason(why: str) -> _PendingReason:
    """The reason code of a failed node check's message (see Placement.place)."""
    return "InsufficientMinResources" if why.startswith("minResources") else "InsufficientNodes"


# Tests extend this class from Python (counting what the engine tries, or with every retry shortcut
# off); mypyc allows that only when asked.
@mypyc_attr(allow_interpreted_subclasses=True)
class Placement:
    """Flavor options, node placement and fit tests of gangs."""

    def __init__(self, state: EngineState) -> None:
        self.s = state
        # key -> (config version, ClusterQueue, the usage of each flavor option it could ever get)
        self.reachable: dict[str, tuple[tuple[int, int], str, tuple[Mapping[FlavorResource, int], ...]]] = {}
        # Flavor options shared by the gangs of a queue that have the same pod sets (see options).
        self.shapes: dict[tuple[object, ...], FlavorOptions] = {}
        self.groups: GroupCache = {}  # see flavor_options

    def options(self, cq: ClusterQueueState, wl: Workload) -> FlavorOptions:
        """The gang's flavor options in ``cq`` (cached on the gang until the specs change).

        Gangs with equal pod sets, in queues with the same flavors, share one FlavorOptions: a
        deep queue holds many gangs of few shapes, and the options (with their usage per
        flavor-resource) are read on every retry screen, so sharing keeps the engine's working
        set small.
        """
        cached = wl.choices
        if cached is None or cached[0] != self.s.world.config_version or cached[1] != cq.name:
            signatures = tuple(_pod_set_signature(ps) for ps in wl.spec.pod_sets)
            shapes = self.shapes
            # Keyed on the queue's flavor layout, not its name: queues with the same resource
            # groups and flavors (a platform's per-team queues) share options too. Options
            # that can never match name the ClusterQueue in their reason, so they do not.
            options = shapes.get((cq.layout, signatures))
            if options is None:
                options = shapes.get((cq.name, signatures))
            if options is None:
                if len(shapes) >= _MAX_SHAPES:
                    shapes.clear()  # caches: shapes of gangs long gone must not pile up
                    self.groups.clear()
                options = flavor_options(cq.spec, self.s.world.flavors, wl.spec.pod_sets, self.groups)
                shapes[(cq.name, signatures) if options.why else (cq.layout, signatures)] = options
            cached = (self.s.world.config_version, cq.name, options)
            wl.choices = cached
        return cached[2]

    def assignments(self, cq: ClusterQueueState, wl: Workload, messages: bool = True) -> Candidates:
        return assignments(self.s.world.quota, cq.node, cq.spec, self.options(cq, wl), messages)

    def pod_sets_of(
        self, choices: tuple[PodSetChoice, ...]
    ) -> list[tuple[int, dict[str, int], int, tuple[NodePool, ...]]]:
        out = []
        for choice in choices:
            ps = choice.pod_set
            labels: dict[str, str] = {}
            tolerations: list[Toleration] = []
            for flavor_name in dict.fromkeys(choice.flavors.values()):
                flavor = self.s.world.flavors[flavor_name]
                labels.update(flavor.node_labels)
                tolerations.extend(flavor.tolerations)
            pools = self.s.world.nodes.candidate_pools(labels, tuple(tolerations), ps)
            out.append((choice.index, ps.requests, ps.count, pools))
        # Largest pods first: they are the hardest to fit.
        out.sort(key=lambda item: tuple(-v for _, v in sorted(item[1].items())))
        return out

    def place(
        self, wl: Workload, a: Assignment, ctx: CycleScratch | None
    ) -> tuple[str, dict[tuple[int, str], int], int]:
        """Node check inside the caller's statement: charge the planned pods, or say why not.
        Returns (why not, or "", the planned pods per (pod set, node), how many pods were placed).

        A placement that fitted every pod is kept on the gang with the state it was found in
        (node epoch, no what-if change open): asked again in the same state, it is charged again
        without a search. A starving head is placed in a what-if (its reservation: does it fit
        now?) and, when it does, placed again at once by its real attempt, which then needs no
        second search.
        """
        nodes = self.s.world.nodes
        state = (nodes.epoch, self.s.world.config_version, nodes.version, a.index)
        clean = not nodes.log  # the state is the real one of this epoch
        known = wl.placement
        if clean and known is not None and known[0] == state:
            for node, requests, count in known[1]:
                nodes.allocate(node, requests, count)
            return "", dict(known[2]), known[3]
        pod_sets = self.pod_sets_of(a.choices)
        topology = self.topology_requests(a.choices) if wl.has_topology else None
        if topology:
            return self.place_by_topology(wl, pod_sets, topology, ctx, a.choices)
        placement = nodes.place(pod_sets, wl.min_member, ctx.unplaceable if ctx is not None else None)
        if placement.placed < wl.min_member:
            sizes = ", ".join(
                f"{count}× {{{', '.join(f'{format_amount(r, v)} {r}' for r, v in sorted(req.items()))}}}"
                for _, req, count, _ in pod_sets
            )
            return (
                (
                    f"only {placement.placed} of the {wl.min_member} pods needed together fit on nodes of the "
                    f"assigned flavors ({sizes}){self.provisioning_note(a.choices)}"
                ),
                {},
                placement.placed,
            )
        if wl.spec.min_resources:
            pools = {p.pool_id: p for _, _, _, ps in pod_sets for p in ps}
            free = self.s.world.nodes.free_in_pools(pools.values())
            planned: dict[str, int] = {}
            for (index, _), count in placement.pods.items():
                for r, v in wl.spec.pod_sets[index].requests.items():
                    planned[r] = planned.get(r, 0) + v * count
            for resource, amount in wl.spec.min_resources.items():
                have = free.get(resource, 0) + planned.get(resource, 0)
                if have < amount:
                    return (
                        (
                            f"minResources needs {format_amount(resource, amount)} {resource} free on nodes of the "
                            f"assigned flavors, {format_amount(resource, have)} is"
                        ),
                        {},
                        placement.placed,
                    )
        log = nodes.log
        if clean and log is not None and placement.placed == sum(count for _, _, count, _ in pod_sets):
            wl.placement = (state, list(log), dict(placement.pods), placement.placed)
        return "", placement.pods, placement.placed

    def provisioning_note(self, choices: tuple[PodSetChoice, ...]) -> str:
        """For a failed node check: what each autoscaler pool whose nodes the gang's pods could use
        may still add, and the limit that bounds it (``; NodePool 'gpu' may add no more nodes (its
        limit of 32 nvidia.com/gpu (32 in use))``); empty without such pools."""
        provisioning = self.s.world.provisioning
        if not provisioning.pools:
            return ""
        notes: dict[str, None] = {}
        for choice in choices:
            ps = choice.pod_set
            labels: dict[str, str] = {}
            tolerations: list[Toleration] = list(ps.tolerations)
            for flavor_name in dict.fromkeys(choice.flavors.values()):
                flavor = self.s.world.flavors[flavor_name]
                labels.update(flavor.node_labels)
                tolerations.extend(flavor.tolerations)
            for pool in provisioning.pools.values():
                spec = pool.spec
                if (
                    selector_matches(labels, spec.labels)
                    and selector_matches(ps.node_selector, spec.labels)
                    and affinity_matches(ps.node_affinity, spec.labels)
                    and taints_tolerated(spec.taints, tolerations)
                ):
                    notes[provisioning.describe(pool)] = None
        return "".join(f"; {note}" for note in notes)

    def topology_requests(
        self, choices: tuple[PodSetChoice, ...]
    ) -> dict[int, tuple[list[str], TopologyRequest] | str]:
        """Per pod set (index) with a topology request other than plain ``Unconstrained``: the
        levels of its flavor's Topology and the request, or why it cannot be met (its flavor has
        no Topology, or the level is not one of its levels)."""
        out: dict[int, tuple[list[str], TopologyRequest] | str] = {}
        for choice in choices:
            request = choice.pod_set.topology
            if request is None or (request.mode == "Unconstrained" and request.slice_size is None):
                continue
            names = list(dict.fromkeys(choice.flavors.values()))
            topologies = [self.s.world.flavors[name].topology for name in names]
            spec = topologies[0] if topologies else None
            if spec is None or any(t is None or t.signature() != spec.signature() for t in topologies):
                out[choice.index] = (
                    f"pod set {choice.pod_set.name!r} asks for a topology placement, and flavor "
                    f"{names[0] if names else '?'!r} has no Topology (spec.topologyName)"
                )
                continue
            for label in (request.level, request.slice_level):
                if label is not None and label not in spec.levels:
                    out[choice.index] = (
                        f"pod set {choice.pod_set.name!r} asks for topology level {label!r}, which is not a "
                        f"level of Topology {spec.name!r} ({', '.join(spec.levels)})"
                    )
                    break
            else:
                out[choice.index] = (spec.levels, request)
        return out

    def place_by_topology(
        self,
        wl: Workload,
        pod_sets: list[tuple[int, dict[str, int], int, tuple[NodePool, ...]]],
        topology: dict[int, tuple[list[str], TopologyRequest] | str],
        ctx: CycleScratch | None,
        choices: tuple[PodSetChoice, ...] = (),
    ) -> tuple[str, dict[tuple[int, str], int], int]:
        """:meth:`place` for a gang with topology requests: each such pod set whole, in the domain
        :func:`~gangq.core.topology.place_pod_set` chooses; the other pod sets as usual, for the
        pods the gang still needs (see docs/engine.md, Topology)."""
        nodes = self.s.world.nodes
        first_fit = self.s.world.config.topology_fit == "FirstFit"
        pods: dict[tuple[int, str], int] = {}
        placed = 0
        plain = []
        for entry in pod_sets:
            index, requests, count, pools = entry
            wanted = topology.get(index)
            if wanted is None:
                plain.append(entry)
                continue
            if isinstance(wanted, str):
                return wanted, {}, placed
            levels, request = wanted
            result = place_pod_set(nodes, pools, levels, request, requests, count, first_fit)
            if result.why:
                return result.why + self.provisioning_note(choices), {}, placed
            for node, n in result.pods.items():
                pods[(index, node)] = n
            placed += result.placed
        if plain:
            rest = nodes.place(plain, max(0, wl.min_member - placed), ctx.unplaceable if ctx is not None else None)
            pods.update(rest.pods)
            placed += rest.placed
        if placed < wl.min_member:
            why = f"only {placed} of the {wl.min_member} pods needed together fit on nodes of the assigned flavors"
            return why + self.provisioning_note(choices), {}, placed
        return "", pods, placed

    def release_in_statement(self, victim: Workload) -> None:
        """What-if: free a victim's quota and every node capacity it holds."""
        self._charge_in_statement(victim, -1)

    def restore_in_statement(self, victim: Workload) -> None:
        """What-if: charge back what :meth:`release_in_statement` freed."""
        self._charge_in_statement(victim, 1)

    def _charge_in_statement(self, victim: Workload, sign: int) -> None:
        """What-if: charge (``sign`` 1) or free (-1) a victim's quota and the node capacity it holds."""
        cq = victim.cq
        assert cq is not None
        for fr, amount in victim.usage.items():
            self.s.world.quota.add_usage(cq.node, fr, sign * amount)
        for node_name, req in victim.held.items():
            node = self.s.world.nodes.nodes.get(node_name)
            if node is not None:
                self.s.world.nodes.allocate(node, req, sign)

    def fits(self, cq: ClusterQueueState, wl: Workload, a: Assignment, nodes_checked: bool) -> bool:
        """Would ``wl`` fit with assignment ``a`` in the current (what-if) state?"""
        return self.fits_quota(cq, a) and self.fits_nodes(wl, a, nodes_checked)

    def fits_nodes(self, wl: Workload, a: Assignment, nodes_checked: bool) -> bool:
        """Would the pods of ``wl`` with assignment ``a`` fit the nodes now (always, unchecked)?"""
        return self._node_trial(wl, a, nodes_checked)[0]

    def _node_trial(self, wl: Workload, a: Assignment, nodes_checked: bool) -> tuple[bool, int]:
        """:meth:`fits_nodes`, and if not, how many of the gang's ``minMember`` pods the nodes
        could not take (0 when only ``minResources`` failed)."""
        if not nodes_checked:
            return True, 0
        with Statement(self.s.world.quota, self.s.world.nodes):
            why, _, placed = self.place(wl, a, None)
        if not why:
            return True, 0
        return False, max(wl.min_member - placed, 0)

    def fits_quota(self, cq: ClusterQueueState, a: Assignment) -> bool:
        """Does the quota available to ``cq`` now take assignment ``a``?"""
        available = self.s.world.quota.available
        node = cq.node
        return all(amount <= available(node, fr) for fr, amount in a.usage.items())

    def fits_any(self, cq: ClusterQueueState, wl: Workload, cands: Candidates, nodes_checked: bool) -> bool:
        """Would any of the gang's candidate assignments fit in the current (what-if) state?"""
        return any(self.fits(cq, wl, a, nodes_checked) for a in cands.assignments)

    def fit_test(self, cq: ClusterQueueState, wl: Workload, a: Assignment, nodes_checked: bool) -> tuple[bool, int]:
        """Would ``wl`` fit with assignment ``a`` in the current (what-if) state, and if not, how
        many of its ``minMember`` pods the nodes could not take: 0 when that is not what failed
        (the quota, or ``minResources``)."""
        if not self.fits_quota(cq, a):
            return False, 0
        return self._node_trial(wl, a, nodes_checked)

    def single_pod_set(self, a: Assignment) -> tuple[Mapping[str, int], frozenset[int]] | None:
        """The per-pod requests and candidate node pools of an assignment of one pod set, or None.

        For such a gang, placement takes every pod any node can hold (:meth:`NodeIndex.place`
        places pods of one size greedily until no node takes one), so the pods it places are
        the sum over the candidate nodes of :meth:`NodeState.how_many`: a count that the nodes
        whose capacity changes keep exact."""
        if len(a.choices) != 1:
            return None
        ((_, requests, _, pools),) = self.pod_sets_of(a.choices)
        return requests, frozenset(pool.pool_id for pool in pools)

    def reachable_options(self, cq: ClusterQueueState, wl: Workload) -> tuple[Mapping[FlavorResource, int], ...]:
        """The usage of each flavor option of ``wl`` in ``cq`` that it could ever get (nothing
        beyond the queue's quota potential, pods that empty nodes of its flavors could hold):
        none if it never fits. From the specs only, so cached until they change (all of them,
        also those a ``MayStopSearch`` flavor search does not reach now). An option whose pods
        fit no node counts for nothing: a starving head that could only ever run in a flavor a
        lender claims would hold the lender's head back through an option its pods never fit,
        and neither would be admitted on an idle cluster."""
        version = (self.s.world.config_version, self.s.world.nodes.spec_version)
        cached = self.reachable.get(wl.key)
        if cached is None or cached[0] != version or cached[1] != cq.name:
            options = self.options(cq, wl)
            usages = options.usages[:1] if options.single else options.usages
            potential, node = self.s.world.quota.potential, cq.node
            nodes_checked = cq.spec.admission_mode == "QuotaAndNodes"
            reachable = (
                ()
                if options.why
                else tuple(
                    usage
                    for index, usage in enumerate(usages)
                    if all(need <= potential(node, fr) for fr, need in usage.items())
                    and (not nodes_checked or self.option_fits_empty_nodes(wl, options.combos[index]))
                )
            )
            cached = self.reachable[wl.key] = (version, cq.name, reachable)
        return cached[2]

    def never_fits(self, cq: ClusterQueueState, wl: Workload) -> bool:
        """Could ``wl`` not fit even an empty cluster (quota potential, node capacity)? From specs
        only: no flavor option of it is reachable (:meth:`reachable_options`), every option
        counted, not only those a flavor search lists now: a ``MayStopSearch`` search lists
        fewer while usage is high, and a cached answer would then depend on when it was first
        asked (and so on the retry policy)."""
        return not self.reachable_options(cq, wl)

    def option_fits_empty_nodes(self, wl: Workload, choices: tuple[PodSetChoice, ...]) -> bool:
        """Could the gang's ``minMember`` pods fit the empty nodes of one flavor option? From the
        specs only (:meth:`reachable_options` keeps the answer until they change).

        Each pod set's pods must fit the empty nodes node by node, not only in total: a gang of 3
        pods of 4 GPUs on nodes of 6, 3, 2, 4 and 3 GPUs (18 in all) never fits, and as a
        starving head it would hold its queue on an idle cluster."""
        pod_sets = self.pod_sets_of(choices)
        nodes = self.s.world.nodes
        placeable = 0  # any minMember pods may be the ones placed, but no more of a pod set than its nodes hold
        for _, requests, count, pools in pod_sets:
            pods = nodes.empty_pods(pools, requests)
            if not pods:
                return False  # no empty node takes one of its pods
            placeable += min(count, pods)
        if placeable < wl.min_member:
            return False
        total = nodes.empty_total(p for _, _, _, pools in pod_sets for p in pools)
        needed: dict[str, int] = {}
        pods_left = wl.min_member
        for _, requests, count, _ in pod_sets:
            take = min(count, pods_left)
            pods_left -= take
            for resource, amount in requests.items():
                needed[resource] = needed.get(resource, 0) + amount * take
        return all(total.get(r, 0) >= v for r, v in needed.items())

    def mark_holds(self, wl: Workload, mark: NodeMark) -> bool:
        """Does ``wl``'s node mark still prove that its pods do not fit (see NodeMark)?

        When it does, the mark moves forward: the nodes freed since it was made could take at
        most ``gain`` of the missing pods, so from now on the gang is ``shortfall - gain`` pods
        short. Sound: a node not freed again since can only have lost capacity, and one freed
        again is counted anew. Each check then scans only the nodes freed since the last one,
        instead of giving up (and trying the gang in full) once many nodes have been freed.
        """
        nodes = self.s.world.nodes
        gain = nodes.pods_freed_since(
            mark.freed_seq,
            wl.spec.pod_sets[0].requests,
            mark.shortfall,
            pools=mark.pools if mark.pools_version == nodes.version else None,
        )
        if gain is None or gain >= mark.shortfall:
            return False
        mark.freed_seq = nodes.freed_seq
        mark.shortfall -= gain
        return True
