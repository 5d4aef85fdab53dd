"""Memory Manager configuration: the kubelet's ``reservedMemory`` and policy selection
(kubelet pkg/kubelet/cm/memorymanager/memory_manager.go: NewManager, validateReservedMemory,
convertReserved, getSystemReservedMemory).

``reservedMemory`` lists, per NUMA node, the bytes of each memory type kept for the system.
Per memory type its sum over nodes must equal what Node Allocatable reserves for that type
(kube-reserved + system-reserved + the hard eviction threshold for ``memory``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nri_cpumgr.cm.memorymanager.errors import (
    ReservedMemoryMismatchError,
    ReservedMemoryUnknownNUMANodeError,
    UnknownPolicyError,
)
from nri_cpumgr.cm.memorymanager.manager import ActivePods, MemoryManager
from nri_cpumgr.cm.memorymanager.policy import Policy
from nri_cpumgr.cm.memorymanager.policy_none import POLICY_NONE, NonePolicy
from nri_cpumgr.cm.memorymanager.policy_static import (
    POLICY_STATIC,
    MachineInput,
    StaticPolicy,
    SystemReservedMemory,
    numa_nodes_of,
)
from nri_cpumgr.cm.memorymanager.quantity import Quantity, is_memory_resource
from nri_cpumgr.cm.memorymanager.state import MemoryState

QuantityLike = Quantity | str | int
"""A quantity string (``"1Gi"``), a :class:`Quantity`, or plain bytes."""


@dataclass(frozen=True)
class MemoryReservation:
    """One ``reservedMemory`` entry of the kubelet configuration: ``limits`` maps a memory
    type (``memory``, ``hugepages-<size>``) to the amount reserved on NUMA node
    ``numa_node`` (kubeletconfig.MemoryReservation)."""

    numa_node: int
    limits: Mapping[str, QuantityLike] = field(default_factory=dict)


def _reserved_totals(
    machine: MachineInput, reserved_memory: Iterable[MemoryReservation]
) -> dict[str, Quantity]:
    """Sum of each memory type over all reservations (getTotalMemoryTypeReserved). Raises
    :class:`ReservedMemoryUnknownNUMANodeError` for a NUMA node the machine lacks."""
    known = {n.id for n in numa_nodes_of(machine)}
    totals: dict[str, Quantity] = {}
    for r in reserved_memory:
        if r.numa_node not in known:
            raise ReservedMemoryUnknownNUMANodeError(r.numa_node)
        for name, q in r.limits.items():
            q = Quantity.of(q)
            totals[name] = q + totals[name] if name in totals else q
    return totals


def validate_reserved_memory(
    machine: MachineInput,
    node_allocatable_reservation: Mapping[str, QuantityLike],
    reserved_memory: Iterable[MemoryReservation],
) -> None:
    """Check ``reserved_memory`` against the Node Allocatable reservation
    (validateReservedMemory): every NUMA node must exist, and for every memory type named
    by either side (``memory`` and ``hugepages-*`` of the reservation; every type of
    ``reserved_memory``) the per-NUMA sum must equal the reservation (missing = 0).

    Raises :class:`ReservedMemoryUnknownNUMANodeError` or
    :class:`ReservedMemoryMismatchError` (types checked in name order).
    """
    totals = _reserved_totals(machine, reserved_memory)
    names = set(totals)
    names.update(n for n in node_allocatable_reservation if is_memory_resource(n))
    for name in sorted(names):
        allocatable = Quantity(0)
        if name in node_allocatable_reservation:
            allocatable = allocatable + Quantity.of(node_allocatable_reservation[name])
        reserved = Quantity(0)
        if name in totals:
            reserved = reserved + totals[name]
        if allocatable.value != reserved.value:
            raise ReservedMemoryMismatchError(
                name, str(reserved), str(allocatable), reserved.value, allocatable.value
            )


def convert_reserved(
    machine: MachineInput, reserved_memory: Iterable[MemoryReservation]
) -> SystemReservedMemory:
    """``reserved_memory`` as bytes per NUMA node and memory type, with an (empty) entry for
    every NUMA node of the machine (convertReserved)."""
    out: SystemReservedMemory = {n.id: {} for n in numa_nodes_of(machine)}
    for r in reserved_memory:
        node = out.setdefault(r.numa_node, {})
        for name, q in r.limits.items():
            node[name] = Quantity.of(q).value
    return out


def get_system_reserved_memory(
    machine: MachineInput,
    node_allocatable_reservation: Mapping[str, QuantityLike],
    reserved_memory: Iterable[MemoryReservation],
) -> SystemReservedMemory:
    """:func:`validate_reserved_memory` then :func:`convert_reserved`
    (getSystemReservedMemory); raises what the validation raises."""
    reserved_memory = list(reserved_memory)
    validate_reserved_memory(machine, node_allocatable_reservation, reserved_memory)
    return convert_reserved(machine, reserved_memory)


def new_policy(
    policy_name: str,
    machine: MachineInput,
    node_allocatable_reservation: Mapping[str, QuantityLike],
    reserved_memory: Iterable[MemoryReservation],
) -> Policy:
    """The policy named ``policy_name``: ``"None"`` or ``"Static"`` (validated reserved
    memory, NewPolicyStatic). Raises :class:`UnknownPolicyError`, the validation errors, or
    NoSystemReservedMemoryError."""
    if policy_name == POLICY_NONE:
        return NonePolicy()
    if policy_name == POLICY_STATIC:
        reserved = get_system_reserved_memory(
            machine, node_allocatable_reservation, reserved_memory
        )
        return StaticPolicy(machine, reserved)
    raise UnknownPolicyError(policy_name)


def new_manager(
    policy_name: str,
    machine: MachineInput,
    node_allocatable_reservation: Mapping[str, QuantityLike],
    reserved_memory: Iterable[MemoryReservation],
    *,
    state: MemoryState | None = None,
    active_pods: ActivePods | None = None,
) -> MemoryManager:
    """A Memory Manager with the named policy (NewManager); see :func:`new_policy` for the
    errors. Call :meth:`MemoryManager.start` before use."""
    policy = new_policy(policy_name, machine, node_allocatable_reservation, reserved_memory)
    return MemoryManager(policy, state=state, active_pods=active_pods)
