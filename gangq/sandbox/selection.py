"""Label and field selectors, parsed and matched as the kube-apiserver does.

* ``parse_label_selector("env in (a,b),!tier,app=web")`` -> a matcher over ``metadata.labels``.
  Grammar: ``key``, ``!key``, ``key=v``, ``key==v``, ``key!=v``, ``key in (v1,v2)``, ``key notin (v1,v2)``,
  ``key>N``, ``key<N``; requirements joined by commas (ANDed). Keys are qualified names
  (``[prefix/]name``), values are label values (<= 63 chars, may be empty).
* ``label_selector_from_object({"matchLabels": ..., "matchExpressions": [...]})`` -> the same matcher for
  a ``metav1.LabelSelector`` object (as in Job/Service specs). ``None`` selects nothing; ``{}`` selects
  everything, as ``metav1.LabelSelectorAsSelector`` does.
* ``parse_field_selector("metadata.name=x,spec.nodeName!=")`` -> a matcher over dotted object paths; with
  ``kind=`` given, unsupported fields raise ``SelectorError`` like the real server's
  ``field label not supported``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

log = logging.getLogger(__name__)

__all__ = [
    "FieldRequirement",
    "FieldSelectorMatcher",
    "LabelRequirement",
    "LabelSelectorMatcher",
    "SelectorError",
    "field_selector_allowed",
    "field_value",
    "label_selector_from_object",
    "matches",
    "parse_field_selector",
    "parse_label_selector",
]


class SelectorError(ValueError):
    """A malformed or unsupported selector (the API server answers 400 BadRequest)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# --------------------------------------------------------------------------------------------------
# Label selectors
# --------------------------------------------------------------------------------------------------

_NAME_RE: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# operators
EXISTS: Final = "exists"
DOES_NOT_EXIST: Final = "!"
EQUALS: Final = "="
NOT_EQUALS: Final = "!="
IN: Final = "in"
NOT_IN: Final = "notin"
GREATER: Final = "gt"
LESS: Final = "lt"


def _check_key(key: str, where: str) -> None:
    if not key:
        raise SelectorError(f"{where}: empty label key")
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
        raise SelectorError(
            f"{where}: invalid label key {key!r}: prefix part must be a lowercase DNS subdomain (<= 253 chars)"
        )
    if not name or len(name) > 63 or not _NAME_RE.match(name):
        raise SelectorError(
            f"{where}: invalid label key {key!r}: name part must be <= 63 characters of [A-Za-z0-9-_.] "
            "beginning and ending with an alphanumeric character"
        )


def _check_value(value: str, where: str) -> None:
    if value and (len(value) > 63 or not _NAME_RE.match(value)):
        raise SelectorError(
            f"{where}: invalid label value {value!r}: must be <= 63 characters of [A-Za-z0-9-_.] "
            "beginning and ending with an alphanumeric character (or empty)"
        )


