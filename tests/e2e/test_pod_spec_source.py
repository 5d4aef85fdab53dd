"""Pods with and without ``.spec.resources`` sent with the kubelet's REAL requests (from
oracle/cmd/kubelet-cri: the kubelet v1.37.2's kuberuntime, PodLevelResources on as by
default), the plugin reading the pod specs from a loopback fake API server
(podSpecSource: apiServer), gates off and on, on a real containerd (1.7 and 2.1); and the
admission of a Guaranteed pod when its sandbox starts.

The kubelet sends a container without its own resources, in a pod with ``.spec.resources``,
the pod's limits: from NRI alone such a container looks like one asking for the whole pod
budget. The plugin runs on the ``dual-socket-smt`` sysfs fixture (NUMA node 0 = CPUs
0-3,8-11, node 1 = 4-7,12-15; CPU 0 reserved); containers are created, not started, and
checked in the OCI spec.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nri_cpumgr.checkpoint import Checkpoint
from nri_cpumgr.cpuset import CPUSet
from tests.e2e.harness import kubelet_cri
from tests.e2e.harness.fakeapi import FakeAPIServer
from tests.e2e.harness.kubelet_cri import k8s_pod
from tests.e2e.plugin_run import eventually, start_plugin

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "dual-socket-smt"
NODE0 = CPUSet.parse("0-3,8-11")
NODE1 = CPUSet.parse("4-7,12-15")
ALL = CPUSet(range(16))
NODE = "e2e-node"
GATES = {"PodLevelResources": True, "PodLevelResourceManagers": True}
G4 = {"cpu": "4", "memory": "256Mi"}
BUDGET4 = {"requests": G4, "limits": G4}

#: the issue's pod: 4 CPUs at the pod level, two containers without resources
TWO_SHARED = k8s_pod("two-shared", "0000000a-0000-4000-8000-000000000001",
                     [("side-a", None, None), ("side-b", None, None)], pod_resources=BUDGET4)
#: the look-alikes: the same NRI requests, different kubelet decisions
LOOK_POD = k8s_pod("look-pod-level", "0000000a-0000-4000-8000-000000000002",
                   [("app", None, None)], pod_resources=BUDGET4)
LOOK_CTR = k8s_pod("look-container", "0000000a-0000-4000-8000-000000000003",
                   [("app", G4, G4)])
#: the docs' pod-level-resource-managers-pod-scope-mixed.yaml
MIXED = k8s_pod("pod-scope-mixed", "0000000a-0000-4000-8000-000000000004",
                [("metrics-sidecar", None, None), ("logging-sidecar", None, None),
                 ("main-app", {"cpu": "2", "memory": "2Gi"}, {"cpu": "2", "memory": "2Gi"})],
                pod_resources={"requests": {"cpu": "4", "memory": "4Gi"},
                               "limits": {"cpu": "4", "memory": "4Gi"}})
CATALOGUE = [TWO_SHARED, LOOK_POD, LOOK_CTR, MIXED]


@pytest.fixture(scope="module")
def kubelet() -> dict:
    """The kubelet v1.37.2's requests for the catalogue (built with Go; under CI it must)."""
    return kubelet_cri.requests_or_skip(CATALOGUE)


@pytest.fixture
def api():
    with FakeAPIServer(NODE) as a:
        yield a


def spec(cri, cid: str) -> CPUSet:
    return CPUSet.parse(cri.spec_cpus(cid))


def checkpoint(workdir: Path) -> dict:
    return Checkpoint(workdir / "state" / "cpu_manager_state").load() or {}


def plugin_for(containerd, workdir, api, *, gates: dict | None = None, scope="pod",
               expect_pods: int = 0, restart: bool = False, **keys):
    p = start_plugin(containerd, workdir, sysfs_root=FIXTURE,
                     topologyManagerPolicy="single-numa-node", topologyManagerScope=scope,
                     featureGates=gates or {}, podSpecSource="apiServer",
                     apiServerURL=api.url, nodeName=NODE, podSpecWait="500ms", **keys)
    # a first start's LIST is the one a child process made at the start
    # (nri_cpumgr.early_list); a restart's (a checkpoint in the state directory) the watch's
    try:
        line = p.wait_for_log(rf"pod spec source: {expect_pods} pods of node {NODE} from .*",
                              timeout=10).group(0)
        assert ("(listed at the start by a child process" in line) is not restart, line
    except BaseException:
        p.stop()  # (not left running when the test fails here)
        raise
    return p


