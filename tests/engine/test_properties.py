"""Property-based tests: random event sequences, invariants checked after every step."""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangq.core import (
    Admission,
    ClusterQueueSpec,
    Engine,
    EngineConfig,
    Eviction,
    FlavorQuotas,
    FlavorSpec,
    LabelSelector,
    LocalQueueSpec,
    NodeSpec,
    PodInfo,
    PodSetSpec,
    PreemptionSpec,
    ResourceGroup,
    ResourceQuota,
    WorkloadSpec,
)
from gangq.core.retry import FullRetry

GPU = "nvidia.com/gpu"
FLAVORS = ("a", "b")

queue_st = st.tuples(
    st.integers(0, 16),  # gpu nominal in flavor a
    st.integers(0, 16),  # gpu nominal in flavor b
    st.one_of(st.none(), st.integers(0, 8)),  # borrowing limit
    st.sampled_from(["BestEffortFIFO", "StrictFIFO"]),
    st.sampled_from(["Never", "LowerPriority"]),
    st.sampled_from(["Never", "Any"]),
    st.sampled_from(["QuotaAndNodes", "QuotaOnly"]),
)
gang_st = st.tuples(
    st.integers(0, 2),  # queue index
    st.lists(st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(0, 4)), min_size=1, max_size=2),
    st.integers(0, 3),  # priority
    st.booleans(),  # use min_member
)
event_st = st.one_of(
    st.tuples(st.just("submit"), gang_st),
    st.tuples(st.just("schedule"), st.integers(1, 30)),
    st.tuples(st.just("finish"), st.integers(0, 1000)),
    st.tuples(st.just("evicted"), st.integers(0, 1000)),
    st.tuples(st.just("bind"), st.integers(0, 1000)),
    st.tuples(st.just("node"), st.integers(0, 1000)),
)


