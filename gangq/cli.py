"""The ``gangq`` command."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from gangq import __version__
from gangq.api.loader import QueueConfig, load_documents, parse_queue_config
from gangq.core.errors import SpecError
from gangq.core.units import format_amount
from gangq.observability.cli import queue
from gangq.operator.cli import run
from gangq.sandbox.cli import sandbox_app
from gangq.sim.cli import simulate

app = typer.Typer(help="gangq: batch queueing and whole-gang admission for Kubernetes batch workloads.",
                  no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")
app.command("run")(run)
app.command("queue")(queue)
app.command("simulate")(simulate)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"gangq {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print gangq's version and exit."
    ),
) -> None:
    """gangq: batch queueing and whole-gang admission for Kubernetes batch workloads."""


def _limit(value: int | None, resource: str) -> str:
    return "∞" if value is None else format_amount(resource, value)


@app.command()
def validate(paths: list[Path] = typer.Argument(..., help="queue-configuration YAML files")) -> None:  # noqa: B008
    """Check queue configurations (ResourceFlavor, Cohort, ClusterQueue, LocalQueue,
    WorkloadPriorityClass, Topology, AdmissionCheck) and print their quota tree, what gangq does
    with topologies and admission checks, and warnings."""
    console = Console()
    config = QueueConfig()
    try:
        for path in paths:
            parse_queue_config(load_documents(path), config)
    except (SpecError, OSError) as err:
        console.print(f"[red]error:[/red] {err}", markup=True, highlight=False)
        raise typer.Exit(1) from err
    for cq in config.cluster_queues.values():
        table = Table(title=f"ClusterQueue {cq.name}  (cohort {cq.cohort or '-'}, {cq.queueing_strategy})")
        for column in ("flavor", "resource", "nominal", "borrowing limit", "lending limit"):
            table.add_column(column)
        for group in cq.resource_groups:
            for flavor in group.flavors:
                for q in flavor.resources:
                    table.add_row(
                        flavor.name,
                        q.name,
                        format_amount(q.name, q.nominal),
                        _limit(q.borrowing_limit, q.name),
                        _limit(q.lending_limit, q.name),
                    )
        console.print(table)
    tree = Tree("cohorts")
    roots = {c.name for c in config.cohorts.values() if c.parent is None}
    roots |= {cq.cohort for cq in config.cluster_queues.values() if cq.cohort and cq.cohort not in config.cohorts}
    nodes: dict[str, Tree] = {}

    def attach(name: str, parent: Tree) -> None:
        node = parent.add(f"cohort {name}")
        nodes[name] = node
        for child in config.cohorts.values():
            if child.parent == name:
                attach(child.name, node)
        for cq in config.cluster_queues.values():
            if cq.cohort == name:
                node.add(f"ClusterQueue {cq.name}")

    for root in sorted(roots):
        attach(root, tree)
    for cq in config.cluster_queues.values():
        if cq.cohort is None:
            tree.add(f"ClusterQueue {cq.name} (no cohort)")
    console.print(tree)
    for line in _topology_and_checks(config):
        console.print(line, highlight=False, markup=False)
    for problem in config.problems():
        console.print(f"[yellow]warning:[/yellow] {problem}", highlight=False)
    console.print(
        f"valid: {len(config.flavors) + len(config.unresolved_flavors)} flavors, {len(config.cohorts)} cohorts, "
        f"{len(config.cluster_queues)} ClusterQueues, {len(config.local_queues)} LocalQueues, "
        f"{len(config.priority_classes)} priority classes, {len(config.topologies)} topologies, "
        f"{len(config.admission_checks)} admission checks"
    )


def _topology_and_checks(config: QueueConfig) -> list[str]:
    """What gangq does with the configuration's Topologies, flavors' ``topologyName`` and
    ClusterQueues' admission checks, one line each."""
    out = []
    for topo in config.topologies.values():
        out.append(f"Topology {topo.name}: levels {' > '.join(topo.levels)}")
    for flavor in config.flavors.values():
        if flavor.topology is not None:
            out.append(
                f"ResourceFlavor {flavor.name}: spec.topologyName {flavor.topology.name}: its nodes are grouped in "
                f"domains of levels {', '.join(flavor.topology.levels)}; pod sets' topology requests "
                f"(podset-*-topology annotations) are placed in them (see docs/engine.md, Topology)"
            )
    for name, topology in config.unresolved_flavors.items():
        out.append(f"ResourceFlavor {name}: spec.topologyName {topology}: no such Topology: the flavor is left out "
                   f"until it exists, and the ClusterQueues using it are inactive (TopologyNotFound)")
    for check in config.admission_checks.values():
        out.append(f"AdmissionCheck {check.name}: controllerName {check.controller_name}: accepted, not run "
                   f"(gangq runs no admission-check controller)")
    for cq in config.cluster_queues.values():
        inactive = config.inactive(cq.name)
        if inactive is not None:
            out.append(f"ClusterQueue {cq.name}: inactive, reason {inactive[0]}: admits nothing while it names "
                       f"admission checks")
    return out


if __name__ == "__main__":
    app()
