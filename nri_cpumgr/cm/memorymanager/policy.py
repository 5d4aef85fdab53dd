"""The interface every Memory Manager policy implements (kubelet memorymanager policy.go)."""

from __future__ import annotations

from typing import Protocol

from nri_cpumgr.cm.memorymanager.state import Block, MemoryState
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.podmodel import ContainerSpec, Pod

Hints = dict[str, list[TopologyHint]]
"""Topology hints per memory resource name (``"memory"``, ``"hugepages-1Gi"``)."""


class Policy(Protocol):
    """A Memory Manager policy. It keeps no assignment state of its own: every call gets
    the :class:`MemoryState` to read and update."""

    @property
    def name(self) -> str:
        """``"None"`` or ``"Static"`` (the kubelet's --memory-manager-policy values)."""
        ...

    def start(self, state: MemoryState) -> None:
        """Validate or initialise ``state``; raises a MemoryManagerError if it is invalid."""
        ...

    def allocate(
        self,
        state: MemoryState,
        pod: Pod,
        container: ContainerSpec,
        hint: TopologyHint | None = None,
    ) -> None:
        """Assign memory to ``container`` of ``pod`` following the Topology Manager's
        ``hint`` (``None`` = the empty hint: no affinity, not preferred)."""
        ...

    def remove_container(self, state: MemoryState, pod_uid: str, container_name: str) -> None:
        """Release a container's memory; unknown containers are ignored."""
        ...

    def get_topology_hints(
        self, state: MemoryState, pod: Pod, container: ContainerSpec
    ) -> Hints | None:
        """Hints for one container, ``None`` = no preference."""
        ...

    def get_pod_topology_hints(self, state: MemoryState, pod: Pod) -> Hints | None:
        """Hints for the whole pod (Topology Manager pod scope), ``None`` = no preference."""
        ...

    def get_allocatable_memory(self, state: MemoryState) -> list[Block]:
        """Allocatable bytes per NUMA node and memory type, as single-node blocks."""
        ...
