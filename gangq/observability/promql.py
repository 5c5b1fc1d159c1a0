"""Which metric names a PromQL expression reads (for the "dashboards and alerts use only gangq's
metrics" tests). A small lexer, not a parser: it drops strings, label matchers, ranges, grouping
label lists and numbers, then every remaining identifier that is not a function or keyword is a
metric name."""

from __future__ import annotations

import re

KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
        "atan2",
    }
)

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_:])\d+(\.\d+)?([eE][+-]?\d+)?[smhdwy]?")
_LABEL_VALUES = re.compile(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)")


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (``$variables`` are ignored)."""
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\}?", " 1 ", text)
    text = _NUMBER.sub(" ", text)
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        word = match.group(0)
        rest = text[match.end() :].lstrip()
        if rest.startswith("("):  # a function or aggregation
            continue
        if word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def variable_metric_names(query: str) -> set[str]:
    """The metric names a Grafana variable query reads (``label_values(metric{...}, label)``)."""
    return set(_LABEL_VALUES.findall(query)) | (metric_names(query) if "label_values" not in query else set())
