"""NodeIndex best fit against a brute-force reading of its contract, over random capacity changes."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangq.core import NodeSpec
from gangq.core.chunks import SortedChunks
from gangq.core.nodes import NodeIndex, NodePool, NodeState

GPU = "nvidia.com/gpu"


def _reference(pool: NodePool, requests: dict[str, int]) -> NodeState | None:
    """best_fit as documented: the key resource with the fewest schedulable nodes that have
    enough of it selects (the first key resource on ties; every node has enough of a resource
    that is not requested, even one overcommitted on it); scan in key order (first key resource)
    or by that resource's free amount, then name; the first node that fits."""
    nodes = [n for n in pool.nodes.values() if n.schedulable]
    resources = pool.key_resources
    counts = [
        sum(1 for n in nodes if n.free.get(r, 0) >= requests[r]) if r in requests else len(nodes) for r in resources
    ]
    if min(counts) == 0:
        return None
    best = min(range(len(resources)), key=lambda i: (counts[i], i))
    if best == 0:
        order = sorted(nodes, key=lambda n: (*(n.free.get(r, 0) for r in resources), n.name))
    else:
        order = sorted(nodes, key=lambda n: (n.free.get(resources[best], 0), n.name))
    return next((n for n in order if n.fits(requests)), None)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(0, 23), st.integers(0, 3), st.integers(-3, 3)),
        st.tuples(st.just("query"), st.integers(0, 9), st.integers(0, 64), st.integers(0, 3)),
        st.tuples(st.just("remove"), st.integers(0, 23), st.just(0), st.just(0)),
        st.tuples(st.just("readd"), st.integers(0, 23), st.just(0), st.just(0)),
        st.tuples(st.just("burst"), st.integers(0, 23), st.integers(0, 3), st.integers(-1, 1)),
        # Far beyond what the index's bit fields were sized for: pods bound beyond allocatable,
        # a node replaced by a much larger one (the pool's entries are encoded again).
        st.tuples(st.just("overcommit"), st.integers(0, 23), st.integers(0, 3), st.sampled_from([-10**6, 10**6])),
        st.tuples(st.just("grow"), st.integers(0, 23), st.integers(2, 10**6), st.just(0)),
    ),
    max_size=120,
)

# Names of every length, prefixes of each other, not ASCII: the index orders them as str does.
NAMES = [
    "n", "n0", "n00", "n000", "a", "ab", "abc", "b", "z", "zz", "n1", "n10",
    "m", "é", "éa", "日本", "x-1", "x-10", "x-2", "y", "yy", "yyy", "q", "n01",
]  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_best_fit_matches_the_brute_force_reading(steps: list[tuple[str, int, int, int]]) -> None:
    """The lazily refreshed secondary lists, the histogram that decides when they are needed, and
    the stale nodes looked at beside the index must never change which node is chosen ("burst"
    changes many nodes of a pool at once, more than best_fit looks at without re-sorting)."""
    index = NodeIndex()
    specs = {}
    for i, name in enumerate(NAMES):
        alloc = {"cpu": 16_000 * (1 + i % 3), "memory": (20 + 7 * i) << 30}
        if i % 2:
            alloc[GPU] = 4
        specs[name] = NodeSpec(name, alloc, {"pool": "gpu" if i % 2 else "cpu"})
        index.upsert(specs[name])
    pod_shapes = [
        {"cpu": 1000, "memory": 3 << 30},
        {"cpu": 4000, "memory": 5 << 30},
        {"cpu": 500, "memory": 11 << 30, GPU: 1},
        {"memory": 17 << 30},
    ]
    for kind, a, b, c in steps:
        name = NAMES[a]
        node = index.nodes.get(name)
        if kind in ("alloc", "overcommit") and node is not None:
            index.allocate(node, pod_shapes[b], c)
        elif kind == "grow":
            spec = specs[name]
            index.upsert(NodeSpec(name, {r: v * b for r, v in spec.allocatable.items()}, spec.labels))
        elif kind == "burst":
            for other in list(index.nodes.values())[a:]:
                index.allocate(other, pod_shapes[b], c)
        elif kind == "remove":
            index.remove(name)
        elif kind == "readd" and node is None:
            index.upsert(specs[name])
        elif kind == "query":
            requests = {"cpu": 1500 * a, "memory": (3 << 28) * b}
            if c:
                requests[GPU] = c
            for pool in index.pools.values():
                assert pool.best_fit(requests) is _reference(pool, requests)


gpu_pool_ops = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(0, 39), st.integers(0, 5), st.integers(-1, 3)),
        st.tuples(st.just("query"), st.integers(0, 3), st.integers(0, 70), st.integers(0, 9)),
        st.tuples(st.just("refresh"), st.just(0), st.just(0), st.just(0)),
    ),
    max_size=150,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpu_pool_ops)
