"""``gangq simulate``: replay a trace through the admission engine (and comparison policies).

Registered by ``gangq/cli.py`` as ``app.command("simulate")(simulate)``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from gangq.api.quantity import QuantityError
from gangq.core.config import EngineConfig
from gangq.core.errors import SpecError
from gangq.core.runtimes import DEFAULT_QUANTILE
from gangq.sim.philly import DEFAULT_WINDOW, load_philly
from gangq.sim.policies import POLICIES, make_policy
from gangq.sim.report import print_compare, print_summary, summarize
from gangq.sim.scenario import SCENARIOS, Scenario, gang_deadlock, kueue_baseline, load_config
from gangq.sim.simulator import LivelockError, SimResult, Simulator
from gangq.sim.topology import DEFAULT_SAMPLE_EVERY, TopologyLayout, parse_request
from gangq.sim.trace import ColumnMapping, TraceError, load_cluster_file, load_csv, load_native

PLOTS_EXTRA = "pip install 'gangq[plots]'"
"""How to get matplotlib: plotting is an extra, so the controller's install does not carry it."""

log = logging.getLogger(__name__)

PROGRESS_MIN_JOBS = 5000


class UsageError(ValueError):
    """Options that do not go together."""


def build_scenario(
    scenario: str | None,
    trace: str | None,
    trace_dir: Path | None,
    window: str,
    capacity_scale: float,
    config: list[Path] | None,
    cluster: Path | None,
    csv_map: str | None,
    time_format: str | None,
    gpus_per_pod: int,
    scale: float,
    runtime_limits: float | None,
    fraction: float,
    csv_default: str | None = None,
    topology_layout: str | None = None,
    topology_request: str | None = None,
) -> Scenario:
    """The scenario the options describe (before engine-setting overrides)."""
    if (scenario is None) == (trace is None):
        raise UsageError("give exactly one of --scenario or --trace")
    if topology_layout is not None and trace != "philly":
        raise UsageError("--topology-layout labels the Philly replay's nodes; a --cluster file gives topology: instead")
    if scenario is not None:
        if topology_request is not None:
            raise UsageError("--topology-request: the built-in scenarios have no topology")
        if scenario == "kueue-baseline":
            return kueue_baseline(scale, config[0] if config else None)
        if scenario == "gang-deadlock":
            return gang_deadlock()
        raise UsageError(f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})")
    assert trace is not None
    if trace == "philly":
        if trace_dir is None:
            raise UsageError("--trace philly needs --trace-dir (the directory of philly_pollux_jobs.csv)")
        layout = TopologyLayout.parse(topology_layout) if topology_layout is not None else None
        request = None
        if topology_request is not None:
            if layout is None:
                raise UsageError("--topology-request needs a topology: give --topology-layout too")
            request = parse_request(topology_request, layout.spec().levels)
        return load_philly(
            trace_dir,
            window,
            capacity_scale,
            runtime_limits=runtime_limits,
            fraction=fraction,
            layout=layout,
            topology_request=request,
        )
    path = Path(trace)
    if not config:
        raise UsageError("a trace file needs --config (the queue-configuration YAML you would kubectl apply)")
    queue_config = load_config(config)
    nodes, topology = load_cluster_file(cluster) if cluster else ([], None)
    namespaces: dict[str, dict[str, str]] = {}
    if path.suffix == ".csv":
        if not csv_map:
            raise UsageError(
                "a CSV trace needs --csv-map field=column,... (fields: submit, duration, queue, gpus, ...)"
            )
        mapping = ColumnMapping.parse(csv_map, csv_default, time_format=time_format, gpus_per_pod=gpus_per_pod)
        jobs = load_csv(path, mapping)
    else:
        native = load_native(path)
        jobs = native.jobs
        nodes = nodes or native.nodes
        namespaces = native.namespaces
    if runtime_limits:
        for job in jobs:
            if job.runtime_limit is None:
                job.runtime_limit = max(1.0, job.duration * runtime_limits)
    out = Scenario(
        path.stem,
        queue_config,
        nodes,
        jobs,
        EngineConfig(pods_ready_timeout=None),
        namespaces=namespaces,
        topology=topology,
    )
    if topology_request is not None:
        measured = out.measured_topology()
        if measured is None:
            raise UsageError(
                "--topology-request needs a topology: topology: in the --cluster file, or a flavor's topologyName"
            )
        out.topology_request = parse_request(topology_request, measured.levels)
    return out


def _engine_config(
    base: EngineConfig,
    pods_ready_timeout: float | None,
    starvation_timeout: float | None,
    fair_sharing: bool | None,
    preemption_budget: int | None = None,
    preemption_delay: float | None = None,
) -> EngineConfig:
    changes: dict[str, object] = {}
    if pods_ready_timeout is not None:
        changes["pods_ready_timeout"] = pods_ready_timeout or None
    if starvation_timeout is not None:
        changes["starvation_timeout"] = starvation_timeout
    if fair_sharing is not None:
        changes["fair_sharing"] = fair_sharing
    if preemption_budget is not None:
        changes["preemption_budget"] = preemption_budget or None
    if preemption_delay is not None:
        changes["preemption_delay"] = preemption_delay
    return base.replace(**changes)


