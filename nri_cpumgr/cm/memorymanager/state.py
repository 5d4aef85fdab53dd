"""Memory Manager state: per-NUMA machine state and container memory assignments.

Model of the kubelet's pkg/kubelet/cm/memorymanager/state (state.go, state_mem.go):

* the **machine state** maps a NUMA node id to :class:`NUMANodeState`: for every memory
  type (``"memory"``, ``"hugepages-<size>"``) a :class:`MemoryTable` of byte counts, the
  number of blocks assigned from the node and ``cells``, the group of NUMA nodes the node
  currently serves allocations with (``[n]`` alone, or e.g. ``[0, 1]`` after a cross-NUMA
  allocation);
* the **assignments** map pod uid -> container name -> list of :class:`Block`.

:class:`MemoryState` is the in-memory store. Like the kubelet's, its getters return copies
and its setters store copies, so a policy works on a snapshot and commits it at the end.
``to_dict`` / ``from_dict`` give a JSON-able form for checkpointing.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nri_cpumgr.frozen import slot_init


@dataclass(slots=True)
class MemoryTable:
    """One memory type on one NUMA node, all in bytes.

    ``allocatable = total_mem_size - system_reserved`` (for ``memory`` also minus the
    node's hugepages); ``free + reserved = allocatable`` in a consistent state
    (state.go MemoryTable).
    """

    total_mem_size: int = 0
    system_reserved: int = 0
    allocatable: int = 0
    reserved: int = 0
    free: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "total_mem_size": self.total_mem_size,
            "system_reserved": self.system_reserved,
            "allocatable": self.allocatable,
            "reserved": self.reserved,
            "free": self.free,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MemoryTable:
        return cls(
            total_mem_size=int(d.get("total_mem_size", 0)),
            system_reserved=int(d.get("system_reserved", 0)),
            allocatable=int(d.get("allocatable", 0)),
            reserved=int(d.get("reserved", 0)),
            free=int(d.get("free", 0)),
        )


@dataclass(slots=True)
class NUMANodeState:
    """One NUMA node: ``memory_map`` (memory type -> :class:`MemoryTable`),
    ``number_of_assignments`` (blocks placed on the node; a container with memory and
    one hugepage size counts two) and ``cells`` (the node's group, see module doc)."""

    number_of_assignments: int = 0
    memory_map: dict[str, MemoryTable] = field(default_factory=dict)
    cells: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "number_of_assignments": self.number_of_assignments,
            "memory_map": {k: v.to_dict() for k, v in self.memory_map.items()},
            "cells": list(self.cells),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NUMANodeState:
        return cls(
            number_of_assignments=int(d.get("number_of_assignments", 0)),
            memory_map={
                k: MemoryTable.from_dict(v) for k, v in (d.get("memory_map") or {}).items()
            },
            cells=[int(c) for c in (d.get("cells") or [])],
        )


NUMANodeMap = dict[int, NUMANodeState]
"""Machine state: NUMA node id -> :class:`NUMANodeState`."""


@slot_init
@dataclass(frozen=True, slots=True, init=False)  # (its __init__: slot_init's)
class Block:
    """``size`` bytes of memory type ``type`` (``"memory"`` / ``"hugepages-<size>"``) given
    to a container from the NUMA nodes ``numa_affinity`` (ascending ids) (state.go Block)."""

    numa_affinity: tuple[int, ...]
    type: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"numa_affinity": list(self.numa_affinity), "type": self.type, "size": self.size}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Block:
        return cls(tuple(int(n) for n in d["numa_affinity"]), str(d["type"]), int(d["size"]))


ContainerMemoryAssignments = dict[str, dict[str, list[Block]]]
"""Assignments: pod uid -> container name -> blocks."""


def clone_machine_state(ms: Mapping[int, NUMANodeState]) -> NUMANodeMap:
    """A deep copy of a machine state."""
    return {n: copy.deepcopy(s) for n, s in ms.items()}


def clone_assignments(a: Mapping[str, Mapping[str, Iterable[Block]]]) -> ContainerMemoryAssignments:
    """A copy of an assignments map (blocks are immutable)."""
    return {pod: {c: list(blocks) for c, blocks in ctrs.items()} for pod, ctrs in a.items()}


def machine_state_to_dict(ms: Mapping[int, NUMANodeState]) -> dict[str, Any]:
    """JSON-able machine state: ``{"<numa id>": NUMANodeState.to_dict()}``."""
    return {str(n): s.to_dict() for n, s in sorted(ms.items())}


def machine_state_from_dict(d: Mapping[str, Any] | None) -> NUMANodeMap:
    """Inverse of :func:`machine_state_to_dict`; ``None`` is the empty state."""
    return {int(n): NUMANodeState.from_dict(s) for n, s in (d or {}).items()}


def assignments_to_dict(a: Mapping[str, Mapping[str, Iterable[Block]]]) -> dict[str, Any]:
    """JSON-able assignments: ``{pod: {container: [Block.to_dict(), ...]}}``."""
    return {
        pod: {c: [b.to_dict() for b in bl] for c, bl in ctrs.items()} for pod, ctrs in a.items()
    }


def assignments_from_dict(d: Mapping[str, Any] | None) -> ContainerMemoryAssignments:
    """Inverse of :func:`assignments_to_dict`; ``None`` is the empty map."""
    return {
        pod: {c: [Block.from_dict(b) for b in bl] for c, bl in ctrs.items()}
        for pod, ctrs in (d or {}).items()
    }


class MemoryState:
    """In-memory Memory Manager state (state_mem.go stateMemory).

    Getters return copies, setters store copies. :meth:`get_memory_blocks` returns ``None``
    for an unknown container (distinct from an empty list). :meth:`delete` drops a pod entry
    once its last container is gone.
    """

    def __init__(
        self,
        machine_state: Mapping[int, NUMANodeState] | None = None,
        assignments: Mapping[str, Mapping[str, Iterable[Block]]] | None = None,
    ) -> None:
        self._machine_state: NUMANodeMap = clone_machine_state(machine_state or {})
        self._assignments: ContainerMemoryAssignments = clone_assignments(assignments or {})

    def get_machine_state(self) -> NUMANodeMap:
        return clone_machine_state(self._machine_state)

    def set_machine_state(self, ms: Mapping[int, NUMANodeState]) -> None:
        self._machine_state = clone_machine_state(ms)

    def get_memory_blocks(self, pod_uid: str, container: str) -> list[Block] | None:
        blocks = self._assignments.get(pod_uid, {}).get(container)
        return None if blocks is None else list(blocks)

    def set_memory_blocks(self, pod_uid: str, container: str, blocks: Iterable[Block]) -> None:
        self._assignments.setdefault(pod_uid, {})[container] = list(blocks)

    def get_memory_assignments(self) -> ContainerMemoryAssignments:
        return clone_assignments(self._assignments)

    def set_memory_assignments(self, a: Mapping[str, Mapping[str, Iterable[Block]]]) -> None:
        self._assignments = clone_assignments(a)

    def delete(self, pod_uid: str, container: str) -> None:
        ctrs = self._assignments.get(pod_uid)
        if ctrs is None:
            return
        ctrs.pop(container, None)
        if not ctrs:
            del self._assignments[pod_uid]

    def clear(self) -> None:
        self._machine_state = {}
        self._assignments = {}

    def to_dict(self) -> dict[str, Any]:
        """``{"machine_state": {...}, "assignments": {...}}``, JSON-able."""
        return {
            "machine_state": machine_state_to_dict(self._machine_state),
            "assignments": assignments_to_dict(self._assignments),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MemoryState:
        """Inverse of :meth:`to_dict`. Raises KeyError/ValueError/TypeError on malformed
        input."""
        return cls(
            machine_state_from_dict(d.get("machine_state")),
            assignments_from_dict(d.get("assignments")),
        )


def machine_states_equal(a: Mapping[int, NUMANodeState], b: Mapping[int, NUMANodeState]) -> bool:
    """The kubelet's comparison of two machine states (policy_static.go
    areMachineStatesEqual): same NUMA ids; per node the same number of assignments, the same
    group (as a sorted list), the same memory types with equal total, system reserved and
    allocatable; ``free`` and ``reserved`` are compared as sums over the node's group in
    ``a``, so two states that split a cross-NUMA reservation differently inside one group
    are equal."""
    if len(a) != len(b):
        return False
    for n, sa in a.items():
        sb = b.get(n)
        if sb is None:
            return False
        if sa.number_of_assignments != sb.number_of_assignments:
            return False
        if sorted(sa.cells) != sorted(sb.cells):
            return False
        if sa.memory_map.keys() != sb.memory_map.keys():
            return False
        for r, ta in sa.memory_map.items():
            tb = sb.memory_map[r]
            if (ta.total_mem_size, ta.system_reserved, ta.allocatable) != (
                tb.total_mem_size,
                tb.system_reserved,
                tb.allocatable,
            ):
                return False
            sums = []
            for ms in (a, b):
                free = reserved = 0
                for c in sa.cells:
                    st = ms.get(c)
                    t = st.memory_map.get(r) if st is not None else None
                    if t is None:
                        return False
                    free += t.free
                    reserved += t.reserved
                sums.append((free, reserved))
            if sums[0] != sums[1]:
                return False
    return True
