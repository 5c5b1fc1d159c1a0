"""The engine counts the retries it asks for, per reason (that every reason is asked for somewhere
and documented, and that no rule module bypasses them, is checked in tests/test_lint.py: it reads
the source, which the compiled-core run of these tests does not have)."""

from __future__ import annotations

from gangq.core.retries import REASONS, reason_label
from tests.engine.builders import add_nodes, add_queue, admitted, engine, gang, quota


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
