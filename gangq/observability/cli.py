"""``gangq queue``: the pending workloads of a queue, in order, from the pending-workloads API; with
no queue named, every ClusterQueue and LocalQueue the user can see, from the Kubernetes API (as
``kueuectl list`` does).

The API is called with the caller's own kubeconfig credentials: through the Kubernetes API server
(``/apis/visibility.gangq.io/...``, the install's APIService) by default, or, with ``--url``,
directly on the controller's visibility port over HTTPS with the kubeconfig's bearer token. When
the API server does not serve the group (no APIService: the emulated sandbox of ``gangq run``),
it is called directly on the quick start's port, trusting the CA the quick start wrote beside its
kubeconfig.

Registered in ``gangq/cli.py`` as ``app.command()(queue)``.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, cast

import typer
from rich.console import Console
from rich.table import Table

from gangq.api.meta import Meta, conditions, find_condition
from gangq.observability.http import PREFIX
from gangq.observability.kubeconfig import list_kube_config_contexts, load_incluster_config, load_kube_config

QUICKSTART_URL = "https://127.0.0.1:8443"
"""Where the quick start serves the API (``gangq run`` with the sandbox, gangq.operator.visibility)."""


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


def pending_path(cluster_queue: str | None, namespace: str | None, limit: int, offset: int) -> str:
    """The API path (and query) of a queue's pending workloads: ``cluster_queue`` names the
    LocalQueue when ``namespace`` is given."""
    quote = urllib.parse.quote
    if namespace is not None:
        path = f"/namespaces/{quote(namespace, safe='')}/localqueues/{quote(cluster_queue or '', safe='')}"
    else:
        path = f"/clusterqueues/{quote(cluster_queue or '', safe='')}"
    return f"{PREFIX}{path}/pendingworkloads?{urllib.parse.urlencode({'limit': limit, 'offset': offset})}"


def pending_url(server: str, cluster_queue: str | None, namespace: str | None, limit: int, offset: int) -> str:
    return server.rstrip("/") + pending_path(cluster_queue, namespace, limit, offset)


def _message(body: bytes | str | None, fallback: str) -> str:
    try:
        return str(json.loads(body or b"").get("message") or fallback)
    except (ValueError, AttributeError):
        return fallback


def fetch(url: str, token: str | None = None, cafile: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
    """GET a pending-workloads page directly from the controller (``token``: the bearer token sent;
    ``cafile``: the CA its HTTPS certificate is checked against, else the system's); raise
    ``RuntimeError`` with the server's message on failure."""
    request = urllib.request.Request(url)
    if token:
        if not url.startswith("https://"):
            raise RuntimeError(f"{url.split('/apis/')[0]}: refusing to send credentials over plain HTTP; use https://")
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=cafile) if url.startswith("https://") else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"{err.code}: {_message(err.read(), str(err.reason))}") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise RuntimeError(f"cannot reach the gangq controller at {url.split('/apis/')[0]}: {reason}") from None


class Kube:
    """The caller's kubeconfig: its API server, credentials and file."""

    def __init__(self, kubeconfig: str | None) -> None:
        from kubernetes import client, config

        self.path: Path | None = None
        configuration = client.Configuration()
        try:
            load_kube_config(config_file=kubeconfig or _kubeconfig_path(), client_configuration=configuration)
            self.path = Path(kubeconfig or _kubeconfig_path())
        except (config.ConfigException, OSError, TypeError):
            try:
                configuration = client.Configuration()
                load_incluster_config(client_configuration=configuration)
            except config.ConfigException as err:
                raise RuntimeError(f"no cluster configured ({err}); pass --kubeconfig or set KUBECONFIG") from None
        self.configuration = configuration

    @property
    def token(self) -> str | None:
        """The kubeconfig's bearer token (refreshed first when it comes from a plugin), if any."""
        configuration = self.configuration
        if callable(configuration.refresh_api_key_hook):
            configuration.refresh_api_key_hook(configuration)
        keys = configuration.api_key
        auth = keys.get("BearerToken") or keys.get("authorization") or ""
        scheme, _, token = str(auth).partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else None

    def get(self, path: str) -> tuple[int, bytes]:
        """GET ``path`` from the API server with the caller's credentials (its bearer token, or its
        client certificate): (status, body)."""
        c = self.configuration
        url = c.host.rstrip("/") + path
        context: ssl.SSLContext | None = None
        if url.startswith("https://"):
            context = ssl.create_default_context(cafile=c.ssl_ca_cert or None)
            if not c.verify_ssl:  # the kubeconfig's insecure-skip-tls-verify
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if c.cert_file and c.key_file:
                context.load_cert_chain(c.cert_file, c.key_file)
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        token = self.token
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as resp:
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as err:
            return int(err.code), bytes(err.read() or b"")
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise RuntimeError(f"cannot reach the API server at {c.host}: {reason}") from None


