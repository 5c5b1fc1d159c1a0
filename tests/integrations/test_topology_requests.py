"""Per pod set topology requests: Kueue's ``podset-*-topology`` annotations on a pod template (either
prefix) become ``PodSetSpec.topology`` for every kind; a JobSet's exclusive placement asks for one
domain per child Job. Malformed annotations are errors naming the annotation."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.core.errors import SpecError
from gangq.core.model import PodSetSpec
from gangq.integrations.jobset import jobset_to_workload
from gangq.integrations.registry import BY_KIND
from gangq.jobset.constants import EXCLUSIVE_KEY

from .samples import SAMPLES

RACK, BLOCK = "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"
TEMPLATE = "spec.template.metadata.annotations"


def _job(annotations: dict[str, str], pods: int = 4) -> dict[str, Any]:
    job = SAMPLES["Job"].obj()
    job["spec"]["parallelism"] = job["spec"]["completions"] = pods
    job["spec"]["template"].setdefault("metadata", {})["annotations"] = annotations
    return job


def _topology(annotations: dict[str, str], pods: int = 4) -> tuple[object, ...] | None:
    ps: PodSetSpec = BY_KIND["Job"].to_workload(_job(annotations, pods), {}, {}).pod_sets[0]
    return ps.topology.signature() if ps.topology is not None else None


@pytest.mark.parametrize("prefix", ["kueue.x-k8s.io/", "gangq.io/"])
def test_each_annotation_with_either_prefix(prefix: str) -> None:
    assert _topology({}) is None
    assert _topology({prefix + "podset-required-topology": RACK}) == ("Required", RACK, None, None, False)
    assert _topology({prefix + "podset-preferred-topology": BLOCK}) == ("Preferred", BLOCK, None, None, False)
    assert _topology({prefix + "podset-unconstrained-topology": "true"}) == ("Unconstrained", None, None, None, False)
    assert _topology({prefix + "podset-unconstrained-topology": "false"}) is None
    assert _topology({prefix + "podset-required-topology": BLOCK, prefix + "podset-slice-required-topology": RACK,
                      prefix + "podset-slice-size": "2"}) == ("Required", BLOCK, RACK, 2, False)
    # slices alone leave the pod set otherwise unconstrained, as in Kueue
    assert _topology({prefix + "podset-slice-required-topology": RACK, prefix + "podset-slice-size": "4"}) == (
        "Unconstrained", None, RACK, 4, False)


def test_both_prefixes_with_the_same_value_agree() -> None:
    assert _topology({"kueue.x-k8s.io/podset-required-topology": RACK,
                      "gangq.io/podset-required-topology": RACK}) == ("Required", RACK, None, None, False)


@pytest.mark.parametrize(("annotations", "key", "message"), [
    ({"kueue.x-k8s.io/podset-required-topology": RACK, "kueue.x-k8s.io/podset-preferred-topology": BLOCK},
     "kueue.x-k8s.io/podset-preferred-topology", "must not be set together with kueue.x-k8s.io/podset-required"),
    ({"gangq.io/podset-preferred-topology": RACK, "kueue.x-k8s.io/podset-unconstrained-topology": "true"},
     "kueue.x-k8s.io/podset-unconstrained-topology", "at most one of"),
    ({"kueue.x-k8s.io/podset-required-topology": RACK, "gangq.io/podset-required-topology": BLOCK},
     "gangq.io/podset-required-topology", f"but kueue.x-k8s.io/podset-required-topology is '{RACK}'"),
    ({"kueue.x-k8s.io/podset-slice-required-topology": RACK},
     "kueue.x-k8s.io/podset-slice-size", "must be set when kueue.x-k8s.io/podset-slice-required-topology is"),
    ({"gangq.io/podset-slice-size": "2"},
     "gangq.io/podset-slice-size", "may be set only with gangq.io/podset-slice-required-topology"),
    ({"kueue.x-k8s.io/podset-slice-required-topology": RACK, "kueue.x-k8s.io/podset-slice-size": "two"},
     "kueue.x-k8s.io/podset-slice-size", "must be a positive integer, got 'two'"),
    ({"kueue.x-k8s.io/podset-slice-required-topology": RACK, "kueue.x-k8s.io/podset-slice-size": "0"},
     "kueue.x-k8s.io/podset-slice-size", "must be a positive integer, got '0'"),
    ({"kueue.x-k8s.io/podset-slice-required-topology": RACK, "kueue.x-k8s.io/podset-slice-size": "3"},
     "kueue.x-k8s.io/podset-slice-size", "must divide the pod set's 4 pods into whole slices, got 3"),
    ({"kueue.x-k8s.io/podset-unconstrained-topology": "yes"},
     "kueue.x-k8s.io/podset-unconstrained-topology", "must be true or false, got 'yes'"),
    ({"kueue.x-k8s.io/podset-required-topology": "not a label"},
     "kueue.x-k8s.io/podset-required-topology", "must be a topology level (a node label key)"),
])
def test_malformed_annotations_are_errors_naming_the_annotation(annotations: dict[str, str], key: str,
                                                               message: str) -> None:
    with pytest.raises(SpecError) as err:
        _topology(annotations)
    assert err.value.kind == "Job" and err.value.field == f"{TEMPLATE}[{key}]"
    assert message in err.value.message


def test_jobset_pod_template_annotations_are_read_per_replicated_job() -> None:
    js = SAMPLES["JobSet"].obj()
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["metadata"] = {
        "annotations": {"kueue.x-k8s.io/podset-required-topology": RACK}}
    sets = {ps.name: ps.topology for ps in jobset_to_workload(js).pod_sets}
    assert sets["driver"] is None
    assert sets["workers"] is not None and sets["workers"].signature() == ("Required", RACK, None, None, False)


def test_jobset_exclusive_topology_asks_one_domain_per_child_job() -> None:
    """workers: 2 Jobs × 2 pods; each Job alone in a rack (the reconciler's affinities), so the pod
    set is sliced per Job, not required in one rack as a whole (which the affinities forbid)."""
    js = SAMPLES["JobSet"].obj()
    js["metadata"]["annotations"] = {EXCLUSIVE_KEY: RACK}
    sets = {ps.name: ps.topology for ps in jobset_to_workload(js).pod_sets}
    assert {n: t.signature() if t else None for n, t in sets.items()} == {
        "driver": ("Unconstrained", None, RACK, 1, True), "workers": ("Unconstrained", None, RACK, 2, True)}
    # the replicatedJob's own annotation wins over the JobSet's; a template annotation over both
    js["spec"]["replicatedJobs"][1]["template"]["metadata"] = {"annotations": {EXCLUSIVE_KEY: BLOCK}}
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {
        "annotations": {"gangq.io/podset-preferred-topology": BLOCK}}
    sets = {ps.name: ps.topology for ps in jobset_to_workload(js).pod_sets}
    assert {n: t.signature() if t else None for n, t in sets.items()} == {
        "driver": ("Preferred", BLOCK, None, None, False), "workers": ("Unconstrained", None, BLOCK, 2, True)}
    js["metadata"]["annotations"] = {EXCLUSIVE_KEY: "bad key!"}
    with pytest.raises(SpecError) as err:
        jobset_to_workload(js)
    assert err.value.field == f"metadata.annotations[{EXCLUSIVE_KEY}]"


def test_a_topology_request_changes_the_pod_sets_placement_signature() -> None:
    plain = BY_KIND["Job"].to_workload(_job({}), {}, {}).pod_sets[0]
    rack = BY_KIND["Job"].to_workload(_job({"kueue.x-k8s.io/podset-required-topology": RACK}), {}, {}).pod_sets[0]
    block = BY_KIND["Job"].to_workload(_job({"kueue.x-k8s.io/podset-required-topology": BLOCK}), {}, {}).pod_sets[0]
    assert len({plain.placement_signature(), rack.placement_signature(), block.placement_signature()}) == 3
