"""Run the corpus on one API server: install the CRDs, give every case a namespace of its own, run
its steps in order, and keep every answer (the transcript) for the comparison.

A case's steps run one after the other, so that its resourceVersions are ordered as its requests
were; cases run side by side (:data:`WORKERS` at a time on each server: most of a case's time is
spent waiting for the server), and so do the two servers (:func:`run_both`). Cases cannot see each
other: each has its namespace, and its cluster-scoped objects carry its name.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.conformance.client import Answer, Endpoint
from tests.conformance.model import Case, Edit, Pause, Req, Wait

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WORKERS = 4
_VAR = re.compile(r"\{(\w+)\}")
# The cluster-scoped resources whose objects a run names after its prefix and removes at the end.
CLUSTER_SCOPED = (
    "/api/v1/nodes",
    "/apis/gangq.io/v1alpha1/clusterqueues",
    "/apis/gangq.io/v1alpha1/cohorts",
    "/apis/gangq.io/v1alpha1/resourceflavors",
    "/apis/gangq.io/v1alpha1/workloadpriorityclasses",
    "/api/v1/namespaces",
)


@dataclass
class Entry:
    """One step's answer; ``reached`` for a :class:`Wait`: whether its condition came true."""

    step: str
    answer: Answer
    reached: bool | None = None


Transcript = list[Entry]


def crds() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))
            if p.name != "kustomization.yaml"]


def install_crds(ep: Endpoint, seconds: float = 30.0) -> None:
    """Create gangq's CRDs (those already there are kept) and wait until each is Established."""
    docs = crds()
    for doc in docs:
        answer = ep.request("POST", CRD_PATH, doc)
        if answer.status not in (201, 409):
            raise RuntimeError(f"{ep.name}: creating CRD {doc['metadata']['name']}: {answer.status} {answer.body}")
    deadline = time.monotonic() + seconds
    for doc in docs:
        while not _established(ep.request("GET", f"{CRD_PATH}/{doc['metadata']['name']}").body):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{ep.name}: CRD {doc['metadata']['name']} not Established after {seconds} s")
            time.sleep(0.1)


def _established(crd: Any) -> bool:
    # A real server answers a CRD it has just created with ``conditions: null`` until it is Established.
    status = (crd.get("status") or {}) if isinstance(crd, dict) else {}
    conditions = status.get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def namespace_of(prefix: str, index: int) -> str:
    return f"{prefix}-{index:03d}"


def create_namespaces(ep: Endpoint, names: Iterable[str], *, service_accounts: bool, seconds: float = 60.0) -> None:
    """Create the cases' namespaces; with ``service_accounts``, wait for each one's default
    ServiceAccount, which a real server's admission needs before it accepts a pod there."""
    names = list(names)
    for name in names:
        answer = ep.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        if answer.status != 201:
            raise RuntimeError(f"{ep.name}: creating namespace {name}: {answer.status} {answer.body}")
    if not service_accounts:
        return
    deadline = time.monotonic() + seconds
    for name in names:
        while ep.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default").status != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{ep.name}: no default ServiceAccount in {name} after {seconds} s")
            time.sleep(0.1)


def cleanup(ep: Endpoint, prefix: str) -> None:
    """Delete the cluster-scoped objects the cases made (nodes would take pods, ClusterQueues would
    be reconciled by a gangq controller started later in the session). The cases' own namespaces
    are kept: deleting hundreds of them keeps a real namespace controller busy for minutes."""
    own_namespace = re.compile(rf"^{re.escape(prefix)}-\d+$")
    for path in CLUSTER_SCOPED:
        listing = ep.request("GET", path)
        if listing.status != 200:
            continue
        for item in listing.body.get("items", []):
            name = item["metadata"]["name"]
            if name.startswith(prefix) and not own_namespace.match(name):
                if item["metadata"].get("finalizers"):
                    ep.request("PATCH", f"{path}/{name}", {"metadata": {"finalizers": None}},
                               content_type="application/merge-patch+json")
                ep.request("DELETE", f"{path}/{name}")


