"""Field reports about container and plugin restarts, replayed on a real containerd with a
kubelet-like container restart over CRI: the same sandbox and container name, attempt + 1,
the exited container removed only later (kubelet kuberuntime ``SyncPod``).

This machine has 2 CPUs; with ``reservedSystemCPUs: "0"`` CPU 1 is the only exclusive CPU, so
"the node is full" once one Guaranteed 1-CPU container holds it.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import grpc
import pytest

from tests.e2e.conftest import skip_unless_created_containers_stay_unapplied
from tests.e2e.plugin_run import start_plugin

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "dual-socket-smt"
MEM = "100Mi"
G1 = {"cpu": "1", "memory": MEM}
EXITS = ("/bin/sleep", "0.3")


def _exited(cri, cid: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while cri.container_status(cid).status.state != cri.pb.CONTAINER_EXITED:
        if time.monotonic() > deadline:
            raise AssertionError(f"container {cid} did not exit")
        time.sleep(0.05)


def _crashing_guaranteed(cri) -> tuple[str, str]:
    pod = cri.run_pod("g1", "Guaranteed")
    cid = cri.create_container(pod, "app", requests=G1, limits=G1, command=EXITS)
    cri.start_container(cid)
    assert cri.spec_cpus(cid) == "1"
    _exited(cri, cid)
    return pod, cid


def _restart(cri, pod: str, attempt: int) -> str:
    """The kubelet's restart of container "app": a new container, attempt + 1."""
    cid = cri.create_container(pod, "app", requests=G1, limits=G1, restart_count=attempt)
    cri.start_container(cid)
    return cid


def _refused(cri, name: str) -> str:
    pod = cri.run_pod(name, "Guaranteed")
    with pytest.raises(grpc.RpcError) as ei:
        cri.create_container(pod, "app", requests=G1, limits=G1)
    return ei.value.details()


def test_crashed_container_gets_its_cpus_back_under_full_pcpus_only(containerd, cri,
                                                                    e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir,
                          cpuManagerPolicyOptions={"full-pcpus-only": "true"})
    try:
        pod, old = _crashing_guaranteed(cri)
        new = _restart(cri, pod, 1)  # the exited one is still there
        assert (cri.spec_cpus(new), cri.cgroup_cpus(new), cri.proc_cpus(new)) == ("1",) * 3
        assert cri.cgroup_cfs_quota(new) == -1
        cri.remove_container(old)  # removing the exited one must not free the restarted one
        assert "SMTAlignmentError" in _refused(cri, "other")
        assert cri.cgroup_cpus(new) == "1"
    finally:
        plugin.stop()


def test_exited_containers_cpus_survive_a_plugin_restart(containerd, cri, e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir)
    try:
        pod, old = _crashing_guaranteed(cri)
        plugin.kill(signal.SIGKILL)
        plugin.wait(5)
        plugin = start_plugin(containerd, e2e_workdir)
        # the pod is alive: CPU 1 is still g1's, another Guaranteed pod cannot take it
        text = _refused(cri, "g2")
        assert "NotEnoughCPUsError" in text and "available=0" in text, text
        new = _restart(cri, pod, 1)
        assert (cri.spec_cpus(new), cri.cgroup_cpus(new), cri.proc_cpus(new)) == ("1",) * 3
        cri.remove_container(old)
        assert cri.cgroup_cpus(new) == "1"
    finally:
        plugin.stop()


def _spec_quota(cri, cid: str) -> int | None:
    return cri.inspect(cid)[1]["linux"]["resources"].get("cpu", {}).get("quota")


def test_container_leaving_exclusive_cpus_gets_its_cfs_quota_back(containerd, cri,
                                                                  e2e_workdir):
    """16-CPU fixture (containers created, not started): a 1-CPU and a 14-CPU Guaranteed
    container fill the node; then reservedSystemCPUs grows to include the small one's CPU.
    It goes to the shared pool and must get the kubelet's quota back (1 CPU x 100 ms)."""
    skip_unless_created_containers_stay_unapplied(containerd)
    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=FIXTURE)
    try:
        small = cri.create_container(cri.run_pod("small", "Guaranteed"), "app",
                                     requests=G1, limits=G1)
        big_res = {"cpu": "14", "memory": MEM}
        big = cri.create_container(cri.run_pod("big", "Guaranteed"), "app",
                                   requests=big_res, limits=big_res)
        c = cri.spec_cpus(small)
        assert len(c.split(",")) == 1 and "-" not in c, c
        big_cpus = cri.spec_cpus(big)
        assert _spec_quota(cri, small) == -1 and _spec_quota(cri, big) == -1
    finally:
        plugin.stop()
    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=FIXTURE,
                          reservedSystemCPUs=f"0,{c}")
    try:
        from nri_cpumgr.cpuset import CPUSet

        assert CPUSet.parse(cri.spec_cpus(small)) == CPUSet.parse(f"0,{c}")
        assert _spec_quota(cri, small) == 100000
        assert cri.spec_cpus(big) == big_cpus and _spec_quota(cri, big) == -1
        assert "cannot pin e2e/small" in plugin.log_text() or "cannot pin small" in \
            plugin.log_text()
    finally:
        plugin.stop()
