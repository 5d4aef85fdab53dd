"""Pod-level resources (NRI ``pod.linux.pod_resources`` / ``pod_overhead``) in the pod model.

The messages are built the way the kubelet and containerd fill them: the kubelet computes the
CRI ``LinuxContainerResources`` (kuberuntime ``calculateLinuxResources``: shares from the
request, quota/period from the limit, memory limit), containerd converts them with nri
``FromCRILinuxResources`` (every CPU and memory field present, zero meaning unset).
"""

from __future__ import annotations

import dataclasses

import pytest
from google.protobuf import json_format

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.podmodel import QOSClass
from nri_cpumgr.podmodel.nri import (
    SHARES_PER_CPU,
    container_info,
    pod_level_resources,
)

PERIOD = 100_000
MI = 1 << 20


def kubelet_linux_resources(out: nri_pb2.LinuxResources, *, request_milli: int | None,
                            limit_milli: int | None, memory_limit: int = 0,
                            hugepages: dict[str, int] | None = None) -> None:
    """Fill ``out`` as containerd does from the kubelet's CRI resources."""
    if request_milli is None:
        request_milli = limit_milli or 0
    shares = max(2, request_milli * SHARES_PER_CPU // 1000)
    out.cpu.shares.value = shares
    out.cpu.quota.value = (limit_milli or 0) * PERIOD // 1000
    out.cpu.period.value = PERIOD
    out.memory.limit.value = memory_limit
    for size, limit in (hugepages or {}).items():
        out.hugepage_limits.add(page_size=size, limit=limit)


def make_pod(qos_parent: str = "/kubepods/burstable/poduid-1") -> nri_pb2.PodSandbox:
    p = nri_pb2.PodSandbox(id="sb1", name="web", uid="uid-1", namespace="ns")
    p.linux.cgroup_parent = qos_parent
    return p


def make_ctr(request_milli: int, limit_milli: int, memory: int) -> nri_pb2.Container:
    c = nri_pb2.Container(id="c1", pod_sandbox_id="sb1", name="app")
    kubelet_linux_resources(c.linux.resources, request_milli=request_milli,
                            limit_milli=limit_milli, memory_limit=memory)
    return c


@pytest.mark.parametrize(("req_m", "lim_m", "mem"), [
    (1500, 2000, 300 * MI),  # Burstable pod: two containers summed by the kubelet
    (4000, 4000, 1 << 30),   # Guaranteed pod of 4 CPUs
    (250, None, 0),          # requests only: no quota, no memory limit
])
def test_pod_resources_decoded(req_m: int, lim_m: int | None, mem: int) -> None:
    pod = make_pod()
    kubelet_linux_resources(pod.linux.pod_resources, request_milli=req_m, limit_milli=lim_m,
                            memory_limit=mem)
    res, ovh = pod_level_resources(pod)
    assert ovh is None
    assert res is not None
    assert res.cpu_request_milli == req_m
    assert res.cpu_limit_milli == lim_m
    assert res.memory_limit == (mem or None)
    assert res.integer_cpus == (req_m // 1000 if req_m % 1000 == 0 else 0)


def test_overhead_is_request_equals_limit_and_empty_overhead_decodes_to_nothing() -> None:
    pod = make_pod()
    kubelet_linux_resources(pod.linux.pod_resources, request_milli=1000, limit_milli=1000,
                            memory_limit=128 * MI)
    # RuntimeClass overhead 250m CPU / 120Mi: the kubelet passes it with request == limit
    kubelet_linux_resources(pod.linux.pod_overhead, request_milli=250, limit_milli=250,
                            memory_limit=120 * MI)
    res, ovh = pod_level_resources(pod)
    assert res is not None and ovh is not None
    assert (ovh.cpu_request_milli, ovh.cpu_limit_milli, ovh.memory_limit) == (250, 250, 120 * MI)
    assert res.integer_cpus == 1
    # no RuntimeClass overhead: the kubelet sends an empty message, containerd zero values
    empty = make_pod()
    empty.linux.pod_overhead.cpu.shares.value = 0
    empty.linux.pod_overhead.cpu.quota.value = 0
    empty.linux.pod_overhead.cpu.period.value = 0
    empty.linux.pod_overhead.memory.limit.value = 0
    _, ovh0 = pod_level_resources(empty)
    assert ovh0 is not None
    assert (ovh0.cpu_request_milli, ovh0.cpu_limit_milli, ovh0.memory_limit) == (None,) * 3
    assert ovh0.integer_cpus == 0 and ovh0.hugepages == {}


def test_hugepages_in_pod_resources() -> None:
    pod = make_pod("/kubepods/poduid-1")
    kubelet_linux_resources(pod.linux.pod_resources, request_milli=2000, limit_milli=2000,
                            memory_limit=256 * MI, hugepages={"2MB": 64 * MI, "1GB": 2 << 30})
    res, _ = pod_level_resources(pod)
    assert res is not None
    assert res.hugepages == {"hugepages-2Mi": 64 * MI, "hugepages-1Gi": 2 << 30}


def test_absent_when_runtime_does_not_pass_them() -> None:
    assert pod_level_resources(make_pod()) == (None, None)
    assert pod_level_resources(nri_pb2.PodSandbox(id="x")) == (None, None)
    info = container_info(make_pod(), make_ctr(500, 1000, 64 * MI))
    assert info.pod_resources is None and info.pod_overhead is None


def test_container_info_carries_pod_level_resources() -> None:
    pod = make_pod()
    kubelet_linux_resources(pod.linux.pod_resources, request_milli=1500, limit_milli=3000,
                            memory_limit=512 * MI)
    kubelet_linux_resources(pod.linux.pod_overhead, request_milli=100, limit_milli=100,
                            memory_limit=32 * MI)
    ctr = make_ctr(500, 1000, 64 * MI)
    info = container_info(pod, ctr)
    # the container's own resources are unchanged by the pod's
    assert (info.resources.cpu_request_milli, info.resources.cpu_limit_milli) == (500, 1000)
    assert info.qos is QOSClass.BURSTABLE
    assert info.pod_resources is not None and info.pod_overhead is not None
    assert (info.pod_resources.cpu_request_milli, info.pod_resources.cpu_limit_milli,
            info.pod_resources.memory_limit) == (1500, 3000, 512 * MI)
    assert info.pod_overhead.cpu_limit_milli == 100
    # copied out: changing the request afterwards does not change the info; info is frozen
    pod.linux.pod_resources.cpu.quota.value = 1
    assert info.pod_resources.cpu_limit_milli == 3000
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.pod_resources = None  # type: ignore[misc]


def test_from_runtime_json() -> None:
    """The JSON form of a PodSandbox as the runtime sends it (Optional* wrappers)."""
    doc = {
        "id": "sb2", "name": "db", "uid": "uid-2", "namespace": "ns",
        "linux": {
            "cgroupParent": "/kubepods/poduid-2",
            "podResources": {"cpu": {"shares": {"value": "2048"}, "quota": {"value": "200000"},
                                     "period": {"value": "100000"}},
                             "memory": {"limit": {"value": str(400 * MI)}}},
        },
    }
    pod = json_format.ParseDict(doc, nri_pb2.PodSandbox())
    res, ovh = pod_level_resources(pod)
    assert ovh is None and res is not None
    assert (res.cpu_request_milli, res.cpu_limit_milli, res.memory_limit, res.integer_cpus) == (
        2000, 2000, 400 * MI, 2)
