"""Human formatting of integer quantities for reasons and messages."""

from __future__ import annotations

_BINARY = (("Ei", 1 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def format_amount(resource: str, value: int) -> str:
    """``cpu`` millicores as ``500m`` / ``2``; byte resources in binary units when exact."""
    if resource == "cpu":
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if resource == "memory" or resource.endswith("storage"):
        for suffix, factor in _BINARY:
            if value and value % factor == 0:
                return f"{value // factor}{suffix}"
    return str(value)
