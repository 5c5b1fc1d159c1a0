"""What a simulation runs: a queue configuration, the nodes, the engine settings and a trace.

Scenarios come from files (the queue-config YAML an admin applies, a native or CSV trace, an
optional cluster file), from the Philly importer (:mod:`gangq.sim.philly`) or are built in
(``kueue-baseline``, ``gang-deadlock``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from gangq.api.loader import QueueConfig, load_documents, parse_queue_config
from gangq.core.config import EngineConfig
from gangq.core.model import NodeSpec, TopologyRequest, TopologySpec
from gangq.core.runtimes import DEFAULT_QUANTILE
from gangq.resources import policy_file
from gangq.sim.topology import DEFAULT_SAMPLE_EVERY
from gangq.sim.trace import GPU, TraceError, TraceJob, TracePodSet

KUEUE_BASELINE_CONFIG = policy_file("kueue-baseline.yaml")


class Scenario:
    """Everything one simulation run needs (shared, read-only, by every policy of a comparison).

    - ``config``: the queue objects (as parsed by :mod:`gangq.api.loader`);
    - ``nodes``: the cluster; ``namespaces``: namespace → labels (every job namespace is created);
    - ``engine_config``: gangq's engine settings; ``pod_start_latency``: seconds from admission until
      every pod runs; ``eviction_latency``: seconds from an eviction until the gang has stopped;
      ``checkpoint``: a preempted gang restarts from its last checkpoint, taken every ``checkpoint``
      fraction of its run (0: from the beginning);
    - ``jobs``: the admissible trace; ``excluded``: jobs left out (never admissible) with the reason;
    - ``classes``: report classes in display order; ``resource``: the resource utilisation is given in;
    - ``runtime_estimates``: gangq submits gangs without a runtime limit with the ``estimate_quantile``
      of the run times of similar gangs that finished before (:mod:`gangq.core.runtimes`);
    - ``topology``: the Topology of every flavor that has none of its own (None: only the
      configuration's); ``topology_request``: what every pod set of more than one pod asks for;
      ``topology_sample_every``: simulated seconds between fragmentation samples
      (:mod:`gangq.sim.topology`).
    """

    def __init__(
        self,
        name: str,
        config: QueueConfig,
        nodes: list[NodeSpec],
        jobs: list[TraceJob],
        engine_config: EngineConfig | None = None,
        resource: str | None = None,
        classes: list[str] | None = None,
        excluded: dict[str, int] | None = None,
        pod_start_latency: float = 0.0,
        eviction_latency: float = 0.0,
        checkpoint: float = 0.0,
        info: dict[str, Any] | None = None,
        namespaces: dict[str, dict[str, str]] | None = None,
        runtime_estimates: bool = True,
        estimate_quantile: float = DEFAULT_QUANTILE,
        topology: TopologySpec | None = None,
        topology_request: TopologyRequest | None = None,
        topology_sample_every: float = DEFAULT_SAMPLE_EVERY,
    ) -> None:
        self.name = name
        self.config = config
        self.nodes = nodes
        self.jobs = sorted(jobs, key=lambda j: j.submit)  # stable: trace order within a timestamp
        self.engine_config = engine_config or EngineConfig()
        self.namespaces: dict[str, dict[str, str]] = {j.namespace: {} for j in self.jobs} | dict(namespaces or {})
        self.resource = resource or _primary_resource(config, nodes)
        seen = dict.fromkeys(j.cls for j in self.jobs)
        self.classes = [c for c in (classes or []) if c in seen] + [c for c in seen if c not in (classes or [])]
        self.excluded = excluded or {}
        self.pod_start_latency = pod_start_latency
        self.eviction_latency = eviction_latency
        self.checkpoint = checkpoint
        self.info = info or {}
        self.runtime_estimates = runtime_estimates
        self.estimate_quantile = estimate_quantile
        self.topology = topology
        self.topology_request = topology_request
        self.topology_sample_every = topology_sample_every
        self.check()

    def check(self) -> None:
        """Every job's queue and priority class must exist (else the run would only say "pending")."""
        for job in self.jobs:
            lq = f"{job.namespace}/{job.local_queue}"
            if lq not in self.config.local_queues:
                raise TraceError(job.key, job.line, "queue", f"LocalQueue {lq} is not in the queue configuration")
            if job.priority_class and job.priority_class not in self.config.priority_classes:
                raise TraceError(
                    job.key, job.line, "priorityClass", f"WorkloadPriorityClass {job.priority_class!r} is not defined"
                )

    def cluster_queue_of(self, job: TraceJob) -> str:
        return self.config.local_queues[f"{job.namespace}/{job.local_queue}"].cluster_queue

    def measured_topology(self) -> TopologySpec | None:
        """The levels topology figures are measured in: the scenario's Topology, else the first
        flavor's of the configuration (None: no topology, no figures)."""
        if self.topology is not None:
            return self.topology
        return next((f.topology for f in self.config.flavors.values() if f.topology is not None), None)

    def nodes_of(self, cq_name: str) -> list[str]:
        """The nodes the flavors of a ClusterQueue select (by their node labels)."""
        selectors = [
            self.config.flavors[flavor.name].node_labels
            for group in self.config.cluster_queues[cq_name].resource_groups
            for flavor in group.flavors
            if flavor.name in self.config.flavors
        ]
        return [
            n.name
            for n in self.nodes
            if any(all(n.labels.get(k) == v for k, v in sel.items()) for sel in selectors)
        ]

    def priority_of(self, job: TraceJob) -> int:
        return self.config.priority_classes.get(job.priority_class, 0) if job.priority_class else 0

    def capacity(self) -> int:
        """Cluster capacity in :attr:`resource`: node allocatable, or the nominal quotas when there
        are no nodes (quota-only scenarios)."""
        total = sum(n.allocatable.get(self.resource, 0) for n in self.nodes)
        if total:
            return total
        return sum(nominal_quota(self.config, cq).get(self.resource, 0) for cq in self.config.cluster_queues)


def _primary_resource(config: QueueConfig, nodes: list[NodeSpec]) -> str:
    if any(GPU in n.allocatable for n in nodes):
        return GPU
    for cq in config.cluster_queues.values():
        for group in cq.resource_groups:
            if GPU in group.covered_resources:
                return GPU
    return "cpu"


def nominal_quota(config: QueueConfig, cq_name: str) -> dict[str, int]:
    """A ClusterQueue's nominal quota per resource, summed over its flavors."""
    out: dict[str, int] = {}
    for group in config.cluster_queues[cq_name].resource_groups:
        for flavor in group.flavors:
            for q in flavor.resources:
                out[q.name] = out.get(q.name, 0) + q.nominal
    return out


def nominal_by_flavor(config: QueueConfig, cq_name: str) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for group in config.cluster_queues[cq_name].resource_groups:
        for flavor in group.flavors:
            for q in flavor.resources:
                out[(flavor.name, q.name)] = q.nominal
    return out


def load_config(paths: list[Path]) -> QueueConfig:
    """Parse queue-configuration YAML files with the same loader as ``gangq validate``."""
    config = QueueConfig()
    for path in paths:
        parse_queue_config(load_documents(Path(path)), config)
    return config


# ----------------------------------------------------------------------------------------------
# Built-in scenarios
# ----------------------------------------------------------------------------------------------

KUEUE_CLASSES = (
    # name, count per ClusterQueue, cpu request (cores), runtime (s), created every (s)
    ("small", 350, 1, 0.2, 0.1),
    ("medium", 100, 5, 0.5, 0.5),
    ("large", 50, 20, 1.0, 1.2),
)


def kueue_baseline(scale: float = 1.0, config_path: Path | None = None) -> Scenario:
    """Kueue's scheduler performance test, baseline configuration (references section 1).

    The queue configuration is ``policies/kueue-baseline.yaml``; the node check is switched off
    (``admissionMode: QuotaOnly``) because Kueue's test has no nodes. ``scale`` shrinks the number
    of workloads per class (at least one each), not the quotas.
    """
    config = load_config([config_path or KUEUE_BASELINE_CONFIG])
    for cq in config.cluster_queues.values():
        cq.admission_mode = "QuotaOnly"
    jobs = []
    for cq_name in config.cluster_queues:
        lq = next(lq for lq in config.local_queues.values() if lq.cluster_queue == cq_name)
        for cls, count, cpu, runtime, every in KUEUE_CLASSES:
            n = max(1, math.floor(count * scale))
            for i in range(n):
                jobs.append(
                    TraceJob(
                        f"{cq_name}-{cls}-{i}",
                        round(i * every, 6),
                        runtime,
                        lq.name,
                        [TracePodSet("main", 1, {"cpu": cpu * 1000})],
                        namespace=lq.namespace,
                        priority_class=cls,
                        cls=cls,
                    )
                )
    bound = _kueue_bound(config, scale)
    return Scenario(
        "kueue-baseline",
        config,
        [],
        jobs,
        EngineConfig(pods_ready_timeout=None),
        resource="cpu",
        classes=["small", "medium", "large"],
        info={"quota_bound_makespan_s": bound, "scale": scale},
    )


def _kueue_bound(config: QueueConfig, scale: float) -> float:
    """The quota-limited lower bound of the makespan: a cohort's demand over its total quota."""
    per_cq = sum(max(1, math.floor(count * scale)) * cpu * runtime for _, count, cpu, runtime, _ in KUEUE_CLASSES)
    cohorts: dict[str, list[str]] = {}
    for cq in config.cluster_queues.values():
        cohorts.setdefault(cq.cohort or cq.name, []).append(cq.name)
    bound = 0.0
    for members in cohorts.values():
        quota = sum(nominal_quota(config, m).get("cpu", 0) for m in members) / 1000
        bound = max(bound, per_cq * len(members) / quota)
    return bound


def gpu_queue_documents(
    gpus: int, cluster_queue: str, namespace: str, local_queue: str, strategy: str = "BestEffortFIFO"
) -> list[dict[str, Any]]:
    """The queue configuration of a one-flavor GPU cluster: ResourceFlavor ``gpu``, a ClusterQueue
    with ``gpus`` GPUs of nominal quota, and a LocalQueue in ``namespace`` pointing at it."""
    return [
        {"apiVersion": "gangq.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "gpu"}, "spec": {}},
        {
            "apiVersion": "gangq.io/v1alpha1",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "queueingStrategy": strategy,
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [{"name": "gpu", "resources": [{"name": GPU, "nominalQuota": gpus}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": "gangq.io/v1alpha1",
            "kind": "LocalQueue",
            "metadata": {"name": local_queue, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        },
    ]


def gang_deadlock(gangs: int = 24, nodes: int = 4, pods: int = 4, gpus_per_pod: int = 4) -> Scenario:
    """An oversubscribed gang workload: ``gangs`` gangs of ``pods`` pods × ``gpus_per_pod`` GPUs,
    submitted 0.5 s apart (runs of 10 minutes), on ``nodes`` nodes of 8 GPUs whose quota equals the
    cluster. Pods of gangs submitted close together interleave in a pod-by-pod scheduler's queue."""
    capacity = nodes * 8
    docs = gpu_queue_documents(capacity, "team", "team", "jobs")
    config = parse_queue_config(docs)
    node_specs = [NodeSpec(f"gpu-{i}", {"cpu": 96_000, "memory": 1 << 40, GPU: 8}) for i in range(nodes)]
    jobs = [
        TraceJob(
            f"gang-{i}",
            0.5 * i,
            600.0,
            "jobs",
            [TracePodSet("worker", pods, {GPU: gpus_per_pod})],
            namespace="team",
            cls=f"{pods}x{gpus_per_pod}gpu",
        )
        for i in range(gangs)
    ]
    return Scenario("gang-deadlock", config, node_specs, jobs, EngineConfig(pods_ready_timeout=None))


SCENARIOS = {"kueue-baseline": kueue_baseline, "gang-deadlock": gang_deadlock}
