"""A batch/v1 Job as a gang (gangq.integrations.job): one pod set of its parallel pods, errors and
patches on the Job's own paths."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from gangq.api.batchjob import job_key, job_terminal, owned_by_another_controller
from gangq.core import Admission, FlavorSpec, SpecError
from gangq.core.decisions import PodSetAssignment
from gangq.integrations.job import JOB


def job_to_workload(obj: dict[str, Any]) -> Any:
    return JOB.to_workload(obj, {}, {})


def job(**spec: Any) -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x",
                                                     "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "4"}}}]}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "team", "labels": {"gangq.io/queue-name": "q"},
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"suspend": True, "parallelism": 2, "completions": 2, "completionMode": "NonIndexed",
                 "template": {"spec": pod}, **spec},
    }


def test_a_job_is_one_pod_set_of_its_parallel_pods_under_a_key_apart_from_jobsets() -> None:
    spec = job_to_workload(job())
    assert spec.key == job_key("team", "train") == "team/job:train"
    want = [("main", 2, {"cpu": 1000, "nvidia.com/gpu": 4})]
    assert [(ps.name, ps.count, ps.requests) for ps in spec.pod_sets] == want
    assert spec.queue_name == "q" and spec.namespace == "team"
    assert job_to_workload(job(parallelism=3, completions=2)).pod_sets[0].count == 2  # completions bound it


def test_errors_name_the_jobs_own_fields() -> None:
    bad = job()
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "-1"
    with pytest.raises(SpecError) as info:
        job_to_workload(bad)
    assert info.value.kind == "Job" and info.value.name == "team/train"
    assert info.value.field == "spec.template.spec.containers[0].resources.requests[cpu]", info.value.field
    with pytest.raises(SpecError) as info:
        job_to_workload(job(parallelism=-1))
    assert info.value.field == "spec.parallelism", info.value.field
    meta = job()
    meta["metadata"]["annotations"] = {"gangq.io/min-member": "3"}
    with pytest.raises(SpecError) as info:
        job_to_workload(meta)
    assert info.value.field == "metadata.annotations[gangq.io/min-member]" and "2 pods" in info.value.message


def test_the_admission_patch_writes_the_jobs_pod_template_and_unsuspends_it() -> None:
    flavors = {"a100": FlavorSpec("a100", {"gpu": "a100"}, [])}
    assignment = PodSetAssignment("main", 2, {"nvidia.com/gpu": "a100"}, {"nvidia.com/gpu": 4}, {})
    admission = Admission("team/job:train", "cq", (assignment,), False, 0.0, {})
    ops = JOB.admission_ops(job(), admission, flavors)
    paths = {op["path"]: op.get("value") for op in ops}
    assert paths["/spec/template/spec/nodeSelector"] == {"gpu": "a100"}
    assert paths["/spec/suspend"] is False
    assert all(not p.startswith("/spec/replicatedJobs") for p in paths), paths
    assert "/metadata/annotations" in paths  # the originals, for the next admission
    admitted = jsonpatch.apply_patch(job(), ops)
    # an evicted Job is only suspended: the API server refuses template changes of a started Job
    assert JOB.eviction_ops(admitted) == [{"op": "add", "path": "/spec/suspend", "value": True}]


def test_a_job_without_completions_runs_parallelism_pods_and_its_deadline_bounds_its_runtime() -> None:
    spec = JOB.to_workload(job(completions=None, parallelism=3, activeDeadlineSeconds=600), {}, {})
    assert spec.pod_sets[0].count == 3 and spec.runtime_limit == 600.0


def test_a_job_finishes_from_its_conditions_and_a_child_job_is_not_a_gang() -> None:
    done = job()
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert job_terminal(done) == "Completed" and job_terminal(job()) is None
    child = job()
    child["metadata"]["ownerReferences"] = [{"kind": "JobSet", "name": "js", "controller": True, "uid": "u"}]
    assert owned_by_another_controller(child) and not owned_by_another_controller(job())


def test_a_pod_set_placed_over_several_domains_is_gated_and_an_eviction_takes_the_gate_away() -> None:
    """Per-pod topology assignment (gangq.operator.topologypods): the admitted template carries the
    gate ``gangq.io/topology`` beside its own gates; putting the template back removes it, and a
    re-admission in one domain adds none."""
    from gangq.integrations import podsets

    flavors = {"a100": FlavorSpec("a100", {"gpu": "a100"}, [])}
    domains = [({"rack": "r0"}, 1), ({"rack": "r1"}, 1)]
    assignment = PodSetAssignment("main", 2, {"nvidia.com/gpu": "a100"}, {"nvidia.com/gpu": 4}, {}, {}, domains)
    admission = Admission("team/job:train", "cq", (assignment,), False, 0.0, {})
    own_gate = {"name": "example.com/wait"}
    original = job()
    original["spec"]["template"]["spec"]["schedulingGates"] = [own_gate]
    admitted = jsonpatch.apply_patch(original, JOB.admission_ops(original, admission, flavors))
    gates = admitted["spec"]["template"]["spec"]["schedulingGates"]
    assert gates == [own_gate, {"name": podsets.TOPOLOGY_GATE}]
    restored = jsonpatch.apply_patch(admitted, podsets.restore_ops("Job", admitted, JOB.pod_sets(admitted)))
    assert restored["spec"]["template"]["spec"]["schedulingGates"] == [own_gate]
    assert "nodeSelector" not in restored["spec"]["template"]["spec"]
    plain = PodSetAssignment("main", 2, {"nvidia.com/gpu": "a100"}, {"nvidia.com/gpu": 4}, {})
    again = jsonpatch.apply_patch(admitted, JOB.admission_ops(
        admitted, Admission("team/job:train", "cq", (plain,), False, 1.0, {}), flavors))
    assert again["spec"]["template"]["spec"]["schedulingGates"] == [own_gate]
