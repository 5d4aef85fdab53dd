"""Topology hints, the currency between hint providers and the Topology Manager."""

from __future__ import annotations

from dataclasses import dataclass

from nri_cpumgr.frozen import slot_init


@slot_init
@dataclass(frozen=True, slots=True, init=False)  # (its __init__: slot_init's)
class TopologyHint:
    """A NUMA affinity a hint provider can satisfy a request with.

    ``numa`` is the set of NUMA node ids (``None`` = no affinity, the "don't care" hint);
    ``preferred`` marks the narrowest masks that satisfy the request (kubelet
    topologymanager.TopologyHint{NUMANodeAffinity, Preferred}).
    """

    numa: frozenset[int] | None
    preferred: bool

    def sort_key(self) -> tuple[int, int, tuple[int, ...]]:
        """Order of the kubelet's TopologyHint.LessThan: preferred first, then narrower, then
        lower node ids."""
        nodes = tuple(sorted(self.numa)) if self.numa is not None else ()
        return (0 if self.preferred else 1, len(nodes), nodes)
