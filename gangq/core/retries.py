"""Why the engine retries a ClusterQueue's waiting gangs, or runs another cycle at once.

The engine has no retry loop: a waiting gang is tried again only when a change asks for it
(see docs/engine.md, "No gang that fits waits for an unrelated event"). Every such request names
its reason, one member of :class:`RetryReason`, and goes through one of
:class:`~gangq.core.state.EngineState`'s retry methods, which say whom it retries:

- :meth:`~gangq.core.state.EngineState.retry` — one queue, in full (or, for ``NODES_FREED``,
  as a node retry that may look only at the gangs that failed the node check);
- :meth:`~gangq.core.state.EngineState.retry_others` — the other queues of the queue's cohort
  tree, for quota given back (a retry that :meth:`~gangq.core.retry.IncrementalRetry.still_short`
  may find needless);
- :meth:`~gangq.core.state.EngineState.retry_tree` — every queue of the tree, in full;
- :meth:`~gangq.core.state.EngineState.repeat_cycle` — another scheduling cycle in the same
  ``schedule`` call, so that retries asked for during a cycle do not wait for the next event.

Each request is counted per reason (:attr:`EngineState.retry_counts`, exported as the metric
``gangq_engine_retries_total{reason}``): a reason that dominates shows which change keeps the
engine busy. Why each reason is needed (the gang that would otherwise wait) is in docs/engine.md
under the reason's name.
"""

from __future__ import annotations

from enum import IntEnum


class RetryReason(IntEnum):
    """Every reason a ClusterQueue is retried or a cycle repeated (docs/engine.md, "Retry reasons")."""

    QUOTA_RELEASED = 0
    """A gang of the queue released quota (it finished, stopped or was deleted)."""
    NODES_FREED = 1
    """Node capacity came free in a pool where the queue's gangs wait for nodes."""
    RESERVATION_CAPACITY_FREED = 2
    """Capacity came free: a reservation that held the queue's gangs back may have moved."""
    RESERVATION_MOVED = 3
    """A cycle admitted gangs, which moves reservations as freed capacity does."""
    NODES_CHANGED = 4
    """A node left or changed: the queue's protected head may no longer fit even empty nodes."""
    SPEC_CHANGED = 5
    """A flavor, queue, cohort or namespace changed: every pending gang is routed again."""
    GANG_LEFT = 6
    """A gang left a StrictFIFO queue, or was the queue's protected head."""
    HEAD_LEFT = 7
    """A protected head left its queue: reservations worked out with it are stale (whole tree)."""
    HEAD_ADMITTED = 8
    """The queue's protected head was admitted: its claims on lent quota and its reservation end."""
    CLAIM_ENDED = 9
    """An admission left the head's need beyond the unused nominal quota: its claim ends."""
    HEAD_DISPLACED = 10
    """A new protected head replaced one whose reservation and claims held other queues back."""
    OWN_CLAIM_UNCOUNTED = 11
    """A new head kept out by a lender's claim, in a cycle whose claims did not count its own."""
    VICTIMS_CHOSEN = 12
    """A head chose victims: gangs that no longer delay it may pass, others may choose again."""
    PREEMPTOR_HEAD_SHORT = 13
    """The queue's head is a preemptor whose stopping victims another claim may leave short."""
    HELD_HEAD_MAY_PASS = 14
    """A cycle admitted in the tree of a queue whose fitting protected head was held back."""
    GANG_STOPPING = 15
    """A gang is being evicted: a queue that may preempt can take it as a victim at once."""
    PREEMPTOR_GONE = 16
    """The preemptor that victims of the queue waited for was admitted or left."""
    PREEMPTION_DEFERRED = 17
    """A preemptor's only victims were admitted at this very time: it may preempt at the next call."""
    HOLD_ENDED = 18
    """A requeued gang's hold (for its preemptor, or its shelter) ended."""
    PREEMPTION_TIMER = 19
    """A head began to starve, or a gang's preemption delay ended: it may preempt now."""
    PREEMPTORS_FIRST = 20
    """A cycle of preemptors whose victims stopped ran first: the other queues' turn is next."""
    NODE_POOL_CHANGED = 21
    """What an autoscaler pool may add changed (its limits, its use, its nodes)."""


REASONS: tuple[RetryReason, ...] = tuple(RetryReason)
"""Every reason, in value order (``retry_counts`` is indexed by value)."""


def reason_label(reason: RetryReason) -> str:
    """The reason as a metric label: its name in lower case (``quota_released``)."""
    return reason.name.lower()
