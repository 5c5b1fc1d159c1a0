"""Topology-aware placement (gangq/core/topology.py): a pod set that asks for one domain of a level
gets one, chosen by best fit, or waits with a reason that names the level."""

from __future__ import annotations

from gangq.core import Admission, Engine, FlavorSpec, NodeSpec, PodInfo, PodSetSpec, WorkloadSpec
from gangq.core.config import EngineConfig
from gangq.core.model import TopologyRequest, TopologySpec
from tests.engine.builders import GPU, add_queue, engine, quota

BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
TOPOLOGY = TopologySpec("default", [BLOCK, RACK, HOST])


def fleet(e: Engine, blocks: int = 2, racks: int = 2, hosts: int = 2, topology: bool = True) -> None:
    """``blocks`` × ``racks`` × ``hosts`` nodes of 8 GPUs, named b<i>-r<j>-h<k>, in flavor ``gpu``."""
    e.upsert_flavor(FlavorSpec("gpu", {"pool": "gpu"}, topology=TOPOLOGY if topology else None))
    for b in range(blocks):
        for r in range(racks):
            for h in range(hosts):
                name = f"b{b}-r{r}-h{h}"
                labels = {"pool": "gpu", BLOCK: f"b{b}", RACK: f"b{b}-r{r}", HOST: name}
                e.upsert_node(NodeSpec(name, {"cpu": 64_000, GPU: 8}, labels))


def topo_gang(key: str, pods: int, mode: str, level: str | None, t: float = 0.0, **slices: object) -> WorkloadSpec:
    request = TopologyRequest(mode, level, **slices)  # type: ignore[arg-type]
    return WorkloadSpec(
        f"ns/{key}", "ns", "q", [PodSetSpec("w", pods, {"cpu": 1000, GPU: 8}, topology=request)], creation_time=t
    )


def occupy(e: Engine, node: str) -> None:
    """A pod outside any queue takes the whole node's GPUs."""
    e.update_pod(PodInfo(f"other/{node}", node, {"cpu": 1000, GPU: 8}, running=True))


def admission(decisions: list[object], key: str) -> Admission | None:
    return next((d for d in decisions if isinstance(d, Admission) and d.workload == f"ns/{key}"), None)


def nodes_of(adm: Admission) -> list[str]:
    return sorted(node for ps in adm.pod_sets for node in ps.placement)


def setup(**kw: object) -> Engine:
    e = engine()
    fleet(e, **kw)  # type: ignore[arg-type]
    add_queue(e, "q", [quota("gpu", 1000, 1000)])
    return e


def test_a_required_rack_puts_every_pod_in_one_rack() -> None:
    e = setup()
    e.submit(topo_gang("pair", 2, "Required", RACK), 0.0)
    adm = admission(e.schedule(1.0), "pair")
    assert adm is not None
    racks = {node.rsplit("-h", 1)[0] for node in nodes_of(adm)}
    assert len(racks) == 1 and len(nodes_of(adm)) == 2


def test_a_required_block_waits_naming_the_level_then_runs_in_one_block() -> None:
    """Pods outside any queue occupy one rack of each block: 4 free hosts, but 2 per block."""
    e = setup()
    for node in ("b0-r0-h0", "b0-r0-h1", "b1-r1-h0", "b1-r1-h1"):
        occupy(e, node)
    e.submit(topo_gang("big", 4, "Required", BLOCK), 0.0)
    assert admission(e.schedule(1.0), "big") is None
    view = e.workload("ns/big")
    assert view is not None
    assert "needs 4 pods in one block" in view.message and "at most 2 fit in one" in view.message, view.message
    for node in ("b1-r1-h0", "b1-r1-h1"):
        e.delete_pod(f"other/{node}")
    adm = admission(e.schedule(2.0), "big")
    assert adm is not None
    assert nodes_of(adm) == ["b1-r0-h0", "b1-r0-h1", "b1-r1-h0", "b1-r1-h1"]


def test_the_domain_is_chosen_by_best_fit_not_first_fit() -> None:
    """Rack b0-r1 has one free host, b0-r0 two: a one-pod rack gang takes b0-r1 and leaves b0-r0
    whole for the two-pod gang that follows (first fit would have split b0-r0)."""
    e = setup(blocks=1)
    occupy(e, "b0-r1-h0")
    e.submit(topo_gang("small", 1, "Required", RACK, t=0.0), 0.0)
    e.submit(topo_gang("pair", 2, "Required", RACK, t=1.0), 0.0)
    decisions = e.schedule(1.0)
    small, pair = admission(decisions, "small"), admission(decisions, "pair")
    assert small is not None and nodes_of(small) == ["b0-r1-h1"]
    assert pair is not None and nodes_of(pair) == ["b0-r0-h0", "b0-r0-h1"]


