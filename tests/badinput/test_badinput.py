"""The bad-input corpus on both control planes: every case ends as the corpus says (rejected by the
API server with the field named, or reported by the controller with the field named), the
controller survives it all, and docs/bad-input.md publishes the counts of this run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.badinput.corpus import cases
from tests.badinput.counts import counts_table
from tests.badinput.runner import POLL_SECONDS, run_corpus
from tests.clusters import Cluster

DOC = Path(__file__).resolve().parents[2] / "docs" / "bad-input.md"
HEADINGS = {"real": "### Real kube-apiserver", "emulated": "### Emulated API server (gangq sandbox)"}


def test_the_corpus_is_large_and_well_formed() -> None:
    """At least 100 cases, unique names, each naming the wrong field, and every difference between
    the planes explained."""
    corpus = cases()
    assert len(corpus) >= 100
    assert len({c.name for c in corpus}) == len(corpus)
    for case in corpus:
        assert case.field and case.objects, case.name
        assert (case.emulated is None) == (not case.note), case.name


def test_bad_input_is_rejected_or_reported_and_never_stops_the_controller(
        cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(cluster=False)
    run = run_corpus(cluster, cases())
    assert not run.unexpected(), "cases that did not end as expected:\n" + "\n".join(run.unexpected())
    assert run.operator_error is None, run.operator_error
    assert not run.controller_errors, run.controller_errors
    assert run.good_jobset_finished, "the good JobSet submitted after the corpus was not admitted and finished"
    assert run.seconds < 2 * POLL_SECONDS + 60, run.seconds
    doc = DOC.read_text()
    section = doc.split(HEADINGS[run.plane], 1)[1].split("\n### ", 1)[0]
    assert counts_table(run) in section, "docs/bad-input.md's counts are not this run's:\n" + counts_table(run)
