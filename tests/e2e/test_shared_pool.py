"""The shared pool on a busy node, on a real containerd: shared containers leave a new
exclusive container's CPUs within ``sharedPoolShrinkDelay`` (plus about 10 ms of runtime time
each), get released CPUs back after ``sharedPoolGrowDelay``, each with one runc update, never in
the Guaranteed container's own reply; and the invariants hold under churn with plugin kills.

This machine has 2 CPUs; with ``reservedSystemCPUs: "0"`` CPU 1 is the only exclusive CPU.
"""

from __future__ import annotations

import random
import re
import signal
import time

import grpc

from nri_cpumgr.cpuset import CPUSet
from tests.e2e.plugin_run import eventually, start_plugin

MEM = "100Mi"
G1 = {"cpu": "1", "memory": MEM}
SHARED = 8
SHRINK, GROW = 1.0, 2.0
# the shipped default (sharedPoolUpdateMode auto): CRI UpdateContainerResources calls ("cri")
# on containerd < 2.4.0, the plugin's own UpdateContainers ("async") from 2.4.0 on (issue 31)
_MOVED = re.compile(r"shared pool: (\d+) containers moved to (\S+) in (\d+) "
                    r"(?:CRI UpdateContainerResources|UpdateContainers) calls")
_MODE = re.compile(r"shared pool update mode (\w+)")


def _mode(plugin) -> str:
    """The path auto took, from the plugin's log."""
    m = _MODE.search(plugin.log_text())
    assert m is not None, plugin.log_text()[-2000:]
    return m.group(1)


def _moved(log: str) -> list[tuple[int, str]]:
    return [(int(m.group(1)), m.group(2)) for m in _MOVED.finditer(log)]


def _all_shared_on(cri, ids: list[str], cpus: str) -> bool:
    return all(cri.cgroup_cpus(c) == cpus and cri.proc_cpus(c) == cpus for c in ids)


