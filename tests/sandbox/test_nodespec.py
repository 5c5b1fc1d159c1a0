from __future__ import annotations

import pytest

from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC, NodeSpecError, canonical_quantity, parse_node_spec


def test_default_spec_is_four_gpu_nodes() -> None:
    nodes = parse_node_spec(DEFAULT_NODE_SPEC)
    assert [n["metadata"]["name"] for n in nodes] == ["node-0", "node-1", "node-2", "node-3"]
    for n in nodes:
        assert n["kind"] == "Node" and n["apiVersion"] == "v1"
        alloc = n["status"]["allocatable"]
        assert alloc == {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"}
        assert n["status"]["capacity"] == alloc
        assert n["metadata"]["labels"]["kubernetes.io/hostname"] == n["metadata"]["name"]
        ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"]
        assert ready == [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
        ]
        assert "taints" not in n["spec"]
    assert [n["status"]["addresses"][0] for n in nodes[:2]] == [{"type": "InternalIP", "address": "10.0.0.2"},
                                                                {"type": "InternalIP", "address": "10.0.0.3"}]


def test_groups_labels_taints_and_prefixes() -> None:
    spec = (
        "2x{cpu:64,nvidia.com/gpu:8}[gpu=a100,zone=a](nvidia.com/gpu=present:NoSchedule, dedicated:NoExecute);"
        " 4x{cpu: 32, memory:128Gi} + big@{cpu:1.5,memory:1024Mi,pods:10}"
    )
    nodes = parse_node_spec(spec)
    assert [n["metadata"]["name"] for n in nodes] == [
        "node-0",
        "node-1",
        "node-2",
        "node-3",
        "node-4",
        "node-5",
        "big-0",
    ]
    gpu = nodes[0]
    assert gpu["metadata"]["labels"]["gpu"] == "a100" and gpu["metadata"]["labels"]["zone"] == "a"
    assert gpu["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "dedicated", "effect": "NoExecute"},
    ]
    assert "gpu" not in nodes[2]["metadata"]["labels"] and "taints" not in nodes[2]["spec"]
    assert nodes[2]["status"]["allocatable"] == {"cpu": "32", "memory": "128Gi", "pods": "110"}
    assert nodes[6]["status"]["allocatable"] == {"cpu": "1500m", "memory": "1Gi", "pods": "10"}
    # the objects are independent copies
    nodes[0]["metadata"]["labels"]["x"] = "y"
    assert "x" not in nodes[1]["metadata"]["labels"]


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1000", "1k"),
        ("1.5", "1500m"),
        ("0.1", "100m"),
        ("2048Ki", "2Mi"),
        ("1500Mi", "1500Mi"),
        ("1e3", "1k"),
        ("100m", "100m"),
        ("0", "0"),
        ("1536", "1536"),
        ("5G", "5G"),
    ],
)
def test_canonical_quantity(text: str, canonical: str) -> None:
    assert canonical_quantity(text) == canonical


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("", "empty"),
        ("4x{cpu:64", "group 1"),
        ("4x{cpu:64};;2x{cpu:1}", "group 2 is empty"),
        ("4x{cpu:abc}", "'abc'"),
        ("4x{cpu:64,cpu:32}", "given twice"),
        ("4x{cpu}", "'cpu' must be written name:quantity"),
        ("{cpu:1};2x{cpu:1}[gpu]", "group 2"),
        ("2x{cpu:1}[gpu]", "label 'gpu' must be written key=value"),
        ("2x{cpu:1}(gpu=yes:Sometimes)", "'Sometimes'"),
        ("2x{cpu:1}(gpu=yes)", "must be written key[=value]:Effect"),
        ("0x{cpu:1}", "at least 1"),
        ("2x{bad name!:1}", "not a valid Kubernetes resource name"),
        ("2x{}", "no resources"),
    ],
)
def test_errors_name_group_and_token(spec: str, fragment: str) -> None:
    with pytest.raises(NodeSpecError) as info:
        parse_node_spec(spec)
    assert fragment in str(info.value)


def test_docs_examples() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "sandbox-cluster.md").read_text()
    assert "| `4x{cpu:64,memory:512Gi,nvidia.com/gpu:8}` (the default)" in text
    two = "2x{cpu:64,nvidia.com/gpu:8}[gpu=a100,zone=a](nvidia.com/gpu=present:NoSchedule);4x{cpu:32,memory:128Gi}"
    three = "gpu@2x{nvidia.com/gpu:8} + cpu@3x{cpu:16,pods:20}"
    assert f"`{two}`" in text and f"`{three}`" in text
    assert [n["metadata"]["name"] for n in parse_node_spec(two)] == [f"node-{i}" for i in range(6)]
    nodes = parse_node_spec(three)
    assert [n["metadata"]["name"] for n in nodes] == ["gpu-0", "gpu-1", "cpu-0", "cpu-1", "cpu-2"]
    assert nodes[2]["status"]["allocatable"]["pods"] == "20"
    with pytest.raises(NodeSpecError) as info:
        parse_node_spec("4x{cpu:8};2x{cpu:1}(gpu=yes:Sometimes)")
    message = str(info.value)
    assert message == ("node spec group 2 '2x{cpu:1}(gpu=yes:Sometimes)': taint 'gpu=yes:Sometimes' has effect "
                       "'Sometimes'; expected one of NoSchedule, PreferNoSchedule, NoExecute")
    assert message.replace(" ", "").replace("\n", "") in text.replace(" ", "").replace("\n", "")
