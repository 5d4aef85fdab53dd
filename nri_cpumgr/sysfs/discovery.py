"""Machine discovery from sysfs: CPUs, cores, sockets, NUMA nodes, L3 caches, node memory.

:func:`discover` reads a sysfs tree (``<root>/sys/...``; ``root="/"`` for the running machine,
a fixture directory in tests) and returns a :class:`~nri_cpumgr.topology.Machine` with the
same CPU table the kubelet would build. The kubelet does not read sysfs itself: its
``cm/cpumanager/topology.Discover`` consumes cadvisor's ``MachineInfo``, which cadvisor fills
in ``utils/sysinfo/sysinfo.go`` (``GetNodesInfo``, ``getCoresInfo``, ``addCacheInfo``). The
rules reproduced here:

* CPUs: the online CPUs (``devices/system/cpu/online``); offline CPUs are left out.
* Physical cores: the CPUs of one NUMA node sharing ``physical_package_id`` and ``core_id``
  (cadvisor's grouping; we also key on ``die_id``, see below). The kernel's ``core_id`` is only
  unique within a package, so the kubelet (``getUniqueCoreID``) numbers each core by its
  lowest CPU id; so do we.
* Uncore cache (``CPUInfo.uncore``): cadvisor attaches a level-3-or-higher cache to a core
  only when it is *not* shared by every thread of the NUMA node (a node-wide L3 becomes a node
  cache instead); the kubelet (``getUncoreCacheID``) takes the first such cache's ``id`` and
  falls back to the socket id when the core has none (node-wide L3, no ``id`` file, no cache
  directory).
* NUMA node of a CPU: the ``node<N>/cpulist`` that lists it. A CPU listed by no node is put on
  node 0. With no ``devices/system/node`` directory at all (kernel without NUMA), cadvisor
  groups CPUs by package and uses the package id as node id; so do we.
* Header counts as in ``Discover``: NumCPUs = online CPUs, NumCores = physical cores,
  NumSockets = distinct packages, NumNUMANodes = distinct NUMA ids of the CPUs,
  NumUncoreCache = distinct uncore ids.
* Per node (``NUMANodeInfo``): ``meminfo`` MemTotal (kB -> bytes), ``hugepages/hugepages-<size>kB/
  nr_hugepages`` (page size in bytes -> pages), ``distance`` (one entry per online node, in
  node-id order, as the kernel prints it).

Deviation: cores are keyed by (node, package, die, core_id), not (node, package, core_id), so
that parts whose ``core_id`` restarts on every die do not get two dies' threads merged into one
"core". Where ``core_id`` is unique per package (every common x86/arm64 system) the result is
identical to the kubelet's.

``thread_siblings_list`` is cross-checked against the core grouping: a disagreement would make
SMT-aware allocation (``full-pcpus-only``) silently wrong, so it raises
:class:`SysfsInconsistentError` instead.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nri_cpumgr.cpuset import CPUSet, CPUSetError
from nri_cpumgr.frozen import slot_init
from nri_cpumgr.paths import ABSENT as _ABSENT
from nri_cpumgr.topology import CPUInfo, CPUTopology, Machine, NUMANodeInfo

if TYPE_CHECKING:
    from pathlib import Path

CPU_DIR = "sys/devices/system/cpu"
NODE_DIR = "sys/devices/system/node"

_MEMTOTAL_RE = re.compile(r"MemTotal:\s*(\d+)\s*kB")


class SysfsError(RuntimeError):
    """A sysfs tree that cannot be turned into a topology. ``path`` is the offending file or
    directory, ``reason`` what is wrong with it."""

    def __init__(self, path: Path | str, reason: str) -> None:
        from pathlib import Path  # (not imported by a discovery that succeeds)

        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class SysfsMissingError(SysfsError):
    """A file discovery needs does not exist (``path`` names it)."""


class SysfsParseError(SysfsError):
    """A file exists but its content is not in the kernel's format."""


class SysfsInconsistentError(SysfsError):
    """Files that contradict each other (e.g. ``thread_siblings_list`` vs ``core_id``)."""


# ---------------------------------------------------------------------------------------------
# file helpers


