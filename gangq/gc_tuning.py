"""Garbage-collector settings for gangq's long-running processes.

A controller keeps a large, long-lived heap (the JobSets it holds, kopf's per-object memories, the
engine's state: 100,000 pending workloads are millions of objects). With CPython's default
thresholds (700, 10, 10) the cyclic garbage collector re-scans that heap over and over: in Kueue's
baseline (15,000 JobSets) it took half the controller's CPU time, most of it in full collections.
Young collections stay frequent enough to catch short-lived cycles (asyncio tasks and their
exceptions); full ones become rare.
"""

from __future__ import annotations

import gc
from typing import Final

GC_THRESHOLDS: Final = (200_000, 20, 10)


def tune_gc() -> None:
    """Apply :data:`GC_THRESHOLDS` to this process (``gangq run`` does at start)."""
    gc.set_threshold(*GC_THRESHOLDS)
