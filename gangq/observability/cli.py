"""``gangq queue``: the pending workloads of a queue, in order, from the controller's HTTP API;
with no queue named, every ClusterQueue and LocalQueue the user can see, from the Kubernetes API
(as ``kueuectl list`` does).

Registered in ``gangq/cli.py`` as ``app.command()(queue)``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from gangq.observability.http import PREFIX

DEFAULT_SERVER = "http://localhost:8080"


def format_wait(seconds: float) -> str:
    """``42s``, ``5m07s``, ``3h12m``, ``2d04h``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def pending_url(server: str, cluster_queue: str | None, namespace: str | None, limit: int, offset: int) -> str:
    base = server.rstrip("/") + PREFIX
    quote = urllib.parse.quote
    if namespace is not None:
        path = f"/namespaces/{quote(namespace, safe='')}/localqueues/{quote(cluster_queue or '', safe='')}"
    else:
        path = f"/clusterqueues/{quote(cluster_queue or '', safe='')}"
    return f"{base}{path}/pendingworkloads?{urllib.parse.urlencode({'limit': limit, 'offset': offset})}"


def fetch(url: str, timeout: float = 10.0) -> dict[str, Any]:
    """GET a pending-workloads page; raise ``RuntimeError`` with the server's message on failure."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except urllib.error.HTTPError as err:
        try:
            message = json.loads(err.read()).get("message", err.reason)
        except (ValueError, AttributeError):
            message = err.reason
        raise RuntimeError(f"{err.code}: {message}") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise RuntimeError(f"cannot reach the gangq controller at {url.split('/apis/')[0]}: {reason}") from None


def render(page: dict[str, Any], console: Console) -> None:
    """Print a page as a rich table (position, workload, priority, wait so far, reason)."""
    by_lq = "localQueue" in page
    title = f"LocalQueue {page['namespace']}/{page['localQueue']}" if by_lq else f"ClusterQueue {page['clusterQueue']}"
    items = page.get("items", [])
    total = page.get("total", len(items))
    table = Table(title=f"{title}: {total} pending", title_justify="left")
    table.add_column("#", justify="right")
    if by_lq:
        table.add_column("in CQ", justify="right")
    table.add_column("workload", overflow="fold")
    if not by_lq:
        table.add_column("local queue")
    table.add_column("priority", justify="right")
    table.add_column("waiting", justify="right")
    table.add_column("reason")
    table.add_column("message", overflow="fold")
    for item in items:
        position = item["positionInLocalQueue"] if by_lq else item["positionInClusterQueue"]
        row = [str(position)]
        if by_lq:
            row.append(str(item["positionInClusterQueue"]))
        row.append(f"{item['namespace']}/{item['name']}")
        if not by_lq:
            row.append(item["localQueueName"])
        row += [str(item["priority"]), format_wait(item["waitSeconds"]), item["reason"], item["message"]]
        table.add_row(*row)
    console.print(table)
    shown = len(items)
    offset = page.get("offset", 0)
    if shown and offset + shown < total:
        console.print(f"showing {offset + 1}–{offset + shown} of {total}; next page: --offset {offset + shown}")
    elif not shown:
        console.print("nothing pending" if not total else f"no items at offset {offset} (of {total})")


def _condition(obj: dict[str, Any], kind: str = "Active") -> str:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return f"{cond.get('status')} ({cond.get('reason', '')})" if cond.get("status") != "True" else "True"
    return "?"


Objects = list[dict[str, Any]]


def list_queues(kubeconfig: str | None, namespace: str | None) -> tuple[Objects, Objects, str]:
    """ClusterQueues and LocalQueues the user may list (all namespaces, else ``namespace`` or the
    kubeconfig's), and a note on what could not be listed."""
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    try:
        config.load_kube_config(config_file=kubeconfig)
    except config.ConfigException:
        try:
            config.load_incluster_config()
        except config.ConfigException as err:
            raise RuntimeError(f"no cluster configured ({err}); pass --kubeconfig or set KUBECONFIG") from None
    api = client.CustomObjectsApi()
    note = ""
    try:
        cqs = api.list_cluster_custom_object("gangq.io", "v1alpha1", "clusterqueues")["items"]
    except ApiException as err:
        cqs, note = [], f"ClusterQueues: {err.status} {err.reason}"
    try:
        if namespace is None:
            lqs = api.list_cluster_custom_object("gangq.io", "v1alpha1", "localqueues")["items"]
        else:
            lqs = api.list_namespaced_custom_object("gangq.io", "v1alpha1", namespace, "localqueues")["items"]
    except ApiException as err:
        if namespace is not None or err.status != 403:
            raise RuntimeError(f"cannot list LocalQueues: {err.status} {err.reason}") from None
        _, context = config.list_kube_config_contexts(config_file=kubeconfig)
        own = (context or {}).get("context", {}).get("namespace", "default")
        lqs = api.list_namespaced_custom_object("gangq.io", "v1alpha1", own, "localqueues")["items"]
        note = (note + "; " if note else "") + f"LocalQueues of namespace {own} only (not allowed to list all)"
    return cqs, lqs, note


def render_queues(cqs: Objects, lqs: Objects, note: str, console: Console) -> None:
    if cqs:
        table = Table(title="ClusterQueues", title_justify="left")
        for column in ("name", "cohort", "pending", "admitted", "GPU", "active"):
            table.add_column(column, justify="right" if column in ("pending", "admitted") else "left")
        for cq in sorted(cqs, key=lambda o: o["metadata"]["name"]):
            st = cq.get("status") or {}
            table.add_row(cq["metadata"]["name"], (cq.get("spec") or {}).get("cohort") or "-",
                          str(st.get("pendingWorkloads", 0)), str(st.get("admittedWorkloads", 0)),
                          st.get("gpu") or "-", _condition(cq))
        console.print(table)
    if lqs:
        table = Table(title="LocalQueues", title_justify="left")
        for column in ("namespace", "name", "ClusterQueue", "pending", "admitted", "active"):
            table.add_column(column, justify="right" if column in ("pending", "admitted") else "left")
        for lq in sorted(lqs, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])):
            st = lq.get("status") or {}
            table.add_row(lq["metadata"].get("namespace", ""), lq["metadata"]["name"],
                          (lq.get("spec") or {}).get("clusterQueue", ""), str(st.get("pendingWorkloads", 0)),
                          str(st.get("admittedWorkloads", 0)), _condition(lq))
        console.print(table)
    if not cqs and not lqs:
        console.print("no queues")
    if note:
        console.print(f"note: {note}")
    console.print("pending workloads of one queue, in order: gangq queue NAME (or -n NAMESPACE NAME)")


