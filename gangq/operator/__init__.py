"""The gangq controller on Kubernetes (docs/operator.md).

- :mod:`gangq.operator.operator` — ``run_operator()``: leader election, recovery, kopf, the loop;
- :mod:`gangq.operator.controller` — the scheduling loop that owns the engine, and the writes;
- :mod:`gangq.operator.kube` — the asyncio REST client; :mod:`gangq.operator.leader` — the Lease;
- :mod:`gangq.operator.config` — ``--config``; :mod:`gangq.operator.install` — CRDs and queues;
- :mod:`gangq.operator.cli` — ``gangq run``; :mod:`gangq.operator.jobset` — the embedded JobSet
  reconciler's kopf wiring (issue 6).
"""
