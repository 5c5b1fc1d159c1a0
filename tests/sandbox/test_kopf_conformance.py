"""kopf (the operator framework gangq uses) runs a small operator against the sandbox without stalls.

kopf waits, after each of its own patches, until the patched resourceVersion comes back through its
watch (or a 5 s consistency timeout passes). A server whose watch events do not carry each write's
resourceVersion makes every handler step take 5 s; the latency bounds below catch that.
"""

from __future__ import annotations

import logging
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kopf.testing import KopfRunner

from gangq.sandbox.runtime import Sandbox

GROUP, VERSION, PLURAL = "example.com", "v1", "gizmos"

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "gizmo", "kind": "Gizmo"},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}

OPERATOR = textwrap.dedent("""
    import asyncio
    import kopf

    @kopf.on.login()
    def login(**kwargs):
        return kopf.login_with_kubeconfig(**kwargs)  # reads $KUBECONFIG now, not at import time

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_):
        settings.persistence.finalizer = "example.com/gizmo-finalizer"
        settings.posting.level = 20
        settings.watching.server_timeout = 30

    @kopf.on.create("example.com", "v1", "gizmos")
    def on_create(body, spec, **_):
        kopf.info(body, reason="Built", message=f"built a gizmo of size {spec.get('size')}")
        return {"size": spec.get("size")}

    @kopf.on.update("example.com", "v1", "gizmos", field="spec.size")
    def on_update(new, patch, **_):
        patch.status["resized"] = new

    @kopf.on.delete("example.com", "v1", "gizmos")
    def on_delete(body, **_):
        kopf.info(body, reason="Scrapped", message="scrapping the gizmo")

    @kopf.daemon("example.com", "v1", "gizmos", cancellation_timeout=2)
    async def heartbeat(stopped, body, **_):
        kopf.info(body, reason="Heartbeat", message="the daemon is running")
        while not stopped:
            await asyncio.sleep(0.1)
""")


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> float:
    """Poll until cond() is truthy; return the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(autouse=True)
def _kopf_logs_at_info() -> Iterator[None]:
    """The assertions read kopf's INFO lines; another test in the process (``gangq run`` through
    typer's CliRunner) may have raised the kopf logger's level."""
    logger = logging.getLogger("kopf")
    level = logger.level
    logger.setLevel(logging.NOTSET)
    yield
    logger.setLevel(level)


def test_kopf_operator_handlers_finalizers_status_events_daemon(
    sandbox_factory: Callable[..., Sandbox], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sb = sandbox_factory(cluster=False)
    store = sb.store
    monkeypatch.setenv("KUBECONFIG", str(sb.kubeconfig))
    sb.call(store.create, "apiextensions.k8s.io", "customresourcedefinitions", CRD)
    op = tmp_path / "operator.py"
    op.write_text(OPERATOR)

    def gizmo() -> dict[str, Any] | None:
        try:
            return sb.call(store.get, GROUP, PLURAL, "default", "g1")
        except Exception:
            return None

    def events(reason: str) -> list[dict[str, Any]]:
        lst = sb.call(store.list, "", "events", "default", field_selector=f"reason={reason}")
        return [e for e in lst["items"] if e["involvedObject"]["name"] == "g1"]

    timings: dict[str, float] = {}
    with KopfRunner(["run", "--standalone", "--verbose", "--all-namespaces", str(op)], timeout=60) as runner:
        time.sleep(1.0)  # let kopf list + start watching
        sb.call(store.create, GROUP, PLURAL, {"metadata": {"name": "g1"}, "spec": {"size": 1}}, namespace="default")
        took = wait_for(
            lambda: ((gizmo() or {}).get("status") or {}).get("on_create") == {"size": 1},
            10,
            "the create handler's result in status",
        )
        timings["create"] = took
        assert took < 3.0, f"create handler took {took:.1f}s (a consistency stall?)"
        g = gizmo()
        assert g is not None
        assert "example.com/gizmo-finalizer" in g["metadata"]["finalizers"]
        wait_for(lambda: events("Heartbeat"), 5, "the daemon's event")
        wait_for(lambda: events("Built"), 5, "the Built event")

        sb.call(store.patch, GROUP, PLURAL, "default", "g1", {"spec": {"size": 2}}, "merge")
        took = wait_for(lambda: ((gizmo() or {}).get("status") or {}).get("resized") == 2, 10, "the update handler")
        timings["update"] = took
        assert took < 3.0, f"update handler took {took:.1f}s (a consistency stall?)"

        sb.call(store.delete, GROUP, PLURAL, "default", "g1")
        took = wait_for(lambda: gizmo() is None, 10, "kopf to release its finalizer")
        timings["delete"] = took
        assert took < 3.5, f"deletion took {took:.1f}s (a consistency stall?)"
        assert events("Scrapped")
    print("kopf handler latencies (s):", {k: round(v, 3) for k, v in timings.items()})
    assert runner.exception is None
    assert "Handler 'on_create' succeeded" in runner.output
    assert "Handler 'on_delete' succeeded" in runner.output
