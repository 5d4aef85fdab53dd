"""The ``None`` Memory Manager policy: memory management disabled (kubelet policy_none.go).

Every operation is a no-op: no hints (no preference), no assignments, no state checks.
"""

from __future__ import annotations

from nri_cpumgr.cm.memorymanager.policy import Hints
from nri_cpumgr.cm.memorymanager.state import Block, MemoryState
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.podmodel import ContainerSpec, Pod

POLICY_NONE = "None"


class NonePolicy:
    """Memory Manager policy ``None``."""

    @property
    def name(self) -> str:
        return POLICY_NONE

    def start(self, state: MemoryState) -> None:
        """Accepts any state."""

    def allocate(
        self,
        state: MemoryState,
        pod: Pod,
        container: ContainerSpec,
        hint: TopologyHint | None = None,
    ) -> None:
        """Assigns nothing."""

    def remove_container(self, state: MemoryState, pod_uid: str, container_name: str) -> None:
        """Nothing to release."""

    def get_topology_hints(
        self, state: MemoryState, pod: Pod, container: ContainerSpec
    ) -> Hints | None:
        """Always ``None`` (no preference)."""
        return None

    def get_pod_topology_hints(self, state: MemoryState, pod: Pod) -> Hints | None:
        """Always ``None`` (no preference)."""
        return None

    def get_allocatable_memory(self, state: MemoryState) -> list[Block]:
        """Always empty."""
        return []
