"""``gangq queue``: the pending workloads of a queue, in order, from the controller's HTTP API.

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


def queue(
    name: str = typer.Argument(..., help="ClusterQueue name, or with -n the LocalQueue name"),
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
) -> None:
    """Pending workloads of a queue in admission order: position, priority, wait so far and why."""
    if output not in ("table", "json"):
        raise typer.BadParameter(f"--output must be table or json, not {output!r}", param_hint="--output")
    console = Console()
    try:
        page = fetch(pending_url(server, name, namespace, limit, offset))
    except RuntimeError as err:
        Console(stderr=True).print(f"[red]error:[/red] {err}")
        raise typer.Exit(1) from None
    if output == "json":
        console.print_json(data=page)
    else:
        render(page, console)
