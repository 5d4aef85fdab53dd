"""Guest topologies described in data (``tests/vm/topologies/<name>.toml``) and their QEMU options.

A topology file gives, at top level, ``sockets``, ``dies`` (per socket), ``cores`` (per die),
``threads`` (per core), ``distances`` (the NUMA distance matrix, row = from node) and
``description``/``fast`` and optionally ``scenarios`` (the names to run there; default:
every scenario where the topology makes it matter); then one ``[[numa]]`` table per NUMA
node, in node order, with ``cpus`` (a Linux CPU list) and ``memory_mib``. See
docs/development/qemu-guests.md for an example.

QEMU numbers the vCPUs socket-major: ``cpu = ((socket * dies + die) * cores + core) * threads
+ thread`` (QEMU hw/core/machine-smp.c, x86 ``x86_topo_ids_from_idx``), and with
``-cpu max,vendor=GenuineIntel`` reports one L3 cache per die (``dies=1``: per socket; the
AMD default under TCG gives each CPU its own L3). :meth:`Topology.cpu` gives that layout so the
tests can derive what the kubelet's rules must pick, instead of hard-coding cpusets.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nri_cpumgr.cpuset import CPUSet

TOPOLOGY_DIR = Path(__file__).resolve().parent / "topologies"


class TopologyError(ValueError):
    """A topology file is malformed or inconsistent (message names the file and the field)."""


@dataclass(frozen=True)
class CPU:
    """Where one vCPU sits: ids as Linux reports them in the guest's sysfs."""

    id: int
    socket: int
    die: int  # global die index (socket * dies + die): the L3 group
    core: int  # global core index: the SMT sibling group
    thread: int
    numa: int


@dataclass(frozen=True)
class NumaNode:
    cpus: frozenset[int]
    memory_mib: int


@dataclass(frozen=True)
class Topology:
    """One guest machine. Counts are per parent (dies per socket, cores per die, ...)."""

    name: str
    description: str
    sockets: int
    dies: int
    cores: int
    threads: int
    numa: tuple[NumaNode, ...]
    distances: tuple[tuple[int, ...], ...]
    fast: bool = False
    scenarios: tuple[str, ...] | None = None  # None: every scenario where it matters

    @property
    def ncpus(self) -> int:
        return self.sockets * self.dies * self.cores * self.threads

    @property
    def memory_mib(self) -> int:
        return sum(n.memory_mib for n in self.numa)

    def cpu(self, i: int) -> CPU:
        """Layout of vCPU ``i`` (QEMU's socket-major numbering). Raises IndexError."""
        if not 0 <= i < self.ncpus:
            raise IndexError(f"cpu {i} not in 0-{self.ncpus - 1}")
        thread = i % self.threads
        core = i // self.threads
        die = core // self.cores
        socket = die // self.dies
        numa = next(n for n, node in enumerate(self.numa) if i in node.cpus)
        return CPU(i, socket, die, core, thread, numa)

    def groups(self, level: str) -> list[frozenset[int]]:
        """The CPU sets of every ``level`` ("socket", "die" (= L3 group), "core", "numa")."""
        out: dict[int, set[int]] = {}
        for i in range(self.ncpus):
            out.setdefault(getattr(self.cpu(i), level), set()).add(i)
        return [frozenset(out[k]) for k in sorted(out)]

    def qemu_args(self) -> list[str]:
        """QEMU 7.2 options for this machine: ``-smp``, ``-cpu``, memory backends, ``-numa``
        nodes and distances, ``-m``."""
        args = ["-cpu", "max,vendor=GenuineIntel",
                "-smp", f"{self.ncpus},sockets={self.sockets},dies={self.dies},"
                        f"cores={self.cores},threads={self.threads}",
                "-m", f"{self.memory_mib}M"]
        for n, node in enumerate(self.numa):
            args += ["-object", f"memory-backend-ram,id=m{n},size={node.memory_mib}M",
                     "-numa", f"node,nodeid={n},cpus={_qemu_cpus(node.cpus)},memdev=m{n}"]
        for a, row in enumerate(self.distances):
            for b, d in enumerate(row):
                if a < b:
                    args += ["-numa", f"dist,src={a},dst={b},val={d}"]
        return args


