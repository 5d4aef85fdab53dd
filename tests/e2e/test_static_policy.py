"""The static CPU policy on a real containerd, driven through CRI as the kubelet drives it.

Every check reads the three places a cpuset shows: the OCI spec, the cgroup and
/proc/<pid>/status (NRI failures are silent: the CRI call succeeds without the adjustment).
This machine has 2 CPUs; with ``reservedSystemCPUs: "0"`` CPU 1 is the only exclusive CPU.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from tests.e2e.conftest import skip_unless_created_containers_stay_unapplied
from tests.e2e.harness import cgroups
from tests.e2e.plugin_run import eventually, start_plugin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
MEM = "200Mi"

# The docs' examples (Kubernetes "Control CPU Management Policies on the Node", static policy)
SHARED_PODS = {
    "besteffort": ("BestEffort", {}, {}),
    "burstable-mem": ("Burstable", {"memory": "100Mi"}, {"memory": MEM}),
    "burstable-cpu": ("Burstable", {"cpu": "500m"}, {"cpu": "1"}),
    "guaranteed-frac": ("Guaranteed", {"cpu": "1500m", "memory": MEM},
                        {"cpu": "1500m", "memory": MEM}),
}


def where(cri, cid: str, running: bool = True) -> tuple[str, ...]:
    """(spec, cgroup, /proc) cpus of a container."""
    if not running:
        return (cri.spec_cpus(cid),)
    return (cri.spec_cpus(cid), cri.cgroup_cpus(cid), cri.proc_cpus(cid))


def make(cri, name: str, qos: str, req: dict, lim: dict, start: bool = True) -> str:
    pod = cri.run_pod(name, qos)
    cid = cri.create_container(pod, "app", requests=req, limits=lim)
    if start:
        cri.start_container(cid)
    return cid


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exposed")


def test_docs_static_policy_scenario(containerd, cri, e2e_workdir):
    online = cgroups.host_online_cpus()
    assert online == "0-1", f"this scenario needs a 2-CPU host, have {online}"
    port = free_port()
    # CPUs released by an exclusive container come back to the shared containers after
    # sharedPoolGrowDelay (default 10 s): 1 s here
    # the growth on an idle node comes with the shipped sharedPoolUpdateMode (auto: CRI
    # UpdateContainerResources calls on containerd 1.7.24 / 2.1.9, the plugin's own
    # UpdateContainers on 2.4.2; issue 31, docs/concepts/nri-lock-order.md)
    plugin = start_plugin(containerd, e2e_workdir, metricsAddress=f"127.0.0.1:{port}",
                          sharedPoolGrowDelay="1s")
    ready = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
    assert ready.status == 200
    try:
        shared = {n: make(cri, n, *spec) for n, spec in SHARED_PODS.items()}
        for n, cid in shared.items():
            assert where(cri, cid) == ("0-1",) * 3, n

        g1_pod = cri.run_pod("guaranteed-1", "Guaranteed")
        g1 = cri.create_container(g1_pod, "app", requests={"cpu": "1", "memory": MEM},
                                  limits={"cpu": "1", "memory": MEM})
        cri.start_container(g1)
        assert where(cri, g1) == ("1", "1", "1")
        assert cri.cgroup_cfs_quota(g1) == -1  # exclusive CPUs: no CFS quota
        # the same CreateContainer reply moved every running shared container to CPU 0
        for n, cid in shared.items():
            assert eventually(lambda c=cid: where(cri, c)[1:], ("0", "0")) == ("0", "0"), n
            assert cri.spec_cpus(cid) in ("0", "0-1"), n  # 1.7 keeps the create-time spec
        assert cri.cgroup_cfs_quota(shared["burstable-cpu"]) == 100000  # shared keep quota

        # Guaranteed, limits only: refused while CPU 1 is taken, with the numbers
        lo_pod = cri.run_pod("guaranteed-limits-only", "Guaranteed")
        with pytest.raises(grpc.RpcError) as ei:
            cri.create_container(lo_pod, "app", limits={"cpu": "1", "memory": MEM})
        text = ei.value.details()
        assert "not enough cpus available" in text and "requested=1, available=0" in text

        # delete the first: CPU 1 returns to the shared pool
        cri.stop_container(g1)
        cri.remove_container(g1)
        cri.stop_pod(g1_pod)
        cri.remove_pod(g1_pod)
        for n, cid in shared.items():
            got = eventually(lambda c=cid: where(cri, c)[1:], ("0-1", "0-1"))
            assert got == ("0-1", "0-1"), n

        lo = cri.create_container(lo_pod, "app", limits={"cpu": "1", "memory": MEM})
        cri.start_container(lo)
        assert where(cri, lo) == ("1", "1", "1")
        for n, cid in shared.items():
            assert eventually(lambda c=cid: where(cri, c)[1:], ("0", "0")) == ("0", "0"), n
        # two integer Guaranteed admissions and one refusal, as the kubelet counts them
        assert metric(port, "cpu_manager_pinning_requests_total") == 3
        assert metric(port, "cpu_manager_pinning_errors_total") == 1
        assert metric(port, "cpu_manager_exclusive_cpu_allocation_count") == 1
        assert metric(port, "cpu_manager_shared_pool_size_millicores") == 1000
    finally:
        plugin.stop()
    log = plugin.log_text()
    assert "qos=Guaranteed cpus=1 exclusive=true" in log
    assert "qos=BestEffort cpus=0-1 exclusive=false" in log


def test_topology_aware_choice_on_dual_socket_fixture(containerd, cri, e2e_workdir):
    """2 sockets x 4 cores x 2 threads (siblings n, n+8; socket 0 = 0-3,8-11). Reserved CPU 0.
    Containers are created, not started (the host has only 2 CPUs)."""
    skip_unless_created_containers_stay_unapplied(containerd)
    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=FIXTURES / "dual-socket-smt")
    try:
        g = {"cpu": "2", "memory": MEM}
        two = make(cri, "g2", "Guaranteed", g, g, start=False)
        # a whole core on the socket with fewer free CPUs (socket 0: CPU 0 is reserved)
        assert cri.spec_cpus(two) == "1,9"
        g1 = {"cpu": "1", "memory": MEM}
        one = make(cri, "g1", "Guaranteed", g1, g1, start=False)
        # a single CPU fills the half-used core of the reserved CPU first
        assert cri.spec_cpus(one) == "8"
        g8 = {"cpu": "8", "memory": MEM}
        eight = make(cri, "g8", "Guaranteed", g8, g8, start=False)
        assert cri.spec_cpus(eight) == "4-7,12-15"  # a whole socket
        be = make(cri, "be", "BestEffort", {}, {}, start=False)
        assert cri.spec_cpus(be) == "0,2-3,10-11"
        g5 = {"cpu": "5", "memory": MEM}
        pod = cri.run_pod("g5", "Guaranteed")
        with pytest.raises(grpc.RpcError) as ei:
            cri.create_container(pod, "app", requests=g5, limits=g5)
        assert "requested=5, available=4" in ei.value.details()
        assert cri.spec_cpus(be) == "0,2-3,10-11"  # a refusal changes nothing
    finally:
        plugin.stop()


def test_sigkill_and_restart_keeps_cpus(containerd, cri, e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir)
    g = {"cpu": "1", "memory": MEM}
    gid = make(cri, "g", "Guaranteed", g, g)
    be = make(cri, "be", "BestEffort", {}, {})
    assert where(cri, gid) == ("1", "1", "1")
    assert eventually(lambda: where(cri, be)[1:], ("0", "0")) == ("0", "0")
    plugin.kill(signal.SIGKILL)
    plugin.wait(5)

    # while the plugin is away, containerd creates containers without adjustments
    late_be = make(cri, "late-be", "BestEffort", {}, {})
    assert cri.cgroup_cpus(late_be) == "0-1"

    plugin2 = start_plugin(containerd, e2e_workdir)
    try:
        assert where(cri, gid) == ("1", "1", "1")
        assert cri.cgroup_cfs_quota(gid) == -1
        # the Synchronize reply fixed the container created while the plugin was away
        assert eventually(lambda: cri.cgroup_cpus(late_be), "0") == "0"
        assert cri.proc_cpus(late_be) == "0"
        assert where(cri, be)[1:] == ("0", "0")
        def status() -> dict:
            out = subprocess.run(
                [sys.executable, "-m", "nri_cpumgr", "status", "--json",
                 "--state-dir", str(e2e_workdir / "state")],
                capture_output=True, text=True, check=True,
            )
            return json.loads(out.stdout)

        # the checkpoint is rewritten right after the Synchronize reply (on a writer thread)
        state = status()
        deadline = time.monotonic() + 5
        while "e2e/g" not in {r["pod"] for r in state["containers"]} and \
                time.monotonic() < deadline:
            time.sleep(0.1)
            state = status()
        assert state["defaultCpuSet"] == "0"
        pod_uid = cri.container_status(gid).status.labels["io.kubernetes.pod.uid"]
        assert state["entries"] == {pod_uid: {"app": "1"}}
        rows = {r["pod"]: r for r in state["containers"]}
        assert rows["e2e/g"]["cpus"] == "1" and rows["e2e/g"]["exclusive"]
        assert rows["e2e/late-be"]["cpus"] == "0" and not rows["e2e/late-be"]["exclusive"]
        assert "synchronize pods=" in plugin2.log_text()
    finally:
        plugin2.stop()