class World:
    """Drives an Engine and checks its decisions against an independent model."""

    def __init__(
        self,
        queues: list[tuple[object, ...]],
        nodes: list[tuple[int, int]],
        fair: bool,
        engine_class: type[Engine] = Engine,
        starvation_timeout: float = EngineConfig().starvation_timeout,
    ) -> None:
        self.engine = engine_class(
            EngineConfig(
                pods_ready_timeout=50,
                backoff_base=5,
                backoff_max=20,
                fair_sharing=fair,
                starvation_timeout=starvation_timeout,
            )
        )
        self.log: list[str] = []
        e = self.engine
        e.upsert_namespace("ns", {})
        for f in FLAVORS:
            e.upsert_flavor(FlavorSpec(f, {"pool": f}))
        self.alloc: dict[str, dict[str, int]] = {}
        for i, (fi, gpus) in enumerate(nodes):
            name = f"n{i}"
            alloc = {"cpu": 8000, GPU: gpus}
            self.alloc[name] = alloc
            e.upsert_node(NodeSpec(name, alloc, {"pool": FLAVORS[fi % 2]}))
        self.limits: dict[str, dict[tuple[str, str], tuple[int, int | None]]] = {}
        for qi, (ga, gb, blim, strategy, within, reclaim, mode, *cpu) in enumerate(queues):
            name = f"q{qi}"
            flavors = []
            self.limits[name] = {}
            for f, g in (("a", ga), ("b", gb)):
                flavors.append(
                    FlavorQuotas(
                        f,
                        [
                            ResourceQuota("cpu", cpu[0] if cpu else 64000),  # type: ignore[arg-type]
                            ResourceQuota(GPU, g, borrowing_limit=blim),
                        ],
                    )
                )
                self.limits[name][(f, GPU)] = (g, blim)  # type: ignore[assignment]
            e.upsert_cluster_queue(
                ClusterQueueSpec(
                    name,
                    [ResourceGroup(["cpu", GPU], flavors)],
                    cohort="pool",
                    queueing_strategy=strategy,  # type: ignore[arg-type]
                    namespace_selector=LabelSelector(),
                    preemption=PreemptionSpec(within_cluster_queue=within, reclaim_within_cohort=reclaim),  # type: ignore[arg-type]
                    admission_mode=mode,  # type: ignore[arg-type]
                )
            )
            e.upsert_local_queue(LocalQueueSpec("ns", name, name))
        self.modes = {f"q{i}": q[6] for i, q in enumerate(queues)}
        self.specs: dict[str, WorkloadSpec] = {}
        self.admissions: dict[str, Admission] = {}
        self.evicting: set[str] = set()
        self.bound: dict[str, tuple[str, str, dict[str, int]]] = {}  # pod -> (workload, node, requests)
        self.now = 0.0
        self.n = 0

    def apply(self, event: tuple[str, object]) -> None:
        kind, arg = event
        e = self.engine
        if kind == "submit":
            qi, pod_sets, prio, use_min, *limit = arg  # type: ignore[misc]
            self.n += 1
            key = f"ns/w{self.n}"
            # g < 0: the pods request no GPUs at all (not even 0)
            specs = [
                PodSetSpec(f"p{i}", c, {"cpu": cpu * 500, GPU: g} if g >= 0 else {"cpu": cpu * 500})
                for i, (c, cpu, g) in enumerate(pod_sets)
            ]
            total = sum(c for c, _, _ in pod_sets)
            spec = WorkloadSpec(
                key,
                "ns",
                f"q{qi}",
                specs,
                priority=prio,
                creation_time=self.now,
                min_member=max(1, total - 1) if use_min else None,
                runtime_limit=limit[0] if limit else None,
            )
            self.specs[key] = spec
            e.submit(spec, self.now)
        elif kind == "schedule":
            self.now += arg  # type: ignore[operator]
            admitted_now: set[str] = set()
            for d in e.schedule(self.now):
                self.log.append(repr(d))
                if isinstance(d, Admission):
                    self.check_admission(d)
                    self.admissions[d.workload] = d
                    admitted_now.add(d.workload)
                elif isinstance(d, Eviction):
                    assert d.workload in self.admissions
                    # a gang is not admitted and evicted in one call: its pods would start on
                    # room another gang is promised (the write to stop it races the one to start it)
                    assert d.workload not in admitted_now, (d, self.log[-10:])
                    self.evicting.add(d.workload)
        elif kind in ("finish", "evicted", "bind") and self.admissions:
            keys = sorted(self.admissions)
            key = keys[arg % len(keys)]  # type: ignore[operator]
            if kind == "finish":
                e.finish(key, self.now)
                self.forget(key)
                self.specs.pop(key, None)
            elif kind == "evicted" and key in self.evicting:
                e.eviction_done(key, self.now)
                self.forget(key)
            elif kind == "bind" and key not in self.evicting:
                adm = self.admissions[key]
                for ps in adm.pod_sets:
                    for node, count in ps.placement.items():
                        for i in range(count):
                            pod = f"{key}-{ps.name}-{node}-{i}"
                            if pod not in self.bound:
                                self.bound[pod] = (key, node, dict(ps.requests))
                                e.update_pod(
                                    PodInfo(pod, node, ps.requests, workload=key, pod_set=ps.name, running=True)
                                )
        elif kind == "delete":
            # A pending gang withdrawn (kubectl delete before admission): the engine forgets it.
            pending = sorted(k for k in self.specs if k not in self.admissions)
            if pending:
                key = pending[arg % len(pending)]  # type: ignore[operator]
                e.finish(key, self.now)
                self.specs.pop(key)
        elif kind == "node":
            names = sorted(self.alloc)
            name = names[arg % len(names)]  # type: ignore[operator]
            e.upsert_node(NodeSpec(name, self.alloc[name], {"pool": "a" if int(name[1:]) % 2 == 0 else "b"}))
        self.check_invariants()

    def forget(self, key: str) -> None:
        self.admissions.pop(key, None)
        self.evicting.discard(key)
        for pod in [p for p, (w, _, _) in self.bound.items() if w == key]:
            del self.bound[pod]

    def check_admission(self, d: Admission) -> None:
        spec = self.specs[d.workload]
        # Never a partial gang: every pod of every pod set is admitted and charged.
        assert {ps.name: ps.count for ps in d.pod_sets} == {ps.name: ps.count for ps in spec.pod_sets if ps.count}
        usage: dict[tuple[str, str], int] = {}
        for ps in d.pod_sets:
            for r, v in ps.requests.items():
                fr = (ps.flavors[r], r)
                usage[fr] = usage.get(fr, 0) + v * ps.count
        assert usage == {k: v for k, v in d.usage.items() if v}
        if self.modes[d.cluster_queue] == "QuotaAndNodes":
            need = spec.min_member or spec.total_pods
            assert sum(sum(ps.placement.values()) for ps in d.pod_sets) >= need

    def check_invariants(self) -> None:
        e = self.engine
        e.check_invariants()
        # Quota: usage within nominal + borrowing limit, never negative.
        for name, limits in self.limits.items():
            view = e.cluster_queue(name)
            assert view is not None
            for fr, used in view.usage.items():
                assert used >= 0
                nominal, blim = limits.get(fr, (None, None))  # type: ignore[assignment]
                if nominal is not None and blim is not None:
                    assert used <= nominal + blim, (name, fr, used)
        # Nodes: bound pods + planned-not-bound pods of admitted gangs never exceed allocatable.
        load: dict[str, dict[str, int]] = {n: {} for n in self.alloc}
        bound_count: dict[tuple[str, str, str], int] = {}
        for pod, (wl, node, req) in self.bound.items():
            for r, v in req.items():
                load[node][r] = load[node].get(r, 0) + v
            ps_name = pod[len(wl) + 1 :].split("-")[0]
            bound_count[(wl, ps_name, node)] = bound_count.get((wl, ps_name, node), 0) + 1
        for key, adm in self.admissions.items():
            if self.modes[adm.cluster_queue] != "QuotaAndNodes":
                continue
            for ps in adm.pod_sets:
                for node, count in ps.placement.items():
                    unbound = count - bound_count.get((key, ps.name, node), 0)
                    for r, v in ps.requests.items():
                        load[node][r] = load[node].get(r, 0) + v * unbound
        quota_only = any(self.modes[a.cluster_queue] == "QuotaOnly" for a in self.admissions.values())
        if not quota_only:
            for node, used in load.items():
                for r, v in used.items():
                    assert v <= self.alloc[node].get(r, 0), (node, r, v)
        # Every live workload is admitted/evicting or pending with a reason.
        for key in self.specs:
            view = e.workload(key)
            assert view is not None
            if view.state == "Pending":
                assert view.reason and view.message
            else:
                assert key in self.admissions


