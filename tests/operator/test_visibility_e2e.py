"""The pending-workloads API of a controller pair, on both control planes: every replica serves it
(the APIService's Service spreads requests over both); the leader answers from its engine, the
standby with a 503 that says it does not lead — after checking the caller like the leader does —
and once the leader is gone, the replica that takes over answers."""

from __future__ import annotations

import datetime
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gangq.operator import certs
from gangq.sandbox.runtime import free_port
from tests.clusters import RealCluster
from tests.operator.helpers import (
    Cluster,
    apply,
    cluster_queue,
    flavor,
    install,
    local_queue,
    operator_config,
    operator_thread,
    start_operator,
    wait_for,
)

PATH = "/apis/visibility.gangq.io/v1alpha1/clusterqueues/cq/pendingworkloads"


def user_token(sb: Cluster) -> str:
    """A token the cluster's TokenReview accepts, of a user allowed everything."""
    if isinstance(sb, RealCluster):
        return sb.cp.pki.identities["admin"].token
    assert sb.server is not None
    return sb.server.token


def test_the_leader_answers_a_standby_says_it_does_not_and_takes_over(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    sb = cluster_factory(cluster=False)
    install(sb)
    apply(sb, [flavor("default"), cluster_queue("cq", {"cpu": 4}, admission_mode="QuotaOnly"),
               local_queue("q", "cq")])
    bundle = certs.plan(None, ["127.0.0.1"], datetime.datetime.now(datetime.UTC))
    assert bundle is not None
    (tmp_path / "tls.crt").write_bytes(bundle.serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(bundle.serving.key_pem)
    trust = ssl.create_default_context(cadata=bundle.ca_bundle.decode())
    ports = [free_port(), free_port()]
    token = user_token(sb)

    def read(port: int, credentials: str | None = token) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(f"https://127.0.0.1:{port}{PATH}")
        if credentials is not None:
            request.add_header("Authorization", f"Bearer {credentials}")
        try:
            with urllib.request.urlopen(request, timeout=10, context=trust) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")
        except OSError:  # not listening yet
            return 0, {}

    def config(port: int) -> Any:
        return operator_config(visibility={"port": port, "certDir": str(tmp_path)})

    first = start_operator(sb, config(ports[0]), identity="replica-a")
    second = operator_thread(sb, config(ports[1]), identity="replica-b")
    try:
        wait_for(lambda: read(ports[0])[0] == 200, 15, "the leader's answer")
        status, standby = wait_for(lambda: (r := read(ports[1]))[0] != 0 and r, 15, "the standby's answer")
        assert status == 503 and "does not lead" in standby["message"], standby
        assert read(ports[1], None)[0] == 401  # a standby checks the caller first too
        assert read(ports[0], "not-a-token")[0] == 401
        first.kill()
        wait_for(lambda: second.leading, 15, "the standby to lead")
        status, page = wait_for(lambda: (r := read(ports[1]))[0] == 200 and r, 15, "the new leader's answer")
        assert page["clusterQueue"] == "cq" and page["total"] == 0
    finally:
        second.stop()
        first.stop()
