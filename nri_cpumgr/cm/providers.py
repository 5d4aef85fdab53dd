"""Hint providers for the Topology Manager: the CPU manager, the Memory Manager and the
container's devices (kubelet: cpumanager, memorymanager and devicemanager each implement
topologymanager.HintProvider).

Each provider answers hints for one (pod, container) and, at ``allocate``, takes the
Topology Manager's chosen affinity for it. Pure: they work on the managers' in-memory
states; the device NUMA nodes are looked up in sysfs by the runtime glue beforehand.
The device provider lives in :mod:`nri_cpumgr.cm.devicemanager` (re-exported here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nri_cpumgr.cm.cpumanager import CPUManagerState, NonePolicy, StaticPolicy
from nri_cpumgr.cm.devicemanager import DeviceProvider, device_hints
from nri_cpumgr.cm.topologymanager import TopologyHint, TopologyManager
from nri_cpumgr.cm.topologymanager.merge import ProviderHints
from nri_cpumgr.cm.topologymanager.policy import POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import Pod

if TYPE_CHECKING:  # (the Memory Manager's package is imported with a Memory Manager only)
    from nri_cpumgr.cm.memorymanager.manager import MemoryManager


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
        uid = pod.uid
        hint = self.tm.get_affinity(uid, container_name)  # (as _affinity, one call less)
        self.allocated[(uid, container_name)] = self.policy.allocate(
            self.state, pod, container_name, hint if hint.numa is not None else None
        )


class MemoryProvider:
    """Resources ``memory`` and ``hugepages-*``: the Memory Manager (Static policy).

    Where we differ from the kubelet (kubernetes #128708, #138495): when no NUMA set can hold
    a Guaranteed container's memory now, the kubelet's Memory Manager answers an empty hint
    map, which the Topology Manager reads as "no preference"; restricted and
    single-numa-node then admit the pod and the Memory Manager fails afterwards in Allocate
    (``ExtendHintError``: failed to find NUMA nodes to extend), after the CPU manager has
    already allocated. Here, under those two policies, the provider answers an empty hint
    list for every requested memory type instead ("cannot be satisfied"), so the pod is
    refused at admission with a TopologyAffinityError before any manager allocates.
    best-effort and none keep the kubelet's answer (they admit whatever the hints say).

    That refusal is for the container-by-container path (NRI alone), where admitting a
    pod the Memory Manager fails later would leave it half admitted. A pod admitted whole
    (its spec known) is admitted or refused as one, so nothing is half admitted: there the
    container manager sets :attr:`refuse_unsatisfiable` off and the kubelet's answer
    stands (no preference, then the Allocate failure), with its reason and text;
    :attr:`unsatisfiable` then names the containers (or the pod, ``""``) for which no NUMA
    set could hold the memory, for the plugin's own log and explain output.
    """

    #: Topology Manager policies that refuse a pod whose best hint is not preferred.
    STRICT_POLICIES = frozenset({POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE})

    def __init__(self, manager: MemoryManager, tm: TopologyManager) -> None:
        self.manager = manager
        self.tm = tm
        #: refuse at admission a memory request no NUMA set holds (the plugin's rule, NRI
        #: alone); False: the kubelet's answer (no preference), for a pod admitted whole
        self.refuse_unsatisfiable = True
        #: containers (``""``: the whole pod, pod scope) whose memory no NUMA set held at
        #: the last hints asked under a strict policy; the caller clears it
        self.unsatisfiable: list[str] = []

    def _unsatisfiable(self, hints: ProviderHints, requested: dict[str, int],
                       who: str) -> ProviderHints:
        """``{type: []}`` for every requested type when the policy found no NUMA set at all
        and the Topology Manager's policy refuses unaligned pods (unless
        :attr:`refuse_unsatisfiable` is off: then noted in :attr:`unsatisfiable`); else
        ``hints``."""
        if hints or not requested or self.tm.policy_name not in self.STRICT_POLICIES:
            return hints
        if not self.refuse_unsatisfiable:
            self.unsatisfiable.append(who)
            return hints
        return {name: [] for name in requested}

    def get_topology_hints(self, pod: Pod, container_name: str) -> ProviderHints:
        c = pod.container(container_name)
        if c is None:
            return None
        hints = self.manager.get_topology_hints(pod, c)
        if hints is None:
            return None
        from nri_cpumgr.cm.memorymanager.policy_static import container_requested_resources

        return self._unsatisfiable(hints, container_requested_resources(c), c.name)

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        hints = self.manager.get_pod_topology_hints(pod)
        if hints is None:
            return None
        from nri_cpumgr.cm.memorymanager.policy_static import pod_requested_resources

        return self._unsatisfiable(hints, pod_requested_resources(pod), "")

    def allocate(self, pod: Pod, container_name: str) -> None:
        c = pod.container(container_name)
        if c is not None:
            self.manager.allocate(pod, c, _affinity(self.tm, pod, container_name))


__all__ = ["CPUProvider", "DeviceProvider", "MemoryProvider", "device_hints"]
