"""The gangq controller on Kubernetes (docs/operator.md, "How it is built").

- :mod:`gangq.operator.operator` — ``run_operator()``: leader election, recovery, kopf, the loop;
- :mod:`gangq.operator.controller` — the controller, wiring its parts: :mod:`~gangq.operator.loop`
  (the scheduling loop that owns the engine), :mod:`~gangq.operator.kinds` (one handler per watched
  kind), :mod:`~gangq.operator.gangs` (a queued workload's life), :mod:`~gangq.operator.writer` (write
  lanes, the queued objects' patches, Events), :mod:`~gangq.operator.status` (Workload and queue status),
  :mod:`~gangq.operator.recovery` (the restart), :mod:`~gangq.operator.translate` (Kubernetes
  objects → engine specs), :mod:`~gangq.operator.state` and :mod:`~gangq.operator.entry` (what
  they share);
- :mod:`gangq.operator.kube` — the asyncio REST client; :mod:`gangq.operator.leader` — the Lease;
- :mod:`gangq.operator.config` — ``--config``; :mod:`gangq.operator.install` — CRDs and queues;
- :mod:`gangq.operator.cli` — ``gangq run``; :mod:`gangq.operator.jobset` — the embedded JobSet
  reconciler's kopf wiring.
"""
