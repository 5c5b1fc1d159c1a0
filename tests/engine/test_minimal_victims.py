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


def _searches(seed: int, could_fit: bool) -> list[tuple[list[Amounts] | None, Toy, Toy]]:
    """500 random worlds, each searched by the reference and by ``minimal_victims`` (with the
    toy's ``could_fit`` or without): the reference's answer and both toys, after the searches."""
    rnd = random.Random(seed)
    out = []
    for _ in range(500):
        candidates, free, need = _world(rnd)
        plain, fast = Toy(free, need), Toy(free, need)
        expected = reference(candidates, plain)
        condition = fast.could_fit if could_fit else None
        got = minimal_victims(candidates, fast.release, fast.restore, fast.fits, fast.mark, fast.undo, condition)
        assert got == expected and all(a is b for a, b in zip(got or [], expected or [], strict=True))
        assert fast.free == list(free) and not fast.log, "the state is left as it was"
        out.append((expected, plain, fast))
    return out


def test_the_search_chooses_as_the_plain_greedy_and_prune_does() -> None:
    searches = _searches(5, could_fit=False)
    assert all(fast.releases <= plain.releases for _, plain, fast in searches)
    assert sum(expected is not None and len(expected) > 1 for expected, _, _ in searches) > 50  # pruning exercised


def test_could_fit_rules_a_search_out_without_a_fit_test_per_candidate() -> None:
    ruled_out = [fast for expected, _, fast in _searches(6, could_fit=True) if expected is None]
    assert len(ruled_out) > 50
    assert all(fast.fit_tests == 0 for fast in ruled_out)
