"""``gangq queue`` against the emulated sandbox, as after ``gangq run``: the sandbox serves no
APIService, so the API is called on the quick start's port, with the sandbox kubeconfig's token,
trusting the CA written beside that kubeconfig; the visibility server (gangq/operator/visibility.py)
checks the token with the sandbox's TokenReview and the access with its SubjectAccessReview."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gangq.observability import cli as queue_cli
from gangq.observability.http import engine_source
from gangq.operator import visibility
from gangq.operator.config import parse_config
from gangq.operator.kube import Credentials, KubeClient
from gangq.sandbox.runtime import Sandbox, free_port
from tests.observability.test_http import NOW, busy_engine, cli


@pytest.fixture
def served(sandbox_factory: Callable[..., Sandbox], monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    sb = sandbox_factory(cluster=False)
    port = free_port()
    monkeypatch.setattr(queue_cli, "QUICKSTART_URL", f"https://127.0.0.1:{port}")
    config = visibility.quickstart(parse_config({"visibility": {"port": port}}, "test"), sb.kubeconfig)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> tuple[visibility.VisibilityServer, KubeClient]:
        client = KubeClient(Credentials.load(sb.kubeconfig))
        server = await visibility.start_visibility(config, client)
        server.serve(engine_source(busy_engine(), clock=lambda: NOW))
        await asyncio.wait_for(server.ready.wait(), 10)
        return server, client

    server, client = asyncio.run_coroutine_threadsafe(start(), loop).result(20)
    yield sb

    async def stop() -> None:
        await server.stop()
        await client.close()

    asyncio.run_coroutine_threadsafe(stop(), loop).result(20)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_gangq_queue_reads_the_quick_starts_api_with_the_sandbox_token(served: Sandbox, tmp_path: Path) -> None:
    env = {"KUBECONFIG": str(served.kubeconfig), "COLUMNS": "200"}
    result = CliRunner().invoke(cli(), ["queue", "-n", "ns", "team2"], env=env)
    assert result.exit_code == 0, result.output
    assert "LocalQueue ns/team2: 2 pending" in result.output
    # another token is not the sandbox's user: its TokenReview refuses it
    other: dict[str, Any] = yaml.safe_load(served.kubeconfig.read_text())
    other["users"][0]["user"]["token"] = "not-the-sandbox-token"
    forged = tmp_path / "forged" / served.kubeconfig.name
    forged.parent.mkdir()
    forged.write_text(yaml.safe_dump(other))
    ca = served.kubeconfig.with_name(f"{served.kubeconfig.stem}-visibility") / "ca.crt"
    result = CliRunner().invoke(cli(), ["queue", "a", "--certificate-authority", str(ca)],
                                env={"KUBECONFIG": str(forged)})
    assert result.exit_code == 1 and "401" in result.output, result.output
