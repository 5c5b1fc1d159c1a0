"""Per-ClusterQueue demand index: queued gangs grouped by the resources they request, each group
sorted by its gangs' total of each resource, so that "which queued gangs could fit what the queue
may take?" is answered without trying them (see :meth:`gangq.core.queue.ClusterQueueState.candidates`).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Any

# A gang's place in its queue: (-priority, queue timestamp, sequence number, key). Typed as a
# plain tuple on purpose: mypyc keeps a fixed-shape tuple type unboxed in locals, so every
# key read out of a queue, a demand index or a heap would be type-checked field by field and
# boxed again on the way back (a cache miss per field in a deep queue, and an allocation).
OrderKey = tuple[Any, ...]


def merge_keys(first: Iterator[OrderKey], second: Iterator[OrderKey]) -> Iterator[OrderKey]:
    """Two ascending streams of distinct queue keys as one, lazily: each stream's next key is
    drawn only after the previous one was consumed, as :func:`heapq.merge` does (a retry's
    stream decides its next key from the state that trying the last one left). Not
    :func:`heapq.merge` itself, which is interpreted code on the scheduling cycle's hot path."""
    a = next(first, None)
    b = next(second, None)
    while a is not None and b is not None:
        if b < a:
            yield b
            b = next(second, None)
        else:
            yield a
            a = next(first, None)
    while a is not None:
        yield a
        a = next(first, None)
    while b is not None:
        yield b
        b = next(second, None)


_SHARED_TOTALS: dict[int, int] = {}


def _shared(value: int) -> int:
    """One int object per distinct total: the demand lists of a deep cluster compare totals on
    every bisect, and a few hundred shared objects stay in cache where one object per gang and
    resource did not (bounded: the table starts over once it holds 65,536 values)."""
    shared = _SHARED_TOTALS.get(value)
    if shared is None:
        if len(_SHARED_TOTALS) >= 65_536:
            _SHARED_TOTALS.clear()
        shared = _SHARED_TOTALS[value] = value
    return shared


class _TotalsIndex:
    """One resource's index in a demand class: parallel lists sorted by (total, gang key).

    Parallel plain lists rather than one list of (total, key, totals) tuples: a bisect compares
    bare totals, so it reads the list and a few shared int objects (:func:`_shared`) instead of
    a tuple and an int per step, each a cache miss in a deep cluster.
    """

    __slots__ = ("keys", "totals", "vectors")

    def __init__(self) -> None:
        self.totals: list[int] = []
        self.keys: list[OrderKey] = []
        # Each gang's totals of every resource of the class, in the class's order (the filter).
        self.vectors: list[tuple[int, ...]] = []

    def _position(self, total: int, key: OrderKey) -> int:
        totals = self.totals
        lo = bisect_left(totals, total)
        hi = bisect_right(totals, total, lo)
        return bisect_left(self.keys, key, lo, hi)

    def add(self, total: int, key: OrderKey, vector: tuple[int, ...]) -> None:
        i = self._position(total, key)
        self.totals.insert(i, total)
        self.keys.insert(i, key)
        self.vectors.insert(i, vector)

    def remove(self, total: int, key: OrderKey) -> None:
        i = self._position(total, key)
        del self.totals[i]
        del self.keys[i]
        del self.vectors[i]


class DemandClass:
    """Queued gangs that request the same set of resources, sorted by their total of each.

    Plain sorted lists (bisect in C) rather than SortedList: a filter of a retry bisects every
    resource's list and copies a prefix, which SortedList does in interpreted code, and this is
    the retry's hottest step. The price is an O(n) insert, a memmove that stays small until a
    single ClusterQueue holds tens of thousands of gangs requesting the same resources.
    """

    __slots__ = ("indexes", "resources", "vectors")

    def __init__(self, resources: tuple[str, ...]) -> None:
        self.resources = resources
        self.indexes = [_TotalsIndex() for _ in resources]  # in ``resources`` order
        self.vectors: dict[OrderKey, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self.vectors)

    def add(self, key: OrderKey, totals: dict[str, int]) -> None:
        vector = self.vectors[key] = tuple(_shared(totals[r]) for r in self.resources)
        for i, index in enumerate(self.indexes):
            index.add(vector[i], key, vector)

    def remove(self, key: OrderKey) -> None:
        vector = self.vectors.pop(key)
        for i, index in enumerate(self.indexes):
            index.remove(vector[i], key)

    def fitting(self, bound: dict[str, int], short: list[tuple[str, int]] | None = None) -> list[OrderKey]:
        """The gangs whose total of every resource is at most ``bound`` (missing resources: 0).

        The resource that leaves the fewest gangs selects them from its sorted index; the others
        filter that selection exactly. When none fits, ``short`` (if given) gets a resource that
        every gang needs more of than ``bound`` allows and the least total of it, or ("", 0) when
        no one resource rules them all out.
        """
        # Each list's ends first: a resource whose smallest total exceeds its limit rules every
        # gang out, and one whose largest total is within it rules none out (memory, with quota
        # to spare): only the others are bisected and filtered. In a deep cluster these lists
        # are cold, and every comparison of a bisect is a cache miss.
        selective: list[tuple[int, int, list[int]]] = []
        resources = self.resources
        indexes = self.indexes
        for i in range(len(resources)):
            totals = indexes[i].totals
            if not totals:
                return []
            limit = bound.get(resources[i], 0)
            if totals[0] > limit:
                if short is not None:
                    short.append((resources[i], totals[0]))
                return []
            if totals[-1] > limit:
                selective.append((i, limit, totals))
        if not selective:
            return list(self.vectors)
        best_count = -1
        best = 0
        for i, limit, totals in selective:
            count = bisect_right(totals, limit)
            if best_count < 0 or count < best_count:
                best_count, best = count, i
        keys = indexes[best].keys
        if len(selective) == 1:
            return keys[:best_count]
        vectors = indexes[best].vectors
        out: list[OrderKey] = []
        for j in range(best_count):
            vector = vectors[j]
            for i, limit, _ in selective:
                if vector[i] > limit:
                    break
            else:
                out.append(keys[j])
        if not out and short is not None:
            short.append(("", 0))
        return out

    def min_total(self, resource: str) -> int | None:
        """The smallest total of ``resource`` among these gangs (None: they do not request it)."""
        for i, r in enumerate(self.resources):
            if r == resource:
                totals = self.indexes[i].totals
                return totals[0] if totals else None
        return None


