"""``gangq run``: the controller in the foreground, against a cluster or the embedded sandbox.

:func:`run` is registered on the main app (``gangq.cli``); ``python -m gangq.operator run ...``
runs the same command. Against a cluster it loads nothing of the lab (``gangq.sandbox``,
``gangq.controlplane``): those are imported only when a quick start starts one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import typer
from rich.console import Console

from gangq.core.errors import SpecError
from gangq.gc_tuning import tune_gc
from gangq.operator import visibility
from gangq.operator.config import OperatorConfig, load_config
from gangq.operator.install import (
    QUICKSTART,
    apply_objects,
    install_crds,
    load_yaml,
    quickstart_webhook,
    remove_webhook_configurations,
)
from gangq.operator.kube import Credentials, KubeClient
from gangq.operator.operator import ControllerCrashed, run_operator
from gangq.quickstart import ControlPlaneKind

if TYPE_CHECKING:
    from gangq.controlplane.launcher import ControlPlane

log = logging.getLogger(__name__)


class JobSetControllerMode(StrEnum):
    embedded = "embedded"
    external = "external"


def _cluster_configured(kubeconfig: Path | None) -> bool:
    """Whether a cluster is configured: ``--kubeconfig``, $KUBECONFIG (even naming a missing file:
    that is an error, not "no cluster"), ~/.kube/config, or a pod's service account."""
    if kubeconfig is not None or os.environ.get("KUBECONFIG"):
        return True
    if (Path.home() / ".kube" / "config").exists():
        return True
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _missing_kubeconfig() -> str | None:
    """$KUBECONFIG when it names no existing file. Starting the sandbox then would leave an admin
    believing the controller runs against their cluster."""
    value = os.environ.get("KUBECONFIG")
    if value and not any(Path(p).exists() for p in value.split(os.pathsep) if p):
        return value
    return None


