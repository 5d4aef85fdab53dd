"""Typed errors of the Memory Manager.

Every error renders (``str(err)``) exactly the message the kubelet returns for the same
condition (kubelet pkg/kubelet/cm/memorymanager: policy_static.go, memory_manager.go), and
keeps the facts of the message as attributes so callers need not parse text.
"""

from __future__ import annotations


class MemoryManagerError(Exception):
    """Base class of every Memory Manager error."""


# --- static policy construction and state validation (policy_static.go) -------------------


class NoSystemReservedMemoryError(MemoryManagerError):
    """The static policy got no reserved ``memory`` on any NUMA node (NewPolicyStatic): the
    sum over nodes of reserved ``memory`` is zero."""

    def __init__(self) -> None:
        super().__init__("[memorymanager] you should specify the system reserved memory")


class InvalidStateError(MemoryManagerError):
    """A restored state does not fit the machine (staticPolicy.validateState). The kubelet
    asks the operator to drain the node and remove the state file."""


class EmptyMachineStateError(InvalidStateError):
    """The restored machine state is empty while container assignments exist."""

    def __init__(self) -> None:
        super().__init__(
            "[memorymanager] machine state can not be empty when it has memory assignments"
        )


class UnknownAssignmentNUMANodeError(InvalidStateError):
    """A restored block of container ``container`` of pod ``pod_uid`` names a NUMA node the
    machine does not have."""

    def __init__(self, pod_uid: str, container: str) -> None:
        self.pod_uid = pod_uid
        self.container = container
        super().__init__(
            f"[memorymanager] (pod: {pod_uid}, container: {container}) the memory assignment "
            "uses the NUMA that does not exist"
        )


class UnknownAssignmentResourceError(InvalidStateError):
    """A restored block of container ``container`` of pod ``pod_uid`` has a memory type
    (``memory`` / ``hugepages-<size>``) the machine does not have."""

    def __init__(self, pod_uid: str, container: str) -> None:
        self.pod_uid = pod_uid
        self.container = container
        super().__init__(
            f"[memorymanager] (pod: {pod_uid}, container: {container}) the memory assignment "
            "uses memory resource that does not exist"
        )


class MachineStateMismatchError(InvalidStateError):
    """The restored machine state differs from the one rebuilt from the machine, the
    reserved memory and the restored assignments (totals, system reserved, allocatable,
    assignment counts, groups, or free/reserved sums over a group)."""

    def __init__(self) -> None:
        super().__init__(
            "[memorymanager] the expected machine state is different from the real one"
        )


# --- allocation (policy_static.go, Allocate) ----------------------------------------------


class AllocationError(MemoryManagerError):
    """The static policy cannot place a container's memory; the kubelet rejects the pod
    admission with this message."""


class DefaultHintError(AllocationError):
    """The topology manager gave no NUMA affinity and no NUMA node set has enough free
    memory for the request (getDefaultHint)."""

    def __init__(self) -> None:
        super().__init__(
            "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough "
            "memory is available"
        )


class DefaultHintNotPreferredError(AllocationError):
    """The topology manager's hint (without affinity) is preferred, the calculated default
    hint is not."""

    def __init__(self) -> None:
        super().__init__("[memorymanager] failed to find the default preferred hint")


class ExtendHintError(AllocationError):
    """The topology manager's affinity cannot hold the request and no wider node set that
    contains it can (extendTopologyManagerHint)."""

    def __init__(self) -> None:
        super().__init__(
            "[memorymanager] failed to find NUMA nodes to extend the current topology hint"
        )


class ExtendedHintNotPreferredError(AllocationError):
    """The topology manager's hint is preferred, the extended hint is not."""

    def __init__(self) -> None:
        super().__init__("[memorymanager] failed to find the extended preferred hint")


class NUMAAllocationViolationError(AllocationError):
    """The chosen affinity would put a NUMA node into a single-node and a multi-node group,
    or into two different groups (isAffinityViolatingNUMAAllocations)."""

    def __init__(self) -> None:
        super().__init__("[memorymanager] preferred hint violates NUMA node allocation")


# --- configuration (memory_manager.go) ----------------------------------------------------


class ConfigError(MemoryManagerError):
    """Invalid Memory Manager configuration (policy name or reservedMemory)."""


class UnknownPolicyError(ConfigError):
    """``--memory-manager-policy`` is neither ``None`` nor ``Static``."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f'unknown policy: "{name}"')


class ReservedMemoryUnknownNUMANodeError(ConfigError):
    """A reservedMemory entry names a NUMA node the machine does not have."""

    def __init__(self, numa_node: int) -> None:
        self.numa_node = numa_node
        super().__init__(
            f"the reserved memory configuration references a NUMA node {numa_node} that does "
            "not exist on this machine"
        )


class ReservedMemoryMismatchError(ConfigError):
    """For one memory type, the sum of reservedMemory over NUMA nodes differs from the Node
    Allocatable reservation (kube-reserved + system-reserved + eviction threshold).

    ``total`` and ``node_allocatable`` are the Kubernetes quantity strings the kubelet
    prints (``"3Gi"``, ``"77"``); ``total_bytes`` / ``node_allocatable_bytes`` their values.
    """

    def __init__(
        self,
        resource: str,
        total: str,
        node_allocatable: str,
        total_bytes: int,
        node_allocatable_bytes: int,
    ) -> None:
        self.resource = resource
        self.total = total
        self.node_allocatable = node_allocatable
        self.total_bytes = total_bytes
        self.node_allocatable_bytes = node_allocatable_bytes
        super().__init__(
            f'the total amount "{total}" of type "{resource}" is not equal to the value '
            f'"{node_allocatable}" determined by Node Allocatable feature'
        )
