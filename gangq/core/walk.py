"""A retry's candidate walk: the waiting gangs of a ClusterQueue that fit what it may take, drawn
shape by shape, skipping the gangs of a shape that one of them showed to fail in the state of the
moment (see :class:`CandidateWalk`)."""

from __future__ import annotations

import bisect
import heapq
import math

from gangq.core.demand import OrderKey, ShapeQueue
from gangq.core.queue import ClusterQueueState, Workload

# (EngineState.version, heads_version, config_version, NodeIndex.epoch): capacity, protected
# heads, configuration and nodes as they are between two changes (what-ifs leave it as it is).
StateStamp = tuple[int, int, int, int]


class CandidateWalk:
    """The waiting gangs of a ClusterQueue that a retry's candidate walk may try: those whose demand
    fits one of the bounds (:meth:`~gangq.core.retry.IncrementalRetry.candidate_bounds`), in queue
    order, drawn by shape (:class:`~gangq.core.demand.ShapeQueue`).

    The rule: gangs of one shape behind the queue's protected head fail alike in one state. Their
    try reads nothing else of them but their runtime limit and their place: the flavor options,
    the quota and claims they meet, the placement of their pods and the reservations they would
    delay are those of the shape; a later place only puts more heads ahead of a gang (more
    reservations to delay); and the runtime limit only lets a gang pass a reservation it ends
    before. So once one fails (:meth:`failed`), the later gangs of its shape are skipped while the
    state stays as it was then (:data:`StateStamp`): all of them if it failed for capacity or a
    lender's claim; if a reservation held it back, those whose limit is at least its own, or,
    when that reservation has a time, every one that does not end by then
    (:meth:`~gangq.core.retry.IncrementalRetry.passing_limit`).

    Why: in a saturated cluster most waiting gangs fit what a finished gang gave back, in quota,
    and cannot start before something they need is released: they fail the node check, or would
    delay the head's reservation. Tried one by one, every release cost one try per such gang, so
    an event's cost grew with the depth of the queue; skipped by shape, it costs a few tries per
    shape.

    Never skipped: gangs ahead of the protected head (all are tried), and gangs whose try depends
    on more (:meth:`protect`: the gang through which the queue claims lent quota back, and
    preemptors whose victims stop, whose own claim is not charged when they are tried). Only
    without fair sharing, where the cycle's order of gangs is their queue order
    (:meth:`~gangq.core.cycle.SchedulingCycle.head_key`): the skip is decided when the walk moves
    on, and a gang of another queue tried before the skipped gang's turn may change the state;
    the cycle then starts the walk again behind that gang (:attr:`skipped`).
    """

    __slots__ = (
        "by_shape",
        "cq",
        "dead",
        "heap",
        "kept",
        "marks",
        "name",
        "parked",
        "protected",
        "serial",
        "shapes",
        "skipped",
        "skipping",
        "stop",
    )

    def __init__(
        self, cq: ClusterQueueState, bounds: list[dict[str, int]], marks: bool, skipping: dict[str, CandidateWalk]
    ) -> None:
        self.name = cq.name
        self.cq = cq
        self.skipping = skipping  # the cycle's walks whose last step skipped gangs (by queue name)
        self.by_shape = cq.shapes
        # The ShapeIndex.fitting call that listed the shapes: each shape it marked with it holds
        # its position in ``shapes`` (``ShapeQueue.pos``) until a later call lists it for another
        # walk (see :meth:`_position`); -1: no call, no shapes.
        self.serial = -1
        shapes: list[ShapeQueue] = []
        if bounds:
            index = cq.shape_index
            shapes = index.fitting(bounds)
            self.serial = index.calls
            for i in range(len(shapes)):
                shapes[i].pos = i
        self.shapes = shapes
        # (next gang, shape index) of the shapes without a mark, from the last key asked for
        # (built at the first ask); shapes with a mark whose entry came up wait in ``parked``
        # (made when first needed, as the containers below: most walks never need them).
        self.heap: list[tuple[OrderKey, int]] | None = None
        self.parked: set[int] | None = None
        # Per shape: (the state it failed in, and the gangs that may still pass then: limit below
        # this, and ending by that time from that moment, see ShapeQueue.first_from).
        self.dead: dict[ShapeQueue, tuple[StateStamp, float, float, float]] = {}
        self.kept: list[OrderKey] | None = None  # candidates whatever the bounds (the claimant)
        self.protected: dict[ShapeQueue, list[OrderKey]] | None = None
        self.stop: OrderKey | None = None  # no candidate after it
        self.marks = marks  # skip by shape at all
        # The last key :meth:`first_from` returned lies past gangs it skipped.
        self.skipped = False

    def empty(self) -> bool:
        return not self.shapes and not self.kept

    def _position(self, shape: ShapeQueue) -> int:
        """``shape``'s position in ``shapes``; -1 if it is not one of the walk's."""
        if shape.mark == self.serial:
            return shape.pos
        # Listed since for a later walk of the queue: looked for.
        shapes = self.shapes
        for i in range(len(shapes)):
            if shapes[i] is shape:
                return i
        return -1

    def _shape_of(self, wl: Workload) -> ShapeQueue | None:
        """``wl``'s shape, if it is one of the walk's."""
        # A gang waiting in the walk's queue knows its ShapeQueue (the queue's ``shapes[wl.shape]``).
        waiting = wl.cq is self.cq and wl.queued == "inadmissible"
        shape = wl.shape_queue if waiting else self.by_shape.get(wl.shape)
        return shape if shape is not None and self._position(shape) >= 0 else None

    def holds(self, wl: Workload) -> bool:
        """Is ``wl`` among the candidates (before any skipping)?"""
        if self.kept is not None and wl.order_key in self.kept:
            return True
        if wl.queued != "inadmissible":
            return False
        shape = self._shape_of(wl)
        return shape is not None and shape.first_from(wl.order_key, None) == wl.order_key

    def keep(self, key: OrderKey) -> None:
        """``key`` stays a candidate whatever the bounds."""
        kept = self.kept
        if kept is None:
            self.kept = [key]
        elif key not in kept:
            bisect.insort(kept, key)

    def protect(self, wl: Workload) -> None:
        """``wl`` is never skipped, nor does its failure skip others."""
        shape = self._shape_of(wl)
        if shape is not None:
            if self.protected is None:
                self.protected = {}
            bisect.insort(self.protected.setdefault(shape, []), wl.order_key)

    def refilter(self, bounds: list[dict[str, int]]) -> None:
        """The bounds shrank: drop the shapes that no longer fit them."""
        shapes = [shape for shape in self.shapes if fits_any(shape.demand, bounds)]
        if len(shapes) != len(self.shapes):
            serial = self.serial
            for shape in self.shapes:
                if shape.mark == serial:
                    shape.mark = 0  # dropped, unless listed again below
            for i in range(len(shapes)):
                shape = shapes[i]
                if shape.mark == 0:
                    shape.mark = serial
                    shape.pos = i
            self.shapes = shapes
            self.dead = {shape: mark for shape, mark in self.dead.items() if self._position(shape) >= 0}
            self.heap = None
            self.parked = None

    def any_after(self, key: OrderKey) -> bool:
        """Is some candidate after ``key`` (before any skipping)?"""
        kept = self.kept
        if kept and kept[-1] > key:
            return True
        return any(shape.maxes[-1] > key for shape in self.shapes if shape.maxes)

    def failed(self, wl: Workload, state: StateStamp, now: float, end: float | None) -> None:
        """``wl``, a candidate behind the protected head, was tried in ``state`` at ``now`` and
        failed. ``end``: if a reservation held it back, the time by which a gang of its shape must
        end to pass it (-inf: none passes; None: not known, see IncrementalRetry.passing_end)."""
        if not self.marks:
            return
        shape = self._shape_of(wl)
        if shape is None:
            return
        protected = self.protected.get(shape) if self.protected is not None else None
        if protected and wl.order_key in protected:
            return
        if wl.reason != "BlockedByReservation" or end == -math.inf:
            self.dead[shape] = (state, -math.inf, now, math.inf)
        else:
            limit = wl.spec.runtime_limit
            self.dead[shape] = (state, math.inf if limit is None else limit, now, math.inf if end is None else end)

    def first_from(self, key: OrderKey, state: StateStamp) -> OrderKey | None:
        """The first candidate at or after ``key`` that is not known to fail in ``state``."""
        shapes = self.shapes
        dead = self.dead
        heap = self.heap
        if heap is None:
            heap = self.heap = []
            for i, shape in enumerate(shapes):
                chunks = shape.chunks
                if not chunks:
                    continue
                found: OrderKey | None = chunks[0][0]
                if chunks[0][0] < key:
                    found = shape.first_from(key, None)
                if found is not None:
                    heap.append((found, i))
            heapq.heapify(heap)
        if dead:
            for shape, mark in list(dead.items()):
                if mark[0] != state:  # the state changed: its gangs are candidates again
                    del dead[shape]
                    i = self._position(shape)
                    parked = self.parked
                    if parked is not None and i in parked:
                        parked.discard(i)
                        found = shape.first_from(key, None)
                        if found is not None:
                            heapq.heappush(heap, (found, i))
        # The next gang of the shapes without a mark.
        while heap:
            top, i = heap[0]
            shape = shapes[i]
            if dead and shape in dead:
                heapq.heappop(heap)
                if self.parked is None:
                    self.parked = set()
                self.parked.add(i)
            elif top < key:
                found = shape.first_from(key, None)
                if found is None:
                    heapq.heappop(heap)
                else:
                    heapq.heapreplace(heap, (found, i))
            else:
                break
        best: OrderKey | None = heap[0][0] if heap else None
        kept = self.kept
        if kept:
            i = bisect.bisect_left(kept, key)
            if i < len(kept) and (best is None or kept[i] < best):
                best = kept[i]
        passed: OrderKey | None = None  # the first gang skipped
        protecting = self.protected
        for shape, mark in dead.items():
            below = mark[1]
            found = None if below == -math.inf else shape.first_from(key, below, mark[2], mark[3])
            protected = protecting.get(shape) if protecting is not None else None
            if protected:
                i = bisect.bisect_left(protected, key)
                if i < len(protected) and (found is None or protected[i] < found):
                    found = protected[i]
            plain = shape.first_from(key, None)
            if plain is not None and plain != found and (passed is None or plain < passed):
                passed = plain
            if found is not None and (best is None or found < best):
                best = found
        if best is not None and self.stop is not None and best > self.stop:
            best = None
        skipped = passed is not None and (best is None or passed < best)
        if skipped != self.skipped:
            self.skipped = skipped
            if skipped:
                self.skipping[self.name] = self
            else:
                self.skipping.pop(self.name, None)
        return best


def fits_any(demand: tuple[tuple[str, int], ...], bounds: list[dict[str, int]]) -> bool:
    """Does ``demand`` ((resource, amount) pairs) fit one of ``bounds`` (resource → amount;
    missing: 0)?"""
    for bound in bounds:
        for resource, amount in demand:
            if amount > bound.get(resource, 0):
                break
        else:
            return True
    return False
