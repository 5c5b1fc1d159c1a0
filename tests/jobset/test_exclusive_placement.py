"""Exclusive placement (``alpha.jobset.sigs.k8s.io/exclusive-topology``): the embedded reconciler
gives each child Job's pods the affinities that keep the Job in one domain and other Jobs out."""

from __future__ import annotations

from typing import Any

from gangq.jobset import constants as c
from gangq.jobset.reconciler import exclusive_placement, job_hash_key

from .world import World, make_jobset

RACK = "cloud.provider.com/topology-rack"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def test_jobset_annotation_gives_every_child_job_its_own_domain() -> None:
    js = make_jobset("train", rjobs=[{"name": "worker", "replicas": 2, "pods": 3}])
    js["metadata"]["annotations"] = {c.EXCLUSIVE_KEY: RACK}
    w = World(js)
    w.step()
    for name in ("train-worker-0", "train-worker-1"):
        job = w.jobs[name]
        own = job_hash_key("ns", name)
        assert job["spec"]["template"]["metadata"]["annotations"][c.EXCLUSIVE_KEY] == RACK
        affinity = _pod_spec(job)["affinity"]
        assert affinity["podAffinity"][REQUIRED] == [{
            "labelSelector": {"matchExpressions": [{"key": c.JOB_KEY, "operator": "In", "values": [own]}]},
            "topologyKey": RACK, "namespaceSelector": {}}]
        assert affinity["podAntiAffinity"][REQUIRED] == [{
            "labelSelector": {"matchExpressions": [{"key": c.JOB_KEY, "operator": "Exists"},
                                                   {"key": c.JOB_KEY, "operator": "NotIn", "values": [own]}]},
            "topologyKey": RACK, "namespaceSelector": {}}]
        # the pods carry the job-key the terms select on
        assert job["spec"]["template"]["metadata"]["labels"][c.JOB_KEY] == own


def test_replicated_job_annotation_wins_and_applies_to_its_jobs_only() -> None:
    js = make_jobset("train", rjobs=[{"name": "driver"}, {"name": "worker", "replicas": 2}])
    js["metadata"]["annotations"] = {c.EXCLUSIVE_KEY: "block"}
    js["spec"]["replicatedJobs"][1]["template"]["metadata"] = {"annotations": {c.EXCLUSIVE_KEY: RACK}}
    w = World(js)
    w.step()
    worker = _pod_spec(w.jobs["train-worker-0"])["affinity"]
    assert worker["podAffinity"][REQUIRED][0]["topologyKey"] == RACK
    assert w.jobs["train-worker-0"]["spec"]["template"]["metadata"]["annotations"][c.EXCLUSIVE_KEY] == RACK
    driver = _pod_spec(w.jobs["train-driver-0"])["affinity"]
    assert driver["podAntiAffinity"][REQUIRED][0]["topologyKey"] == "block"


def test_without_the_annotation_no_affinity_is_added() -> None:
    w = World(make_jobset("plain"))
    w.step()
    assert all("affinity" not in _pod_spec(job) for job in w.jobs.values())


def test_existing_affinity_terms_are_kept() -> None:
    node_term = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}
    user_term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
    job: dict[str, Any] = {
        "metadata": {"name": "j-0", "namespace": "ns", "labels": {c.JOB_KEY: "k"},
                     "annotations": {c.EXCLUSIVE_KEY: RACK}},
        "spec": {"template": {"spec": {"affinity": {"nodeAffinity": {REQUIRED: node_term},
                                                    "podAntiAffinity": {REQUIRED: [user_term]}}}}},
    }
    exclusive_placement(job)
    affinity = _pod_spec(job)["affinity"]
    assert affinity["nodeAffinity"] == {REQUIRED: node_term}
    assert affinity["podAntiAffinity"][REQUIRED][0] == user_term
    assert len(affinity["podAntiAffinity"][REQUIRED]) == 2
    assert len(affinity["podAffinity"][REQUIRED]) == 1


def test_node_selector_strategy_selects_the_jobs_own_nodes_instead() -> None:
    js = make_jobset("train")
    js["metadata"]["annotations"] = {c.EXCLUSIVE_KEY: RACK, c.NODE_SELECTOR_STRATEGY_KEY: "true"}
    w = World(js)
    w.step()
    spec = _pod_spec(w.jobs["train-worker-1"])
    assert spec["nodeSelector"] == {c.NAMESPACED_JOB_KEY: "ns_train-worker-1"}
    assert spec["tolerations"] == [{"key": c.NO_SCHEDULE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    assert "affinity" not in spec
