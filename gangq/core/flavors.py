"""Flavor assignment: which ResourceFlavor each pod set's resources are charged to.

For every pod set and every resource group that covers its requests, the ClusterQueue's flavors are
tried in the order the admin listed them; a flavor is a candidate when its nodeLabels agree with the
pod set's nodeSelector and the pods tolerate its taints. Each complete assignment is classified by
quota:

- ``FIT``: within the ClusterQueue's unused nominal quota;
- ``BORROW``: fits only by borrowing from the cohort;
- ``PREEMPT``: could fit only if admitted workloads were preempted;
- ``NO_FIT``: more than the ClusterQueue could ever get.

``flavorFungibility`` orders the candidates: with ``whenCanBorrow: TryNextFlavor`` every ``FIT``
assignment is tried before any ``BORROW`` one; with ``whenCanPreempt: MayStopSearch`` the search stops
at the first assignment that would need preemption (so the gang preempts in its preferred flavor
rather than spilling into the next one).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from gangq.core.model import ClusterQueueSpec, FlavorResource, FlavorSpec, PodSetSpec, flavor_resource
from gangq.core.nodes import flavor_fits_pod_set
from gangq.core.quota import QuotaNode, QuotaTree
from gangq.core.units import format_amount

FIT = 0
BORROW = 1
PREEMPT = 2
NO_FIT = 3

MAX_ASSIGNMENTS = 32  # combinations of flavors tried per workload


class PodSetChoice:
    """The flavors chosen for one pod set: resource → flavor."""

    __slots__ = ("flavors", "index", "pod_set")

    def __init__(self, index: int, pod_set: PodSetSpec, flavors: dict[str, str]) -> None:
        self.index = index
        self.pod_set = pod_set
        self.flavors = flavors


class Assignment:
    """A complete flavor assignment for a gang, with its quota classification."""

    __slots__ = ("borrowing", "choices", "index", "message", "mode", "usage")

    def __init__(self, choices: tuple[PodSetChoice, ...], usage: dict[FlavorResource, int], index: int = 0) -> None:
        self.index = index  # position in the gang's FlavorOptions
        self.choices = choices
        self.usage = usage
        self.mode = NO_FIT
        self.message = ""
        self.borrowing = False


class Candidates:
    """The assignments to try, in preference order, or why there are none."""

    __slots__ = ("assignments", "message", "never_fits")

    def __init__(self, assignments: list[Assignment], never_fits: bool, message: str) -> None:
        self.assignments = assignments
        self.never_fits = never_fits
        self.message = message


def _group_options(
    cq: ClusterQueueSpec, flavors: Mapping[str, FlavorSpec], pod_set: PodSetSpec
) -> tuple[list[tuple[tuple[str, ...], list[str]]], str]:
    """Per resource group that the pod set needs: (its requested resources, candidate flavors)."""
    needed = [r for r, v in pod_set.requests.items() if v > 0]
    options: list[tuple[tuple[str, ...], list[str]]] = []
    covered: set[str] = set()
    for group in cq.resource_groups:
        resources = tuple(r for r in group.covered_resources if r in pod_set.requests)
        if not resources:
            continue
        covered.update(resources)
        names = [f.name for f in group.flavors if f.name in flavors and flavor_fits_pod_set(flavors[f.name], pod_set)]
        if not names:
            return [], (
                f"no flavor of ClusterQueue {cq.name!r} for {', '.join(resources)} matches pod set "
                f"{pod_set.name!r} (nodeSelector / tolerations)"
            )
        options.append((resources, names))
    missing = [r for r in needed if r not in covered]
    if missing:
        return [], f"ClusterQueue {cq.name!r} has no quota for {', '.join(sorted(missing))}"
    return options, ""


def classify(
    tree: QuotaTree, node: QuotaNode, usage: Mapping[FlavorResource, int], messages: bool = True
) -> tuple[int, str]:
    """Quota class of charging ``usage`` to ClusterQueue ``node``, and (with ``messages``) why it
    is not ``FIT``."""
    mode = FIT
    message = ""
    for fr, need in usage.items():
        if need <= 0:
            continue
        avail = tree.available(node, fr)
        if need <= avail:
            if need > tree.nominal_headroom(node, fr) and mode < BORROW:
                mode = BORROW
            continue
        if need <= tree.potential(node, fr):
            if mode < PREEMPT:
                mode = PREEMPT
                message = explain(tree, node, fr, need, avail) if messages else ""
            continue
        if not messages:
            return NO_FIT, ""
        return NO_FIT, (
            f"needs {format_amount(fr[1], need)} {fr[1]} in flavor {fr[0]}, more than ClusterQueue "
            f"{node.name!r} can ever get ({format_amount(fr[1], tree.potential(node, fr))})"
        )
    return mode, message


def explain(tree: QuotaTree, node: QuotaNode, fr: FlavorResource, need: int, avail: int) -> str:
    """A reason a person can act on: what is missing and what caps it."""
    flavor, resource = fr
    text = (
        f"waits for {format_amount(resource, need)} {resource} in flavor {flavor}: "
        f"{format_amount(resource, avail)} free in quota"
    )
    caps: list[str] = []
    used = node.usage.get(fr, 0)
    nominal = node.nominal.get(fr, 0)
    caps.append(f"{format_amount(resource, used)} of nominal {format_amount(resource, nominal)} in use")
    parent = node.parent
    if parent is not None:
        limit = node.borrowing_limit.get(fr)
        borrowed = max(0, used - nominal)
        if limit is not None and borrowed >= limit:
            caps.append(f"borrowing limit {format_amount(resource, limit)} reached")
        else:
            root = node.root()
            caps.append(
                f"borrowing capped by cohort {root.name} ({format_amount(resource, tree.available(parent, fr))} free)"
            )
    return f"{text} ({'; '.join(caps)})"


PodSetChoices = list[list[PodSetChoice]]


class FlavorOptions:
    """What a gang's flavor assignment can be, from specs alone: the flavor combinations to try in
    order and the quota each would charge; or ``why`` none can ever match.

    Depends only on specs, so the engine caches it per workload until the configuration changes;
    classifying it against current usage (:func:`assignments`) is then a pass over a few dicts.
    """

    __slots__ = ("combos", "single", "usages", "why")

    def __init__(self, combos: list[tuple[PodSetChoice, ...]], usages: list[dict[FlavorResource, int]], why: str):
        self.combos = combos
        self.usages = usages
        self.why = why
        self.single = len(combos) == 1


GroupCache = dict[tuple[object, ...], tuple[list[tuple[tuple[str, ...], list[str]]], str]]


def flavor_options(
    cq: ClusterQueueSpec,
    flavors: Mapping[str, FlavorSpec],
    pod_sets: Sequence[PodSetSpec],
    group_cache: GroupCache | None = None,
) -> FlavorOptions:
    """Per pod set, the flavor choices to try in order, combined into at most ``MAX_ASSIGNMENTS``
    complete assignments with the usage each charges.

    ``group_cache`` (valid while ``cq`` and ``flavors`` do not change) keeps each pod set's
    candidate flavors per resource group: they depend on which resources it requests and where
    it may run, not on how much, so a deep queue of differently sized gangs matches its flavors'
    labels and taints once per kind of pod set."""
    per_pod_set: PodSetChoices = []
    for index, pod_set in enumerate(pod_sets):
        if pod_set.count == 0:
            continue
        if group_cache is None:
            options, why = _group_options(cq, flavors, pod_set)
        else:
            key = (cq.name, pod_set.name, tuple(sorted(pod_set.requests)), pod_set.placement_signature())
            cached = group_cache.get(key)
            if cached is None:
                cached = group_cache[key] = _group_options(cq, flavors, pod_set)
            options, why = cached
        if why:
            return FlavorOptions([], [], why)
        choices = []
        for names in itertools.islice(itertools.product(*(names for _, names in options)), MAX_ASSIGNMENTS):
            mapping: dict[str, str] = {}
            for (resources, _), flavor in zip(options, names, strict=True):
                for resource in resources:
                    mapping[resource] = flavor
            choices.append(PodSetChoice(index, pod_set, mapping))
        per_pod_set.append(choices)
    combos = list(itertools.islice(itertools.product(*per_pod_set), MAX_ASSIGNMENTS))
    usages: list[dict[FlavorResource, int]] = []
    for combo in combos:
        usage: dict[FlavorResource, int] = {}
        for choice in combo:
            ps = choice.pod_set
            count = ps.count
            mapping = choice.flavors
            for resource, amount in ps.requests.items():
                fr = flavor_resource(mapping[resource], resource)
                usage[fr] = usage.get(fr, 0) + amount * count
        usages.append(usage)
    return FlavorOptions(combos, usages, "")


def assignments(
    tree: QuotaTree, node: QuotaNode, cq: ClusterQueueSpec, options: FlavorOptions, messages: bool = True
) -> Candidates:
    """All flavor assignments of a gang worth trying, in preference order (see module doc);
    without ``messages`` the reasons are left empty (for what-ifs that only need the modes)."""
    if options.why:
        return Candidates([], True, options.why)
    result: list[Assignment] = []
    first_message = ""
    never_message = ""
    never = True
    stop_at_preempt = cq.flavor_fungibility.when_can_preempt == "MayStopSearch"
    for index, (combo, usage) in enumerate(zip(options.combos, options.usages, strict=True)):
        a = Assignment(combo, usage, index)
        a.mode, a.message = classify(tree, node, usage, messages)
        a.borrowing = a.mode == BORROW
        if a.mode != NO_FIT:
            never = False
            if a.message and not first_message:
                first_message = a.message
        elif not never_message:
            never_message = a.message
        result.append(a)
        if options.single:
            break
        if a.mode == PREEMPT and stop_at_preempt:
            break
    if cq.flavor_fungibility.when_can_borrow == "TryNextFlavor":
        result.sort(key=lambda a: a.mode if a.mode <= BORROW else BORROW + 1)
    if never:
        return Candidates([], True, never_message)
    return Candidates([a for a in result if a.mode != NO_FIT], False, first_message)