def run(cri, api, pod: dict, kubelet: dict, *, show: bool = True) -> tuple[str, dict]:
    """The pod as the kubelet runs it: shown by the API server (unless ``show`` is false),
    then RunPodSandbox and CreateContainer with the kubelet's own requests, in its order."""
    name = pod["metadata"]["name"]
    req = kubelet[name]
    if show:
        api.add(pod)
    pid = cri.run_pod(name, "Guaranteed", uid=pod["metadata"]["uid"], sandbox=req["sandbox"])
    return pid, {c: cri.create_container(pid, c, kubelet=req["containers"][c])
                 for c in req["order"]}


def test_the_kubelet_sends_the_pods_limits_and_the_look_alikes_are_identical(kubelet):
    """What the fix is about, from the kubelet's own code: a resource-less container gets
    the pod's limits; the two look-alike pods' requests are the same, sandbox included."""
    side = kubelet["two-shared"]["containers"]["side-a"]
    assert (side["cpuShares"], side["cpuQuota"], side["cpuPeriod"],
            side["memoryLimitInBytes"]) == (4096, 400000, 100000, 256 << 20)
    assert kubelet["look-pod-level"]["kubelet"] == "v1.37.2"
    a, b = kubelet["look-pod-level"], kubelet["look-container"]
    assert a["containers"]["app"] == b["containers"]["app"]
    for k in ("cpuShares", "cpuQuota", "memoryLimitInBytes"):
        assert a["sandbox"]["resources"][k] == b["sandbox"]["resources"][k]


def test_gates_off_the_pod_with_spec_resources_gets_no_exclusive_cpus(
        containerd, cri, e2e_workdir, api, kubelet):
    """The issue's pod: the kubelet's static policy skips it without the gates; so does the
    plugin, both containers on the node's shared pool, nothing taken from it."""
    plugin = plugin_for(containerd, e2e_workdir, api)
    try:
        _, c = run(cri, api, TWO_SHARED, kubelet)
        assert spec(cri, c["side-a"]) == spec(cri, c["side-b"]) == ALL
        assert eventually(lambda: checkpoint(e2e_workdir).get("defaultCpuSet"), str(ALL)) \
            == str(ALL)
        assert checkpoint(e2e_workdir).get("entries", {}) == {}
        # a restarted plugin's Synchronize does not admit them as exclusive either
        plugin.stop()
        plugin = plugin_for(containerd, e2e_workdir, api, expect_pods=1, restart=True)
        time.sleep(1.5)  # (sharedPoolShrinkDelay: any move would have happened)
        assert spec(cri, c["side-a"]) == spec(cri, c["side-b"]) == ALL
        assert checkpoint(e2e_workdir).get("entries", {}) == {}
    finally:
        plugin.stop()


def test_gates_on_the_pod_with_spec_resources_gets_one_bubble_of_4(
        containerd, cri, e2e_workdir, api, kubelet):
    plugin = plugin_for(containerd, e2e_workdir, api, gates=GATES)
    try:
        pid, c = run(cri, api, TWO_SHARED, kubelet)
        bubble = spec(cri, c["side-a"])
        assert len(bubble) == 4 and (bubble <= NODE0 or bubble <= NODE1)
        assert spec(cri, c["side-b"]) == bubble
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        assert spec(cri, be) == ALL - bubble
        uid = TWO_SHARED["metadata"]["uid"]
        pools = eventually(lambda: checkpoint(e2e_workdir).get("podPools", {}).get(uid, {}),
                           {"bubble": str(bubble), "podSharedPool": str(bubble),
                            "mems": "0" if bubble <= NODE0 else "1"})
        assert pools["podSharedPool"] == str(bubble)
    finally:
        plugin.stop()


@pytest.mark.parametrize("gates", [{}, GATES], ids=["gates-off", "gates-on"])
def test_the_look_alike_pods_get_what_the_kubelet_gives_each(
        containerd, cri, e2e_workdir, api, kubelet, gates):
    """Same NRI requests; the pod with ``.spec.resources`` gets the node's shared pool
    (gates off) or a 4-CPU bubble it shares (gates on), the one whose container asks for 4
    CPUs itself 4 exclusive CPUs either way."""
    plugin = plugin_for(containerd, e2e_workdir, api, gates=gates)
    try:
        _, own = run(cri, api, LOOK_CTR, kubelet)
        excl = spec(cri, own["app"])
        assert len(excl) == 4 and (excl <= NODE0 or excl <= NODE1)
        _, pl = run(cri, api, LOOK_POD, kubelet)
        got = spec(cri, pl["app"])
        if gates:
            assert len(got) == 4 and not got & excl
            pools = eventually(lambda: list(checkpoint(e2e_workdir).get("podPools", {})),
                               [LOOK_POD["metadata"]["uid"]])
            assert pools == [LOOK_POD["metadata"]["uid"]]
        else:
            assert got == ALL - excl  # the node's shared pool
        entries = eventually(lambda: checkpoint(e2e_workdir).get("entries", {}).get(
            LOOK_CTR["metadata"]["uid"]), {"app": str(excl)})
        assert entries == {"app": str(excl)}
    finally:
        plugin.stop()


