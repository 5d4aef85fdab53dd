"""Migration from the kubelet's static CPU manager, on a real containerd.

The node as the kubelet's static policy left it (dual-socket-smt fixture, CPU 0 reserved):
pod g2 (Guaranteed, 2 CPUs) created on CPUs 4,12; pod g1 (Guaranteed, 1 CPU) whose container
ran on CPU 1 and exited (the pod is alive: the kubelet would restart it there); a BestEffort
pod on the kubelet's default set. The kubelet's ``cpu_manager_state`` says so, in its v2
format with its checksum. The plugin starts with no checkpoint of its own: nothing moves, the
exclusive CPUs stay out of the shared pool, the next Guaranteed pod gets other CPUs, and the
exited container restarted gets its CPU back.

The same on a node kubelet 1.37 left, its ``cpu_manager_state`` (v4: ``data`` and
``dataChecksum``) written by the kubelet v1.37.2's own checkpoint code
(oracle/cmd/kubelet-checkpoint): a pod-level pod (bubble 5-6,13-14: a 2-CPU slice and a
fractional container on the pod shared pool) and a pod whose init container ran on CPU 1 and
exited, its app container reusing the CPU. The host has 2 CPUs and the plugin sees the
fixture's 16, so only what runs on CPU 1 is started; the others are checked in the OCI spec.
"""

from __future__ import annotations

import json
from pathlib import Path

from nri_cpumgr.adopt.kubelet import cpu_checksum
from nri_cpumgr.cpuset import CPUSet
from tests.e2e.plugin_run import eventually, start_plugin
from tests.unit.kubelet_checkpoint import write, writer_path

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


def test_plugin_adopts_a_kubelet_137_node_with_a_pod_level_pod(containerd, cri, e2e_workdir):
    writer = writer_path()
    budget = {"requests": {"cpu": "4", "memory": "400Mi"},
              "limits": {"cpu": "4", "memory": "400Mi"}}
    g2 = cri.run_pod("g2", "Guaranteed")
    gi = cri.run_pod("gi", "Guaranteed")
    pl = cri.run_pod("pl", "Guaranteed", pod_resources=budget)
    be = cri.run_pod("be", "BestEffort")
    one = {"cpu": "1", "memory": "100Mi"}
    c_g2 = create_pinned(cri, g2, "app", "4,12", {"cpu": "2", "memory": "100Mi"})
    c_init = create_pinned(cri, gi, "init", "1", one)
    cri.start_container(c_init)
    cri.stop_container(c_init)  # the init container finished
    c_app = create_pinned(cri, gi, "app", "1", one)  # reuses the init's CPU
    cri.start_container(c_app)
    c_main = create_pinned(cri, pl, "main", "5,13", {"cpu": "2", "memory": "200Mi"})
    c_side = create_pinned(cri, pl, "side", "6,14", {"cpu": "500m", "memory": "100Mi"})
    default = "0,2-3,7-11,15"
    c_be = create_pinned(cri, be, "app", default, None)
    uid = {p: cri.pods[p].metadata.uid for p in (g2, gi, pl, be)}

    kdir = e2e_workdir / "kubelet"
    write(writer, kdir, {
        "policyName": "static", "defaultCpuSet": default,
        "entries": {uid[g2]: {"app": "4,12"}, uid[gi]: {"init": "1", "app": "1"},
                    uid[pl]: {"main": "5,13", "side": "6,14"}},
        "podEntries": {uid[pl]: "5-6,13-14"}}, None)
    assert "dataChecksum" in (kdir / "cpu_manager_state").read_text()

    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=FIXTURE,
                          kubeletStateDirectory=str(kdir),
                          topologyManagerPolicy="best-effort", topologyManagerScope="pod",
                          featureGates={"PodLevelResources": True,
                                        "PodLevelResourceManagers": True})
    try:
        log = plugin.wait_for_log(r"no checkpoint of our own: .*", timeout=10).group(0)
        assert "(v4, 3 pod(s), 1 pod-level)" in log, log
        adopted = plugin.wait_for_log(r"adopted from .*", timeout=10).group(0)
        assert "4 exclusive assignment(s) (1 of exited" in adopted, plugin.log_text()
        assert "1 pod-level bubble(s) (1 container(s) in a pod shared pool)" in adopted, adopted
        sync = plugin.wait_for_log(r"synchronize pods=.*", timeout=5).group(0)
        assert " updates=0 " in sync, sync
        state = e2e_workdir / "state" / "cpu_manager_state"

        def saved() -> tuple[str, dict]:
            if not state.exists():
                return "", {}
            data = json.loads(state.read_text())["data"]
            return data["defaultCpuSet"], data["entries"]

        want = (default, {uid[g2]: {"app": "4,12"}, uid[gi]: {"app": "1", "init": "1"},
                          uid[pl]: {"<pod>": "5-6,13-14", "main": "5,13"}})
        assert eventually(saved, want) == want
        # nothing moved: the OCI specs, and the running container's cgroup and /proc
        for cid, cpus in ((c_g2, "4,12"), (c_app, "1"), (c_main, "5,13"), (c_side, "6,14"),
                          (c_be, default)):
            assert cri.spec_cpus(cid) == cpus, cid
        assert (cri.cgroup_cpus(c_app), cri.proc_cpus(c_app)) == ("1", "1")
        # the bubble is the pod's: a new fractional container of the pod gets its shared pool
        more = create_pinned(cri, pl, "more", "", {"cpu": "500m", "memory": "50Mi"})
        assert cri.spec_cpus(more) == "6,14"
        # the next Guaranteed pod gets other CPUs
        new = cri.create_container(cri.run_pod("next", "Guaranteed"), "app",
                                   requests={"cpu": "2", "memory": "100Mi"},
                                   limits={"cpu": "2", "memory": "100Mi"})
        got = set(CPUSet.parse(cri.spec_cpus(new)))
        assert len(got) == 2 and got.isdisjoint({1, 4, 5, 6, 12, 13, 14}), got
    finally:
        plugin.stop()
