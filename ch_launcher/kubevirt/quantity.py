"""Kubernetes resource quantities (`1024M`, `2Gi`, `500m`, `1.5e3`), parsed exactly.

Follows k8s.io/apimachinery/pkg/api/resource: binary suffixes Ki..Ei, decimal suffixes
n, u, m, k, M, G, T, P, E, and decimal exponents. Pure; raises ValueError with the offending
text on anything else.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?\d+))?$", re.ASCII)

MiB = 2**20
GiB = 2**30
# No resource comes near 10^64 (int64, Kubernetes' own range, ends below 10^19). Larger values
# are refused rather than turned into integers: converting `1e999998` to an int takes seconds.
MAX_MAGNITUDE = Decimal("1e64")


def parse_quantity(value: object) -> Decimal:
    """Return the exact value of a quantity. Integers and floats pass through.

    Raises ValueError, and nothing else, for anything that is not a finite quantity, and for
    magnitudes of `MAX_MAGNITUDE` or more.
    """
    d = _parse(value)
    if not d.is_finite():
        raise ValueError(f"quantity must be finite, got {value!r}")
    if abs(d) >= MAX_MAGNITUDE:
        raise ValueError(f"quantity {value!r} is out of range")
    return d


def _parse(value: object) -> Decimal:
    if isinstance(value, bool):
        raise ValueError(f"quantity must be a string or number, not {value!r}")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise ValueError(f"quantity must be a string or number, not {type(value).__name__}")
    m = _RE.match(value.strip())
    if not m:
        raise ValueError(f"quantities must match the regular expression "
                         f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {value!r}")
    number, suffix, exponent = m.groups()
    try:
        base = Decimal(number)
        if exponent is not None:
            return base.scaleb(int(exponent))
        if suffix in _BINARY:
            return base * _BINARY[suffix]
        return base * _DECIMAL[suffix or ""]
    except ArithmeticError:  # an exponent beyond Decimal's range (decimal.InvalidOperation)
        raise ValueError(f"quantity {value!r} is out of range") from None


def quantity_bytes(value: object) -> int:
    """A quantity as a whole number of bytes, rounded up (as Kubernetes' Value() does)."""
    return int(parse_quantity(value).to_integral_value(rounding=ROUND_CEILING))


def quantity_millis(value: object) -> int:
    """A quantity in thousandths (CPU millicores), rounded up."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding=ROUND_CEILING))


def format_bytes(n: int) -> str:
    """Render bytes the way humans read memory: `1Gi`, `290Mi`, else plain bytes."""
    for suffix, size in (("Gi", GiB), ("Mi", MiB), ("Ki", 1024)):
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)
