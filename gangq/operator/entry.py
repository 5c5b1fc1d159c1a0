"""What the controller knows about one queued workload (a JobSet, a Job) and its Workload object."""

from __future__ import annotations

from typing import Any

from gangq.api.meta import Meta, rfc3339
from gangq.core.decisions import Admission
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.jobset import JOBSET


class Entry:
    """One queued workload of ``kind`` (:mod:`gangq.integrations`): its last object, the
    gang's state and the Workload status to write.

    ``state`` is ``Pending``, ``Inadmissible`` (the object is malformed), ``Admitted``,
    ``Evicting`` (suspended, waiting for its pods to go) or ``Finished`` (forgotten once that
    status is written).
    """

    __slots__ = (
        "active",
        "admission",
        "cluster_queue",
        "conditions",
        "created",
        "due",
        "key",
        "kind",
        "last_pending_write",
        "last_written",
        "lq",
        "message",
        "name",
        "namespace",
        "obj",
        "pod_sets",
        "reason",
        "requeue",
        "rv",
        "sig",
        "spec",
        "state",
        "status_queued",
        "stop_confirmed",
        "uid",
        "wl_name",
        "writing",
    )

    def __init__(self, key: str, obj: dict[str, Any], kind: WorkloadKind = JOBSET) -> None:
        meta = Meta(obj)
        self.key = key
        self.kind = kind
        self.namespace = meta.namespace_or_default
        self.name = meta.name
        self.uid = meta.uid
        self.obj = obj
        self.rv = meta.resource_version
        self.sig: tuple[Any, ...] = ()
        self.lq = ""
        self.state = "Pending"
        self.spec: Any = None  # WorkloadSpec
        self.admission: Admission | None = None
        self.cluster_queue: str | None = None
        self.reason = "Pending"
        self.message = "waiting for the first scheduling cycle"
        self.requeue: dict[str, Any] | None = None
        self.conditions: dict[str, dict[str, Any]] = {}
        self.wl_name = kind.workload_name_of(obj)
        self.created = False
        self.due: float | None = None  # when the Workload status is next written (None: clean)
        self.last_written: dict[str, Any] | None = None
        self.last_pending_write = 0.0
        self.pod_sets: list[dict[str, Any]] = []
        self.writing = False  # a JobSet patch (admission or suspend) is in flight
        # what proved its eviction done ("streams", "read"; "" not yet): gangq.operator.evictions
        self.stop_confirmed = ""
        self.active = True  # the Workload's spec.active, as seen or written (False: deactivated)
        self.status_queued = False  # a status writer is spawned and has not started yet

    def condition(
        self, ctype: str, status: bool, reason: str, message: str, now: float, *, only_if_present: bool = False
    ) -> None:
        """Set the Workload condition ``ctype``; its transition time moves only when its status does."""
        old = self.conditions.get(ctype)
        if old is None and only_if_present:
            return
        value = "True" if status else "False"
        since = old["lastTransitionTime"] if old is not None and old["status"] == value else rfc3339(now)
        self.conditions[ctype] = {
            "type": ctype, "status": value, "reason": reason, "message": message[:32768],
            "lastTransitionTime": since,
        }
