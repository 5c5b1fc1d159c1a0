"""What the engine works out within one scheduling cycle and keeps until it ends.

Plain slotted records, no rules: the rules that fill them live in :mod:`~gangq.core.claims`
(the lenders' claims of a cohort tree), :mod:`~gangq.core.retry` (what a queue could take) and
:mod:`~gangq.core.cycle` (the cycle itself).
"""

from __future__ import annotations

from collections.abc import Mapping

from gangq.core.decisions import Decision
from gangq.core.model import FlavorResource
from gangq.core.queue import ClusterQueueState, Workload
from gangq.core.quota import QuotaNode, QuotaTree
from gangq.core.walk import CandidateWalk


class TreeClaims:
    """The reclaim claims of one cohort tree: ``frs``, flavor-resource -> ClusterQueue -> the
    waiting gang through which that queue claims its lent quota back; ``claimants``, per
    ClusterQueue that claims anything, that gang (see
    :meth:`gangq.core.claims.Claims.reclaimer_for`). Within a cycle, claims made after it started
    are ``late``: whether a claimant's gang is kept out (``kept_out``, per gang) is read from the
    others. ``yielding``: the ClusterQueues that claim something through a gang that is kept out
    (None: not worked out since the last claim was added). ``stuck``: the gangs of yielding claims
    that could not fit the quota when the cycle started.

    A plain class holding the dict, not a dict subclass: mypyc compiles a subclass of dict as an
    interpreted class, whose attributes every claim check would look up by name."""

    __slots__ = ("claimants", "frs", "kept_out", "late", "sealed", "stuck", "yielding")

    def __init__(self) -> None:
        self.frs: dict[FlavorResource, dict[str, Workload]] = {}
        self.claimants: dict[str, Workload] = {}
        self.kept_out: dict[str, bool] = {}
        self.late: set[tuple[FlavorResource, str]] = set()
        self.sealed = False
        self.stuck: frozenset[str] = frozenset()
        self.yielding: set[str] | None = None


class AvailableQuota:
    """A ClusterQueue's available quota per flavor-resource, computed on first use (:meth:`get`);
    with the quota potential and the lenders' claims on what its gangs would borrow, cached the
    same way. A plain class, not a dict subclass, for the reason TreeClaims gives."""

    __slots__ = ("node", "potentials", "reclaimers", "tree", "values")

    def __init__(self, tree: QuotaTree, node: QuotaNode) -> None:
        self.tree = tree
        self.node = node
        self.values: dict[FlavorResource, int] = {}
        self.reclaimers: dict[tuple[object, ...], Workload | None] = {}
        self.potentials: dict[FlavorResource, int] = {}

    def get(self, fr: FlavorResource) -> int:
        value = self.values.get(fr)
        if value is None:
            value = self.values[fr] = self.tree.available(self.node, fr)
        return value

    def potential(self, fr: FlavorResource) -> int:
        value = self.potentials.get(fr)
        if value is None:
            value = self.potentials[fr] = self.tree.potential(self.node, fr)
        return value


