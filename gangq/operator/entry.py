"""What the controller knows about one queued workload (a JobSet, a Job) and its Workload object.

The entry's :class:`EntryState` changes only through :meth:`Entry.move`, which knows the legal
transitions (:data:`TRANSITIONS`): the gang's lifecycle is stated once, here, and a move the table
does not allow is logged as the controller bug it is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

from gangq.api.meta import Meta, rfc3339
from gangq.core.decisions import Admission
from gangq.integrations.interface import WorkloadKind
from gangq.integrations.jobset import JOBSET

log = logging.getLogger(__name__)


class EntryState(StrEnum):
    """Where a queued workload is in gangq's lifecycle. The value is the text the controller
    writes and logs (the Workload status shows ``Evicting`` as ``Evicted``)."""

    PENDING = "Pending"
    """Queued: waiting for admission (or for the first scheduling cycle)."""
    INADMISSIBLE = "Inadmissible"
    """The object is malformed: no gang until it changes."""
    ADMITTED = "Admitted"
    """Admitted: its quota is charged and it runs (or is being unsuspended)."""
    EVICTING = "Evicting"
    """Suspended by gangq (or held after starting unsuspended): its quota stays charged until its
    pods are gone."""
    FINISHED = "Finished"
    """Completed or failed: forgotten once that status is written."""


TRANSITIONS: Final[Mapping[EntryState, frozenset[EntryState]]] = {
    EntryState.PENDING: frozenset({EntryState.INADMISSIBLE, EntryState.ADMITTED, EntryState.EVICTING,
                                   EntryState.FINISHED}),
    EntryState.INADMISSIBLE: frozenset({EntryState.PENDING, EntryState.FINISHED}),
    EntryState.ADMITTED: frozenset({EntryState.PENDING, EntryState.EVICTING, EntryState.FINISHED}),
    EntryState.EVICTING: frozenset({EntryState.PENDING, EntryState.FINISHED}),
    EntryState.FINISHED: frozenset(),
}
"""The states an entry may move to from each state (staying where it is is always allowed):
admission, eviction and requeue, the eviction done, a malformed object and its fix, and the end."""


class Entry:
    """One queued workload of ``kind`` (:mod:`gangq.integrations`): its last object, the
    gang's state and the Workload status to write.

    ``state`` is an :class:`EntryState`, changed only by :meth:`move`.
    """

    __slots__ = (
        "_state",
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
        "runtime",
        "rv",
        "sig",
        "spec",
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
        # Its expected run time and where it comes from (gangq.operator.runtimes), if known.
        self.runtime: tuple[float, str] | None = None
        self._state = EntryState.PENDING
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
        self.writing = False  # a patch of the object (admission or suspend) is in flight
        # what proved its eviction done ("streams", "read"; "" not yet): gangq.operator.evictions
        self.stop_confirmed = ""
        self.active = True  # the Workload's spec.active, as seen or written (False: deactivated)
        self.status_queued = False  # a status writer is spawned and has not started yet

    @property
    def state(self) -> EntryState:
        return self._state

    def move(self, to: EntryState) -> None:
        """Move to state ``to``. A move :data:`TRANSITIONS` does not allow is a controller bug: it is
        logged as an error and made all the same (the entry then says what the controller did;
        stopping the scheduling loop for it would stop every queue)."""
        if to is not self._state and to not in TRANSITIONS[self._state]:
            log.error("%s %s: state %s → %s is not a legal transition", self.kind.kind, self.key, self._state, to,
                      extra={"gang": self.key, "from_state": str(self._state), "to_state": str(to)})
        self._state = to

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
