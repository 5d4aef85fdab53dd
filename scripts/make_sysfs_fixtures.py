#!/usr/bin/env python3
"""Write the sysfs fixture trees under ``tests/fixtures/sysfs/<name>/sys/...``.

Each tree is a small copy of the parts of ``/sys`` that :mod:`nri_cpumgr.sysfs` reads, with
files written in the kernel's own formats (trailing newline, cpumask hex words, the
``node*/meminfo`` column layout, relative symlinks under ``/sys/dev``). The output depends only
on the specs below, so running the script twice gives identical trees; the trees are committed
and ``tests/unit/test_sysfs.py`` checks that they still match this script.

Usage::

    python3 scripts/make_sysfs_fixtures.py [--out DIR] [NAME ...]

Fixtures:

* ``this-machine``: the development VM (2 CPUs, 1 socket, 1 NUMA node, no SMT, one L3 shared
  by both CPUs, 4 GiB, kernel 6.x files including ``die_*`` and ``cluster_*``).
* ``dual-socket-smt``: 2 sockets x 4 cores x 2 threads (CPU n and n+8 are siblings, socket 0 =
  CPUs 0-3,8-11), one NUMA node and one L3 per socket, distances 10/21, 8 GiB and some 2 MiB
  huge pages per node, ``core_id`` 0-3 repeated in both packages, plus PCI-backed devices:
  char 240:0 on node 1, char 241:0 with ``numa_node`` -1, block 259:0 (NVMe) on node 0 and the
  virtual char device 1:3 (``/dev/null``).
* ``multi-l3``: 1 socket, 2 NUMA nodes (NPS2-like), 16 cores x 2 threads = 32 CPUs (CPU n and
  n+16 are siblings), 4 L3 caches of 4 cores each (2 per NUMA node), ``core_id`` values with
  gaps (0-3, 8-11, 16-19, 24-27), no ``die_id`` files (older kernel), 1 GiB huge pages.
* ``large-768`` (written only when named, not committed): 768 CPUs, 16 NUMA nodes, 64 L3
  caches, SMT 2 (:func:`large_768`; benchmarks/large_machine.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "fixtures" / "sysfs"


# ---------------------------------------------------------------------------------------------
# specs


@dataclass(frozen=True)
class CPUSpec:
    """One logical CPU: ``package`` (physical_package_id), ``die`` (die_id), ``core_id`` as the
    kernel reports it (unique only within the package), NUMA ``node`` and last-level cache id
    ``llc``."""

    cpu: int
    package: int
    die: int
    core_id: int
    node: int
    llc: int


@dataclass(frozen=True)
class NodeSpec:
    """One NUMA node: ``mem_kb`` MemTotal in kB, ``hugepages`` page size in kB -> nr_hugepages,
    ``distances`` one entry per online node in node-id order (the ``distance`` file)."""

    id: int
    mem_kb: int
    hugepages: dict[int, int]
    distances: tuple[int, ...]


@dataclass(frozen=True)
class DeviceSpec:
    """A device node ``kind`` ("char"/"block") ``major:minor`` whose class directory sits at
    ``sys/devices/<parent...>/<class_path...>``. ``parent_numa`` is written as the parent's
    ``numa_node`` file (``None``: no such file, e.g. a virtual device). ``via`` names an
    intermediate class device (the NVMe controller between a namespace and its PCI function)."""

    kind: str
    major: int
    minor: int
    parent: tuple[str, ...]
    class_path: tuple[str, ...]
    parent_numa: int | None
    via: tuple[str, ...] = ()


@dataclass(frozen=True)
class CacheSpec:
    """Cache geometry per level: size in KiB, associativity and line size (bytes)."""

    l1d_k: int = 32
    l1i_k: int = 32
    l2_k: int = 1024
    l3_k: int = 32768
    l1_ways: int = 8
    l2_ways: int = 8
    l3_ways: int = 16
    line: int = 64


@dataclass(frozen=True)
class MachineSpec:
    name: str
    cpus: tuple[CPUSpec, ...]
    nodes: tuple[NodeSpec, ...]
    nr_cpu_ids: int
    kernel_max: int = 8191
    die_files: bool = True
    cluster_files: bool = True
    cpu0_online_file: bool = False
    full_cache_attrs: bool = False
    cache: CacheSpec = field(default_factory=CacheSpec)
    devices: tuple[DeviceSpec, ...] = ()
    default_hugepage_kb: int = 2048


# ---------------------------------------------------------------------------------------------
# kernel formats


def cpulist(ids: Iterable[int]) -> str:
    """The kernel's ``%*pbl`` format: sorted, runs of two or more as ``a-b``."""
    s = sorted(set(ids))
    out: list[str] = []
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(f"{s[i]}-{s[j]}" if j > i else str(s[i]))
        i = j + 1
    return ",".join(out)


