"""Adopting a kubelet-managed node: the kubelet's checkpoint formats and checksums, and the
plugin's first Synchronize on top of them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from nri_cpumgr.adopt.kubelet import (
    KubeletCheckpointError,
    cpu_checksum,
    load_cpu_state,
    load_memory_state,
    memory_checksum,
)
from nri_cpumgr.api import nri_pb2
from nri_cpumgr.checkpoint import Checkpoint
from nri_cpumgr.config import parse_config
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel.nri import container_info
from nri_cpumgr.runtime.plugin import Plugin
from nri_cpumgr.sysfs import discover
from tests.unit.nri_peer import nri_container, nri_pod

DUAL = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "dual-socket-smt"

# (body, version, checksum) as the kubelet's own unit tests state them
# (pkg/kubelet/cm/cpumanager/state/state_checkpoint_test.go, releases 1.2x-1.3x)
CPU_VECTORS = [
    ({"policyName": "none", "defaultCPUSet": "4-6", "entries": {}}, 2, 354655845),
    ({"policyName": "none", "defaultCPUSet": "1-3",
      "entries": {"pod": {"container1": "4-6", "container2": "1-3"}}}, 2, 3610638499),
    ({"policyName": "none", "defaultCPUSet": "1-3"}, 1, 1694838852),
    ({"policyName": "static", "defaultCPUSet": "7-9",
      "entries": {"containerID1": "4-6", "containerID2": "1-3"}}, 1, 2026311253),
]
# pkg/kubelet/cm/memorymanager/state/state_checkpoint_test.go ("from v1 (migration)")
MEMORY_VECTOR = (json.loads(
    '{"policyName":"static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":'
    '{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,'
    '"free":1024}},"cells":[]}},"entries":{"pod":{"container1":[{"numaAffinity":[0],'
    '"type":"memory","size":512}]}}}'), 4215593881)


@pytest.mark.parametrize("body, version, want", CPU_VECTORS)
def test_cpu_checksum_is_the_kubelets(tmp_path, body, version, want):
    doc = dict(body)
    doc.setdefault("entries", {})
    norm = {"policyName": doc["policyName"], "defaultCpuSet": doc["defaultCPUSet"],
            "entries": doc["entries"]}
    assert cpu_checksum(norm, version) == want
    # read back from a file spelled as the kubelet's tests spell it (defaultCPUSet: Go's
    # case-insensitive field match)
    f = tmp_path / "cpu_manager_state"
    f.write_text(json.dumps({**body, "checksum": want}))
    st = load_cpu_state(f)
    assert st is not None and st.version == version and st.policy == body["policyName"]
    # one character changed: the kubelet's "checkpoint is corrupted"
    f.write_text(json.dumps({**body, "defaultCPUSet": "4-7", "checksum": want}))
    with pytest.raises(KubeletCheckpointError, match="checksum mismatch"):
        load_cpu_state(f)


def test_memory_checksum_is_the_kubelets(tmp_path):
    body, want = MEMORY_VECTOR
    assert memory_checksum(body) == want
    f = tmp_path / "memory_manager_state"
    f.write_text(json.dumps({**body, "checksum": want}))
    st = load_memory_state(f)
    assert st is not None and st.entries["pod"]["container1"][0]["size"] == 512
    body["entries"]["pod"]["container1"][0]["size"] = 513
    f.write_text(json.dumps({**body, "checksum": want}))
    with pytest.raises(KubeletCheckpointError, match="checksum mismatch"):
        load_memory_state(f)


@pytest.mark.parametrize("text, needle", [
    ("{", "not JSON"),
    ("[1]", "not a JSON object"),
    ('{"policyName":"static","defaultCpuSet":"1","data":"{}","dataChecksum":1}', "dataChecksum"),
    ('{"policyName":"static","defaultCpuSet":7,"checksum":0}', "cannot unmarshal"),
])
def test_unusable_kubelet_checkpoints_are_named(tmp_path, text, needle):
    f = tmp_path / "cpu_manager_state"
    f.write_text(text)
    with pytest.raises(KubeletCheckpointError, match=needle) as ei:
        load_cpu_state(f)
    assert str(f) in str(ei.value)


# ------------------------------------------------------------------ the plugin adopting
DEFAULT = "0,2-3,5-11,13-15"


def kubelet_checkpoint(d: Path, entries: dict, default: str = DEFAULT, policy: str = "static",
                       corrupt: bool = False) -> None:
    body = {"policyName": policy, "defaultCpuSet": default, "entries": entries}
    ck = cpu_checksum(body) + (1 if corrupt else 0)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpu_manager_state").write_text(json.dumps({**body, "checksum": ck}))


def pod(uid: str, qos: str = "") -> nri_pb2.PodSandbox:
    return nri_pod(uid, qos, name="p-" + uid)


def ctr(uid: str, cpus_m: int, cpus: str, state=nri_pb2.CONTAINER_RUNNING,
        name: str = "app") -> nri_pb2.Container:
    c = nri_container(uid, cpus_m, cid=f"c-{uid}-{name}", name=name, state=state)
    c.linux.resources.cpu.cpus = cpus
    return c


def plugin(tmp_path: Path, extra: str = "") -> Plugin:
    cfg = parse_config("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
                       f"stateDirectory: {tmp_path / 'state'}\n"
                       f"kubeletStateDirectory: {tmp_path / 'kubelet'}\n" + extra)
    return Plugin(cfg, discover(str(DUAL)))


def node():
    """g2 running on 4,12; g1 exited (pod alive) on 1; be on the kubelet's default set."""
    pods = [pod("g2"), pod("g1"), pod("be", "besteffort")]
    ctrs = [ctr("g2", 2000, "4,12"), ctr("g1", 1000, "1", nri_pb2.CONTAINER_STOPPED),
            ctr("be", 0, DEFAULT)]
    return pods, ctrs


