"""The controller's configuration file: defaults, engine settings, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangq.core import SpecError
from gangq.operator.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_file_is_the_defaults() -> None:
    example = load_config(ROOT / "policies" / "operator-config.yaml").engine_config()
    default = parse_config({}).engine_config()
    for field in ("pods_ready_timeout", "starvation_timeout", "fair_sharing", "preemption_budget",
                  "preemption_grace", "preemption_shelter", "preemption_delay", "topology_fit"):
        assert getattr(example, field) == getattr(default, field), field
    assert default.preemption_budget is None  # Kueue's behaviour unless an admin sets a budget


def test_preemption_budget_reaches_the_engine_and_bad_values_name_the_field() -> None:
    assert parse_config({"preemption": {"budget": 2}}).engine_config().preemption_budget == 2
    with pytest.raises(SpecError) as info:
        parse_config({"preemption": {"budget": 0}}, "cfg.yaml")
    assert info.value.field == "preemption.budget"
    with pytest.raises(SpecError) as info:
        parse_config({"preemption": {"budgett": 1}}, "cfg.yaml")
    assert "budgett" in info.value.field


def test_the_preemption_grace_reaches_the_engine() -> None:
    from gangq.operator.config import parse_config

    assert parse_config({}, "test").engine_config().preemption_grace == 300.0
    assert parse_config({"preemption": {"graceSeconds": 0}}, "test").engine_config().preemption_grace == 0.0


def test_the_preemption_shelter_reaches_the_engine() -> None:
    assert parse_config({}, "test").engine_config().preemption_shelter == 2
    assert parse_config({"preemption": {"shelterAfter": None}}, "test").engine_config().preemption_shelter is None
    with pytest.raises(SpecError) as info:
        parse_config({"preemption": {"shelterAfter": 0}}, "cfg.yaml")
    assert info.value.field == "preemption.shelterAfter"


def test_the_preemption_delay_reaches_the_engine_and_a_bad_value_names_the_field() -> None:
    assert parse_config({}, "test").engine_config().preemption_delay == 5.0
    assert parse_config({"preemption": {"delaySeconds": 0}}, "test").engine_config().preemption_delay == 0.0
    with pytest.raises(SpecError) as info:
        parse_config({"preemption": {"delaySeconds": -1}}, "cfg.yaml")
    assert info.value.field == "preemption.delaySeconds"


def test_the_topology_fit_reaches_the_engine_and_a_wrong_one_names_the_field() -> None:
    assert parse_config({}).engine_config().topology_fit == "BestFit"
    assert parse_config({"topology": {"fit": "FirstFit"}}).engine_config().topology_fit == "FirstFit"
    with pytest.raises(SpecError) as info:
        parse_config({"topology": {"fit": "Tightest"}}, "cfg.yaml")
    assert info.value.field == "topology.fit", info.value.field
