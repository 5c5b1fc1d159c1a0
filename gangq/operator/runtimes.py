"""Run times learned from finished gangs, in the controller: the estimates reservations and backfill
use for gangs that declare none.

The problem it solves: most jobs declare no runtime (no ``activeDeadlineSeconds``, no
``gangq.io/runtime-limit``), and without an expected end for the gangs that run, a starving head
has no reservation time: backfill then goes on until the starvation timeout, and gangs that will
still run when the head could have started delay it. The simulator learns run times from finished
gangs; the controller does the same, with the same estimator (:mod:`gangq.core.runtimes`).

- **Similar gangs**: the same LocalQueue (namespace and name), priority class and shape (pods and
  requests of each pod set). A gang with a declared runtime uses it; one without gets the
  estimator's quantile of its group's last run times once enough have finished.
- **Run time**: from admission to a successful finish (what the engine's expected end counts
  from); failed gangs teach nothing.
- **Kept across restarts** in the ConfigMap ``gangq-runtimes`` of the controller's namespace (its
  pod's, from the Downward API's ``POD_NAMESPACE``; outside a pod ``leaderElection.namespace``),
  written at most every :data:`SAVE_INTERVAL_SECONDS` when it changed and read back by the
  recovery; bounded (:data:`MAX_GROUPS` groups, the last runs of each, whole seconds). Where the
  controller may not read or write it (no such Role), it says so once and keeps them in memory.
- **Visible**: ``Entry.runtime`` says the estimate and where it came from; the Workload's status
  ``runtimeEstimate`` and ``gangq queue`` show it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Hashable, Mapping
from typing import Any, Final, cast

from gangq.core.model import WorkloadSpec
from gangq.core.runtimes import RuntimeEstimator
from gangq.operator.entry import Entry
from gangq.operator.kube import ApiError, resource_path
from gangq.operator.leaderpod import POD_NAMESPACE_ENV
from gangq.operator.state import ControllerState
from gangq.operator.writer import Writer

log = logging.getLogger(__name__)

CONFIGMAP: Final = "gangq-runtimes"
DATA_KEY: Final = "runtimes.json"
SAVE_INTERVAL_SECONDS: Final = 30.0
MAX_GROUPS: Final = 1024
"""Groups kept (and written): a ConfigMap holds at most 1 MiB."""


Shape = tuple[tuple[str, int, tuple[tuple[str, int], ...]], ...]


def shape(spec: WorkloadSpec) -> Shape:
    """What makes two gangs of one queue and priority class similar: their pod sets' sizes and requests."""
    return tuple((ps.name, ps.count, tuple(sorted(ps.requests.items()))) for ps in spec.pod_sets)


def group(spec: WorkloadSpec) -> Hashable:
    return (spec.priority_class or "", shape(spec))