def _kubeconfig_path() -> str:
    import os

    value = os.environ.get("KUBECONFIG", "")
    first = next((p for p in value.split(os.pathsep) if p), "")
    return first or str(Path.home() / ".kube" / "config")


def quickstart_ca(kube: Kube) -> str | None:
    """The CA the quick start wrote beside this kubeconfig for its visibility API, if any."""
    if kube.path is None:
        return None
    ca = kube.path.with_name(f"{kube.path.stem}-visibility") / "ca.crt"
    return str(ca) if ca.exists() else None


def fetch_page(kubeconfig: str | None, url: str | None, cafile: str | None, name: str, namespace: str | None,
               limit: int, offset: int) -> dict[str, Any]:
    """A page of a queue's pending workloads, with the caller's credentials (see the module
    docstring); ``RuntimeError`` with the server's message on failure."""
    kube = Kube(kubeconfig)
    path = pending_path(name, namespace, limit, offset)
    if url is not None:
        return fetch(url.rstrip("/") + path, kube.token, cafile or quickstart_ca(kube))
    status, body = kube.get(path)
    if status == 200:
        data: dict[str, Any] = json.loads(body)
        return data
    if status == 404 and kube.get(PREFIX)[0] == 404:  # the API server does not serve the group
        return fetch(QUICKSTART_URL + path, kube.token, cafile or quickstart_ca(kube))
    if status == 503:
        raise RuntimeError(f"503: {_message(body, 'service unavailable')} (the API server could not reach gangq's "
                           "visibility API: is the controller running? kubectl get apiservice "
                           "v1alpha1.visibility.gangq.io)")
    raise RuntimeError(f"{status}: {_message(body, 'the request failed')}")


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
    table.add_column("runs", justify="right")
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
        runtime = item.get("expectedRuntimeSeconds")
        runs = "?" if runtime is None else format_wait(runtime) + (
            " (learned)" if item.get("expectedRuntimeSource") == "learned" else "")
        row += [str(item["priority"]), format_wait(item["waitSeconds"]), runs, item["reason"], item["message"]]
        table.add_row(*row)
    console.print(table)
    shown = len(items)
    offset = page.get("offset", 0)
    if shown and offset + shown < total:
        console.print(f"showing {offset + 1}–{offset + shown} of {total}; next page: --offset {offset + shown}")
    elif not shown:
        console.print("nothing pending" if not total else f"no items at offset {offset} (of {total})")


def _condition(obj: dict[str, Any], kind: str = "Active") -> str:
    """The ``kind`` condition of ``obj`` for a table: ``True``, ``STATUS (REASON)``, or ``?`` when absent."""
    cond = find_condition(conditions(obj), kind)
    if cond is None:
        return "?"
    return "True" if cond.get("status") == "True" else f"{cond.get('status')} ({cond.get('reason', '')})"


Objects = list[dict[str, Any]]