def admit(p: Plugin, uid: str, cpus_m: int) -> CPUSet:
    d = p.manager.admit(container_info(pod(uid), ctr(uid, cpus_m, "")))
    assert d.exclusive
    return d.cpus


def test_adopts_running_and_exited_nothing_moves(tmp_path, caplog):
    kubelet_checkpoint(tmp_path / "kubelet", {"g2": {"app": "4,12"}, "g1": {"app": "1"}})
    p = plugin(tmp_path)
    caplog.set_level(logging.INFO, "nri_cpumgr")
    updates = p.synchronize(*node())
    assert updates == []  # nothing moves
    assert str(p.manager.shared_pool()) == DEFAULT
    assert p.manager.state.assignments == {"g2": {"app": CPUSet({4, 12})},
                                           "g1": {"app": CPUSet({1})}}
    assert ("2 exclusive assignment(s) (1 of exited or not listed containers of live pods)"
            in caplog.text)
    new = admit(p, "next", 2000)
    assert len(new) == 2 and new.isdisjoint({1, 4, 12})
    # our own checkpoint now exists: a restart reads it, not the kubelet's
    p.save()
    kubelet_checkpoint(tmp_path / "kubelet", {}, default="0-15")
    again = plugin(tmp_path)
    assert again.adoption is None
    assert again.manager.state.assignments["g1"] == {"app": CPUSet({1})}


