"""The sandbox's API emulator against a real kube-apiserver: every case of the conformance corpus
(``tests/conformance``) answers the same on both after normalisation, or differs exactly as
``tests/conformance/differences.py`` documents."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gangq.controlplane.launcher import ControlPlane
from tests.conformance import report, session
from tests.conformance.compare import Outcome, count
from tests.conformance.corpus import CASES
from tests.conformance.differences import DIFFERENCES
from tests.conftest import start_control_plane

NAMES = [case.name for case in CASES]


@pytest.fixture(scope="session")
def conformance_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of the corpus's own: its hundreds of namespaces would keep the shared one's
    namespace controller busy for minutes. Session-scoped, like ``outcomes``: pytest-xdist may run
    other modules' tests between this module's, which would end a module-scoped one early."""
    cp = start_control_plane(tmp_path_factory.mktemp("conformance-control-plane"))
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def outcomes(conformance_control_plane: ControlPlane) -> dict[str, Outcome]:
    return {o.name: o for o in session.run(conformance_control_plane)}


def test_the_corpus_covers_at_least_200_requests() -> None:
    assert len(CASES) >= 200
    topics = {name.split("/")[0] for name in NAMES}
    assert {"crud", "patch", "apply", "status", "list", "watch", "invalid", "schema", "error", "prune", "default",
            "finalizer", "gc", "namespace", "table"} <= topics


def test_every_documented_difference_applies_to_a_case() -> None:
    for entry in DIFFERENCES:
        assert any(entry.applies_to(name) for name in NAMES), f"{entry.key} names no case of the corpus"


@pytest.mark.parametrize("name", NAMES)
def test_case_is_identical_or_differs_as_documented(outcomes: dict[str, Outcome], name: str) -> None:
    result = outcomes[name]
    assert not result.finding, result.explain()


def test_the_doc_states_these_counts_and_every_documented_difference(outcomes: dict[str, Outcome]) -> None:
    """docs/sandbox-conformance.md is what ``python -m tests.conformance.report`` wrote for this corpus."""
    counts = count(list(outcomes.values()))
    doc = report.DOC.read_text()
    assert f"- cases: {counts.cases}\n" in doc
    assert f"- identical after normalisation: {counts.identical}\n" in doc
    assert f"- differing exactly as documented: {counts.documented}\n" in doc
    for entry in DIFFERENCES:
        assert f"| `{entry.key}` |" in doc, f"{entry.key} is missing from {report.DOC.name}"
