"""Typed errors of the Topology Manager (``PolicyOptionError`` lives beside the options it
reports, in ``nri_cpumgr.cm.topologymanager.options``)."""

from __future__ import annotations

#: Admission reason the kubelet reports for a topology refusal
#: (topologymanager.ErrorTopologyAffinity).
ERROR_TOPOLOGY_AFFINITY = "TopologyAffinityError"
#: the message of the kubelet's refusal of a pod with pod-level resources (the
#: PodLevelResourceManagers gate on) by its container scope (scope_container.go Admit,
#: PodLevelTopologyAffinityError, v1.37.2)
POD_LEVEL_CONTAINER_SCOPE_REFUSAL = ("Pod Scope pod with pod-level resources failed admission "
                                     "with a container-level topology manager")


class TopologyManagerConfigError(ValueError):
    """Invalid Topology Manager configuration: unknown policy or scope, too many NUMA nodes,
    missing NUMA distances (kubelet topology_manager.go NewManager)."""


class TopologyAffinityError(Exception):
    """A pod (or one of its containers) cannot be placed with the NUMA alignment the policy
    demands (kubelet topologymanager.TopologyAffinityError, admission reason
    ``"TopologyAffinityError"``)."""

    reason = ERROR_TOPOLOGY_AFFINITY

    def __init__(self, detail: str = "Resources cannot be allocated with Topology locality"):
        super().__init__(f"{ERROR_TOPOLOGY_AFFINITY}: {detail}")
        self.detail = detail
