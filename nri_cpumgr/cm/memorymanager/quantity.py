"""Kubernetes quantities with their display format, as far as the Memory Manager needs them.

The kubelet prints reserved-memory totals (``"3Gi"``, ``"77"``) and names hugepage resources
(``"hugepages-2Mi"``) with the canonical string of a ``resource.Quantity``
(k8s.io/apimachinery pkg/api/resource, Quantity.String / CanonicalizeBytes). That string
depends on the quantity's *format* (BinarySI, DecimalSI, DecimalExponent), which comes from
how the quantity was written and survives additions. Values here are integers (bytes);
fractions are rounded up like :func:`nri_cpumgr.podmodel.parse_quantity`.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from nri_cpumgr.podmodel import parse_quantity


class QuantityFormat(enum.StrEnum):
    """resource.Format: how a quantity is displayed."""

    BINARY_SI = "BinarySI"  # Ki, Mi, Gi, ... (powers of 1024)
    DECIMAL_SI = "DecimalSI"  # k, M, G, ... (powers of 1000), or no suffix
    DECIMAL_EXPONENT = "DecimalExponent"  # 1e3, 5E6


_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_SUFFIX_RE = re.compile(r"([a-zA-Z]*)$")


@dataclass(frozen=True, slots=True)
class Quantity:
    """An integer quantity (bytes for memory) and its display format."""

    value: int
    format: QuantityFormat = QuantityFormat.DECIMAL_SI

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse ``"1Gi"``, ``"12"``, ``"1G"``, ``"1e3"``. The format follows the suffix:
        binary suffixes give BinarySI, an exponent gives DecimalExponent, anything else
        DecimalSI. Raises ValueError for a malformed quantity."""
        text = text.strip()
        value = parse_quantity(text)
        if re.search(r"[0-9][eE][+-]?[0-9]+$", text):
            return cls(value, QuantityFormat.DECIMAL_EXPONENT)
        m = _SUFFIX_RE.search(text)
        suffix = m.group(1) if m else ""
        if suffix.endswith("i"):
            return cls(value, QuantityFormat.BINARY_SI)
        return cls(value, QuantityFormat.DECIMAL_SI)

    @classmethod
    def of(cls, q: Quantity | str | int) -> Quantity:
        """Coerce a quantity string or a plain integer (DecimalSI) to a :class:`Quantity`."""
        if isinstance(q, Quantity):
            return q
        if isinstance(q, str):
            return cls.parse(q)
        return cls(int(q), QuantityFormat.DECIMAL_SI)

    def __add__(self, other: Quantity) -> Quantity:
        """Sum; keeps this quantity's format unless this quantity is zero, then takes the
        other's (Quantity.Add)."""
        fmt = other.format if self.value == 0 else self.format
        return Quantity(self.value + other.value, fmt)

    def __str__(self) -> str:
        return canonical_string(self.value, self.format)


def canonical_string(value: int, fmt: QuantityFormat) -> str:
    """The canonical string of an integer quantity (Quantity.String): ``0`` for zero;
    BinarySI uses the largest power of 1024 that divides the value exactly and falls back
    to DecimalSI below 1024 in magnitude; DecimalSI/DecimalExponent strip trailing zeros in
    groups of three (``12000`` -> ``12k`` / ``12e3``)."""
    if value == 0:
        return "0"
    if fmt is QuantityFormat.BINARY_SI and abs(value) >= 1024:
        mantissa, exp = value, 0
        while mantissa % 1024 == 0 and exp < len(_BINARY_SUFFIXES) - 1:
            mantissa //= 1024
            exp += 1
        return f"{mantissa}{_BINARY_SUFFIXES[exp]}"
    mantissa, exp = value, 0
    while mantissa % 1000 == 0:
        mantissa //= 1000
        exp += 3
    if fmt is QuantityFormat.DECIMAL_EXPONENT:
        return f"{mantissa}e{exp}" if exp else str(mantissa)
    suffix = _DECIMAL_SUFFIXES.get(exp)
    return f"{mantissa}{suffix}" if suffix is not None else f"{mantissa}e{exp}"


def hugepage_resource_name(page_size_bytes: int) -> str:
    """The resource name of a hugepage size in bytes: ``"hugepages-2Mi"``, ``"hugepages-1Gi"``
    (core/v1 helper HugePageResourceName with a BinarySI quantity)."""
    return "hugepages-" + canonical_string(page_size_bytes, QuantityFormat.BINARY_SI)


def is_memory_resource(name: str) -> bool:
    """True for the resources the Memory Manager manages: ``memory`` and ``hugepages-*``."""
    return name == "memory" or name.startswith("hugepages-")