def test_a_scan_skips_nodes_that_lack_a_later_key_resource(steps: list[tuple[str, int, int, int]]) -> None:
    """A GPU pool scanned in key order (GPUs, then cpu, then memory free) for pods that fit the
    GPUs of many nodes but not their cpu or memory: best_fit jumps past runs of such nodes
    (NodePool._skip_to), and must still choose the node the brute-force reading does: the
    jump must not pass a node with exactly the missing amount, nor stop short of the next GPU
    level, nor jump when the node lacks only a resource the pod does not request."""
    index = NodeIndex()
    for i in range(40):
        cpu = (32_000, 64_000, 48_000)[i % 3]
        index.upsert(NodeSpec(f"g{i:02d}", {"cpu": cpu, "memory": (64 + 32 * (i % 4)) << 30, GPU: 8}, {"pool": "gpu"}))
        if i % 5:  # most nodes start with their GPUs taken and cpu to spare
            index.allocate(index.nodes[f"g{i:02d}"], {GPU: 1, "cpu": 1_000 * (i % 7)}, 8 - i % 3)
    (pool,) = index.pools.values()
    assert pool.key_resources == (GPU, "cpu", "memory")
    shapes = [
        {"cpu": 8_000, "memory": 8 << 30, GPU: 1},
        {"cpu": 2_000, "memory": 40 << 30, GPU: 1},
        {"cpu": 500, "memory": 1 << 30, GPU: 3},  # GPUs run out: few nodes have enough of them
        {"cpu": 16_000, "memory": 4 << 30},  # ... and of those, some lack cpu
        {"cpu": 500, "memory": 4 << 30, GPU: 0},
        {"memory": 20 << 30},  # ... or memory
    ]
    for kind, a, b, c in steps:
        if kind == "alloc":
            index.allocate(index.nodes[f"g{a:02d}"], shapes[b], c)
        elif kind == "refresh":
            pool._refresh()
        else:
            requests = {"cpu": 1_000 * b, "memory": (8 << 30) * c}
            if a:
                requests[GPU] = a
            if b == 70:
                requests["cpu"] = 10**9  # more than any node has: the jump carries to the next level
            assert pool.best_fit(requests) is _reference(pool, requests)
            del requests["memory"]
            assert pool.best_fit(requests) is _reference(pool, requests)


chunk_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 30), st.integers(0, 5)),
        st.tuples(st.just("remove"), st.integers(0, 200), st.just(0)),
        st.tuples(st.just("count"), st.integers(-1, 31), st.integers(0, 5)),
        st.tuples(st.just("discard"), st.integers(0, 30), st.integers(0, 5)),
    ),
    max_size=200,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunk_ops, st.integers(1, 4))
