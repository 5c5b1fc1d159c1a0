"""On both control planes: a queue's head with no declared runtime gets a reservation from the run
times of finished gangs of its queue, and a gang that would delay it is held back.

Three JobSets of one shape (1 pod, 1 cpu, no runtime declared) run and finish: the controller
learns their run time for that LocalQueue and shape, and keeps it in ConfigMap ``gangq-runtimes``.
Then a fourth of the same shape runs long; a head that needs the whole ClusterQueue waits for it,
and a gang behind the head that fits now — of a shape nothing is known about, so it has no
expected end — is held back (``BlockedByReservation``): the runner's learned end is the head's
reservation time, and the gang would still run then. Without learned run times the runner has no
expected end, the head no reservation time, and that gang would start at once (backfill), until
the starvation timeout (30 minutes)."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.operator.helpers import (
    Cluster,
    FakeJobSetRunner,
    admitted,
    apply,
    cluster_queue,
    finished,
    flavor,
    install,
    jobset,
    local_queue,
    start_operator,
    wait_for,
    workload_status,
)

NODES = "1x{cpu:8,memory:32Gi}"


def test_a_head_gets_a_reservation_from_learned_run_times(cluster_factory: Callable[..., Cluster]) -> None:
    sb = cluster_factory(nodes=NODES)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("learn", {"cpu": 4, "memory": "16Gi"}), local_queue("lq", "learn")])
    op = start_operator(sb)
    try:
        with FakeJobSetRunner(sb):
            warm = [f"warm-{i}" for i in range(3)]
            apply(sb, [jobset(name, "lq", requests={"cpu": 1}, run_seconds=4) for name in warm])
            wait_for(lambda: all(finished(sb, name) for name in warm), 60, "the three first gangs to finish")

            apply(sb, [jobset("runner", "lq", requests={"cpu": 1}, run_seconds=300)])
            wait_for(lambda: admitted(sb, "runner"), 20, "the long runner admitted")
            apply(sb, [jobset("head", "lq", requests={"cpu": 4}, run_seconds=1)])
            wait_for(lambda: workload_status(sb, "head").get("reason"), 20, "the head's reason")
            apply(sb, [jobset("behind", "lq", requests={"cpu": 2, "memory": "1Gi"}, run_seconds=300)])
            status = wait_for(lambda: (s := workload_status(sb, "behind")).get("reason") == "BlockedByReservation"
                              and s, 20, "the gang behind the head held back by its reservation")
            assert "head" in status["message"], status
            assert not admitted(sb, "behind")
            assert not admitted(sb, "head")

            def learned() -> list[object] | None:
                """The queue's group in ConfigMap gangq-runtimes, once it holds the three run times
                (it is written at most every 30 s)."""
                try:
                    cm = sb.call(sb.store.get, "", "configmaps", op.config.leader_election.namespace, "gangq-runtimes")
                except Exception:
                    return None
                groups = json.loads(cm["data"]["runtimes.json"])["groups"]
                mine = [g for g in groups if g[0] == "default/lq" and len(g[3]) == 3]
                return mine[0] if mine else None  # type: ignore[no-any-return]

            group = wait_for(learned, 60, "the three learned run times kept in ConfigMap gangq-runtimes")
            assert group[2] == [["worker", 1, [["cpu", 1000]]]] and all(t >= 1 for t in group[3]), group
    finally:
        op.stop()
