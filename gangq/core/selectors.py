"""Label selectors, taints and tolerations: the matching rules of the Kubernetes scheduler.

Pure data and predicates; the core uses them for namespace selection, flavor fit and node fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class LabelRequirement:
    """One ``matchExpressions`` entry of a label selector."""

    __slots__ = ("key", "operator", "values")

    def __init__(self, key: str, operator: str, values: Sequence[str] = ()) -> None:
        if operator not in _SELECTOR_OPERATORS:
            raise ValueError(f"operator {operator!r} is not one of {', '.join(_SELECTOR_OPERATORS)}")
        if operator in ("In", "NotIn") and not values:
            raise ValueError(f"operator {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"operator {operator} takes no values")
        self.key = key
        self.operator = operator
        self.values = tuple(values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


class NodeSelectorRequirement:
    """One ``matchExpressions`` entry of a required node-affinity term (``Gt``/``Lt`` compare
    integer label values, as the kube-scheduler does)."""

    __slots__ = ("key", "operator", "values")

    OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")

    def __init__(self, key: str, operator: str, values: Sequence[str] = ()) -> None:
        if operator not in self.OPERATORS:
            raise ValueError(f"operator {operator!r} is not one of {', '.join(self.OPERATORS)}")
        if operator in ("In", "NotIn") and not values:
            raise ValueError(f"operator {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"operator {operator} takes no values")
        if operator in ("Gt", "Lt"):
            if len(values) != 1:
                raise ValueError(f"operator {operator} needs exactly one value")
            try:
                int(values[0])
            except ValueError:
                raise ValueError(f"operator {operator} needs an integer value, got {values[0]!r}") from None
        self.key = key
        self.operator = operator
        self.values = tuple(values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        have = labels.get(self.key)
        op = self.operator
        if op == "In":
            return have in self.values
        if op == "NotIn":
            return have not in self.values
        if op == "Exists":
            return have is not None
        if op == "DoesNotExist":
            return have is None
        if have is None:
            return False
        try:
            number = int(have)
        except ValueError:
            return False
        limit = int(self.values[0])
        return number > limit if op == "Gt" else number < limit

    def compatible(self, labels: Mapping[str, str]) -> bool:
        """Could a node with these labels (and possibly others) satisfy it? A key the labels do
        not mention is left to the node check, except that a flavor's labels are on every node."""
        if self.key not in labels:
            return True
        return self.matches(labels)

    def signature(self) -> tuple[str, str, tuple[str, ...]]:
        return (self.key, self.operator, self.values)


# Required node affinity: terms ORed, the requirements of a term ANDed; () = no constraint.
NodeAffinity = tuple[tuple[NodeSelectorRequirement, ...], ...]


def affinity_matches(terms: NodeAffinity, labels: Mapping[str, str]) -> bool:
    """Do a node's labels satisfy the required node affinity? (A term with no requirements
    matches nothing, as in Kubernetes.)"""
    if not terms:
        return True
    return any(term and all(req.matches(labels) for req in term) for term in terms)


def affinity_compatible(terms: NodeAffinity, labels: Mapping[str, str]) -> bool:
    """Could some node that carries ``labels`` (a flavor's nodeLabels) satisfy the affinity?"""
    if not terms:
        return True
    return any(term and all(req.compatible(labels) for req in term) for term in terms)


class LabelSelector:
    """A Kubernetes label selector; an empty selector matches everything."""

    __slots__ = ("match_expressions", "match_labels")

    def __init__(
        self,
        match_labels: Mapping[str, str] | None = None,
        match_expressions: Sequence[LabelRequirement] = (),
    ) -> None:
        self.match_labels: dict[str, str] = dict(match_labels or {})
        self.match_expressions = tuple(match_expressions)

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.match_expressions)


class Taint:
    """A node (or flavor) taint."""

    __slots__ = ("effect", "key", "value")

    def __init__(self, key: str, value: str = "", effect: str = "NoSchedule") -> None:
        if effect not in TAINT_EFFECTS:
            raise ValueError(f"effect {effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
        self.key = key
        self.value = value
        self.effect = effect

    def signature(self) -> tuple[str, str, str]:
        return (self.key, self.value, self.effect)


class Toleration:
    """A pod toleration, matched against taints as the kube-scheduler does."""

    __slots__ = ("effect", "key", "operator", "value")

    def __init__(self, key: str = "", operator: str = "Equal", value: str = "", effect: str = "") -> None:
        if operator not in _TOLERATION_OPERATORS:
            raise ValueError(f"operator {operator!r} is not one of Exists, Equal")
        if effect and effect not in TAINT_EFFECTS:
            raise ValueError(f"effect {effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
        if not key and operator != "Exists":
            raise ValueError("an empty key needs operator Exists")
        self.key = key
        self.operator = operator
        self.value = value
        self.effect = effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:  # empty key with Exists tolerates every taint
            return True
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value

    def signature(self) -> tuple[str, str, str, str]:
        return (self.key, self.operator, self.value, self.effect)


def taints_tolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> bool:
    """True when every scheduling-relevant taint (NoSchedule, NoExecute) is tolerated.

    PreferNoSchedule is a preference, not a constraint, as in the kube-scheduler.
    """
    for taint in taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(tol.tolerates(taint) for tol in tolerations):
            return False
    return True


def selector_compatible(node_selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """True when every key of ``node_selector`` that ``labels`` also has carries the same value.

    This is how a flavor's nodeLabels are checked against a pod's nodeSelector: a pod that selects
    ``gpu=a100`` does not fit flavor ``h100`` whose nodeLabels say ``gpu=h100``; keys the flavor does
    not mention are left to the node check.
    """
    for key, value in node_selector.items():
        have = labels.get(key)
        if have is not None and have != value:
            return False
    return True


def selector_matches(node_selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """True when ``labels`` carry every key and value of ``node_selector``."""
    for key, value in node_selector.items():
        if labels.get(key) != value:
            return False
    return True
