"""NUMA nodes and distances as the Topology Manager sees them.

Source: kubelet pkg/kubelet/cm/topologymanager/numa_info.go (NUMAInfo, NewNUMAInfo, Narrowest,
Closest, DefaultAffinityMask, NUMADistances.CalculateAverageFor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nri_cpumgr.cm.topologymanager.bitmask import bits_of, is_narrower_than, mask_of
from nri_cpumgr.cm.topologymanager.errors import TopologyManagerConfigError


@dataclass(frozen=True)
class NUMAInfo:
    """The machine's NUMA node ids and, when prefer-closest-numa-nodes is on, their distance
    rows (``distances[i][j]`` = ACPI SLIT distance from node i to node j, unitless, 10 = local).
    """

    nodes: tuple[int, ...]
    distances: Mapping[int, Sequence[int] | None] = field(default_factory=dict)

    @property
    def default_mask(self) -> int:
        """All NUMA nodes: the "any node" affinity (DefaultAffinityMask)."""
        return mask_of(self.nodes)

    def average_distance(self, mask: int) -> float:
        """Mean distance over all ordered pairs of the mask's nodes, each node with itself
        included; 0.0 for an empty mask (CalculateAverageFor). Raises
        TopologyManagerConfigError when a needed distance is missing."""
        bits = bits_of(mask)
        if not bits:
            return 0.0
        total = 0.0
        count = 0.0
        for a in bits:
            row = self.distances.get(a)
            for b in bits:
                if row is None or b >= len(row):
                    raise TopologyManagerConfigError(f"no NUMA distance from node {a} to {b}")
                total += float(row[b])
                count += 1.0
        return total / count

    def narrowest(self, m1: int, m2: int) -> int:
        """``m1`` if it is narrower than ``m2``, else ``m2`` (Narrowest)."""
        return m1 if is_narrower_than(m1, m2) else m2

    def closest(self, m1: int, m2: int) -> int:
        """Of two masks: the narrower if their sizes differ, else the one with the smaller
        average distance, else the numerically smaller (Closest)."""
        if m1.bit_count() != m2.bit_count():
            return self.narrowest(m1, m2)
        d1, d2 = self.average_distance(m1), self.average_distance(m2)
        if d1 == d2:
            return m1 if m1 < m2 else m2
        return m1 if d1 < d2 else m2


def new_numa_info(
    nodes: Sequence[int],
    distances: Mapping[int, Sequence[int] | None] | None,
    prefer_closest_numa: bool,
) -> NUMAInfo:
    """Build NUMAInfo from the machine's node ids and per-node distance rows.

    Distances are kept only when ``prefer_closest_numa`` is set; then every node needs a row
    covering every node id, else TopologyManagerConfigError ("error getting NUMA distances
    from cadvisor", as the kubelet's NewNUMAInfo fails).
    """
    kept: dict[int, Sequence[int] | None] = {}
    top = max(nodes, default=-1)
    for n in nodes:
        row = None
        if prefer_closest_numa:
            row = (distances or {}).get(n)
            if row is None:
                raise TopologyManagerConfigError(
                    f"error getting NUMA distances from cadvisor (node {n})"
                )
            if len(row) <= top:
                raise TopologyManagerConfigError(
                    f"error getting NUMA distances from cadvisor (node {n}: {len(row)} "
                    f"distances for node ids up to {top})"
                )
            row = tuple(int(x) for x in row)
        kept[n] = row
    return NUMAInfo(tuple(nodes), kept)