def test_sorted_chunks_behave_as_one_sorted_list(steps: list[tuple[str, int, int]], load: int) -> None:
    """The chunked index (node pools, ClusterQueues' queues) against a plain sorted list: splits,
    emptied chunks, counts, the first entry, the next entry and iteration from a probe across
    chunk boundaries (tiny loads, so that chunks split often)."""
    chunks = SortedChunks(load)
    plain: list[tuple[int, int, str]] = []
    serial = 0
    for kind, a, b in steps:
        if kind == "add":
            serial += 1
            entry = (a, b, f"n{serial:04d}")
            chunks.add(entry)
            plain.append(entry)
            plain.sort()
        elif kind == "remove":
            if plain:
                entry = plain.pop(a % len(plain))
                chunks.remove(entry)
        elif kind == "discard":
            # present or not (serials below the last one may be gone): one occurrence at most
            entry = (a, b, f"n{a * 7 % max(1, serial):04d}")
            if entry in plain:
                plain.remove(entry)
            chunks.discard(entry)
        else:
            probe = (a, b)
            tail = [e for e in plain if e >= probe]
            assert chunks.count_from(probe) == len(tail)
            assert chunks.count_below(probe) == len(plain) - len(tail)
            assert list(chunks.iter_from(probe)) == tail
            assert list(chunks.iter_until(probe)) == [e for e in plain if e <= probe]
            assert list(chunks.iter_until((a, b, "n9999"))) == [e for e in plain if e <= (a, b, "n9999")]
            # the next entry after a probe, and after an entry itself (a queue's retry walks so)
            assert chunks.after(probe) == next((e for e in plain if e > probe), None)
            for entry in plain[:: max(1, len(plain) // 7)]:
                assert chunks.after(entry) == next((e for e in plain if e > entry), None)
                assert list(chunks.iter_until(entry)) == [e for e in plain if e <= entry]
        assert len(chunks) == len(plain)
        if plain:
            assert chunks.first() == plain[0]
        assert all(0 < len(c) <= 2 * load for c in chunks.chunks)
        assert chunks.maxes == [c[-1] for c in chunks.chunks]
        assert chunks.sizes == [len(c) for c in chunks.chunks]
    assert list(chunks) == plain


def test_a_stale_node_is_looked_at_where_its_capacity_now_puts_it() -> None:
    """best_fit does not re-sort a few changed nodes first: a node whose capacity rose since it
    was indexed must not be chosen at its old place ahead of a tighter node that fits, and one
    whose capacity fell must not be skipped where it now comes first."""
    index = NodeIndex()
    for name, cpu in (("a", 15_000), ("b", 18_000), ("c", 30_000)):
        index.upsert(NodeSpec(name, {"cpu": cpu, "memory": 64 << 30}, {"pool": "cpu"}))
    (pool,) = index.pools.values()
    assert pool.best_fit({"cpu": 12_000}) is index.nodes["a"]
    index.allocate(index.nodes["a"], {"cpu": 1_000}, -5)  # a: 20 cpus free, indexed at 15
    assert pool.stale and pool.best_fit({"cpu": 12_000}) is index.nodes["b"]
    index.allocate(index.nodes["c"], {"cpu": 1_000}, 17)  # c: 13 cpus free, indexed at 30
    assert pool.best_fit({"cpu": 12_000}) is index.nodes["c"]
    assert pool.best_fit({"cpu": 19_000}) is index.nodes["a"]
    index.allocate(index.nodes["a"], {"cpu": 1_000}, 5)  # back where it is indexed
    assert pool.best_fit({"cpu": 19_000}) is None
    assert pool.best_fit({"cpu": 14_000}) is index.nodes["a"]


def test_a_node_overcommitted_on_a_resource_the_pod_does_not_request_can_take_it() -> None:
    """Bound pods may exceed a node's allocatable (free goes negative); a pod that does not
    request that resource still fits there, and best fit must not skip the node (hypothesis
    found the skip: the index was scanned from "at least 0 GPUs" for a cpu-only pod)."""
    index = NodeIndex()
    for name, cpu in (("g0", 8_000), ("g1", 16_000)):
        index.upsert(NodeSpec(name, {"cpu": cpu, "memory": 64 << 30, GPU: 4}, {"pool": "gpu"}))
    (pool,) = index.pools.values()
    index.allocate(index.nodes["g0"], {GPU: 1}, 5)  # 5 GPUs bound on a 4-GPU node
    pool._refresh()
    assert pool.best_fit({"cpu": 4_000}) is index.nodes["g0"]  # the tighter node, GPUs aside
    assert pool.best_fit({"cpu": 4_000, GPU: 1}) is index.nodes["g1"]
    assert pool.best_fit({"cpu": 4_000, GPU: 0}) is index.nodes["g1"]  # requested: -1 < 0


def test_nodes_with_equal_free_capacity_are_chosen_in_name_order() -> None:
    """The index encodes each entry as one int (NodePool.encode); among nodes with the same free
    amounts the name decides, as str comparison orders names (prefixes first, any length, not
    only ASCII), also after entries are encoded again for a longer name or a larger amount."""
    index = NodeIndex()
    order = sorted(NAMES)
    for name in reversed(NAMES):
        index.upsert(NodeSpec(name, {"cpu": 8_000, "memory": 16 << 30}, {"pool": "cpu"}))
    (pool,) = index.pools.values()
    # Much more cpu than the fields were sized for, and the longest name: chosen last.
    index.upsert(NodeSpec("a-longer-name-than-any-other", {"cpu": 8_000 << 20, "memory": 16 << 30}, {"pool": "cpu"}))
    chosen = []
    while pool.nodes:
        node = pool.best_fit({"cpu": 1_000})
        assert node is not None
        chosen.append(node.name)
        index.remove(node.name)
    assert chosen == [*order, "a-longer-name-than-any-other"]


def test_a_node_describes_a_status_update_but_not_a_change_of_what_it_offers() -> None:
    """An unchanged spec (a status update) retries nothing; a change of capacity, labels, taints or
    schedulability can leave a head unable to fit even an empty cluster (Capacity.nodes_changed)."""
    from gangq.core import Taint

    taints = [Taint("gpu", "yes", "NoSchedule"), Taint("zone", "a", "NoExecute")]
    node = NodeState(NodeSpec("n", {"cpu": 8000}, {"pool": "a"}, taints))
    assert node.describes(NodeSpec("n", {"cpu": 8000}, {"pool": "a"}, list(reversed(taints))))
    assert not node.describes(NodeSpec("n", {"cpu": 4000}, {"pool": "a"}, taints))
    assert not node.describes(NodeSpec("n", {"cpu": 8000}, {"pool": "b"}, taints))
    assert not node.describes(NodeSpec("n", {"cpu": 8000}, {"pool": "a"}, taints[:1]))
    assert not node.describes(NodeSpec("n", {"cpu": 8000}, {"pool": "a"}, taints, unschedulable=True))
