"""Run the corpus on a sandbox and a freshly started real control plane, print what differs, and
write the counts and the table of documented differences into ``docs/sandbox-conformance.md``.

    python -m tests.conformance.report [--no-write] [--case REGEX]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gangq.controlplane.launcher import ControlPlane
from tests.conformance import session
from tests.conformance.compare import Counts, Outcome, count
from tests.conformance.corpus import CASES
from tests.conformance.differences import DIFFERENCES

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "sandbox-conformance.md"
COMMAND = "python -m tests.conformance.report"
BEGIN = "<!-- conformance:begin -->"
END = "<!-- conformance:end -->"


def table(outcomes: Sequence[Outcome]) -> list[str]:
    """One line per documented difference: its key, how many cases show it, and its reason."""
    shown = {entry.key: 0 for entry in DIFFERENCES}
    for o in outcomes:
        for entry in o.documented:
            if o.as_documented:
                shown[entry.key] += 1
    lines = ["| difference | cases | why it is kept |", "|---|---|---|"]
    for entry in DIFFERENCES:
        lines.append(f"| `{entry.key}` | {shown[entry.key]} | {entry.reason} |")
    return lines


def section(counts: Counts, outcomes: Sequence[Outcome], server: str) -> str:
    lines = [
        BEGIN,
        f"Produced by `{COMMAND}` against kube-apiserver {server}:",
        "",
        f"- cases: {counts.cases}",
        f"- identical after normalisation: {counts.identical}",
        f"- differing exactly as documented: {counts.documented}",
        f"- findings (neither): {counts.findings}",
        "",
        *table(outcomes),
        END,
    ]
    return "\n".join(lines)


def write(text: str) -> None:
    doc = DOC.read_text()
    start, end = doc.index(BEGIN), doc.index(END) + len(END)
    DOC.write_text(doc[:start] + text + doc[end:])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="print only; leave the doc as it is")
    parser.add_argument("--case", default="", help="only the cases whose name matches this regular expression")
    args = parser.parse_args(argv)
    cases = [c for c in CASES if re.search(args.case, c.name)]
    with ControlPlane() as cp:
        started = time.monotonic()
        outcomes = session.run(cp, cases)
        took = time.monotonic() - started
        server = cp.server_version()
    for o in outcomes:
        if o.finding:
            print(o.explain())
    counts = count(outcomes)
    print(f"{counts.cases} cases in {took:.0f} s: {counts.identical} identical, {counts.documented} as documented, "
          f"{counts.findings} findings")
    if not args.no_write and not args.case:
        write(section(counts, outcomes, server))
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 1 if counts.findings else 0


if __name__ == "__main__":
    sys.exit(main())
