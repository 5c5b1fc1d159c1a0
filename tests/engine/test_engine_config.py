"""EngineConfig.replace copies every setting and validates the copy as the constructor does."""

from __future__ import annotations

import inspect

import pytest

from gangq.core import EngineConfig

# It reads the constructor's signature, which a compiled class does not expose.
pytestmark = pytest.mark.interpreted_only


def test_replace_keeps_every_setting_it_does_not_change() -> None:
    changed = EngineConfig(
        pods_ready_timeout=12.0,
        backoff_base=3.0,
        backoff_max=30.0,
        backoff_limit=4,
        requeue_timestamp="Creation",
        starvation_timeout=99.0,
        fair_sharing=True,
        preemption_budget=2,
        preemption_grace=7.0,
        preemption_shelter=5,
        preemption_delay=1.0,
        topology_fit="FirstFit",
    )
    names = [n for n in inspect.signature(EngineConfig.__init__).parameters if n != "self"]
    copy = changed.replace(fair_sharing=False)
    for name in names:
        expected = False if name == "fair_sharing" else getattr(changed, name)
        assert getattr(copy, name) == expected, name
    with pytest.raises(ValueError, match="topology_fit"):
        changed.replace(topology_fit="Worst")
