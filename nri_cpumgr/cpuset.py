"""CPU sets and Linux cpulist strings.

A :class:`CPUSet` is an immutable set of non-negative integers (CPU ids, or NUMA node ids
when used for ``cpuset.mems``). Its string form is the Linux cpulist format that the kernel
(``/sys/devices/system/cpu/online``), the OCI spec (``linux.resources.cpu.cpus``) and the
kubelet (``cpuset.CPUSet.String()``) use: sorted, runs of two or more written ``a-b``,
comma separated, ``""`` for the empty set.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable


class CPUSetError(ValueError):
    """A cpulist string that cannot be parsed (bad syntax, negative or reversed range, or an
    id above :data:`MAX_ID`)."""


MAX_ID = 65535
"""Largest CPU (or NUMA node) id accepted: Linux caps NR_CPUS at 8192 today; a larger id in
a cpulist is a typo, and expanding it would cost memory and time."""


_SetOp = Callable[[frozenset[int], frozenset[int]], frozenset[int]]


class CPUSet(frozenset[int]):
    """An immutable set of CPU (or NUMA node) ids with cpulist parsing and formatting.

    Set operators (``|``, ``&``, ``-``, ``^``) return :class:`CPUSet`. Each set also knows
    its bitmask (:attr:`mask`, bit *i* = id *i*), computed once when first asked for and
    carried through the operators when either operand knows its own: the shared pool of a
    256-CPU node is turned into a mask once, not at every allocation.
    """

    __slots__ = ("_mask",)

    # (no __new__ of its own: frozenset's, called without a Python frame, builds every
    # set, ``CPUSet(ids)`` and ``CPUSet()`` alike)

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse a cpulist such as ``"0-3,8,10-11"``; ``""`` (or blanks) is the empty set.

        Raises :class:`CPUSetError` for malformed input.
        """
        if cls is CPUSet:
            return _parse_cached(text)
        return cls(_parse_ids(text))

    @classmethod
    def from_mask(cls, mask: int) -> CPUSet:
        """The set of the bits of ``mask`` (bit *i* = id *i*; ``mask >= 0``)."""
        out = cls(mask_to_list(mask))
        out._mask = mask
        return out

    @property
    def mask(self) -> int:
        """The bitmask of the ids (bit *i* set = id *i*); computed on first use, then kept."""
        try:
            return self._mask
        except AttributeError:
            m = ids_to_mask(self)
            self._mask = m
            return m

    def __str__(self) -> str:
        try:
            return _text_of_mask(self._mask)  # O(runs), not O(ids); a known mask: a lookup
        except AttributeError:
            return format_cpulist(self)

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"

    def sorted(self) -> list[int]:
        """The ids in ascending order."""
        return sorted(self)

    # frozenset's operators return frozenset; keep the type. An operand that is already a
    # frozenset (a CPUSet) is used as is: copying a 256-CPU set costs more than the operation.
    # The result's mask is the operands' masks combined, when either of them knows its own.
    def _combined(self, other: Iterable[int], set_op: _SetOp,
                  mask_op: Callable[[int, int], int]) -> CPUSet:
        o = _frozen(other)
        out = CPUSet(set_op(self, o))
        masks = _masks(self, o)
        if masks is not None:
            out._mask = mask_op(*masks)
        return out

    def __or__(self, other: Iterable[int]) -> CPUSet:  # type: ignore[override]
        return self._combined(other, frozenset.__or__, operator.or_)

    def __and__(self, other: Iterable[int]) -> CPUSet:  # type: ignore[override]
        return self._combined(other, frozenset.__and__, operator.and_)

    def __sub__(self, other: Iterable[int]) -> CPUSet:  # type: ignore[override]
        return self._combined(other, frozenset.__sub__, _and_not)

    def __xor__(self, other: Iterable[int]) -> CPUSet:  # type: ignore[override]
        return self._combined(other, frozenset.__xor__, operator.xor)

    union = __or__
    intersection = __and__
    difference = __sub__


_EMPTY = CPUSet()