world_st = st.tuples(
    st.lists(queue_st, min_size=3, max_size=3),
    st.lists(st.tuples(st.integers(0, 1), st.integers(0, 8)), min_size=2, max_size=5),
    st.booleans(),
    st.lists(event_st, min_size=5, max_size=60),
)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(world_st)
def test_invariants_hold_after_every_event(
    world: tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]],
) -> None:
    queues, nodes, fair, events = world
    w = World(queues, nodes, fair)
    for event in events:
        w.apply(event)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(world_st)
def test_same_events_same_decisions(
    world: tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]],
) -> None:
    queues, nodes, fair, events = world
    logs = []
    for _ in range(2):
        w = World(queues, nodes, fair)
        for event in events:
            w.apply(event)
        logs.append(w.log)
    assert logs[0] == logs[1]


class UnfilteredEngine(Engine):
    """The engine with every retry shortcut off (:class:`~gangq.core.retry.FullRetry`): a retry
    tries every inadmissible gang in full, and freed capacity retries every queue waiting on nodes,
    whatever pool it came free in."""

    def __init__(self, config: EngineConfig | None = None) -> None:
        super().__init__(config, retry=FullRetry())


def _admissions_and_evictions(
    world: tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]],
    starvation_timeout: float = EngineConfig().starvation_timeout,
) -> list[list[str]]:
    """The decision logs (without pending-reason updates) of the engine and of UnfilteredEngine."""
    queues, nodes, fair, events = world
    logs = []
    for engine_class in (Engine, UnfilteredEngine):
        w = World(queues, nodes, fair, engine_class, starvation_timeout)
        for event in events:
            w.apply(event)
        logs.append([line for line in w.log if not line.startswith("PendingUpdate")])
    return logs


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(world_st)
def test_retry_shortcuts_change_no_decision(
    world: tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]],
) -> None:
    """The retry filters (demand index, exact quota filter, node-capacity bound) only
    skip gangs that would fail: with them off, the same events admit and evict exactly the same."""
    shortcuts, unfiltered = _admissions_and_evictions(world)
    assert shortcuts == unfiltered


