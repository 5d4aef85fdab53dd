"""The device side of the Topology Manager: NUMA hints for the devices a container gets.

The kubelet's devicemanager allocates devices from device plugins and reports, per resource,
the NUMA masks that can hold them (kubelet pkg/kubelet/cm/devicemanager/topology_hints.go,
GetTopologyHints / generateDeviceTopologyHints, v1.37.2). Under NRI the devices are already
chosen when the runtime creates the container: the plugin sees the container's device nodes,
and ``nri_cpumgr.sysfs.device_numa_node`` (the I/O, done by the runtime glue before
admission) gives each one's NUMA node. This module is what remains of the kubelet's rule for
a fixed device set, pure: no sysfs, no runtime.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations

from nri_cpumgr.cm.topologymanager import TopologyHint
from nri_cpumgr.cm.topologymanager.merge import ProviderHints
from nri_cpumgr.podmodel import Pod


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
