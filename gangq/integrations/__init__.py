"""The kinds of workload gangq queues, one module per kind behind one interface.

- :mod:`~gangq.integrations.interface`: :class:`WorkloadKind`, what every kind answers;
- :mod:`~gangq.integrations.podsets`: the gang rules, the same for every kind (pod sets → the
  gang; flavors injected into pod templates at admission and restored at eviction);
- one module per kind (:mod:`~gangq.integrations.jobset`, :mod:`~gangq.integrations.job`,
  :mod:`~gangq.integrations.kubeflow` …);
- :mod:`~gangq.integrations.registry`: the list of kinds. The controller's watches, handlers,
  recovery lists and webhook rules, and the install's RBAC checks, are derived from it.

Nothing here does I/O: a kind maps objects to gangs and patches; the controller
(:mod:`gangq.operator`) reads and writes.
"""