def test_first_fit_takes_the_first_rack_that_holds_the_pod_set() -> None:
    """The same fleet as the best-fit test with ``topology_fit="FirstFit"``: the one-pod gang takes
    b0-r0, the emptier first rack, and the two-pod gang behind it no longer finds a whole rack."""
    e = engine(EngineConfig(pods_ready_timeout=None, preemption_delay=0, topology_fit="FirstFit"))
    fleet(e, blocks=1)
    add_queue(e, "q", [quota("gpu", 1000, 1000)])
    occupy(e, "b0-r1-h0")
    e.submit(topo_gang("small", 1, "Required", RACK, t=0.0), 0.0)
    e.submit(topo_gang("pair", 2, "Required", RACK, t=1.0), 0.0)
    decisions = e.schedule(1.0)
    small, pair = admission(decisions, "small"), admission(decisions, "pair")
    assert small is not None and nodes_of(small)[0].startswith("b0-r0-")
    assert pair is None


def test_preferred_falls_back_to_the_level_above_then_to_few_domains() -> None:
    e = setup()
    for node in ("b0-r0-h0", "b0-r1-h0", "b1-r0-h0", "b1-r1-h1"):
        occupy(e, node)  # one free host per rack
    e.submit(topo_gang("two", 2, "Preferred", RACK), 0.0)
    adm = admission(e.schedule(1.0), "two")
    assert adm is not None
    assert {node.split("-")[0] for node in nodes_of(adm)} == {"b0"}  # one block, two racks
    e.submit(topo_gang("two-more", 2, "Preferred", RACK, t=1.0), 1.0)
    adm = admission(e.schedule(2.0), "two-more")
    assert adm is not None and len(nodes_of(adm)) == 2


def test_slices_each_fit_one_domain_of_the_slice_level() -> None:
    """4 pods in one block, in slices of 2 per rack. Block b0 has 4 free hosts but only one rack
    with 2 of them (1 + 1 + 2): it cannot hold two slices, so the gang goes to b1 (best fit alone
    would have chosen b0, the fuller block), two pods per rack."""
    e = setup(racks=3)
    occupy(e, "b0-r0-h0")
    occupy(e, "b0-r1-h0")
    e.submit(topo_gang("sliced", 4, "Required", BLOCK, slice_level=RACK, slice_size=2), 0.0)
    adm = admission(e.schedule(1.0), "sliced")
    assert adm is not None
    nodes = nodes_of(adm)
    assert all(node.startswith("b1-") for node in nodes), nodes
    racks = [node.rsplit("-h", 1)[0] for node in nodes]
    assert sorted(racks.count(rack) for rack in set(racks)) == [2, 2], nodes


def test_a_level_the_flavor_does_not_have_and_a_flavor_without_topology_are_named() -> None:
    e = setup()
    e.submit(topo_gang("odd", 1, "Required", "example.com/zone"), 0.0)
    assert admission(e.schedule(1.0), "odd") is None
    view = e.workload("ns/odd")
    assert view is not None and "'example.com/zone', which is not a level of Topology 'default'" in view.message
    plain = setup(topology=False)
    plain.submit(topo_gang("rack", 1, "Required", RACK), 0.0)
    assert admission(plain.schedule(1.0), "rack") is None
    view = plain.workload("ns/rack")
    assert view is not None and "has no Topology (spec.topologyName)" in view.message


def test_a_waiting_topology_gang_is_retried_when_one_pod_s_worth_frees_in_its_domain() -> None:
    """Every rack has one free host (4 free in all): a two-pod rack gang waits; one more host
    free in one rack lets it in at once, although far fewer than its two pods came free."""
    e = setup()
    for node in ("b0-r0-h0", "b0-r1-h0", "b1-r0-h0", "b1-r1-h0"):
        occupy(e, node)
    e.submit(topo_gang("pair", 2, "Required", RACK), 0.0)
    assert admission(e.schedule(1.0), "pair") is None
    e.delete_pod("other/b1-r0-h0")
    adm = admission(e.schedule(2.0), "pair")
    assert adm is not None and nodes_of(adm) == ["b1-r0-h0", "b1-r0-h1"]


def test_a_queue_that_checks_no_nodes_does_not_admit_a_topology_gang() -> None:
    e = engine()
    fleet(e)
    add_queue(e, "q", [quota("gpu", 1000, 1000)], mode="QuotaOnly")
    e.submit(topo_gang("rack", 1, "Required", RACK), 0.0)
    assert admission(e.schedule(1.0), "rack") is None
    view = e.workload("ns/rack")
    assert view is not None and "checks no nodes (admissionMode QuotaOnly)" in view.message, view.message


