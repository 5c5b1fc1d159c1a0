"""The controller's configuration handlers for Topologies, flavors' topologyName and
AdmissionChecks (no cluster: the handlers and the statuses they compute)."""

from __future__ import annotations

from typing import Any, cast

from gangq.operator.controller import Controller
from gangq.operator.kube import KubeClient
from gangq.operator.translate import CQ_FINALIZER
from tests.operator.helpers import operator_config

RACK, HOST = "cloud.provider.com/topology-rack", "kubernetes.io/hostname"


def _obj(name: str, spec: dict[str, Any], rv: int, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv), **meta}, "spec": spec}


def _cq(name: str, flavor: str, rv: int, **extra: Any) -> dict[str, Any]:
    spec = {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
        {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": 8}]}]}], **extra}
    return _obj(name, spec, rv, finalizers=[CQ_FINALIZER])


def _active(controller: Controller, cq: str) -> dict[str, Any]:
    status = controller.statuses._cq_status(cq)
    cond: dict[str, Any] = status["conditions"][0]
    return cond


def test_flavor_gets_its_topology_and_waits_for_a_missing_one() -> None:
    c = Controller(cast(KubeClient, None), operator_config())
    c.kinds.apply("resourceflavors", "ADDED", _obj("tas", {"topologyName": "default"}, 1), 0.0)
    c.kinds.apply("clusterqueues", "ADDED", _cq("cq", "tas", 2), 0.0)
    assert "tas" not in c.engine.s.world.flavors
    cond = _active(c, "cq")
    assert (cond["status"], cond["reason"]) == ("False", "TopologyNotFound")
    assert "there is no Topology 'default' for flavor 'tas'" in cond["message"]
    # the Topology arrives: the flavor is applied again, with its levels
    levels = {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOST}]}
    c.kinds.apply("topologies", "ADDED", _obj("default", levels, 3), 0.0)
    topology = c.engine.s.world.flavors["tas"].topology
    assert topology is not None and topology.levels == [RACK, HOST]
    assert _active(c, "cq")["reason"] == "Ready"
    # an invalid Topology counts as missing, and the ClusterQueue says why
    c.kinds.apply("topologies", "MODIFIED", _obj("default", {"levels": [{"nodeLabel": HOST}, {"nodeLabel": RACK}]}, 4),
                  0.0)
    cond = _active(c, "cq")
    assert cond["reason"] == "TopologyNotFound" and "the Topology is invalid" in cond["message"]
    c.kinds.apply("topologies", "MODIFIED", _obj("default", {"levels": [{"nodeLabel": RACK}]}, 5), 0.0)
    topology = c.engine.s.world.flavors["tas"].topology
    assert topology is not None and topology.levels == [RACK]
    c.kinds.apply("topologies", "DELETED", _obj("default", {}, 6), 0.0)
    assert "tas" not in c.engine.s.world.flavors and _active(c, "cq")["reason"] == "TopologyNotFound"


def test_cluster_queue_with_admission_checks_is_inactive_naming_them() -> None:
    c = Controller(cast(KubeClient, None), operator_config())
    c.kinds.apply("resourceflavors", "ADDED", _obj("default", {}, 1), 0.0)
    c.kinds.apply("clusterqueues", "ADDED", _cq("cq", "default", 2, admissionChecks=["prov"]), 0.0)
    view = c.engine.cluster_queue("cq")
    assert view is not None and not view.active  # held: nothing is admitted
    cond = _active(c, "cq")
    assert (cond["status"], cond["reason"]) == ("False", "AdmissionCheckNotFound")
    assert "references missing AdmissionCheck(s): prov" in cond["message"]
    assert "gangq does not run admission-check controllers" in cond["message"]
    # the check is created: still inactive, now for what it is
    c.kinds.apply("admissionchecks", "ADDED",
                  _obj("prov", {"controllerName": "kueue.x-k8s.io/provisioning-request"}, 3), 0.0)
    cond = _active(c, "cq")
    assert cond["reason"] == "AdmissionCheckInactive"
    assert "cluster-autoscaler's ProvisioningRequest is not supported by gangq" in cond["message"]
    ac = c.statuses._ac_status("prov")["conditions"][0]
    assert (ac["status"], ac["reason"]) == ("False", "NotSupported")
    reason, message = c.statuses.explain_pending("ClusterQueueStopped", "ClusterQueue 'cq' is stopped (Hold)", "cq")
    assert reason == "ClusterQueueInactive" and "ProvisioningRequest" in message
    # the checks are removed: the queue admits again
    c.kinds.apply("clusterqueues", "MODIFIED", _cq("cq", "default", 4), 0.0)
    view = c.engine.cluster_queue("cq")
    assert view is not None and view.active and _active(c, "cq")["reason"] == "Ready"
    # a queue the admin stopped stays stopped, and says so, without checks
    c.kinds.apply("clusterqueues", "MODIFIED", _cq("cq", "default", 5, stopPolicy="Hold"), 0.0)
    assert _active(c, "cq")["reason"] == "Stopped"
