"""docs/observability.md lists every metric family, and its paths are the served ones."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from gangq.observability.http import PREFIX
from gangq.observability.metrics import GangqMetrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_every_metric_family_is_documented_with_its_labels() -> None:
    text = DOC.read_text()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `gangq_")}
    families = [v for v in vars(GangqMetrics()).values() if isinstance(v, MetricWrapperBase)]
    for family in families:
        name = family._name + ("_total" if family._type == "counter" else "")
        assert name in rows, f"{name} is missing from docs/observability.md"
        cells = [c.strip() for c in rows[name].split("|")]
        assert cells[2] == family._type, name
        labels = ", ".join(family._labelnames) or "—"
        assert cells[3] == labels, (name, cells[3], labels)
    assert len(rows) == len(families), set(rows) - {f._name for f in families}


def test_documented_api_paths_are_served() -> None:
    text = DOC.read_text()
    assert f"GET {PREFIX}/clusterqueues/{{name}}/pendingworkloads" in text
    assert f"GET {PREFIX}/namespaces/{{namespace}}/localqueues/{{name}}/pendingworkloads" in text