def test_the_sandbox_admits_the_pod_before_its_containers(
        containerd, cri, e2e_workdir, api, kubelet):
    """On the real runtime: its RunPodSandbox carries the pod's uid and cgroup parent, so a
    Guaranteed pod the watch shows is admitted when its sandbox starts, as the kubelet admits
    it before the sandbox: its 4 CPUs are in the checkpoint before any container exists, and
    the container created then gets them."""
    plugin = plugin_for(containerd, e2e_workdir, api)
    try:
        uid = LOOK_CTR["metadata"]["uid"]
        req = kubelet["look-container"]
        api.add(LOOK_CTR)
        time.sleep(0.5)  # (the watch's event on loopback: well within this)
        pid = cri.run_pod("look-container", "Guaranteed", uid=uid, sandbox=req["sandbox"])
        plugin.wait_for_log("look-container admitted at its sandbox", timeout=10)
        held = eventually(lambda: bool(checkpoint(e2e_workdir).get("entries", {}).get(uid)),
                          True)
        assert held
        cp = checkpoint(e2e_workdir)
        excl = CPUSet.parse(cp["entries"][uid]["app"])
        assert len(excl) == 4 and (excl <= NODE0 or excl <= NODE1)
        assert cp["admittedPods"][uid].get("atSandbox") is True
        cid = cri.create_container(pid, "app", kubelet=req["containers"]["app"])
        assert spec(cri, cid) == excl
    finally:
        plugin.stop()


def test_docs_pod_scope_mixed_with_the_kubelets_requests(
        containerd, cri, e2e_workdir, api, kubelet):
    """The sidecars get the pod's 4 CPUs / 4Gi from the kubelet; with the spec they stay
    pod-shared: one bubble of 4, main-app's 2-CPU slice, the sidecars on the other 2."""
    plugin = plugin_for(containerd, e2e_workdir, api, gates=GATES)
    try:
        _, c = run(cri, api, MIXED, kubelet)
        main = spec(cri, c["main-app"])
        side = spec(cri, c["metrics-sidecar"])
        assert len(main) == 2 and len(side) == 2 and not main & side
        assert spec(cri, c["logging-sidecar"]) == side
        bubble = main | side
        assert bubble <= NODE0 or bubble <= NODE1
    finally:
        plugin.stop()


def test_api_server_unreachable_falls_back_to_nri_alone_without_waiting(
        containerd, cri, e2e_workdir, api, kubelet):
    """Documented fallback: with the API server answering 503 the plugin decides from NRI
    alone (the look-alike pod with ``.spec.resources`` then takes 4 exclusive CPUs, as
    before the pod spec source) and never waits for it; it says so once per pod."""
    plugin = plugin_for(containerd, e2e_workdir, api)
    try:
        api.down = True
        plugin.wait_for_log("pod spec source: OSError", timeout=10)
        t0 = time.monotonic()
        _, c = run(cri, api, LOOK_POD, kubelet)
        took = time.monotonic() - t0
        assert len(spec(cri, c["app"])) == 4
        plugin.wait_for_log(r"no pod spec from the apiServer source \(not connected\); "
                            "deciding from NRI alone", timeout=5)
        assert took < 10  # (RunPodSandbox + CreateContainer on a loaded machine; no 0.5 s wait)
    finally:
        plugin.stop()


def test_a_pod_the_watch_has_not_shown_waits_at_most_pod_spec_wait(
        containerd, cri, e2e_workdir, api, kubelet):
    plugin = plugin_for(containerd, e2e_workdir, api)
    try:
        pid = cri.run_pod("look-pod-level", "Guaranteed", uid=LOOK_POD["metadata"]["uid"],
                          sandbox=kubelet["look-pod-level"]["sandbox"])
        # shown 0.2 s into the creation's wait: the wait ends when it arrives
        import threading

        threading.Timer(0.2, api.add, (LOOK_POD,)).start()
        cid = cri.create_container(pid, "app",
                                   kubelet=kubelet["look-pod-level"]["containers"]["app"])
        assert spec(cri, cid) == ALL  # decided with the spec: the shared pool
    finally:
        plugin.stop()
