"""batch/v1 Job names and state: its group, labels, gang key, finished conditions, and whether
another controller owns it. The Job kind itself is :mod:`gangq.integrations.job`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gangq.api.meta import Meta, conditions

KIND: Final = "Job"
GROUP: Final = "batch"
VERSION: Final = "v1"
PLURAL: Final = "jobs"
POD_SET: Final = "main"
"""The name of a Job's one pod set (Kueue's name for it too)."""

JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
"""The label the Job controller puts on a Job's pods."""

def job_key(namespace: str, name: str) -> str:
    """The engine's key of a Job's gang: apart from a JobSet's (``namespace/name``) of the same name."""
    return f"{namespace}/job:{name}"


def terminal_condition(obj: Mapping[str, Any], complete: str) -> str | None:
    """``Completed`` or ``Failed`` (the JobSet's words) once ``obj`` has a true ``complete`` or
    ``Failed`` condition, else None."""
    for cond in conditions(obj):
        if cond.get("status") == "True":
            if cond.get("type") == complete:
                return "Completed"
            if cond.get("type") == "Failed":
                return "Failed"
    return None


def job_terminal(job: Mapping[str, Any]) -> str | None:
    """``Completed`` or ``Failed`` (the JobSet's words) once the Job has finished, else None."""
    return terminal_condition(job, "Complete")


def owned_by_another_controller(job: Mapping[str, Any]) -> bool:
    """A Job another object controls (a JobSet's child Job, a CronJob's run …) is that object's
    to queue, not a gang of its own."""
    return Meta(job).controller_reference is not None


__all__ = [
    "GROUP",
    "JOB_NAME_LABEL",
    "KIND",
    "PLURAL",
    "POD_SET",
    "VERSION",
    "job_key",
    "job_terminal",
    "owned_by_another_controller",
    "terminal_condition",
]
