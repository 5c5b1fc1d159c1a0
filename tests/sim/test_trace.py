"""Trace formats: native YAML / JSON Lines, CSV with a column mapping; errors name line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gangq.sim.trace import GPU, ColumnMapping, TraceError, dump_native, load_cluster, load_csv, load_native

ROOT = Path(__file__).resolve().parents[2]

NATIVE = """\
nodes:
  - {name: gpu, count: 2, allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: 8}, labels: {pool: a100}}
namespaces: {team-a: {team: a}}
workloads:
  - name: train
    namespace: team-a
    queue: default
    submit: 10
    duration: 3600.5
    priorityClass: high
    minMember: 2
    runtimeLimit: 7200
    podSets:
      - {name: worker, count: 4, requests: {cpu: 500m, nvidia.com/gpu: 2}, nodeSelector: {pool: a100}}
  - name: eval
    queue: default
    submit: 0
    duration: 60
    class: eval
    podSets: [{requests: {cpu: 1}}]
"""


def test_native_yaml_parses_every_field(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(NATIVE)
    trace = load_native(path)
    assert [n.name for n in trace.nodes] == ["gpu-0", "gpu-1"]
    assert trace.nodes[0].allocatable == {"cpu": 64_000, "memory": 512 << 30, GPU: 8}
    assert trace.namespaces == {"team-a": {"team": "a"}}
    train, ev = trace.jobs
    assert (train.key, train.submit, train.duration, train.local_queue) == ("team-a/train", 10.0, 3600.5, "default")
    assert (train.priority_class, train.cls, train.min_member, train.runtime_limit) == ("high", "high", 2, 7200.0)
    ps = train.pod_sets[0]
    assert (ps.name, ps.count, ps.requests, ps.node_selector) == ("worker", 4, {"cpu": 500, GPU: 2}, {"pool": "a100"})
    assert train.demand() == {"cpu": 2000, GPU: 8}
    assert (ev.key, ev.cls, ev.pod_sets[0].count) == ("default/eval", "eval", 1)


def test_native_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(NATIVE)
    jobs = load_native(path).jobs
    again = tmp_path / "again.yaml"
    again.write_text(dump_native(jobs))
    back = load_native(again).jobs
    assert [(j.key, j.submit, j.duration, j.demand(), j.min_member, j.cls) for j in back] == [
        (j.key, j.submit, j.duration, j.demand(), j.min_member, j.cls) for j in jobs
    ]


@pytest.mark.parametrize(
    ("replace", "line", "field"),
    [
        ("duration: 3600.5", 9, "workloads[0].duration"),
        ("count: 4", 14, "workloads[0].podSets[0].count"),
        ("cpu: 500m", 14, "workloads[0].podSets[0].requests.cpu"),
        ("minMember: 2", 11, "workloads[0].minMember"),
    ],
)
def test_native_errors_name_line_and_field(tmp_path: Path, replace: str, line: int, field: str) -> None:
    bad = {
        "duration: 3600.5": "duration: soon",
        "count: 4": "count: 0",
        "cpu: 500m": "cpu: lots",
        "minMember: 2": "minMember: 9",
    }[replace]
    path = tmp_path / "bad.yaml"
    path.write_text(NATIVE.replace(replace, bad))
    with pytest.raises(TraceError) as err:
        load_native(path)
    assert err.value.line == line
    assert err.value.field == field
    assert f"bad.yaml:{line}: {field}" in str(err.value)


def test_native_unknown_and_missing_fields(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(NATIVE.replace("    submit: 0\n", "    sbumit: 0\n"))
    with pytest.raises(TraceError, match=r"workloads\[1\]\.sbumit: unknown field"):
        load_native(path)
    path.write_text(NATIVE.replace("    queue: default\n    submit: 0\n", "    submit: 0\n"))
    with pytest.raises(TraceError, match=r":15: workloads\[1\]\.queue: is required"):
        load_native(path)
    path.write_text(NATIVE.replace("name: eval", "name: train\n    namespace: team-a"))
    with pytest.raises(TraceError, match="defined twice"):
        load_native(path)


def test_jsonl(tmp_path: Path) -> None:
    lines = [
        {"name": "a", "queue": "q", "submit": 0, "duration": 5, "podSets": [{"count": 2, "requests": {GPU: 1}}]},
        {"name": "b", "queue": "q", "submit": 1, "duration": -1, "podSets": [{"requests": {GPU: 1}}]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("# comment\n" + json.dumps(lines[0]) + "\n\n" + json.dumps(lines[1]) + "\n")
    with pytest.raises(TraceError) as err:
        load_native(path)
    assert (err.value.line, err.value.field) == (4, "workload.duration")
    path.write_text(json.dumps(lines[0]) + "\n{oops\n")
    with pytest.raises(TraceError, match=r"t.jsonl:2: : invalid JSON"):
        load_native(path)
    path.write_text(json.dumps(lines[0]) + "\n")
    assert load_native(path).jobs[0].demand() == {GPU: 2}


def test_csv_mapping_timestamps_window_and_gpu_split(tmp_path: Path) -> None:
    from datetime import datetime

    path = tmp_path / "jobs.csv"
    path.write_text(
        "when,secs,gpus,team,who\n"
        "2020-01-01 00:00:10,100,4,a,x\n"
        "2020-01-01 00:01:00,50,16,b,y\n"
        "2019-12-31 23:59:59,5,1,a,z\n"
        "2020-01-02 00:00:00,5,1,a,late\n"
    )
    mapping = ColumnMapping.parse("submit=when,duration=secs,gpus=gpus,queue=team,name=who", time_format="iso")
    jobs = load_csv(path, mapping, start=datetime(2020, 1, 1), end=datetime(2020, 1, 2))
    assert [(j.name, j.submit, j.local_queue) for j in jobs] == [("x", 10.0, "a"), ("y", 60.0, "b")]
    assert (jobs[0].pod_sets[0].count, jobs[0].pod_sets[0].requests) == (1, {GPU: 4})
    assert (jobs[1].pod_sets[0].count, jobs[1].pod_sets[0].requests) == (2, {GPU: 8})
    strp = ColumnMapping.parse("submit=when,duration=secs,gpus=gpus,queue=team", time_format="%Y-%m-%d %H:%M:%S")
    assert [j.submit for j in load_csv(path, strp)] == [11.0, 61.0, 0.0, 86401.0]


def test_csv_numeric_pods_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("t,d,n,c\n0,10,3,500m\n5,20,1,2\n")
    mapping = ColumnMapping.parse("submit=t,duration=d,pods=n,cpu=c", defaults={"queue": "q", "namespace": "ns"})
    jobs = load_csv(path, mapping)
    assert [(j.key, j.pod_sets[0].count, j.demand()) for j in jobs] == [
        ("ns/row-2", 3, {"cpu": 1500}),
        ("ns/row-3", 1, {"cpu": 2000}),
    ]


def test_csv_errors_name_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("t,d,g,q\n0,10,1,a\n5,ten,1,a\n")
    mapping = ColumnMapping.parse("submit=t,duration=d,gpus=g,queue=q")
    with pytest.raises(TraceError) as err:
        load_csv(path, mapping)
    assert (err.value.line, err.value.field) == (3, "d")
    path.write_text("t,d,g,q\n0,10,0,a\n")
    with pytest.raises(TraceError, match=r"jobs.csv:2: g: a gang needs at least one GPU"):
        load_csv(path, mapping)
    with pytest.raises(TraceError, match="column for 'gpus' not in header"):
        load_csv(path, ColumnMapping.parse("submit=t,duration=d,gpus=gpu,queue=q"))
    with pytest.raises(TraceError, match="unknown field"):
        ColumnMapping.parse("submit=t,duration=d,colour=c,queue=q")
    with pytest.raises(TraceError, match=r"queue: must be mapped to a column or given a default \(--csv-default"):
        ColumnMapping.parse("submit=t,duration=d")
    with pytest.raises(TraceError, match="--csv-default: colour: unknown field"):
        ColumnMapping.parse("submit=t,duration=d", "colour=red")
    with pytest.raises(TraceError, match="--csv-default: queue: expected field=value"):
        ColumnMapping.parse("submit=t,duration=d", "queue")


def test_a_csv_without_a_queue_column_replays_with_a_default_queue(tmp_path: Path) -> None:
    """Most public traces have no queue column: ``--csv-default queue=NAME`` gives every job one."""
    path = tmp_path / "jobs.csv"
    path.write_text("t,d,g\n0,10,8\n5,20,16\n")
    mapping = ColumnMapping.parse("submit=t,duration=d,gpus=g", "queue=team-a,namespace=research")
    jobs = load_csv(path, mapping)
    assert [(j.key, j.local_queue, j.demand()[GPU]) for j in jobs] == [
        ("research/row-2", "team-a", 8), ("research/row-3", "team-a", 16)]


def test_cluster_file_and_example_trace() -> None:
    nodes = load_native(ROOT / "examples" / "traces" / "gpu-cluster-day.yaml").nodes
    assert len(nodes) == 32
    assert nodes[8].taints and nodes[8].taints[0].key == "gpu.nvidia.com/h100"


def test_cluster_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("nodes:\n  - {name: n, count: 2, allocatable: {cpu: 4}}\n  - {name: m}\n")
    with pytest.raises(TraceError, match=r"c.yaml:3: nodes\[1\]\.allocatable: is required"):
        load_cluster(path)
