"""Count API writes from kube-apiserver's audit log, attributed by user agent.

The benchmarks that compare controllers (``benchmarks/kueue_baseline_e2e.py``,
``benchmarks/vs_kueue.py``) start kube-apiserver with :data:`WRITES_POLICY`: every
create/update/patch/delete at Metadata level (one ``ResponseComplete`` event per request, the
object's resource and subresource, the user and its user agent; no bodies), nothing else. A
write belongs to a program by the product name of its user agent (``minimalkueue/v0.0.0
(linux/amd64) kubernetes/$Format`` → ``minimalkueue``; ``kopf/1.38`` → ``kopf``): the runners
of both benchmarks and the control plane's own components have their own names, so their writes
are left out by naming only the controller's agents.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
WRITES_POLICY: list[dict[str, Any]] = [
    {"level": "Metadata", "verbs": list(WRITE_VERBS), "omitStages": ["RequestReceived"]},
    {"level": "None"},
]
"""Audit policy rules: Metadata level for the write verbs, nothing for the rest."""


def agent_name(user_agent: str) -> str:
    """The product name of a user agent: what comes before its first ``/`` or space."""
    head = user_agent.strip().split(" ", 1)[0]
    return head.split("/", 1)[0] or "?"


def resource_key(event: dict[str, Any]) -> str:
    """``verb resource[.group][/subresource]`` of an audit event, e.g.
    ``patch workloads.kueue.x-k8s.io/status``."""
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", "?") + (f".{ref['apiGroup']}" if ref.get("apiGroup") else "")
    resource += f"/{ref['subresource']}" if ref.get("subresource") else ""
    return f"{event.get('verb', '?')} {resource}"


@dataclass
class WriteCounter:
    """Successful writes per user agent and resource, read incrementally from an audit log (the
    log only grows: each :meth:`read` parses only the lines added since the last one)."""

    path: Path | None
    writes: dict[str, Counter[str]] = field(default_factory=dict)  # agent -> "verb resource" -> count
    failed: Counter[str] = field(default_factory=Counter)  # agent -> requests answered >= 400
    _position: int = 0

    def feed(self, event: dict[str, Any]) -> None:
        if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITE_VERBS:
            return
        agent = agent_name(str(event.get("userAgent", "")))
        code = int((event.get("responseStatus") or {}).get("code", 0))
        if code >= 400:
            self.failed[agent] += 1
        if code >= 300 or code == 0:
            return
        self.writes.setdefault(agent, Counter())[resource_key(event)] += 1

    def read(self) -> WriteCounter:
        if self.path is None or not self.path.exists():
            return self
        with self.path.open("rb") as f:
            f.seek(self._position)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # a line being written stays for the next read
        self._position += end
        for line in chunk[:end].splitlines():
            if line.strip():
                self.feed(json.loads(line))
        return self

    def reset(self) -> None:
        """Forget what was counted so far (the log's earlier lines stay read)."""
        self.read()
        self.writes.clear()
        self.failed.clear()

    def by_resource(self, agents: tuple[str, ...] | set[str] | frozenset[str]) -> dict[str, int]:
        """The writes of ``agents`` together, per ``verb resource``, sorted."""
        total: Counter[str] = Counter()
        for agent in agents:
            total.update(self.writes.get(agent, Counter()))
        return dict(sorted(total.items()))

    def total(self, agents: tuple[str, ...] | set[str] | frozenset[str]) -> int:
        return sum(self.by_resource(agents).values())

    def per_agent(self) -> dict[str, int]:
        """Every agent's successful writes (the runners' and the control plane's too)."""
        return {agent: sum(c.values()) for agent, c in sorted(self.writes.items())}
