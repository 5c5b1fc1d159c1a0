"""Queue configuration YAML → core specs: quantities, Kueue compatibility, errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gangq.api.loader import load_documents, parse_queue_config
from gangq.api.quantity import QuantityError, parse_quantity
from gangq.cli import app
from gangq.core import Engine, SpecError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("value", "resource", "expected"),
    [
        ("500m", "cpu", 500),
        ("1.5", "cpu", 1500),
        ("0.0001", "cpu", 1),  # rounded up to a millicore, as the API server does
        (2, "cpu", 2000),
        ("16Gi", "memory", 16 << 30),
        ("1e3", "memory", 1000),
        ("2k", "memory", 2000),
        ("8", "nvidia.com/gpu", 8),
    ],
)
def test_quantities_parse_exactly(value: str, resource: str, expected: int) -> None:
    assert parse_quantity(value, resource) == expected


@pytest.mark.parametrize("value", ["12XYZ", "", "1.2.3", "--1"])
def test_malformed_quantities_are_rejected(value: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value, "cpu")


CQ = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: team}}
spec:
  {extra}
  resourceGroups:
    - coveredResources: [cpu, nvidia.com/gpu]
      flavors:
        - name: a100
          resources:
            - {{name: cpu, nominalQuota: {cpu}}}
            - {{name: nvidia.com/gpu, nominalQuota: 8{gpu_extra}}}
"""


def _cq(cpu: str = '"500m"', gpu_extra: str = "", extra: str = "cohortName: pool") -> str:
    return CQ.format(cpu=cpu, gpu_extra=gpu_extra, extra=extra)


def test_kueue_cluster_queue_ports_by_api_version() -> None:
    config = parse_queue_config(load_documents(_cq(gpu_extra=", borrowingLimit: 4")))
    cq = config.cluster_queues["team"]
    assert cq.cohort == "pool"
    quotas = {q.name: q for q in cq.resource_groups[0].flavors[0].resources}
    assert quotas["cpu"].nominal == 500
    assert quotas["nvidia.com/gpu"].borrowing_limit == 4
    assert cq.namespace_selector is None  # absent: selects no namespace


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (_cq(cpu='"12XYZ"'), "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"),
        (_cq(cpu="-1"), "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"),
        (_cq(gpu_extra=", borrowingLimit: 4", extra="queueingStrategy: StrictFIFO"), "borrowingLimit"),
        (_cq(extra="flavorFungibility: {whenCanBorrow: Sometimes}"), "spec.flavorFungibility.whenCanBorrow"),
        (_cq(extra="queueingStrategy: LIFO"), "spec.queueingStrategy"),
    ],
)
def test_errors_name_the_object_and_field(text: str, field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_queue_config(load_documents(text))
    assert err.value.kind == "ClusterQueue" and err.value.name == "team"
    assert err.value.field.endswith(field), err.value.field


def test_cohort_cycle_is_an_error_naming_parent() -> None:
    text = """
apiVersion: gangq.io/v1alpha1
kind: Cohort
metadata: {name: a}
spec: {parentName: b}
---
apiVersion: gangq.io/v1alpha1
kind: Cohort
metadata: {name: b}
spec: {parentName: a}
"""
    with pytest.raises(SpecError) as err:
        parse_queue_config(load_documents(text))
    assert err.value.kind == "Cohort" and err.value.field == "spec.parentName"


def test_example_policy_loads_into_the_engine_and_admits() -> None:
    from gangq.core import LocalQueueSpec, NodeSpec, PodSetSpec, WorkloadSpec

    config = parse_queue_config(load_documents(ROOT / "policies" / "example-gpu-cluster.yaml"))
    assert config.problems() == []
    e = Engine()
    for f in config.flavors.values():
        e.upsert_flavor(f)
    for c in config.cohorts.values():
        e.upsert_cohort(c)
    for cq in config.cluster_queues.values():
        e.upsert_cluster_queue(cq)
    for lq in config.local_queues.values():
        e.upsert_local_queue(lq)
    e.upsert_namespace("vision", {"team": "vision"})
    e.upsert_node(
        NodeSpec("n1", {"cpu": 96000, "memory": 1 << 40, "nvidia.com/gpu": 8}, {"gpu.nvidia.com/class": "a100"})
    )
    assert isinstance(config.local_queues["vision/default"], LocalQueueSpec)
    e.submit(
        WorkloadSpec("vision/job", "vision", "default", [PodSetSpec("w", 2, {"cpu": 8000, "nvidia.com/gpu": 4})]), 0
    )
    decisions = e.schedule(1)
    assert [getattr(d, "workload", None) for d in decisions] == ["vision/job"]


def test_cli_validate_prints_queues_and_fails_on_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["validate", str(ROOT / "policies" / "example-gpu-cluster.yaml")])
    assert ok.exit_code == 0, ok.output
    assert "ClusterQueue vision" in ok.output and "cohort research" in ok.output
    baseline = runner.invoke(app, ["validate", str(ROOT / "policies" / "kueue-baseline.yaml")])
    assert baseline.exit_code == 0 and "30 ClusterQueues" in baseline.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(_cq(cpu='"12XYZ"'))
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert "nominalQuota" in result.output and "team" in result.output