def cpumask(ids: Iterable[int], nbits: int) -> str:
    """The kernel's ``%*pb`` format for a bitmap of ``nbits`` bits: 32-bit hex words, most
    significant first, comma separated; the first word only as wide as its bits need."""
    value = 0
    for i in ids:
        value |= 1 << i
    nwords = max(1, (nbits + 31) // 32)
    words = [(value >> (32 * w)) & 0xFFFFFFFF for w in reversed(range(nwords))]
    top_bits = nbits - 32 * (nwords - 1)
    top_width = (top_bits + 3) // 4
    parts = [f"{words[0]:0{top_width}x}"] + [f"{w:08x}" for w in words[1:]]
    return ",".join(parts)


def meminfo(node: int, mem_kb: int, huge_total: int) -> str:
    """A ``node<N>/meminfo`` file: the kernel's ``Node %d <Label>: %8lu kB`` layout (label
    padded to 16 columns), with plausible figures derived from ``mem_kb``."""
    free = mem_kb * 9 // 10
    rows_kb = [
        ("MemTotal", mem_kb),
        ("MemFree", free),
        ("MemUsed", mem_kb - free),
        ("SwapCached", 0),
        ("Active", mem_kb // 200),
        ("Inactive", mem_kb // 100),
        ("Active(anon)", mem_kb // 1000),
        ("Inactive(anon)", mem_kb // 500),
        ("Active(file)", mem_kb // 200 - mem_kb // 1000),
        ("Inactive(file)", mem_kb // 100 - mem_kb // 500),
        ("Unevictable", 0),
        ("Mlocked", 0),
        ("Dirty", 0),
        ("Writeback", 0),
        ("FilePages", mem_kb // 50),
        ("Mapped", mem_kb // 400),
        ("AnonPages", mem_kb // 300),
        ("Shmem", mem_kb // 500),
        ("KernelStack", 1024),
        ("PageTables", 2048),
        ("SecPageTables", 0),
        ("NFS_Unstable", 0),
        ("Bounce", 0),
        ("WritebackTmp", 0),
        ("KReclaimable", mem_kb // 250),
        ("Slab", mem_kb // 100),
        ("SReclaimable", mem_kb // 250),
        ("SUnreclaim", mem_kb // 100 - mem_kb // 250),
        ("AnonHugePages", 0),
        ("ShmemHugePages", 0),
        ("ShmemPmdMapped", 0),
        ("FileHugePages", 0),
        ("FilePmdMapped", 0),
    ]
    lines = [f"Node {node} {label + ':':<16}{val:>8} kB" for label, val in rows_kb]
    for label, val in (
        ("HugePages_Total", huge_total),
        ("HugePages_Free", huge_total),
        ("HugePages_Surp", 0),
    ):
        lines.append(f"Node {node} {label + ':':<16}{val:>5}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# writers


def _write(path: Path, text: str, *, newline: bool = True) -> None:
    """Write ``text`` plus the kernel's trailing newline (``newline=False``: verbatim, for
    attributes such as an empty ``uevent`` that the kernel leaves at 0 bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n" if newline and not text.endswith("\n") else text)


def _symlink(link: Path, target: Path) -> None:
    """A relative symlink ``link -> target`` (as sysfs makes them)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(target, link.parent)
    link.symlink_to(rel)


def _write_cpus(sysroot: Path, m: MachineSpec) -> None:
    cpu_dir = sysroot / "devices" / "system" / "cpu"
    all_cpus = [c.cpu for c in m.cpus]
    nb = m.nr_cpu_ids
    _write(cpu_dir / "online", cpulist(all_cpus))
    _write(cpu_dir / "possible", cpulist(range(m.nr_cpu_ids)))
    _write(cpu_dir / "present", cpulist(all_cpus))
    _write(cpu_dir / "offline", cpulist(set(range(m.nr_cpu_ids)) - set(all_cpus)))
    _write(cpu_dir / "kernel_max", str(m.kernel_max))

    by_cpu = {c.cpu: c for c in m.cpus}

    def same(cpu: CPUSpec, pred: str) -> list[int]:
        out = []
        for o in m.cpus:
            if pred == "thread":
                ok = (o.package, o.die, o.core_id) == (cpu.package, cpu.die, cpu.core_id)
            elif pred == "die":
                ok = (o.package, o.die) == (cpu.package, cpu.die)
            elif pred == "package":
                ok = o.package == cpu.package
            else:  # llc
                ok = o.llc == cpu.llc
            if ok:
                out.append(o.cpu)
        return out

    # machine-wide ordinal of each physical core (used as the L1/L2 cache id, as x86 does)
    core_keys = sorted({(c.package, c.die, c.core_id) for c in m.cpus})
    core_ordinal = {k: i for i, k in enumerate(core_keys)}

    cs = m.cache
    for cpu in sorted(by_cpu):
        c = by_cpu[cpu]
        d = cpu_dir / f"cpu{cpu}"
        if cpu != 0 or m.cpu0_online_file:
            _write(d / "online", "1")
        topo = d / "topology"
        threads = same(c, "thread")
        package = same(c, "package")
        _write(topo / "physical_package_id", str(c.package))
        _write(topo / "core_id", str(c.core_id))
        for stem, ids in (
            ("thread_siblings", threads),
            ("core_cpus", threads),
            ("core_siblings", package),
            ("package_cpus", package),
        ):
            _write(topo / stem, cpumask(ids, nb))
            _write(topo / f"{stem}_list", cpulist(ids))
        if m.die_files:
            die = same(c, "die")
            _write(topo / "die_id", str(c.die))
            _write(topo / "die_cpus", cpumask(die, nb))
            _write(topo / "die_cpus_list", cpulist(die))
        if m.cluster_files:
            _write(topo / "cluster_id", "65535")
            _write(topo / "cluster_cpus", cpumask(threads, nb))
            _write(topo / "cluster_cpus_list", cpulist(threads))

        ordinal = core_ordinal[(c.package, c.die, c.core_id)]
        llc = same(c, "llc")
        caches = (
            ("index0", 1, "Data", cs.l1d_k, cs.l1_ways, threads, ordinal),
            ("index1", 1, "Instruction", cs.l1i_k, cs.l1_ways, threads, ordinal),
            ("index2", 2, "Unified", cs.l2_k, cs.l2_ways, threads, ordinal),
            ("index3", 3, "Unified", cs.l3_k, cs.l3_ways, llc, c.llc),
        )
        for idx, level, ctype, size_k, ways, shared, cid in caches:
            cd = d / "cache" / idx
            _write(cd / "id", str(cid))
            _write(cd / "level", str(level))
            _write(cd / "shared_cpu_list", cpulist(shared))
            _write(cd / "shared_cpu_map", cpumask(shared, nb))
            _write(cd / "size", f"{size_k}K")
            _write(cd / "type", ctype)
            if m.full_cache_attrs:  # the geometry files nobody here reads
                _write(cd / "coherency_line_size", str(cs.line))
                _write(cd / "number_of_sets", str(size_k * 1024 // (cs.line * ways)))
                _write(cd / "physical_line_partition", "1")
                _write(cd / "uevent", "", newline=False)
                _write(cd / "ways_of_associativity", str(ways))
        _write(d / "cache" / "uevent", "", newline=False)


def _write_nodes(sysroot: Path, m: MachineSpec) -> None:
    node_dir = sysroot / "devices" / "system" / "node"
    ids = [n.id for n in m.nodes]
    with_cpus = sorted({c.node for c in m.cpus})
    with_mem = [n.id for n in m.nodes if n.mem_kb > 0]
    _write(node_dir / "online", cpulist(ids))
    _write(node_dir / "possible", cpulist(ids))
    _write(node_dir / "has_cpu", cpulist(with_cpus))
    _write(node_dir / "has_memory", cpulist(with_mem))
    _write(node_dir / "has_normal_memory", cpulist(with_mem))
    for n in m.nodes:
        d = node_dir / f"node{n.id}"
        cpus = [c.cpu for c in m.cpus if c.node == n.id]
        _write(d / "cpulist", cpulist(cpus))
        _write(d / "cpumap", cpumask(cpus, m.nr_cpu_ids))
        _write(d / "distance", " ".join(str(x) for x in n.distances))
        _write(
            d / "meminfo",
            meminfo(n.id, n.mem_kb, n.hugepages.get(m.default_hugepage_kb, 0)),
        )
        for size_kb in sorted(n.hugepages):
            hd = d / "hugepages" / f"hugepages-{size_kb}kB"
            nr = n.hugepages[size_kb]
            _write(hd / "nr_hugepages", str(nr))
            _write(hd / "free_hugepages", str(nr))
            _write(hd / "surplus_hugepages", "0")
        for cpu in cpus:
            _symlink(d / f"cpu{cpu}", sysroot / "devices" / "system" / "cpu" / f"cpu{cpu}")


def _write_devices(sysroot: Path, m: MachineSpec) -> None:
    for dev in m.devices:
        parent = sysroot.joinpath("devices", *dev.parent)
        parent.mkdir(parents=True, exist_ok=True)
        if dev.parent_numa is not None:
            _write(parent / "numa_node", str(dev.parent_numa))
        holder = parent
        if dev.via:
            via = parent.joinpath(*dev.via)
            _write(via / "uevent", f"DEVNAME={dev.via[-1]}")
            _symlink(via / "device", parent)
            holder = via
        cls = holder.joinpath(*dev.class_path)
        name = dev.class_path[-1]
        _write(cls / "dev", f"{dev.major}:{dev.minor}")
        _write(cls / "uevent", f"MAJOR={dev.major}\nMINOR={dev.minor}\nDEVNAME={name}")
        if dev.parent_numa is not None:
            _symlink(cls / "device", holder)
        _symlink(sysroot / "dev" / dev.kind / f"{dev.major}:{dev.minor}", cls)


def write_machine(m: MachineSpec, out: Path) -> Path:
    """(Re)create ``out/<m.name>/sys`` from ``m``; returns the fixture root (``out/<name>``)."""
    root = out / m.name
    if root.exists():
        shutil.rmtree(root)
    sysroot = root / "sys"
    _write_cpus(sysroot, m)
    _write_nodes(sysroot, m)
    _write_devices(sysroot, m)
    return root


# ---------------------------------------------------------------------------------------------
# the fixtures


def this_machine() -> MachineSpec:
    cpus = tuple(CPUSpec(cpu=i, package=0, die=0, core_id=i, node=0, llc=0) for i in range(2))
    return MachineSpec(
        name="this-machine",
        cpus=cpus,
        nodes=(NodeSpec(0, 4155164, {2048: 0, 1048576: 0}, (10,)),),
        nr_cpu_ids=2,
        kernel_max=255,
        full_cache_attrs=True,
    )


def dual_socket_smt() -> MachineSpec:
    cpus = []
    for cpu in range(16):
        core = cpu % 8  # CPU n and n+8 share a core
        package = core // 4
        cpus.append(
            CPUSpec(cpu=cpu, package=package, die=0, core_id=core % 4, node=package, llc=package)
        )
    gib_kb = 1024 * 1024
    nodes = (
        NodeSpec(0, 8 * gib_kb, {2048: 512, 1048576: 0}, (10, 21)),
        NodeSpec(1, 8 * gib_kb, {2048: 256, 1048576: 0}, (21, 10)),
    )
    devices = (
        DeviceSpec(
            kind="char",
            major=240,
            minor=0,
            parent=("pci0000:80", "0000:80:03.0", "0000:81:00.0"),
            class_path=("uio", "uio0"),
            parent_numa=1,
        ),
        DeviceSpec(
            kind="char",
            major=241,
            minor=0,
            parent=("pci0000:00", "0000:00:04.0", "0000:02:00.0"),
            class_path=("accel", "accel0"),
            parent_numa=-1,
        ),
        DeviceSpec(
            kind="block",
            major=259,
            minor=0,
            parent=("pci0000:00", "0000:00:1d.0", "0000:3d:00.0"),
            via=("nvme", "nvme0"),
            class_path=("nvme0n1",),
            parent_numa=0,
        ),
        DeviceSpec(
            kind="char",
            major=1,
            minor=3,
            parent=("virtual", "mem"),
            class_path=("null",),
            parent_numa=None,
        ),
    )
    return MachineSpec(
        name="dual-socket-smt",
        cpus=tuple(cpus),
        nodes=nodes,
        nr_cpu_ids=16,
        cache=CacheSpec(l2_k=2048, l3_k=16384),
        devices=devices,
    )


def multi_l3() -> MachineSpec:
    cpus = []
    for cpu in range(32):
        core = cpu % 16  # CPU n and n+16 share a core
        ccx = core // 4  # 4 cores per L3
        cpus.append(
            CPUSpec(
                cpu=cpu,
                package=0,
                die=0,
                core_id=ccx * 8 + core % 4,  # core ids with gaps, as on some AMD parts
                node=core // 8,
                llc=ccx,
            )
        )
    gib_kb = 1024 * 1024
    nodes = (
        NodeSpec(0, 16 * gib_kb, {2048: 0, 1048576: 2}, (10, 12)),
        NodeSpec(1, 16 * gib_kb, {2048: 0, 1048576: 4}, (12, 10)),
    )
    return MachineSpec(
        name="multi-l3",
        cpus=tuple(cpus),
        nodes=nodes,
        nr_cpu_ids=32,
        die_files=False,
        cluster_files=False,
        cache=CacheSpec(l1_ways=8, l2_k=512, l3_k=16384),
    )


def large_768() -> MachineSpec:
    """The largest machine users run (issue 34): 2 sockets x 8 NUMA nodes x 4 L3 caches x 6
    cores x 2 threads = 768 CPUs, 16 NUMA nodes, 64 L3 (CPU n and n+384 are siblings; the
    kernel numbers a core's first threads 0-383, then the second ones), distances 10 local,
    12 same socket, 32 remote, 64 GiB per node. Written on demand (benchmarks/
    large_machine.py), not committed: ~20,000 files."""
    cores = 384
    cpus = []
    for cpu in range(2 * cores):
        core = cpu % cores
        llc = core // 6
        node = llc // 4
        package = node // 8
        cpus.append(CPUSpec(cpu=cpu, package=package, die=0, core_id=core % 192, node=node,
                            llc=llc))
    gib_kb = 1024 * 1024
    nodes = tuple(
        NodeSpec(n, 64 * gib_kb, {2048: 0, 1048576: 0},
                 tuple(10 if n == m else 12 if n // 8 == m // 8 else 32 for m in range(16)))
        for n in range(16))
    return MachineSpec(name="large-768", cpus=tuple(cpus), nodes=nodes, nr_cpu_ids=768)


FIXTURES = {f().name: f for f in (this_machine, dual_socket_smt, multi_l3)}
#: Written only when named (too large to commit): ``make_sysfs_fixtures.py --out DIR large-768``.
ON_DEMAND = {f().name: f for f in (large_768,)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    ap.add_argument("names", nargs="*", help=f"fixtures to write (default all: {list(FIXTURES)})")
    args = ap.parse_args(argv)
    names = args.names or list(FIXTURES)
    known = {**FIXTURES, **ON_DEMAND}
    for name in names:
        if name not in known:
            print(f"unknown fixture {name!r}; known: {', '.join(known)}", file=sys.stderr)
            return 2
        root = write_machine(known[name](), args.out)
        print(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
