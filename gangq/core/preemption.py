"""Preemption of whole gangs: who may be preempted, in which order, and the minimal set.

Policy (per the preemptor's ClusterQueue, Kueue's vocabulary):

- ``withinClusterQueue``: ``LowerPriority`` lets a workload preempt lower-priority workloads of its
  own queue; ``LowerOrNewerEqualPriority`` also equal-priority ones created after it.
- ``reclaimWithinCohort``: a queue reclaims its lent quota from other queues of the cohort that are
  borrowing: ``Any`` workload of theirs, or only ``LowerPriority`` ones.
- ``borrowWithinCohort``: when the preemptor itself must borrow to fit, only workloads of lower
  priority (and at most ``maxPriorityThreshold``) in other queues may be preempted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")
M = TypeVar("M")


class Candidate(Protocol):
    """What victim selection needs to know about an admitted workload."""

    @property
    def priority(self) -> int: ...

    @property
    def creation_time(self) -> float: ...


def may_preempt_within_queue(policy: str, preemptor_priority: int, preemptor_created: float, victim: Candidate) -> bool:
    """``withinClusterQueue`` policy applied to one admitted workload of the preemptor's queue."""
    if policy == "LowerPriority":
        return victim.priority < preemptor_priority
    if policy == "LowerOrNewerEqualPriority":
        return victim.priority < preemptor_priority or (
            victim.priority == preemptor_priority and victim.creation_time > preemptor_created
        )
    return False


def may_reclaim(
    reclaim: str,
    borrow_policy: str,
    max_priority_threshold: int | None,
    preemptor_priority: int,
    preemptor_borrows: bool,
    victim: Candidate,
) -> bool:
    """Cohort policy applied to one admitted workload of another (borrowing) queue."""
    if reclaim == "Never":
        return False
    if preemptor_borrows:
        if borrow_policy != "LowerPriority" or victim.priority >= preemptor_priority:
            return False
        return max_priority_threshold is None or victim.priority <= max_priority_threshold
    if reclaim == "Any":
        return True
    return victim.priority < preemptor_priority


def victim_order(
    evicting: bool, other_queue: bool, share: float, priority: int, admitted_at: float, seq: int
) -> tuple[int, int, float, int, float, int]:
    """Sort key of preemption candidates, best victim first. Tie-breaks, in order:

    1. gangs already being evicted (their capacity is freed without a new eviction);
    2. gangs of other ClusterQueues before gangs of the preemptor's own queue;
    3. with fair sharing, queues with a larger share first (0 when fair sharing is off);
    4. lower priority first;
    5. most recently admitted first (least work lost);
    6. the later-submitted workload first (determinism).
    """
    return (0 if evicting else 1, 0 if other_queue else 1, -share, priority, -admitted_at, -seq)


def minimal_victims(
    candidates: Sequence[T],
    release: Callable[[T], None],
    fits: Callable[[], bool],
    mark: Callable[[], M],
    undo: Callable[[M], None],
) -> list[T] | None:
    """The smallest prefix-greedy set of ``candidates`` whose release makes the gang fit, then
    pruned: each chosen victim is put back (most important first) if the gang still fits without it.

    ``release`` frees a candidate's quota and nodes inside the caller's statement; ``mark`` /
    ``undo`` bracket trial releases. Returns ``None`` when even releasing every candidate does not
    make the gang fit. Leaves nothing released (the caller's statement is restored to entry state).
    """
    start = mark()
    chosen: list[T] = []
    for candidate in candidates:
        release(candidate)
        chosen.append(candidate)
        if fits():
            break
    else:
        undo(start)
        return None
    # Prune: try keeping each victim, the last-chosen (most protected) first.
    needed = list(chosen)
    for victim in reversed(chosen):
        undo(start)
        trial = [v for v in needed if v is not victim]
        for v in trial:
            release(v)
        if fits():
            needed = trial
    undo(start)
    return needed
