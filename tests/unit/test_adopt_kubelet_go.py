"""Adopting checkpoints written by the kubelet's own code: oracle/cmd/kubelet-checkpoint (the
kubelet v1.37.2's cpumanager/state and memorymanager/state packages, built by
scripts/oracle/build-kubelet-checkpoint.sh, cached outside the checkout) writes the files at
test time, in the format kubelet 1.37 writes (CPU v4, memory v3) and in the older formats
(v3/v2 and v2/v1, the kubelets 1.35-1.36 write), and the adoption code reads them back.

Without Go the test skips, except under CI, where it fails."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from nri_cpumgr.adopt.kubelet import (
    KubeletCheckpointError,
    cpu_checksum,
    data_checksum,
    load_cpu_state,
    load_memory_state,
    memory_checksum,
)
from nri_cpumgr.api import nri_pb2
from nri_cpumgr.cm.podresources.manager import POD_ENTRY
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel.nri import container_info
from tests.unit.kubelet_checkpoint import write, writer_path
from tests.unit.test_adopt_kubelet import ctr, plugin, pod

MI = 1 << 20
MEM_CFG = ("memoryManagerPolicy: Static\n"
           "reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n")
POD_LEVEL = ("topologyManagerPolicy: best-effort\ntopologyManagerScope: pod\n"
             "featureGates: {PodLevelResources: true, PodLevelResourceManagers: true, "
             "InPlacePodVerticalScalingExclusiveCPUs: true}\n")

# The node the kubelet managed (dual-socket-smt: CPU n and n+8 are SMT siblings, socket 0 =
# NUMA node 0 = 0-3,8-11): g2 runs on 4,12; g1's container exited (pod alive) on 1; gi's
# init container exited, its app reuses the init's CPUs (the kubelet's reusable init CPUs);
# pl is a pod-level pod (bubble 5-6,13-14: main's slice 5,13, side in the pod shared pool
# 6,14); rz was resized in place from 7 to 7,15.
CPU = {
    "policyName": "static",
    "defaultCpuSet": "0,3,8-9,11",
    "entries": {"g2": {"app": "4,12"}, "g1": {"app": "1"},
                "gi": {"init": "2,10", "app": "2,10"},
                "pl": {"main": "5,13", "side": "6,14"}, "rz": {"app": "7,15"}},
    "podEntries": {"pl": "5-6,13-14"},
    "baselines": {"rz": {"app": "7"}},
}


def blocks(node: int, size: int) -> list[dict]:
    return [{"numaAffinity": [node], "type": "memory", "size": size}]


# memory blocks on both NUMA nodes; pl's containers' blocks are the kubelet's partition of
# the pod's (not counted in the machine state)
MEM_ENTRIES = {"g2": {"app": blocks(1, 256 * MI)}, "g1": {"app": blocks(0, 256 * MI)},
               "gi": {"app": blocks(0, 128 * MI), "init": blocks(0, 128 * MI)},
               "rz": {"app": blocks(1, 256 * MI)},
               "pl": {"main": blocks(1, 256 * MI), "side": blocks(1, 256 * MI)}}
MEM_PODS = {"pl": blocks(1, 512 * MI)}


@pytest.fixture(scope="module")
def writer() -> str:
    return writer_path()


def machine_state(tmp_path: Path, counted: dict[str, dict[str, list[dict]]]) -> dict:
    """The kubelet's machineState for the fixture after ``counted``'s blocks: the plugin's
    default machine state (the same rule as the kubelet's getDefaultMachineState) with each
    block reserved on its node."""
    fresh = plugin(tmp_path / "fresh", MEM_CFG)
    ms = fresh.manager.memory.state.to_dict()["machine_state"]
    out = {str(n): {"numberOfAssignments": s["number_of_assignments"],
                    "memoryMap": {r: {"total": t["total_mem_size"],
                                      "systemReserved": t["system_reserved"],
                                      "allocatable": t["allocatable"],
                                      "reserved": t["reserved"], "free": t["free"]}
                                  for r, t in s["memory_map"].items()},
                    "cells": s["cells"]} for n, s in ms.items()}
    for conts in counted.values():
        for bl in conts.values():
            for b in bl:
                st = out[str(b["numaAffinity"][0])]
                st["numberOfAssignments"] += 1
                t = st["memoryMap"][b["type"]]
                t["reserved"] += b["size"]
                t["free"] -= b["size"]
    return out


def memory_input(tmp_path: Path, pods: bool = True) -> dict:
    counted = {u: c for u, c in MEM_ENTRIES.items() if not (pods and u in MEM_PODS)}
    if pods:
        counted = counted | {u: {"": b} for u, b in MEM_PODS.items()}
    return {"policyName": "Static", "machineState": machine_state(tmp_path, counted),
            "entries": MEM_ENTRIES if pods else counted,
            "podEntries": MEM_PODS if pods else {}}


def parsed(entries: dict) -> dict:
    return {u: {n: CPUSet.parse(c) for n, c in cs.items()} for u, cs in entries.items()}


@pytest.mark.parametrize("cpu_format, memory_format, version, mem_version", [
    ("current", "current", 4, 3),  # kubelet 1.37
    ("v3", "v2", 3, 2),            # kubelet 1.36, PodLevelResourceManagers on
    ("v2", "v1", 2, 1),            # kubelet 1.35, 1.36 with the gate off
])
def test_every_format_reads_back_every_assignment(writer, tmp_path, cpu_format, memory_format,
                                                  version, mem_version):
    pods = version >= 3
    cpu = dict(CPU)
    if version < 4:
        del cpu["baselines"]
    if not pods:
        cpu["entries"] = {u: c for u, c in CPU["entries"].items() if u != "pl"}
        del cpu["podEntries"]
    mem = memory_input(tmp_path, pods)
    d = tmp_path / "kubelet"
    write(writer, d, cpu, mem, cpu_format, memory_format)
    st = load_cpu_state(d / "cpu_manager_state")
    assert st is not None and st.version == version and st.policy == "static"
    assert st.default_set == CPUSet.parse(CPU["defaultCpuSet"])
    assert st.entries == parsed(cpu["entries"])
    assert st.pod_entries == ({"pl": CPUSet.parse("5-6,13-14")} if pods else {})
    if version == 4:
        # the kubelet records every entry as its own baseline, then the resize's
        assert st.baselines == parsed(cpu["entries"]) | {"rz": {"app": CPUSet({7})}}
        raw = json.loads((d / "cpu_manager_state").read_text())
        # the v2 fields inline for older kubelets: their checksum is the v2 one
        assert raw["checksum"] == cpu_checksum(
            {k: raw[k] for k in ("policyName", "defaultCpuSet", "entries")})
        assert raw["dataChecksum"] == data_checksum(raw["data"])
    m = load_memory_state(d / "memory_manager_state")
    assert m is not None and m.version == mem_version and m.policy == "Static"
    assert m.entries == mem["entries"]
    assert m.machine_state == mem["machineState"]
    assert m.pod_entries == (MEM_PODS if pods else {})
    if mem_version == 3:
        raw = json.loads((d / "memory_manager_state").read_text())
        assert raw["checksum"] == memory_checksum(
            {k: raw[k] for k in ("policyName", "machineState", "entries")})


def node() -> tuple[list[nri_pb2.PodSandbox], list[nri_pb2.Container]]:
    from tests.unit.test_pod_level_plugin import budget_pod

    pl = budget_pod("pl", 4)
    pl.name = "p-pl"
    pods = [pod("g2"), pod("g1"), pod("gi"), pl, pod("rz"), pod("be", "besteffort")]
    ctrs = [ctr("g2", 2000, "4,12"), ctr("g1", 1000, "1", nri_pb2.CONTAINER_STOPPED),
            ctr("gi", 2000, "2,10", nri_pb2.CONTAINER_STOPPED, name="init"),
            ctr("gi", 2000, "2,10"),
            ctr("pl", 2000, "5,13", name="main"), ctr("pl", 0, "6,14", name="side"),
            ctr("rz", 2000, "7,15"), ctr("be", 0, CPU["defaultCpuSet"])]
    return pods, ctrs


def test_kubelet_137_node_is_adopted_nothing_moves(writer, tmp_path, caplog):
    write(writer, tmp_path / "kubelet", CPU, memory_input(tmp_path))
    caplog.set_level(logging.INFO, "nri_cpumgr")
    p = plugin(tmp_path, MEM_CFG + POD_LEVEL)
    assert p.adoption is not None and p.adoption.cpu.version == 4
    updates = p.synchronize(*node())
    assert updates == []  # nothing moves
    assert str(p.manager.shared_pool()) == CPU["defaultCpuSet"]
    # every assignment, the pod-level pod's as the plugin keeps it (its bubble and its slice;
    # side runs on the pod shared pool the bubble leaves)
    want = parsed(CPU["entries"])
    want["pl"] = {POD_ENTRY: CPUSet.parse("5-6,13-14"), "main": CPUSet({5, 13})}
    assert p.manager.state.assignments == want
    assert p.manager.checkpoint()["podPools"]["pl"]["podSharedPool"] == "6,14"
    assert ("1 pod-level bubble(s) (1 container(s) in a pod shared pool)" in caplog.text)
    # the resize baseline: rz was admitted with CPU 7
    assert p.manager.resizer.promised[("rz", "app")] == CPUSet({7})
    # memory: every block, the pod-level pod's bubble alone
    mm = p.manager.memory
    for uid, conts in MEM_ENTRIES.items():
        for name, bl in conts.items():
            got = mm.get_memory(uid, name)
            if uid == "pl":
                assert got is None
                continue
            assert [(list(b.numa_affinity), b.type, b.size) for b in got] == \
                [(b["numaAffinity"], b["type"], b["size"]) for b in bl]
    assert [(list(b.numa_affinity), b.size) for b in mm.get_memory("pl", POD_ENTRY)] == \
        [([1], 512 * MI)]
    assert p.manager.containers["c-g2-app"].mems == CPUSet({1})
    assert p.manager.containers["c-gi-app"].mems == CPUSet({0})
    # the next pod gets other CPUs
    d = p.manager.admit(container_info(pod("next"), ctr("next", 2000, "")))
    held = CPUSet.parse("1-2,4-7,10,12-15")
    assert d.exclusive and len(d.cpus) == 2 and not (d.cpus & held)


@pytest.mark.parametrize("what", ["data", "dataChecksum"])
def test_corrupt_data_is_refused_in_one_line_and_the_daemon_serves(writer, tmp_path, caplog,
                                                                  what):
    kd = tmp_path / "kubelet"
    write(writer, kd, CPU, memory_input(tmp_path))
    f = kd / "cpu_manager_state"
    raw = json.loads(f.read_text())
    if what == "data":
        raw["data"] = raw["data"].replace('"4,12"', '"4,13"')
    else:
        raw["dataChecksum"] += 1
    f.write_text(json.dumps(raw))
    with pytest.raises(KubeletCheckpointError) as ei:
        load_cpu_state(f)
    msg = str(ei.value)
    assert "\n" not in msg and str(f) in msg and "dataChecksum" in msg
    caplog.set_level(logging.INFO, "nri_cpumgr")
    p = plugin(tmp_path, MEM_CFG + POD_LEVEL)
    assert p.adoption is None
    lines = [r.getMessage() for r in caplog.records if str(f) in r.getMessage()]
    assert len(lines) == 1 and "not adopted" in lines[0] and "\n" not in lines[0]
    # the daemon keeps serving: the runtime's cpusets are the truth
    p.synchronize(*node())
    assert p.manager.state.assignments["g2"] == {"app": CPUSet({4, 12})}
    d = p.manager.admit(container_info(pod("next"), ctr("next", 1000, "")))
    assert d.exclusive and not (d.cpus & CPUSet({4, 12}))


def test_corrupt_memory_data_keeps_the_cpus(writer, tmp_path, caplog):
    kd = tmp_path / "kubelet"
    write(writer, kd, CPU, memory_input(tmp_path))
    f = kd / "memory_manager_state"
    raw = json.loads(f.read_text())
    raw["data"] = raw["data"].replace('"numberOfAssignments":', '"numberOfAssignments": ', 1)
    f.write_text(json.dumps(raw))
    caplog.set_level(logging.INFO, "nri_cpumgr")
    p = plugin(tmp_path, MEM_CFG + POD_LEVEL)
    assert f"kubelet checkpoint {f}: dataChecksum" in caplog.text
    assert "memory not adopted" in caplog.text
    assert p.adoption is not None
    assert p.synchronize(*node()) == []
    assert p.manager.state.assignments["g2"] == {"app": CPUSet({4, 12})}
