"""The kubelet's Memory Manager (policies ``None`` and ``Static``), pure Python.

See :mod:`.policy_static` for the allocation rules, :mod:`.state` for the state model,
:mod:`.config` for reservedMemory validation and manager construction, and
:func:`.manager.mems_for` for turning an assignment into ``cpuset.mems``.
"""

from nri_cpumgr.cm.memorymanager.config import (
    MemoryReservation,
    convert_reserved,
    get_system_reserved_memory,
    new_manager,
    new_policy,
    validate_reserved_memory,
)
from nri_cpumgr.cm.memorymanager.errors import MemoryManagerError
from nri_cpumgr.cm.memorymanager.manager import MemoryManager, mems_for
from nri_cpumgr.cm.memorymanager.policy_none import NonePolicy
from nri_cpumgr.cm.memorymanager.policy_static import (
    StaticPolicy,
    container_requested_resources,
    pod_requested_resources,
)
from nri_cpumgr.cm.memorymanager.state import Block, MemoryState, MemoryTable, NUMANodeState

__all__ = [
    "Block",
    "MemoryManager",
    "MemoryManagerError",
    "MemoryReservation",
    "MemoryState",
    "MemoryTable",
    "NUMANodeState",
    "NonePolicy",
    "StaticPolicy",
    "container_requested_resources",
    "convert_reserved",
    "get_system_reserved_memory",
    "mems_for",
    "new_manager",
    "new_policy",
    "pod_requested_resources",
    "validate_reserved_memory",
]