def _random_world(seed: int) -> tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]]:
    """A long, busy event sequence: deep queues, frequent finishes, binds and node updates."""
    rnd = random.Random(seed)
    queues: list[tuple[object, ...]] = [
        (
            rnd.randint(0, 12),
            rnd.randint(0, 12),
            rnd.choice([None, rnd.randint(0, 8)]),
            rnd.choice(["BestEffortFIFO", "StrictFIFO"]),
            rnd.choice(["Never", "LowerPriority"]),
            rnd.choice(["Never", "Any"]),
            rnd.choice(["QuotaAndNodes", "QuotaAndNodes", "QuotaOnly"]),
        )
        for _ in range(3)
    ]
    nodes = [(rnd.randint(0, 1), rnd.randint(2, 8)) for _ in range(rnd.randint(3, 6))]
    events: list[tuple[str, object]] = []
    for _ in range(400):
        roll = rnd.random()
        if roll < 0.4:
            pod_sets = [(rnd.randint(1, 3), rnd.randint(1, 4), rnd.randint(0, 4)) for _ in range(rnd.randint(1, 2))]
            events.append(("submit", (rnd.randint(0, 2), pod_sets, rnd.randint(0, 3), rnd.random() < 0.3)))
        elif roll < 0.65:
            events.append(("schedule", rnd.randint(1, 30)))
        elif roll < 0.8:
            events.append(("finish", rnd.randint(0, 1000)))
        elif roll < 0.9:
            events.append(("bind", rnd.randint(0, 1000)))
        elif roll < 0.97:
            events.append(("evicted", rnd.randint(0, 1000)))
        else:
            events.append(("node", rnd.randint(0, 1000)))
    return queues, nodes, rnd.random() < 0.3, events


def _with_cpu_only_gangs(
    world: tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]], seed: int
) -> tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]]:
    """``world`` with tight CPU quotas and gangs that request no GPUs at all, most of them with one
    pod set: a queue then holds groups of gangs short of different resources (see
    IncrementalRetry.note_classes_short). After the first 100 events, two in three submissions are left
    out: a gang that joins a queue ends its screen, and the screens should get to last. The
    first two queues are BestEffortFIFO and may not preempt, as a screen requires. Its own random
    stream, so the world's other events stay as they are."""
    queues, nodes, fair, events = world
    rnd = random.Random(seed * 104729 + 7)
    queues = [
        (*((*q[:3], "BestEffortFIFO", "Never", "Never", *q[6:]) if i < 2 else q), rnd.choice([3000, 6000, 12000]))
        for i, q in enumerate(queues)
    ]
    out: list[tuple[str, object]] = []
    for i, (kind, arg) in enumerate(events):
        if kind == "submit":
            if i >= 100 and rnd.random() < 2 / 3:
                continue
            qi, pod_sets, *rest = arg  # type: ignore[misc]
            if rnd.random() < 0.8:
                pod_sets = pod_sets[:1]
            pod_sets = [(c, cpu, -1 if g == 0 or rnd.random() < 0.3 else g) for c, cpu, g in pod_sets]
            arg = (qi, pod_sets, *rest)
        out.append((kind, arg))
    return queues, nodes, fair, out


def _after_each_scheduling_call(seed: int, cpu_only: bool, starvation_timeout: float = 40.0) -> Iterator[World]:
    """Random world ``seed`` (with CPU-only gangs if ``cpu_only``) through the engine, yielding the
    world after every scheduling call."""
    world = _random_world(seed)
    if cpu_only:
        world = _with_cpu_only_gangs(world, seed)
    queues, nodes, fair, events = world
    w = World(queues, nodes, fair, Engine, starvation_timeout)
    for event in events:
        w.apply(event)
        if event[0] == "schedule":
            yield w


def _with_deletions(
    world: tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]], seed: int
) -> tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]]:
    """``world`` with a pending gang deleted after about one event in eight (half of them the
    oldest pending gang, often a protected head). Deleting a protected head asks its queue and
    its cohort for a full retry (Routing.unqueue); no other world deletes a gang that waits. Its
    own random stream, so the world's other events stay as they are."""
    queues, nodes, fair, events = world
    rnd = random.Random(seed * 7919 + 3)
    out: list[tuple[str, object]] = []
    for event in events:
        out.append(event)
        if rnd.random() < 1 / 8:
            out.append(("delete", 0 if rnd.random() < 0.5 else rnd.randint(1, 1000)))
    return queues, nodes, fair, out


