"""A ClusterQueue's demand index (which queued gangs could fit what is available) against a
brute-force reading of its contract, over random arrivals, departures and bounds."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangq.core import ClusterQueueSpec, PodSetSpec, WorkloadSpec
from gangq.core.demand import OrderKey
from gangq.core.queue import ClusterQueueState, Workload
from gangq.core.quota import QuotaNode

GPU = "nvidia.com/gpu"
RESOURCES = ("cpu", "memory", GPU)

# A gang: which resources its single pod requests (a bit mask over RESOURCES), pods, and a
# per-pod amount of each (small ranges, so that equal totals and bounds right at a total are
# common; independent, so that the resource that selects is not always the one that filters).
# Few resource sets, most of them common, so that a class often holds several gangs.
gangs = st.tuples(
    st.sampled_from([1, 1, 3, 3, 7, 7, 0, 6]), st.integers(1, 4), st.lists(st.integers(1, 3), min_size=3, max_size=3)
)
bounds = st.lists(st.dictionaries(st.sampled_from(RESOURCES), st.integers(0, 14), max_size=3), min_size=0, max_size=3)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), gangs, st.booleans()),
        st.tuples(st.just("discard"), st.integers(0, 40), st.just(False)),
        st.tuples(st.just("query"), bounds, st.just(False)),
    ),
    max_size=60,
)


def _reference(queued: dict[str, Workload], limits: list[dict[str, int]]) -> list[OrderKey]:
    """Every queued gang whose total of each resource it requests is at most one bound's amount
    of it (a resource missing from the bound: 0), in queue order."""
    return sorted(
        wl.order_key
        for wl in queued.values()
        if any(all(v <= bound.get(r, 0) for r, v in wl.totals.items()) for bound in limits)
    )


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_candidates_match_the_brute_force_reading(
    script: list[tuple[str, object, bool]],
) -> None:
    """The index's shortcuts (a list whose smallest total exceeds the bound rules every gang out,
    one whose largest is within it rules none out, the most selective resource scans) must
    return exactly the gangs that fit, whatever resources each gang requests."""
    cq = ClusterQueueState(ClusterQueueSpec("cq", []), QuotaNode("cq", False))
    queued: dict[str, Workload] = {}
    seq = 0
    for kind, arg, flag in script:
        if kind == "add":
            mask, pods, amounts = arg  # type: ignore[misc]
            requests = {r: amounts[i] for i, r in enumerate(RESOURCES) if mask >> i & 1}
            seq += 1
            spec = WorkloadSpec(f"ns/w{seq}", "ns", "lq", [PodSetSpec("main", pods, requests)], creation_time=seq)
            wl = Workload(spec, seq, 0.0)
            (cq.push_inadmissible if flag else cq.push)(wl)
            queued[wl.key] = wl
        elif kind == "discard":
            if queued:
                key = sorted(queued)[int(arg) % len(queued)]  # type: ignore[call-overload]
                cq.discard(queued.pop(key))
        else:
            limits: list[dict[str, int]] = arg  # type: ignore[assignment]
            assert cq.candidates(limits) == _reference(queued, limits)
            short: list[tuple[int, str, int]] = []
            assert cq.candidates(limits, short) == _reference(queued, limits)
            if not _reference(queued, limits) and all(resource for _, resource, _ in short):
                # What IncrementalRetry.note_classes_short relies on: for every gang and every bound, one
                # entry names a resource the gang needs more of than the bound allows.
                for wl in queued.values():
                    for i, bound in enumerate(limits):
                        assert any(
                            j == i and resource in wl.totals and wl.totals[resource] >= least > bound.get(resource, 0)
                            for j, resource, least in short
                        )
    for resource in RESOURCES:  # each resource's own list selects, at every threshold
        for limit in range(13):
            only = [{**{r: 1 << 40 for r in RESOURCES}, resource: limit}]
            assert cq.candidates(only) == _reference(queued, only)
    everything = [{r: 1 << 40 for r in RESOURCES}]
    assert cq.candidates(everything) == sorted(wl.order_key for wl in queued.values())
    assert cq.candidates([{}]) == _reference(queued, [{}])
