"""Topology discovery from sysfs (nri_cpumgr.sysfs), device NUMA lookup and the topology
renderers, against the fixture trees in tests/fixtures/sysfs and this machine's /sys."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.sysfs import (
    SysfsError,
    SysfsInconsistentError,
    SysfsMissingError,
    SysfsParseError,
    device_numa_node,
    discover,
)
from nri_cpumgr.topology import CPUInfo, CPUTopology
from nri_cpumgr.topology.render import format_table, page_size_name, to_json
from tests.conformance_data import conformance_dir

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
GIB = 1024**3
MI2 = 2 * 1024**2
GI1 = 1024**3


def fixture(name: str) -> Path:
    return FIXTURES / name


def copy_fixture(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(fixture(name), dst, symlinks=True)
    return dst


def cpu_topo(root: Path, cpu: int) -> Path:
    return root / "sys/devices/system/cpu" / f"cpu{cpu}" / "topology"


def write(path: Path, text: str) -> None:
    path.write_text(text + "\n")


# ---------------------------------------------------------------------------------------------
# the committed trees are what the generator writes


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "make_sysfs_fixtures", REPO / "scripts" / "make_sysfs_fixtures.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _tree(root: Path) -> dict[str, tuple[str, str | bytes]]:
    out: dict[str, tuple[str, str | bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_file():
                out[rel] = ("file", p.read_bytes())
            else:
                out[rel] = ("dir", b"")
    return out


def test_committed_fixtures_match_generator(tmp_path: Path) -> None:
    gen = _load_generator()
    assert set(gen.FIXTURES) == {"this-machine", "dual-socket-smt", "multi-l3"}
    for name, make in gen.FIXTURES.items():
        gen.write_machine(make(), tmp_path)
        committed, fresh = _tree(fixture(name)), _tree(tmp_path / name)
        assert committed.keys() == fresh.keys(), name
        diff = [k for k in committed if committed[k] != fresh[k]]
        assert diff == [], (name, diff[:5])


def test_generator_kernel_formats() -> None:
    gen = _load_generator()
    assert gen.cpulist([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert gen.cpumask([0, 1], 2) == "3"
    assert gen.cpumask([1, 9], 16) == "0202"
    assert gen.cpumask([0, 31], 32) == "80000001"
    assert gen.cpumask([0, 32], 40) == "01,00000001"


# ---------------------------------------------------------------------------------------------
# this-machine


def test_this_machine_fixture() -> None:
    m = discover(fixture("this-machine"))
    t = m.topology
    assert (t.num_cpus, t.num_cores, t.num_sockets, t.num_numa_nodes, t.num_uncore_caches) == (
        2,
        2,
        1,
        1,
        1,
    )
    assert dict(t.details) == {
        0: CPUInfo(numa=0, socket=0, core=0, uncore=0, die=0),
        1: CPUInfo(numa=0, socket=0, core=1, uncore=0, die=0),
    }
    assert t.cpus_per_core() == 1
    assert list(m.numa_nodes) == [0]
    node = m.numa_nodes[0]
    assert node.memory_bytes == 4155164 * 1024
    assert dict(node.hugepages) == {MI2: 0, GI1: 0}
    assert dict(node.distances) == {0: 10}


# ---------------------------------------------------------------------------------------------
# dual-socket-smt

# cpu -> (numa, socket, unique core id, uncore)
DUAL_EXPECTED = {
    0: (0, 0, 0, 0),
    1: (0, 0, 1, 0),
    2: (0, 0, 2, 0),
    3: (0, 0, 3, 0),
    4: (1, 1, 4, 1),
    5: (1, 1, 5, 1),
    6: (1, 1, 6, 1),
    7: (1, 1, 7, 1),
    8: (0, 0, 0, 0),
    9: (0, 0, 1, 0),
    10: (0, 0, 2, 0),
    11: (0, 0, 3, 0),
    12: (1, 1, 4, 1),
    13: (1, 1, 5, 1),
    14: (1, 1, 6, 1),
    15: (1, 1, 7, 1),
}


def test_dual_socket_smt_counts_and_table() -> None:
    t = discover(fixture("dual-socket-smt")).topology
    assert (t.num_cpus, t.num_cores, t.num_sockets, t.num_numa_nodes, t.num_uncore_caches) == (
        16,
        8,
        2,
        2,
        2,
    )
    got = {c: (i.numa, i.socket, i.core, i.uncore) for c, i in t.details.items()}
    assert got == DUAL_EXPECTED
    assert {i.die for i in t.details.values()} == {0}
    assert t.cpus_per_core() == 2
    assert t.cpus_per_socket() == 8


def test_dual_socket_smt_core_ids_made_unique() -> None:
    root = fixture("dual-socket-smt")
    # the kernel's core_id repeats across packages ...
    raw = {c: int((cpu_topo(root, c) / "core_id").read_text()) for c in range(16)}
    assert raw[0] == raw[4] == raw[8] == raw[12] == 0
    # ... discovery numbers each core by its lowest thread
    t = discover(root).topology
    assert t.details[0].core != t.details[4].core
    assert len(t.cores()) == 8
    for cpu, info in t.details.items():
        assert info.core == min(t.siblings(cpu))


def test_dual_socket_smt_siblings_and_numa() -> None:
    t = discover(fixture("dual-socket-smt")).topology
    for cpu in range(8):
        assert t.siblings(cpu) == CPUSet([cpu, cpu + 8])
        assert t.siblings(cpu + 8) == CPUSet([cpu, cpu + 8])
    assert t.cpus_in_numa_nodes([0]) == CPUSet.parse("0-3,8-11")
    assert t.cpus_in_numa_nodes([1]) == CPUSet.parse("4-7,12-15")
    assert t.cpus_in_sockets([0]) == CPUSet.parse("0-3,8-11")


def test_dual_socket_smt_memory() -> None:
    m = discover(fixture("dual-socket-smt"))
    assert sorted(m.numa_nodes) == [0, 1]
    n0, n1 = m.numa_nodes[0], m.numa_nodes[1]
    assert n0.memory_bytes == n1.memory_bytes == 8 * GIB
    assert dict(n0.hugepages) == {MI2: 512, GI1: 0}
    assert dict(n1.hugepages) == {MI2: 256, GI1: 0}
    assert dict(n0.distances) == {0: 10, 1: 21}
    assert dict(n1.distances) == {0: 21, 1: 10}


# ---------------------------------------------------------------------------------------------
# multi-l3


def test_multi_l3() -> None:
    root = fixture("multi-l3")
    assert not (cpu_topo(root, 0) / "die_id").exists()
    m = discover(root)
    t = m.topology
    assert (t.num_cpus, t.num_cores, t.num_sockets, t.num_numa_nodes, t.num_uncore_caches) == (
        32,
        16,
        1,
        2,
        4,
    )
    assert t.cpus_in_numa_nodes([0]) == CPUSet.parse("0-7,16-23")
    assert t.cpus_in_numa_nodes([1]) == CPUSet.parse("8-15,24-31")
    for l3 in range(4):
        cpus = CPUSet(c for c, i in t.details.items() if i.uncore == l3)
        first = 4 * l3
        assert cpus == CPUSet(range(first, first + 4)) | CPUSet(range(first + 16, first + 20))
    # sysfs core ids have gaps (0-3, 8-11, ...); the unique ids are the lowest threads
    assert int((cpu_topo(root, 4) / "core_id").read_text()) == 8
    assert t.details[4].core == 4 and t.details[20].core == 4
    assert sorted(t.cores()) == list(range(16))
    assert {i.die for i in t.details.values()} == {0}
    assert {i.socket for i in t.details.values()} == {0}
    assert dict(m.numa_nodes[0].distances) == {0: 10, 1: 12}
    assert dict(m.numa_nodes[1].distances) == {0: 12, 1: 10}
    assert dict(m.numa_nodes[0].hugepages) == {MI2: 0, GI1: 2}
    assert dict(m.numa_nodes[1].hugepages) == {MI2: 0, GI1: 4}
    assert m.numa_nodes[1].memory_bytes == 16 * GIB


# ---------------------------------------------------------------------------------------------
# variants of the fixtures


def test_offline_cpu_excluded(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    cpu_dir = root / "sys/devices/system/cpu"
    write(cpu_dir / "online", "0-14")
    write(cpu_dir / "offline", "15")
    write(cpu_dir / "cpu15" / "online", "0")
    shutil.rmtree(cpu_dir / "cpu15" / "topology")  # the kernel removes it on offline
    t = discover(root).topology
    assert t.num_cpus == 15
    assert 15 not in t.details
    assert t.num_cores == 8
    assert t.siblings(7) == CPUSet([7])
    assert t.cpus_in_numa_nodes([1]) == CPUSet.parse("4-7,12-14")


def test_l3_without_id_falls_back_to_socket(tmp_path: Path) -> None:
    root = copy_fixture("multi-l3", tmp_path)
    for idfile in (root / "sys/devices/system/cpu").glob("cpu*/cache/index3/id"):
        idfile.unlink()
    t = discover(root).topology
    assert {i.uncore for i in t.details.values()} == {0}
    assert t.num_uncore_caches == 1


def test_l3_ids_followed_when_not_node_wide(tmp_path: Path) -> None:
    root = copy_fixture("multi-l3", tmp_path)
    for idfile in (root / "sys/devices/system/cpu").glob("cpu*/cache/index3/id"):
        write(idfile, str(int(idfile.read_text()) + 40))
    t = discover(root).topology
    assert t.details[0].uncore == 40 and t.details[31].uncore == 43
    assert t.num_uncore_caches == 4


def test_node_wide_l3_uses_socket_id(tmp_path: Path) -> None:
    # cadvisor reports an L3 shared by the whole NUMA node as a node cache, so the kubelet
    # falls back to the socket id whatever the cache id is
    root = copy_fixture("dual-socket-smt", tmp_path)
    for idfile in (root / "sys/devices/system/cpu").glob("cpu*/cache/index3/id"):
        write(idfile, str(int(idfile.read_text()) + 7))
    t = discover(root).topology
    assert {c: i.uncore for c, i in t.details.items()} == {
        c: v[1] for c, v in DUAL_EXPECTED.items()
    }


def test_no_cache_directory_uses_socket_id(tmp_path: Path) -> None:
    root = copy_fixture("multi-l3", tmp_path)
    for cache in (root / "sys/devices/system/cpu").glob("cpu*/cache"):
        shutil.rmtree(cache)
    t = discover(root).topology
    assert t.num_uncore_caches == 1 and t.details[13].uncore == 0


def test_die_id_read(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    for cpu in (4, 5, 6, 7, 12, 13, 14, 15):
        write(cpu_topo(root, cpu) / "die_id", "1")
    t = discover(root).topology
    assert {c for c, i in t.details.items() if i.die == 1} == set(CPUSet.parse("4-7,12-15"))
    assert t.num_cores == 8


def test_no_numa_directory_groups_by_package(tmp_path: Path) -> None:
    root = copy_fixture("multi-l3", tmp_path)
    shutil.rmtree(root / "sys/devices/system/node")
    m = discover(root)
    t = m.topology
    assert t.num_numa_nodes == 1 and {i.numa for i in t.details.values()} == {0}
    assert t.num_uncore_caches == 4  # an L3 of 8 threads is not node-wide among 32
    assert list(m.numa_nodes) == [0] and m.numa_nodes[0].memory_bytes == 0


def test_no_numa_directory_uses_package_as_node(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    shutil.rmtree(root / "sys/devices/system/node")
    m = discover(root)
    t = m.topology
    assert {c: i.numa for c, i in t.details.items()} == {c: v[1] for c, v in DUAL_EXPECTED.items()}
    assert t.num_numa_nodes == 2
    assert sorted(m.numa_nodes) == [0, 1]
    assert all(n.memory_bytes == 0 and not n.distances for n in m.numa_nodes.values())


def test_cpus_outside_every_node_go_to_node_0(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    write(root / "sys/devices/system/node/node1/cpulist", "")
    m = discover(root)
    t = m.topology
    assert {i.numa for i in t.details.values()} == {0}
    assert t.num_numa_nodes == 1
    # node 0 now has 16 threads; each L3 has 8, so the L3 ids are uncore ids
    assert t.details[4].uncore == 1 and t.details[0].uncore == 0
    # the memory-only node is still described
    assert m.numa_nodes[1].memory_bytes == 8 * GIB


def test_missing_meminfo_means_zero_memory(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    (root / "sys/devices/system/node/node1/meminfo").unlink()
    m = discover(root)
    assert m.numa_nodes[1].memory_bytes == 0
    assert m.numa_nodes[0].memory_bytes == 8 * GIB


# ---------------------------------------------------------------------------------------------
# unusable trees


def _expect(exc: type[SysfsError], root: Path, suffix: str) -> SysfsError:
    with pytest.raises(exc) as ei:
        discover(root)
    err = ei.value
    assert isinstance(err, SysfsError)
    assert str(err.path).endswith(suffix), err.path
    assert suffix in str(err)
    return err


def test_missing_root(tmp_path: Path) -> None:
    _expect(SysfsMissingError, tmp_path / "nothing", "sys/devices/system/cpu/online")


@pytest.mark.parametrize("victim", ["physical_package_id", "core_id"], ids=["package", "core_id"])
def test_missing_topology_file(tmp_path: Path, victim: str) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    (cpu_topo(root, 5) / victim).unlink()
    _expect(SysfsMissingError, root, f"cpu5/topology/{victim}")


def test_missing_cpu_directory(tmp_path: Path) -> None:
    root = copy_fixture("this-machine", tmp_path)
    shutil.rmtree(root / "sys/devices/system/cpu/cpu1")
    _expect(SysfsMissingError, root, "cpu1/topology/physical_package_id")


def test_bad_core_id(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    write(cpu_topo(root, 2) / "core_id", "two")
    err = _expect(SysfsParseError, root, "cpu2/topology/core_id")
    assert "two" in err.reason


def test_a_file_that_is_not_text(tmp_path: Path) -> None:
    """A byte that is no UTF-8 in a copied tree: one SysfsError naming the file and the byte
    (was a UnicodeDecodeError traceback from topology, plan, run and run --check-config)."""
    root = copy_fixture("dual-socket-smt", tmp_path)
    (cpu_topo(root, 3) / "core_id").write_bytes(b"\xff3\n")
    err = _expect(SysfsError, root, "cpu3/topology/core_id")
    assert err.reason == "not text (byte 0xff at offset 0)"


def test_no_online_cpu(tmp_path: Path) -> None:
    root = copy_fixture("this-machine", tmp_path)
    write(root / "sys/devices/system/cpu/online", "")
    _expect(SysfsParseError, root, "cpu/online")


def test_bad_online_list(tmp_path: Path) -> None:
    root = copy_fixture("this-machine", tmp_path)
    write(root / "sys/devices/system/cpu/online", "3-1")
    _expect(SysfsParseError, root, "cpu/online")


def test_missing_node_cpulist(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    (root / "sys/devices/system/node/node1/cpulist").unlink()
    _expect(SysfsMissingError, root, "node1/cpulist")


def test_cpu_in_two_nodes(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    write(root / "sys/devices/system/node/node1/cpulist", "3-7,12-15")
    _expect(SysfsInconsistentError, root, "node1/cpulist")


def test_siblings_contradict_core_ids(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    write(cpu_topo(root, 8) / "core_id", "1")  # now cpu 8 groups with 1 and 9
    err = _expect(SysfsInconsistentError, root, "thread_siblings_list")
    # cpu 0 still lists 0,8 as siblings, but cpu 8 moved to core_id 1
    assert err.path.parent.parent.name == "cpu0"
    assert "0,8" in err.reason and "core_id 0" in err.reason


def test_split_core_across_nodes(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    write(root / "sys/devices/system/node/node1/cpulist", "4-7")  # 12-15 fall to node 0
    _expect(SysfsInconsistentError, root, "thread_siblings_list")


def test_bad_distance_count(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    write(root / "sys/devices/system/node/node0/distance", "10 21 31")
    err = _expect(SysfsParseError, root, "node0/distance")
    assert "3 distances for 2 online nodes" in err.reason


def test_meminfo_without_memtotal(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    write(root / "sys/devices/system/node/node0/meminfo", "Node 0 MemFree: 12 kB")
    _expect(SysfsParseError, root, "node0/meminfo")


def test_hugepage_size_without_count(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    (root / "sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages").unlink()
    _expect(SysfsMissingError, root, "hugepages-2048kB/nr_hugepages")


def test_error_hierarchy() -> None:
    for exc in (SysfsMissingError, SysfsParseError, SysfsInconsistentError):
        assert issubclass(exc, SysfsError)
    e = SysfsMissingError("/x/y", "no such file")
    assert str(e) == "/x/y: no such file" and e.path == Path("/x/y")


# ---------------------------------------------------------------------------------------------
# device NUMA affinity


def test_device_numa_nodes() -> None:
    root = fixture("dual-socket-smt")
    assert device_numa_node(root, "c", 240, 0) == 1
    assert device_numa_node(root, "c", 241, 0) is None  # numa_node -1
    assert device_numa_node(root, "b", 259, 0) == 0  # nvme0n1 -> nvme0 -> PCI function
    assert device_numa_node(root, "c", 1, 3) is None  # virtual device, no numa_node
    assert device_numa_node(root, "c", 250, 7) is None  # not in sysfs
    assert device_numa_node(root, "c", 259, 0) is None  # 259:0 is a block device
    assert device_numa_node(str(root), "c", 240, 0) == 1


def test_device_kind_checked() -> None:
    with pytest.raises(ValueError, match="'c' or 'b'"):
        device_numa_node(fixture("dual-socket-smt"), "x", 240, 0)  # type: ignore[arg-type]


def test_device_absolute_link_is_rerooted(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    link = root / "sys/dev/char/240:0"
    target = (link.parent / os.readlink(link)).resolve().relative_to(root.resolve())
    link.unlink()
    link.symlink_to("/" + str(target))  # points outside the fixture unless re-rooted
    assert device_numa_node(root, "c", 240, 0) == 1


def test_device_numa_read_from_parent_change(tmp_path: Path) -> None:
    root = copy_fixture("dual-socket-smt", tmp_path)
    pci = root / "sys/devices/pci0000:80/0000:80:03.0/0000:81:00.0"
    write(pci / "numa_node", "0")
    assert device_numa_node(root, "c", 240, 0) == 0
    write(pci / "numa_node", "zero")
    with pytest.raises(SysfsParseError):
        device_numa_node(root, "c", 240, 0)


# ---------------------------------------------------------------------------------------------
# this machine's /sys


def test_discover_real_machine() -> None:
    sysfs = Path("/sys/devices/system/cpu")
    online = CPUSet.parse((sysfs / "online").read_text())
    m = discover("/")
    t = m.topology
    assert t.cpus() == online
    assert t.num_cpus == len(online)
    for cpu in online:
        topo = sysfs / f"cpu{cpu}" / "topology"
        assert t.details[cpu].socket == int((topo / "physical_package_id").read_text())
        siblings = CPUSet.parse((topo / "thread_siblings_list").read_text()) & online
        assert t.siblings(cpu) == siblings
        assert t.details[cpu].core == min(siblings)
    assert t.num_sockets == len(
        {int((sysfs / f"cpu{c}/topology/physical_package_id").read_text()) for c in online}
    )
    node_root = Path("/sys/devices/system/node")
    node_dirs = sorted(node_root.glob("node[0-9]*"))
    for d in node_dirs:
        node = int(d.name[4:])
        listed = CPUSet.parse((d / "cpulist").read_text()) & online
        assert t.cpus_in_numa_nodes([node]) == listed
        assert node in m.numa_nodes
        first = (d / "meminfo").read_text().split("\n")[0].split()
        assert first[2] == "MemTotal:"
        assert m.numa_nodes[node].memory_bytes == int(first[3]) * 1024


# ---------------------------------------------------------------------------------------------
# rendering


def test_format_table_rows() -> None:
    m = discover(fixture("dual-socket-smt"))
    text = format_table(m)
    lines = text.splitlines()
    assert lines[0].startswith("CPUs: 16  cores: 8  sockets: 2  NUMA nodes: 2")
    assert "threads per core: 2" in lines[0]
    header = lines.index(next(x for x in lines if x.split()[:2] == ["CPU", "SOCKET"]))
    rows = [x.split() for x in lines[header + 1 : header + 17]]
    assert [int(r[0]) for r in rows] == list(range(16))
    for r in rows:
        cpu = int(r[0])
        numa, socket, core, uncore = DUAL_EXPECTED[cpu]
        assert r[1:6] == [str(socket), "0", str(core), str(numa), str(uncore)]
        assert CPUSet.parse(r[6]) == CPUSet([cpu % 8, cpu % 8 + 8])
    assert lines[header + 17] == ""
    numa_header = lines[header + 18].split()
    assert numa_header[:3] == ["NUMA", "CPUS", "MEMORY(GiB)"]
    n0 = lines[header + 19].split()
    n1 = lines[header + 20].split()
    assert n0 == ["0", "0-3,8-11", "8.00", "2Mi:512", "1Gi:0", "0:10", "1:21"]
    assert n1 == ["1", "4-7,12-15", "8.00", "2Mi:256", "1Gi:0", "0:21", "1:10"]
    assert text.endswith("\n") and len(lines) == header + 21


def test_format_table_multi_l3_l3_column() -> None:
    text = format_table(discover(fixture("multi-l3")))
    rows = {
        int(x.split()[0]): x.split()
        for x in text.splitlines()
        if x.split() and x.split()[0].isdigit()
    }
    # the CPU table comes first; NUMA rows (ids 0, 1) would overwrite cpus 0 and 1
    assert rows[21][5] == "1" and rows[30][5] == "3" and rows[21][6] == "5,21"


def test_to_json_round_trip() -> None:
    m = discover(fixture("multi-l3"))
    doc = to_json(m, "multi-l3")
    doc = json.loads(json.dumps(doc))  # JSON-serialisable, string keys
    assert doc["name"] == "multi-l3"
    assert doc["declared"] == {
        "NumCPUs": 32,
        "NumSockets": 1,
        "NumCores": 16,
        "NumNUMANodes": 2,
        "NumUncoreCache": 4,
    }
    assert CPUTopology.from_conformance(doc) == m.topology
    assert [n["id"] for n in doc["numa_nodes"]] == [0, 1]
    assert doc["numa_nodes"][1] == {
        "id": 1,
        "cpus": "8-15,24-31",
        "memory_bytes": 16 * GIB,
        "hugepages": {str(MI2): 0, str(GI1): 4},
        "distances": {"0": 12, "1": 10},
    }


def test_to_json_has_corpus_shape() -> None:
    corpus = conformance_dir() / "topologies" / "dual-socket-ht.json"
    ref = json.loads(corpus.read_text())
    doc = to_json(discover(fixture("dual-socket-smt")), "dual-socket-smt")
    assert set(ref["declared"]) == set(doc["declared"])
    assert set(ref["cpus"][0]) <= set(doc["cpus"][0])
    assert len(doc["cpus"]) == 16 and doc["cpus"][9] == {
        "cpu": 9,
        "core": 1,
        "socket": 0,
        "numa": 0,
        "uncore": 0,
        "die": 0,
    }


def test_page_size_names() -> None:
    assert page_size_name(2 * 1024**2) == "2Mi"
    assert page_size_name(1024**3) == "1Gi"
    assert page_size_name(64 * 1024) == "64Ki"
    assert page_size_name(1000) == "1000"
