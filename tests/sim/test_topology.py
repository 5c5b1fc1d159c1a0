"""The simulator's topology: racks from node labels, what multi-pod gangs ask for, and the locality
and fragmentation figures that compare gangq's best fit with the first-fit baseline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gangq.api.loader import parse_queue_config
from gangq.core import EngineConfig, NodeSpec
from gangq.core.model import TopologyRequest
from gangq.sim.cli import simulate
from gangq.sim.philly import load_philly
from gangq.sim.policies import make_policy
from gangq.sim.report import summarize
from gangq.sim.scenario import Scenario
from gangq.sim.simulator import Simulator
from gangq.sim.topology import BLOCK_LABEL, HOST_LABEL, RACK_LABEL, TopologyLayout, parse_request
from gangq.sim.trace import GPU
from tests.sim.helpers import gpu_config, job
from tests.sim.test_philly import JOBS, VCS

LAYOUT = TopologyLayout(hosts_per_rack=2, racks_per_block=2)


def racks_scenario(mode: str) -> Scenario:
    """One block: rack r0 with two hosts of 8 GPUs, rack r1 with one. A gang of 2 × 4 GPUs, then
    one of 4 × 4 GPUs (a whole r0), each asking for one rack. Best fit puts the first in r1 (the
    fuller rack that holds it) and the second in r0; first fit puts the first in r0, and the
    second no longer fits one rack."""
    config = parse_queue_config(gpu_config(24))
    nodes = [
        NodeSpec(name, {"cpu": 96_000, GPU: 8}, {BLOCK_LABEL: "b0", RACK_LABEL: rack})
        for name, rack in (("r0-h0", "b0-r0"), ("r0-h1", "b0-r0"), ("r1-h0", "b0-r1"))
    ]
    jobs = [job("small", 0.0, 1000.0, 2, 4), job("large", 0.0, 1000.0, 4, 4)]
    request = TopologyRequest("Required" if mode == "required" else "Preferred", RACK_LABEL)
    return Scenario(
        "racks",
        config,
        nodes,
        jobs,
        EngineConfig(pods_ready_timeout=None),
        topology=LAYOUT.spec(),
        topology_request=request,
        topology_sample_every=10.0,
    )


def run(scenario: Scenario, policy: str) -> dict[str, Any]:
    return summarize(Simulator(scenario, make_policy(policy), policy).run())


def test_best_fit_keeps_more_gangs_in_one_rack_than_first_fit() -> None:
    best, first = run(racks_scenario("preferred"), "gangq"), run(racks_scenario("preferred"), "gangq-firstfit")
    for s in (best, first):
        loc = s["topology"]["locality"]
        assert set(loc) >= {"level", "gangs", "share_in_one_domain", "mean_domains_per_gang", "by_level"}
        assert loc["level"] == "rack" and loc["gangs"] == 2
        assert set(loc["by_level"]) == {"block", "rack", "host"}
    assert best["topology"]["locality"]["share_in_one_domain"] == 1.0
    assert best["topology"]["locality"]["mean_domains_per_gang"] == 1.0
    # First fit: the large gang, preferred in one rack, spreads over both.
    assert first["topology"]["locality"]["share_in_one_domain"] == 0.5
    assert first["topology"]["locality"]["mean_domains_per_gang"] == 1.5
    assert first["topology"]["locality"]["by_level"]["block"]["share_in_one_domain"] == 1.0


def test_first_fit_leaves_a_required_head_waiting_with_enough_free_gpus() -> None:
    best, first = run(racks_scenario("required"), "gangq"), run(racks_scenario("required"), "gangq-firstfit")
    frag_best, frag_first = best["topology"]["fragmentation"], first["topology"]["fragmentation"]
    for frag in (frag_best, frag_first):
        assert set(frag) >= {
            "resource",
            "sample_every_s",
            "samples",
            "fragmented_mean",
            "fragmented_p95",
            "free_mean",
            "share_samples_head_waiting_with_enough_free",
            "head_samples",
            "share_heads_waiting_with_enough_free",
        }
        assert frag["samples"] > 0
    assert best["max_wait_s"] == 0.0 and frag_best["head_samples"] == 0
    assert frag_best["fragmented_mean"] == 0.0
    # First fit: the large gang waits 1000 s for the small one, with 16 GPUs free, 8 per rack.
    assert first["max_wait_s"] == 1000.0
    assert frag_first["share_heads_waiting_with_enough_free"] == 1.0
    assert frag_first["fragmented_p95"] == 16.0
    assert frag_first["share_samples_head_waiting_with_enough_free"] > 0.4


def test_layout_labels_hosts_into_racks_and_blocks() -> None:
    assert LAYOUT.labels("vc", 5, "vc-5") == {BLOCK_LABEL: "vc-b1", RACK_LABEL: "vc-b1-r2", HOST_LABEL: "vc-5"}
    assert TopologyLayout.parse("hosts-per-rack=8").info() == {"hosts_per_rack": 8, "racks_per_block": 4}
    with pytest.raises(ValueError, match="--topology-layout"):
        TopologyLayout.parse("racks=3")
    request = parse_request("required:rack", LAYOUT.spec().levels)
    assert (request.mode, request.level) == ("Required", RACK_LABEL)
    with pytest.raises(ValueError, match="--topology-request: unknown level 'row'"):
        parse_request("preferred:row", LAYOUT.spec().levels)


def test_philly_layout_labels_nodes_and_counts_required_gangs_larger_than_a_rack(tmp_path: Path) -> None:
    (tmp_path / "philly_vc_helios_replay.csv").write_text(VCS)
    (tmp_path / "philly_pollux_jobs.csv").write_text(JOBS)
    request = TopologyRequest("Required", RACK_LABEL)
    sc = load_philly(tmp_path, "2017-10-01:2017-10-03", layout=LAYOUT, topology_request=request)
    node = next(n for n in sc.nodes if n.name == "bbb222-4")
    assert node.labels[RACK_LABEL] == "bbb222-b1-r2" and node.labels[BLOCK_LABEL] == "bbb222-b1"
    assert sc.topology is not None and sc.topology.levels == [BLOCK_LABEL, RACK_LABEL, HOST_LABEL]
    # bbb222's 12-GPU job needs 2 hosts: a rack holds it. aaa111's 16-GPU one fits its 2-node VC and
    # rack; no job is larger than a rack but not than its VC here, so nothing new is excluded.
    assert sc.excluded == {"larger than VC aaa111": 1}
    narrow = load_philly(
        tmp_path, "2017-10-01:2017-10-03", layout=TopologyLayout(1, 1), topology_request=request
    )
    assert narrow.excluded == {"larger than VC aaa111": 1, "larger than a rack of VC aaa111": 1,
                               "larger than a rack of VC bbb222": 1}


app = typer.Typer()


@app.callback()
def main() -> None:
    """test app"""


app.command("simulate")(simulate)
runner = CliRunner()

CONFIG = """\
apiVersion: gangq.io/v1alpha1
kind: ResourceFlavor
metadata: {name: gpu}
spec: {}
---
apiVersion: gangq.io/v1alpha1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: gpu, resources: [{name: nvidia.com/gpu, nominalQuota: 24}]}]
---
apiVersion: gangq.io/v1alpha1
kind: LocalQueue
metadata: {name: jobs, namespace: team}
spec: {clusterQueue: team}
"""

CLUSTER = """\
topology: [rack]
nodes:
  - {name: r0, count: 2, allocatable: {cpu: 96, nvidia.com/gpu: 8}, labels: {rack: r0}}
  - {name: r1, count: 1, allocatable: {cpu: 96, nvidia.com/gpu: 8}, labels: {rack: r1}}