class LabelRequirement:
    """One requirement of a label selector: ``key <op> values``."""

    __slots__ = ("key", "op", "values")

    def __init__(self, key: str, op: str, values: Iterable[str] = ()) -> None:
        self.key = key
        self.op = op
        self.values: frozenset[str] = frozenset(values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == EQUALS:
            value = labels.get(self.key)
            return value is not None and value in self.values
        if op == IN:
            return labels.get(self.key) in self.values
        if op in (NOT_EQUALS, NOT_IN):
            return labels.get(self.key) not in self.values
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if value is None:
            return False
        try:
            have = int(value)
        except ValueError:
            return False
        bound = int(next(iter(self.values)))
        return have > bound if op == GREATER else have < bound

    def __str__(self) -> str:
        vals = sorted(self.values)
        if self.op == EXISTS:
            return self.key
        if self.op == DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.op in (EQUALS, NOT_EQUALS):
            return f"{self.key}{self.op}{vals[0]}"
        if self.op in (GREATER, LESS):
            return f"{self.key}{'>' if self.op == GREATER else '<'}{vals[0]}"
        return f"{self.key} {self.op} ({','.join(vals)})"

    def __repr__(self) -> str:
        return f"LabelRequirement({str(self)!r})"


class LabelSelectorMatcher:
    """A conjunction of label requirements. ``nothing=True`` selects no object at all."""

    __slots__ = ("nothing", "requirements")

    def __init__(self, requirements: Iterable[LabelRequirement] = (), *, nothing: bool = False) -> None:
        self.requirements: tuple[LabelRequirement, ...] = tuple(requirements)
        self.nothing = nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        if labels is None:
            labels = {}
        for req in self.requirements:
            if not req.matches(labels):
                return False
        return True

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    def __repr__(self) -> str:
        return f"LabelSelectorMatcher({str(self)!r}{', nothing=True' if self.nothing else ''})"


_TOKEN_RE: Final = re.compile(r"\s*(?:(!=|==|=|!|\(|\)|,|>|<)|([^\s!=(),<>]+))")


def _tokenize(s: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    n = len(s)
    while pos < n:
        m = _TOKEN_RE.match(s, pos)
        if m is None:  # only trailing whitespace can fail to match
            break
        if m.end() == pos:
            break
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    return tokens


def parse_label_selector(s: str | None) -> LabelSelectorMatcher:
    """Parse a label selector string. ``None``/empty selects everything. Bad input -> ``SelectorError``."""
    if s is None or not s.strip():
        return LabelSelectorMatcher()
    tokens = _tokenize(s)
    reqs: list[LabelRequirement] = []
    i = 0
    n = len(tokens)
    where = f"unable to parse requirement in label selector {s!r}"

    def peek(k: int = 0) -> str | None:
        return tokens[i + k] if i + k < n else None

    while True:
        tok = peek()
        if tok is None:
            raise SelectorError(f"{where}: found end of input, expected a label key")
        if tok == "!":
            i += 1
            key = peek()
            if key is None or key in _PUNCT:
                raise SelectorError(f"{where}: expected a label key after '!', found {key or 'end of input'!r}")
            _check_key(key, where)
            reqs.append(LabelRequirement(key, DOES_NOT_EXIST))
            i += 1
        elif tok in _PUNCT:
            raise SelectorError(f"{where}: found {tok!r}, expected a label key")
        else:
            key = tok
            _check_key(key, where)
            i += 1
            op = peek()
            if op is None or op == ",":
                reqs.append(LabelRequirement(key, EXISTS))
            elif op in ("=", "==", "!="):
                i += 1
                value = peek()
                if value is None or value == ",":
                    value = ""
                elif value in _PUNCT:
                    raise SelectorError(f"{where}: found {value!r}, expected a label value after {op!r}")
                else:
                    i += 1
                _check_value(value, where)
                reqs.append(LabelRequirement(key, NOT_EQUALS if op == "!=" else EQUALS, (value,)))
            elif op in (">", "<"):
                i += 1
                value = peek()
                if value is None or value in _PUNCT:
                    raise SelectorError(f"{where}: expected an integer value after {op!r}")
                try:
                    int(value)
                except ValueError:
                    raise SelectorError(f"{where}: for {op!r} the value must be an integer, got {value!r}") from None
                i += 1
                reqs.append(LabelRequirement(key, GREATER if op == ">" else LESS, (value,)))
            elif op in ("in", "notin"):
                i += 1
                if peek() != "(":
                    raise SelectorError(f"{where}: expected '(' after {op!r}, found {peek() or 'end of input'!r}")
                i += 1
                values: list[str] = []
                expect_value = True
                while True:
                    t = peek()
                    if t is None:
                        raise SelectorError(f"{where}: missing ')' to close the value set of {key!r}")
                    if t == ")":
                        if expect_value and values:
                            values.append("")  # "(a,)" has an empty trailing value
                        i += 1
                        break
                    if t == ",":
                        if expect_value:
                            values.append("")
                        expect_value = True
                        i += 1
                        continue
                    if t in _PUNCT:
                        raise SelectorError(f"{where}: found {t!r} inside the value set of {key!r}")
                    if not expect_value:
                        raise SelectorError(f"{where}: expected ',' or ')' after value {values[-1]!r}")
                    values.append(t)
                    expect_value = False
                    i += 1
                if not values:
                    raise SelectorError(f"{where}: for 'in', 'notin' operators, values set can't be empty")
                for v in values:
                    _check_value(v, where)
                reqs.append(LabelRequirement(key, IN if op == "in" else NOT_IN, values))
            else:
                raise SelectorError(
                    f"{where}: found {op!r}, expected one of '=', '==', '!=', 'in', 'notin', '>', '<', ',' or end"
                )
        tok = peek()
        if tok is None:
            break
        if tok != ",":
            raise SelectorError(f"{where}: found {tok!r}, expected ',' or end of input")
        i += 1
    return LabelSelectorMatcher(reqs)


_PUNCT: Final = frozenset({"!=", "==", "=", "!", "(", ")", ",", ">", "<"})

_EXPR_OPS: Final = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def label_selector_from_object(selector: Mapping[str, Any] | None, *, where: str = "selector") -> LabelSelectorMatcher:
    """A matcher for a ``metav1.LabelSelector`` object. ``None`` selects nothing, ``{}`` everything."""
    if selector is None:
        return LabelSelectorMatcher(nothing=True)
    if not isinstance(selector, Mapping):
        raise SelectorError(f"{where}: must be an object with matchLabels/matchExpressions, got {selector!r}")
    reqs: list[LabelRequirement] = []
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError(f"{where}.matchLabels: must be a map of strings, got {match_labels!r}")
    for key, value in match_labels.items():
        if not isinstance(value, str):
            raise SelectorError(f"{where}.matchLabels[{key}]: value must be a string, got {value!r}")
        _check_key(key, f"{where}.matchLabels")
        _check_value(value, f"{where}.matchLabels")
        reqs.append(LabelRequirement(key, EQUALS, (value,)))
    exprs = selector.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise SelectorError(f"{where}.matchExpressions: must be a list, got {exprs!r}")
    for i, expr in enumerate(exprs):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping):
            raise SelectorError(f"{at}: must be an object, got {expr!r}")
        key = expr.get("key")
        op = expr.get("operator")
        values = expr.get("values") or []
        if not isinstance(key, str):
            raise SelectorError(f"{at}.key: required string, got {key!r}")
        _check_key(key, at)
        if op not in _EXPR_OPS:
            raise SelectorError(
                f"{at}.operator: {op!r} is not a valid label selector operator (In, NotIn, Exists, DoesNotExist)"
            )
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"{at}.values: must be a list of strings, got {values!r}")
        if op in ("In", "NotIn") and not values:
            raise SelectorError(f"{at}.values: must be specified when `operator` is 'In' or 'NotIn'")
        if op in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{at}.values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
        for v in values:
            _check_value(v, at)
        reqs.append(LabelRequirement(key, _EXPR_OPS[op], values))
    return LabelSelectorMatcher(reqs)


