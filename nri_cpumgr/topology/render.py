"""Human and JSON views of a :class:`~nri_cpumgr.topology.Machine` (``nri-cpumgr topology``).

* :func:`format_table`: a text table, one row per CPU, then one row per NUMA node.
* :func:`to_json`: the conformance corpus format (``conformance/topologies/*.json``, see
  :meth:`CPUTopology.to_conformance`) plus a ``"numa_nodes"`` list with memory, huge pages and
  distances, so that a discovered machine can be fed back to the tests with
  :meth:`CPUTopology.from_conformance` (which ignores the extra key).

Pure functions: no I/O.
"""

from __future__ import annotations

from typing import Any

from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.topology.model import Machine, NUMANodeInfo

_GIB = 1024**3
_UNITS = (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024))


def page_size_name(size_bytes: int) -> str:
    """A huge page size as the kubelet names its resource suffix: 2097152 -> ``"2Mi"``,
    1073741824 -> ``"1Gi"`` (largest binary unit that divides it; plain bytes otherwise)."""
    for suffix, unit in _UNITS:
        if size_bytes >= unit and size_bytes % unit == 0:
            return f"{size_bytes // unit}{suffix}"
    return str(size_bytes)


def _hugepages_text(info: NUMANodeInfo) -> str:
    if not info.hugepages:
        return "-"
    return " ".join(
        f"{page_size_name(size)}:{count}" for size, count in sorted(info.hugepages.items())
    )


def _distances_text(info: NUMANodeInfo) -> str:
    if not info.distances:
        return "-"
    return " ".join(f"{node}:{d}" for node, d in sorted(info.distances.items()))


def _table(header: list[str], rows: list[list[str]], left: set[int]) -> list[str]:
    """Columns padded to their widest cell; columns in ``left`` left-aligned, others right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        out = [c.ljust(widths[i]) if i in left else c.rjust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(out).rstrip()

    return [line(header)] + [line(r) for r in rows]


def format_table(machine: Machine) -> str:
    """A readable description of ``machine``, ending with a newline.

    First a summary line with the header counts (``NumCPUs`` etc. as the kubelet declares
    them) and threads per core, then one row per CPU: ``CPU``, ``SOCKET``, ``DIE``, ``CORE``
    (machine-unique core id), ``NUMA``, ``L3`` (uncore cache id) and ``SIBLINGS`` (the CPUs of
    the same core, cpulist). Then one row per NUMA node: its CPUs (cpulist), memory in GiB
    (two decimals), huge pages (``<size>:<pages>`` per page size) and distances
    (``<node>:<distance>``).
    """
    topo = machine.topology
    out = [
        f"CPUs: {topo.num_cpus}  cores: {topo.num_cores}  sockets: {topo.num_sockets}  "
        f"NUMA nodes: {topo.num_numa_nodes}  L3 (uncore) caches: {topo.num_uncore_caches}  "
        f"threads per core: {topo.cpus_per_core()}",
        "",
    ]
    cpu_rows = [
        [
            str(cpu),
            str(i.socket),
            str(i.die),
            str(i.core),
            str(i.numa),
            str(i.uncore),
            str(topo.siblings(cpu)),
        ]
        for cpu, i in sorted(topo.details.items())
    ]
    out += _table(["CPU", "SOCKET", "DIE", "CORE", "NUMA", "L3", "SIBLINGS"], cpu_rows, {6})
    out.append("")

    nodes = dict(machine.numa_nodes)
    for numa in topo.numa_nodes():
        nodes.setdefault(numa, NUMANodeInfo(id=numa))
    node_rows = [
        [
            str(node),
            str(topo.cpus_in_numa_nodes([node])) or "-",
            f"{info.memory_bytes / _GIB:.2f}",
            _hugepages_text(info),
            _distances_text(info),
        ]
        for node, info in sorted(nodes.items())
    ]
    out += _table(["NUMA", "CPUS", "MEMORY(GiB)", "HUGEPAGES", "DISTANCES"], node_rows, {1, 3, 4})
    return "\n".join(out) + "\n"


def numa_node_json(info: NUMANodeInfo, cpus: CPUSet) -> dict[str, Any]:
    """One entry of the ``"numa_nodes"`` list: ``{"id", "cpus" (cpulist), "memory_bytes",
    "hugepages": {"<page size in bytes>": pages}, "distances": {"<node id>": distance}}``
    (JSON object keys are strings)."""
    return {
        "id": info.id,
        "cpus": str(cpus),
        "memory_bytes": info.memory_bytes,
        "hugepages": {str(size): n for size, n in sorted(info.hugepages.items())},
        "distances": {str(node): d for node, d in sorted(info.distances.items())},
    }


def to_json(machine: Machine, name: str) -> dict[str, Any]:
    """``machine`` as a JSON-ready dict: :meth:`CPUTopology.to_conformance` (keys ``name``,
    ``declared``, ``declared_fields_set``, ``cpus``) plus ``"numa_nodes"``, a list sorted by
    node id (see :func:`numa_node_json`), covering every node in ``machine.numa_nodes`` and
    every NUMA id used by a CPU."""
    topo = machine.topology
    doc = topo.to_conformance(name)
    nodes = dict(machine.numa_nodes)
    for numa in topo.numa_nodes():
        nodes.setdefault(numa, NUMANodeInfo(id=numa))
    doc["numa_nodes"] = [
        numa_node_json(info, topo.cpus_in_numa_nodes([node]))
        for node, info in sorted(nodes.items())
    ]
    return doc
