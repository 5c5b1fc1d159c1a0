"""The Grafana dashboard (generated, checked in, only gangq's metrics) and the Prometheus alerts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangq.observability import dashboard
from gangq.observability.metrics import METRIC_NAMES
from gangq.observability.promql import metric_names, variable_metric_names

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "gangq-rules.yaml"


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(dashboard.OUTPUT.read_text())
    return data


def exprs(board: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]


def test_checked_in_dashboard_is_not_stale() -> None:
    assert dashboard.OUTPUT.read_text() == dashboard.render(), "run: python -m gangq.observability.dashboard"
    assert dashboard.main(["--check"]) == 0


def test_stale_check_detects_a_change(tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    assert dashboard.main(["--output", str(out)]) == 0
    assert dashboard.main(["--check", "--output", str(out)]) == 0
    out.write_text(out.read_text().replace("Head-of-queue age", "Head age"))
    assert dashboard.main(["--check", "--output", str(out)]) == 1


def test_every_panel_query_uses_only_gangq_metrics(board: dict[str, Any]) -> None:
    queries = exprs(board)
    assert len(queries) >= 20
    used: set[str] = set()
    for title, expr in queries:
        names = metric_names(expr)
        assert names, (title, expr)
        assert names <= set(METRIC_NAMES), (title, names - set(METRIC_NAMES))
        used |= names
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            names = variable_metric_names(var["query"])
            assert names and names <= set(METRIC_NAMES), (var["name"], names)
    # the panels cover the families an admin needs
    for family in (
        "gangq_pending_workloads",
        "gangq_cluster_queue_head_age_seconds",
        "gangq_admission_wait_time_seconds_bucket",
        "gangq_cluster_queue_borrowed_quota",
        "gangq_evicted_workloads_total",
        "gangq_preempted_workloads_total",
        "gangq_leader",
    ):
        assert family in used, family


def test_dashboard_variables_and_datasource(board: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"datasource", "cluster_queue", "cohort", "flavor"} <= set(variables)
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("cluster_queue", "cohort", "flavor"):
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
    # cluster_queue follows the cohort selection
    assert "$cohort" in variables["cluster_queue"]["query"]
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    titles = " | ".join(p["title"] for p in board["panels"])
    for needle in (
        "Pending",
        "Admission rate",
        "wait time",
        "usage vs nominal",
        "Head-of-queue",
        "Evictions",
        "Preemptions",
        "Pods-ready timeouts",
        "Leader",
    ):
        assert needle in titles, needle
    uses_vars = " ".join(e for _, e in exprs(board))
    for var in ("$cluster_queue", "$cohort", "$flavor"):
        assert var in uses_vars, var


def test_promql_name_check_can_fail() -> None:
    assert metric_names('sum by (le) (rate(foo_bucket{a="b"}[5m])) / on(x) bar') == {"foo_bucket", "bar"}
    assert metric_names("histogram_quantile(0.9, sum by (le) (rate(x_bucket[$__rate_interval])))") == {"x_bucket"}
    assert metric_names('absent(up{job="a"}) or vector(0) > bool 1e3') == {"up"}
    assert metric_names("max by (cluster_queue) (gangq_x) > 3600") == {"gangq_x"}
    assert variable_metric_names('label_values(gangq_info{cohort=~"$cohort"}, cluster_queue)') == {"gangq_info"}


def load_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["spec"]["groups"] for r in g["rules"]]


def test_alerts_use_only_gangq_metrics_and_cover_the_issue() -> None:
    rules = load_rules()
    for rule in rules:
        names = metric_names(rule["expr"])
        assert names and names <= set(METRIC_NAMES), (rule["alert"], names - set(METRIC_NAMES))
    alerts = {r["alert"] for r in rules}
    assert {
        "GangqQueueHeadWaitingTooLong",
        "GangqPodsReadyTimeoutsRepeated",
        "GangqControllerDown",
        "GangqNoLeader",
        "GangqAdmissionErrors",
    } <= alerts
    head = next(r for r in rules if r["alert"] == "GangqQueueHeadWaitingTooLong")
    assert f"> {int(dashboard.HEAD_AGE_WARN)}" in head["expr"]
