"""The counts table of a corpus run, as docs/bad-input.md shows it (the test checks the doc
against the run, so the published numbers are measured, not written by hand)."""

from __future__ import annotations

from tests.badinput.corpus import categories
from tests.badinput.runner import Run

HEADER = ("| category | cases | rejected by the API server, field named | reported by the controller, field named |\n"
          "|---|---:|---:|---:|\n")


def counts_table(run: Run) -> str:
    """One row per category and a total: cases, and those that ended as expected by each route."""
    rows = []
    totals = [0, 0, 0]
    for category in categories([o.case for o in run.observations]):
        seen = [o for o in run.observations if o.case.category == category]
        good = [o for o in seen if o.as_expected(run.plane)]
        counts = [len(seen), sum(o.outcome == "rejected" for o in good), sum(o.outcome == "reported" for o in good)]
        totals = [t + c for t, c in zip(totals, counts, strict=True)]
        rows.append(f"| {category} | {counts[0]} | {counts[1]} | {counts[2]} |\n")
    rows.append(f"| **total** | **{totals[0]}** | **{totals[1]}** | **{totals[2]}** |\n")
    return HEADER + "".join(rows)