"""

TRACE = """\
workloads:
  - {name: small, namespace: team, queue: jobs, submit: 0, duration: 1000,
     podSets: [{name: w, count: 2, requests: {nvidia.com/gpu: 4}}]}
  - {name: large, namespace: team, queue: jobs, submit: 0, duration: 1000,
     podSets: [{name: w, count: 4, requests: {nvidia.com/gpu: 4}}]}
"""


def files(tmp_path: Path, cluster: str = CLUSTER) -> list[str]:
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "trace.yaml").write_text(TRACE)
    return [
        "simulate",
        "--trace",
        str(tmp_path / "trace.yaml"),
        "--config",
        str(tmp_path / "config.yaml"),
        "--cluster",
        str(tmp_path / "cluster.yaml"),
        "--quiet",
    ]


def test_cli_cluster_topology_compares_best_fit_with_first_fit(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = [*files(tmp_path), "--topology-request", "required:rack", "--compare", "gangq,gangq-firstfit"]
    result = runner.invoke(app, [*args, "--topology-sample-every", "10", "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    best, first = doc["compare"]
    assert best["topology"]["request"] == "Required:rack" and first["policy"] == "gangq-firstfit"
    assert best["max_wait_s"] == 0.0 and first["max_wait_s"] == 1000.0
    assert first["topology"]["fragmentation"]["share_heads_waiting_with_enough_free"] == 1.0


@pytest.mark.parametrize(
    ("extra", "cluster", "message"),
    [
        (["--topology-request", "sideways:rack"], CLUSTER, "--topology-request: expected required:LEVEL"),
        (["--topology-request", "required:row"], CLUSTER, "--topology-request: unknown level 'row'"),
        (["--topology-request", "required:rack"], CLUSTER.replace("topology: [rack]\n", ""),
         "--topology-request needs a topology"),
        (["--topology-layout", "hosts-per-rack=2"], CLUSTER, "--topology-layout labels the Philly"),
        ([], CLUSTER.replace("topology: [rack]", "topology: {levels: []}"), "topology: levels: must be"),
        ([], CLUSTER.replace("topology: [rack]", "topology: {level: [rack]}"), "topology: level: unknown field"),
    ],
)
def test_cli_topology_errors_name_the_option(tmp_path: Path, extra: list[str], cluster: str, message: str) -> None:
    result = runner.invoke(app, files(tmp_path, cluster) + extra)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output


def test_cli_philly_layout_errors_name_the_option(tmp_path: Path) -> None:
    (tmp_path / "philly_vc_helios_replay.csv").write_text(VCS)
    (tmp_path / "philly_pollux_jobs.csv").write_text(JOBS)
    base = ["simulate", "--trace", "philly", "--trace-dir", str(tmp_path), "--quiet"]
    result = runner.invoke(app, [*base, "--topology-layout", "hosts-per-rack=0"])
    assert result.exit_code == 2 and "--topology-layout: hosts-per-rack must be a positive integer" in result.output
    result = runner.invoke(app, [*base, "--topology-request", "preferred:rack"])
    assert result.exit_code == 2 and "--topology-request needs a topology: give --topology-layout" in result.output