def _variants(policy: str, compare: str | None, base: Scenario) -> list[tuple[str, Scenario, str]]:
    """(label, scenario, policy name) per run: ``--compare fifo,sjf,gangq,gangq@other.yaml``."""
    entries = [e.strip() for e in compare.split(",") if e.strip()] if compare else [policy]
    out = []
    for entry in entries:
        name, _, config_path = entry.partition("@")
        if name not in POLICIES:
            raise UsageError(f"unknown policy {name!r} in {entry!r} (known: {', '.join(POLICIES)})")
        scenario = base
        if config_path:
            scenario = Scenario(
                base.name,
                load_config([Path(config_path)]),
                base.nodes,
                base.jobs,
                base.engine_config,
                resource=base.resource,
                classes=base.classes,
                excluded=base.excluded,
                pod_start_latency=base.pod_start_latency,
                eviction_latency=base.eviction_latency,
                checkpoint=base.checkpoint,
                info=base.info,
                namespaces=base.namespaces,
                runtime_estimates=base.runtime_estimates,
                estimate_quantile=base.estimate_quantile,
                topology=base.topology,
                topology_request=base.topology_request,
                topology_sample_every=base.topology_sample_every,
            )
        out.append((entry, scenario, name))
    return out


def run_variants(
    variants: list[tuple[str, Scenario, str]], console: Console | None, show_progress: bool
) -> list[SimResult]:
    results = []
    for label, scenario, name in variants:
        sim = Simulator(scenario, make_policy(name), label)
        if show_progress and console is not None and len(scenario.jobs) >= PROGRESS_MIN_JOBS:
            with Progress(
                TextColumn(f"[bold]{label}[/bold]"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} jobs submitted"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            ) as bar:
                task = bar.add_task(label, total=len(scenario.jobs))

                def advance(done: int, total: int, now: float, bar: Progress = bar, task: TaskID = task) -> None:
                    bar.update(task, completed=done)

                results.append(sim.run(advance))
        else:
            results.append(sim.run())
    # Resources held by partial gangs: measured over the longest run of the comparison, so that a
    # deadlocked pod-by-pod run (which stops early) is charged for as long as the others ran.
    horizon = max((r.end for r in results), default=0.0)
    for r in results:
        if r.end < horizon and "partial_gang_resource_hours" in r.extra:
            r.extra = r.policy.extra(horizon)
            r.extra["measured_until"] = horizon
    return results


def simulate(
    scenario: Annotated[
        str | None, typer.Option(help="built-in scenario: kueue-baseline (Kueue's perf test) or gang-deadlock")
    ] = None,
    trace: Annotated[
        str | None, typer.Option(help="'philly' or a trace file: native .yaml/.jsonl, or .csv with --csv-map")
    ] = None,
    trace_dir: Annotated[Path | None, typer.Option(help="directory of the Philly trace files")] = None,
    window: Annotated[str, typer.Option(help="Philly submission window YYYY-MM-DD:YYYY-MM-DD (inclusive)")] = (
        DEFAULT_WINDOW
    ),
    capacity_scale: Annotated[float, typer.Option(help="Philly: multiply each VC's node count (floor, >= 1)")] = 1.0,
    config: Annotated[
        list[Path] | None, typer.Option(help="queue-configuration YAML (the file you would kubectl apply); repeatable")
    ] = None,
    cluster: Annotated[
        Path | None,
        typer.Option(help="YAML with nodes: [{name, count, allocatable, labels}] and optional topology: [LABEL, ...]"),
    ] = None,
    topology_layout: Annotated[
        str | None,
        typer.Option(
            help="Philly: label each VC's nodes into racks and blocks: hosts-per-rack=H,racks-per-block=R (4 each)"
        ),
    ] = None,
    topology_request: Annotated[
        str | None,
        typer.Option(help="what gangs of more than one pod ask for: required:LEVEL or preferred:LEVEL (e.g. rack)"),
    ] = None,
    topology_sample_every: Annotated[
        float, typer.Option(help="simulated seconds between fragmentation samples (with a topology)", min=1)
    ] = DEFAULT_SAMPLE_EVERY,
    csv_map: Annotated[
        str | None, typer.Option(help="CSV column mapping field=column,... (submit, duration, queue, gpus, pods, cpu)")
    ] = None,
    csv_default: Annotated[
        str | None, typer.Option(help="CSV values for fields no column holds: field=value,... (e.g. queue=team-a)")
    ] = None,
    time_format: Annotated[
        str | None, typer.Option(help="CSV submit column as timestamps: strptime format or 'iso'")
    ] = None,
    gpus_per_pod: Annotated[int, typer.Option(help="CSV gpus column: GPUs per pod (node size)")] = 8,
    scale: Annotated[float, typer.Option(help="kueue-baseline: fraction of the workloads per class")] = 1.0,
    policy: Annotated[str, typer.Option(help="gangq | gangq-firstfit | fifo | sjf | pod-by-pod")] = "gangq",
    compare: Annotated[
        str | None, typer.Option(help="run several side by side: e.g. fifo,sjf,gangq,gangq@other-config.yaml")
    ] = None,
    pods_ready_timeout: Annotated[
        float | None, typer.Option(help="engine: seconds for a gang to get its pods running (0: off)")
    ] = None,
    starvation_timeout: Annotated[
        float | None, typer.Option(help="engine: seconds after which a blocked head stops others passing it")
    ] = None,
    fair_sharing: Annotated[bool | None, typer.Option("--fair-sharing/--no-fair-sharing", help="engine")] = None,
    preemption_budget: Annotated[
        int | None,
        typer.Option(help="engine: a gang evicted this many times is no longer a preemption victim (0: no limit)"),
    ] = None,
    preemption_delay: Annotated[
        float | None,
        typer.Option(help="engine: seconds a gang must have waited before it may preempt (0: at once)", min=0),
    ] = None,
    runtime_limits: Annotated[
        float | None, typer.Option(help="give jobs a runtime limit of FACTOR × their duration (enables backfill)")
    ] = None,
    runtime_estimates: Annotated[
        bool,
        typer.Option(
            "--runtime-estimates/--no-runtime-estimates",
            help="gangq: gangs without a runtime limit get the run time learned from similar finished gangs "
            "as expected run time for reservations and backfill (never enforced)",
        ),
    ] = True,
    estimate_quantile: Annotated[
        float, typer.Option(help="gangq: runtime estimate = this quantile of similar gangs' run times")
    ] = DEFAULT_QUANTILE,
    pod_start_latency: Annotated[float, typer.Option(help="seconds from admission until every pod runs")] = 0.0,
    eviction_latency: Annotated[float, typer.Option(help="seconds from an eviction until the gang stopped")] = 0.0,
    checkpoint: Annotated[
        float, typer.Option(help="preempted gangs resume from checkpoints every FRACTION of their run (0: restart)")
    ] = 0.0,
    fraction: Annotated[
        float, typer.Option(help="Philly: simulate only the first FRACTION of the window's jobs")
    ] = 1.0,
    json_path: Annotated[Path | None, typer.Option("--json", help="write the figures as JSON")] = None,
    plots: Annotated[Path | None, typer.Option(help="directory for PNG plots")] = None,
    metrics: Annotated[Path | None, typer.Option(help="write end-of-run Prometheus metrics (text format)")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="progress bar for long runs")] = True,
    quiet: Annotated[bool, typer.Option(help="no tables")] = False,
) -> None:
    """Replay workloads through gangq's admission engine (or a comparison policy) on a virtual clock."""
    console = Console()
    try:
        base = build_scenario(
            scenario,
            trace,
            trace_dir,
            window,
            capacity_scale,
            config,
            cluster,
            csv_map,
            time_format,
            gpus_per_pod,
            scale,
            runtime_limits,
            fraction,
            csv_default,
            topology_layout,
            topology_request,
        )
        base.topology_sample_every = topology_sample_every
        base.engine_config = _engine_config(
            base.engine_config,
            pods_ready_timeout,
            starvation_timeout,
            fair_sharing,
            preemption_budget,
            preemption_delay,
        )
        base.runtime_estimates = runtime_estimates
        if not 0.0 <= estimate_quantile <= 1.0:
            raise UsageError(f"--estimate-quantile must be in [0, 1], got {estimate_quantile}")
        base.estimate_quantile = estimate_quantile
        base.pod_start_latency = pod_start_latency
        base.eviction_latency = eviction_latency
        if not 0.0 <= checkpoint < 1.0:
            raise UsageError(f"--checkpoint must be in [0, 1), got {checkpoint}")
        base.checkpoint = checkpoint
        if plots is not None and importlib.util.find_spec("matplotlib") is None:
            raise UsageError(f"--plots needs matplotlib, which is an extra: {PLOTS_EXTRA}")
        variants = _variants(policy, compare, base)
    except (UsageError, TraceError, SpecError, QuantityError, ValueError, OSError) as err:
        console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from err
    try:
        results = run_variants(variants, console, progress and not quiet)
    except LivelockError as err:
        console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from err
    summaries = [summarize(r) for r in results]
    if not quiet:
        for s in summaries:
            print_summary(console, s)
        if len(summaries) > 1:
            print_compare(console, summaries)
    if json_path is not None:
        doc: dict[str, Any] = dict(summaries[0])
        if len(summaries) > 1:
            doc["compare"] = summaries
        json_path.write_text(json.dumps(doc, indent=2, sort_keys=False))
        console.print(f"wrote {json_path}")
    if plots is not None:
        from gangq.sim.plots import write_plots

        for p in write_plots(results, plots):
            console.print(f"wrote {p}")
    if metrics is not None:
        from gangq.sim.metrics import write_metrics

        write_metrics(results[0], metrics)
        console.print(f"wrote {metrics}")


if __name__ == "__main__":  # python -m gangq.sim.cli ... (until `gangq simulate` is registered)
    typer.run(simulate)