def test_exclusive_slices_each_get_a_domain_of_their_own() -> None:
    """Two child Jobs of 1 pod with exclusive racks (a JobSet's exclusive-topology): never two in
    one rack, although one rack has room for both."""
    e = setup(blocks=1)
    occupy(e, "b0-r1-h0")  # rack b0-r1 has room for one, b0-r0 for two
    request = TopologyRequest("Unconstrained", None, slice_level=RACK, slice_size=1, exclusive=True)
    e.submit(WorkloadSpec("ns/jobs", "ns", "q", [PodSetSpec("w", 2, {"cpu": 1000, GPU: 8}, topology=request)]), 0.0)
    adm = admission(e.schedule(1.0), "jobs")
    assert adm is not None
    racks = sorted(node.rsplit("-h", 1)[0] for node in nodes_of(adm))
    assert racks == ["b0-r0", "b0-r1"], racks
    e.submit(WorkloadSpec("ns/more", "ns", "q", [PodSetSpec("w", 2, {"cpu": 1000, GPU: 8}, topology=request)]), 1.0)
    assert admission(e.schedule(2.0), "more") is None  # one free host left, in one rack


def test_preemption_picks_victims_that_free_room_in_one_domain() -> None:
    """A high-priority gang that requires one rack preempts the two low-priority gangs of the rack
    it can have, not the newest one, whose rack a pod outside any queue keeps too full."""
    from gangq.core import Eviction, PreemptionSpec

    e = engine()
    fleet(e, blocks=1, racks=2, hosts=2)
    add_queue(e, "q", [quota("gpu", 1000, 1000)], preemption=PreemptionSpec(within_cluster_queue="LowerPriority"))
    occupy(e, "b0-r0-h0")
    occupy(e, "b0-r0-h1")
    placed: dict[str, list[str]] = {}
    for n in range(3):
        if n == 2:
            e.delete_pod("other/b0-r0-h0")
        spec = WorkloadSpec(f"ns/low{n}", "ns", "q", [PodSetSpec("w", 1, {"cpu": 1000, GPU: 8})],
                            creation_time=float(n), priority=0)
        e.submit(spec, float(n))
        adm = admission(e.schedule(n + 0.5), f"low{n}")
        assert adm is not None
        placed[f"low{n}"] = nodes_of(adm)
    assert placed == {"low0": ["b0-r1-h0"], "low1": ["b0-r1-h1"], "low2": ["b0-r0-h0"]}
    high = topo_gang("high", 2, "Required", RACK, t=10.0)
    high.priority = 100
    e.submit(high, 10.0)
    evicted = sorted(d.workload for d in e.schedule(11.0) if isinstance(d, Eviction))
    assert evicted == ["ns/low0", "ns/low1"], evicted
    for n in range(2):
        e.eviction_done(f"ns/low{n}", 12.0)
    adm = admission(e.schedule(12.5), "high")
    assert adm is not None and nodes_of(adm) == ["b0-r1-h0", "b0-r1-h1"]


def test_pods_over_several_domains_get_one_domain_each_in_the_admission() -> None:
    """The shared domain says too little when slices or a preferred placement span several
    domains of the requested level: the admission lists each domain with its pods (the shell
    assigns them pod by pod); a pod set in one domain of its level lists none."""
    e = setup()
    e.submit(topo_gang("sliced", 4, "Required", BLOCK, slice_level=RACK, slice_size=2), 0.0)
    e.submit(topo_gang("pair", 2, "Required", RACK, t=1.0), 1.0)
    decisions = e.schedule(2.0)
    sliced, pair = admission(decisions, "sliced"), admission(decisions, "pair")
    assert sliced is not None and pair is not None
    (ps,) = sliced.pod_sets
    assert set(ps.topology) == {BLOCK}
    block = ps.topology[BLOCK]
    assert ps.domains == [({BLOCK: block, RACK: f"{block}-r0"}, 2), ({BLOCK: block, RACK: f"{block}-r1"}, 2)]
    assert pair.pod_sets[0].domains == [] and set(pair.pod_sets[0].topology) == {BLOCK, RACK}

    spread = setup(blocks=1, racks=2, hosts=2)
    spread.submit(topo_gang("three", 3, "Preferred", RACK), 0.0)
    adm = admission(spread.schedule(1.0), "three")
    assert adm is not None
    assert sorted(n for _, n in adm.pod_sets[0].domains) == [1, 2]
    assert all(set(labels) == {BLOCK, RACK} for labels, _ in adm.pod_sets[0].domains)