# --------------------------------------------------------------------------------------------------
# Field selectors
# --------------------------------------------------------------------------------------------------

_COMMON_FIELDS: Final = frozenset({"metadata.name", "metadata.namespace"})
_EVENT_FIELDS: Final = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingComponent",
        "reportingController",
        "source",
        "type",
    }
)
_KIND_FIELDS: Final[dict[str, frozenset[str]]] = {
    "Pod": frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    "Event": _EVENT_FIELDS,
    "Job": frozenset({"status.successful"}),
    "Node": frozenset({"spec.unschedulable"}),
    "Namespace": frozenset({"status.phase"}),
    "Secret": frozenset({"type"}),
    "Service": frozenset({"spec.clusterIP", "spec.type"}),
    "ReplicaSet": frozenset({"status.replicas"}),
    "ReplicationController": frozenset({"status.replicas"}),
    "PersistentVolumeClaim": frozenset({"spec.storageClassName"}),
}


def field_selector_allowed(kind: str, field: str, *, extra: Iterable[str] = ()) -> bool:
    """True if ``field`` may be used in a field selector on ``kind`` (``extra``: a CRD's selectableFields)."""
    if field in _COMMON_FIELDS:
        return True
    allowed = _KIND_FIELDS.get(kind)
    if allowed is not None and field in allowed:
        return True
    return field in extra


