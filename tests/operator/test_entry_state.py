"""An Entry's state moves only along TRANSITIONS; the text it is written as stays the same."""

from __future__ import annotations

import json
import logging

import pytest

from gangq.operator.entry import TRANSITIONS, Entry, EntryState

OBJ = {"metadata": {"name": "train", "namespace": "default", "uid": "u-1", "resourceVersion": "7"}}


def test_the_states_are_written_as_their_names() -> None:
    assert [s.value for s in EntryState] == ["Pending", "Inadmissible", "Admitted", "Evicting", "Finished"]
    assert json.dumps({"state": EntryState.EVICTING}) == '{"state": "Evicting"}'
    assert f"{EntryState.ADMITTED}" == "Admitted" == str(EntryState.ADMITTED)
    assert EntryState.PENDING == "Pending"


def test_a_new_entry_is_pending_and_reads_its_metadata() -> None:
    entry = Entry("default/train", dict(OBJ))
    assert entry.state is EntryState.PENDING
    assert (entry.namespace, entry.name, entry.uid, entry.rv) == ("default", "train", "u-1", 7)


def test_a_legal_move_is_silent(caplog: pytest.LogCaptureFixture) -> None:
    entry = Entry("default/train", dict(OBJ))
    with caplog.at_level(logging.ERROR, logger="gangq.operator.entry"):
        for to in (EntryState.ADMITTED, EntryState.EVICTING, EntryState.EVICTING, EntryState.PENDING,
                   EntryState.INADMISSIBLE, EntryState.PENDING, EntryState.FINISHED):
            assert to is entry.state or to in TRANSITIONS[entry.state]
            entry.move(to)
            assert entry.state is to
    assert not caplog.records


def test_an_illegal_move_is_logged_as_an_error(caplog: pytest.LogCaptureFixture) -> None:
    entry = Entry("default/train", dict(OBJ))
    entry.move(EntryState.FINISHED)
    with caplog.at_level(logging.ERROR, logger="gangq.operator.entry"):
        entry.move(EntryState.ADMITTED)
    assert [r.getMessage() for r in caplog.records] == [
        "JobSet default/train: state Finished → Admitted is not a legal transition"]
    assert entry.state is EntryState.ADMITTED


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(EntryState)
    assert all(to in EntryState for targets in TRANSITIONS.values() for to in targets)
