"""The chaos suite's quick run (``benchmarks/chaos.py --quick``) on both control planes: under
controller kills, watch and request faults (and, on the real one, API-server restarts and etcd
crashes) no safety rule is broken, every gang finishes and a new leader takes over in time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("plane", ["emulated", "real"])
def test_quick_chaos_breaks_no_rule_and_finishes_every_gang(plane: str, tmp_path: Path) -> None:
    if plane == "real":
        from tests.conftest import require_real_control_plane

        require_real_control_plane()
    out = tmp_path / "chaos.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--quick", "--control-plane", plane,
                          "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.exists(), run.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["violations"] == 0, (result["violation_examples"], _controller_lines(result))
    assert result["gangs_submitted"] == result["gangs_finished"] == 60, result
    assert result["targets"]["failover<=lease+5s"], {k: result[k] for k in (
        "failover_seconds", "failovers_not_seen_details", "unplanned_controller_exits", "faults_by_kind")}
    assert result["leader_failovers"] >= 1 and not result["fault_kinds_not_injected"], result
    assert run.returncode == 0, run.stderr[-4000:]


def _controller_lines(result: dict[str, object]) -> list[str]:
    """The controllers' log lines about the JobSets a violation names (the run keeps its logs)."""
    examples = result.get("violation_examples") or []
    assert isinstance(examples, list)
    names = set(re.findall(r"\bg[0-9]{4}\b", json.dumps(examples)))
    lines: list[str] = []
    for log in sorted(Path(str(result["logs"])).glob("controller-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if any(f"/{name} " in line or f"/{name}:" in line for name in names):
                lines.append(f"{log.name}: {line[:300]}")
    return lines[-80:]
