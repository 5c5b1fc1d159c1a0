"""Compare the two servers' transcripts case by case, and account for every difference: a case is
identical, differs exactly as documented (:mod:`tests.conformance.differences`), or is a finding."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.conformance.differences import DIFFERENCES, Difference
from tests.conformance.model import Case
from tests.conformance.normalise import diff, normalise
from tests.conformance.runner import Transcript


@dataclass
class Outcome:
    """One case: both normalised answers, where they differ, and the documented differences that
    apply to it; ``unexplained`` paths no entry covers and ``stale`` entries that no longer differ
    make it a finding."""

    name: str
    sandbox: dict[str, Any]
    real: dict[str, Any]
    paths: list[str]
    documented: list[Difference] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)
    stale: list[Difference] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.paths and not self.documented

    @property
    def as_documented(self) -> bool:
        return bool(self.paths) and not self.unexplained and not self.stale

    @property
    def finding(self) -> bool:
        return bool(self.unexplained or self.stale)

    def explain(self) -> str:
        lines = [f"{self.name}:"]
        for path in self.unexplained:
            lines.append(f"  differs at {path}: sandbox {_at(self.sandbox, path)!r}, real {_at(self.real, path)!r}")
        for entry in self.stale:
            lines.append(f"  documented difference {entry.key!r} no longer shows: remove the case from it")
        return "\n".join(lines)


def _at(value: Any, path: str) -> Any:
    """The value at a diff path, shortened for a message."""
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            index = int(part[1:-1])
            value = value[index] if isinstance(value, list) and index < len(value) else "<absent>"
        else:
            value = value.get(part, "<absent>") if isinstance(value, dict) else "<absent>"
    text = repr(value)
    return text if len(text) < 300 else text[:300] + "..."


def outcome(case: Case, sandbox: Transcript, real: Transcript,
            differences: Sequence[Difference] = DIFFERENCES) -> Outcome:
    a, b = normalise(case, sandbox), normalise(case, real)
    paths = diff(a, b)
    result = Outcome(case.name, a, b, paths)
    result.documented = [d for d in differences if d.applies_to(case.name)]
    result.unexplained = [p for p in paths if not any(d.covers(p) for d in result.documented)]
    result.stale = [d for d in result.documented if not any(d.covers(p) for p in paths)]
    return result


def compare(cases: Sequence[Case], sandbox: dict[str, Transcript], real: dict[str, Transcript],
            differences: Sequence[Difference] = DIFFERENCES) -> list[Outcome]:
    return [outcome(case, sandbox[case.name], real[case.name], differences) for case in cases]


@dataclass(frozen=True)
class Counts:
    cases: int
    identical: int
    documented: int
    findings: int


def count(outcomes: Sequence[Outcome]) -> Counts:
    return Counts(len(outcomes), sum(o.identical for o in outcomes), sum(o.as_documented for o in outcomes),
                  sum(o.finding for o in outcomes))
