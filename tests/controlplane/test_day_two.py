"""Day two on both control planes (``benchmarks/day_two.py``): with gangs running, a rolling update
of the two controller replicas and an upgrade that changes their configuration stop no running
gang, admit each gang once, break none of the chaos watcher's rules, and a new leader holds the
Lease within its duration + 5 s after each SIGTERM of the leader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("plane", ["emulated", "real"])
def test_rolling_update_and_upgrade_stop_no_gang_and_hand_over_in_time(plane: str, tmp_path: Path) -> None:
    if plane == "real":
        from tests.conftest import require_real_control_plane

        require_real_control_plane()
    out = tmp_path / "day-two.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "day_two.py"), "--control-plane", plane,
                          "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.exists(), run.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["violations"] == 0, result["violation_examples"]
    assert result["evictions_seen"] == 0, result
    assert result["gangs_submitted"] == result["gangs_finished"] == result["admissions_seen"] == 40, result
    assert [roll["kind"] for roll in result["rolls"]] == ["rolling_update", "upgrade"]
    assert all(n > 0 for n in result["gangs_running_when_each_roll_started"]), result
    assert result["failover_seconds"] and all(
        f is not None and f <= result["lease_duration_seconds"] + 5 for f in result["failover_seconds"]), result
    assert all(all(code == 0 for code in roll["old_replica_exit_codes"]) for roll in result["rolls"]), result
    assert run.returncode == 0, run.stderr[-4000:]