class LearnedRuntimes:
    """The controller's estimator and its ConfigMap (see the module docstring)."""

    def __init__(self, state: ControllerState, writer: Writer) -> None:
        self.state = state
        self.writer = writer
        self.estimator = RuntimeEstimator(max_groups=MAX_GROUPS)
        self.namespace = os.environ.get(POD_NAMESPACE_ENV) or state.config.leader_election.namespace
        self.dirty = False
        self.last_saved = 0.0
        self.exists: bool | None = None  # does the ConfigMap exist (None: not known)
        self.refused = False  # the API refused us the ConfigMap: kept in memory only

    def estimate(self, entry: Entry, spec: WorkloadSpec) -> tuple[float, str] | None:
        """The gang's expected run time and where it comes from, or None when nothing is known."""
        if spec.runtime_limit is not None:
            return spec.runtime_limit, "declared"
        queue = entry.lq
        learned = self.estimator.estimate(queue, group(spec))
        if learned is None:
            return None
        n = self.estimator.samples(queue, group(spec))
        return learned, f"learned from {n} finished gangs of the same shape in LocalQueue {queue}"

    def engine_spec(self, entry: Entry, spec: WorkloadSpec) -> WorkloadSpec:
        """The spec the engine gets: with the learned run time as its expected run time when it
        declares none (the Workload keeps the declared spec)."""
        found = self.estimate(entry, spec)
        entry.runtime = found
        if found is None or spec.runtime_limit is not None:
            return spec
        learned = WorkloadSpec.__new__(WorkloadSpec)
        for name in WorkloadSpec.__slots__:
            setattr(learned, name, getattr(spec, name))
        learned.runtime_limit = found[0]
        learned.runtime_estimated = True
        return learned

    def finished(self, entry: Entry, succeeded: bool, now: float) -> None:
        """A gang finished: a successful one teaches its group its run time since admission."""
        admission, spec = entry.admission, entry.spec
        if not succeeded or admission is None or spec is None or admission.time <= 0:
            return
        seconds = round(max(now - admission.time, 0.0))
        self.estimator.observe(entry.lq, group(spec), float(seconds))
        self.dirty = True

    # -- kept in the API ---------------------------------------------------------------------------

    def _path(self) -> str:
        return resource_path("", "v1", "configmaps", self.namespace, CONFIGMAP)

    async def load(self) -> None:
        """Read the ConfigMap (recovery, before the gangs are queued); a missing or unreadable one
        means nothing learned yet."""
        try:
            obj = await self.state.client.get(self._path(), attempts=3)
        except ApiError as err:
            if err.status == 404:
                self.exists = False
            else:
                self._refused_or_failed("read", err)
            return
        self.exists = True
        self.load_data(obj.get("data") or {})

    def _refused_or_failed(self, what: str, err: ApiError) -> None:
        if err.status in (401, 403):
            self.refused = True
            log.warning("runtime estimates: may not %s ConfigMap %s/%s (%s): learned run times are kept in memory "
                        "only (the install's Role gangq-controller-state grants it)", what, self.namespace, CONFIGMAP,
                        err)
        else:
            log.warning("runtime estimates: cannot %s ConfigMap %s/%s (%s)", what, self.namespace, CONFIGMAP, err)

    def load_data(self, data: Mapping[str, Any]) -> None:
        try:
            doc = json.loads(str(data.get(DATA_KEY) or "{}"))
            groups: list[tuple[Hashable, list[float]]] = []
            for queue, priority_class, pod_sets, times in doc.get("groups") or []:
                key = (str(queue), (str(priority_class), tuple(
                    (str(n), int(c), tuple((str(r), int(v)) for r, v in reqs)) for n, c, reqs in pod_sets)))
                groups.append((key, [float(t) for t in times]))
        except (ValueError, TypeError) as err:
            log.warning("runtime estimates: ConfigMap %s/%s is not what gangq writes (%s): ignored",
                        self.namespace, CONFIGMAP, err)
            return
        self.estimator.load(groups)
        log.info("runtime estimates: %d groups of finished gangs read from ConfigMap %s/%s",
                 len(groups), self.namespace, CONFIGMAP)

    def dump(self) -> str:
        groups = []
        for key, times in self.estimator.export():
            queue, (priority_class, pod_sets) = cast(tuple[str, tuple[str, Shape]], key)
            groups.append([queue, priority_class, [[n, c, [list(r) for r in reqs]] for n, c, reqs in pod_sets],
                           [int(t) for t in times]])
        return json.dumps({"version": 1, "groups": groups}, separators=(",", ":"))

    def save_if_due(self, now: float | None = None) -> None:
        """Write the ConfigMap when something was learned and the last write is old enough."""
        now = time.monotonic() if now is None else now
        if not self.dirty or self.refused or now - self.last_saved < SAVE_INTERVAL_SECONDS:
            return
        self.dirty = False
        self.last_saved = now
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": CONFIGMAP, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/name": "gangq"}},
                "data": {DATA_KEY: self.dump()}}

        async def write() -> None:
            """One write: a create when the ConfigMap is not there (as the recovery read it), else
            an update; the other one when the API says otherwise."""
            for attempt in range(2):
                try:
                    if self.exists is False:
                        await self.state.client.create(resource_path("", "v1", "configmaps", self.namespace), body,
                                                       want_body=False, attempts=3)
                    else:
                        await self.state.client.replace(self._path(), body, attempts=3)
                    self.exists = True
                    return
                except ApiError as err:
                    if attempt == 0 and err.status in (404, 409):
                        self.exists = err.status == 409
                        continue
                    if err.status in (401, 403):
                        self._refused_or_failed("write", err)
                    else:
                        log.debug("runtime estimates: not written (%s)", err)
                    self.dirty = True
                    return

        self.writer.spawn("runtimes", write)
