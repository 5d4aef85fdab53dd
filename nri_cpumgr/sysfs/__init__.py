"""Reading the machine from sysfs: :func:`discover` builds the
:class:`~nri_cpumgr.topology.Machine` (kubelet/cadvisor topology semantics) and
:func:`device_numa_node` finds the NUMA node of a device node. Both take a ``root`` so tests
can point them at fixture trees (``tests/fixtures/sysfs/<name>``)."""

from nri_cpumgr.sysfs.devices import device_numa_node
from nri_cpumgr.sysfs.discovery import (
    SysfsError,
    SysfsInconsistentError,
    SysfsMissingError,
    SysfsParseError,
    discover,
)

__all__ = [
    "SysfsError",
    "SysfsInconsistentError",
    "SysfsMissingError",
    "SysfsParseError",
    "device_numa_node",
    "discover",
]
