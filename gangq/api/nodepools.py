"""A Karpenter NodePool (``karpenter.sh/v1``) as the engine's :class:`~gangq.core.model.ProvisionerSpec`.

What gangq reads of it, and why:

- ``spec.template.metadata.labels`` and each ``spec.template.spec.requirements`` entry with the
  operator ``In`` and exactly one value: the labels every node of the pool carries (a requirement
  that allows several values names no label gangq can count on);
- ``spec.template.spec.taints``: the taints its nodes keep (``startupTaints`` are lifted once a
  node is initialized);
- ``spec.limits`` and ``status.resources``: how much the pool may hold, and holds now (Karpenter
  counts the nodes it is still launching there);
- the annotation ``gangq.io/node-resources`` (``nvidia.com/gpu=8,cpu=64,memory=512Gi``): what one
  node of the pool offers. The instance types a NodePool may launch are the cloud provider's, not
  in the API, so the admin states the node shape gangq may count on; a NodePool without it adds
  nothing to the node check (and :func:`node_pool` says so);
- the annotation ``gangq.io/max-new-nodes`` (default 32): at most how many new nodes gangq counts
  for the pool, which bounds a pool without limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gangq.api.meta import Meta
from gangq.api.quantity import QuantityError, parse_quantity
from gangq.core.errors import SpecError
from gangq.core.model import ProvisionerSpec
from gangq.core.selectors import Taint

GROUP: Final = "karpenter.sh"
VERSION: Final = "v1"
PLURAL: Final = "nodepools"
NODE_LABEL: Final = "karpenter.sh/nodepool"
NODE_RESOURCES: Final = "gangq.io/node-resources"
MAX_NEW_NODES: Final = "gangq.io/max-new-nodes"
DEFAULT_MAX_NEW_NODES: Final = 32
KIND: Final = "NodePool"


def _quantities(name: str, field: str, values: Any) -> dict[str, int]:
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise SpecError(KIND, name, field, f"must be a map of resource to quantity, got {values!r}")
    out: dict[str, int] = {}
    for resource, value in values.items():
        try:
            out[str(resource)] = parse_quantity(value, str(resource))
        except QuantityError as err:
            raise SpecError(KIND, name, f"{field}[{resource}]", str(err)) from err
    return out


def node_resources(name: str, text: str) -> dict[str, int]:
    """The annotation ``gangq.io/node-resources``: ``resource=quantity`` pairs, comma-separated."""
    field = f"metadata.annotations[{NODE_RESOURCES}]"
    pairs: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        resource, sep, value = part.partition("=")
        if not sep or not resource.strip() or not value.strip():
            raise SpecError(KIND, name, field, f"{part!r} is not resource=quantity (e.g. nvidia.com/gpu=8,cpu=64)")
        pairs[resource.strip()] = value.strip()
    if not pairs:
        raise SpecError(KIND, name, field, "names no resource (e.g. nvidia.com/gpu=8,cpu=64,memory=512Gi)")
    return _quantities(name, field, pairs)


def node_pool(obj: Mapping[str, Any]) -> ProvisionerSpec | None:
    """The NodePool's spec for the engine; None when it has no ``gangq.io/node-resources`` (gangq
    then counts none of its headroom). Bad input raises SpecError naming the field."""
    meta = Meta(obj)
    name = meta.name
    text = meta.annotations.get(NODE_RESOURCES)
    if text is None:
        return None
    allocatable = node_resources(name, text)
    max_new = DEFAULT_MAX_NEW_NODES
    raw_max = meta.annotations.get(MAX_NEW_NODES)
    if raw_max is not None:
        try:
            max_new = int(raw_max)
        except ValueError:
            raise SpecError(KIND, name, f"metadata.annotations[{MAX_NEW_NODES}]",
                            f"must be a whole number of nodes, got {raw_max!r}") from None
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    labels: dict[str, str] = {str(k): str(v) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()}
    node_spec = template.get("spec") or {}
    for i, req in enumerate(node_spec.get("requirements") or []):
        if not isinstance(req, Mapping):
            raise SpecError(KIND, name, f"spec.template.spec.requirements[{i}]", "must be an object")
        values = req.get("values") or []
        if req.get("operator") == "In" and len(values) == 1 and req.get("key"):
            labels[str(req["key"])] = str(values[0])
    taints: list[Taint] = []
    for i, t in enumerate(node_spec.get("taints") or []):
        if not isinstance(t, Mapping) or not t.get("key"):
            raise SpecError(KIND, name, f"spec.template.spec.taints[{i}]", "needs a key")
        taints.append(Taint(str(t["key"]), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule")))
    limits = _quantities(name, "spec.limits", spec.get("limits"))
    in_use = _quantities(name, "status.resources", (obj.get("status") or {}).get("resources"))
    result = ProvisionerSpec(name, allocatable, labels, taints, limits, in_use, max_new, NODE_LABEL)
    result.validate()
    return result


def relevant(obj: Mapping[str, Any]) -> Any:
    """What of a NodePool the engine reads (see :func:`node_pool`): other changes do not reach it."""
    meta = Meta(obj)
    spec = obj.get("spec") or {}
    return (
        meta.annotations.get(NODE_RESOURCES),
        meta.annotations.get(MAX_NEW_NODES),
        spec.get("template"),
        spec.get("limits"),
        (obj.get("status") or {}).get("resources"),
    )
