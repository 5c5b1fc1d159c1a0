"""Kubernetes quantities to the core's integers: cpu in millicores, everything else in units/bytes."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import cast

from kubernetes.utils import parse_quantity as _untyped_parse

_k8s_parse = cast(Callable[[str], Decimal], _untyped_parse)


class QuantityError(ValueError):
    """A quantity string that Kubernetes would not accept."""


def parse_quantity(value: str | int | float, resource: str) -> int:
    """Parse ``value`` exactly (``500m``, ``1.5``, ``16Gi``, ``1e3``, ``2k`` ...) and round up to the
    resource's canonical integer unit, as the API server does: ``cpu`` → millicores."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    try:
        amount = Decimal(value) if isinstance(value, int | float) else _k8s_parse(str(value).strip())
    except (ValueError, TypeError, InvalidOperation) as err:
        raise QuantityError(f"{value!r} is not a valid quantity") from err
    if not amount.is_finite():
        raise QuantityError(f"{value!r} is not a finite quantity")
    if resource == "cpu":
        amount *= 1000
    return math.ceil(amount)