def read_text(path: Path | str) -> str:
    """Content of a sysfs attribute, stripped. Raises :class:`SysfsMissingError` when it does
    not exist, :class:`SysfsError` when it cannot be read."""
    text = _read_optional(path)
    if text is None:
        raise SysfsMissingError(path, "no such file")
    return text


def _read_optional(path: Path | str) -> str | None:
    """Content of a sysfs attribute, stripped, or None when it does not exist (one open and
    one read: a large machine's discovery reads thousands of them). Raises
    :class:`SysfsError` when it exists but cannot be read or is not text (a sysfs attribute
    is ASCII; a copied tree may hold anything)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in _ABSENT:
            return None
        raise SysfsError(path, f"cannot read: {e.strerror or e}") from None
    try:
        data = os.read(fd, _READ_SIZE)
        if len(data) == _READ_SIZE:  # (a sysfs attribute is at most a page: rarely taken)
            chunks = [data]
            while chunk := os.read(fd, _READ_SIZE):
                chunks.append(chunk)
            data = b"".join(chunks)
    except OSError as e:
        raise SysfsError(path, f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise SysfsError(path, f"not text (byte {data[e.start]:#04x} at offset "
                               f"{e.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


_READ_SIZE = 65536


def read_int(path: Path | str) -> int:
    """A decimal integer attribute (may be negative, e.g. ``numa_node`` = -1)."""
    return _int(path, read_text(path))


def _int(path: Path | str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SysfsParseError(path, f"expected an integer, got {text!r}") from None


def read_cpulist(path: Path | str) -> CPUSet:
    """A cpulist attribute (``0-3,8``)."""
    return _cpulist(path, read_text(path))


def _cpulist(path: Path | str, text: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except CPUSetError as e:
        raise SysfsParseError(path, str(e)) from None


def _cpumask_weight(path: Path | str) -> int:
    """Number of bits set in a ``%*pb`` cpumask attribute (comma separated hex words)."""
    text = read_text(path)
    try:
        return sum(bin(int(word, 16)).count("1") for word in text.split(","))
    except ValueError:
        raise SysfsParseError(path, f"expected a hex cpumask, got {text!r}") from None


def _numbered_dirs(parent: str, prefix: str, suffix: str = "") -> list[tuple[int, str]]:
    """Subdirectories of ``parent`` named ``<prefix><number><suffix>`` (the number decimal
    digits, as a regular expression's ``\\d+`` between the two: ``node3``, ``index0``,
    ``hugepages-2048kB``), sorted by that number, as ``(number, path)``; ``[]`` when
    ``parent`` does not exist or is not a directory. (String tests, not a regular
    expression: three fewer to compile at every start, issue 34.)"""
    try:
        entries = os.scandir(parent)
    except OSError as e:
        if e.errno in _ABSENT:
            return []
        raise
    out = []
    start, cut = len(prefix), len(suffix)
    with entries:
        for entry in entries:
            name = entry.name
            if not (name.startswith(prefix) and name.endswith(suffix)):
                continue
            number = name[start:len(name) - cut]
            if number.isdecimal() and _is_dir(entry):
                out.append((int(number), entry.path))
    return sorted(out)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """``Path.is_dir`` of a directory entry (symlinks followed; False when it is gone)."""
    try:
        return entry.is_dir()
    except OSError as e:
        if e.errno in _ABSENT:
            return False
        raise


# ---------------------------------------------------------------------------------------------
# per-CPU facts


@slot_init
@dataclass(frozen=True, slots=True, init=False)  # (its __init__: slot_init's)
class _RawCPU:
    """One CPU's topology files (a docstring of its own: a dataclass without one takes
    ``inspect.signature`` for it)."""

    cpu: int
    socket: int
    die: int
    core_id: int
    numa: int
    siblings: CPUSet | None  # thread_siblings_list, None when the file is absent
    siblings_path: str


def _read_raw_cpu(cpu_dir: str, cpu: int, numa_of: dict[int, int] | None) -> _RawCPU:
    topo = f"{cpu_dir}/cpu{cpu}/topology/"
    socket = read_int(topo + "physical_package_id")
    core_id = read_int(topo + "core_id")
    path = topo + "die_id"
    text = _read_optional(path)
    die = _int(path, text) if text is not None else 0
    sib_path = topo + "thread_siblings_list"
    text = _read_optional(sib_path)
    siblings = _cpulist(sib_path, text) if text is not None else None
    numa = socket if numa_of is None else numa_of.get(cpu, 0)
    return _RawCPU(cpu, socket, die, core_id, numa, siblings, sib_path)


def _node_cpus(node_dirs: list[tuple[int, str]]) -> dict[int, int]:
    """CPU id -> NUMA node id from every ``node<N>/cpulist``."""
    numa_of: dict[int, int] = {}
    for node, d in node_dirs:
        path = d + "/cpulist"
        for cpu in read_cpulist(path):
            if cpu in numa_of:
                raise SysfsInconsistentError(
                    path, f"CPU {cpu} is also listed by node{numa_of[cpu]}/cpulist"
                )
            numa_of[cpu] = node
    return numa_of


def _group_cores(raw: dict[int, _RawCPU]) -> dict[tuple[int, int, int, int], list[int]]:
    """Physical cores: (numa, socket, die, core_id) -> sorted CPU ids (cadvisor getCoresInfo,
    plus the die)."""
    cores: dict[tuple[int, int, int, int], list[int]] = defaultdict(list)
    for cpu in sorted(raw):
        r = raw[cpu]
        cores[(r.numa, r.socket, r.die, r.core_id)].append(cpu)
    return dict(cores)


def _check_siblings(raw: dict[int, _RawCPU], threads: list[int], online: CPUSet) -> None:
    group = CPUSet(threads)
    for cpu in threads:
        r = raw[cpu]
        if r.siblings is None:
            continue
        listed = r.siblings & online
        if listed != group:
            raise SysfsInconsistentError(
                r.siblings_path,
                f"lists online siblings {listed} but the CPUs with package {r.socket}, "
                f"die {r.die}, core_id {r.core_id} are {group}",
            )


def _uncore_id(cpu_dir: str, thread: int, socket: int, node_threads: int) -> int:
    """The kubelet's uncore cache id for the core whose (lowest) thread is ``thread``: the id
    of the first level>=3 cache not shared by all ``node_threads`` CPUs of its NUMA node,
    else ``socket`` (cadvisor addCacheInfo + kubelet getUncoreCacheID)."""
    for _, idx in _numbered_dirs(f"{cpu_dir}/cpu{thread}/cache", "index"):
        path = idx + "/level"
        text = _read_optional(path)
        if text is None or _int(path, text) <= 2:
            continue
        path = idx + "/shared_cpu_list"
        text = _read_optional(path)
        if text is not None:
            shared = len(_cpulist(path, text))
        else:
            shared = _cpumask_weight(idx + "/shared_cpu_map")
        if shared == node_threads:
            continue  # node-level cache: cadvisor does not report it as an uncore cache
        path = idx + "/id"
        text = _read_optional(path)
        if text is None:
            return socket  # cadvisor cannot read the cache without an id: no uncore info
        return _int(path, text)
    return socket


# ---------------------------------------------------------------------------------------------
# per-node facts


def _meminfo_total(path: str) -> int:
    """MemTotal of a ``node<N>/meminfo`` in bytes; 0 when the file is absent (cadvisor)."""
    text = _read_optional(path)
    if text is None:
        return 0
    m = _MEMTOTAL_RE.search(text)
    if m is None:
        raise SysfsParseError(path, "no 'MemTotal: <n> kB' line")
    return int(m.group(1)) * 1024


def _hugepages(node_dir: str) -> dict[int, int]:
    """Page size in bytes -> nr_hugepages, from ``hugepages/hugepages-<size>kB``."""
    out: dict[int, int] = {}
    for size_kb, d in _numbered_dirs(node_dir + "/hugepages", "hugepages-", "kB"):
        path = d + "/nr_hugepages"
        nr = read_int(path)
        if nr < 0:
            raise SysfsParseError(path, f"negative page count {nr}")
        out[size_kb * 1024] = nr
    return out


def _distances(path: str, online_nodes: list[int]) -> dict[int, int]:
    """Node id -> distance from a ``node<N>/distance`` file, whose entries follow the online
    node ids in ascending order; ``{}`` when the file is absent."""
    text = _read_optional(path)
    if text is None:
        return {}
    try:
        values = [int(v) for v in text.split()]
    except ValueError:
        raise SysfsParseError(path, f"expected integers, got {text!r}") from None
    if len(values) != len(online_nodes):
        raise SysfsParseError(
            path,
            f"{len(values)} distances for {len(online_nodes)} online nodes {online_nodes}",
        )
    return dict(zip(online_nodes, values, strict=True))


def _online_nodes(node_root: str, node_dirs: Iterable[tuple[int, str]]) -> list[int]:
    online = node_root + "/online"
    text = _read_optional(online)
    if text is not None:
        return sorted(_cpulist(online, text))
    return sorted(n for n, _ in node_dirs)


# ---------------------------------------------------------------------------------------------


def discover(root: str | Path = "/") -> Machine:
    """Build the :class:`Machine` of the sysfs tree under ``root`` (``<root>/sys/...``).

    Returns the CPU topology (header counts + per-CPU table, kubelet semantics, see the module
    docstring) and one :class:`NUMANodeInfo` per NUMA node directory (memory in bytes, huge
    pages as page size in bytes -> count, distances), plus node 0 when CPUs had to be put there.

    Raises :class:`SysfsMissingError` naming the file when a required file is absent (``cpu/
    online``, a CPU's ``physical_package_id`` or ``core_id``, a node's ``cpulist``, a huge page
    size's ``nr_hugepages``), :class:`SysfsParseError` for content not in the kernel's format
    or no online CPU, :class:`SysfsInconsistentError` for contradicting files.
    """
    # (paths as strings: pathlib's joins cost more than the reads on a large machine, and
    # pathlib is not imported before the plugin's first Synchronize answer)
    base = os.fspath(root)
    cpu_dir = os.path.join(base, CPU_DIR)
    node_root = os.path.join(base, NODE_DIR)

    online_path = cpu_dir + "/online"
    online = read_cpulist(online_path)
    if not online:
        raise SysfsParseError(online_path, "no online CPU")

    node_dirs = _numbered_dirs(node_root, "node")
    numa_of = _node_cpus(node_dirs) if node_dirs else None

    raw = {cpu: _read_raw_cpu(cpu_dir, cpu, numa_of) for cpu in sorted(online)}
    cores = _group_cores(raw)

    cores_per_node: dict[int, int] = defaultdict(int)
    for numa, *_ in cores:
        cores_per_node[numa] += 1

    details: dict[int, CPUInfo] = {}
    for (numa, socket, die, _), threads in cores.items():
        _check_siblings(raw, threads, online)
        unique_core = threads[0]  # lowest thread id (kubelet getUniqueCoreID)
        uncore = _uncore_id(cpu_dir, unique_core, socket, cores_per_node[numa] * len(threads))
        for cpu in threads:
            details[cpu] = CPUInfo(
                numa=numa, socket=socket, core=unique_core, uncore=uncore, die=die
            )

    infos = details.values()
    topology = CPUTopology(
        num_cpus=len(details),
        num_cores=len(cores),
        num_sockets=len({i.socket for i in infos}),
        num_numa_nodes=len({i.numa for i in infos}),
        num_uncore_caches=len({i.uncore for i in infos}),
        details=dict(sorted(details.items())),
    )

    numa_nodes: dict[int, NUMANodeInfo] = {}
    online_nodes = _online_nodes(node_root, node_dirs)
    for node, d in node_dirs:
        numa_nodes[node] = NUMANodeInfo(
            id=node,
            memory_bytes=_meminfo_total(d + "/meminfo"),
            hugepages=_hugepages(d),
            distances=_distances(d + "/distance", online_nodes),
        )
    for numa in sorted({i.numa for i in infos}):
        numa_nodes.setdefault(numa, NUMANodeInfo(id=numa))
    return Machine(topology=topology, numa_nodes=dict(sorted(numa_nodes.items())))