def test_runtime_wins_and_gone_pods_are_reported(tmp_path, caplog):
    kubelet_checkpoint(tmp_path / "kubelet", {"g2": {"app": "5,13"}, "g1": {"app": "1"},
                                              "gone": {"app": "4,12"}},
                       default="0,2-3,6-11,14-15")
    p = plugin(tmp_path)
    caplog.set_level(logging.INFO, "nri_cpumgr")
    pods, ctrs = node()
    updates = p.synchronize(pods, ctrs)
    # g2 runs on 4,12 (the runtime), not 5,13 (the checkpoint): adopted as it runs
    assert p.manager.state.assignments["g2"] == {"app": CPUSet({4, 12})}
    assert "gone" not in p.manager.state.assignments
    assert "kubelet checkpoint says cpus 5,13, the runtime reports 4,12; the runtime wins" \
        in caplog.text
    assert any(r.levelno == logging.WARNING and "runtime wins" in r.message
               for r in caplog.records)
    assert "not matched: pod gone container app (cpus 4,12): its pod is gone" in caplog.text
    moved = {u.container_id for u in updates}
    assert "c-g2-app" not in moved and "c-g1-app" not in moved
    assert str(p.manager.shared_pool()) == DEFAULT


@pytest.mark.parametrize("kw, needle", [
    ({"corrupt": True}, "checksum mismatch (corrupt, or not written by a kubelet): not adopted"),
    ({"policy": "dynamic"}, "written by cpuManagerPolicy 'dynamic', which this plugin does "
     "not adopt"),
])
def test_corrupt_or_foreign_checkpoint_falls_back_to_the_runtime(tmp_path, caplog, kw, needle):
    kubelet_checkpoint(tmp_path / "kubelet", {"g2": {"app": "4,12"}, "g1": {"app": "1"}}, **kw)
    caplog.set_level(logging.INFO, "nri_cpumgr")
    p = plugin(tmp_path)
    assert needle in caplog.text
    assert p.adoption is None
    p.synchronize(*node())
    # the runtime's truth: the running container's cpuset is adopted, the exited one's
    # CPU is not known to be held
    assert p.manager.state.assignments == {"g2": {"app": CPUSet({4, 12})}}
    assert 1 in p.manager.shared_pool()


def test_memory_blocks_are_adopted(tmp_path):
    mem_cfg = ("memoryManagerPolicy: Static\n"
               "reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n")
    # a node the kubelet managed: its state as the plugin's managers compute it, written in
    # the kubelet's format
    first = plugin(tmp_path / "first", mem_cfg)
    d = first.manager.admit(container_info(pod("g2"), ctr("g2", 2000, "")))
    ms = first.manager.memory.state.to_dict()
    machine = {n: {"numberOfAssignments": s["number_of_assignments"],
                   "memoryMap": {r: {"total": t["total_mem_size"],
                                     "systemReserved": t["system_reserved"],
                                     "allocatable": t["allocatable"], "reserved": t["reserved"],
                                     "free": t["free"]} for r, t in s["memory_map"].items()},
                   "cells": s["cells"]} for n, s in ms["machine_state"].items()}
    entries = {u: {c: [{"numaAffinity": b["numa_affinity"], "type": b["type"],
                        "size": b["size"]} for b in bl] for c, bl in cs.items()}
               for u, cs in ms["assignments"].items()}
    body = {"policyName": "Static", "machineState": machine, "entries": entries}
    kd = tmp_path / "kubelet"
    kubelet_checkpoint(kd, {"g2": {"app": str(d.cpus)}},
                       default=str(CPUSet(range(16)) - d.cpus))
    (kd / "memory_manager_state").write_text(
        json.dumps({**body, "checksum": memory_checksum(body)}))
    p = plugin(tmp_path, mem_cfg)
    assert p.manager.memory.get_memory("g2", "app") == first.manager.memory.get_memory("g2", "app")
    p.synchronize([pod("g2")], [ctr("g2", 2000, str(d.cpus))])
    assert p.manager.containers["c-g2-app"].mems == d.mems
    saved = Checkpoint(tmp_path / "state" / "memory_manager_state").load()
    assert saved is not None and saved["assignments"]["g2"]["app"]


