"""Every (flavor, resource) key the engine stores is one shared object per pair: the quota dicts of
ClusterQueues and cohorts and the usage charged for an admitted gang are looked up by each other's
keys, and identical keys let those lookups stop at the identity check (see docs/engine.md)."""

from __future__ import annotations

from gangq.core import Admission

from .builders import add_nodes, add_queue, engine, gang, quota


def test_quota_keys_and_charged_usage_share_one_key_object_per_flavor_and_resource() -> None:
    e = engine()
    add_nodes(e, "a100", 2)
    add_queue(e, "team-a", [quota("a100", 64, 8)], cohort="pool")
    add_queue(e, "team-b", [quota("a100", 64, 8)], cohort="pool")
    e.submit(gang("job", "team-b", 2, 4), 0.0)
    admissions = [d for d in e.schedule(1.0) if isinstance(d, Admission)]
    assert [d.workload for d in admissions] == ["ns/job"]

    a, b = e.cluster_queues["team-a"].node, e.cluster_queues["team-b"].node
    assert a.parent is b.parent and a.parent is not None
    key_sets = [a.nominal, b.nominal, a.parent.subtree, b.usage, e.workloads["ns/job"].usage]
    by_value: dict[tuple[object, ...], tuple[object, ...]] = {}
    for keys in key_sets:
        assert keys, key_sets
        for fr in keys:
            assert by_value.setdefault(fr, fr) is fr, f"{fr!r} is stored as two different objects"
    assert set(by_value) == {("a100", "cpu"), ("a100", "nvidia.com/gpu")}