_LIMIT_LOAD = 64  # a chunk of a ShapeQueue splits beyond twice this many gangs


class ShapeQueue:
    """The waiting (inadmissible) gangs of one ClusterQueue that have one shape (equal pod sets,
    ``minMember`` and ``minResources``), in queue order, each with its runtime limit (``inf``:
    none).

    Tried in one state, gangs of one shape fail alike, except that a shorter runtime limit may let
    a gang pass a reservation that a longer one may not: a retry that saw one fail skips the later
    ones whose limit is at least as long (:class:`gangq.core.retry.CandidateWalk`). Kept as
    sorted chunks, each with the least limit of its gangs, so "the next gang after this one whose
    limit is shorter than that" skips whole chunks of gangs that cannot pass.
    """

    __slots__ = ("chunks", "demand", "limits", "mark", "maxes", "mins", "pos", "shape", "size", "totals", "vector")

    def __init__(self, shape: tuple[object, ...], totals: dict[str, int]) -> None:
        self.shape = shape
        self.totals = totals
        self.demand = tuple(totals.items())  # totals as pairs: a retry's candidate filter reads it
        # Its totals in the order of their resources' names (its _ShapeGroup's ``names``): the
        # group's filter compares them with the bound's limits in that order.
        # Shared int objects (see _shared): the filter reads them from every queue's shapes.
        self.vector: list[int] = [_shared(totals[name]) for name in sorted(totals)]
        # The last ShapeIndex.fitting call that listed it (0: none), and its position in the
        # list that call made: the candidate walk made from it finds the shape there
        # (CandidateWalk._position).
        self.mark = 0
        self.pos = 0
        self.chunks: list[list[OrderKey]] = []
        self.limits: list[list[float]] = []  # parallel to chunks
        self.maxes: list[OrderKey] = []  # the last key of each chunk
        self.mins: list[float] = []  # the least limit of each chunk
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, key: OrderKey, limit: float) -> None:
        self.size += 1
        maxes = self.maxes
        if not maxes:
            self.chunks.append([key])
            self.limits.append([limit])
            maxes.append(key)
            self.mins.append(limit)
            return
        c = bisect_left(maxes, key)
        if c == len(maxes):
            c -= 1
        chunk = self.chunks[c]
        limits = self.limits[c]
        i = bisect_left(chunk, key)
        chunk.insert(i, key)
        limits.insert(i, limit)
        maxes[c] = chunk[-1]
        if limit < self.mins[c]:
            self.mins[c] = limit
        n = len(chunk)
        if n > 2 * _LIMIT_LOAD:
            half = n // 2
            left, right = limits[:half], limits[half:]
            self.chunks[c : c + 1] = [chunk[:half], chunk[half:]]
            self.limits[c : c + 1] = [left, right]
            maxes[c : c + 1] = [chunk[half - 1], chunk[-1]]
            self.mins[c : c + 1] = [min(left), min(right)]

    def remove(self, key: OrderKey) -> None:
        """Delete ``key``, which is present."""
        c = bisect_left(self.maxes, key)
        chunk = self.chunks[c]
        limits = self.limits[c]
        i = bisect_left(chunk, key)
        limit = limits[i]
        del chunk[i]
        del limits[i]
        self.size -= 1
        if not chunk:
            del self.chunks[c]
            del self.limits[c]
            del self.maxes[c]
            del self.mins[c]
            return
        self.maxes[c] = chunk[-1]
        if limit <= self.mins[c]:
            self.mins[c] = min(limits)

    def first_from(
        self, key: OrderKey | None, below: float | None, now: float = 0.0, until: float = math.inf
    ) -> OrderKey | None:
        """The first gang at or after ``key`` (None: from the start) whose limit is less than
        ``below`` (None: any limit) and that ends by ``until`` if it starts at ``now``, or None."""
        maxes = self.maxes
        c = 0 if key is None else bisect_left(maxes, key)
        n = len(maxes)
        if c == n:
            return None
        chunk = self.chunks[c]
        i = 0 if key is None else bisect_left(chunk, key)
        if below is None:
            return chunk[i]
        mins = self.mins
        while True:
            least = mins[c]
            if least < below and now + least <= until:
                limits = self.limits[c]
                for j in range(i, len(limits)):
                    limit = limits[j]
                    if limit < below and now + limit <= until:
                        return self.chunks[c][j]
            c += 1
            if c == n:
                return None
            i = 0


