from __future__ import annotations

from typing import Any

import pytest

from gangq.controlplane.nodespec import parse_node_spec
from gangq.sandbox.scheduler import (
    MOST_ALLOCATED,
    MSG_AFFINITY,
    SchedulerState,
    fit_error_message,
    is_gated,
    needs_scheduling,
    pod_requests,
    tolerates,
)


def pod(name: str, requests: dict[str, Any] | None = None, **spec: Any) -> dict:
    container: dict = {"name": "main", "image": "busybox"}
    if requests:
        container["resources"] = {"requests": requests}
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [container], **spec},
    }


def state(spec: str, strategy: str = "LeastAllocated") -> SchedulerState:
    s = SchedulerState(strategy)
    for n in parse_node_spec(spec):
        s.upsert_node(n)
    return s


def bind(s: SchedulerState, p: dict) -> str:
    res = s.schedule(p)
    assert res.node_name is not None, res.message
    p["spec"]["nodeName"] = res.node_name
    s.update_pod(p)
    return res.node_name


def test_requests_with_init_sidecars_and_overhead() -> None:
    p = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "500m", "nvidia.com/gpu": "2"}}},
            ],
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
                {"name": "init", "resources": {"requests": {"cpu": "4", "memory": "100Mi"}}},
            ],
            "overhead": {"cpu": "100m"},
        },
    }
    req = pod_requests(p)
    # sum = 1 + 0.5 + 0.25 (sidecar) = 1.75 cpu; init = 4 + 0.25 = 4.25 -> max 4.25; + overhead 0.1
    assert req["cpu"] == 4350
    assert req["memory"] == 1024**3 * 1000
    assert req["nvidia.com/gpu"] == 2000


def test_least_allocated_spreads_most_allocated_packs() -> None:
    spread = state("3x{cpu:8,memory:32Gi}")
    assert [bind(spread, pod(f"p{i}", {"cpu": "2"})) for i in range(3)] == ["node-0", "node-1", "node-2"]
    pack = state("3x{cpu:8,memory:32Gi}", MOST_ALLOCATED)
    assert [bind(pack, pod(f"p{i}", {"cpu": "2"})) for i in range(5)] == ["node-0"] * 4 + ["node-1"]


def test_natural_name_tie_break() -> None:
    s = state("12x{cpu:1}")
    assert s.schedule(pod("p", {"cpu": "1"})).node_name == "node-0"
    s2 = SchedulerState()
    for n in parse_node_spec("12x{cpu:1}")[2:]:
        s2.upsert_node(n)
    assert s2.schedule(pod("p", {"cpu": "1"})).node_name == "node-2"  # not node-10


def test_insufficient_message_like_kube_scheduler() -> None:
    s = state("4x{cpu:64,memory:512Gi,nvidia.com/gpu:8}")
    for i in range(4):
        bind(s, pod(f"g{i}", {"nvidia.com/gpu": "8"}))
    res = s.schedule(pod("x", {"nvidia.com/gpu": "8"}))
    assert res.node_name is None
    assert res.message == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    res = s.schedule(pod("y", {"nvidia.com/gpu": "1", "cpu": "100"}))
    assert res.message == "0/4 nodes are available: 4 Insufficient cpu, 4 Insufficient nvidia.com/gpu."


def test_terminal_or_deleted_pods_release_resources() -> None:
    s = state("1x{nvidia.com/gpu:8}")
    p = pod("a", {"nvidia.com/gpu": "8"})
    bind(s, p)
    assert s.schedule(pod("b", {"nvidia.com/gpu": "1"})).node_name is None
    p["status"] = {"phase": "Succeeded"}
    assert s.update_pod(p) is True
    assert s.schedule(pod("b", {"nvidia.com/gpu": "1"})).node_name == "node-0"
    q = pod("c", {"nvidia.com/gpu": "8"})
    bind(s, q)
    assert s.remove_pod(q) is True
    assert s.remove_pod(q) is False


def test_pods_count_limit() -> None:
    s = state("1x{cpu:64,pods:2}")
    bind(s, pod("a"))
    bind(s, pod("b"))
    assert s.schedule(pod("c")).message == "0/1 nodes are available: 1 Too many pods."


