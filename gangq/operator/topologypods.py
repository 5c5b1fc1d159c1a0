"""Per-pod topology assignment: each gated pod of a pod set placed over several domains gets one.

The problem it solves: when the engine places a pod set's pods over several domains of the level
its request names (slices of a rack each, or a preferred placement that spread), a nodeSelector on
the pod template can hold the pods only to the domain they all share, and the scheduler could put
two pods of one slice in two racks. So such pod sets are admitted with the scheduling gate
``gangq.io/topology`` on their template (:data:`gangq.integrations.podsets.TOPOLOGY_GATE`), and
each pod, as it appears, gets the labels of one of the admission's domains added to its
nodeSelector and its gate lifted (one JSON Patch, the pod's uid and gate tested), no domain given
more pods than the engine planned there. A pod's domain is what its nodeSelector says once ungated,
so a restart counts the pods assigned before it; the domains come from the admission in memory, or
after a restart from the one recorded on the object (``gangq.io/admission``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gangq.api.meta import Meta
from gangq.integrations.interface import ObjectWrite
from gangq.integrations.podsets import TOPOLOGY_GATE
from gangq.operator.state import ControllerState
from gangq.operator.translate import recorded_admission
from gangq.operator.writer import Writer

log = logging.getLogger(__name__)

Domain = tuple[tuple[str, str], ...]
"""A domain's labels, sorted: its identity."""


def _domain(labels: Mapping[str, str]) -> Domain:
    return tuple(sorted(labels.items()))


class TopologyPods:
    """The pods of gangs with per-pod domains: which domain each was given (see the module docstring)."""

    def __init__(self, state: ControllerState, writer: Writer) -> None:
        self.state = state
        self.writer = writer
        # gang -> (the admission's time, pod -> (pod set, its domain))
        self.assigned: dict[str, tuple[float, dict[str, tuple[str, Domain]]]] = {}

    def domains(self, gang: str, pod_set: str) -> tuple[float, list[tuple[dict[str, str], int]]]:
        """The admission's time and the domains of ``pod_set`` with their pods; none when the gang
        is not admitted or the pod set is in one domain."""
        entry = self.state.entries.get(gang)
        if entry is None:
            return 0.0, []
        if entry.admission is not None:
            for ps in entry.admission.pod_sets:
                if ps.name == pod_set:
                    return entry.admission.time, list(ps.domains)
            return entry.admission.time, []
        recorded = recorded_admission(entry.obj) or {}
        for ps_json in recorded.get("podSetAssignments") or []:
            if isinstance(ps_json, Mapping) and ps_json.get("name") == pod_set:
                topo = ps_json.get("topologyAssignment") or {}
                levels = [str(x) for x in topo.get("levels") or []]
                out = []
                for d in topo.get("domains") or []:
                    values = [str(v) for v in d.get("values") or []]
                    if len(values) == len(levels):
                        out.append((dict(zip(levels, values, strict=True)), int(d.get("count") or 0)))
                return -1.0, out
        return 0.0, []

    def pod_event(self, gang: str, pod_set: str | None, key: str, obj: Mapping[str, Any], gone: bool) -> None:
        """A pod of ``gang``: remember its domain, or give a gated one its domain and lift its gate."""
        known = self.assigned.get(gang)
        if gone:
            if known is not None:
                known[1].pop(key, None)
                if not known[1]:
                    del self.assigned[gang]
            return
        if pod_set is None:
            return
        spec = obj.get("spec") or {}
        gates = [g for g in spec.get("schedulingGates") or [] if isinstance(g, Mapping)]
        index = next((i for i, g in enumerate(gates) if g.get("name") == TOPOLOGY_GATE), None)
        if index is None and known is None:
            return  # a pod of no per-pod placement (the common case: one dict lookup)
        when, domains = self.domains(gang, pod_set)
        if not domains:
            return
        if known is None or (when >= 0 and known[0] != when):
            known = self.assigned[gang] = (when, {})
        pods = known[1]
        selector = spec.get("nodeSelector") or {}
        if index is None:  # ungated: in the domain its nodeSelector names, if any
            for labels, _ in domains:
                if all(selector.get(k) == v for k, v in labels.items()):
                    pods[key] = (pod_set, _domain(labels))
                    break
            return
        chosen = pods.get(key)
        if chosen is None or chosen[0] != pod_set:
            taken: dict[Domain, int] = {}
            for ps, d in pods.values():
                if ps == pod_set:
                    taken[d] = taken.get(d, 0) + 1
            room = [(count - taken.get(_domain(labels), 0), i) for i, (labels, count) in enumerate(domains)]
            best = max(room, key=lambda r: (r[0], -r[1]))  # most pods still to come; the first on a tie
            chosen = pods[key] = (pod_set, _domain(domains[best[1]][0]))
        labels = dict(chosen[1])
        meta = Meta(obj)
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/uid", "value": meta.uid},
            {"op": "test", "path": f"/spec/schedulingGates/{index}", "value": dict(gates[index])},
            {"op": "add", "path": "/spec/nodeSelector", "value": {**selector, **labels}},
            {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
        ]
        path = f"/api/v1/namespaces/{meta.namespace_or_default}/pods/{meta.name}"
        self.writer.write_objects(f"topology:{key}", f"pod {key} (its topology domain)",
                                  [ObjectWrite(path, ops, meta.uid)])