def list_queues(kubeconfig: str | None, namespace: str | None) -> tuple[Objects, Objects, str]:
    """ClusterQueues and LocalQueues the user may list (all namespaces, else ``namespace`` or the
    kubeconfig's), and a note on what could not be listed."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    def items(listing: object) -> Objects:  # a list's JSON body, which the client types as object
        return cast(Objects, cast(dict[str, Any], listing)["items"])

    try:
        load_kube_config(config_file=kubeconfig)
    except config.ConfigException:
        try:
            load_incluster_config()
        except config.ConfigException as err:
            raise RuntimeError(f"no cluster configured ({err}); pass --kubeconfig or set KUBECONFIG") from None
    api = client.CustomObjectsApi()
    note = ""
    try:
        cqs = items(api.list_cluster_custom_object("gangq.io", "v1alpha1", "clusterqueues"))
    except ApiException as err:
        cqs, note = [], f"ClusterQueues: {err.status} {err.reason}"
    try:
        if namespace is None:
            lqs = items(api.list_cluster_custom_object("gangq.io", "v1alpha1", "localqueues"))
        else:
            lqs = items(api.list_namespaced_custom_object("gangq.io", "v1alpha1", namespace, "localqueues"))
    except ApiException as err:
        if namespace is not None or err.status != 403:
            raise RuntimeError(f"cannot list LocalQueues: {err.status} {err.reason}") from None
        _, context = list_kube_config_contexts(config_file=kubeconfig)
        own = (context or {}).get("context", {}).get("namespace", "default")
        lqs = items(api.list_namespaced_custom_object("gangq.io", "v1alpha1", own, "localqueues"))
        note = (note + "; " if note else "") + f"LocalQueues of namespace {own} only (not allowed to list all)"
    return cqs, lqs, note


def render_queues(cqs: Objects, lqs: Objects, note: str, console: Console) -> None:
    if cqs:
        table = Table(title="ClusterQueues", title_justify="left")
        for column in ("name", "cohort", "pending", "admitted", "GPU", "active"):
            table.add_column(column, justify="right" if column in ("pending", "admitted") else "left")
        for cq in sorted(cqs, key=lambda o: Meta(o).name):
            st = cq.get("status") or {}
            table.add_row(Meta(cq).name, (cq.get("spec") or {}).get("cohort") or "-",
                          str(st.get("pendingWorkloads", 0)), str(st.get("admittedWorkloads", 0)),
                          st.get("gpu") or "-", _condition(cq))
        console.print(table)
    if lqs:
        table = Table(title="LocalQueues", title_justify="left")
        for column in ("namespace", "name", "ClusterQueue", "pending", "admitted", "active"):
            table.add_column(column, justify="right" if column in ("pending", "admitted") else "left")
        for lq in sorted(lqs, key=lambda o: (Meta(o).namespace, Meta(o).name)):
            st = lq.get("status") or {}
            meta = Meta(lq)
            table.add_row(meta.namespace, meta.name,
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
    url: str | None = typer.Option(
        None,
        "--url",
        "--server",
        envvar="GANGQ_SERVER",
        help="Call the controller's visibility port directly (HTTPS, with the kubeconfig's bearer token), e.g. "
        "https://127.0.0.1:8443 after `kubectl -n gangq-system port-forward svc/gangq-visibility 8443:443`; "
        "default: through the Kubernetes API server (the APIService v1alpha1.visibility.gangq.io)",
    ),
    certificate_authority: str | None = typer.Option(
        None, "--certificate-authority", help="With --url: the CA file to check the controller's certificate with "
        "(default: the system's; the quick start's CA beside its kubeconfig when it answers)",
    ),
    limit: int = typer.Option(50, "--limit", min=1, max=10_000, help="Rows to show"),
    offset: int = typer.Option(0, "--offset", min=0, help="Rows to skip"),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
    kubeconfig: str | None = typer.Option(
        None, "--kubeconfig", help="Your kubeconfig: the cluster and the credentials to call it with (default: "
        "$KUBECONFIG, ~/.kube/config)"
    ),
) -> None:
    """Pending workloads of a queue in admission order: position, priority, wait so far and why.
    With no queue named: every ClusterQueue and LocalQueue you can see, with their counts.

    Needs `get` on localqueues/pendingworkloads (a LocalQueue) or clusterqueues/pendingworkloads (a
    ClusterQueue) of group visibility.gangq.io: the install's ClusterRoles gangq-pending-workloads-reader
    and gangq-cluster-pending-workloads-reader."""
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
        page = fetch_page(kubeconfig, url, certificate_authority, name, namespace, limit, offset)
    except RuntimeError as err:
        Console(stderr=True).print(f"[red]error:[/red] {err}")
        raise typer.Exit(1) from None
    if output == "json":
        console.print_json(data=page)
    else:
        render(page, console)
