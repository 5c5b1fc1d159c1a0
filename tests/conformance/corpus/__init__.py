"""The corpus: every case, by topic."""

from __future__ import annotations

from tests.conformance.corpus import crud, errors, lifecycle, lists, patches, schemas, subresources, tables, watches
from tests.conformance.model import Case

CASES: list[Case] = [
    *crud.CASES,
    *patches.CASES,
    *subresources.CASES,
    *lists.CASES,
    *watches.CASES,
    *errors.CASES,
    *schemas.CASES,
    *lifecycle.CASES,
    *tables.CASES,
]

assert len({c.name for c in CASES}) == len(CASES), "case names must be unique"
