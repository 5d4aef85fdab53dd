"""The plugin SIGKILLed right after each kind of state change, relaunched: after its
Synchronize every container must be on what the runtime last applied, and the shared pool
whole, nothing assigned twice (issue 25: a resize undone by a stale checkpoint).

The checkpoint is written up to ``CHECKPOINT_LINGER`` (0.2 s) after a reply, so a kill in
that window leaves one older than what the runtime applied; the runtime's report is the
newer evidence (nri_cpumgr.cm.container_manager ``synchronize``).

Most cases run on a 12-CPU topology written for the test (the kubelet's
``topoDualSocketHT``: sockets/NUMA nodes = the even and the odd CPUs, core i = CPUs i and
i+6; CPU 0 reserved): a Guaranteed 2-CPU container gets 2,8 and grown to 4 takes 4,10. The
host has 2 CPUs, so those containers are created, not started, and checked in the OCI spec
the runtime keeps (as test_pod_level.py does). The init-container case runs on the host's
own CPUs with started containers, checked in spec, cgroup and /proc.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nri_cpumgr.checkpoint import Checkpoint
from nri_cpumgr.cpuset import CPUSet
from tests.e2e.harness.fakeapi import FakeAPIServer
from tests.e2e.harness.kubelet_cri import k8s_pod
from tests.e2e.plugin_run import eventually, start_plugin

ALL = CPUSet(range(12))
RESERVED = CPUSet({0})
RESIZE = {"InPlacePodVerticalScalingExclusiveCPUs": True}
POD_LEVEL = {"PodLevelResources": True, "PodLevelResourceManagers": True}
MEM = "128Mi"
#: seconds between the change's CRI call returning and the SIGKILL (the checkpoint of the
#: change is written 0.2 s after the reply: 0.1 s is inside that window)
KILL_AFTER = 0.1


def g(cpu: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": MEM}


class Node:
    """The plugin on one containerd, killed and relaunched with the same configuration."""

    def __init__(self, containerd: Any, cri: Any, workdir: Path, **keys: Any) -> None:
        self.containerd, self.cri, self.workdir, self.keys = containerd, cri, workdir, keys
        self.plugin = start_plugin(containerd, workdir, **keys)

    def kill_and_relaunch(self, after: float = KILL_AFTER) -> None:
        time.sleep(after)
        self.plugin.kill(signal.SIGKILL)
        self.plugin.wait(10)
        self.plugin = start_plugin(self.containerd, self.workdir, **self.keys)

    def stop(self) -> None:
        self.plugin.stop()

    def spec(self, cid: str) -> CPUSet:
        return CPUSet.parse(self.cri.spec_cpus(cid))

    def checkpoint(self) -> dict[str, Any]:
        return Checkpoint(self.workdir / "state" / "cpu_manager_state").load() or {}

    def check(self, exclusive: dict[str, CPUSet], shared: list[str],
              pinned: dict[str, CPUSet] | None = None, taken: CPUSet | None = None,
              every: CPUSet = ALL) -> None:
        """After the relaunch: each ``exclusive`` container still on its cpuset (what the
        runtime applied before the kill), each ``pinned`` one (a pod's shared pool) too, the
        node's ``shared`` containers on ``every`` CPU minus the exclusive ones and ``taken``
        (pod bubbles, containers not checked), the exclusive sets disjoint, the checkpoint
        saying the same."""
        got = {cid: self.spec(cid) for cid in exclusive}
        assert got == exclusive, self.plugin.log_text()[-3000:]
        for cid, cpus in (pinned or {}).items():
            assert self.spec(cid) == cpus, cid
        taken = taken or CPUSet()
        held = CPUSet()
        for cpus in exclusive.values():
            assert not cpus & held, exclusive
            held = held | cpus
        pool = every - held - taken
        assert RESERVED <= pool
        for cid in shared:
            assert eventually(lambda c=cid: self.spec(c), pool, timeout=15) == pool, \
                self.plugin.log_text()[-3000:]
        assert eventually(lambda: self.checkpoint().get("defaultCpuSet"), str(pool),
                          timeout=10) == str(pool)
        entries = self.checkpoint()["entries"]
        in_checkpoint = CPUSet()
        for conts in entries.values():
            for text in conts.values():  # (a pod's bubble, "<pod>", holds its slices)
                in_checkpoint = in_checkpoint | CPUSet.parse(text)
        assert in_checkpoint == held | taken, entries


@pytest.fixture
def node_on(containerd, cri, e2e_workdir) -> Iterator[Callable[..., Node]]:
    made: list[Node] = []

    def make(**keys: Any) -> Node:
        n = Node(containerd, cri, e2e_workdir, **keys)
        made.append(n)
        return n

    yield make
    for n in made:
        n.stop()


def _shared(cri, name: str = "be") -> str:
    return cri.create_container(cri.run_pod(name, "BestEffort"), "app")


def test_issue_sequence_resize_4_then_2_killed_at_any_moment_after_the_shrink(
        node_on, cri, twelve_cpus):
    """2,8 -> 2,4,8,10 -> 2,8 through CRI UpdateContainerResources, SIGKILL at several
    delays after the shrink: always back on 2,8 with the shared pool whole."""
    node = node_on(sysfs_root=twelve_cpus, featureGates=RESIZE)
    pod = cri.run_pod("resize", "Guaranteed")
    cid = cri.create_container(pod, "app", requests=g("2"), limits=g("2"))
    be = _shared(cri)
    assert node.spec(cid) == CPUSet({2, 8})
    for delay in (0.0, 0.05, 0.1, 0.15, 0.3, 1.0):
        cri.update_container_resources(cid, g("4"), g("4"), "Guaranteed")
        assert node.spec(cid) == CPUSet({2, 4, 8, 10})
        time.sleep(0.5)  # the grown state is checkpointed
        cri.update_container_resources(cid, g("2"), g("2"), "Guaranteed")
        assert node.spec(cid) == CPUSet({2, 8})
        node.kill_and_relaunch(after=delay)
        node.check({cid: CPUSet({2, 8})}, [be])


def test_kill_after_allocation(node_on, cri, twelve_cpus):
    node = node_on(sysfs_root=twelve_cpus)
    be = _shared(cri)
    first = cri.create_container(cri.run_pod("g1", "Guaranteed"), "app", requests=g("2"),
                                 limits=g("2"))
    time.sleep(0.5)
    second = cri.create_container(cri.run_pod("g2", "Guaranteed"), "app", requests=g("4"),
                                  limits=g("4"))
    exclusive = {first: node.spec(first), second: node.spec(second)}
    assert [len(c) for c in exclusive.values()] == [2, 4]
    node.kill_and_relaunch()
    node.check(exclusive, [be])


def test_kill_after_release(node_on, cri, twelve_cpus):
    """A container removed from a pod that lives on: a Synchronize cannot show it
    (containerd lists no exited container either), so the release must be on disk already.
    (A pod sandbox stopped: test_kill_after_init_container_reuse_and_pod_stop.)"""
    node = node_on(sysfs_root=twelve_cpus)
    be = _shared(cri)
    pod = cri.run_pod("two", "Guaranteed")
    keep = cri.create_container(pod, "one", requests=g("2"), limits=g("2"))
    gone = cri.create_container(pod, "two", requests=g("2"), limits=g("2"))
    other = cri.run_pod("other", "Guaranteed")
    held = node.spec(cri.create_container(other, "app", requests=g("4"), limits=g("4")))
    kept = node.spec(keep)
    time.sleep(0.5)
    cri.remove_container(gone)
    node.kill_and_relaunch()
    node.check({keep: kept}, [be], taken=held)


@pytest.mark.parametrize("grow", [True, False], ids=["resize-up", "resize-down"])
def test_kill_after_resize(node_on, cri, twelve_cpus, grow):
    node = node_on(sysfs_root=twelve_cpus, featureGates=RESIZE)
    be = _shared(cri)
    pod = cri.run_pod("resize", "Guaranteed")
    cid = cri.create_container(pod, "app", requests=g("2"), limits=g("2"))
    if not grow:
        cri.update_container_resources(cid, g("4"), g("4"), "Guaranteed")
    time.sleep(0.5)
    cri.update_container_resources(cid, g("4" if grow else "2"), g("4" if grow else "2"),
                                   "Guaranteed")
    want = CPUSet({2, 4, 8, 10}) if grow else CPUSet({2, 8})
    assert node.spec(cid) == want
    node.kill_and_relaunch()
    node.check({cid: want}, [be])
    # the promised CPUs survived: a shrink (after a grow) ends on the admitted ones
    if not grow:
        cri.update_container_resources(cid, g("4"), g("4"), "Guaranteed")
    cri.update_container_resources(cid, g("2"), g("2"), "Guaranteed")
    assert node.spec(cid) == CPUSet({2, 8})


def test_kill_after_pod_level_slice(node_on, cri, twelve_cpus):
    """Pod scope, a 4-CPU budget: a sidecar on the pod's shared pool and main-app's exclusive
    2-CPU slice (both decided when the pod is admitted whole at the sidecar), then the kill."""
    # the pod spec from a loopback fake API server: the harness sends the resource-less sidecar
    # the pod's limits, as a kubelet with PodLevelResources does (issue 26)
    api = FakeAPIServer("e2e-node").__enter__()
    try:
        node = node_on(sysfs_root=twelve_cpus, featureGates=POD_LEVEL,
                       topologyManagerPolicy="single-numa-node", topologyManagerScope="pod",
                       podSpecSource="apiServer", apiServerURL=api.url, nodeName="e2e-node")
        node.plugin.wait_for_log("pod spec source: 0 pods of node", timeout=10)
        _kill_after_pod_level_slice(node, cri, api)
    finally:
        api.close()


def _kill_after_pod_level_slice(node, cri, api) -> None:
    be = _shared(cri)
    budget = {"requests": {"cpu": "4", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "1Gi"}}
    pod = cri.run_pod("bubble", "Guaranteed", pod_resources=budget)
    meta = cri.pods[pod].metadata
    api.add(k8s_pod(meta.name, meta.uid,
                    [("sidecar", None, None), ("main-app", g("2"), g("2"))],
                    pod_resources=budget, namespace=meta.namespace))
    side = cri.create_container(pod, "sidecar")
    # the pod admitted whole at its first container (its spec is known): the sidecar gets
    # the pod's shared pool at once, the bubble less main-app's slice, as the kubelet does
    pool = node.spec(side)
    main = cri.create_container(pod, "main-app", requests=g("2"), limits=g("2"))
    slice_ = node.spec(main)
    bubble = pool | slice_
    assert len(slice_) == 2 and len(pool) == 2 and len(bubble) == 4
    assert node.spec(side) == bubble - slice_
    node.kill_and_relaunch()
    node.check({main: slice_}, [be], pinned={side: bubble - slice_}, taken=bubble)


def test_kill_after_init_container_reuse_and_pod_stop(node_on, cri):
    """On the host's CPUs (CPU 0 reserved, CPU 1 the only exclusive one): an init container
    holds CPU 1 and exits; the app container reuses it; the kill. The app keeps CPU 1 in
    spec, cgroup and /proc, the shared container keeps CPU 0. Then the pod sandbox is
    stopped (its containers exit; the sandbox is still listed until it is removed) and the
    kill: CPU 1 is the shared container's again."""
    from tests.e2e.harness import cgroups

    if cgroups.host_online_cpus() != "0-1":
        pytest.skip(f"needs a 2-CPU host, have {cgroups.host_online_cpus()}")
    node = node_on()
    be = _shared(cri)
    cri.start_container(be)
    pod = cri.run_pod("init", "Guaranteed")
    init = cri.create_container(pod, "init", requests=g("1"), limits=g("1"),
                                command=("/bin/sleep", "0.2"))
    cri.start_container(init)
    deadline = time.monotonic() + 10
    while cri.container_status(init).status.state != cri.pb.CONTAINER_EXITED:
        assert time.monotonic() < deadline, "the init container did not exit"
        time.sleep(0.05)
    time.sleep(0.5)  # its exit is checkpointed
    app = cri.create_container(pod, "app", requests=g("1"), limits=g("1"))
    cri.start_container(app)
    assert cri.spec_cpus(app) == "1"
    node.kill_and_relaunch()
    node.check({app: CPUSet({1})}, [be], every=CPUSet({0, 1}))
    assert (cri.cgroup_cpus(app), cri.proc_cpus(app)) == ("1", "1")
    assert eventually(lambda: cri.cgroup_cpus(be), "0", timeout=10) == "0"
    # the relaunched plugin writes its checkpoint after its reply: until then the file is
    # the killed instance's ({"init": "1"} when the kill beat the app's write)
    assert eventually(lambda: list(node.checkpoint()["entries"].values()), [{"app": "1"}],
                      timeout=10) == [{"app": "1"}]
    cri.stop_pod(pod)
    node.kill_and_relaunch()
    node.check({}, [be], every=CPUSet({0, 1}))
    assert eventually(lambda: cri.cgroup_cpus(be), "0-1", timeout=10) == "0-1"