async def _main(
    config: OperatorConfig,
    kubeconfig: Path | None,
    use_sandbox: bool,
    sandbox_port: int,
    sandbox_kubeconfig: Path,
    jobset_controller: JobSetControllerMode,
    console: Console,
    real: ControlPlane | None = None,
    webhook: bool = True,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    sandbox = None
    try:
        if real is not None:
            from gangq.controlplane import install, runtime
            from gangq.controlplane.pki import CONTROLLER_NAMESPACE

            kubeconfig = sandbox_kubeconfig
            embedded = jobset_controller is JobSetControllerMode.embedded
            await asyncio.to_thread(install.install, real, embedded_jobset=embedded)
            client = KubeClient(Credentials.load(kubeconfig))
            try:
                await apply_objects(client, load_yaml(QUICKSTART))
                if webhook:
                    config = await quickstart_webhook(client, config, _webhook_cert_dir(kubeconfig))
                else:
                    await remove_webhook_configurations(client)
            finally:
                await client.close()
            # The controller runs as the install's ServiceAccount, with exactly its RBAC, which
            # grants its leader Lease in the install's namespace (as deploy/base/config.yaml says).
            credentials = Credentials.load(runtime.controller_kubeconfig_path(kubeconfig))
            election = config.leader_election.model_copy(update={"namespace": CONTROLLER_NAMESPACE})
            config = config.model_copy(update={"leader_election": election})
            console.print(f"[bold green]gangq on a real control plane[/] at {real.url} ({real.server_version()})")
            console.print(f"  export KUBECONFIG={kubeconfig}", highlight=False)
            console.print("  kubectl apply -f examples/jobsets/hello-gang.yaml", highlight=False)
        elif use_sandbox:
            from gangq.sandbox.runtime import Sandbox

            # Its own thread and loop: kopf cancels every task created on its loop when it exits.
            kubeconfig = sandbox_kubeconfig
            sandbox = Sandbox(port=sandbox_port, kubeconfig=kubeconfig)
            await asyncio.to_thread(sandbox.start)
            credentials = Credentials.load(kubeconfig)
            client = KubeClient(credentials)
            try:
                await install_crds(client)
                await apply_objects(client, load_yaml(QUICKSTART))
                if webhook:
                    config = await quickstart_webhook(client, config, _webhook_cert_dir(kubeconfig))
                else:
                    await remove_webhook_configurations(client)
            finally:
                await client.close()
            console.print(f"[bold green]gangq sandbox[/] serving at {sandbox.url} (4 nodes × 8 nvidia.com/gpu)")
            console.print("Point kubectl at it and submit a JobSet:")
            console.print(f"  export KUBECONFIG={kubeconfig}", highlight=False)
            console.print("  kubectl apply -f examples/jobsets/hello-gang.yaml", highlight=False)
            console.print("  kubectl get jobsets,workloads -w     # queued → admitted → finished", highlight=False)
            console.print("  kubectl get clusterqueues             # usage and pending counts", highlight=False)
        else:
            credentials = Credentials.load(kubeconfig)
            console.print(f"gangq controller for {credentials.server}", highlight=False)
        await run_operator(credentials, config, jobset_controller=jobset_controller.value, stop=stop)
    finally:
        if sandbox is not None:
            await asyncio.to_thread(sandbox.stop)




def _webhook_cert_dir(kubeconfig: Path) -> Path:
    """Where the quick start keeps its webhook's serving certificate: beside its kubeconfig, one
    per sandbox, made anew at every start."""
    return kubeconfig.with_name(f"{kubeconfig.stem}-webhook")


def _server_options(cfg: OperatorConfig, section: Literal["webhook", "visibility"], port: int | None,
                    bind: str | None, cert_dir: Path | None, hosts: list[str] | None) -> OperatorConfig:
    """The ``--webhook-*`` or ``--visibility-*`` options over that ``section`` of the configuration
    file (both are HTTPS servers with the same four settings)."""
    current = getattr(cfg, section)
    update: dict[str, object] = {}
    if port is not None:
        update["port"] = port
    if bind is not None:
        update["bind"] = bind
    if cert_dir is not None:
        update["cert_dir"] = str(cert_dir)
    if hosts:
        update["hosts"] = [*current.hosts, *hosts]
    if not update:
        return cfg
    return cfg.model_copy(update={section: current.model_copy(update=update)})


def run(
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig", help="kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, in-cluster)"),  # noqa: B008, E501
    config: Path | None = typer.Option(None, "--config", help="operator configuration YAML (example: policies/operator-config.yaml)"),  # noqa: B008, E501
    sandbox: bool = typer.Option(False, "--sandbox", help="run the embedded sandbox cluster (default when no cluster is configured)"),  # noqa: E501
    sandbox_port: int = typer.Option(6443, "--sandbox-port", help="port of the sandbox API server"),
    kubeconfig_out: Path | None = typer.Option(None, "--kubeconfig-out", help="where to write the sandbox's kubeconfig (default ~/.kube/gangq-sandbox.yaml)"),  # noqa: B008, E501
    jobset_controller: JobSetControllerMode = typer.Option(JobSetControllerMode.embedded, "--jobset-controller", help="embedded: gangq runs JobSets itself; external: an upstream JobSet controller does"),  # noqa: B008, E501
    metrics_port: int | None = typer.Option(None, "--metrics-port", min=0, max=65535, help="serve /metrics, /healthz and /readyz here, plain HTTP (overrides metricsPort of --config; default 8080)"),  # noqa: E501
    metrics_bind: str | None = typer.Option(None, "--metrics-bind", help="address to serve --metrics-port on (overrides metricsBind of --config; default 127.0.0.1, loopback only; the Deployment sets 0.0.0.0)"),  # noqa: E501
    webhook_port: int | None = typer.Option(None, "--webhook-port", min=0, max=65535, help="serve the admission webhook (HTTPS /mutate, /validate) on this port, on every replica (overrides webhook.port of --config; default 0: off; the install's webhook component sets 9443)"),  # noqa: E501
    webhook_bind: str | None = typer.Option(None, "--webhook-bind", help="address to serve --webhook-port on (overrides webhook.bind; default 127.0.0.1, loopback only; the webhook component sets 0.0.0.0)"),  # noqa: E501
    webhook_cert_dir: Path | None = typer.Option(None, "--webhook-cert-dir", help="directory with tls.crt and tls.key (e.g. a mounted cert-manager Secret), reloaded when they change (default: gangq keeps a CA and certificate in the Secret webhook.secretName)"),  # noqa: B008, E501
    webhook_host: list[str] | None = typer.Option(None, "--webhook-host", help="extra DNS name or IP address of the generated webhook certificate (repeatable)"),  # noqa: B008, E501
    webhook: bool = typer.Option(True, "--webhook/--no-webhook", help="with the sandbox: serve the admission webhook on loopback and register it with the sandbox's API server, so labelled workloads are created suspended (default, as in every cluster install); --no-webhook leaves it off"),  # noqa: E501
    visibility_port: int | None = typer.Option(None, "--visibility-port", min=0, max=65535, help="serve the pending-workloads API (HTTPS, every request authenticated and authorized through the API server) on this port, on every replica (overrides visibility.port of --config; default 0: off, 8443 with the sandbox; the install sets 8443 and registers it as the APIService v1alpha1.visibility.gangq.io)"),  # noqa: E501
    visibility_bind: str | None = typer.Option(None, "--visibility-bind", help="address to serve --visibility-port on (overrides visibility.bind; default 127.0.0.1, loopback only; the install sets 0.0.0.0)"),  # noqa: E501
    visibility_cert_dir: Path | None = typer.Option(None, "--visibility-cert-dir", help="directory with tls.crt and tls.key for --visibility-port, reloaded when they change (default: gangq keeps a CA and certificate in the Secret visibility.secretName and writes the CA into the APIService's caBundle)"),  # noqa: B008, E501
    visibility_host: list[str] | None = typer.Option(None, "--visibility-host", help="extra DNS name or IP address of the generated visibility certificate (repeatable)"),  # noqa: B008, E501
    verbose: bool = typer.Option(False, "--verbose", "-v", help="debug logging"),
    control_plane: ControlPlaneKind = typer.Option(ControlPlaneKind.emulated, "--control-plane", help="with --sandbox: emulated (gangq's API emulator) or real (etcd, kube-apiserver, controller-manager, scheduler, kwok built from their Go modules)"),  # noqa: B008, E501
) -> None:
    """Run the gangq controller in the foreground (Ctrl-C stops it)."""
    tune_gc()
    console = Console(soft_wrap=True)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    try:
        cfg = load_config(config)
    except (SpecError, OSError) as err:
        console.print(f"[red]error:[/red] {err}", highlight=False)
        raise typer.Exit(1) from err
    if metrics_port is not None:
        cfg = cfg.model_copy(update={"metrics_port": metrics_port})
    if metrics_bind is not None:
        cfg = cfg.model_copy(update={"metrics_bind": metrics_bind})
    cfg = _server_options(cfg, "webhook", webhook_port, webhook_bind, webhook_cert_dir, webhook_host)
    cfg = _server_options(cfg, "visibility", visibility_port, visibility_bind, visibility_cert_dir, visibility_host)
    use_sandbox = sandbox or not _cluster_configured(kubeconfig)
    if not sandbox and kubeconfig is None and (missing := _missing_kubeconfig()) is not None:
        console.print(f"[red]error:[/red] $KUBECONFIG={missing}: no such file (to run the embedded sandbox "
                      "instead, pass --sandbox)", highlight=False)
        raise typer.Exit(1)
    if use_sandbox and not sandbox:
        console.print("no cluster configured (no --kubeconfig, $KUBECONFIG or ~/.kube/config, not in a pod): "
                      "starting the embedded sandbox", highlight=False)
    if control_plane is ControlPlaneKind.real and not sandbox:
        console.print("[red]error:[/red] --control-plane real goes with --sandbox", highlight=False)
        raise typer.Exit(2)
    if use_sandbox and kubeconfig is not None:
        console.print("[red]error:[/red] --sandbox and --kubeconfig exclude each other", highlight=False)
        raise typer.Exit(2)
    if kubeconfig is not None and not kubeconfig.exists():
        console.print(f"[red]error:[/red] --kubeconfig {kubeconfig}: no such file", highlight=False)
        raise typer.Exit(1)
    failures: tuple[type[Exception], ...] = (OSError, ControllerCrashed)
    if use_sandbox and control_plane is ControlPlaneKind.real:  # the lab only when a quick start runs it
        from gangq.controlplane.launcher import ControlPlaneError

        failures = (*failures, ControlPlaneError)

    sandbox_kubeconfig = kubeconfig_out or Path.home() / ".kube" / "gangq-sandbox.yaml"
    if use_sandbox:  # the pending-workloads API on loopback, for `gangq queue` (docs/sandbox.md)
        cfg = visibility.quickstart(cfg, sandbox_kubeconfig)
    real = None
    try:
        if use_sandbox and control_plane is ControlPlaneKind.real:
            # Started here, in the main thread, so that its processes die with gangq (see launcher).
            from gangq.controlplane import runtime

            real = runtime.start(port=sandbox_port, kubeconfig_out=sandbox_kubeconfig, nodes=None,
                                 announce=lambda line: console.print(line, highlight=False))
        asyncio.run(_main(cfg, kubeconfig, use_sandbox, sandbox_port, sandbox_kubeconfig, jobset_controller,
                          console, real, webhook))
    except failures as err:
        console.print(f"[red]error:[/red] {err}", highlight=False)
        raise typer.Exit(1) from err
    except KeyboardInterrupt:
        pass
    finally:
        if real is not None:
            real.stop()


app = typer.Typer(help="gangq controller (the same `run` as `gangq run`).", no_args_is_help=True)
app.command("run")(run)


@app.callback()
def _main_callback() -> None:
    """gangq controller."""
