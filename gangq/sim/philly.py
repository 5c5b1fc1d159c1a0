"""Importer for the Philly per-job table (``../shared/traces/philly``, see its README).

Each row is a gang of ``num_gpus`` GPUs in a virtual cluster (VC): one pod of ``num_gpus`` GPUs when
``num_gpus <= 8``, else ``ceil(num_gpus / 8)`` pods of 8 GPUs. The 11 VCs of
``philly_vc_helios_replay.csv`` are hard partitions: one ClusterQueue per VC (no cohort) whose GPU
quota is its nodes × 8, and a ResourceFlavor per VC that selects the VC's nodes, so the engine's node
check (best-fit) packs gangs onto as few nodes as possible. Node counts are multiplied by the
capacity scale (floor, at least 1). Jobs in other VCs are dropped; jobs larger than their VC are
never admissible and are counted, not simulated.

With a :class:`~gangq.sim.topology.TopologyLayout` the nodes of each VC are labelled into racks and
blocks (``gangq.io/topology-block``, ``gangq.io/topology-rack``, ``kubernetes.io/hostname``) and
every flavor gets that Topology; a ``topology_request`` is what every gang of more than one pod
asks for (a ``Required`` gang larger than the largest domain of its level in its VC is never
admissible, and is counted like a job larger than its VC).
"""

from __future__ import annotations

import csv
import math
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from gangq.api.loader import parse_queue_config
from gangq.core.config import EngineConfig
from gangq.core.model import NodeSpec, TopologyRequest
from gangq.sim.scenario import Scenario
from gangq.sim.simulator import no_gc
from gangq.sim.topology import HOST_LABEL, RACK_LABEL, TopologyLayout
from gangq.sim.trace import GPU, ColumnMapping, TraceError, TraceJob, load_csv

JOBS_FILE = "philly_pollux_jobs.csv"
VC_FILE = "philly_vc_helios_replay.csv"
GPUS_PER_NODE = 8
DEFAULT_WINDOW = "2017-10-01:2017-11-30"
PHILLY_MAPPING = {"submit": "timestamp", "duration": "duration", "gpus": "num_gpus", "queue": "cluster"}
CLASSES = ["1gpu", "2-4gpu", "8gpu", ">8gpu"]
VC_LABEL = "gangq.io/vc"


def parse_window(text: str) -> tuple[datetime, datetime]:
    """``YYYY-MM-DD:YYYY-MM-DD`` → [start of the first day, end of the last day)."""
    first, sep, last = text.partition(":")
    try:
        start = date.fromisoformat(first.strip())
        end = date.fromisoformat(last.strip()) if sep else start
    except ValueError as err:
        raise TraceError("--window", 0, "window", f"expected YYYY-MM-DD:YYYY-MM-DD, got {text!r}") from err
    if end < start:
        raise TraceError("--window", 0, "window", f"ends before it starts: {text!r}")
    return datetime(start.year, start.month, start.day), datetime(end.year, end.month, end.day) + timedelta(days=1)


def read_vcs(trace_dir: Path) -> dict[str, int]:
    """VC → node count from ``philly_vc_helios_replay.csv``."""
    path = trace_dir / VC_FILE
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as err:
        raise TraceError(str(path), 0, "", f"cannot read: {err.strerror}") from err
    out = {}
    for lineno, row in enumerate(rows, 2):
        try:
            out[row["vc"].strip()] = int(row["node num"])
        except (KeyError, ValueError, AttributeError) as err:
            raise TraceError(str(path), lineno, "node num", f"expected columns vc,node num: {err}") from err
    return out


def gpu_class(gpus: int) -> str:
    if gpus <= 1:
        return "1gpu"
    if gpus <= 4:
        return "2-4gpu"
    if gpus <= 8:
        return "8gpu"
    return ">8gpu"


def philly_config_documents(nodes_per_vc: dict[str, int]) -> list[dict[str, Any]]:
    """The queue configuration of the replay, as the YAML documents an admin would apply."""
    docs: list[dict[str, Any]] = []
    for vc, nodes in nodes_per_vc.items():
        docs.append(
            {
                "apiVersion": "gangq.io/v1alpha1",
                "kind": "ResourceFlavor",
                "metadata": {"name": f"vc-{vc}"},
                "spec": {"nodeLabels": {VC_LABEL: vc}},
            }
        )
        docs.append(
            {
                "apiVersion": "gangq.io/v1alpha1",
                "kind": "ClusterQueue",
                "metadata": {"name": vc},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [
                                {
                                    "name": f"vc-{vc}",
                                    "resources": [{"name": GPU, "nominalQuota": nodes * GPUS_PER_NODE}],
                                }
                            ],
                        }
                    ],
                },
            }
        )
        docs.append(
            {
                "apiVersion": "gangq.io/v1alpha1",
                "kind": "LocalQueue",
                "metadata": {"name": vc, "namespace": vc},
                "spec": {"clusterQueue": vc},
            }
        )
    return docs


