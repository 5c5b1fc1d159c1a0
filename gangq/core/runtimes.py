"""Runtime estimates learned from history, the way an operator can know them: from the gangs that
have already finished, never from the future. The simulator and the controller use this one
estimator; each says which gangs are similar (its group key) and feeds it the run times of gangs
that finished.

Most gangs declare no runtime limit, so the engine cannot compute when a starving head will fit
and falls back to the starvation timeout. Helios's QSSF (Hu et al., SC '21) orders jobs by the
GPU time predicted from the history of similar jobs (same virtual cluster, user, size). So a gang
without a declared limit is given the expected run time of similar gangs that finished earlier:
the engine uses it as the gang's expected end for reservations and backfill. It is an estimate,
not a limit: nobody stops a gang that runs longer, a gang past its estimate has no known end for
the engine, and the starvation timeout stays the safety net for heads that estimates fail.

The estimate is a quantile of the last ``window`` observed run times of the group. A group with
fewer than ``min_samples`` finished gangs gets no estimate: the history of other sizes predicts a
gang badly (a per-queue fallback let big heads be passed by gangs it underestimated, and the
longest wait grew). Memory is bounded: at most ``max_groups`` groups, the one observed least
recently dropped first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

DEFAULT_WINDOW = 32
DEFAULT_QUANTILE = 0.65
MIN_SAMPLES = 3
DEFAULT_MAX_GROUPS = 4096


class RuntimeEstimator:
    """Learns run times per group of similar gangs, online."""

    __slots__ = ("_by_group", "max_groups", "min_samples", "quantile", "window")

    def __init__(
        self,
        window: int = DEFAULT_WINDOW,
        quantile: float = DEFAULT_QUANTILE,
        min_samples: int = MIN_SAMPLES,
        max_groups: int = DEFAULT_MAX_GROUPS,
    ) -> None:
        if window < 1:
            raise ValueError(f"runtime estimates: window must be >= 1, got {window}")
        if not 0.0 <= quantile <= 1.0:
            raise ValueError(f"runtime estimates: quantile must be in [0, 1], got {quantile}")
        if not 1 <= min_samples <= window:
            raise ValueError(f"runtime estimates: min_samples must be in [1, window], got {min_samples}")
        if max_groups < 1:
            raise ValueError(f"runtime estimates: max_groups must be >= 1, got {max_groups}")
        self.window = window
        self.quantile = quantile
        self.min_samples = min_samples
        self.max_groups = max_groups
        # Insertion order is recency: a group observed again moves to the end.
        self._by_group: dict[Hashable, deque[float]] = {}

    def observe(self, cq: str, group: Hashable, seconds: float) -> None:
        """A gang of ``group`` in ``cq`` ran ``seconds`` to completion."""
        self._latest((cq, group)).append(seconds)

    def estimate(self, cq: str, group: Hashable) -> float | None:
        """Expected run time of a new gang of ``group`` in ``cq`` (None: no history yet)."""
        samples = self._by_group.get((cq, group))
        if samples is None or len(samples) < self.min_samples:
            return None
        ordered = sorted(samples)
        return ordered[min(len(ordered) - 1, int(self.quantile * len(ordered)))]

    def samples(self, cq: str, group: Hashable) -> int:
        """How many run times of the group the estimate is made from."""
        found = self._by_group.get((cq, group))
        return len(found) if found is not None else 0

    def export(self) -> list[tuple[Hashable, list[float]]]:
        """Every group ((cq, group) as observed) and its run times, least recently observed first."""
        return [(key, list(samples)) for key, samples in self._by_group.items()]

    def load(self, groups: list[tuple[Hashable, list[float]]]) -> None:
        """Groups as :meth:`export` gave them (kept across a restart), before any observation."""
        for key, times in groups:
            self._latest(key).extend(times)

    def _latest(self, key: Hashable) -> deque[float]:
        """The run times of ``key``, now its most recently observed group (a new one takes the
        place of the least recently observed when ``max_groups`` are kept)."""
        samples = self._by_group.pop(key, None)
        if samples is None:
            samples = deque(maxlen=self.window)
            if len(self._by_group) >= self.max_groups:
                del self._by_group[next(iter(self._by_group))]
        self._by_group[key] = samples
        return samples
