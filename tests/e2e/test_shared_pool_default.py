"""The shared pool with the shipped defaults on an idle node (issue 31), on a real containerd:
no sharedPoolUpdateMode and no delay in the config, so ``auto`` decides (``cri`` on 1.7.24,
2.1.9 and CRI-O, ``async`` on 2.4.2) and the default ``sharedPoolGrowDelay`` (10 s) holds.

* A deleted Guaranteed pod's CPU is back on the shared containers within
  ``sharedPoolGrowDelay`` + 2 s, with nothing else happening on the node (in ``reply`` it
  never came back: nothing carried the growth).
* A pass touches the cpuset only: a Burstable shared container's CPU shares (weight), CFS
  quota and memory limit read from its cgroup are the same after the shrink and the growth.
* No Guaranteed container's reply carries a shared container's update.

This machine has 2 CPUs; with ``reservedSystemCPUs: "0"`` CPU 1 is the only exclusive CPU.
"""

from __future__ import annotations

import re
import time

from tests.e2e.harness import cgroups
from tests.e2e.plugin_run import eventually, start_plugin

G1 = {"cpu": "1", "memory": "100Mi"}
BURSTABLE_REQ = {"cpu": "250m", "memory": "64Mi"}
BURSTABLE_LIM = {"cpu": "500m", "memory": "128Mi"}
GROW_DEFAULT = 10.0  # sharedPoolGrowDelay's default (nri_cpumgr.config.model)
SHRINK_DEFAULT = 1.0


def _limits(cri, cid: str) -> tuple[int, int, str]:
    path = cri.cgroups_path(cid)
    return (cri.cgroup_cpu_weight_or_shares(cid), cri.cgroup_cfs_quota(cid),
            cgroups.read_cgroup_file("memory", path, "memory.limit_in_bytes"))


def _wait(pred, timeout: float) -> float:
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"not reached within {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - t0


def test_idle_node_gets_released_cpus_back_with_the_defaults(containerd, cri, e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir)
    try:
        log = plugin.log_text()
        want = "async" if containerd.version == "2.4" else "cri"  # (CRI-O: "crio", cri)
        assert f"shared pool update mode {want}" in log, log[-2000:]
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        cri.start_container(be)
        bu = cri.create_container(cri.run_pod("bu", "Burstable"), "app",
                                  requests=BURSTABLE_REQ, limits=BURSTABLE_LIM)
        cri.start_container(bu)
        shared = [be, bu]
        on = lambda cpus: all(cri.cgroup_cpus(c) == cpus and cri.proc_cpus(c) == cpus  # noqa: E731
                              for c in shared)
        assert on("0-1")
        before = _limits(cri, bu)
        assert before[1] == 50000 and before[2] == str(128 << 20), before

        gpod = cri.run_pod("g", "Guaranteed")
        gid = cri.create_container(gpod, "app", requests=G1, limits=G1)
        cri.start_container(gid)
        assert cri.cgroup_cpus(gid) == "1"
        _wait(lambda: on("0"), SHRINK_DEFAULT + 5)
        assert _limits(cri, bu) == before

        cri.stop_container(gid)
        cri.remove_container(gid)
        cri.stop_pod(gpod)
        cri.remove_pod(gpod)
        t0 = time.monotonic()
        # nothing else happens on the node from here on
        grow = _wait(lambda: on("0-1"), GROW_DEFAULT + 2)
        grow += time.monotonic() - t0 - grow
        assert grow >= GROW_DEFAULT * 0.8, grow  # lazily, as configured
        assert _limits(cri, bu) == before
        def moved() -> list[tuple[str, ...]]:  # (the pass's line follows its last update)
            return re.findall(r"shared pool: (\d+) containers moved to (\S+) in (\d+) (CRI "
                              r"UpdateContainerResources|UpdateContainers) calls",
                              plugin.log_text())

        passes = eventually(lambda: [(n, cpus) for n, cpus, _, _ in moved()],
                            [("2", "0"), ("2", "0-1")])
        assert passes == [("2", "0"), ("2", "0-1")], moved()
        log = plugin.log_text()
        assert "in the reply" not in log
        assert {how for *_, how in moved()} == {
            "CRI UpdateContainerResources" if want == "cri" else "UpdateContainers"}
        print(f"\n{containerd.runtime_name} {containerd.version} ({want}): released CPU back "
              f"on the shared "
              f"containers {grow:.2f} s after the delete (sharedPoolGrowDelay "
              f"{GROW_DEFAULT:g} s); Burstable shares/quota/memory {before} unchanged")
    finally:
        plugin.stop()
