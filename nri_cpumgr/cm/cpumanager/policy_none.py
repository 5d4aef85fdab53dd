"""The kubelet's ``none`` CPU manager policy (pkg/kubelet/cm/cpumanager/policy_none.go).

No exclusive CPUs: every container runs on all CPUs, no topology hints are given.
"""

from __future__ import annotations

from nri_cpumgr.cm.cpumanager.state import CPUManagerState
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import Pod
from nri_cpumgr.topology import CPUTopology

POLICY_NONE = "none"


class NonePolicy:
    """The ``none`` policy: containers share every CPU of ``topology``."""

    name = POLICY_NONE

    def __init__(self, topology: CPUTopology) -> None:
        self.topology = topology

    def start(self, state: CPUManagerState) -> None:
        """Put every CPU in the shared pool when the state is empty; nothing else."""
        if not state.default_set:
            state.default_set = self.topology.cpus()

    def allocate(
        self,
        state: CPUManagerState,
        pod: Pod,
        container_name: str,
        hint: TopologyHint | None = None,
    ) -> CPUSet | None:
        """Never assigns exclusive CPUs: always None."""
        return None

    def remove_container(self, state: CPUManagerState, pod_uid: str, container_name: str) -> None:
        """Nothing to release."""
        return None

    def get_topology_hints(
        self, state: CPUManagerState, pod: Pod, container_name: str
    ) -> list[TopologyHint] | None:
        """No preference: None."""
        return None

    def get_pod_topology_hints(self, state: CPUManagerState, pod: Pod) -> list[TopologyHint] | None:
        """No preference: None."""
        return None

    def allocatable_cpus(self) -> CPUSet:
        """Nothing is allocatable exclusively (kubelet GetAllocatableCPUs: empty)."""
        return CPUSet()

    def shared_pool(self, state: CPUManagerState) -> CPUSet:
        """All CPUs of the machine."""
        return self.topology.cpus()
