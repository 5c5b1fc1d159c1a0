"""The victim search (preemption.minimal_victims) on a toy state: two resources, candidates that
free some of each, a gang that fits once enough is free. Its answers are those of the plain
greedy-and-prune search (each pruning test releases every other victim again), with fewer
releases, and a search that ``could_fit`` rules out makes no fit test."""

from __future__ import annotations

import random

from gangq.core.preemption import minimal_victims

Amounts = tuple[int, int]


class Toy:
    """Free capacity changed by releases and restores, with a log for mark / undo."""

    def __init__(self, free: Amounts, need: Amounts) -> None:
        self.free = list(free)
        self.need = need
        self.log: list[tuple[Amounts, int]] = []
        self.releases = 0
        self.fit_tests = 0

    def _apply(self, amounts: Amounts, sign: int) -> None:
        for i, v in enumerate(amounts):
            self.free[i] += sign * v
        self.log.append((amounts, sign))

    def release(self, c: Amounts) -> None:
        self.releases += 1
        self._apply(c, 1)

    def restore(self, c: Amounts) -> None:
        self._apply(c, -1)

    def fits(self) -> bool:
        self.fit_tests += 1
        return all(f >= n for f, n in zip(self.free, self.need, strict=True))

    def could_fit(self) -> bool:
        return all(f >= n for f, n in zip(self.free, self.need, strict=True))

    def mark(self) -> int:
        return len(self.log)

    def undo(self, m: int) -> None:
        while len(self.log) > m:
            amounts, sign = self.log.pop()
            for i, v in enumerate(amounts):
                self.free[i] -= sign * v


def reference(candidates: list[Amounts], toy: Toy) -> list[Amounts] | None:
    """Greedy prefix, then each chosen victim tried out with every other still needed released anew."""
    start = toy.mark()
    chosen: list[Amounts] = []
    for c in candidates:
        toy.release(c)
        chosen.append(c)
        if toy.fits():
            break
    else:
        toy.undo(start)
        return None
    needed = list(chosen)
    for victim in reversed(chosen):
        toy.undo(start)
        trial = [v for v in needed if v is not victim]
        for v in trial:
            toy.release(v)
        if toy.fits():
            needed = trial
    toy.undo(start)
    return needed


def _world(rnd: random.Random) -> tuple[list[Amounts], Amounts, Amounts]:
    candidates = [(rnd.randint(0, 4), rnd.randint(0, 4)) for _ in range(rnd.randint(0, 12))]
    return candidates, (rnd.randint(0, 3), rnd.randint(0, 3)), (rnd.randint(1, 20), rnd.randint(1, 20))


def test_the_search_chooses_as_the_plain_greedy_and_prune_does() -> None:
    rnd = random.Random(5)
    pruned = 0
    for _ in range(500):
        candidates, free, need = _world(rnd)
        plain, fast = Toy(free, need), Toy(free, need)
        expected = reference(candidates, plain)
        got = minimal_victims(candidates, fast.release, fast.restore, fast.fits, fast.mark, fast.undo)
        assert got == expected and all(a is b for a, b in zip(got or [], expected or [], strict=True))
        assert fast.free == list(free) and not fast.log, "the state is left as it was"
        assert fast.releases <= plain.releases
        pruned += expected is not None and len(expected) > 1
    assert pruned > 50  # the worlds exercise the pruning


def test_could_fit_rules_a_search_out_without_a_fit_test_per_candidate() -> None:
    rnd = random.Random(6)
    ruled_out = 0
    for _ in range(500):
        candidates, free, need = _world(rnd)
        plain, fast = Toy(free, need), Toy(free, need)
        expected = reference(candidates, plain)
        got = minimal_victims(
            candidates, fast.release, fast.restore, fast.fits, fast.mark, fast.undo, could_fit=fast.could_fit
        )
        assert got == expected
        assert fast.free == list(free) and not fast.log
        if expected is None:
            ruled_out += 1
            assert fast.fit_tests == 0
    assert ruled_out > 50