def test_node_selector_and_required_affinity() -> None:
    s = state("1x{cpu:8}[gpu=a100,rank=5];1x{cpu:8}[gpu=h100,rank=10];1x{cpu:8}")
    assert s.schedule(pod("a", nodeSelector={"gpu": "h100"})).node_name == "node-1"
    res = s.schedule(pod("b", nodeSelector={"gpu": "tpu"}))
    assert res.message == f"0/3 nodes are available: 3 {MSG_AFFINITY}."

    def aff(*terms: dict) -> dict:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}

    cases = [
        ({"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}, "node-0"),
        ({"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["a100", "h100"]}]}, "node-2"),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, "node-2"),
        ({"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["7"]}]}, "node-1"),
        ({"matchExpressions": [{"key": "rank", "operator": "Lt", "values": ["7"]}]}, "node-0"),
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}, "node-1"),
    ]
    for term, want in cases:
        assert s.schedule(pod("c", affinity=aff(term))).node_name == want, term
    # terms are ORed, expressions ANDed
    both = aff(
        {
            "matchExpressions": [
                {"key": "gpu", "operator": "Exists"},
                {"key": "rank", "operator": "Gt", "values": ["7"]},
            ]
        },
        {"matchExpressions": [{"key": "nope", "operator": "Exists"}]},
    )
    assert s.schedule(pod("d", affinity=both)).node_name == "node-1"
    assert s.schedule(pod("e", affinity=aff({}))).node_name is None  # an empty term matches nothing


def test_taints_and_tolerations() -> None:
    s = state("1x{cpu:8}(nvidia.com/gpu=present:NoSchedule);1x{cpu:8}(soft:PreferNoSchedule)")
    # PreferNoSchedule is ignored by the filter, node-0 is filtered by its taint
    assert s.schedule(pod("a")).node_name == "node-1"
    s2 = state("1x{cpu:8}(nvidia.com/gpu=present:NoSchedule);1x{cpu:8}(x:NoExecute)")
    res = s2.schedule(pod("a"))
    assert res.message == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, "
        "1 node(s) had untolerated taint {x: }."
    )
    tol = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
    assert s2.schedule(pod("b", tolerations=tol)).node_name == "node-0"
    assert s2.schedule(pod("c", tolerations=[{"operator": "Exists"}])).node_name == "node-0"
    assert s2.schedule(pod("d", tolerations=[{"key": "x", "operator": "Exists"}])).node_name == "node-1"
    assert not tolerates(
        [{"key": "nvidia.com/gpu", "value": "absent"}],
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    )
    assert not tolerates(
        [{"key": "x", "operator": "Exists", "effect": "NoSchedule"}], {"key": "x", "effect": "NoExecute"}
    )


def test_unschedulable_node() -> None:
    nodes = parse_node_spec("2x{cpu:8}")
    nodes[0]["spec"]["unschedulable"] = True
    nodes[1]["spec"]["unschedulable"] = True
    s = SchedulerState()
    for n in nodes:
        s.upsert_node(n)
    assert s.schedule(pod("a")).message == "0/2 nodes are available: 2 node(s) were unschedulable."
    nodes[1]["spec"]["unschedulable"] = False
    s.upsert_node(nodes[1])
    assert s.schedule(pod("a")).node_name == "node-1"


def test_gates_and_scheduler_name() -> None:
    p = pod("a", schedulingGates=[{"name": "gangq.io/admission"}])
    assert is_gated(p)
    assert not is_gated(pod("b"))
    assert needs_scheduling(pod("b"))
    assert not needs_scheduling(pod("c", schedulerName="volcano"))
    assert not needs_scheduling(pod("d", nodeName="node-0"))


def test_fit_error_message_sorting() -> None:
    assert (
        fit_error_message(3, {"Insufficient memory": 1, "Insufficient cpu": 2})
        == "0/3 nodes are available: 1 Insufficient memory, 2 Insufficient cpu."
    )
    assert fit_error_message(0, {}) == "0/0 nodes are available."


def test_bad_strategy() -> None:
    with pytest.raises(ValueError, match="Random"):
        SchedulerState("Random")


def test_failure_cache_is_invalidated_by_any_change() -> None:
    s = state("1x{nvidia.com/gpu:8}")
    holder = pod("h", {"nvidia.com/gpu": "8"})
    bind(s, holder)
    assert s.schedule(pod("a", {"nvidia.com/gpu": "8"})).node_name is None
    msg = s.schedule(pod("b", {"nvidia.com/gpu": "8"})).message
    assert msg == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    assert s.schedule(pod("c", {"nvidia.com/gpu": "1"})).node_name is None
    holder["status"] = {"phase": "Failed"}
    s.update_pod(holder)
    assert s.schedule(pod("b", {"nvidia.com/gpu": "8"})).node_name == "node-0"
    # a different signature (a toleration) is not answered from the cache
    n = parse_node_spec("1x{nvidia.com/gpu:8}(x:NoSchedule)")[0]
    n["metadata"]["name"] = "node-1"
    s2 = SchedulerState()
    s2.upsert_node(n)
    assert s2.schedule(pod("d", {"nvidia.com/gpu": "1"})).node_name is None
    assert s2.schedule(pod("e", {"nvidia.com/gpu": "1"}, tolerations=[{"key": "x", "operator": "Exists"}])).node_name \
        == "node-1"
