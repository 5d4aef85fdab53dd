"""What the pod-level managers (:mod:`.manager`, :mod:`.resizer`) need from the container
manager that runs them: :class:`ContainerManagerView`, which
:class:`nri_cpumgr.cm.container_manager.ContainerManager` implements.

A protocol, so podresources never imports the container manager (which imports it).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from nri_cpumgr.cm.cpumanager import CPUManagerState, NonePolicy, StaticPolicy
from nri_cpumgr.cm.providers import CPUProvider, DeviceProvider
from nri_cpumgr.cm.records import Tracked
from nri_cpumgr.cm.topologymanager import TopologyManager
from nri_cpumgr.cpuset import CPUSet

if TYPE_CHECKING:  # (the Memory Manager's package is imported with a Memory Manager only)
    from nri_cpumgr.cm.memorymanager.manager import MemoryManager


class ContainerManagerView(Protocol):
    """The container manager as the pod-level managers see it.

    ``policy``, ``state``: the CPU manager's policy and state; ``memory``: the Memory Manager
    (None for ``memoryManagerPolicy: None``); ``tm``: the Topology Manager; ``cpu_provider``,
    ``devices``: its CPU and device hint providers; ``static``: the policy is static;
    ``containers``: container id -> record of every tracked container; ``owner``: (pod uid,
    container name) -> id of the container holding that entry's CPUs and memory;
    ``whole_pod_admission``: a pod whose spec is known is admitted whole at its first container.
    """

    policy: StaticPolicy | NonePolicy
    state: CPUManagerState
    memory: MemoryManager | None
    tm: TopologyManager
    cpu_provider: CPUProvider
    devices: DeviceProvider
    static: bool
    containers: dict[str, Tracked]
    owner: dict[tuple[str, str], str]
    whole_pod_admission: bool

    def shared_pool(self) -> CPUSet:
        """CPUs the node's shared-pool containers run on now (never empty)."""
        ...

    def row_changed(self, cid: str) -> None:
        """A field of container ``cid``'s record changed (its checkpoint row is stale)."""
        ...

    def kubelet_memory_hints(self) -> AbstractContextManager[list[str]]:
        """Within: the Memory Manager's hints as the kubelet answers them (no preference
        where no NUMA set holds the memory); the list names those containers afterwards."""
        ...

    def track(self, cid: str, t: Tracked) -> None:
        """Track record ``t`` under container id ``cid``."""
        ...

    def untrack(self, cid: str) -> Tracked | None:
        """Stop tracking container ``cid``: its record, or None when it was not tracked."""
        ...

    def pod_containers(self, pod_uid: str) -> list[tuple[str, Tracked]]:
        """``(container id, record)`` of the tracked containers of a pod."""
        ...

    def mems(self, key: tuple[str, str], cpus: CPUSet | None) -> CPUSet | None:
        """The cpuset.mems of entry ``key`` (pod uid, container name) given ``cpus``."""
        ...
