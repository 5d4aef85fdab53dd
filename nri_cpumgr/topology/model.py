"""CPU topology and machine model (kubelet ``cm/cpumanager/topology`` semantics).

The header counts (``num_cpus``, ``num_cores``, ...) are kept apart from the per-CPU table
because the kubelet derives its ratios from them (``CPUsPerCore = NumCPUs / NumCores``) and
some of its test fixtures declare counts that differ from the table; we must reproduce the
kubelet's answers on those too. A topology discovered from sysfs is always consistent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.frozen import slot_init


class TopologyError(ValueError):
    """A topology document that cannot describe a machine (one CPU or NUMA node listed in
    two places). ``str()`` is one line naming the id and both places."""


def check_unique_ids(rows: Iterable[Any], key: str, what: str, where: str) -> None:
    """Raises :class:`TopologyError` when two of ``rows`` (mappings, the list at ``where``
    of a document) have one ``key``: ``"CPU 3 is given twice: cpus[1] (socket 0, core 1,
    NUMA node 0) and cpus[4] (...)"``. A machine has one of each: a table keyed by the id
    would keep the last row and drop the other silently. Rows of another shape are left to
    the reader's own errors."""
    first: dict[Any, int] = {}
    rows = list(rows)
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping) or key not in r:
            continue
        try:
            ident = int(r[key])
        except (TypeError, ValueError):
            continue
        j = first.setdefault(ident, i)
        if j != i:
            raise TopologyError(f"{what} {ident} is given twice: {where}[{j}]"
                                f"{_row_place(rows[j])} and {where}[{i}]{_row_place(r)}")


_DECLARED = ("NumCPUs", "NumSockets", "NumCores", "NumNUMANodes", "NumUncoreCache")


def check_topology_doc(doc: Any) -> None:
    """Raises :class:`TopologyError` (one line naming the row and the key: ``cpus[2].numa:
    expected a whole number >= 0, got -1``) when ``doc`` is not the shape ``nri-cpumgr
    topology --json`` prints: ``declared`` counts, a non-empty ``cpus`` list of rows with
    ``cpu``, ``core``, ``socket``, ``numa`` (and optional ``uncore``, ``die``) ids, and
    optional ``numa_nodes`` rows (``id``, ``memory_bytes``, ``hugepages``, ``distances``).
    Ids are JSON whole numbers >= 0, as the kernel's are."""
    if not isinstance(doc, Mapping):
        raise TopologyError(f"expected a JSON object, got {_json_kind(doc)}")
    declared = doc.get("declared")
    if not isinstance(declared, Mapping):
        raise TopologyError(_wrong("declared", declared, "an object of counts"))
    for key in _DECLARED:
        _whole("declared", key, declared)
    cpus = doc.get("cpus")
    if not isinstance(cpus, list):
        raise TopologyError(_wrong("cpus", cpus, "a list of CPU rows"))
    if not cpus:
        raise TopologyError("cpus: empty (a machine has at least one CPU)")
    for i, row in enumerate(cpus):
        where = f"cpus[{i}]"
        if not isinstance(row, Mapping):
            raise TopologyError(_wrong(where, row, "an object"))
        for key in ("cpu", "core", "socket", "numa"):
            _whole(where, key, row)
        for key in ("uncore", "die"):
            if key in row:
                _whole(where, key, row)
    nodes = doc.get("numa_nodes", [])
    if not isinstance(nodes, list):
        raise TopologyError(_wrong("numa_nodes", nodes, "a list of NUMA node rows"))
    for i, row in enumerate(nodes):
        where = f"numa_nodes[{i}]"
        if not isinstance(row, Mapping):
            raise TopologyError(_wrong(where, row, "an object"))
        _whole(where, "id", row)
        if "memory_bytes" in row:
            _whole(where, "memory_bytes", row)
        for key in ("hugepages", "distances"):
            table = row.get(key) or {}
            if not isinstance(table, Mapping):
                raise TopologyError(_wrong(f"{where}.{key}", table, "an object"))
            for k in table:
                if not (isinstance(k, str) and k.isascii() and k.isdigit()):
                    raise TopologyError(f"{where}.{key}: key {k!r}: expected a whole number")
                _whole(f"{where}.{key}", k, table)


def _whole(where: str, key: str, row: Mapping[str, Any]) -> None:
    if key not in row:
        raise TopologyError(f"{where}: {key} is missing")
    v = row[key]
    if type(v) is not int or v < 0:
        raise TopologyError(_wrong(f"{where}.{key}", v, "a whole number >= 0"))


def _wrong(where: str, v: Any, want: str) -> str:
    shown = f" {v!r}" if isinstance(v, int | float | str) and not isinstance(v, bool) else ""
    return f"{where}: expected {want}, got {_json_kind(v)}{shown}"


