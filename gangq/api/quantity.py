"""Kubernetes quantities to the core's integers: cpu in millicores, everything else in units/bytes.

The one place gangq parses a quantity string (with the ``kubernetes`` package's parser): an exact
decimal first (:func:`exact_quantity`, which sums and comparisons keep exact), rounded up to the
core's integer unit only at the end (:func:`to_canonical`), as the API server rounds.
"""

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


def exact_quantity(value: object, hint: str = "") -> Decimal:
    """``value`` (``500m``, ``1.5``, ``16Gi``, ``1e3``, ``2k``, a number ...) as an exact decimal in
    the resource's base unit (cores, bytes, units). Raises QuantityError for a boolean, a string
    Kubernetes would not accept (its message ends with ``hint``), or an amount that is not finite
    or beyond :data:`MAX_AMOUNT`."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    try:
        amount = Decimal(value) if isinstance(value, int | float) else _k8s_parse(str(value).strip())
    except (ValueError, TypeError, ArithmeticError) as err:  # ArithmeticError: decimal.Overflow of 1e999999999
        raise QuantityError(f"{value!r} is not a valid quantity{hint}") from err
    if not amount.is_finite():
        raise QuantityError(f"{value!r} is not a finite quantity")
    check_magnitude(value, amount)
    return amount


def to_canonical(resource: str, amount: Decimal) -> int:
    """Round an exact amount up to the core's integer unit: millicores for cpu, units otherwise."""
    if resource == "cpu":
        amount *= 1000
    return math.ceil(amount)


def parse_quantity(value: str | int | float, resource: str) -> int:
    """Parse ``value`` exactly (:func:`exact_quantity`) and round up to the resource's canonical
    integer unit, as the API server does: ``cpu`` → millicores."""
    return to_canonical(resource, exact_quantity(value))