def queue(
    name: str | None = typer.Argument(
        None, help="ClusterQueue name, or with -n the LocalQueue name; none: list every queue you can see"
    ),
    namespace: str | None = typer.Option(
        None, "-n", "--namespace", help="List a LocalQueue of this namespace instead of a ClusterQueue"
    ),
    server: str = typer.Option(
        DEFAULT_SERVER,
        "--server",
        envvar="GANGQ_SERVER",
        help="The controller's HTTP endpoint, e.g. after `kubectl -n gangq-system port-forward svc/gangq-metrics 8080`",
    ),
    limit: int = typer.Option(50, "--limit", min=1, max=10_000, help="Rows to show"),
    offset: int = typer.Option(0, "--offset", min=0, help="Rows to skip"),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
    kubeconfig: str | None = typer.Option(
        None, "--kubeconfig", help="With no queue named: the cluster to list queues of (default: $KUBECONFIG)"
    ),
) -> None:
    """Pending workloads of a queue in admission order: position, priority, wait so far and why.
    With no queue named: every ClusterQueue and LocalQueue you can see, with their counts."""
    if output not in ("table", "json"):
        raise typer.BadParameter(f"--output must be table or json, not {output!r}", param_hint="--output")
    console = Console()
    if name is None:
        try:
            cqs, lqs, note = list_queues(kubeconfig, namespace)
        except RuntimeError as err:
            Console(stderr=True).print(f"[red]error:[/red] {err}")
            raise typer.Exit(1) from None
        if output == "json":
            console.print_json(data={"clusterQueues": cqs, "localQueues": lqs, "note": note})
        else:
            render_queues(cqs, lqs, note, console)
        return
    try:
        page = fetch(pending_url(server, name, namespace, limit, offset))
    except RuntimeError as err:
        Console(stderr=True).print(f"[red]error:[/red] {err}")
        raise typer.Exit(1) from None
    if output == "json":
        console.print_json(data=page)
    else:
        render(page, console)
