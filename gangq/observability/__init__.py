"""gangq's observability: Prometheus metrics, the pending-workloads HTTP API, ``gangq queue``.

See ``docs/observability.md``.
"""

from gangq.observability.metrics import METRIC_NAMES, GangqMetrics

__all__ = ["METRIC_NAMES", "GangqMetrics"]
