"""gangq's embedded JobSet reconciler held to the upstream JobSet controller (sigs.k8s.io/jobset, the
version ``hack/upstream/jobset`` pins), on the session's real control plane.

Every case of ``cases.py`` runs twice on the same API server: first in a fresh namespace under the
upstream controller manager (built from the pin, run out of cluster with its webhooks off, see
``manager.py``), then, that manager stopped, in another fresh namespace under gangq's embedded
reconciler (``gangq.operator.jobset.register`` under kopf, as the install's ServiceAccount). The
normalised child Jobs, Services, JobSet status and Events of the two runs must be equal except
where ``differences.py`` lists a deliberate difference, and each listed difference must still show.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC
from tests.clusters import RealCluster
from tests.jobset.conftest import OPERATOR

from .cases import CASES
from .differences import DIFFERENCES
from .harness import Outcome, run_cases, stale_cache_retry
from .manager import upstream_jobset_controller

NS_UPSTREAM, NS_EMBEDDED = "jobset-diff-upstream", "jobset-diff-embedded"

# The embedded reconciler alone under kopf (run in one namespace; the upstream run's is left to it).


@pytest.fixture(scope="module")
def outcomes(real_cluster: RealCluster, jobset_manager: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Outcome]]]:
    from kopf.testing import KopfRunner

    real_cluster.reset(DEFAULT_NODE_SPEC)
    workdir = tmp_path_factory.mktemp("jobset-differential")
    with upstream_jobset_controller(real_cluster.cp, jobset_manager, workdir / "upstream") as log:
        upstream_run = run_cases(real_cluster, NS_UPSTREAM, CASES)
    upstream_log = log.read_text()
    op = workdir / "embedded_operator.py"
    op.write_text(OPERATOR)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(real_cluster.controller_kubeconfig))
        with KopfRunner(["run", "--standalone", "--namespace", NS_EMBEDDED, str(op)], timeout=60) as runner:
            embedded_run = run_cases(real_cluster, NS_EMBEDDED, CASES)
    assert runner.exception is None, runner.output
    assert "Traceback" not in runner.output, runner.output
    assert "panic" not in upstream_log, upstream_log[-3000:]
    yield {"upstream": upstream_run, "embedded": embedded_run}
    real_cluster.reset(DEFAULT_NODE_SPEC)


def _keyed(snapshot: dict[str, Any]) -> dict[str, Any]:
    """Children keyed by name (their order in a list answer means nothing)."""
    out = dict(snapshot)
    for key in ("jobs", "services"):
        if key in out:
            out[key] = {o["metadata"]["name"]: o for o in out[key]}
    return out


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    """The paths at which ``a`` and ``b`` differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                out.append(f"{sub}: {json.dumps(a.get(key))[:300]} != {json.dumps(b.get(key))[:300]}")
            else:
                out += diff(a[key], b[key], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:300]} != {json.dumps(b)[:300]}"]


def differences(upstream_out: Outcome, embedded_out: Outcome) -> list[str]:
    """``<snapshot>.<path>: <upstream value> != <embedded value>`` for every difference."""
    labels = sorted(set(upstream_out.snapshots) | set(embedded_out.snapshots))
    out = []
    for label in labels:
        a, b = upstream_out.snapshots.get(label), embedded_out.snapshots.get(label)
        out += diff(_keyed(a) if a else a, _keyed(b) if b else b, label)
    return out


@pytest.mark.parametrize("case", [c.name for c in CASES])
def test_embedded_reconciler_does_what_upstream_does(case: str, outcomes: dict[str, dict[str, Outcome]]) -> None:
    up, emb = outcomes["upstream"][case], outcomes["embedded"][case]
    assert up.error is None, f"under upstream: {up.error}"
    assert emb.error is None, f"under gangq: {emb.error}"
    found = differences(up, emb)
    if os.environ.get("JOBSET_DIFF_DUMP"):
        Path(os.environ["JOBSET_DIFF_DUMP"]).mkdir(parents=True, exist_ok=True)
        (Path(os.environ["JOBSET_DIFF_DUMP"]) / f"{case}.json").write_text(json.dumps(
            {"upstream": up.snapshots, "embedded": emb.snapshots, "differences": found}, indent=1))
    listed = [d for d in DIFFERENCES if d.applies_to(case)]
    unexplained = [f for f in found if not any(d.covers(f.split(":", 1)[0]) for d in listed)]
    assert not unexplained, "divergences from upstream:\n" + "\n".join(unexplained)
    gone = [d.key for d in listed if not any(d.covers(f.split(":", 1)[0]) for f in found)]
    assert not gone, f"listed differences that no longer show (remove them from differences.py): {gone}"


def test_every_case_is_fully_specified() -> None:
    """The webhooks are off, so each case must be what upstream's defaulting would have stored:
    gangq's defaults (the same as upstream's webhook and CRD) change nothing."""
    from gangq.api.jobset import dump, with_defaults

    for case in CASES:
        spec = case.obj["spec"]
        assert dump(with_defaults(case.obj))["spec"] == spec, case.name


def test_every_listed_difference_names_a_case() -> None:
    names = [c.name for c in CASES]
    for d in DIFFERENCES:
        assert any(d.applies_to(n) for n in names), d.key


def test_only_creates_of_jobs_that_exist_count_as_a_stale_cache_retry() -> None:
    def event(message: str, reason: str = "JobCreationFailed") -> dict[str, Any]:
        return {"reason": reason, "message": message}

    conflict = 'job "js-w-0" creation failed with error: jobs.batch "js-w-0" already exists'
    deleting = 'job "js-w-1" creation failed with error: object is being deleted: jobs.batch "js-w-1" already exists'
    refused = 'job "js-w-2" creation failed with error: jobs.batch "js-w-2" is forbidden: exceeded quota'
    assert stale_cache_retry(event(conflict))
    assert stale_cache_retry(event(conflict + "\n" + deleting))
    assert not stale_cache_retry(event(conflict + "\n" + refused)), "a real failure among the conflicts counts"
    assert not stale_cache_retry(event(refused))
    assert not stale_cache_retry(event(conflict, reason="ReachedMaxRestarts"))
    assert not stale_cache_retry(event(""))
