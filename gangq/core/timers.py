"""Timed and deferred work, run at the start of :meth:`gangq.core.engine.Engine.schedule`: pods-ready
timeouts, the end of a requeue backoff, the end of a preempted gang's holds (its preemptor, its
shelter), a preemptor's starvation (then sheltered gangs are victims too), the end of a gang's
preemption delay, the drains of ClusterQueues and LocalQueues stopped with ``HoldAndDrain``, and
the eviction of admitted workloads an admin deactivated.
"""

from __future__ import annotations

import heapq

from gangq.core.decisions import (
    Decision,
    EvictionReason,
)
from gangq.core.queue import Workload
from gangq.core.retries import RetryReason
from gangq.core.routing import Routing
from gangq.core.state import EngineState


class Timers:
    """Pods-ready timeouts, backoff ends and drains."""

    def __init__(self, state: EngineState, routing: Routing) -> None:
        self.s = state
        self.routing = routing

    def next_wakeup(self) -> float | None:
        """The earliest time at which :meth:`schedule` has timed work (None: only events matter)."""
        while self.s.book.timers:
            time, _, kind, key, token = self.s.book.timers[0]
            if self.live(kind, key, token, time):
                return time
            heapq.heappop(self.s.book.timers)
        return None

    def live(self, kind: str, key: str, token: int, time: float) -> bool:
        wl = self.s.world.workloads.get(key)
        if wl is None or wl.admit_count != token:
            return False
        if kind == "ready":
            return wl.state == "Admitted" and not wl.pods_ready
        if kind == "hold":
            return wl.state == "Pending" and wl.shelter_until == time
        if kind == "starve":
            return wl.state == "Pending" and wl.starve_at == time
        if kind == "preempt":
            return wl.state == "Pending" and wl.preempt_at == time
        return wl.state == "Pending" and wl.requeue_at is not None

    def run(self, now: float, decisions: list[Decision]) -> None:
        while self.s.book.timers and self.s.book.timers[0][0] <= now:
            time, _, kind, key, token = heapq.heappop(self.s.book.timers)
            if not self.live(kind, key, token, time):
                continue
            wl = self.s.world.workloads[key]
            if kind == "ready":
                self.pods_ready_timeout(wl, now, decisions)
            elif kind == "hold":
                # Its holds (Attempt.holding_preemptor, Attempt.sheltered) have ended.
                wl.held_for = None
                if wl.cq is not None:
                    self.s.retry(RetryReason.HOLD_ENDED, wl.cq)
            elif kind in ("starve", "preempt"):
                # A starving preemptor may take sheltered victims (Preemption.find_victims); a
                # gang whose preemption delay has ended may preempt (Preemption.delayed).
                if wl.cq is not None:
                    self.s.retry(RetryReason.PREEMPTION_TIMER, wl.cq)
            else:
                wl.requeue_at = None
                self.s.book.unrouted.pop(wl.key, None)
                self.routing.route(wl)

    def pods_ready_timeout(self, wl: Workload, now: float, decisions: list[Decision]) -> None:
        cfg = self.s.world.config
        wl.ready_evictions += 1
        n = wl.ready_evictions
        timeout = self.s.ready_timeout(wl) or 0.0
        message = (
            f"fewer than {wl.min_member} pods running {timeout:.0f}s after admission "
            f"({wl.running} running); eviction {n}"
        )
        if cfg.backoff_limit is not None and n > cfg.backoff_limit:
            wl.deactivated = True
            message += f", over the backoff limit of {cfg.backoff_limit}: deactivated"
            self.s.evict(wl, "PodsReadyTimeout", message, now, decisions, deactivated=True)
            return
        delay = min(cfg.backoff_base * (2 ** (n - 1)), cfg.backoff_max)
        requeue_at = now + delay
        if cfg.requeue_timestamp == "Eviction":
            wl.set_queue_ts(now)
        wl.evict_requeue_at = requeue_at
        self.s.evict(
            wl, "PodsReadyTimeout", message + f", requeued after {delay:.0f}s", now, decisions, requeue_at=requeue_at
        )

    def run_drains(self, now: float, decisions: list[Decision]) -> None:
        if not self.s.book.drain:
            return
        drains = list(self.s.book.drain)
        self.s.book.drain.clear()
        for item in drains:
            kind, name = item.split(":", 1)
            if kind == "wl":  # deactivated while admitted (Engine.deactivate)
                wl = self.s.world.workloads.get(name)
                if wl is not None and wl.deactivated and wl.state == "Admitted":
                    self.s.evict(wl, "Deactivated", wl.message, now, decisions, deactivated=True)
                continue
            if kind == "cq":
                cq = self.s.world.cluster_queues.get(name)
                if cq is None or cq.spec.stop_policy != "HoldAndDrain":
                    continue
                victims = list(cq.admitted.values())
                reason: EvictionReason = "ClusterQueueStopped"
                message = f"ClusterQueue {name!r} was stopped with HoldAndDrain"
            else:
                lq = self.s.world.local_queues.get(name)
                if lq is None or lq.stop_policy != "HoldAndDrain":
                    continue
                queues = self.s.world.cluster_queues.values()
                victims = [w for c in queues for w in c.admitted.values() if w.lq_key == name]
                reason = "LocalQueueStopped"
                message = f"LocalQueue {name} was stopped with HoldAndDrain"
            for wl in victims:
                if wl.state == "Admitted":
                    self.s.evict(wl, reason, message, now, decisions)
