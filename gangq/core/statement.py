"""Transactional what-ifs over quota and node capacity (after Volcano's ``Statement``).

Gang admission, preemption and reservations all ask "would this gang fit if ...?". A statement
lets the engine charge and release capacity in place, look, and then either keep the changes
(``commit``) or roll every one of them back (``discard``). Statements nest: an inner statement's
``discard`` rolls back only its own changes.
"""

from __future__ import annotations

from types import TracebackType

from gangq.core.nodes import NodeIndex
from gangq.core.quota import QuotaTree


class Statement:
    """One what-if; use as a context manager that discards unless committed."""

    __slots__ = ("_node_mark", "_open", "_owner", "_quota_mark", "nodes", "quota")

    def __init__(self, quota: QuotaTree, nodes: NodeIndex) -> None:
        self.quota = quota
        self.nodes = nodes
        self._owner = quota.log is None
        if self._owner:
            quota.log = []
            nodes.log = []
        assert quota.log is not None and nodes.log is not None
        self._quota_mark = len(quota.log)
        self._node_mark = len(nodes.log)
        self._open = True

    def discard(self) -> None:
        """Roll back every change made since the statement opened."""
        if not self._open:
            return
        self.nodes.undo(self._node_mark)
        self.quota.undo(self._quota_mark)
        self._close()

    def commit(self) -> None:
        """Keep the changes (an enclosing statement may still roll them back)."""
        if self._open:
            self._close()

    def _close(self) -> None:
        self._open = False
        if self._owner:
            if self.nodes.log:
                self.nodes.epoch += 1  # kept: the capacity changed for real
            self.quota.log = None
            self.nodes.log = None

    def __enter__(self) -> Statement:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.discard()
