"""Digests of the engine's decision streams on the cases of ``engine_scaling.py``.

    python benchmarks/decision_digest.py [--pending 1000 10000] [--preemption] [--json OUT.json]

A change that is meant to leave decisions as they are (a refactor, a speed-up) must leave these
digests as they are. Each case builds the same cluster and gangs as ``engine_scaling.py``, runs
its admission loop on the virtual clock without a time cap, and hashes every decision but
pending-reason updates (their time and ``repr``) with SHA-256. The digest depends on decisions
only, not on speed, so runs on a loaded machine agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_scaling import CASES, run_case


def digest(pending: int, preemption: bool) -> dict[str, Any]:
    case = next(c for c in CASES if c[0] == pending)
    log: list[tuple[float, str]] = []
    result = run_case(*case, max_seconds=float("inf"), log=log, preemption=preemption)
    sha = hashlib.sha256()
    for now, decision in log:
        sha.update(f"{now!r} {decision}\n".encode())
    return {
        "pending": pending,
        "preemption": preemption,
        "decisions": len(log),
        "admitted": result["admitted"],
        "sha256": sha.hexdigest(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, nargs="+", default=[1_000, 10_000], help="cases, by pending gangs")
    parser.add_argument("--preemption", action="store_true", help="the preempting mode of engine_scaling.py")
    parser.add_argument("--json", dest="json_path", help="write the results here")
    args = parser.parse_args()
    results = [digest(p, args.preemption) for p in args.pending]
    text = json.dumps({"cases": results}, indent=2)
    if args.json_path:
        Path(args.json_path).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