def test_v1_checkpoint_is_matched_by_container_id(tmp_path, caplog):
    d = tmp_path / "kubelet"
    d.mkdir()
    body = {"policyName": "static", "defaultCpuSet": "0,3,5-11,13-15",
            "entries": {"c-g2-app": "4,12", "c-g1-app": "1", "c-gone": "2"}}
    (d / "cpu_manager_state").write_text(json.dumps({**body,
                                                     "checksum": cpu_checksum(body, 1)}))
    caplog.set_level(logging.INFO, "nri_cpumgr")
    p = plugin(tmp_path)
    assert p.adoption is not None and p.adoption.cpu.version == 1
    assert p.synchronize(*node()) == []
    assert p.manager.state.assignments == {"g2": {"app": CPUSet({4, 12})},
                                           "g1": {"app": CPUSet({1})}}
    assert "not matched: container id c-gone (cpus 2)" in caplog.text
    assert str(p.manager.shared_pool()) == DEFAULT  # CPU 2 back in the shared pool


@pytest.mark.parametrize("data, needle", [
    ("{", "data is not JSON"),
    ("[1]", "data is not a JSON object"),
    ('{"policyName":"static","defaultCpuSet":"0-x"}', "bad cpuset in defaultCpuSet"),
    ('{"policyName":"static","defaultCpuSet":"0","podEntries":{"p":{"cpuSet":"a"}}}',
     "bad cpuset in podEntries.p"),
    ('{"policyName":"static","defaultCpuSet":"0","entries":{"p":{"c":7}}}', "cannot unmarshal"),
])
def test_v4_data_that_its_checksum_covers_but_cannot_be_read(tmp_path, data, needle):
    """A v4 file whose data matches its dataChecksum but is not CPUManagerCheckpointData:
    refused in one line naming the file (the kubelet refuses it too: no fall back)."""
    from nri_cpumgr.adopt.kubelet import data_checksum

    f = tmp_path / "cpu_manager_state"
    f.write_text(json.dumps({"policyName": "static", "defaultCpuSet": "0", "checksum": 0,
                             "data": data, "dataChecksum": data_checksum(data)}))
    with pytest.raises(KubeletCheckpointError, match=needle) as ei:
        load_cpu_state(f)
    assert str(f) in str(ei.value) and "\n" not in str(ei.value)


@pytest.mark.parametrize("field", ["entries", "baselines"])
def test_v4_data_with_a_null_map_is_an_empty_one(tmp_path, field):
    """``"entries": null`` (or baselines) in v4 data is a nil map to Go's json, as the
    kubelet reads it: no assignments (was an AttributeError, out of adoption's one-line
    refusal: the plugin's start crashed)."""
    from nri_cpumgr.adopt.kubelet import data_checksum

    data = ('{"policyName":"static","defaultCpuSet":"0-3","entries":{"u":{"c":"4"}},'
            f'"{field}":null}}')
    f = tmp_path / "cpu_manager_state"
    f.write_text(json.dumps({"policyName": "static", "defaultCpuSet": "0-3", "checksum": 0,
                             "data": data, "dataChecksum": data_checksum(data)}))
    st = load_cpu_state(f)
    assert st is not None and st.version == 4 and str(st.default_set) == "0-3"
    assert {u: {n: str(c) for n, c in cs.items()} for u, cs in st.entries.items()} == (
        {} if field == "entries" else {"u": {"c": "4"}})


def test_v4_with_empty_data_and_no_data_checksum_is_read_as_v2(tmp_path):
    """The kubelet falls back to the older formats only when data is empty and
    dataChecksum 0 (state_checkpoint.go loadAndMigrateCheckpointV4)."""
    body = {"policyName": "static", "defaultCpuSet": "0-3", "entries": {}}
    f = tmp_path / "cpu_manager_state"
    f.write_text(json.dumps({**body, "checksum": cpu_checksum(body), "data": "",
                             "dataChecksum": 0}))
    st = load_cpu_state(f)
    assert st is not None and st.version == 2 and str(st.default_set) == "0-3"
