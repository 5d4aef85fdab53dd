"""A hint list described instead of listed: every NUMA node combination that holds some
required nodes and enough of a per-node quantity, as int bitmasks.

The kubelet's CPU manager answers one hint per NUMA node combination that holds the
container's reusable CPUs and enough available CPUs (cpumanager/policy_static.go
generateCPUTopologyHints, v1.37.2): 65,535 hints on a 16-node machine. That family is
*up-closed* (a superset of a member is a member), which the Topology Manager's merge can use
without listing it (merge.py). :class:`MaskFamily` is that description; it still behaves as
the kubelet's list (a ``Sequence`` of :class:`TopologyHint`, same order, same preferred flags,
listed on first use) for every other reader.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import overload

from nri_cpumgr.cm.topologymanager.bitmask import mask_of, nodes_of
from nri_cpumgr.cm.topologymanager.hint import TopologyHint


class MaskFamily(Sequence[TopologyHint]):
    """The combinations ``required | pick`` of NUMA nodes, ``pick`` drawn from ``free``, whose
    ``weight`` sum over ``pick`` is at least ``short`` (no condition when ``short <= 0``);
    preferred are those of ``min_size`` nodes, and, when ``aligned`` is given, those it accepts
    (align-by-socket).

    Arguments: ``nodes`` (all NUMA node ids, ascending), ``required`` (node ids every member
    holds, ascending), ``weight`` (node id -> non-negative quantity for every free node),
    ``short``, ``min_size``, ``aligned`` (frozenset of node ids -> bool, or None).

    Order as listed: by size, then as ``itertools.combinations`` of ``free`` (the order of the
    kubelet's IterateBitMasks). Never empty: build it only when the whole machine qualifies
    (:meth:`qualifies` of every node), else the answer is ``[]``.
    """

    __slots__ = ("nodes", "required", "free", "weight", "short", "min_size", "aligned",
                 "required_mask", "nodes_mask", "_listed")

    def __init__(self, nodes: Sequence[int], required: Sequence[int], weight: dict[int, int],
                 short: int, min_size: int,
                 aligned: Callable[[frozenset[int]], bool] | None = None) -> None:
        self.nodes = tuple(nodes)
        self.required = tuple(required)
        req = set(self.required)
        self.free = tuple(n for n in self.nodes if n not in req)
        self.weight = weight
        self.short = short
        self.min_size = min_size
        self.aligned = aligned
        self.required_mask = mask_of(self.required)
        self.nodes_mask = mask_of(self.nodes)
        self._listed: list[TopologyHint] | None = None

    # ---- the description -------------------------------------------------------------------
    @property
    def simple(self) -> bool:
        """True when preferred means "a member of ``min_size`` nodes" (no align-by-socket)."""
        return self.aligned is None

    def qualifies(self, mask: int) -> bool:
        """Whether ``mask`` (int bitmask) is a member."""
        if not mask or mask & self.required_mask != self.required_mask:
            return False
        if mask & ~self.nodes_mask:
            return False
        if self.short <= 0:
            return True
        rest = mask & ~self.required_mask
        total = 0
        weight = self.weight
        while rest:
            low = rest & -rest
            total += weight[low.bit_length() - 1]
            rest ^= low
        return total >= self.short

    def masks_of_size(self, size: int) -> Iterator[int]:
        """The members of ``size`` nodes as int bitmasks, in listed order."""
        k = size - len(self.required)
        if k < 0 or (size == 0) or k > len(self.free):
            return
        base = self.required_mask
        short = self.short
        weight = self.weight
        for pick in itertools.combinations(self.free, k):
            if short > 0 and sum(weight[n] for n in pick) < short:
                continue
            m = base
            for n in pick:
                m |= 1 << n
            yield m

    def min_count(self) -> int:
        """The node count of the smallest member (the kubelet's per-resource minimum in
        maxOfMinAffinityCounts)."""
        heavy = sorted((self.weight[n] for n in self.free), reverse=True)
        start = max(1, len(self.required))
        total = sum(heavy[: start - len(self.required)])
        for size in range(start, len(self.nodes) + 1):
            if self.short <= 0 or total >= self.short:
                return size
            idx = size - len(self.required)
            if idx < len(heavy):
                total += heavy[idx]
        return len(self.nodes)

    def preferred_masks(self) -> list[int]:
        """The preferred members as int bitmasks (needs :attr:`simple`, else lists them)."""
        if self.simple:
            return list(self.masks_of_size(self.min_size))
        return [mask_of(h.numa) for h in self._list() if h.preferred and h.numa is not None]

    def is_preferred(self, mask: int) -> bool:
        """Whether ``mask`` is a preferred member."""
        if not self.qualifies(mask):
            return False
        if mask.bit_count() == self.min_size:
            return True
        return self.aligned is not None and self.aligned(nodes_of(mask))

    # ---- the list ----------------------------------------------------------------------------
    def _list(self) -> list[TopologyHint]:
        if self._listed is None:
            out: list[TopologyHint] = []
            aligned = self.aligned
            for size in range(max(1, len(self.required)), len(self.nodes) + 1):
                preferred = size == self.min_size
                for m in self.masks_of_size(size):
                    numa = nodes_of(m)
                    out.append(TopologyHint(numa, preferred or (
                        aligned is not None and aligned(numa))))
            self._listed = out
        return self._listed

    @overload
    def __getitem__(self, i: int) -> TopologyHint: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[TopologyHint]: ...

    def __getitem__(self, i: int | slice) -> TopologyHint | Sequence[TopologyHint]:
        return self._list()[i]

    def __len__(self) -> int:
        return len(self._list())

    def __iter__(self) -> Iterator[TopologyHint]:
        return iter(self._list())

    def __bool__(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MaskFamily):
            return self._list() == other._list()
        if isinstance(other, list | tuple):
            return self._list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"MaskFamily(required={list(self.required)}, short={self.short}, "
                f"min_size={self.min_size}, aligned={self.aligned is not None})")
