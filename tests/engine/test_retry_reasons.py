"""Every retry of a ClusterQueue and every repeated cycle names a reason from one enum, each reason
is asked for somewhere and explained in docs/engine.md, and the engine counts them."""

from __future__ import annotations

import re
from pathlib import Path

from gangq.core.retries import REASONS, RetryReason, reason_label
from tests.engine.builders import add_nodes, add_queue, admitted, engine, gang, quota

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "gangq" / "core"


def test_every_reason_is_asked_for_and_documented() -> None:
    source = "\n".join(p.read_text() for p in CORE.glob("*.py") if p.name != "retries.py")
    used = set(re.findall(r"RetryReason\.([A-Z_]+)", source))
    assert used == {r.name for r in RetryReason}, "a reason no call site asks for, or a call site with an unknown one"
    doc = (ROOT / "docs" / "engine.md").read_text()
    for reason in RetryReason:
        assert f"| `{reason.name}` |" in doc, f"docs/engine.md's Retry reasons table lacks {reason.name}"


def test_no_retry_bypasses_the_reasons() -> None:
    """Rule modules ask for retries only through EngineState's reasoned methods."""
    for path in CORE.glob("*.py"):
        text = path.read_text()
        assert "_retry_queue(" not in text or path.name == "state.py", path.name
        assert "cycle_again += 1" not in text or path.name == "state.py", path.name


def test_a_finish_is_counted_as_quota_released() -> None:
    e = engine()
    add_nodes(e, "a100", 1)
    add_queue(e, "q", [quota("a100", 64, 8)])
    e.submit(gang("a", "q", 1, 8), 0.0)
    e.submit(gang("b", "q", 1, 8), 0.0)
    assert admitted(e.schedule(1.0)) == ["a"]
    before = e.retry_counts()
    assert set(before) == {reason_label(r) for r in REASONS}
    e.finish("ns/a", 2.0)
    after = e.retry_counts()
    assert after["quota_released"] == before["quota_released"] + 1
    assert admitted(e.schedule(2.0)) == ["b"]
