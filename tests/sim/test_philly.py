"""The Philly importer on a synthetic table in the real format, and (when present) the real trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangq.sim.philly import load_philly, parse_window
from gangq.sim.policies import make_policy
from gangq.sim.report import summarize
from gangq.sim.simulator import Simulator
from gangq.sim.trace import GPU, TraceError

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces" / "philly"

VCS = "vc,node num\naaa111,2\nbbb222,5\n"
JOBS = """\
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-01 00:00:00,100.0,1,100.0,aaa111
2017-10-01 00:00:30,50.0,16,800.0,aaa111
2017-09-30 23:59:59,10.0,1,10.0,aaa111
2017-10-02 23:59:59,60.0,12,720.0,bbb222
2017-10-03 00:00:00,60.0,1,60.0,bbb222
2017-10-01 00:00:10,400.0,8,3200.0,bbb222
2017-10-01 00:01:00,30.0,2,60.0,zzz999
2017-10-01 00:02:00,30.0,32,960.0,aaa111
"""


@pytest.fixture()
def mini(tmp_path: Path) -> Path:
    (tmp_path / "philly_vc_helios_replay.csv").write_text(VCS)
    (tmp_path / "philly_pollux_jobs.csv").write_text(JOBS)
    return tmp_path


def test_window_includes_the_whole_end_day() -> None:
    start, end = parse_window("2017-10-01:2017-10-02")
    assert (start.isoformat(), end.isoformat()) == ("2017-10-01T00:00:00", "2017-10-03T00:00:00")
    with pytest.raises(TraceError, match="window"):
        parse_window("2017-10-05:2017-10-01")
    with pytest.raises(TraceError, match="YYYY-MM-DD"):
        parse_window("yesterday")


def test_importer_maps_rows_to_gangs_queues_and_nodes(mini: Path) -> None:
    sc = load_philly(mini, "2017-10-01:2017-10-02")
    assert sc.info["nodes_per_vc"] == {"aaa111": 2, "bbb222": 5}
    assert len(sc.nodes) == 7 and all(n.allocatable[GPU] == 8 for n in sc.nodes)
    # one ClusterQueue per VC, no cohort, GPU quota = nodes x 8
    assert {
        name: (cq.cohort, cq.resource_groups[0].flavors[0].resources[0].nominal)
        for name, cq in sc.config.cluster_queues.items()
    } == {"aaa111": (None, 16), "bbb222": (None, 40)}
    rows = {(j.local_queue, j.submit): (j.pod_sets[0].count, j.pod_sets[0].requests[GPU], j.cls) for j in sc.jobs}
    assert rows == {
        ("aaa111", 0.0): (1, 1, "1gpu"),
        ("aaa111", 30.0): (2, 8, ">8gpu"),
        ("bbb222", 10.0): (1, 8, "8gpu"),
        ("bbb222", 172799.0): (2, 8, ">8gpu"),  # 12 GPUs: ceil(12/8) pods of 8
    }
    assert sc.info["jobs_in_other_vcs"] == 1
    assert sc.info["never_admissible"] == 1  # 32 GPUs in a VC of 16
    assert sc.excluded == {"larger than VC aaa111": 1}


def test_capacity_scale_floors_but_keeps_one_node(mini: Path) -> None:
    sc = load_philly(mini, "2017-10-01:2017-10-02", capacity_scale=0.4)
    assert sc.info["nodes_per_vc"] == {"aaa111": 1, "bbb222": 2}
    # 16 GPUs no longer fit aaa111 (8 GPUs): never admissible, counted, not simulated
    assert sc.info["never_admissible"] == 2
    assert all(j.demand()[GPU] <= 8 for j in sc.jobs if j.local_queue == "aaa111")
    with pytest.raises(TraceError, match="capacity_scale"):
        load_philly(mini, capacity_scale=0)


def test_every_policy_runs_the_mini_trace(mini: Path) -> None:
    sc = load_philly(mini, "2017-10-01:2017-10-02")
    for name in ("fifo", "sjf", "gangq"):
        s = summarize(Simulator(sc, make_policy(name)).run())
        assert s["jobs"] == 4 and s["finished"] == 4 and s["never_admissible"] == 1
        # the 16-GPU gang needs all of aaa111: it waits for the 1-GPU job (t=0..100) to end
        assert s["max_wait_s"] == 70.0
        assert s["avg_wait_s"] == pytest.approx(70 / 4)
        assert s["avg_jct_s"] == pytest.approx((100 + 70 + 50 + 400 + 60) / 4)


def test_missing_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"philly_vc_helios_replay\.csv"):
        load_philly(tmp_path)


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"the Philly trace is not present at {SHARED}")
def test_real_trace_window_has_the_published_job_count() -> None:
    sc = load_philly(SHARED, "2017-10-01:2017-11-30", fraction=1.0)
    assert len(sc.jobs) == 68_503
    assert len(sc.config.cluster_queues) == 11
    assert len(sc.nodes) == 352 and sc.capacity() == 2_816
    assert sc.info["never_admissible"] == 0 and sc.info["jobs_in_other_vcs"] == 7
