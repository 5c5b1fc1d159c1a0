"""What admitted gangs and bound pods hold of quota and nodes, and the retries that capacity
coming free asks for.

Pods of admitted gangs replace the gang's planned pods (what preemption frees when the gang is a
victim); other pods, a gang's own pods bound before its admission included, just use capacity.
"""

from __future__ import annotations

from gangq.core.model import PodInfo
from gangq.core.queue import Workload
from gangq.core.retries import RetryReason
from gangq.core.retry import RetryPolicy
from gangq.core.state import EngineState


class Capacity:
    """Quota and node capacity held by gangs and pods."""

    def __init__(self, state: EngineState, retry: RetryPolicy) -> None:
        self.s = state
        self.retry = retry

    def update_pod(self, pod: PodInfo) -> None:
        """A pod is bound to a node (or changed phase). Pods of admitted gangs replace the gang's
        planned reservation; other pods just consume node capacity."""
        old = self.s.world.pods.get(pod.key)
        if old is not None:
            if old.node == pod.node and old.requests == pod.requests and old.workload == pod.workload:
                self.s.world.pods[pod.key] = pod
                self.pod_running_changed(old, pod)
                return
            self.delete_pod(pod.key)
        node = self.s.world.nodes.nodes.get(pod.node)
        self.s.world.pods[pod.key] = pod
        wl = self.s.world.workloads.get(pod.workload) if pod.workload else None
        if wl is not None:
            wl.pods[pod.key] = False
        if wl is not None and wl.state in ("Admitted", "Evicting"):
            self.bind_gang_pod(wl, pod)
        elif node is not None:
            self.s.world.nodes.allocate(node, pod.requests, 1)
            self.s.world.version += 1
        if pod.running and wl is not None and wl.state == "Admitted":
            self.count_running(wl, +1)

    def delete_pod(self, key: str) -> None:
        """A pod is gone (deleted, or terminal): its node capacity is free again — unless it was a
        pod of a gang still admitted, whose slot on that node stays the gang's until the gang
        finishes or is evicted (:meth:`keep_slot`)."""
        pod = self.s.world.pods.pop(key, None)
        if pod is None:
            return
        wl = self.s.world.workloads.get(pod.workload) if pod.workload else None
        held = wl.pods.pop(key, False) if wl is not None else False
        if wl is not None and held and wl.state == "Admitted" and self.keep_slot(wl, pod):
            return
        node = self.s.world.nodes.nodes.get(pod.node)
        if node is not None:
            self.s.world.nodes.allocate(node, pod.requests, -1)
        if wl is not None and held:
            wl.hold(pod.node, pod.requests, -1)
        if pod.running and wl is not None and wl.state == "Admitted":
            self.count_running(wl, -1)
        self.capacity_freed()

    def keep_slot(self, wl: Workload, pod: PodInfo) -> bool:
        """An admitted gang's bound pod is gone: its node slot becomes one of the gang's planned
        slots again, held until the gang finishes or is evicted, as its quota is (a gang is
        admitted and released as a whole). A pod that replaces it (a restarted Job's) takes the
        slot back. Without this, a gang whose pods end one by one let the next gang in beside its
        last pods: two gangs' pods at once on capacity sized for one (a user's "one group at a
        time" broken by a straggler). False (the slot is freed) when its pod set or node is gone, and
        for a gang of a ClusterQueue that does not check nodes (``QuotaOnly``: it was given no
        slots)."""
        cq = wl.cq
        if cq is None or cq.spec.admission_mode != "QuotaAndNodes":
            return False
        ps_index = next((i for i, ps in enumerate(wl.spec.pod_sets) if ps.name == pod.pod_set), -1)
        node = self.s.world.nodes.nodes.get(pod.node)
        if ps_index < 0 or node is None:
            return False
        planned_req = wl.spec.pod_sets[ps_index].requests
        self.s.world.nodes.allocate(node, pod.requests, -1)
        self.s.world.nodes.allocate(node, planned_req, 1)
        wl.hold(pod.node, pod.requests, -1)
        wl.hold(pod.node, planned_req, 1)
        slot = (ps_index, pod.node)
        wl.planned[slot] = wl.planned.get(slot, 0) + 1
        if pod.running:
            self.count_running(wl, -1)
        self.s.world.version += 1
        return True

    def pod_running_changed(self, old: PodInfo, pod: PodInfo) -> None:
        if old.running == pod.running or not pod.workload:
            return
        wl = self.s.world.workloads.get(pod.workload)
        if wl is not None and wl.state == "Admitted":
            self.count_running(wl, 1 if pod.running else -1)

    def count_running(self, wl: Workload, delta: int) -> None:
        wl.running += delta
        if wl.running >= wl.min_member:
            wl.pods_ready = True

    def bind_gang_pod(self, wl: Workload, pod: PodInfo) -> None:
        """Swap one planned slot of the gang for the bound pod (prefer the slot on its node)."""
        ps_index = next((i for i, ps in enumerate(wl.spec.pod_sets) if ps.name == pod.pod_set), -1)
        slot: tuple[int, str] | None = (ps_index, pod.node)
        if slot not in wl.planned:
            slot = next((s for s in wl.planned if s[0] == ps_index), None)
            if slot is None:
                slot = next(iter(wl.planned), None)
        if slot is not None:
            planned_req = wl.spec.pod_sets[slot[0]].requests
            planned_node = self.s.world.nodes.nodes.get(slot[1])
            if planned_node is not None:
                self.s.world.nodes.allocate(planned_node, planned_req, -1)
            wl.hold(slot[1], planned_req, -1)
            left = wl.planned[slot] - 1
            if left:
                wl.planned[slot] = left
            else:
                del wl.planned[slot]
        node = self.s.world.nodes.nodes.get(pod.node)
        if node is not None:
            self.s.world.nodes.allocate(node, pod.requests, 1)
        wl.hold(pod.node, pod.requests, 1)
        wl.pods[pod.key] = True
        self.s.world.version += 1

    def capacity_freed(self) -> None:
        """Node capacity came free (or nodes changed): retry the queues whose node-blocked gangs
        could use it (unless the retry policy knows they cannot, see
        :meth:`~gangq.core.retry.RetryPolicy.skips_node_wait`), and those waiting on a reservation."""
        s = self.s
        s.world.version += 1
        freed = s.pools_freed()
        retry = self.retry
        still: dict[str, frozenset[int] | None] = {}
        for name, pools in s.book.waiting_nodes.items():
            cq = s.world.cluster_queues.get(name)
            if cq is None:
                continue
            if retry.skips_node_wait(cq, freed, pools):
                still[name] = pools
                continue
            s.retry(RetryReason.NODES_FREED, cq)
        s.book.waiting_nodes = still
        for name in s.book.waiting_reservation:
            cq = s.world.cluster_queues.get(name)
            if cq is not None:
                s.retry(RetryReason.RESERVATION_CAPACITY_FREED, cq)
        s.book.waiting_reservation.clear()

    def nodes_changed(self) -> None:
        """A node left, or changed its capacity, labels, taints or schedulability: a protected
        head may no longer fit even an empty cluster, and then it holds back nothing behind it
        (see :meth:`Reservations.holding_head`): its queue is retried (``NODES_CHANGED``)."""
        for name in self.s.book.protected:
            cq = self.s.world.cluster_queues.get(name)
            if cq is not None and cq.protected_head is not None:
                self.s.retry(RetryReason.NODES_CHANGED, cq)

    def detach_pods(self, wl: Workload) -> None:
        """A finished gang's bound pods become pods of no gang: they use their nodes until the
        shell deletes them (:meth:`delete_pod`)."""
        pods = self.s.world.pods
        for pod_key in wl.pods:
            pod = pods.get(pod_key)
            if pod is not None:
                pods[pod_key] = PodInfo(pod.key, pod.node, pod.requests, running=pod.running)
        wl.pods.clear()

    def forget_pods(self, wl: Workload) -> None:
        """A stopped or finished gang's pods no longer use their nodes."""
        for pod_key in list(wl.pods):
            self.delete_pod(pod_key)
        wl.pods.clear()

    def release(self, wl: Workload) -> None:
        """Give back a gang's quota and planned node capacity (bound pods are released by the
        shell's pod deletions)."""
        cq = wl.cq
        if cq is None:
            return
        released = wl.usage
        given_back = cq.node.top.released
        self.s.book.scratch[cq.name].screen = None  # its own unused quota grows: the last screen no longer bounds it
        for fr, amount in released.items():
            self.s.world.quota.add_usage(cq.node, fr, -amount)
            given_back[fr] = given_back.get(fr, 0) + amount
        bound = any(wl.pods.values())  # pods that hold capacity for it
        for (ps_index, node_name), count in wl.planned.items():
            node = self.s.world.nodes.nodes.get(node_name)
            req = wl.spec.pod_sets[ps_index].requests
            if node is not None:
                self.s.world.nodes.allocate(node, req, -count)
            if bound:
                wl.hold(node_name, req, -count)
        if not bound:
            wl.held = {}  # it held its planned pods only
        wl.planned = {}
        wl.usage = {}
        cq.admitted.pop(wl.key, None)
        if wl.end_time is not None:
            self.s.book.running_by_end.discard((wl.end_time, wl.seq, wl.key))
            wl.end_time = None
        wl.cq = None
        self.s.world.version += 1
        self.retry.after_release(cq)
        self.capacity_freed()
        if cq.deleted and not cq.admitted:
            self.s.forget_cluster_queue(cq)
