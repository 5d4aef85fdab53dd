"""Pod-level resource managers (KEP-5526) and in-place resize of exclusive CPUs on a real
containerd, with the kubelet's sandbox resources (the pod's ``.spec.resources``).

The plugin runs on the ``dual-socket-smt`` sysfs fixture (NUMA node 0 = CPUs 0-3,8-11,
node 1 = 4-7,12-15; core i = CPUs i and i+8; CPU 0 reserved): the docs' pods need 4 CPUs and
the host has 2, so containers are created, not started, and checked in the OCI spec the
runtime writes (see test_topology_alignment.py for the same approach).
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from nri_cpumgr.checkpoint import Checkpoint
from nri_cpumgr.cpuset import CPUSet
from tests.e2e.harness.fakeapi import FakeAPIServer
from tests.e2e.harness.kubelet_cri import k8s_pod
from tests.e2e.plugin_run import eventually, start_plugin

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "dual-socket-smt"
NODE0 = CPUSet.parse("0-3,8-11")
NODE1 = CPUSet.parse("4-7,12-15")
ALL = CPUSet(range(16))
GATES = {"PodLevelResources": True, "PodLevelResourceManagers": True}
BUDGET = {"requests": {"cpu": "4", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "4Gi"}}


def spec(cri, cid: str) -> CPUSet:
    return CPUSet.parse(cri.spec_cpus(cid))


def checkpoint(workdir: Path) -> dict:
    """The plugin's checkpoint (what ``nri-cpumgr status --json`` prints)."""
    return Checkpoint(workdir / "state" / "cpu_manager_state").load() or {}