@pytest.mark.parametrize("seed", range(30))
def test_retry_shortcuts_change_no_decision_when_pending_gangs_are_deleted(seed: int) -> None:
    shortcuts, unfiltered = _admissions_and_evictions(_with_deletions(_random_world(seed), seed))
    assert sum(line.startswith("Admission") for line in shortcuts) > 10
    assert shortcuts == unfiltered


@pytest.mark.parametrize("seed", range(30, 45))
def test_retry_shortcuts_change_no_decision_when_pending_gangs_are_deleted_and_heads_starve(seed: int) -> None:
    world = _with_deletions(_with_cpu_only_gangs(_random_world(seed), seed), seed)
    shortcuts, unfiltered = _admissions_and_evictions(world, starvation_timeout=30)
    assert shortcuts == unfiltered


@pytest.mark.parametrize("seed", range(40))
def test_retry_shortcuts_change_no_decision_with_cpu_only_gangs(seed: int) -> None:
    """Same property where queues hold CPU-only and GPU gangs under tight CPU quotas, so that
    groups of gangs are short of different resources and the per-group screen skips retries."""
    shortcuts, unfiltered = _admissions_and_evictions(_with_cpu_only_gangs(_random_world(seed), seed))
    assert sum(line.startswith("Admission") for line in shortcuts) > 10
    assert shortcuts == unfiltered


@pytest.mark.parametrize("seed", range(40, 60))
def test_retry_shortcuts_change_no_decision_with_cpu_only_gangs_when_heads_starve(seed: int) -> None:
    shortcuts, unfiltered = _admissions_and_evictions(
        _with_cpu_only_gangs(_random_world(seed), seed), starvation_timeout=30
    )
    assert shortcuts == unfiltered


def test_retry_shortcuts_change_no_decision_when_a_displaced_head_held_gangs_back() -> None:
    """World 172 with CPU-only gangs at 40 s decided differently from UnfilteredEngine once gangs
    short of nodes in one flavor waited for nodes: a new gang displaced a starving head, and the
    gangs the old head had held back waited for whichever retry of their queue came next, which
    depended on the shortcuts. They are now looked at in the cycle that displaces the head."""
    shortcuts, unfiltered = _admissions_and_evictions(
        _with_cpu_only_gangs(_random_world(172), 172), starvation_timeout=40
    )
    assert shortcuts == unfiltered


def test_a_head_displaced_by_a_new_gang_gets_its_queue_a_full_retry() -> None:
    """World 136 at 60 s: q0's starving head w10 held back w18; w24 (priority 2) arrived, failed
    and took w10's place without having waited. Freed node capacity then retried q0, and the node
    retry looked only at the gangs that had failed the node check, not at w18, which trying every
    gang admitted (see IncrementalRetry.walks_candidates)."""
    shortcuts, unfiltered = _admissions_and_evictions(
        _with_cpu_only_gangs(_random_world(136), 136), starvation_timeout=60
    )
    assert shortcuts == unfiltered


def test_a_gang_behind_a_head_that_a_lender_keeps_out_is_tried() -> None:
    """World 466 at 40 s: q1's starving head w35 could not borrow while q0 claimed its lent quota
    back, so gangs behind w35 that would not delay it could pass. The retry skipped w28 as held
    back, asking for no retry: a head that holds its queue retries it when admitted, but this one
    held nothing for sure. Tried, w28 failed the node check, so freed nodes retried q1, which
    then admitted three gangs (see IncrementalRetry.fails_again)."""
    shortcuts, unfiltered = _admissions_and_evictions(
        _with_cpu_only_gangs(_random_world(466), 466), starvation_timeout=40
    )
    assert shortcuts == unfiltered


@pytest.mark.parametrize("seed", range(60))
def test_retry_shortcuts_change_no_decision_long_runs(seed: int) -> None:
    """Same property as above on long busy runs, where queues are deep and retries frequent (the
    World checks every invariant after every event of both runs, too)."""
    shortcuts, unfiltered = _admissions_and_evictions(_random_world(seed))
    assert sum(line.startswith("Admission") for line in shortcuts) > 10
    assert shortcuts == unfiltered


