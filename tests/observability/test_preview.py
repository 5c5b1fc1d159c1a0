"""The dashboard preview's data path (the part that needs no Prometheus binary)."""

from __future__ import annotations

import re

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gangq.observability.preview import openmetrics, simulate, substitute


def split_by_timestamp(text: str) -> dict[str, str]:
    """One OpenMetrics document per timestamp (prometheus_client's parser cannot check histograms
    with several timestamped points; promtool reads the combined file)."""
    headers: list[str] = []
    per_ts: dict[str, dict[str, list[str]]] = {}
    family = ""
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            family = line.split()[2]
            headers.append(family)
        if line.startswith("#"):
            continue
        sample, ts = line.rsplit(" ", 1)
        per_ts.setdefault(ts, {}).setdefault(family, []).append(sample)
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    docs: dict[str, str] = {}
    for ts, families in per_ts.items():
        lines = []
        for name in headers:
            if name in families:
                lines.append(f"# TYPE {name} {types[name]}")
                lines.extend(families[name])
        docs[ts] = "\n".join(lines) + "\n# EOF\n"
    return docs


def test_simulated_scrapes_are_valid_openmetrics_with_timestamps() -> None:
    text = openmetrics(simulate(hours=0.25), t0=1_700_000_000.0)
    assert text.endswith("# EOF\n")
    docs = split_by_timestamp(text)
    assert len(docs) == 61  # one scrape every 15 s for 15 minutes, both ends included
    last = {f.name: f for f in text_string_to_metric_families(docs[max(docs)])}
    first = {f.name: f for f in text_string_to_metric_families(docs[min(docs)])}
    assert "gangq_pending_workloads" in first
    assert last["gangq_admitted_workloads"].type == "counter"
    admitted = [s.value for s in last["gangq_admitted_workloads"].samples if s.name.endswith("_total")]
    assert sum(admitted) >= 1  # the simulation admits gangs
    assert "_created" not in text
    # each series' points are contiguous and in time order (what promtool's backfill needs);
    # a histogram's buckets, count and sum of one label set form one group
    seen: dict[str, str] = {}
    previous = ""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, ts = line.rsplit(" ", 2)[0], line.rsplit(" ", 1)[1]
        sample = sample if "{" in sample else sample + "{}"
        series = re.sub(r',?le="[^"]*"', "", re.sub(r"_(bucket|count|sum)(?=\{)", "", sample))
        if series != previous:
            assert series not in seen, f"series {series} is split"
        else:
            assert float(ts) >= float(seen[series])
        seen[series] = ts
        previous = series


def test_dashboard_variables_are_substituted() -> None:
    assert substitute('rate(x{cluster_queue=~"$cluster_queue"}[$__rate_interval])') == (
        'rate(x{cluster_queue=~".*"}[10m])'
    )
