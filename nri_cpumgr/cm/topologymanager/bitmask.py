"""NUMA masks as plain ``int`` bitmasks (bit ``n`` set = NUMA node ``n``).

The kubelet keeps NUMA affinities in a 64-bit ``bitmask.BitMask``
(pkg/kubelet/cm/topologymanager/bitmask/bitmask.go). Python ints give the same operations
(``&``, ``|``, ``int.bit_count``) without the 64-node limit; the ordering rules that matter
for hint merging are reproduced here:

* *narrower*: fewer bits set wins; with equal counts the numerically smaller mask wins
  (BitMask.IsNarrowerThan, BitMask.IsLessThan).
"""

from __future__ import annotations

from collections.abc import Iterable


def mask_of(nodes: Iterable[int]) -> int:
    """The bitmask of a collection of NUMA node ids (ids must be >= 0).

    Raises ValueError for a negative id (the kubelet's BitMask.Add rejects it too).
    """
    m = 0
    for n in nodes:
        if n < 0:
            raise ValueError(f"NUMA node id must be >= 0, got {n}")
        m |= 1 << n
    return m


def nodes_of(mask: int) -> frozenset[int]:
    """The NUMA node ids set in ``mask``, as a frozenset."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return frozenset(out)


def bits_of(mask: int) -> list[int]:
    """The NUMA node ids set in ``mask``, ascending (kubelet BitMask.GetBits order)."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def is_narrower_than(a: int, b: int) -> bool:
    """True when ``a`` is narrower than ``b``: fewer nodes, or as many nodes and numerically
    smaller (kubelet bitmask.go IsNarrowerThan / IsLessThan)."""
    ca, cb = a.bit_count(), b.bit_count()
    if ca == cb:
        return a < b
    return ca < cb