def field_value(obj: Mapping[str, Any], field: str) -> str:
    """The string value of a dotted ``field`` of ``obj`` as field selectors see it ("" when absent)."""
    if field.startswith("involvedObject.") and "involvedObject" not in obj and "regarding" in obj:
        field = "regarding." + field[len("involvedObject.") :]  # events.k8s.io/v1 Event
    elif field.startswith("regarding.") and "regarding" not in obj and "involvedObject" in obj:
        field = "involvedObject." + field[len("regarding.") :]
    elif field == "source" and isinstance(obj.get("source"), Mapping):
        return str(obj["source"].get("component") or "")
    elif field == "reportingComponent" and "reportingComponent" not in obj and "reportingController" in obj:
        field = "reportingController"
    cur: Any = obj
    for part in field.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
        if cur is None:
            return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, float) and cur.is_integer():
        return str(int(cur))
    if isinstance(cur, dict | list):
        return ""
    return str(cur)


class FieldRequirement:
    """``field = value`` or ``field != value``."""

    __slots__ = ("field", "negate", "value")

    def __init__(self, field: str, value: str, negate: bool = False) -> None:
        self.field = field
        self.value = value
        self.negate = negate

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.field) == self.value) != self.negate

    def __str__(self) -> str:
        return f"{self.field}{'!=' if self.negate else '='}{_escape(self.value)}"

    def __repr__(self) -> str:
        return f"FieldRequirement({str(self)!r})"


class FieldSelectorMatcher:
    """A conjunction of field requirements over an object's dotted paths."""

    __slots__ = ("requirements",)

    def __init__(self, requirements: Iterable[FieldRequirement] = ()) -> None:
        self.requirements: tuple[FieldRequirement, ...] = tuple(requirements)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for req in self.requirements:
            if not req.matches(obj):
                return False
        return True

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    def __repr__(self) -> str:
        return f"FieldSelectorMatcher({str(self)!r})"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _split_unescaped(s: str) -> list[str]:
    """Split on unescaped commas, keeping escapes in the parts."""
    parts: list[str] = []
    cur: list[str] = []
    it = iter(s)
    for ch in it:
        if ch == "\\":
            cur.append(ch)
            cur.append(next(it, ""))
        elif ch == ",":
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _unescape(value: str, where: str) -> str:
    out: list[str] = []
    it = iter(value)
    for ch in it:
        if ch == "\\":
            nxt = next(it, None)
            if nxt not in ("\\", ",", "="):
                raise SelectorError(f"{where}: invalid escape sequence '\\{nxt or ''}' in value {value!r}")
            out.append(nxt)
        elif ch == "=":
            raise SelectorError(f"{where}: unescaped '=' in value {value!r}")
        else:
            out.append(ch)
    return "".join(out)


def parse_field_selector(
    s: str | None, *, kind: str | None = None, extra_fields: Iterable[str] = ()
) -> FieldSelectorMatcher:
    """Parse a field selector (``a=b,c==d,e!=f``; ``\\``-escapes for ``\\ , =`` in values).

    With ``kind``, every field must be supported for that kind (see ``field_selector_allowed``), else
    ``SelectorError('field label not supported: <field>')``.
    """
    if s is None or not s.strip():
        return FieldSelectorMatcher()
    extra = frozenset(extra_fields)
    reqs: list[FieldRequirement] = []
    for part in _split_unescaped(s):
        where = f"invalid field selector {s!r}"
        if not part.strip():
            raise SelectorError(f"{where}: empty requirement")
        idx = part.find("=")
        if idx <= 0:
            raise SelectorError(f"{where}: {part!r} is not of the form field=value, field==value or field!=value")
        negate = part[idx - 1] == "!"
        field = part[: idx - 1] if negate else part[:idx]
        rest = part[idx + 1 :]
        if not negate and rest.startswith("="):
            rest = rest[1:]
        field = field.strip()
        if not field or any(c.isspace() for c in field) or "\\" in field:
            raise SelectorError(f"{where}: invalid field name {field!r}")
        value = _unescape(rest, where)
        if kind is not None and not field_selector_allowed(kind, field, extra=extra):
            raise SelectorError(f'field label not supported: {field} (for kind {kind}: "{s}")')
        reqs.append(FieldRequirement(field, value, negate))
    return FieldSelectorMatcher(reqs)


def matches(lm: LabelSelectorMatcher | None, fm: FieldSelectorMatcher | None, obj: Mapping[str, Any]) -> bool:
    """Whether an object is selected by a parsed label selector and a parsed field selector (None: any)."""
    if lm is not None and not lm.matches((obj.get("metadata") or {}).get("labels") or {}):
        return False
    return fm is None or fm.matches(obj)
