"""CPU sets and Linux cpulist strings.

A :class:`CPUSet` is an immutable set of non-negative integers (CPU ids, or NUMA node ids
when used for ``cpuset.mems``). Its string form is the Linux cpulist format that the kernel
(``/sys/devices/system/cpu/online``), the OCI spec (``linux.resources.cpu.cpus``) and the
kubelet (``cpuset.CPUSet.String()``) use: sorted, runs of two or more written ``a-b``,
comma separated, ``""`` for the empty set.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable


class CPUSetError(ValueError):
    """A cpulist string that cannot be parsed (bad syntax, negative or reversed range, or an
    id above :data:`MAX_ID`)."""


MAX_ID = 65535
"""Largest CPU (or NUMA node) id accepted: Linux caps NR_CPUS at 8192 today; a larger id in
a cpulist is a typo, and expanding it would cost memory and time."""


class CPUSet(frozenset[int]):
    """An immutable set of CPU (or NUMA node) ids with cpulist parsing and formatting.

    Set operators (``|``, ``&``, ``-``, ``^``) return :class:`CPUSet`.
    """

    __slots__ = ()

    def __new__(cls, ids: Iterable[int] = ()) -> CPUSet:
        return super().__new__(cls, ids)

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse a cpulist such as ``"0-3,8,10-11"``; ``""`` (or blanks) is the empty set.

        Raises :class:`CPUSetError` for malformed input.
        """
        if cls is CPUSet:
            return _parse_cached(text)
        return cls(_parse_ids(text))

    def __str__(self) -> str:
        return format_cpulist(self)

    def __repr__(self) -> str:
        return f"CPUSet({format_cpulist(self)!r})"

    def sorted(self) -> list[int]:
        """The ids in ascending order."""
        return sorted(self)

    # frozenset's operators return frozenset; keep the type. An operand that is already a
    # frozenset (a CPUSet) is used as is: copying a 256-CPU set costs more than the operation.
    def __or__(self, other: Iterable[int]) -> CPUSet:  # type: ignore[override]
        return CPUSet(frozenset.__or__(self, _frozen(other)))

    def __and__(self, other: Iterable[int]) -> CPUSet:  # type: ignore[override]
        return CPUSet(frozenset.__and__(self, _frozen(other)))

    def __sub__(self, other: Iterable[int]) -> CPUSet:  # type: ignore[override]
        return CPUSet(frozenset.__sub__(self, _frozen(other)))

    def __xor__(self, other: Iterable[int]) -> CPUSet:  # type: ignore[override]
        return CPUSet(frozenset.__xor__(self, _frozen(other)))

    union = __or__
    intersection = __and__
    difference = __sub__


_EMPTY = CPUSet()


def _frozen(ids: Iterable[int]) -> frozenset[int]:
    return ids if isinstance(ids, frozenset) else frozenset(ids)


def format_cpulist(ids: Iterable[int]) -> str:
    """Format ids as a Linux cpulist: sorted, runs of two or more as ``a-b``."""
    s = sorted(ids)
    if not s:
        return ""
    parts: list[str] = []
    start = prev = s[0]
    for x in s[1:]:
        if x == prev + 1:
            prev = x
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = x
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)


def _parse_ids(text: str) -> frozenset[int]:
    """The ids of a cpulist (see :meth:`CPUSet.parse`). Raises :class:`CPUSetError`."""
    text = text.strip()
    if not text:
        return _EMPTY
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise CPUSetError(f"invalid cpulist {text!r}: empty element")
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise CPUSetError(f"invalid cpulist {text!r}: bad element {part!r}") from None
        if a < 0 or b < a:
            raise CPUSetError(f"invalid cpulist {text!r}: bad range {part!r}")
        if b > MAX_ID:
            raise CPUSetError(f"invalid cpulist {text!r}: id {b} above {MAX_ID}")
        out.update(range(a, b + 1))
    return frozenset(out)


@functools.lru_cache(maxsize=512)
def _parse_cached(text: str) -> CPUSet:
    # a node's containers share a handful of cpulists (the shared pool's, mostly): a
    # Synchronize of 1,000 containers parses "0-255" once, not 1,000 times
    return CPUSet(_parse_ids(text))
