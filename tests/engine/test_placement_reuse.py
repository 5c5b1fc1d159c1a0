"""A gang's placement is kept and charged again without a search only while the node capacity is
exactly what it was found in (Placement.place): a pod bound for real, a what-if that another gang
committed, or a node that came or went must each make the engine search again."""

from __future__ import annotations

from gangq.core import NodeSpec, PodInfo
from gangq.core.engine import Engine
from gangq.core.flavors import Assignment
from gangq.core.queue import Workload
from gangq.core.statement import Statement

from .builders import GPU, add_nodes, add_queue, engine, gang, quota


def _setup() -> tuple[Engine, Workload, Assignment]:
    e = engine()
    add_nodes(e, "a100", 2)
    add_queue(e, "q", [quota("a100", 64, 32)])
    e.submit(gang("job", "q", 2, 8), 0.0)
    e.submit(gang("other", "q", 1, 8), 0.0)
    wl = e.workloads["ns/job"]
    cq = e.cluster_queues["q"]
    (a,) = e.placement.assignments(cq, wl).assignments
    return e, wl, a


def _place(e: Engine, wl: Workload, a: Assignment) -> tuple[str, dict[tuple[int, str], int], int]:
    """A what-if placement, undone; with the GPUs it left free on each node while charged."""
    with Statement(e.quota, e.nodes):
        return e.placement.place(wl, a, None)


def _free_gpus(e: Engine) -> list[int]:
    return [e.nodes.nodes[f"a100-{i}"].free[GPU] for i in range(2)]


def test_a_kept_placement_is_charged_again_in_the_same_state() -> None:
    e, wl, a = _setup()
    first = _place(e, wl, a)
    assert first == ("", {(0, "a100-0"): 1, (0, "a100-1"): 1}, 2)
    assert wl.placement is not None
    with Statement(e.quota, e.nodes):
        assert e.placement.place(wl, a, None) == first
        assert _free_gpus(e) == [0, 0]  # charged again, not just answered
    assert _free_gpus(e) == [8, 8]  # and undone with the statement


def test_a_pod_bound_for_real_invalidates_the_kept_placement() -> None:
    e, wl, a = _setup()
    assert not _place(e, wl, a)[0]
    e.update_pod(PodInfo("ns/outsider", "a100-0", {GPU: 8}))
    why, _, placed = _place(e, wl, a)
    assert why and placed == 1


def test_a_committed_what_if_invalidates_the_kept_placement() -> None:
    e, wl, a = _setup()
    assert not _place(e, wl, a)[0]
    other = e.workloads["ns/other"]
    (b,) = e.placement.assignments(e.cluster_queues["q"], other).assignments
    with Statement(e.quota, e.nodes) as stmt:
        assert e.placement.place(other, b, None) == ("", {(0, "a100-0"): 1}, 1)
        stmt.commit()  # the other gang keeps its node
    why, _, placed = _place(e, wl, a)
    assert why and placed == 1


def test_a_node_change_invalidates_the_kept_placement() -> None:
    e, wl, a = _setup()
    assert not _place(e, wl, a)[0]
    e.upsert_node(NodeSpec("a100-1", {"cpu": 64_000, GPU: 4}, {"pool": "a100"}))
    why, _, placed = _place(e, wl, a)
    assert why and placed == 1
