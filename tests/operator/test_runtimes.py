"""The controller's learned run times (gangq/operator/runtimes.py): grouping, what the engine gets,
and the ConfigMap round trip."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gangq.core import PodSetSpec, WorkloadSpec
from gangq.core.decisions import Admission
from gangq.operator.config import parse_config
from gangq.operator.entry import Entry
from gangq.operator.runtimes import DATA_KEY, LearnedRuntimes


def runtimes() -> LearnedRuntimes:
    state: Any = SimpleNamespace(config=parse_config({}))
    return LearnedRuntimes(state, writer=None)  # type: ignore[arg-type]


def entry(name: str, cpu: int = 1000, limit: float | None = None) -> tuple[Entry, WorkloadSpec]:
    obj = {"metadata": {"name": name, "namespace": "team", "uid": name}}
    e = Entry(f"team/{name}", obj)
    e.lq = "team/lq"
    spec = WorkloadSpec(f"team/{name}", "team", "lq", [PodSetSpec("w", 2, {"cpu": cpu})], runtime_limit=limit)
    e.spec = spec
    return e, spec


def finish(r: LearnedRuntimes, name: str, seconds: float, succeeded: bool = True, cpu: int = 1000) -> None:
    e, spec = entry(name, cpu)
    e.admission = Admission(spec.key, "cq", (), False, 100.0, {})
    r.finished(e, succeeded, 100.0 + seconds)


def test_three_successful_runs_of_a_shape_give_its_gangs_an_expected_run_time() -> None:
    r = runtimes()
    for i, seconds in enumerate((50, 70, 60)):
        e, spec = entry(f"new-{i}")
        assert r.engine_spec(e, spec) is spec and e.runtime is None, "nothing known yet"
        finish(r, f"done-{i}", seconds)
    finish(r, "failed", 5, succeeded=False)  # a failed gang teaches nothing
    finish(r, "other-shape", 900, cpu=2000)
    e, spec = entry("next")
    learned = r.engine_spec(e, spec)
    assert learned is not spec and learned.runtime_limit == 60.0 and learned.runtime_estimated
    assert spec.runtime_limit is None, "the Workload keeps the declared spec"
    assert e.runtime is not None and "learned from 3 finished gangs" in e.runtime[1]
    declared, dspec = entry("declared", limit=30.0)
    assert r.engine_spec(declared, dspec) is dspec and declared.runtime == (30.0, "declared")


def test_what_was_learned_survives_a_restart_through_the_configmap() -> None:
    r = runtimes()
    for i, seconds in enumerate((50, 70, 60)):
        finish(r, f"done-{i}", seconds)
    text = r.dump()
    again = runtimes()
    again.load_data({DATA_KEY: text})
    e, spec = entry("next")
    assert again.engine_spec(e, spec).runtime_limit == 60.0
    broken = runtimes()
    broken.load_data({DATA_KEY: "{not json"})  # ignored, with a warning
    assert broken.engine_spec(e, spec) is spec
