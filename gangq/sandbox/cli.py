"""`gangq sandbox ...`: the typer app the main CLI mounts (`app.add_typer(sandbox_app, name="sandbox")`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gangq.quickstart import ControlPlaneKind

__all__ = ["sandbox_app"]

sandbox_app = typer.Typer(help="The local Kubernetes API emulator with simulated nodes.", no_args_is_help=True)


@sandbox_app.callback()
def _main() -> None:
    """The local Kubernetes API emulator with simulated nodes, scheduler, Job controller and kubelet."""


@sandbox_app.command("up")
def up_command(
    port: Annotated[int, typer.Option("--port", help="TCP port for the Kubernetes API (0: any free port).")] = 6443,
    kubeconfig_out: Annotated[
        Path | None,
        typer.Option("--kubeconfig-out", help="Where to write the kubeconfig [default: ~/.kube/gangq-sandbox.yaml]."),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option("--nodes", help="Node spec, e.g. '4x{cpu:64,memory:512Gi,nvidia.com/gpu:8}' (docs/sandbox.md)."),
    ] = None,
    state_file: Annotated[
        Path | None, typer.Option("--state-file", help="Load state from this file on start, save it on exit.")
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    cluster: Annotated[
        bool, typer.Option("--cluster/--no-cluster", help="Run the simulated nodes and controllers.")
    ] = True,
    bookmark_interval: Annotated[
        float, typer.Option("--bookmark-interval", help="Seconds between watch BOOKMARKs.")
    ] = 30.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO level.")] = False,
    control_plane: Annotated[
        ControlPlaneKind,
        typer.Option(
            "--control-plane",
            help="emulated: gangq's API emulator; real: etcd, kube-apiserver, kube-controller-manager, "
            "kube-scheduler and kwok built from their Go modules (docs/control-plane.md).",
        ),
    ] = ControlPlaneKind.emulated,
) -> None:
    """Run the sandbox in the foreground until Ctrl-C."""
    from gangq.controlplane.nodespec import NodeSpecError
    from gangq.gc_tuning import tune_gc
    from gangq.sandbox.runtime import up

    if control_plane is ControlPlaneKind.real:
        _up_real(port, kubeconfig_out, nodes, state_file, host, cluster, verbose)
        return

    # The store keeps every object (and its JSON text) for the server's lifetime: with CPython's
    # default thresholds the cyclic GC keeps re-scanning that heap. The controller's thresholds
    # (gangq.gc_tuning) keep young collections frequent and make full ones rare.
    tune_gc()

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    console = Console()
    try:
        up(port, kubeconfig_out, nodes, state_file, host=host, cluster=cluster,
           bookmark_interval=bookmark_interval, announce=lambda line: console.print(line, highlight=False,
                                                                                    soft_wrap=True))
    except NodeSpecError as e:
        console.print(f"[red]error:[/red] --nodes: {e}")
        raise typer.Exit(2) from None
    except OSError as e:
        console.print(f"[red]error:[/red] cannot serve on {host}:{port}: {e}")
        raise typer.Exit(1) from None


def _up_real(
    port: int, kubeconfig_out: Path | None, nodes: str | None, state_file: Path | None, host: str, cluster: bool,
    verbose: bool,
) -> None:
    """``--control-plane real``: the same options where they apply; the others are refused."""
    from gangq.controlplane.launcher import ControlPlaneError
    from gangq.controlplane.nodespec import NodeSpecError, parse_node_spec
    from gangq.controlplane.runtime import serve

    console = Console()
    refused = [flag for flag, given in (("--state-file", state_file is not None), ("--no-cluster", not cluster),
                                         ("--host", host != "127.0.0.1")) if given]
    if refused:
        console.print(f"[red]error:[/red] {', '.join(refused)}: not with --control-plane real (loopback only)")
        raise typer.Exit(2)
    if nodes is not None:
        try:
            parse_node_spec(nodes)
        except NodeSpecError as e:
            console.print(f"[red]error:[/red] --nodes: {e}")
            raise typer.Exit(2) from None
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    kubeconfig = kubeconfig_out or Path.home() / ".kube" / "gangq-sandbox.yaml"
    try:
        serve(port=port, kubeconfig_out=kubeconfig, nodes=nodes,
              announce=lambda line: console.print(line, highlight=False, soft_wrap=True))
    except ControlPlaneError as e:
        console.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(1) from None


if __name__ == "__main__":
    sandbox_app()
