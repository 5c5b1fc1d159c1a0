"""A pod's effective requests, computed the way the kube-scheduler computes them.

``max(sum of regular containers + sidecars, max over classic init containers of (its requests +
the sidecars started before it))``, then pod-level requests (cpu, memory, hugepages-*) override the
aggregate per resource, then the pod overhead is added. A container (or the pod) that sets only a
limit requests that limit, as the API server defaults it. Sums are exact (decimals); only the total
is rounded up to the canonical integer unit (cpu in millicores, everything else in units/bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from pydantic import ValidationError

from gangq.api import quantity
from gangq.api.jobset import Container, PodSpec, Quantity, ResourceRequirements, spec_error
from gangq.api.quantity import QuantityError, to_canonical
from gangq.core.errors import SpecError

Amounts = dict[str, Decimal]


class FieldContext:
    """Who is being parsed, for error messages: kind, object name and the pod spec's field path."""

    __slots__ = ("kind", "name", "path")

    def __init__(self, kind: str, name: str, path: str) -> None:
        self.kind = kind
        self.name = name
        self.path = path

    def error(self, field: str, message: str) -> SpecError:
        return SpecError(self.kind, self.name, f"{self.path}.{field}" if self.path else field, message)


def exact_quantity(value: Quantity, ctx: FieldContext, field: str) -> Decimal:
    """``value`` as an exact, non-negative decimal (in the resource's base unit: cores, bytes, units)."""
    try:
        amount = quantity.exact_quantity(value, hint=" (e.g. 500m, 2, 16Gi, 1e3)")
    except QuantityError as err:
        raise ctx.error(field, str(err)) from err
    if amount < 0:
        raise ctx.error(field, f"must not be negative, got {value!r}")
    return amount


def _requests(res: ResourceRequirements | None, ctx: FieldContext, field: str) -> Amounts:
    """Requests, defaulted from limits for every resource that has a limit but no request."""
    out: Amounts = {}
    if res is None:
        return out
    for name, value in (res.limits or {}).items():
        out[name] = exact_quantity(value, ctx, f"{field}.limits[{name}]")
    for name, value in (res.requests or {}).items():
        out[name] = exact_quantity(value, ctx, f"{field}.requests[{name}]")
    return out


def _add(into: Amounts, other: Mapping[str, Decimal]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, Decimal(0)) + amount


def _max(into: Amounts, other: Mapping[str, Decimal]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, Decimal(0)):
            into[name] = amount


def _is_pod_level_resource(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def exact_pod_requests(spec: PodSpec, ctx: FieldContext) -> Amounts:
    """The pod's effective requests as exact decimals (see the module docstring)."""
    containers: list[Container] = spec.containers or []
    total: Amounts = {}
    for i, c in enumerate(containers):
        _add(total, _requests(c.resources, ctx, f"containers[{i}].resources"))
    sidecars: Amounts = {}
    init_peak: Amounts = {}
    for i, c in enumerate(spec.init_containers or []):
        own = _requests(c.resources, ctx, f"initContainers[{i}].resources")
        if c.restart_policy == "Always":
            _add(sidecars, own)
            _max(init_peak, sidecars)
        else:
            during = dict(own)
            _add(during, sidecars)
            _max(init_peak, during)
    _add(total, sidecars)
    _max(total, init_peak)
    if spec.resources is not None:
        pod_level = _requests(spec.resources, ctx, "resources")
        for name, amount in pod_level.items():
            if _is_pod_level_resource(name):
                total[name] = amount
    if spec.overhead:
        _add(total, {n: exact_quantity(v, ctx, f"overhead[{n}]") for n, v in spec.overhead.items()})
    return total


def pod_requests(spec: PodSpec | Mapping[str, object], ctx: FieldContext | None = None) -> dict[str, int]:
    """The pod's effective requests in the core's integers (cpu in millicores, rounded up); zero
    amounts are left out. Malformed quantities raise SpecError naming the field under ``ctx``."""
    ctx = ctx or FieldContext("Pod", "?", "spec")
    if not isinstance(spec, PodSpec):
        try:
            spec = PodSpec.model_validate(spec)
        except ValidationError as err:
            raise spec_error(err, ctx.kind, ctx.name, ctx.path) from err
    exact = exact_pod_requests(spec, ctx)
    out = {name: to_canonical(name, amount) for name, amount in exact.items()}
    return {name: amount for name, amount in out.items() if amount}
