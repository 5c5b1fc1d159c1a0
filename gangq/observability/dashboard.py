"""The gangq Grafana dashboard, generated with the Grafana Foundation SDK.

``python -m gangq.observability.dashboard`` rewrites ``deploy/grafana/gangq-dashboard.json``;
``--check`` exits 1 when the checked-in file is stale (the test suite runs the same comparison).
The SDK (``grafana-foundation-sdk``) is a development dependency: the controller never imports
this module.

Every query reads only gangq's own metrics (``gangq.observability.metrics``), so the dashboard works
on first import against any Prometheus that scrapes the controller; the data source is a variable.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.builders import stat as stat_b
from grafana_foundation_sdk.builders import timeseries as ts_b
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "deploy" / "grafana" / "gangq-dashboard.json"
UID = "gangq-overview"

DS = dash_m.DataSourceRef(type_val="prometheus", uid="${datasource}")
CQ = 'cluster_queue=~"$cluster_queue"'
RATE = "$__rate_interval"
# The pods-ready-timeout threshold for the head-of-queue panel matches the alert (deploy/prometheus).
HEAD_AGE_WARN = 3600.0


def _query(expr: str, legend: str, ref: str = "A") -> prom_b.Dataquery:
    return prom_b.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)


def _legend() -> common_b.VizLegendOptions:
    return (
        common_b.VizLegendOptions()
        .display_mode(common_m.LegendDisplayMode.TABLE)
        .placement(common_m.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["lastNotNull", "max"])
    )


def _timeseries(
    title: str,
    description: str,
    queries: list[tuple[str, str]],
    *,
    unit: str = "short",
    stacked: bool = False,
    width: int = 12,
    bars: bool = False,
    thresholds: list[tuple[float | None, str]] | None = None,
) -> ts_b.Panel:
    panel = (
        ts_b.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .min(0)
        .span(width)
        .height(8)
        .legend(_legend())
        .fill_opacity(15 if not bars else 80)
    )
    if bars:
        panel = panel.draw_style(common_m.GraphDrawStyle.BARS)
    if stacked:
        panel = panel.stacking(common_b.StackingConfig().mode(common_m.StackingMode.NORMAL))
    if thresholds:
        panel = panel.thresholds(
            dash_b.ThresholdsConfig()
            .mode(dash_m.ThresholdsMode.ABSOLUTE)
            .steps([dash_m.Threshold(value=v, color=c) for v, c in thresholds])
        ).thresholds_style(common_b.GraphThresholdsStyleConfig().mode(common_m.GraphTresholdsStyleMode.LINE))
    for i, (expr, legend) in enumerate(queries):
        panel = panel.with_target(_query(expr, legend, chr(ord("A") + i)))
    return panel


def _stat(
    title: str, description: str, expr: str, legend: str, steps: list[tuple[float | None, str]], unit: str = "short"
) -> stat_b.Panel:
    return (
        stat_b.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .span(6)
        .height(4)
        .color_mode(common_m.BigValueColorMode.BACKGROUND)
        .graph_mode(common_m.BigValueGraphMode.NONE)
        .thresholds(
            dash_b.ThresholdsConfig()
            .mode(dash_m.ThresholdsMode.ABSOLUTE)
            .steps([dash_m.Threshold(value=v, color=c) for v, c in steps])
        )
        .with_target(_query(expr, legend))
    )


def _variable(name: str, label: str, query: str, *, include_all: bool = True, multi: bool = True) -> Any:
    var = (
        dash_b.QueryVariable(name)
        .label(label)
        .query(query)
        .datasource(DS)
        .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dash_m.VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(include_all)
    )
    if include_all:
        var = var.all_value(".*").current(dash_m.VariableOption(selected=True, text="All", value="$__all"))
    return var


def build() -> dash_b.Dashboard:
    quantiles = [
        (
            f"histogram_quantile({q}, sum by (le) (rate(gangq_admission_wait_time_seconds_bucket{{{CQ}}}[{RATE}])))",
            f"p{round(q * 100)}",
        )
        for q in (0.5, 0.95, 0.99)
    ]
    quota_sel = f'{CQ}, flavor=~"$flavor", resource=~"$resource"'
    return (
        dash_b.Dashboard("gangq: queues, quota and admission")
        .uid(UID)
        .description("gangq's ClusterQueues: queue depth and wait, quota and borrowing, evictions, controller health")
        .tags(["gangq", "kubernetes", "batch"])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .editable()
        .with_variable(
            dash_b.DatasourceVariable("datasource")
            .label("Data source")
            .type("prometheus")
            .current(dash_m.VariableOption(selected=True, text="Prometheus", value="prometheus"))
        )
        .with_variable(_variable("cohort", "Cohort", "label_values(gangq_cluster_queue_info, cohort)"))
        .with_variable(
            _variable(
                "cluster_queue",
                "ClusterQueue",
                'label_values(gangq_cluster_queue_info{cohort=~"$cohort"}, cluster_queue)',
            )
        )
        .with_variable(
            _variable("flavor", "Flavor", "label_values(gangq_cluster_queue_nominal_quota{" + CQ + "}, flavor)")
        )
        .with_variable(
            _variable(
                "resource",
                "Resource",
                "label_values(gangq_cluster_queue_nominal_quota{" + CQ + "}, resource)",
                include_all=False,
                multi=False,
            ).current(dash_m.VariableOption(selected=True, text="nvidia.com/gpu", value="nvidia.com/gpu"))
        )
        # -- queues ------------------------------------------------------------------------------------
        .with_row(dash_b.Row("Queues"))
        .with_panel(
            _timeseries(
                "Pending workloads by ClusterQueue",
                "Pending gangs per ClusterQueue: active (will be tried) and inadmissible (wait for quota, nodes or "
                "a config change).",
                [(f"sum by (cluster_queue, status) (gangq_pending_workloads{{{CQ}}})", "{{cluster_queue}} {{status}}")],
                stacked=True,
            )
        )
        .with_panel(
            _timeseries(
                "Head-of-queue age",
                "How long the first gang in each ClusterQueue's admission order has waited: the starvation signal. "
                "The line is the GangqQueueHeadWaitingTooLong alert threshold.",
                [(f"max by (cluster_queue) (gangq_cluster_queue_head_age_seconds{{{CQ}}})", "{{cluster_queue}}")],
                unit="s",
                thresholds=[(None, "green"), (HEAD_AGE_WARN, "red")],
            )
        )
        .with_panel(
            _timeseries(
                "Admission rate",
                "Gangs admitted per second, per ClusterQueue (re-admissions after eviction included).",
                [
                    (
                        f"sum by (cluster_queue) (rate(gangq_admitted_workloads_total{{{CQ}}}[{RATE}]))",
                        "{{cluster_queue}}",
                    )
                ],
                unit="ops",
            )
        )
        .with_panel(
            _timeseries(
                "Admission wait time (p50 / p95 / p99)",
                "Time from creation or requeue to admission, over the selected ClusterQueues.",
                quantiles,
                unit="s",
            )
        )
        .with_panel(
            _timeseries(
                "Admission to all pods ready (p50 / p95)",
                "Time from admission until minMember pods of a gang run.",
                [
                    (
                        f"histogram_quantile({q}, sum by (le) "
                        f"(rate(gangq_admitted_until_ready_wait_time_seconds_bucket{{{CQ}}}[{RATE}])))",
                        f"p{round(q * 100)}",
                    )
                    for q in (0.5, 0.95)
                ],
                unit="s",
            )
        )
        .with_panel(
            _timeseries(
                "Admitted gangs",
                "Gangs admitted and not finished, per ClusterQueue.",
                [(f"sum by (cluster_queue) (gangq_admitted_active_workloads{{{CQ}}})", "{{cluster_queue}}")],
                stacked=True,
            )
        )
        # -- quota -------------------------------------------------------------------------------------
        .with_row(dash_b.Row("Quota ($resource)"))
        .with_panel(
            _timeseries(
                "Quota: usage vs nominal, borrowed",
                "Usage, nominal quota and the part borrowed from the cohort, summed over the selected "
                "ClusterQueues and flavors.",
                [
                    (f"sum(gangq_cluster_queue_resource_usage{{{quota_sel}}})", "usage"),
                    (f"sum(gangq_cluster_queue_nominal_quota{{{quota_sel}}})", "nominal"),
                    (f"sum(gangq_cluster_queue_borrowed_quota{{{quota_sel}}})", "borrowed"),
                ],
            )
        )
        .with_panel(
            _timeseries(
                "Quota usage by ClusterQueue and flavor (fraction of nominal)",
                "Usage / nominal quota; above 1 the queue borrows.",
                [
                    (
                        f"sum by (cluster_queue, flavor) (gangq_cluster_queue_resource_usage{{{quota_sel}}}) / "
                        f"sum by (cluster_queue, flavor) (gangq_cluster_queue_nominal_quota{{{quota_sel}}} > 0)",
                        "{{cluster_queue}} / {{flavor}}",
                    )
                ],
                unit="percentunit",
            )
        )
        .with_panel(
            _timeseries(
                "Cohort subtree: usage vs quota",
                "Usage of every ClusterQueue below each cohort, against the subtree's nominal quota.",
                [
                    (
                        'sum by (cohort) (gangq_cohort_subtree_resource_usage{cohort=~"$cohort", flavor=~"$flavor", '
                        'resource=~"$resource"})',
                        "{{cohort}} usage",
                    ),
                    (
                        'sum by (cohort) (gangq_cohort_subtree_quota{cohort=~"$cohort", flavor=~"$flavor", '
                        'resource=~"$resource"})',
                        "{{cohort}} quota",
                    ),
                ],
            )
        )
        .with_panel(
            _timeseries(
                "Fair sharing: weighted share",
                "Each ClusterQueue's borrowed share of its cohort (dominant resource) divided by its weight.",
                [(f"max by (cluster_queue) (gangq_cluster_queue_weighted_share{{{CQ}}})", "{{cluster_queue}}")],
            )
        )
        # -- evictions ---------------------------------------------------------------------------------
        .with_row(dash_b.Row("Evictions and preemptions"))
        .with_panel(
            _timeseries(
                "Evictions by reason",
                "Gangs evicted per interval: preempted, pods-ready timeout, stopped queues.",
                [
                    (
                        f"sum by (reason) (increase(gangq_evicted_workloads_total{{{CQ}}}[{RATE}]))",
                        "{{reason}}",
                    )
                ],
                bars=True,
                stacked=True,
            )
        )
        .with_panel(
            _timeseries(
                "Preemptions by preempting ClusterQueue and reason",
                "Who preempts whom: in the own ClusterQueue, or reclaiming lent quota in the cohort.",
                [
                    (
                        "sum by (preempting_cluster_queue, reason) (increase(gangq_preempted_workloads_total"
                        f'{{preempting_cluster_queue=~"$cluster_queue"}}[{RATE}]))',
                        "{{preempting_cluster_queue}} {{reason}}",
                    )
                ],
                bars=True,
                stacked=True,
            )
        )
        .with_panel(
            _timeseries(
                "Pods-ready timeouts (last hour)",
                "Gangs evicted because minMember pods did not run in time; repeated timeouts raise "
                "GangqPodsReadyTimeoutsRepeated.",
                [
                    (
                        f"sum by (cluster_queue) (increase(gangq_evicted_workloads_total{{{CQ}, "
                        'reason="PodsReadyTimeout"}[1h]))',
                        "{{cluster_queue}}",
                    )
                ],
            )
        )
        .with_panel(
            _timeseries(
                "Admission errors",
                "Admissions or evictions the controller could not apply to the cluster.",
                [
                    (
                        f"sum by (cluster_queue, reason) (increase(gangq_admission_errors_total{{{CQ}}}[{RATE}]))",
                        "{{cluster_queue}} {{reason}}",
                    )
                ],
                bars=True,
            )
        )
        # -- controller --------------------------------------------------------------------------------
        .with_row(dash_b.Row("Controller"))
        .with_panel(
            _stat(
                "Replicas up",
                "Controller replicas Prometheus scrapes.",
                "count(gangq_build_info)",
                "replicas",
                [(None, "red"), (1, "green")],
            )
        )
        .with_panel(
            _stat(
                "Leader",
                "Replicas holding the leader lease: exactly 1 is healthy.",
                "sum(gangq_leader)",
                "leaders",
                [(None, "red"), (1, "green"), (2, "red")],
            )
        )
        .with_panel(
            _stat(
                "Inactive or stopped ClusterQueues",
                "ClusterQueues that admit nothing (missing flavor or cohort, or a stop policy).",
                f'sum(gangq_cluster_queue_status{{{CQ}, status!="active"}})',
                "queues",
                [(None, "green"), (1, "orange")],
            )
        )
        .with_panel(
            _stat(
                "API error ratio (5m)",
                "Failed Kubernetes API requests / all requests.",
                "sum(rate(gangq_api_request_errors_total[5m])) / sum(rate(gangq_api_requests_total[5m]))",
                "errors",
                [(None, "green"), (0.01, "orange"), (0.05, "red")],
                unit="percentunit",
            )
        )
        .with_panel(
            _timeseries(
                "Scheduling cycle duration (p50 / p99)",
                "Wall time of one scheduling cycle.",
                [
                    (
                        f"histogram_quantile({q}, sum by (le) (rate(gangq_scheduling_cycle_duration_seconds_bucket"
                        f"[{RATE}])))",
                        f"p{round(q * 100)}",
                    )
                    for q in (0.5, 0.99)
                ],
                unit="s",
            )
        )
        .with_panel(
            _timeseries(
                "Admissions per cycle (mean) and cycles per second",
                "How much one cycle admits, and how often cycles run.",
                [
                    (
                        f"sum(rate(gangq_scheduling_cycle_admissions_sum[{RATE}])) / "
                        f"sum(rate(gangq_scheduling_cycle_admissions_count[{RATE}]))",
                        "admissions per cycle",
                    ),
                    (f"sum(rate(gangq_scheduling_cycle_admissions_count[{RATE}]))", "cycles/s"),
                ],
            )
        )
        .with_panel(
            _timeseries(
                "Kubernetes API requests by verb and code",
                "Requests the controller sends to the API server.",
                [(f"sum by (verb, code) (rate(gangq_api_requests_total[{RATE}]))", "{{verb}} {{code}}")],
                unit="reqps",
                stacked=True,
            )
        )
        .with_panel(
            _timeseries(
                "Kubernetes API errors by verb and resource",
                "Failed requests (status >= 400 or no response).",
                [
                    (
                        f"sum by (verb, resource) (rate(gangq_api_request_errors_total[{RATE}]))",
                        "{{verb}} {{resource}}",
                    )
                ],
                unit="reqps",
            )
        )
    )


def render() -> str:
    """The dashboard JSON, as checked in (stable key order, trailing newline)."""
    model = build().build()
    text = JSONEncoder(sort_keys=True, indent=2).encode(model)
    return json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the checked-in dashboard is stale")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            sys.stderr.write(f"{args.output} is stale: run python -m gangq.observability.dashboard\n")
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
