"""Synchronize decides the plain shared containers from four strings and builds their records
after the reply (issue 9): the decisions, the tracked state and the checkpoint must be exactly
those of the full path, on a mixed node."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.config import parse_config
from nri_cpumgr.runtime.plugin import Plugin
from nri_cpumgr.topology import CPUInfo, CPUTopology, Machine
from tests.unit.nri_peer import nri_container, nri_pod

# 8 CPUs: 2 sockets x 2 cores x 2 threads
MACHINE = Machine(CPUTopology.from_details(
    {c: CPUInfo(c // 4, c // 4, c // 2) for c in range(8)}))
STATIC = 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'




def plugin(workdir: Path, name: str, fast: bool) -> Plugin:
    state = workdir / name
    p = Plugin(parse_config(STATIC + f"stateDirectory: {state}\n"), MACHINE)
    if not fast:
        p.manager.plain_shared_possible = lambda: False  # type: ignore[method-assign]
    p.configure(nri_pb2.ConfigureRequest(runtime_name="test"))
    return p


def node(extra: int = 0) -> tuple[list[nri_pb2.PodSandbox], list[nri_pb2.Container]]:
    pods, ctrs = [], []

    def add(uid: str, qos: str, cpus_m: int = 0, cpus: str = "", **kw) -> nri_pb2.Container:
        pods.append(nri_pod(uid, qos))
        c = nri_container(uid, cpus_m, cpus, **kw)
        ctrs.append(c)
        return c

    add("be-on-pool", "besteffort", cpus="0-7")
    add("be-wrong", "besteffort", cpus="1")
    add("bu-unset", "burstable", 500)
    add("g-admit", "", 2000, cpus="0-7")
    add("g-adopt", "", 1000, cpus="5")
    dev = add("be-device", "besteffort", cpus="0-7")
    dev.linux.devices.add(type="c", major=1, minor=3)
    add("be-stopped", "besteffort", cpus="2", state=nri_pb2.CONTAINER_STOPPED)
    orphan = nri_container("no-such-pod", cpus="3")
    ctrs.append(orphan)
    # unset message fields (read as their empty defaults by the plain path)
    add("be-no-linux", "besteffort").ClearField("linux")
    add("be-no-resources", "besteffort", cpus="1").linux.ClearField("resources")
    add("pod-no-linux", "besteffort", cpus="0-7")
    pods[-1].ClearField("linux")
    for i in range(extra):
        add(f"be-{i}", "besteffort", cpus="0-7" if i % 2 else "4-7")
    return pods, ctrs


def decided(updates: list[nri_pb2.ContainerUpdate]) -> list[tuple[str, str, str, int]]:
    out = []
    for u in updates:
        cpu = u.linux.resources.cpu
        out.append((u.container_id, cpu.cpus, cpu.mems,
                    cpu.quota.value if cpu.HasField("quota") else 0))
    return sorted(out)


def observed(p: Plugin) -> tuple:
    body = p.manager.checkpoint()
    return (p.manager.rows(), body["entries"], body["defaultCpuSet"],
            sorted(p.manager.shared_containers()), p.manager.shared_pool())


def test_plain_containers_decide_and_track_as_the_full_path(workdir: Path) -> None:
    fast, full = plugin(workdir, "fast", True), plugin(workdir, "full", False)
    try:
        for extra in (0, 12):  # a first Synchronize, then a reconnect with more containers
            pods, ctrs = node(extra)
            a = fast.synchronize(pods, ctrs)
            b = full.synchronize(pods, ctrs)
            assert decided(a) == decided(b)
            assert observed(fast) == observed(full)
        ids = {u[0] for u in decided(a)}
        assert "c-be-wrong" in ids and "c-bu-unset" in ids and "c-g-admit" in ids
        assert "c-be-stopped" not in ids and "c-no-such-pod" not in ids
        # then the same create on both
        req = nri_pb2.CreateContainerRequest(pod=nri_pod("g-new"),
                                             container=nri_container("g-new", 1000))
        ra, rb = fast.create_container(req), full.create_container(req)
        assert ra.adjust.linux.resources.cpu.cpus == rb.adjust.linux.resources.cpu.cpus != ""
        assert observed(fast) == observed(full)
    finally:
        fast.close()
        full.close()


def test_records_are_built_after_the_reply_and_before_the_next_request(workdir: Path) -> None:
    fast = plugin(workdir, "fast", True)
    pods, ctrs = node(4)

    async def body() -> None:
        fast.synchronize(pods, ctrs)
        # the reply is out; the plain containers' records are not built yet
        assert "c-be-on-pool" not in fast.manager.containers
        # a request handled before the loop came round finishes them first
        fast.stop_container(nri_pb2.StopContainerRequest(
            pod=nri_pod("be-wrong", "besteffort"),
            container=nri_container("be-wrong", cpus="1", state=nri_pb2.CONTAINER_STOPPED)))
        assert "c-be-on-pool" in fast.manager.containers
        fast.synchronize(pods, ctrs)
        assert "c-be-0" not in fast.manager.containers
        await asyncio.sleep(0)  # the loop comes round: built
        assert "c-be-0" in fast.manager.containers
        assert fast.manager.containers["c-be-0"].info.qos.value == "BestEffort"

    try:
        asyncio.run(body())
    finally:
        fast.close()


def test_synchronize_updates_built_from_shared_shapes_are_each_containers_own() -> None:
    """Synchronize's updates are copies of one message per (cpus, exclusive, quota, mems)
    with the container's id set (issue 34): each is what the update built alone is, byte
    for byte, and none shares a container id or a field with another."""
    from nri_cpumgr.cm.records import Decision
    from nri_cpumgr.cpuset import CPUSet
    from nri_cpumgr.runtime.plugin import _update

    pool, two, numa = CPUSet.parse("0,4-7"), CPUSet.parse("2-3"), CPUSet.parse("1")
    decisions = [
        Decision("a", pool), Decision("b", pool), Decision("c", two, exclusive=True),
        Decision("d", two, exclusive=True, mems=numa), Decision("e", pool, quota=150000),
        Decision("f", pool, quota=150000), Decision("g", None, quota=50000),
        Decision("h", pool, mems=numa), Decision("i", pool),
    ]
    shapes: dict = {}
    built = [_update(d, shapes) for d in decisions]
    assert [u.SerializeToString() for u in built] == \
        [_update(d).SerializeToString() for d in decisions]
    assert [u.container_id for u in built] == list("abcdefghi")
    assert len(shapes) == 6  # pool; two exclusive; + mems; pool + quota; quota alone; + mems
    built[0].linux.resources.cpu.cpus = "9"  # (a copy: the next one from that shape is not it)
    assert _update(Decision("j", pool), shapes).linux.resources.cpu.cpus == "0,4-7"
    assert built[1].linux.resources.cpu.cpus == "0,4-7"
    assert built[2].linux.resources.cpu.quota.value == -1
    assert not built[0].linux.resources.cpu.HasField("quota")