def _json_kind(v: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


def _row_place(row: Mapping[str, Any]) -> str:
    """`` (socket 0, core 1, NUMA node 0)`` for a CPU row (what of it is there), else ``""``."""
    names = (("socket", "socket"), ("core", "core"), ("numa", "NUMA node"))
    parts = [f"{label} {row[k]}" for k, label in names if k in row]
    return f" ({', '.join(parts)})" if parts else ""


@slot_init
@dataclass(frozen=True, slots=True, init=False)  # (its __init__: slot_init's)
class CPUInfo:
    """Where one logical CPU sits.

    ``core`` is unique across the machine (sysfs ``core_id`` is only unique within a package,
    discovery makes it unique); ``uncore`` is the L3 (last-level) cache id; ``die`` the die
    within the package (0 where sysfs has none).
    """

    numa: int
    socket: int
    core: int
    uncore: int = 0
    die: int = 0


@dataclass(frozen=True, slots=True)
class NUMANodeInfo:
    """One NUMA node's memory: ``memory_bytes`` total (bytes), ``hugepages`` maps a page size
    in bytes to the number of pages, ``distances`` maps node id to the SLIT distance (10 =
    local)."""

    id: int
    memory_bytes: int = 0
    hugepages: Mapping[int, int] = field(default_factory=dict)
    distances: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CPUTopology:
    """CPU topology: header counts plus the per-CPU table ``details`` (CPU id -> CPUInfo).

    Mirrors the kubelet's ``topology.CPUTopology`` (NumCPUs, NumCores, NumSockets,
    NumNUMANodes, NumUncoreCache, CPUDetails).
    """

    num_cpus: int
    num_cores: int
    num_sockets: int
    num_numa_nodes: int
    num_uncore_caches: int
    details: Mapping[int, CPUInfo]

    # ---- ratios as the kubelet computes them (integer division, 0 when undefined) ----
    def cpus_per_core(self) -> int:
        """Logical CPUs per physical core (SMT threads): NumCPUs / NumCores."""
        return self.num_cpus // self.num_cores if self.num_cores else 0

    def cpus_per_socket(self) -> int:
        """NumCPUs / NumSockets (0 when NumSockets is 0)."""
        return self.num_cpus // self.num_sockets if self.num_sockets else 0

    def cpus_per_uncore(self) -> int:
        """NumCPUs / NumUncoreCache (0 when NumUncoreCache is 0)."""
        return self.num_cpus // self.num_uncore_caches if self.num_uncore_caches else 0

    # ---- simple views of the table ----
    def cpus(self) -> CPUSet:
        """All CPUs in the table."""
        return CPUSet(self.details)

    def numa_nodes(self) -> CPUSet:
        return CPUSet(i.numa for i in self.details.values())

    def sockets(self) -> CPUSet:
        return CPUSet(i.socket for i in self.details.values())

    def cores(self) -> CPUSet:
        return CPUSet(i.core for i in self.details.values())

    def uncore_caches(self) -> CPUSet:
        return CPUSet(i.uncore for i in self.details.values())

    def cpus_in_numa_nodes(self, nodes: Iterable[int]) -> CPUSet:
        ns = set(nodes)
        return CPUSet(c for c, i in self.details.items() if i.numa in ns)

    def cpus_in_sockets(self, sockets: Iterable[int]) -> CPUSet:
        ss = set(sockets)
        return CPUSet(c for c, i in self.details.items() if i.socket in ss)

    def cpus_in_cores(self, cores: Iterable[int]) -> CPUSet:
        cs = set(cores)
        return CPUSet(c for c, i in self.details.items() if i.core in cs)

    def siblings(self, cpu: int) -> CPUSet:
        """The SMT siblings of ``cpu`` (itself included)."""
        core = self.details[cpu].core
        return CPUSet(c for c, i in self.details.items() if i.core == core)

    # ---- conformance corpus format (../shared/conformance/topologies/*.json) ----
    @classmethod
    def from_conformance(cls, doc: Mapping[str, Any]) -> CPUTopology:
        """Build from the corpus format: ``declared`` header counts plus ``cpus`` rows
        ``{"cpu", "core", "socket", "numa", "uncore"}`` (optional ``"die"``). Raises
        :class:`TopologyError` for a CPU id in two rows, ValueError (KeyError, TypeError)
        for another shape."""
        d = doc["declared"]
        check_unique_ids(doc["cpus"], "cpu", "CPU", "cpus")
        details = {
            int(r["cpu"]): CPUInfo(
                numa=int(r["numa"]),
                socket=int(r["socket"]),
                core=int(r["core"]),
                uncore=int(r.get("uncore", 0)),
                die=int(r.get("die", 0)),
            )
            for r in doc["cpus"]
        }
        return cls(
            num_cpus=int(d["NumCPUs"]),
            num_cores=int(d["NumCores"]),
            num_sockets=int(d["NumSockets"]),
            num_numa_nodes=int(d["NumNUMANodes"]),
            num_uncore_caches=int(d["NumUncoreCache"]),
            details=details,
        )

    def to_conformance(self, name: str) -> dict[str, Any]:
        """The corpus format (what ``nri-cpumgr topology --json`` prints)."""
        return {
            "name": name,
            "declared": {
                "NumCPUs": self.num_cpus,
                "NumSockets": self.num_sockets,
                "NumCores": self.num_cores,
                "NumNUMANodes": self.num_numa_nodes,
                "NumUncoreCache": self.num_uncore_caches,
            },
            "declared_fields_set": [
                "NumCPUs",
                "NumSockets",
                "NumCores",
                "NumNUMANodes",
                "NumUncoreCache",
            ],
            "cpus": [
                {
                    "cpu": c,
                    "core": i.core,
                    "socket": i.socket,
                    "numa": i.numa,
                    "uncore": i.uncore,
                    "die": i.die,
                }
                for c, i in sorted(self.details.items())
            ],
        }

    @classmethod
    def from_details(cls, details: Mapping[int, CPUInfo]) -> CPUTopology:
        """A consistent topology whose header counts are derived from the table."""
        vals = list(details.values())
        return cls(
            num_cpus=len(details),
            num_cores=len({v.core for v in vals}),
            num_sockets=len({v.socket for v in vals}),
            num_numa_nodes=len({v.numa for v in vals}),
            num_uncore_caches=len({v.uncore for v in vals}),
            details=dict(details),
        )


@dataclass(frozen=True)
class Machine:
    """Everything discovery knows: the CPU topology and each NUMA node's memory/distances."""

    topology: CPUTopology
    numa_nodes: Mapping[int, NUMANodeInfo] = field(default_factory=dict)