class ShapeIndex:
    """A ClusterQueue's :class:`ShapeQueue` s, grouped by the resources their shape requests, each
    group sorted by its shapes' total of each resource: :meth:`fitting` finds the shapes whose
    totals fit a bound by the resource that rules out the most of them, and checks only those.

    Why: a retry's candidate walk (:class:`gangq.core.walk.CandidateWalk`) starts from the shapes
    that fit what the queue may take, and in a saturated cluster that is few of many; checked one
    by one, every retry of every queue paid for each shape it has.
    """

    __slots__ = ("calls", "groups")

    def __init__(self) -> None:
        self.groups: dict[tuple[str, ...], _ShapeGroup] = {}
        self.calls = 0  # calls of :meth:`fitting` so far (a shape's ``mark`` says it was listed)

    def add(self, shape: ShapeQueue) -> None:
        names = tuple(sorted(shape.totals))
        group = self.groups.get(names)
        if group is None:
            group = self.groups[names] = _ShapeGroup(names)
        group.add(shape)

    def remove(self, shape: ShapeQueue) -> None:
        names = tuple(sorted(shape.totals))
        group = self.groups[names]
        group.remove(shape)
        if group.empty():
            del self.groups[names]

    def fitting(self, bounds: list[dict[str, int]]) -> list[ShapeQueue]:
        """The shapes whose totals fit one of ``bounds`` (resource → amount; missing: 0), each
        once, in the order the bounds first list them. A shape that one bound listed is marked
        with the call's number, so that the later bounds skip it without a set of seen shapes."""
        self.calls += 1
        call = self.calls
        out: list[ShapeQueue] = []
        for bound in bounds:
            for group in self.groups.values():
                group.fitting(bound, out, call)
        return out


class _ShapeGroup:
    """The shapes that request exactly ``names``: per resource, their totals of it in ascending
    order with the shapes in the same order."""

    __slots__ = ("amounts", "first_check", "members", "names", "unsorted")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.amounts: list[list[int]] = [[] for _ in names]
        self.members: list[list[ShapeQueue]] = [[] for _ in names]
        self.unsorted: list[ShapeQueue] = []  # shapes that request nothing (they fit every bound)
        # The resource whose least need last ruled the whole group out: checked first next time
        # (the group is ruled out by any one resource, whichever is checked first).
        self.first_check = 0

    def empty(self) -> bool:
        return not self.members[0] if self.names else not self.unsorted

    def add(self, shape: ShapeQueue) -> None:
        if not self.names:
            self.unsorted.append(shape)
            return
        vector = shape.vector
        for i in range(len(self.names)):
            amounts = self.amounts[i]
            at = bisect_right(amounts, vector[i])
            amounts.insert(at, vector[i])
            self.members[i].insert(at, shape)

    def remove(self, shape: ShapeQueue) -> None:
        if not self.names:
            self.unsorted.remove(shape)
            return
        totals = shape.totals
        for i, name in enumerate(self.names):
            amounts = self.amounts[i]
            members = self.members[i]
            at = bisect_left(amounts, totals[name])
            while members[at] is not shape:
                at += 1
            del amounts[at]
            del members[at]

    def fitting(self, bound: dict[str, int], out: list[ShapeQueue], call: int) -> None:
        """Append the shapes of the group whose totals fit ``bound`` and that ``call`` (of
        ShapeIndex.fitting) has not listed yet to ``out``, marking them: scanned in ascending
        order of their first resource, up to the first shape that needs more of it than the bound
        allows; none when the least need of some resource is beyond it. The bound is read once
        per resource, as limits in the order of ``names``, which each shape's ``vector`` follows."""
        names = self.names
        if not names:
            for shape in self.unsorted:
                if shape.mark != call:
                    shape.mark = call
                    out.append(shape)
            return
        amounts = self.amounts
        check = self.first_check
        if amounts[check][0] > bound.get(names[check], 0):
            return
        limits: list[int] = []
        for i in range(len(names)):
            limit = bound.get(names[i], 0)
            if amounts[i][0] > limit:
                self.first_check = i
                return
            limits.append(limit)
        first = amounts[0]
        limit = limits[0]
        members = self.members[0]
        n = len(limits)
        for j in range(len(members)):
            if first[j] > limit:
                break
            shape = members[j]
            if shape.mark == call:
                continue
            vector = shape.vector
            fits = True
            for k in range(1, n):
                if vector[k] > limits[k]:
                    fits = False
                    break
            if fits:
                shape.mark = call
                out.append(shape)
