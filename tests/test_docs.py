"""Examples in the docs run and say what the docs say."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_engine_doc_example_admits_the_gang(capsys: object) -> None:
    text = (ROOT / "docs" / "engine.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    scope: dict[str, object] = {}
    exec(compile(code.group(1), "docs/engine.md", "exec"), scope)
    engine = scope["engine"]
    view = engine.workload("team-a/train")  # type: ignore[attr-defined]
    assert view.state == "Admitted"
    assert view.admission.pod_sets[0].placement == {"node-1": 2}
    assert "admitted by ClusterQueue 'team-a'" in view.message