def _and_not(a: int, b: int) -> int:
    return a & ~b


def _masks(a: CPUSet, b: frozenset[int]) -> tuple[int, int] | None:
    """Both operands' masks when at least one of them knows its own (the other's is then
    computed, and kept when it is a CPUSet), else None: a set whose mask is known passes it
    on to every set made from it."""
    ma = getattr(a, "_mask", None)
    mb = getattr(b, "_mask", None)
    if ma is None:
        if mb is None:
            return None
        ma = a.mask
    elif mb is None:
        mb = b.mask if isinstance(b, CPUSet) else ids_to_mask(b)
    return ma, mb


def _frozen(ids: Iterable[int]) -> frozenset[int]:
    return ids if isinstance(ids, frozenset) else frozenset(ids)


def ids_to_mask(ids: Iterable[int]) -> int:
    """The bitmask of non-negative ids (bit *i* set = id *i*)."""
    if isinstance(ids, frozenset | set) and ids:
        # distinct ids: the sum of their bits is their union, summed in C from a table of
        # powers of two (about 3x faster than shifting and or-ing 255 ids one by one)
        hi = max(ids)
        if hi < _POW2_MAX and min(ids) >= 0:
            if hi >= len(_POW2):
                _POW2.extend(1 << i for i in range(len(_POW2), hi + 1))
            return sum(map(_POW2.__getitem__, ids))
    out = 0
    for i in ids:
        out |= 1 << i
    return out


_POW2: list[int] = []  # 1 << i, grown to the largest id seen (below _POW2_MAX)
_POW2_MAX = 2048  # the table's size grows as its square: 2,048 entries hold ~280 KiB


def mask_to_list(mask: int) -> list[int]:
    """The ids of a bitmask, ascending."""
    out: list[int] = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def format_mask(mask: int) -> str:
    """The cpulist of a bitmask, in O(runs): a run starts at a set bit whose lower neighbour
    is clear and ends at one whose upper neighbour is clear."""
    starts = mask & ~(mask << 1)
    ends = mask & ~(mask >> 1)
    parts: list[str] = []
    while starts:
        a = (starts & -starts).bit_length() - 1
        b = (ends & -ends).bit_length() - 1
        parts.append(f"{a}-{b}" if b > a else str(a))
        starts &= starts - 1
        ends &= ends - 1
    return ",".join(parts)


#: :func:`format_mask`, for :meth:`CPUSet.__str__`: a create's answer, its log line and the
#: checkpoint format the same few sets (the shared pool, the CPUs just taken); a hit costs a
#: fifth of a 1-CPU set's formatting, a tenth of a 256-CPU pool's
_text_of_mask = functools.lru_cache(maxsize=1024)(format_mask)


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
        lo, hi = lo.strip(), hi.strip()
        # ASCII digits only, as the kubelet's strconv.Atoi (int() also takes other scripts'
        # digits, "١", and underscores, "1_0")
        if not (lo.isascii() and lo.isdigit()) or (sep and not (hi.isascii() and hi.isdigit())):
            raise CPUSetError(f"invalid cpulist {text!r}: bad element {part!r}")
        for digits in (lo, hi):
            if len(digits.lstrip("0")) > 5:  # (above MAX_ID: not turned into a number)
                raise CPUSetError(f"invalid cpulist {text!r}: id {digits} above {MAX_ID}")
        a = int(lo)
        b = int(hi) if sep else a
        if b < a:
            raise CPUSetError(f"invalid cpulist {text!r}: bad range {part!r}")
        if max(a, b) > MAX_ID:
            raise CPUSetError(f"invalid cpulist {text!r}: id {max(a, b)} above {MAX_ID}")
        out.update(range(a, b + 1))
    return frozenset(out)


@functools.lru_cache(maxsize=512)
def _parse_cached(text: str) -> CPUSet:
    # a node's containers share a handful of cpulists (the shared pool's, mostly): a
    # Synchronize of 1,000 containers parses "0-255" once, not 1,000 times
    return CPUSet(_parse_ids(text))
