"""The leader's pod carries the label ``gangq.io/leader: "true"``; no other replica's pod does.

Only the leader can answer the pending-workloads API (a standby has no watches and no engine), yet
every replica serves its port. The Service behind the APIService ``v1alpha1.visibility.gangq.io``
selects this label, so kube-apiserver's aggregator sends every request to the leader: without it,
the Service spread requests over the replicas and a researcher's ``kubectl get --raw`` or
``gangq queue`` failed on every other call with a standby's 503.

The replica labels its own pod, named by the Downward API (``POD_NAME``, ``POD_NAMESPACE``, as the
install's Deployment sets them), once it leads and has recovered the cluster's state; it removes
the label when it stops leading, and at start, so that a container restarted in the pod of a
crashed leader does not keep receiving requests it cannot answer. Outside a pod (no ``POD_NAME``)
nothing is labelled. A failed write is logged and never stops the controller: the label only
routes reads, and the next leader writes its own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Final

from gangq.operator.kube import MERGE_PATCH, ApiError, KubeClient, resource_path

log = logging.getLogger(__name__)

LEADER_LABEL: Final = "gangq.io/leader"
POD_NAME_ENV: Final = "POD_NAME"
POD_NAMESPACE_ENV: Final = "POD_NAMESPACE"


class LeaderPod:
    """Writes ``gangq.io/leader`` on one pod (this replica's)."""

    __slots__ = ("client", "name", "namespace")

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name

    @classmethod
    def from_env(cls, client: KubeClient, environ: Mapping[str, str] | None = None) -> LeaderPod | None:
        """This replica's pod, from the Downward API's environment; None outside a pod."""
        env = os.environ if environ is None else environ
        name, namespace = env.get(POD_NAME_ENV, ""), env.get(POD_NAMESPACE_ENV, "")
        if not name or not namespace:
            return None
        return cls(client, namespace, name)

    async def mark(self, leading: bool) -> bool:
        """Set the label (``leading``) or remove it; True when the API server took the change."""
        body = {"metadata": {"labels": {LEADER_LABEL: "true" if leading else None}}}
        path = resource_path("", "v1", "pods", self.namespace, self.name)
        try:
            await self.client.patch(path, body, MERGE_PATCH)
        except ApiError as err:
            log.warning("cannot %s the label %s on pod %s/%s: %s (the pending-workloads API's Service routes "
                        "by it)", "set" if leading else "remove", LEADER_LABEL, self.namespace, self.name, err)
            return False
        log.info("pod %s/%s %s", self.namespace, self.name,
                 f"labelled {LEADER_LABEL}=true" if leading else f"no longer labelled {LEADER_LABEL}")
        return True
