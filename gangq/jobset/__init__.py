"""The embedded JobSet controller's pure logic (``jobset.x-k8s.io/v1alpha2``): validation, reconcile, framework
wiring. The kopf wiring is :mod:`gangq.operator.jobset`; see docs/jobset.md."""

from .reconciler import Event, JobUpdate, Result, reconcile
from .validation import Violation, validate

__all__ = ["Event", "JobUpdate", "Result", "Violation", "reconcile", "validate"]
