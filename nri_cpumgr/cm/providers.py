"""Hint providers for the Topology Manager: the CPU manager, the Memory Manager and the
container's devices (kubelet: cpumanager, memorymanager and devicemanager each implement
topologymanager.HintProvider).

Each provider answers hints for one (pod, container) and, at ``allocate``, takes the
Topology Manager's chosen affinity for it. Pure: they work on the managers' in-memory
states; the device NUMA nodes are looked up in sysfs by the runtime glue beforehand.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations

from nri_cpumgr.cm.cpumanager import CPUManagerState, NonePolicy, StaticPolicy
from nri_cpumgr.cm.memorymanager.manager import MemoryManager
from nri_cpumgr.cm.topologymanager import TopologyHint, TopologyManager
from nri_cpumgr.cm.topologymanager.merge import ProviderHints
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import Pod


def _affinity(tm: TopologyManager, pod: Pod, name: str) -> TopologyHint | None:
    hint = tm.get_affinity(pod.uid, name)
    return hint if hint.numa is not None else None


class CPUProvider:
    """Resource ``cpu``: the static policy's hints and allocation. ``allocated`` maps
    (pod uid, container) to the CPUs the last allocation gave (None: shared pool)."""

    def __init__(
        self, policy: StaticPolicy | NonePolicy, state: CPUManagerState, tm: TopologyManager
    ) -> None:
        self.policy = policy
        self.state = state
        self.tm = tm
        self.allocated: dict[tuple[str, str], CPUSet | None] = {}

    def get_topology_hints(self, pod: Pod, container_name: str) -> ProviderHints:
        hints = self.policy.get_topology_hints(self.state, pod, container_name)
        return None if hints is None else {"cpu": hints}

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        hints = self.policy.get_pod_topology_hints(self.state, pod)
        return None if hints is None else {"cpu": hints}

    def allocate(self, pod: Pod, container_name: str) -> None:
        hint = _affinity(self.tm, pod, container_name)
        self.allocated[(pod.uid, container_name)] = self.policy.allocate(
            self.state, pod, container_name, hint
        )


class MemoryProvider:
    """Resources ``memory`` and ``hugepages-*``: the Memory Manager (Static policy)."""

    def __init__(self, manager: MemoryManager, tm: TopologyManager) -> None:
        self.manager = manager
        self.tm = tm

    def get_topology_hints(self, pod: Pod, container_name: str) -> ProviderHints:
        c = pod.container(container_name)
        return None if c is None else self.manager.get_topology_hints(pod, c)

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        return self.manager.get_pod_topology_hints(pod)

    def allocate(self, pod: Pod, container_name: str) -> None:
        c = pod.container(container_name)
        if c is not None:
            self.manager.allocate(pod, c, _affinity(self.tm, pod, container_name))


def device_hints(device_numa: Iterable[int], numa_nodes: Iterable[int]) -> list[TopologyHint]:
    """Hints for devices already chosen for the container, sitting on ``device_numa``: every
    mask of the machine's NUMA nodes that contains them all; preferred = exactly them (the
    kubelet devicemanager's rule, for a fixed device set: a mask is preferred when it is as
    narrow as the devices allow)."""
    need = frozenset(device_numa)
    nodes = sorted(set(numa_nodes) | need)
    rest = [n for n in nodes if n not in need]
    out = []
    for k in range(len(rest) + 1):
        for extra in combinations(rest, k):
            out.append(TopologyHint(need | frozenset(extra), k == 0))
    return out


class DeviceProvider:
    """Resource ``devices``: the NUMA nodes of the container's device nodes' PCI devices.
    ``current`` maps (pod uid, container) to those nodes, filled by the caller before
    admission. Devices without NUMA affinity give no preference."""

    def __init__(self, numa_nodes: Iterable[int]) -> None:
        self.numa_nodes = tuple(sorted(numa_nodes))
        self.current: dict[tuple[str, str], frozenset[int]] = {}

    def _hints(self, nodes: frozenset[int]) -> ProviderHints:
        return {"devices": device_hints(nodes, self.numa_nodes)} if nodes else None

    def get_topology_hints(self, pod: Pod, container_name: str) -> ProviderHints:
        return self._hints(self.current.get((pod.uid, container_name), frozenset()))

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        nodes: frozenset[int] = frozenset()
        for (uid, _), n in self.current.items():
            if uid == pod.uid:
                nodes |= n
        return self._hints(nodes)

    def allocate(self, pod: Pod, container_name: str) -> None:
        """Devices are allocated by the kubelet's device plugins; nothing to do here."""
