"""Migration from the kubelet's static CPU manager, on a real containerd.

The node as the kubelet's static policy left it (dual-socket-smt fixture, CPU 0 reserved):
pod g2 (Guaranteed, 2 CPUs) created on CPUs 4,12; pod g1 (Guaranteed, 1 CPU) whose container
ran on CPU 1 and exited (the pod is alive: the kubelet would restart it there); a BestEffort
pod on the kubelet's default set. The kubelet's ``cpu_manager_state`` says so, in its v2
format with its checksum. The plugin starts with no checkpoint of its own: nothing moves, the
exclusive CPUs stay out of the shared pool, the next Guaranteed pod gets other CPUs, and the
exited container restarted gets its CPU back.
"""

from __future__ import annotations

import json
from pathlib import Path

from nri_cpumgr.adopt.kubelet import cpu_checksum
from nri_cpumgr.cpuset import CPUSet
from tests.e2e.plugin_run import eventually, start_plugin

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "dual-socket-smt"
DEFAULT = "0,2-3,5-11,13-15"


def create_pinned(cri, pod: str, name: str, cpus: str, res: dict | None,
                  restart_count: int = 0) -> str:
    """CreateContainer as the kubelet's static policy sends it: with its cpuset."""
    config = cri.container_config(pod, name, res, res, restart_count=restart_count)
    config.linux.resources.cpuset_cpus = cpus
    resp = cri.runtime.CreateContainer(
        cri.pb.CreateContainerRequest(pod_sandbox_id=pod, config=config,
                                      sandbox_config=cri.pods[pod]), timeout=cri.timeout)
    return resp.container_id


def test_plugin_adopts_the_kubelets_assignments(containerd, cri, e2e_workdir):
    g2 = cri.run_pod("g2", "Guaranteed")
    g1 = cri.run_pod("g1", "Guaranteed")
    be = cri.run_pod("be", "BestEffort")
    c_g2 = create_pinned(cri, g2, "app", "4,12", {"cpu": "2", "memory": "100Mi"})
    c_g1 = create_pinned(cri, g1, "app", "1", {"cpu": "1", "memory": "100Mi"})
    cri.start_container(c_g1)
    cri.stop_container(c_g1)  # exited; its pod lives on
    c_be = create_pinned(cri, be, "app", DEFAULT, None)
    uid = {p: cri.pods[p].metadata.uid for p in (g2, g1, be)}

    kdir = e2e_workdir / "kubelet"
    kdir.mkdir()
    body = {"policyName": "static", "defaultCpuSet": DEFAULT,
            "entries": {uid[g2]: {"app": "4,12"}, uid[g1]: {"app": "1"}}}
    (kdir / "cpu_manager_state").write_text(
        json.dumps({**body, "checksum": cpu_checksum(body)}))

    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=FIXTURE,
                          kubeletStateDirectory=str(kdir))
    try:
        adopted = plugin.wait_for_log(r"adopted from .*", timeout=10).group(0)
        want = "2 exclusive assignment(s) (1 of exited or not listed containers of live pods)"
        assert want in adopted, plugin.log_text()
        sync = plugin.wait_for_log(r"synchronize pods=.*", timeout=5).group(0)
        assert " updates=0 " in sync, sync
        state = e2e_workdir / "state" / "cpu_manager_state"

        def saved() -> tuple[str, dict]:
            if not state.exists():
                return "", {}
            data = json.loads(state.read_text())["data"]
            return data["defaultCpuSet"], data["entries"]

        want = (DEFAULT, {uid[g2]: {"app": "4,12"}, uid[g1]: {"app": "1"}})
        assert eventually(saved, want) == want
        # nothing moved
        assert cri.spec_cpus(c_g2) == "4,12"
        assert cri.spec_cpus(c_be) == DEFAULT
        # the next Guaranteed pod gets other CPUs (the packed take's first choice would
        # be core 1 = CPUs 1,9, held by the exited container)
        new = cri.create_container(cri.run_pod("next", "Guaranteed"), "app",
                                   requests={"cpu": "2", "memory": "100Mi"},
                                   limits={"cpu": "2", "memory": "100Mi"})
        got = set(CPUSet.parse(cri.spec_cpus(new)))
        assert len(got) == 2 and got.isdisjoint({1, 4, 12}), got
        # the kubelet restarts the exited container (same pod and name, attempt 1; the
        # exited one is removed later, by its garbage collection)
        again = cri.create_container(g1, "app", requests={"cpu": "1", "memory": "100Mi"},
                                     limits={"cpu": "1", "memory": "100Mi"}, restart_count=1)
        assert cri.spec_cpus(again) == "1"
    finally:
        plugin.stop()
