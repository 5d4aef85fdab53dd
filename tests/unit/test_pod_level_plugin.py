"""The plugin's NRI answers for pod-level resource managers and in-place resize (2-CPU
machine, CPU 0 reserved), through the real transport against a fake runtime."""

from __future__ import annotations

import pytest

from nri_cpumgr.api import nri_pb2
from tests.unit.nri_peer import PeerCallError
from tests.unit.test_runtime_plugin import STATIC, cpus_of, ctr, pod, run

# (under topologyManagerPolicy none the kubelet's scope is not relevant: no pod-wide CPUs)
POD_LEVEL = STATIC + ("topologyManagerPolicy: best-effort\ntopologyManagerScope: pod\n"
                      "featureGates: {PodLevelResources: true, PodLevelResourceManagers: true}\n")


def budget_pod(uid: str, cpus: int) -> nri_pb2.PodSandbox:
    p = pod(uid)
    r = p.linux.pod_resources
    r.cpu.shares.value = cpus * 1024
    r.cpu.quota.value = cpus * 100000
    r.cpu.period.value = 100000
    r.memory.limit.value = 1 << 28
    return p


def named(c: nri_pb2.Container, name: str, cid: str) -> nri_pb2.Container:
    c.id = cid
    c.name = name
    c.labels["io.kubernetes.container.name"] = name
    return c


def test_pod_scope_slice_then_shared_container_is_refused(workdir):  # noqa: F811
    async def body(conn, plugin):
        await conn.handshake()
        p = budget_pod("p", 1)
        main = named(ctr("p", 1000), "main", "c-main")
        resp = await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
            pod=p, container=main), nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "1"
        assert resp.adjust.linux.resources.cpu.quota.value == -1
        side = named(ctr("p", 0), "sidecar", "c-side")
        with pytest.raises(PeerCallError) as ei:
            await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
                pod=p, container=side), nri_pb2.CreateContainerResponse)
        assert "EmptyPodSharedPoolError: pod rejected" in ei.value.message
        assert plugin.manager.checkpoint()["podPools"] == {
            "p": {"bubble": "1", "podSharedPool": "", "mems": ""}}

    run(workdir, body, config=POD_LEVEL)


def test_pod_shared_container_stays_off_the_node_pool(workdir):  # noqa: F811
    async def body(conn, plugin):
        await conn.handshake()
        side = named(ctr("p", 0), "sidecar", "c-side")
        resp = await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
            pod=budget_pod("p", 1), container=side), nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "1"
        assert not resp.adjust.linux.resources.cpu.HasField("quota")
        resp = await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
            pod=pod("be", "besteffort"), container=ctr("be", 0)),
            nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "0"
        assert plugin.manager.shared_containers() == ["c-be"]

    run(workdir, body, config=POD_LEVEL)


def test_resize_with_the_gate_off_fails_the_update_with_the_kubelets_reason(workdir):  # noqa: F811
    async def body(conn, plugin):
        await conn.handshake()
        g = ctr("g", 1000)
        await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(pod=pod("g"),
                        container=g), nri_pb2.CreateContainerResponse)
        req = nri_pb2.UpdateContainerRequest(pod=pod("g"), container=g)
        req.linux_resources.CopyFrom(ctr("g", 2000).linux.resources)
        with pytest.raises(PeerCallError) as ei:
            await conn.call("UpdateContainer", req, nri_pb2.UpdateContainerResponse)
        assert ei.value.message.endswith(
            'Infeasible: Resize is infeasible for Guaranteed Pods alongside CPU Manager '
            'policy "static"')
        assert plugin.manager.state.assignments == {"g": {"app": {1}}}
        # the same count keeps the pinning, as before
        req.linux_resources.CopyFrom(ctr("g", 1000).linux.resources)
        resp = await conn.call("UpdateContainer", req, nri_pb2.UpdateContainerResponse)
        assert cpus_of(resp.update) == {"c-g": "1"}

    run(workdir, body)