def test_a_head_keeps_its_claim_while_it_is_tried() -> None:
    """While a queue's protected head is tried, the lent quota it claims back stays claimed for
    the reservations worked out meanwhile. In this long random world (starvation timeout 40 s,
    so heads starve), q1's head w13 was tried with its claim dropped; the reservation of q2's
    starving head w9, worked out then, said that w9 could borrow and fit now, and a later gang
    of q2 passed w9 in the engine that tries every gang, while the engine with the retry
    shortcuts had rightly ended q2's retry at w9 (it cannot borrow while w13 claims): the two
    engines admitted differently from the 58th event on."""
    shortcuts, unfiltered = _admissions_and_evictions(_random_world(7), starvation_timeout=40)
    assert sum(line.startswith("Admission") for line in unfiltered) > 10
    assert shortcuts == unfiltered


def test_a_retry_does_not_stop_at_a_head_that_only_a_claim_keeps_out() -> None:
    """A retry may stop at a starving head for the rest of the cycle only if the head cannot fit
    later in it. One that only a lender's claim keeps from borrowing can: the claim ends for
    reservations when the lender's gang is admitted. In this long random world (starvation
    timeout 40 s), q0's starving head w64 borrowed what q2 claimed for w81; q2 admitted w81, and
    the engine that tries every gang then admitted w58 behind w64 (it does not delay w64), while
    the engine with the retry shortcuts had ended q0's retry at w64 when the cycle began."""
    shortcuts, unfiltered = _admissions_and_evictions(_random_world(9), starvation_timeout=40)
    assert sum(line.startswith("Admission") for line in unfiltered) > 10
    assert shortcuts == unfiltered


# Long random worlds with a starvation timeout far below the default, so that heads starve, in
# which the engine with the retry shortcuts decided differently from UnfilteredEngine; each id
# names what the engine got wrong there.
_STARVING_WORLDS = [
    pytest.param(12, 60, id="12-promise-first-worked-out"),
    pytest.param(115, 60, id="115-promise-first-worked-out"),
    pytest.param(24, 60, id="24-preemptor-reservation-cached"),
    pytest.param(120, 60, id="120-preemptor-reservation-cached"),
    pytest.param(142, 60, id="142-preemptor-reservation-cached"),
    pytest.param(144, 60, id="144-preemptor-reservation-cached"),
    pytest.param(127, 60, id="127-reservation-cached-across-heads"),
    pytest.param(16, 60, id="16-eviction-retries-no-preemptor"),
    pytest.param(227, 60, id="227-node-change-retries-no-held-queue"),
    pytest.param(229, 20, id="229-claimed-option-forgotten"),
]


@pytest.mark.parametrize(("seed", "starvation_timeout"), _STARVING_WORLDS)
def test_retry_shortcuts_change_no_decision_when_heads_starve(seed: int, starvation_timeout: float) -> None:
    """The engine with the retry shortcuts works reservations out at other moments than the
    engine that tries every gang, so nothing a reservation decides may depend on when it was
    worked out. Before these fixes, in these worlds:

    - promise-first-worked-out: a head's promised time was the first reservation time anybody
      worked out (one retry worked out a preemptor's "now" while its victims stopped; the other
      engine never did), so a minute later one engine held gangs behind it back as "promise
      slipped" and the other let them pass. The promise is now the time a gang was first
      checked against it.
    - preemptor-reservation-cached: a head's reservation, worked out before it preempted, stayed
      cached (same capacity version) though its stopping victims now count as released for it.
    - reservation-cached-across-heads: a reservation stayed cached while other queues' protected
      heads changed (its scope and the lenders' claims depend on them).
    - eviction-retries-no-preemptor: a gang evicted by its pods-ready timeout can be taken as a
      victim at once ("already evicted first"), but no queue that may preempt was retried for it;
      the other engine happened to retry one on an unrelated node event and preempted.
    - node-change-retries-no-held-queue: a node changed pools, its queue's starving head could no
      longer fit even an empty cluster and so held nothing back, but only capacity that came free
      retried queues.
    - claimed-option-forgotten: a gang with one option that a lender claimed back and another that
      failed the node check counted as short of capacity, so its queue's retry stopped at it for
      the rest of the cycle; the lender's gang was admitted later in that cycle and it fit.
    """
    shortcuts, unfiltered = _admissions_and_evictions(_random_world(seed), starvation_timeout=starvation_timeout)
    assert sum(line.startswith("Admission") for line in unfiltered) > 10
    assert shortcuts == unfiltered