def load_philly(
    trace_dir: str | Path,
    window: str = DEFAULT_WINDOW,
    capacity_scale: float = 1.0,
    engine_config: EngineConfig | None = None,
    runtime_limits: float | None = None,
    fraction: float = 1.0,
    layout: TopologyLayout | None = None,
    topology_request: TopologyRequest | None = None,
) -> Scenario:
    """The Philly replay as a :class:`Scenario`.

    ``runtime_limits``: give every job a runtime limit of ``factor × duration`` (users' declared
    limits; lets the engine compute reservations and backfill); ``None``: no limits.
    ``fraction``: keep only the first fraction of the window's jobs (speed measurements).
    ``layout``: label the nodes into racks and blocks; ``topology_request``: what gangs of more
    than one pod ask for (needs ``layout``).
    """
    trace_dir = Path(trace_dir)
    if capacity_scale <= 0:
        raise TraceError("--capacity-scale", 0, "capacity_scale", f"must be positive, got {capacity_scale}")
    vcs = read_vcs(trace_dir)
    nodes_per_vc = {vc: max(1, math.floor(n * capacity_scale)) for vc, n in vcs.items()}
    start, end = parse_window(window)
    mapping = ColumnMapping(PHILLY_MAPPING, time_format="iso", gpus_per_pod=GPUS_PER_NODE, namespace_from_queue=True)
    with no_gc():
        rows = load_csv(trace_dir / JOBS_FILE, mapping, start=start, end=end)
    rows.sort(key=lambda j: j.submit)
    if fraction < 1.0:
        rows = rows[: max(1, math.floor(len(rows) * fraction))]
    jobs: list[TraceJob] = []
    other_vc = 0
    too_large: dict[str, int] = {}
    too_large_for_level: dict[str, int] = {}
    domain_nodes = _domain_nodes(layout, topology_request)
    for job in rows:
        vc = job.local_queue
        if vc not in nodes_per_vc:
            other_vc += 1
            continue
        ps = job.pod_sets[0]
        gpus = ps.requests[GPU] * ps.count
        if gpus > nodes_per_vc[vc] * GPUS_PER_NODE:
            too_large[vc] = too_large.get(vc, 0) + 1
            continue
        if (
            domain_nodes is not None
            and ps.count > 1
            and gpus > min(domain_nodes, nodes_per_vc[vc]) * GPUS_PER_NODE
        ):
            too_large_for_level[vc] = too_large_for_level.get(vc, 0) + 1
            continue
        # Re-use the row's job: name by row, class by size, the VC's namespace and queue.
        job.name = f"job-{job.line}"
        job.cls = gpu_class(gpus)
        ps.name = "worker"
        if runtime_limits:
            job.runtime_limit = max(1.0, job.duration * runtime_limits)
        jobs.append(job)
    config = parse_queue_config(philly_config_documents(nodes_per_vc))
    nodes = [
        NodeSpec(
            f"{vc}-{i}",
            {"cpu": 256_000, "memory": 4 << 40, GPU: GPUS_PER_NODE, "pods": 1000},
            labels={VC_LABEL: vc, **(layout.labels(vc, i, f"{vc}-{i}") if layout is not None else {})},
        )
        for vc, n in nodes_per_vc.items()
        for i in range(n)
    ]
    excluded = {f"larger than VC {vc}": n for vc, n in too_large.items()}
    if topology_request is not None and too_large_for_level:
        level = topology_request.level or ""
        name = "rack" if level == RACK_LABEL else "host" if level == HOST_LABEL else "block"
        excluded.update({f"larger than a {name} of VC {vc}": n for vc, n in too_large_for_level.items()})
    return Scenario(
        "philly",
        config,
        nodes,
        jobs,
        engine_config or EngineConfig(pods_ready_timeout=None),
        resource=GPU,
        classes=CLASSES,
        excluded=excluded,
        info={
            "window": window,
            "capacity_scale": capacity_scale,
            "nodes_per_vc": nodes_per_vc,
            "jobs_in_window": len(rows),
            "jobs_in_other_vcs": other_vc,
            "never_admissible": sum(too_large.values()) + sum(too_large_for_level.values()),
            "runtime_limits": runtime_limits,
            "topology_layout": layout.info() if layout is not None else None,
        },
        topology=layout.spec() if layout is not None else None,
        topology_request=topology_request,
    )


def _domain_nodes(layout: TopologyLayout | None, request: TopologyRequest | None) -> int | None:
    """Nodes in the largest domain of a ``Required`` request's level (None: no such limit)."""
    if layout is None or request is None or request.mode != "Required":
        return None
    if request.level == HOST_LABEL:
        return 1
    if request.level == RACK_LABEL:
        return layout.hosts_per_rack
    return layout.hosts_per_rack * layout.racks_per_block
