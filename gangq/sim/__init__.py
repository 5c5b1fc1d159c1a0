"""gangq's discrete-event simulator: replay traces through the admission engine (docs/simulate.md)."""

from gangq.sim.policies import POLICIES, Policy, make_policy
from gangq.sim.report import summarize
from gangq.sim.scenario import Scenario, gang_deadlock, kueue_baseline, load_config
from gangq.sim.simulator import LivelockError, SimResult, Simulator

__all__ = [
    "POLICIES",
    "LivelockError",
    "Policy",
    "Scenario",
    "SimResult",
    "Simulator",
    "gang_deadlock",
    "kueue_baseline",
    "load_config",
    "make_policy",
    "summarize",
]
