"""gangq's admission engine: pure, deterministic, no I/O.

The operator and the simulator drive the same :class:`Engine`; see ``docs/engine.md``.
"""

from importlib.machinery import EXTENSION_SUFFIXES

from gangq.core import engine as _engine_module
from gangq.core.config import EngineConfig
from gangq.core.decisions import Admission, Decision, Eviction, PendingUpdate, PodSetAssignment
from gangq.core.engine import Engine
from gangq.core.errors import SpecError
from gangq.core.model import (
    ClusterQueueSpec,
    CohortSpec,
    FlavorFungibility,
    FlavorQuotas,
    FlavorSpec,
    LocalQueueSpec,
    NodeSpec,
    PodInfo,
    PodSetSpec,
    PreemptionSpec,
    ProvisionerSpec,
    ResourceGroup,
    ResourceQuota,
    WorkloadSpec,
)
from gangq.core.selectors import LabelRequirement, LabelSelector, NodeSelectorRequirement, Taint, Toleration
from gangq.core.views import ClusterQueueView, PendingView, WorkloadView


def compiled() -> bool:
    """True when the engine runs as mypyc-compiled extension modules (see setup.py)."""
    return str(_engine_module.__file__).endswith(tuple(EXTENSION_SUFFIXES))


__all__ = [
    "Admission",
    "ClusterQueueSpec",
    "ClusterQueueView",
    "CohortSpec",
    "Decision",
    "Engine",
    "EngineConfig",
    "Eviction",
    "FlavorFungibility",
    "FlavorQuotas",
    "FlavorSpec",
    "LabelRequirement",
    "LabelSelector",
    "LocalQueueSpec",
    "NodeSelectorRequirement",
    "NodeSpec",
    "PendingUpdate",
    "PendingView",
    "PodInfo",
    "PodSetAssignment",
    "PodSetSpec",
    "PreemptionSpec",
    "ProvisionerSpec",
    "ResourceGroup",
    "ResourceQuota",
    "SpecError",
    "Taint",
    "Toleration",
    "WorkloadSpec",
    "WorkloadView",
    "compiled",
]
