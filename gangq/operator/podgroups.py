"""Pod groups in the controller: PodGroup and pod watch events → the assembled groups
(:class:`gangq.integrations.podgroup.PodGroups`) → the gangs' handler (:meth:`Gangs.object_event`),
and the PodGroups' status.

A group has no object of its own to watch: its gang object is assembled from its PodGroup (if
any) and its pods, and handed to the gangs as a watch event of the ``podgroups`` kind would be.
The pods' own bookkeeping (node capacity, PodsReady, the end of an eviction) is done first by
:meth:`Kinds.pod`, so a group whose last ungated pod is gone is stopped when its gang hears of it.
The pods our admission patched are fed in with the patch's outcome, before their watch events.
A group gangq does not queue (its PodGroup has no queue label and its namespace no default queue)
has gangq's gate taken off its pods, which the webhook gated before it could know.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gangq.api.meta import Meta
from gangq.integrations.podgroup import PODGROUP, SOURCE_PODGROUP, PodGroups, membership
from gangq.integrations.registry import queued
from gangq.operator.gangs import Gangs


class PodGroupFeed:
    """The assembled pod groups, fed from the watches and our writes' outcomes."""

    __slots__ = ("gangs", "groups", "holding")

    def __init__(self, gangs: Gangs) -> None:
        self.gangs = gangs
        self.groups = PodGroups()
        self.holding = False  # during a restart's recovery: groups are assembled, not handed on

    def recover(self, podgroups: Iterable[Mapping[str, Any]],
                pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """A restart's groups: assembled from the listed PodGroups and pods, the ones that are
        gangs returned for the recovery to put back as it puts back every kind's objects (an
        admitted group with the admission recorded on its pods). Until :meth:`release`, events
        update the groups but are not handed on: the recovery decides when each group is queued."""
        self.holding = True
        for obj in podgroups:
            self.groups.podgroup_event("ADDED", obj)
        for pod in pods:
            self.groups.pod_event("ADDED", pod)
        return self.groups.gangs()

    def release(self) -> None:
        """The recovery is done: every later event is handed on."""
        self.holding = False

    def hand_on(self, obj: dict[str, Any], now: float) -> None:
        """One recovered group queued as a watch event would queue it."""
        self._hand_on(("ADDED", obj), now, force=True)

    def podgroup_event(self, event_type: str, obj: dict[str, Any], key: str, now: float) -> None:
        """A PodGroup's watch event."""
        self._hand_on(self.groups.podgroup_event(event_type, obj), now)
        meta = Meta(obj)
        self._release_unqueued(PODGROUP.key_for(SOURCE_PODGROUP, meta.namespace_or_default, meta.name))

    def pod_event(self, event_type: str, pod: Mapping[str, Any], now: float) -> None:
        """A pod's watch event, after the pod's own bookkeeping."""
        self._hand_on(self.groups.pod_event(event_type, pod), now)
        member = membership(pod)
        if member is not None and event_type != "DELETED":
            namespace = Meta(pod).namespace_or_default
            self._release_unqueued(PODGROUP.key_for(member[0], namespace, member[1]))

    def _release_unqueued(self, key: str) -> None:
        """Take gangq's gate off the pods of a group it does not queue (see the module docstring)."""
        if self.holding or key in self.gangs.state.entries:
            return
        obj = self.groups.group(key)
        if obj is None or not PODGROUP.ours(obj) or queued(PODGROUP, obj, self.gangs.state.default_queue(obj)):
            return
        writes = PODGROUP.release_writes(obj)
        if writes:
            self.gangs.writer.write_objects(f"release:{key}", f"{PODGROUP.kind} {key} (not queued)", writes)

    def written(self, pods: Iterable[Mapping[str, Any]], now: float) -> None:
        """Pods as our admission patched them."""
        for pod in pods:
            self._hand_on(self.groups.pod_event("MODIFIED", pod), now)

    def _hand_on(self, event: tuple[str, dict[str, Any]] | None, now: float, *, force: bool = False) -> None:
        if event is None or (self.holding and not force):
            return
        event_type, obj = event
        self.gangs.object_event(PODGROUP, event_type, obj, now)
        if event_type == "DELETED":
            return
        entry = self.gangs.state.entries.get(PODGROUP.key_of(obj))
        if entry is not None:
            writes = PODGROUP.status_writes(obj)
            if writes:
                self.gangs.writer.write_status(entry, writes)
