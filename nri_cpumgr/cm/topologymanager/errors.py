"""Typed errors of the Topology Manager."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nri_cpumgr.cm.topologymanager.options import PolicyOptions

#: Admission reason the kubelet reports for a topology refusal
#: (topologymanager.ErrorTopologyAffinity).
ERROR_TOPOLOGY_AFFINITY = "TopologyAffinityError"


class TopologyManagerConfigError(ValueError):
    """Invalid Topology Manager configuration: unknown policy or scope, too many NUMA nodes,
    missing NUMA distances (kubelet topology_manager.go NewManager)."""


class PolicyOptionError(TopologyManagerConfigError):
    """An invalid, unknown, unavailable or malformed Topology Manager policy option
    (kubelet policy_options.go CheckPolicyOptionAvailable / NewPolicyOptions).

    ``options`` holds the options as parsed before the failure (the kubelet returns them
    together with the error; only the defaults are guaranteed)."""

    def __init__(self, message: str, options: PolicyOptions | None = None) -> None:
        super().__init__(message)
        self.options = options


class TopologyAffinityError(Exception):
    """A pod (or one of its containers) cannot be placed with the NUMA alignment the policy
    demands (kubelet topologymanager.TopologyAffinityError, admission reason
    ``"TopologyAffinityError"``)."""

    reason = ERROR_TOPOLOGY_AFFINITY

    def __init__(self, detail: str = "Resources cannot be allocated with Topology locality"):
        super().__init__(f"{ERROR_TOPOLOGY_AFFINITY}: {detail}")
        self.detail = detail
