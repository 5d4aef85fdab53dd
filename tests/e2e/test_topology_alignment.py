"""Topology Manager, Memory Manager and device NUMA alignment on a real containerd.

The plugin runs on the ``dual-socket-smt`` sysfs fixture: 2 NUMA nodes (node 0 = CPUs 0-3,8-11,
node 1 = 4-7,12-15, 8 GiB each), a PCI accelerator behind char device 240:0 on NUMA node 1 and
one behind 241:0 with no NUMA affinity. CPU 0 is reserved; the Memory Manager reserves the
kubelet's default eviction threshold (100Mi) on node 0. Containers are created, not started:
the host has 2 CPUs and one NUMA node.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc
import pytest

from tests.e2e.plugin_run import start_plugin

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "dual-socket-smt"
NODE0 = {0, 1, 2, 3, 8, 9, 10, 11}
NODE1 = {4, 5, 6, 7, 12, 13, 14, 15}

ALIGNED = {
    "topologyManagerPolicy": "single-numa-node",
    "memoryManagerPolicy": "Static",
    "reservedMemory": [{"numaNode": 0, "limits": {"memory": "100Mi"}}],
}


def cpus_of(spec_cpus: str) -> set[int]:
    from nri_cpumgr.cpuset import CPUSet

    return set(CPUSet.parse(spec_cpus))


def guaranteed(cri, name: str, cpu: str, mem: str, devices: list[str] = ()) -> str:
    res = {"cpu": cpu, "memory": mem}
    pod = cri.run_pod(name, "Guaranteed")
    if not devices:
        return cri.create_container(pod, "app", requests=res, limits=res)
    config = cri.container_config(pod, "app", res, res)
    for path in devices:
        config.devices.add(container_path="/dev/" + Path(path).name, host_path=path,
                           permissions="rw")
    resp = cri.runtime.CreateContainer(
        cri.pb.CreateContainerRequest(pod_sandbox_id=pod, config=config,
                                      sandbox_config=cri.pods[pod]), timeout=cri.timeout)
    return resp.container_id


@pytest.fixture
def accel(e2e_workdir) -> dict[str, str]:
    """Host device nodes with the fixture's PCI device numbers (the runtime reads their
    major:minor from the host file)."""
    out = {}
    for name, minor_major in (("accel0", (240, 0)), ("accel1", (241, 0))):
        path = e2e_workdir / name
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(*minor_major))
        out[name] = str(path)
    return out


def test_single_numa_node_cpus_and_mems_on_one_node(containerd, cri, e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=FIXTURE, **ALIGNED)
    try:
        cid = guaranteed(cri, "g4", "4", "1Gi")
        cpus = cpus_of(cri.spec_cpus(cid))
        mems = cri.spec_mems(cid)
        assert len(cpus) == 4
        assert cpus <= NODE0 or cpus <= NODE1
        assert mems == ("0" if cpus <= NODE0 else "1")
        # shared containers are not pinned to a node
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        assert cri.spec_mems(be) == ""
        assert cpus.isdisjoint(cpus_of(cri.spec_cpus(be)))
    finally:
        plugin.stop()


def test_single_numa_node_refuses_what_no_node_fits(containerd, cri, e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=FIXTURE, **ALIGNED)
    try:
        with pytest.raises(grpc.RpcError) as ei:
            guaranteed(cri, "g10", "10", "1Gi")  # 7 + 8 free CPUs: no single node has 10
        assert "TopologyAffinityError" in ei.value.details()
        with pytest.raises(grpc.RpcError) as ei:
            guaranteed(cri, "bigmem", "2", "9Gi")  # more memory than one node has
        assert "TopologyAffinityError" in ei.value.details()
        # the refusals left nothing allocated: a whole node is still free
        cid = guaranteed(cri, "g8", "8", "1Gi")
        assert cpus_of(cri.spec_cpus(cid)) == NODE1
        assert cri.spec_mems(cid) == "1"
    finally:
        plugin.stop()


def test_device_on_numa_1_pulls_cpus_and_mems_there(containerd, cri, e2e_workdir, accel):
    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=FIXTURE, **ALIGNED)
    try:
        cid = guaranteed(cri, "gpu", "2", "1Gi", devices=[accel["accel0"]])
        spec = cri.inspect(cid)[1]
        assert any(d.get("major") == 240 for d in spec["linux"].get("devices", []))
        cpus = cpus_of(cri.spec_cpus(cid))
        assert len(cpus) == 2 and cpus <= NODE1
        assert cri.spec_mems(cid) == "1"
        # a device without NUMA affinity gives no preference: the packed take's first
        # choice (node 0, the fuller one) is kept
        other = guaranteed(cri, "nonuma", "2", "1Gi", devices=[accel["accel1"]])
        assert cpus_of(cri.spec_cpus(other)) <= NODE0
        assert cri.spec_mems(other) == "0"
    finally:
        plugin.stop()