@pytest.mark.parametrize("seed", range(300, 340))
def test_retry_shortcuts_change_no_decision_when_heads_starve_fast(seed: int) -> None:
    """Same property on fresh worlds (not the ones the fixes above were found in), with heads that
    starve after 30 s."""
    shortcuts, unfiltered = _admissions_and_evictions(_random_world(seed), starvation_timeout=30)
    assert any(line.startswith("Admission") for line in unfiltered)
    assert shortcuts == unfiltered


def _with_runtime_limits(
    world: tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]],
    seed: int,
    share: float,
) -> tuple[list[tuple[object, ...]], list[tuple[int, int]], bool, list[tuple[str, object]]]:
    """``world`` with a runtime limit (10 to 150 s) on about ``share`` of its gangs: reservations
    then have times, gangs backfill ahead of heads, and promises slip (the events finish gangs at
    random, so most overrun their limits). Its own random stream: the world's events stay the same."""
    queues, nodes, fair, events = world
    rnd = random.Random(seed * 7919 + 1)
    out: list[tuple[str, object]] = []
    for kind, arg in events:
        if kind == "submit":
            limit = rnd.choice([10.0, 30.0, 60.0, 150.0]) if rnd.random() < share else None
            arg = (*arg, limit)  # type: ignore[misc]
        out.append((kind, arg))
    return queues, nodes, fair, out


@pytest.mark.parametrize("seed", [119, *range(340, 370)])
def test_retry_shortcuts_change_no_decision_with_runtime_limits(seed: int) -> None:
    """Every gang with a runtime limit and heads that starve after 20 s. In world 119 a gang held
    back by a starving head was skipped (the shortcut) and its queue registered to be retried on
    any capacity change, as a superset of what trying it would ask for; the queue may preempt, so
    that extra retry was also a preemption attempt, and a different gang preempted a minute later
    than in the engine that tries every gang. Such queues now try the gang."""
    world = _with_runtime_limits(_random_world(seed), seed, 1.0)
    shortcuts, unfiltered = _admissions_and_evictions(world, starvation_timeout=20)
    assert any(line.startswith("Admission") for line in unfiltered)
    assert shortcuts == unfiltered


@pytest.mark.parametrize(("seed", "timeout", "limits"), [(7, 40.0, 0.0), (281, 60.0, 0.5)])
def test_retry_shortcuts_change_no_decision_when_claims_give_way(seed: int, timeout: float, limits: float) -> None:
    """Worlds with CPU-only gangs in which a claim gives way to another claimant's gang (see
    Claims.reclaimer_for). In world 281 (runtime limits on half the gangs, 60 s) the queue
    whose claim gave way claimed through a second gang, a new head, and the retry's check of
    whether any claim gave way looked only at the first: the engine that tries every gang
    admitted the claimant's gang, and the retry never tried it. World 7 at 40 s found, under a
    wider version of the rule (every claimant's gang could borrow), that a retry dropped that
    gang when the bounds of a flavor it could not have shrank (IncrementalRetry.keys keeps it)."""
    world = _with_cpu_only_gangs(_random_world(seed), seed)
    if limits:
        world = _with_runtime_limits(world, seed, limits)
    shortcuts, unfiltered = _admissions_and_evictions(world, starvation_timeout=timeout)
    assert sum(line.startswith("Admission") for line in unfiltered) > 10
    assert shortcuts == unfiltered


@pytest.mark.parametrize(("seed", "timeout"), [(459, 40.0), (459, 60.0), (327, 60.0)])
def test_retry_shortcuts_change_no_decision_when_a_held_head_is_freed_within_the_cycle(
    seed: int, timeout: float
) -> None:
    """Worlds with CPU-only gangs in which a lender's gang passes a starving head that it keeps
    out (Claims.claim_keeps_out). In them a starving head fit but an older head's reservation
    held it back, and that older head was admitted later in the same cycle: the head then fit,
    and the engine that tries every gang let a gang behind it pass, while the retry, which had
    stopped at the held head for the rest of the cycle, never tried that gang. A held head
    (_Reservation.held) no longer holds its queue for sure."""
    world = _with_cpu_only_gangs(_random_world(seed), seed)
    shortcuts, unfiltered = _admissions_and_evictions(world, starvation_timeout=timeout)
    assert sum(line.startswith("Admission") for line in unfiltered) > 10
    assert shortcuts == unfiltered