def g(cpu: str, mem: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": mem}


NODE = "e2e-node"


@pytest.fixture
def api():
    """The pod specs, from a loopback fake API server (the harness's CRI client sends a
    container without its own resources the pod's limits, as a kubelet with
    PodLevelResources does: the plugin needs the spec to tell it from one asking for them)."""
    with FakeAPIServer(NODE) as a:
        yield a


def pod_spec_keys(api) -> dict:
    return {"podSpecSource": "apiServer", "apiServerURL": api.url, "nodeName": NODE}


def show(api, cri, pod_id: str, containers, budget=BUDGET) -> None:
    """Show the pod run as ``pod_id`` on the fake API server: ``containers`` as
    (name, requests, limits)."""
    meta = cri.pods[pod_id].metadata
    api.add(k8s_pod(meta.name, meta.uid, list(containers), pod_resources=budget,
                    namespace=meta.namespace))


def plugin_for(containerd, workdir, scope: str, gates: dict | None = None, api=None, **keys):
    if api is not None:
        keys.update(pod_spec_keys(api))
    p = start_plugin(containerd, workdir, sysfs_root=FIXTURE,
                     topologyManagerPolicy="single-numa-node", topologyManagerScope=scope,
                     featureGates=GATES if gates is None else gates, **keys)
    if api is not None:
        p.wait_for_log("pod spec source: 0 pods of node", timeout=10)
    return p


def test_pod_scope_docs_example(containerd, cri, e2e_workdir, api):
    """pod-level-resource-managers-pod-scope-mixed.yaml: one 4-CPU NUMA-aligned bubble,
    main-app's exclusive 2-CPU slice, the two sidecars on the other 2 (never on main-app's),
    isolated from the node's shared pool; deleting the pod returns everything."""
    plugin = plugin_for(containerd, e2e_workdir, "pod", api=api,
                        memoryManagerPolicy="Static",
                        reservedMemory=[{"numaNode": 0, "limits": {"memory": "100Mi"}}])
    try:
        pod = cri.run_pod("pod-scope-mixed", "Guaranteed", pod_resources=BUDGET)
        show(api, cri, pod, [("metrics-sidecar", None, None), ("logging-sidecar", None, None),
                             ("main-app", g("2", "2Gi"), g("2", "2Gi"))])
        metrics = cri.create_container(pod, "metrics-sidecar")
        logging_ = cri.create_container(pod, "logging-sidecar")
        # the pod admitted whole at its first container (its spec is known): the sidecars get
        # the pod's shared pool at once, the bubble less main-app's slice, as the kubelet does
        pool = spec(cri, metrics)
        main = cri.create_container(pod, "main-app", requests=g("2", "2Gi"),
                                    limits=g("2", "2Gi"))
        slice_ = spec(cri, main)
        bubble = pool | slice_
        assert len(bubble) == 4 and (bubble <= NODE0 or bubble <= NODE1)
        assert len(slice_) == 2 and len(pool) == 2
        assert spec(cri, metrics) == spec(cri, logging_) == bubble - slice_
        mems = "0" if bubble <= NODE0 else "1"
        assert {cri.spec_mems(c) for c in (metrics, logging_, main)} == {mems}
        # a pod outside: the node's shared pool, which lost the whole bubble
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        assert spec(cri, be) == ALL - bubble
        plugin.wait_for_log("pod-level pod=e2e/pod-scope-mixed container=main-app "
                            "pool=pod-exclusive", timeout=5)
        # the node's shared-pool sync (sharedPoolShrinkDelay 1 s) leaves them on their pod's
        # pool
        time.sleep(1.5)
        assert spec(cri, metrics) == spec(cri, logging_) == bubble - slice_
        cp = eventually(lambda: checkpoint(e2e_workdir).get("podPools", {}).get(
            cri.pods[pod].metadata.uid, {}).get("podSharedPool"), str(bubble - slice_))
        assert cp == str(bubble - slice_)
        cri.stop_pod(pod)
        cri.remove_pod(pod)
        assert eventually(lambda: checkpoint(e2e_workdir)["defaultCpuSet"], str(ALL)) \
            == str(ALL)
        assert checkpoint(e2e_workdir)["podPools"] == {}
    finally:
        plugin.stop()


def test_pod_scope_empty_shared_pool_refused(containerd, cri, e2e_workdir, api):
    """pod-level-resource-managers-empty-shared-pool.yaml: main-app (3 of 4 CPUs, with
    metrics-sidecar's 1) would leave logging-sidecar no CPU. The pod spec source shows the
    whole pod, so the plugin refuses it at its first container as the kubelet refuses it at
    admission: under single-numa-node the CPU manager's pod hints make the partition check
    and answer none, TopologyAffinityError with the pod scope's text (the tutorial's
    answer; kubelet v1.37.2 policy_static.go getPodTopologyHintsForAdd, scope_pod.go)."""
    plugin = plugin_for(containerd, e2e_workdir, "pod", api=api)
    try:
        pod = cri.run_pod("empty-shared-pool", "Guaranteed", pod_resources=BUDGET)
        show(api, cri, pod, [("metrics-sidecar", g("1", "1Gi"), g("1", "1Gi")),
                             ("logging-sidecar", None, None),
                             ("main-app", g("3", "3Gi"), g("3", "3Gi"))])
        with pytest.raises(grpc.RpcError) as e:
            cri.create_container(pod, "metrics-sidecar", requests=g("1", "1Gi"),
                                 limits=g("1", "1Gi"))
        assert "TopologyAffinityError: Pod Scope pod with pod-level resources failed " \
               "admission under pod-scope topology manager" in e.value.details()
    finally:
        plugin.stop()


def test_container_scope_docs_example(containerd, cri, e2e_workdir, api):
    """pod-level-resource-managers-container-scope-mixed.yaml: the infrastructure sidecar
    gets an exclusive NUMA-aligned 2-CPU slice from the node; the workers share the node's
    pool, never the sidecar's CPUs."""
    plugin = plugin_for(containerd, e2e_workdir, "container", api=api)
    try:
        pod = cri.run_pod("container-scope-mixed", "Guaranteed", pod_resources=BUDGET)
        show(api, cri, pod, [("infrastructure-sidecar", g("2", "2Gi"), g("2", "2Gi")),
                             ("worker-1", None, None), ("worker-2", None, None)])
        side = cri.create_container(pod, "infrastructure-sidecar", requests=g("2", "2Gi"),
                                    limits=g("2", "2Gi"))
        w1 = cri.create_container(pod, "worker-1")
        w2 = cri.create_container(pod, "worker-2")
        excl = spec(cri, side)
        assert len(excl) == 2 and (excl <= NODE0 or excl <= NODE1)
        assert spec(cri, w1) == spec(cri, w2) == ALL - excl
    finally:
        plugin.stop()


# ------------------------------------------------------------------------------ resize
def test_resize_2_4_2_keeps_the_first_two_cpus(containerd, cri, e2e_workdir):
    # the shipped sharedPoolUpdateMode (auto: cri on containerd 1.7.24 / 2.1.9, async on
    # 2.4.2) grows the pool back on this idle node (issue 31)
    plugin = plugin_for(containerd, e2e_workdir, "container",
                        gates={"InPlacePodVerticalScalingExclusiveCPUs": True})
    try:
        pod = cri.run_pod("resize", "Guaranteed")
        cid = cri.create_container(pod, "app", requests=g("2", "256Mi"), limits=g("2", "256Mi"))
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        first = spec(cri, cid)
        assert len(first) == 2
        cri.update_container_resources(cid, g("4", "256Mi"), g("4", "256Mi"), "Guaranteed")
        grown = spec(cri, cid)
        assert len(grown) == 4 and first < grown
        assert grown <= NODE0 or grown <= NODE1  # close to the CPUs it had
        plugin.wait_for_log("resize pod=e2e/resize container=app cpus=", timeout=5)
        # the shared pool follows (poolsync), off the grown container's CPUs
        assert eventually(lambda: spec(cri, be), ALL - grown, timeout=15) == ALL - grown
        cri.update_container_resources(cid, g("2", "256Mi"), g("2", "256Mi"), "Guaranteed")
        assert spec(cri, cid) == first
        assert eventually(lambda: spec(cri, be), ALL - first, timeout=15) == ALL - first
    finally:
        plugin.stop()


def test_resize_with_the_gate_off_changes_nothing_and_says_why(containerd, cri, e2e_workdir):
    plugin = plugin_for(containerd, e2e_workdir, "container", gates={})
    try:
        pod = cri.run_pod("resize-off", "Guaranteed")
        cid = cri.create_container(pod, "app", requests=g("2", "256Mi"), limits=g("2", "256Mi"))
        first = spec(cri, cid)
        with pytest.raises(grpc.RpcError) as e:
            cri.update_container_resources(cid, g("4", "256Mi"), g("4", "256Mi"), "Guaranteed")
        assert 'Infeasible: Resize is infeasible for Guaranteed Pods alongside CPU Manager ' \
               'policy "static"' in e.value.details()
        assert spec(cri, cid) == first
        plugin.wait_for_log("resize pod=e2e/resize-off container=app refused", timeout=5)
    finally:
        plugin.stop()


def test_pod_shared_pool_on_this_host_in_cgroup_and_proc(containerd, cri, e2e_workdir, api):
    """On the 2-CPU host itself (CPU 0 reserved): a 1-CPU pod budget whose only container
    is a sidecar without resources runs on the pod's bubble (CPU 1), isolated from the
    node's shared pool (CPU 0), in spec, cgroup and /proc; the pod's removal returns CPU 1
    to the node's shared containers."""
    from tests.e2e.harness import cgroups

    if cgroups.host_online_cpus() != "0-1":
        pytest.skip(f"needs a 2-CPU host, have {cgroups.host_online_cpus()}")
    # the growth on an idle node comes from the plugin's own UpdateContainers (async, explicit:
    # "auto" takes "reply" on containerd 1.7.24 / 2.1.9, where released CPUs wait for the next
    # container operation's reply; issue 21, docs/concepts/nri-lock-order.md)
    # (a Topology Manager policy: under policy none the kubelet's scope is not relevant and
    # a pod-level pod gets no pod-wide CPUs; best-effort on one NUMA node admits the same)
    plugin = start_plugin(containerd, e2e_workdir, topologyManagerPolicy="best-effort",
                          topologyManagerScope="pod",
                          featureGates=GATES, sharedPoolGrowDelay="1s",
                          **pod_spec_keys(api))
    try:
        budget = {"requests": {"cpu": "1", "memory": "256Mi"},
                  "limits": {"cpu": "1", "memory": "256Mi"}}
        pod = cri.run_pod("bubble", "Guaranteed", pod_resources=budget)
        show(api, cri, pod, [("sidecar", None, None)], budget)
        side = cri.create_container(pod, "sidecar")
        cri.start_container(side)
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        cri.start_container(be)
        assert (cri.spec_cpus(side), cri.cgroup_cpus(side), cri.proc_cpus(side)) == ("1",) * 3, \
            plugin.log_text()[-3000:]
        assert (cri.spec_cpus(be), cri.cgroup_cpus(be), cri.proc_cpus(be)) == ("0",) * 3
        cri.stop_pod(pod)
        cri.remove_pod(pod)
        assert eventually(lambda: cri.cgroup_cpus(be), "0-1", timeout=15) == "0-1"
        assert cri.proc_cpus(be) == "0-1"
    finally:
        plugin.stop()