def substitute(value: Any, variables: dict[str, Any]) -> Any:
    """``value`` with every ``{name}`` of ``variables`` replaced, in strings at any depth."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: str(variables.get(m.group(1), m.group(0))), value)
    if isinstance(value, dict):
        return {substitute(k, variables): substitute(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, variables) for v in value]
    return value


def dig(body: Any, path: str) -> Any:
    """The value at a dotted path (list indices as numbers; the empty path is ``body``), or None."""
    for part in path.split(".") if path else ():
        if isinstance(body, list) and part.isdigit() and int(part) < len(body):
            body = body[int(part)]
        elif isinstance(body, dict) and part in body:
            body = body[part]
        else:
            return None
    return body


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` merged into ``target``."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _send(ep: Endpoint, req: Req, variables: dict[str, Any]) -> Answer:
    path = substitute(req.path, variables)
    if isinstance(req.body, Edit):
        body = merge_patch(variables.get(req.body.var), substitute(dict(req.body.changes), variables))
    else:
        body = substitute(req.body, variables)
    if req.watch is not None:
        return ep.watch(path, events=req.watch.events, seconds=req.watch.seconds, accept=req.accept)
    return ep.request(req.method, path, body, content_type=req.content_type, accept=req.accept)


def _wait(ep: Endpoint, wait: Wait, variables: dict[str, Any]) -> Entry:
    path = substitute(wait.path, variables)
    deadline = time.monotonic() + wait.seconds
    while True:
        answer = ep.request("GET", path)
        reached = answer.status == wait.status and (
            wait.field is None or (dig(answer.body, wait.field) is not None) == wait.present)
        if reached or time.monotonic() > deadline:
            return Entry(f"wait {path}", answer, reached)
        time.sleep(0.1)


def run_case(ep: Endpoint, case: Case, ns: str) -> Transcript:
    """Every step of ``case`` in ``ns``."""
    variables: dict[str, Any] = {"ns": ns}
    transcript: Transcript = []
    for step in (*case.setup, case.test):
        if isinstance(step, Pause):
            time.sleep(step.seconds)
            continue
        if isinstance(step, Wait):
            transcript.append(_wait(ep, step, variables))
            continue
        answer = _send(ep, step, variables)
        for var, path in step.save.items():
            value = dig(answer.body, path)
            if value is not None:
                variables[var] = value
        transcript.append(Entry(f"{step.method} {substitute(step.path, variables)}", answer))
    return transcript


def run_corpus(ep: Endpoint, cases: Sequence[Case], prefix: str, *, service_accounts: bool) -> dict[str, Transcript]:
    """Run ``cases`` on ``ep``, case ``i`` in namespace ``{prefix}-{i:03d}`` (with
    ``service_accounts``, once its default ServiceAccount is there); returns each case's
    transcript by name."""
    install_crds(ep)
    names = [namespace_of(prefix, i) for i in range(len(cases))]
    create_namespaces(ep, names, service_accounts=service_accounts)
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            transcripts = list(pool.map(lambda pair: run_case(ep, *pair), zip(cases, names, strict=True)))
    finally:
        cleanup(ep, prefix)
        ep.close()
    return {case.name: t for case, t in zip(cases, transcripts, strict=True)}


def run_both(sandbox: Endpoint, real: Endpoint, cases: Sequence[Case],
             prefix: str) -> tuple[dict[str, Transcript], dict[str, Transcript]]:
    """The corpus on both servers at once; (sandbox's, real's) transcripts."""
    with ThreadPoolExecutor(2) as pool:
        emulated = pool.submit(run_corpus, sandbox, cases, prefix, service_accounts=False)
        reference = pool.submit(run_corpus, real, cases, prefix, service_accounts=True)
        return emulated.result(), reference.result()