class CycleScratch:
    """Per-cycle scratch state."""

    __slots__ = (
        "admitted",
        "available",
        "available_heads",
        "available_quota",
        "capacity_failed",
        "claims",
        "decisions",
        "failed",
        "now",
        "preempted_in",
        "preemptors_first",
        "skipping",
        "stopped",
        "unplaceable",
        "walks",
    )

    def __init__(self, now: float, decisions: list[Decision]) -> None:
        self.now = now
        # Available quota per ClusterQueue, valid while the quota tree's version and
        # QueueBook.heads_version are still those it was worked out at (two ints, not a tuple:
        # compared on every retried gang).
        self.available: dict[str, AvailableQuota] = {}
        self.available_quota = -1
        self.available_heads = -1
        # Request vectors that fit no node of a candidate-pool set this cycle.
        self.unplaceable: dict[tuple[int, ...], list[Mapping[str, int]]] = {}
        # ClusterQueues whose head already tried preemption this cycle.
        self.preempted_in: set[str] = set()
        # A cycle of preemptors whose victims have stopped (see SchedulingCycle.try_preemptors):
        # other queues' reservations do not hold them back.
        self.preemptors_first = False
        # StrictFIFO queues that stopped at a head this cycle, and that head.
        self.stopped: dict[ClusterQueueState, Workload] = {}
        self.admitted: list[Workload] = []
        self.failed: list[Workload] = []
        # Gangs that failed this cycle for lack of quota or nodes, with no lender's claim involved
        # (see Reservations.holds_nothing_now).
        self.capacity_failed: set[str] = set()
        # Per cohort tree (its root): the lenders' claims in force when the cycle starts, and
        # those made during it; they hold until the cycle ends (see Claims.reclaimer_for).
        self.claims: dict[QuotaNode, TreeClaims] = {}
        self.decisions = decisions
        # Per ClusterQueue: the candidate walk of its retry in this cycle (see CandidateWalk).
        self.walks: dict[str, CandidateWalk] = {}
        # The walks among them whose last step skipped gangs (CandidateWalk.skipped): the ones a
        # change of state restarts (see SchedulingCycle.restart_walks).
        self.skipping: dict[str, CandidateWalk] = {}


class ScreenEntry:
    """One flavor-resource that ruled a queue's gangs out (see :class:`QuotaScreen`): the least
    that they need of it, what the queue could take of it then without lenders' claims, the tree
    root's ``released`` of it then, and each cohort above the queue with its usage of it then."""

    __slots__ = ("amount", "fr", "mark", "need", "used")

    def __init__(
        self,
        fr: FlavorResource,
        need: int,
        amount: int,
        mark: int,
        used: tuple[tuple[QuotaNode, int], ...],
    ) -> None:
        self.fr = fr
        self.need = need
        self.amount = amount
        self.mark = mark
        self.used = used


class QuotaScreen:
    """Why no queued gang of a ClusterQueue could fit, kept for
    :meth:`gangq.core.retry.IncrementalRetry.still_short`: the tree root it was made under, the
    least total demand where flavors add up (``split``: several pod sets may split a resource
    over flavors), the queue's ``demand_adds`` and the config version then, and the entries."""

    __slots__ = ("adds", "config_version", "entries", "least", "root", "split")

    def __init__(
        self,
        root: QuotaNode,
        least: int,
        split: bool,
        adds: int,
        config_version: int,
        entries: tuple[ScreenEntry, ...],
    ) -> None:
        self.root = root
        self.least = least
        self.split = split
        self.adds = adds
        self.config_version = config_version
        self.entries = entries


class QueueScratch:
    """The engine's working state of one ClusterQueue, beside its queue (ClusterQueueState)."""

    __slots__ = (
        "claims_cache",
        "fresh",
        "head_displaced",
        "node_blocked",
        "node_retry",
        "quota_retry",
        "retry",
        "screen",
        "screen_first",
    )

    def __init__(self) -> None:
        # Something that could let a waiting gang fit changed: retry the queue's waiting gangs.
        self.retry = False
        # The pending retry was asked for only by freed node capacity (see IncrementalRetry.node_retry).
        self.node_retry = False
        # ... or only by freed node capacity and quota that other queues of the tree gave back
        # (see IncrementalRetry.still_short).
        self.quota_retry = False
        # Gangs whose last try failed the node check (some may have left since).
        self.node_blocked: dict[str, Workload] = {}
        # Since the queue's last retry, a new gang that failed took the place of a protected head
        # that still waits: gangs that the old head held back may pass now (SchedulingCycle.run).
        self.head_displaced = False
        # The resource that last showed that no queued gang could fit (checked first next time).
        self.screen_first = ""
        self.screen: QuotaScreen | None = None
        # (protected head, quota usage version) -> the flavor-resources it claims back.
        self.claims_cache: tuple[Workload | None, int, tuple[FlavorResource, ...]] = (None, -1, ())
        # StrictFIFO: gangs queued since the queue's last cycle (to tell them what blocks them).
        self.fresh: list[Workload] = []
