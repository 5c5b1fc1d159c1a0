"""Kubernetes quantities to the core's integers: cpu in millicores, everything else in units/bytes."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from typing import cast

from kubernetes.utils import parse_quantity as _untyped_parse

_k8s_parse = cast(Callable[[str], Decimal], _untyped_parse)


MAX_AMOUNT = 2**63 - 1
"""The largest amount of a resource, in its base unit (cores, bytes, units): Kubernetes reads a
quantity as a 64-bit integer (``Quantity.Value()``), so nothing larger is a real amount, and an
unbounded one (``1e999999``) would make every sum, comparison and status string of it slow."""


class QuantityError(ValueError):
    """A quantity string that Kubernetes would not accept."""


def check_magnitude(value: object, amount: Decimal) -> None:
    """Raise QuantityError when ``amount`` (base units) is beyond :data:`MAX_AMOUNT`."""
    if amount.copy_abs() > MAX_AMOUNT:  # copy_abs: abs() rounds, and overflows on 1e999999999
        raise QuantityError(f"{value!r} is too large (at most {MAX_AMOUNT}, a 64-bit integer)")


def parse_quantity(value: str | int | float, resource: str) -> int:
    """Parse ``value`` exactly (``500m``, ``1.5``, ``16Gi``, ``1e3``, ``2k`` ...) and round up to the
    resource's canonical integer unit, as the API server does: ``cpu`` → millicores."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    try:
        amount = Decimal(value) if isinstance(value, int | float) else _k8s_parse(str(value).strip())
    except (ValueError, TypeError, ArithmeticError) as err:  # ArithmeticError: decimal.Overflow of 1e999999999
        raise QuantityError(f"{value!r} is not a valid quantity") from err
    if not amount.is_finite():
        raise QuantityError(f"{value!r} is not a finite quantity")
    check_magnitude(value, amount)
    if resource == "cpu":
        amount *= 1000
    return math.ceil(amount)
