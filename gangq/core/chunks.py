"""A sorted sequence for the core's hot indexes, compiled with it (see :class:`SortedChunks`)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from typing import Any


class SortedChunks:
    """A sorted sequence kept as consecutive sorted chunks of at most ``2 * load`` entries.

    A node pool's index changes with every placement and release. As one plain list, each change
    moved half the list in memory: 15 KB for a pool of 4,000 nodes, twice per change, and most of
    the node index's cost in a large cluster. Here a change moves at most one chunk. Not
    sortedcontainers' SortedList, which works the same way but in interpreted code: this is
    compiled with the rest of the core, and its bisects run in C. A ClusterQueue's queues use it
    too (``queue.ClusterQueueState``), where a retry's calls (first entry, length, next entry)
    are on the hot path.
    """

    __slots__ = ("chunks", "head", "load", "maxes", "size", "sizes")

    def __init__(self, load: int = 128) -> None:
        self.load = load
        self.chunks: list[list[Any]] = []
        self.maxes: list[Any] = []  # the last (largest) entry of each chunk
        self.sizes: list[int] = []  # the length of each chunk
        self.size = 0
        # The first (smallest) entry, kept at hand: a retry asks a queue for its first waiting
        # gang several times, and in a large cluster the chunk that holds it is cold.
        self.head: Any = None

    def __len__(self) -> int:
        return self.size

    def add(self, entry: Any) -> None:
        maxes = self.maxes
        self.size += 1
        if not maxes:
            self.chunks.append([entry])
            maxes.append(entry)
            self.sizes.append(1)
            self.head = entry
            return
        c = bisect_left(maxes, entry)
        if c == len(maxes):
            c -= 1
            chunk = self.chunks[c]
            chunk.append(entry)
            maxes[c] = entry
        else:
            chunk = self.chunks[c]
            insort(chunk, entry)
        if c == 0:
            self.head = chunk[0]
        n = len(chunk)
        load = self.load
        if n > 2 * load:
            self.chunks[c : c + 1] = [chunk[:load], chunk[load:]]
            maxes[c : c + 1] = [chunk[load - 1], chunk[-1]]
            self.sizes[c : c + 1] = [load, n - load]
        else:
            self.sizes[c] = n

    def remove(self, entry: Any) -> None:
        """Delete ``entry``, which is present."""
        c = bisect_left(self.maxes, entry)
        self._delete_at(c, bisect_left(self.chunks[c], entry))

    def _delete_at(self, c: int, i: int) -> None:
        """Delete entry ``i`` of chunk ``c``."""
        chunks = self.chunks
        chunk = chunks[c]
        del chunk[i]
        self.size -= 1
        if chunk:
            self.maxes[c] = chunk[-1]
            self.sizes[c] -= 1
        else:
            del chunks[c]
            del self.maxes[c]
            del self.sizes[c]
        if c == 0 and i == 0:
            self.head = chunks[0][0] if chunks else None

    def count_from(self, probe: Any) -> int:
        """How many entries are at least ``probe``."""
        maxes = self.maxes
        c = bisect_left(maxes, probe)
        if c == len(maxes):
            return 0
        chunk = self.chunks[c]
        count = len(chunk) - bisect_left(chunk, probe)
        sizes = self.sizes
        for i in range(c + 1, len(sizes)):
            count += sizes[i]
        return count

    def iter_from(self, probe: Any) -> Iterator[Any]:
        """The entries that are at least ``probe``, in order (do not change it meanwhile)."""
        maxes = self.maxes
        chunks = self.chunks
        c = bisect_left(maxes, probe)
        if c == len(maxes):
            return
        chunk = chunks[c]
        for i in range(bisect_left(chunk, probe), len(chunk)):
            yield chunk[i]
        for j in range(c + 1, len(chunks)):
            yield from chunks[j]

    def __iter__(self) -> Iterator[Any]:
        for chunk in self.chunks:
            yield from chunk

    def first(self) -> Any:
        """The smallest entry (the sequence is not empty)."""
        return self.head

    def after(self, probe: Any) -> Any | None:
        """The smallest entry greater than ``probe``, or None."""
        maxes = self.maxes
        c = bisect_right(maxes, probe)
        if c == len(maxes):
            return None
        chunk = self.chunks[c]
        return chunk[bisect_right(chunk, probe)]

    def discard(self, entry: Any) -> None:
        """Delete ``entry`` if present."""
        maxes = self.maxes
        c = bisect_left(maxes, entry)
        if c < len(maxes):
            chunk = self.chunks[c]
            i = bisect_left(chunk, entry)
            if chunk[i] == entry:
                self._delete_at(c, i)

    def iter_until(self, probe: Any) -> Iterator[Any]:
        """The entries that are at most ``probe``, in order (do not change it meanwhile)."""
        for chunk in self.chunks:
            if chunk[-1] <= probe:
                yield from chunk
                continue
            for entry in chunk:
                if entry > probe:
                    return
                yield entry
            return

    def count_below(self, probe: Any) -> int:
        """How many entries are less than ``probe``."""
        return self.size - self.count_from(probe)
