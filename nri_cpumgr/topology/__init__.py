"""The machine model every manager works on: CPUs, cores, sockets, NUMA nodes, uncore caches.

Pure data, no I/O. :mod:`nri_cpumgr.sysfs` builds it from ``/sys``; tests build it from the
conformance corpus (``../shared/conformance/topologies/*.json``) with
:func:`CPUTopology.from_conformance`.
"""

from nri_cpumgr.topology.model import (
    CPUInfo,
    CPUTopology,
    Machine,
    NUMANodeInfo,
    TopologyError,
    check_topology_doc,
    check_unique_ids,
)

__all__ = ["CPUInfo", "CPUTopology", "Machine", "NUMANodeInfo", "TopologyError",
           "check_topology_doc", "check_unique_ids"]