def _qemu_cpus(cpus: frozenset[int]) -> str:
    """QEMU's ``cpus=`` takes one range; several are given as ``cpus=a-b,cpus=c-d``."""
    text = str(CPUSet(cpus))
    return ",cpus=".join(text.split(","))


def _int(d: dict[str, Any], key: str, where: str) -> int:
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise TopologyError(f"{where}: {key} must be a positive integer, got {v!r}")
    return v


def parse(name: str, data: dict[str, Any]) -> Topology:
    """Build and check a :class:`Topology` from a parsed file. Raises TopologyError."""
    where = f"topology {name}"
    counts = {k: _int(data, k, where) for k in ("sockets", "dies", "cores", "threads")}
    ncpus = counts["sockets"] * counts["dies"] * counts["cores"] * counts["threads"]
    raw = data.get("numa")
    if not isinstance(raw, list) or not raw:
        raise TopologyError(f"{where}: needs at least one [[numa]] table")
    nodes = []
    seen: set[int] = set()
    for n, node in enumerate(raw):
        try:
            cpus = frozenset(CPUSet.parse(str(node.get("cpus", ""))))
        except ValueError as e:
            raise TopologyError(f"{where}: numa[{n}].cpus: {e}") from None
        if not cpus:
            raise TopologyError(f"{where}: numa[{n}] has no cpus")
        if cpus & seen:
            raise TopologyError(f"{where}: numa[{n}] repeats cpus {sorted(cpus & seen)}")
        seen |= cpus
        nodes.append(NumaNode(cpus, _int(node, "memory_mib", f"{where}: numa[{n}]")))
    if seen != set(range(ncpus)):
        raise TopologyError(f"{where}: the [[numa]] cpus must cover 0-{ncpus - 1} exactly, "
                            f"they cover {CPUSet(seen)}")
    dist = data.get("distances")
    k = len(nodes)
    if (not isinstance(dist, list) or len(dist) != k
            or any(not isinstance(r, list) or len(r) != k for r in dist)):
        raise TopologyError(f"{where}: distances must be a {k}x{k} matrix")
    for a in range(k):
        if dist[a][a] != 10:
            raise TopologyError(f"{where}: distances[{a}][{a}] must be 10 (local)")
        for b in range(k):
            if dist[a][b] != dist[b][a] or (a != b and not 10 < dist[a][b] <= 255):
                raise TopologyError(f"{where}: distances[{a}][{b}] must be symmetric, in 11-255")
    scen = data.get("scenarios")
    if scen is not None and (not isinstance(scen, list)
                             or not all(isinstance(x, str) for x in scen)):
        raise TopologyError(f"{where}: scenarios must be a list of scenario names")
    return Topology(name=name, description=str(data.get("description", "")),
                    scenarios=tuple(scen) if scen is not None else None,
                    numa=tuple(nodes), distances=tuple(tuple(r) for r in dist),
                    fast=bool(data.get("fast", False)), **counts)


def load(name_or_path: str | Path) -> Topology:
    """Load ``tests/vm/topologies/<name>.toml`` (or a path). Raises TopologyError."""
    p = Path(name_or_path)
    if p.suffix != ".toml":
        p = TOPOLOGY_DIR / f"{name_or_path}.toml"
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise TopologyError(f"topology {p}: {e}") from None
    return parse(p.stem, data)


def all_topologies() -> list[Topology]:
    """Every topology file, fast ones first, then by name."""
    tops = [load(p) for p in sorted(TOPOLOGY_DIR.glob("*.toml"))]
    return sorted(tops, key=lambda t: (not t.fast, t.name))
