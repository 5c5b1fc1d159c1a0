"""Fair sharing: the weighted dominant-resource share of what a ClusterQueue borrows.

A ClusterQueue's share is, over resources, the largest fraction of its cohort's lendable pool that it
borrows (usage above nominal), divided by its fair-sharing weight. Within a cohort the scheduler
serves the ClusterQueue with the smallest share first, and reclaim preempts from the queues with
the largest share: the borrowed pool converges to a weighted equal split instead of going to
whoever submits first.
"""

from __future__ import annotations

from gangq.core.quota import QuotaNode

INFINITE_SHARE = float("inf")


def dominant_share(node: QuotaNode, extra: dict[tuple[str, str], int] | None = None) -> float:
    """The weighted dominant-resource share of ``node``'s borrowing (0 when it does not borrow).

    ``extra`` is usage to add first (the share the queue would have after admitting a workload).
    """
    parent = node.parent
    if parent is None:
        return 0.0
    borrowed: dict[str, int] = {}
    for fr, used in node.usage.items():
        add = extra.get(fr, 0) if extra else 0
        over = used + add - node.nominal.get(fr, 0)
        if over > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + over
    if extra:
        for fr, add in extra.items():
            if fr not in node.usage:
                over = add - node.nominal.get(fr, 0)
                if over > 0:
                    borrowed[fr[1]] = borrowed.get(fr[1], 0) + over
    if not borrowed:
        return 0.0
    if node.weight <= 0:
        return INFINITE_SHARE
    pool: dict[str, int] = {}
    for fr, amount in parent.subtree.items():
        pool[fr[1]] = pool.get(fr[1], 0) + amount
    share = 0.0
    for resource, amount in borrowed.items():
        total = pool.get(resource, 0)
        ratio = amount / total if total > 0 else 1.0
        share = max(share, ratio)
    return share / node.weight
