"""The Memory Manager: a policy, its state, and the container bookkeeping around them
(kubelet pkg/kubelet/cm/memorymanager/memory_manager.go).

Pure: no I/O. The runtime glue persists :attr:`MemoryManager.state` (``to_dict``) itself and
turns a container's blocks into ``cpuset.mems`` with :func:`mems_for`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from nri_cpumgr.cm.memorymanager.policy import Hints, Policy
from nri_cpumgr.cm.memorymanager.state import Block, MemoryState
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import ContainerSpec, Pod

ActivePods = Callable[[], Iterable[Pod]]
"""Returns the pods currently active on the node (used to drop stale assignments)."""


def mems_for(blocks: Iterable[Block] | None) -> CPUSet:
    """The NUMA node ids of a container's memory blocks, i.e. its ``cpuset.mems``
    (GetMemoryNUMANodes). Empty for no blocks (the container is not pinned: leave
    ``cpuset.mems`` alone)."""
    return CPUSet(n for b in (blocks or ()) for n in b.numa_affinity)


class MemoryManager:
    """Memory Manager with policy ``policy`` on ``state``.

    ``active_pods`` lists the node's active pods; before allocating and before giving hints
    the manager releases the assignments of containers that are not among them
    (removeStaleState). Without it stale state is never removed (the kubelet's "sources not
    ready" case).
    """

    def __init__(
        self,
        policy: Policy,
        state: MemoryState | None = None,
        active_pods: ActivePods | None = None,
    ) -> None:
        self.policy = policy
        self.state = state if state is not None else MemoryState()
        self.active_pods = active_pods
        self.container_map: dict[str, tuple[str, str]] = {}
        self.allocatable_memory: list[Block] = []

    def start(
        self,
        state: MemoryState | None = None,
        initial_containers: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        """Adopt a restored ``state`` (default: the current one) and the known containers
        (container id -> (pod uid, container name)), then start the policy. Raises the
        policy's InvalidStateError when the state does not fit the machine."""
        if state is not None:
            self.state = state
        if initial_containers is not None:
            self.container_map = dict(initial_containers)
        self.policy.start(self.state)
        self.allocatable_memory = self.policy.get_allocatable_memory(self.state)

    def allocate(
        self, pod: Pod, container: ContainerSpec, hint: TopologyHint | None = None
    ) -> None:
        """Drop stale state, then let the policy assign memory to ``container`` with the
        Topology Manager's ``hint`` (Allocate). Raises the policy's AllocationError."""
        self.remove_stale_state()
        self.policy.allocate(self.state, pod, container, hint)

    def add_container(self, pod: Pod, container: ContainerSpec, container_id: str) -> None:
        """Record the container id; release the regular init containers that ran before
        ``container`` (they have completed, their memory is free for other pods)
        (AddContainer). Restartable init containers keep their memory."""
        self.container_map[container_id] = (pod.uid, container.name)
        for init in pod.init_containers:
            if init.name == container.name:
                break
            if init.restartable:
                continue
            self._remove_by_ref(pod.uid, init.name)

    def remove_container(self, container_id: str) -> None:
        """Release the memory of the container with this id (RemoveContainer); unknown ids
        are ignored."""
        ref = self.container_map.get(container_id)
        if ref is None:
            return
        self._remove_by_ref(*ref)

    def get_topology_hints(self, pod: Pod, container: ContainerSpec) -> Hints | None:
        """Drop stale state, then the policy's hints for ``container``."""
        self.remove_stale_state()
        return self.policy.get_topology_hints(self.state, pod, container)

    def get_pod_topology_hints(self, pod: Pod) -> Hints | None:
        """Drop stale state, then the policy's hints for the whole pod."""
        self.remove_stale_state()
        return self.policy.get_pod_topology_hints(self.state, pod)

    def get_memory(self, pod_uid: str, container_name: str) -> list[Block] | None:
        """The container's blocks, ``None`` if it has none."""
        return self.state.get_memory_blocks(pod_uid, container_name)

    def get_memory_numa_nodes(self, pod: Pod, container: ContainerSpec) -> CPUSet | None:
        """The container's NUMA nodes, ``None`` when it has no assignment."""
        mems = mems_for(self.state.get_memory_blocks(pod.uid, container.name))
        return mems if mems else None

    def get_allocatable_memory(self) -> list[Block]:
        """Allocatable memory per NUMA node and type, computed at :meth:`start`."""
        return list(self.allocatable_memory)

    def remove_stale_state(self) -> None:
        """Release every assignment whose (pod, container) is not among the active pods'
        init and app containers (removeStaleState)."""
        if self.active_pods is None:
            return
        active: dict[str, set[str]] = {}
        for pod in self.active_pods():
            active[pod.uid] = {c.name for c in pod.init_containers + pod.containers}
        for pod_uid, containers in self.state.get_memory_assignments().items():
            for name in containers:
                if name not in active.get(pod_uid, set()):
                    self._remove_by_ref(pod_uid, name)

    def _remove_by_ref(self, pod_uid: str, container_name: str) -> None:
        self.policy.remove_container(self.state, pod_uid, container_name)
        for cid, ref in list(self.container_map.items()):
            if ref == (pod_uid, container_name):
                del self.container_map[cid]