def _wait(pred, timeout: float) -> float:
    """Seconds until ``pred()`` held (raises AssertionError after ``timeout``)."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"not reached within {timeout} s")
        time.sleep(0.02)
    return time.monotonic() - t0


def _delete_pod(cri, pod: str, cid: str) -> None:
    """As the kubelet deletes a pod: stop and remove the container, then the sandbox."""
    cri.stop_container(cid)
    cri.remove_container(cid)
    cri.stop_pod(pod)
    cri.remove_pod(pod)


def test_shared_containers_follow_within_the_bounds(containerd, cri, e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir, sharedPoolShrinkDelay=f"{SHRINK:g}s",
                          sharedPoolGrowDelay=f"{GROW:g}s", sharedPoolUpdateBatchSize=3)
    try:
        shared = []
        for i in range(SHARED):
            cid = cri.create_container(cri.run_pod(f"be{i}", "BestEffort"), "app")
            cri.start_container(cid)
            shared.append(cid)
        assert _all_shared_on(cri, shared, "0-1")

        gpod = cri.run_pod("g", "Guaranteed")
        t0 = time.monotonic()
        gid = cri.create_container(gpod, "app", requests=G1, limits=G1)
        cri.start_container(gid)
        assert (cri.spec_cpus(gid), cri.cgroup_cpus(gid), cri.proc_cpus(gid)) == ("1",) * 3
        # each shared container leaves CPU 1 once, within the bound (generous polling: the
        # runtime needs about 10 ms per update, this 2-CPU machine may be busy)
        shrink = _wait(lambda: _all_shared_on(cri, shared, "0"), SHRINK + SHARED * 0.5 + 5)
        shrink += time.monotonic() - t0 - shrink
        assert eventually(lambda: _moved(plugin.log_text()), [(SHARED, "0")]) == \
            [(SHARED, "0")]
        log = plugin.log_text()
        mode = _mode(plugin)
        # the default's path: cri before containerd 2.4 (one CRI call per container, the
        # Guaranteed container's reply carries none), async from 2.4 (batches of 3)
        assert mode == ("async" if containerd.version == "2.4" else "cri"), mode  # crio: cri
        calls = "3 UpdateContainers" if mode == "async" else \
            f"{SHARED} CRI UpdateContainerResources"
        assert re.search(rf"shared pool: {SHARED} containers moved to 0 in {calls} calls",
                         log), log[-2000:]
        assert "in the reply" not in log

        t1 = time.monotonic()
        _delete_pod(cri, gpod, gid)
        # released CPUs come back lazily: not before most of the grow delay, and within it
        # plus the runtime's time
        grow = _wait(lambda: _all_shared_on(cri, shared, "0-1"), GROW + SHARED * 0.5 + 5)
        grow += time.monotonic() - t1 - grow
        assert grow >= GROW * 0.8, grow
        assert eventually(lambda: _moved(plugin.log_text()), [(SHARED, "0"), (SHARED, "0-1")]) \
            == [(SHARED, "0"), (SHARED, "0-1")]
        print(f"\ncontainerd {containerd.version}: {SHARED} shared containers off CPU 1 after "
              f"{shrink * 1e3:.0f} ms, back after {grow * 1e3:.0f} ms")
    finally:
        plugin.stop()


def test_release_and_reallocation_within_the_grow_delay_cost_no_update(containerd, cri,
                                                                          e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir, sharedPoolShrinkDelay="500ms",
                          sharedPoolGrowDelay="30s")
    try:
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        cri.start_container(be)
        for i in range(3):  # Guaranteed pods one after another, as in a rollout
            gpod = cri.run_pod(f"g{i}", "Guaranteed")
            gid = cri.create_container(gpod, "app", requests=G1, limits=G1)
            cri.start_container(gid)
            assert cri.cgroup_cpus(gid) == "1"
            _wait(lambda: cri.cgroup_cpus(be) == "0", 10)
            _delete_pod(cri, gpod, gid)
        time.sleep(1.0)
        # one update in all: off CPU 1 for the first pod; the releases are never applied
        assert _moved(plugin.log_text()) == [(1, "0")]
        assert cri.cgroup_cpus(be) == "0"
    finally:
        plugin.stop()


def test_invariants_under_churn_with_plugin_kills(containerd, cri, e2e_workdir):
    """Random creates, deletions and SIGKILLs of the plugin: after the bound, no running
    shared container is on an exclusive CPU, and no CPU is exclusive twice."""
    rng = random.Random(20261201)
    keys = {"sharedPoolShrinkDelay": "300ms", "sharedPoolGrowDelay": "1s"}
    plugin = start_plugin(containerd, e2e_workdir, **keys)
    live: dict[str, tuple[str, bool]] = {}  # cid -> (pod, guaranteed)
    try:
        for step in range(16):
            action = rng.choice(["g", "be", "be", "delete", "kill"] if live else ["g", "be"])
            if action in ("g", "be"):
                pod = cri.run_pod(f"{action}{step}", "Guaranteed" if action == "g" else
                                  "BestEffort")
                try:
                    cid = cri.create_container(pod, "app", requests=G1 if action == "g" else {},
                                               limits=G1 if action == "g" else {})
                except grpc.RpcError as e:  # CPU 1 taken: refused, as the kubelet would
                    assert "NotEnoughCPUsError" in e.details(), e.details()
                    cri.stop_pod(pod)
                    cri.remove_pod(pod)
                    continue
                cri.start_container(cid)
                live[cid] = (pod, action == "g")
            elif action == "delete":
                cid = rng.choice(sorted(live))
                _delete_pod(cri, live.pop(cid)[0], cid)
            else:
                plugin.kill(signal.SIGKILL)
                plugin.wait(5)
                plugin = start_plugin(containerd, e2e_workdir, **keys)
            time.sleep(0.3 + 0.3 + 0.02 * len(live) + 1.0)  # the shrink bound, generously
            exclusive: list[CPUSet] = []
            for cid, (_, g) in live.items():
                cpus = CPUSet.parse(cri.cgroup_cpus(cid))
                if g:
                    assert cpus == CPUSet({1}) and cri.cgroup_cfs_quota(cid) == -1, step
                    exclusive.append(cpus)
            assert len(exclusive) <= 1, step  # never the same CPU twice
            taken = CPUSet().union(*exclusive) if exclusive else CPUSet()
            for cid, (_, g) in live.items():
                if not g:
                    cpus = CPUSet.parse(cri.cgroup_cpus(cid))
                    assert not cpus & taken, (step, cid, cpus, taken)
                    assert cpus, step
    finally:
        plugin.stop()