def test_retry_shortcuts_change_no_decision_when_a_reservation_is_asked_for_at_another_time() -> None:
    """World 320 with CPU-only gangs and runtime limits on half of them, 60 s. A head's reservation
    worked out at 418 (a runner's expected end at 419 let it in at 478) was kept for 420, where
    that runner is past its end and the head has no time: a gang passed it in the engine, which
    had asked at 418, and not in the engine that tries every gang, which asked first at 420. A
    reservation is now reused only at the time it was worked out."""
    world = _with_runtime_limits(_with_cpu_only_gangs(_random_world(320), 320), 320, 0.5)
    shortcuts, unfiltered = _admissions_and_evictions(world, starvation_timeout=60.0)
    assert sum(line.startswith("Admission") for line in unfiltered) > 10
    assert shortcuts == unfiltered


def test_retry_shortcuts_change_no_decision_when_a_head_is_displaced_during_a_cycle() -> None:
    """World 67 with CPU-only gangs, 60 s. A head displaced in the middle of a cycle ended its hold
    on another queue's gang, which the engine that tries every gang (having let that queue in at
    the cycle's start) then admitted in the same cycle, and the engine with shortcuts only in
    the next. A displaced head now holds the other queues' gangs until the cycle ends."""
    world = _with_cpu_only_gangs(_random_world(67), 67)
    shortcuts, unfiltered = _admissions_and_evictions(world, starvation_timeout=60.0)
    assert sum(line.startswith("Admission") for line in unfiltered) > 10
    assert shortcuts == unfiltered


def test_retry_shortcuts_change_no_decision_in_a_queue_that_may_preempt() -> None:
    """World 426, 40 s. A gang that its queue's starving head held back was skipped as held back,
    but tried in full it failed the node check in another flavor option and asked for a retry
    when nodes came free. That retry was its queue's preemption attempt for the cycle (taken by
    the head, which found no victims); without it a new gang preempted two others. Gangs of a
    queue that may preempt are no longer skipped as held back."""
    shortcuts, unfiltered = _admissions_and_evictions(_random_world(426), starvation_timeout=40.0)
    assert any(line.startswith("Eviction") and "Preempted" in line for line in unfiltered)
    assert shortcuts == unfiltered


@pytest.mark.parametrize("nodes", [1_000, 500])
def test_retry_shortcuts_change_no_decision_at_benchmark_scale(nodes: int) -> None:
    """The 10,000-gang case of benchmarks/engine_scaling.py (100 ClusterQueues in cohorts of 10,
    1,000 nodes, 10,000 decisions), through the engine and through UnfilteredEngine: the
    shortcuts must not change a single admission or its time. Small random worlds miss what
    only deep queues and many cohorts sharing nodes exercise (a node-retry shortcut that kept
    queues registered across skipped retries passed 660 random worlds and diverged here at the
    6,311th admission). With half the nodes the run lasts past the starvation timeout, so heads
    starve and hold their queues: the engines decided differently from the 9,726th admission
    on while a head's claim was dropped during its own try (see
    test_a_head_keeps_its_claim_while_it_is_tried)."""
    spec = importlib.util.spec_from_file_location(
        "engine_scaling", Path(__file__).resolve().parents[2] / "benchmarks" / "engine_scaling.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    logs: list[list[tuple[float, str]]] = []
    for engine_class in (Engine, UnfilteredEngine):
        log: list[tuple[float, str]] = []
        result = bench.run_case(10_000, 100, nodes, 3_600.0, engine_class=engine_class, log=log)
        assert result["admitted"] == 10_000 and result["capped_at_seconds"] is None
        logs.append(log)
    assert len(logs[0]) == 10_000
    if nodes == 500:
        assert logs[0][-1][0] > 2 * EngineConfig().starvation_timeout  # heads had time to starve
    for i, (ours, reference) in enumerate(zip(*logs, strict=True)):
        assert ours == reference, f"decision {i} differs"
