"""Pod-level resource managers (KEP-5526) container by container, and in-place resize of
exclusive CPUs: the docs' example pods on the 2-socket conformance topology
(dual-socket-ht: NUMA node 0 = the even CPUs, node 1 = the odd ones, cores i and i+6;
CPU 0 reserved)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from nri_cpumgr.cm.container_manager import AdmissionError, ContainerManager
from nri_cpumgr.cm.cpumanager import CPUManagerState, StaticPolicy
from nri_cpumgr.cm.podresources.manager import POD_ENTRY
from nri_cpumgr.cm.podresources.resize import ResizeRefused
from nri_cpumgr.cm.topologymanager import TopologyManager
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import QOSClass
from nri_cpumgr.podmodel.nri import ContainerInfo, Resources
from tests.conformance_data import topology

TOPO = topology("dual-socket-ht")
NODE0 = CPUSet(range(0, 12, 2))
NODE1 = CPUSet(range(1, 12, 2))
GI = 1 << 30
ON = {"PodLevelResources": True, "PodLevelResourceManagers": True}


def _machine(numa_memory_bytes: int = 0) -> dict[str, Any]:
    """TOPO as a scenario machine (``plan --scenario``'s form), with NUMA nodes 0 and 1 of
    ``numa_memory_bytes`` each when given."""
    machine: dict[str, Any] = {
        "cpus": [{"cpu": c, "core": i.core, "socket": i.socket, "numa": i.numa}
                 for c, i in sorted(TOPO.details.items())]}
    if numa_memory_bytes:
        machine["numa_nodes"] = [{"id": n, "memory_bytes": numa_memory_bytes} for n in (0, 1)]
    return machine


def _add_one(cfg: dict[str, Any], pod: dict[str, Any], machine: dict[str, Any]) -> dict[str, Any]:
    """The plugin's decision path's outcome (the first event) of adding ``pod`` alone."""
    from nri_cpumgr.planner.scenario import run_scenario

    return run_scenario({"machine": machine, "config": cfg,
                         "events": [{"op": "add", "pod": pod}]})["events"][0]


def res(cpus: int | None = None, mem: int | None = None) -> Resources:
    """A container's resources as NRI passes them (shares 2 = no request)."""
    if cpus is None:
        return Resources(2, None, None, mem, {})
    return Resources(cpus * 1024, cpus * 1000, cpus * 1000, mem, {}, cpus * 100000, 100000)


def ctr(cid: str, pod: str, name: str, r: Resources, pod_res: Resources | None,
        current: str = "") -> ContainerInfo:
    return ContainerInfo(
        id=cid, pod_id="sb-" + pod, pod_uid=pod, pod_name=pod, namespace="ns", name=name,
        restart_count=0, qos=QOSClass.GUARANTEED, qos_source="cgroup-parent", resources=r,
        cpus=current, devices=(), pod_resources=pod_res)


def manager(scope: str = "pod", gates: dict | None = None,
            state: CPUManagerState | None = None) -> ContainerManager:
    policy = StaticPolicy(TOPO, 1, CPUSet({0}))
    if state is None:
        state = CPUManagerState()
    policy.start(state)
    tm = TopologyManager("single-numa-node", scope, numa_nodes=[0, 1])
    return ContainerManager(policy, state, topology_manager=tm,
                            feature_gates=ON if gates is None else gates,
                            topology_manager_scope=scope)


POD4 = res(4, 4 * GI)


def docs_pod_scope(m: ContainerManager):
    """pod-level-resource-managers-pod-scope-mixed.yaml: budget 4 CPUs / 4Gi, two sidecars
    without resources (created first, as restartable init containers), main-app 2 / 2Gi."""
    metrics = m.admit(ctr("metrics", "p", "metrics-sidecar", res(), POD4))
    logging_ = m.admit(ctr("logging", "p", "logging-sidecar", res(), POD4))
    main = m.admit(ctr("main", "p", "main-app", res(2, 2 * GI), POD4))
    return metrics, logging_, main


def test_pod_scope_docs_example():
    m = manager()
    metrics, logging_, main = docs_pod_scope(m)
    bubble = m.state.get_cpuset("p", POD_ENTRY)
    assert bubble is not None and len(bubble) == 4
    assert bubble <= NODE0 or bubble <= NODE1  # one NUMA-aligned bubble
    # before main-app the sidecars share the whole bubble
    assert metrics.cpus == bubble and not metrics.exclusive
    assert logging_.cpus == bubble
    # main-app carves an exclusive 2-CPU slice; the sidecars move to the rest in the reply
    assert main.exclusive and len(main.cpus) == 2 and main.cpus <= bubble
    pod_pool = bubble - main.cpus
    assert {u.container_id: u.cpus for u in main.pod_updates} == {
        "metrics": pod_pool, "logging": pod_pool}
    # isolated from the node's shared pool, which lost the whole bubble
    assert m.shared_pool() == CPUSet(range(12)) - bubble
    assert m.shared_containers() == []
    rows = {r["id"]: r for r in m.checkpoint()["containers"]}
    assert rows["main"]["pool"] == "pod-exclusive" and rows["metrics"]["pool"] == "pod-shared"
    assert rows["metrics"]["cpus"] == str(pod_pool)
    assert m.checkpoint()["podPools"] == {
        "p": {"bubble": str(bubble), "podSharedPool": str(pod_pool), "mems": ""}}
    # deleting the pod returns everything
    m.remove_pod("p")
    assert m.shared_pool() == CPUSet(range(12))
    assert m.state.assignments == {}
    assert m.checkpoint()["podPools"] == {}


def test_pod_scope_slice_restart_keeps_cpus_and_removed_slice_returns_to_the_pod():
    m = manager()
    _, _, main = docs_pod_scope(m)
    bubble = m.state.get_cpuset("p", POD_ENTRY)
    m.stop("main")
    again = m.admit(ctr("main2", "p", "main-app", res(2, 2 * GI), POD4))
    assert again.cpus == main.cpus and "main" not in m.containers
    # a removed slice goes back to the bubble, never to the node
    m.remove("main2")
    assert m.shared_pool() == CPUSet(range(12)) - bubble
    assert m.pod_level.pod_pool("p") == bubble


def test_pod_scope_empty_shared_pool_is_refused_with_the_kubelets_text():
    """pod-level-resource-managers-empty-shared-pool.yaml: 4 CPUs = metrics-sidecar 1 +
    main-app 3, logging-sidecar shared: the container that empties the pool is refused."""
    m = manager()
    m.admit(ctr("metrics", "p", "metrics-sidecar", res(1, GI), POD4))
    m.admit(ctr("logging", "p", "logging-sidecar", res(), POD4))
    before = {k: dict(v) for k, v in m.state.assignments.items()}
    with pytest.raises(AdmissionError) as e:
        m.admit(ctr("main", "p", "main-app", res(3, 3 * GI), POD4))
    assert str(e.value) == (
        "EmptyPodSharedPoolError: pod rejected, sum of exclusive container cpu requests "
        "equals pod budget, leaving no cpus for shared containers")
    assert m.state.assignments == before


def test_pod_scope_slice_larger_than_the_budget():
    m = manager()
    with pytest.raises(AdmissionError, match=r"requested=5, available=4"):
        m.admit(ctr("big", "p", "big", res(5, GI), POD4))


def test_pod_scope_bubble_that_fits_no_numa_node_is_refused():
    m = manager()
    with pytest.raises(AdmissionError) as e:
        m.admit(ctr("a", "p", "a", res(), res(8, GI)))
    # the kubelet's text (scope_pod.go admitUsingPodResources, v1.37.2)
    assert str(e.value) == ("TopologyAffinityError: Pod Scope pod with pod-level resources "
                            "failed admission under pod-scope topology manager")
    assert m.state.assignments == {} and m.shared_pool() == CPUSet(range(12))


def test_container_scope_docs_example_hybrid():
    """pod-level-resource-managers-container-scope-mixed.yaml: the infrastructure sidecar
    (2 / 2Gi) is exclusive from the node's pool, the workers share the node's pool."""
    m = manager("container")
    side = m.admit(ctr("side", "p", "infrastructure-sidecar", res(2, 2 * GI), POD4))
    w1 = m.admit(ctr("w1", "p", "worker-1", res(), POD4))
    w2 = m.admit(ctr("w2", "p", "worker-2", res(), POD4))
    assert side.exclusive and len(side.cpus) == 2
    assert (side.cpus <= NODE0) or (side.cpus <= NODE1)
    assert w1.cpus == w2.cpus == m.shared_pool() == CPUSet(range(12)) - side.cpus
    assert sorted(m.shared_containers()) == ["w1", "w2"]
    assert m.state.get_cpuset("p", POD_ENTRY) is None


def test_container_scope_only_guaranteed_equivalent_containers_get_exclusive_cpus():
    """A whole CPU request without an equal limit does not qualify (the kubelet's
    IsContainerEquivalentQOSGuaranteed); the per-container rules would have pinned it."""
    r = Resources(2048, 2000, None, GI, {})
    assert not manager("container").admit(ctr("a", "p", "a", r, POD4)).exclusive
    assert manager("container", gates={}).admit(ctr("a", "p", "a", r, POD4)).exclusive


def test_gates_off_is_todays_behaviour():
    m = manager(gates={})
    metrics, logging_, main = docs_pod_scope(m)
    assert metrics.cpus == logging_.cpus == CPUSet(range(12))  # the node's pool then
    assert main.exclusive and len(main.cpus) == 2 and main.pod_updates == []
    assert m.state.get_cpuset("p", POD_ENTRY) is None
    assert m.shared_pool() == CPUSet(range(12)) - main.cpus
    assert "podPools" not in m.checkpoint()


def test_no_pod_resources_from_the_runtime_is_said_once_and_falls_back(caplog):
    m = manager()
    with caplog.at_level(logging.WARNING):
        a = m.admit(ctr("a", "p", "a", res(2, GI), None))
        m.admit(ctr("b", "q", "b", res(1, GI), None))
    assert a.exclusive and len(a.cpus) == 2
    said = [r for r in caplog.records if "passes no pod resources" in r.getMessage()]
    assert len(said) == 1


def test_synchronize_restores_pod_pools_and_fixes_shared_containers():
    m = manager()
    docs_pod_scope(m)
    bubble = m.state.get_cpuset("p", POD_ENTRY)
    main = m.state.get_cpuset("p", "main-app")
    state = CPUManagerState(assignments={u: dict(c) for u, c in m.state.assignments.items()},
                            default_set=m.state.default_set)
    m2 = manager(state=state)
    ups = m2.synchronize([
        ctr("metrics", "p", "metrics-sidecar", res(), POD4, current=str(bubble)),
        ctr("logging", "p", "logging-sidecar", res(), POD4, current=str(bubble - main)),
        ctr("main", "p", "main-app", res(2, 2 * GI), POD4, current=str(main)),
    ])
    assert {k: d.cpus for k, d in ups.items()} == {"metrics": bubble - main}
    assert m2.state.get_cpuset("p", POD_ENTRY) == bubble


# ---------------------------------------------------------------------------- resize
RESIZE_ON = {"InPlacePodVerticalScalingExclusiveCPUs": True}


def test_resize_grow_keeps_cpus_takes_close_ones_and_shrink_keeps_the_first():
    m = manager("container", gates=RESIZE_ON)
    d = m.admit(ctr("g", "p", "app", res(2, GI), None))
    first = d.cpus
    grown = m.update("g", res(4, GI))
    assert grown is not None and first < grown.cpus and len(grown.cpus) == 4
    # close: the new CPUs are on the same NUMA node (siblings of its cores first)
    node = NODE0 if first <= NODE0 else NODE1
    assert grown.cpus <= node
    assert m.shared_pool() == CPUSet(range(12)) - grown.cpus
    shrunk = m.update("g", res(2, GI))
    assert shrunk.cpus == first
    assert m.shared_pool() == CPUSet(range(12)) - first
    assert m.checkpoint()["resized"] == {
        "p/app": {"from": str(grown.cpus), "to": str(first), "promised": str(first)}}


def test_resize_below_promised_and_beyond_free_cpus_are_refused():
    m = manager("container", gates=RESIZE_ON)
    first = m.admit(ctr("g", "p", "app", res(2, GI), None)).cpus
    with pytest.raises(ResizeRefused, match="prohibitedCPUAllocation Error"):
        m.update("g", res(1, GI))
    with pytest.raises(ResizeRefused, match=r"NotEnoughCPUsError: .*requested=10, available=9"):
        m.update("g", res(12, GI))
    assert m.state.get_cpuset("p", "app") == first
    with pytest.raises(ResizeRefused, match="inconsistentCPUAllocation"):
        m.update("g", Resources(1536, 1500, 1500, GI, {}))


def test_resize_with_the_gate_off_changes_nothing_and_says_why():
    m = manager("container", gates={})
    first = m.admit(ctr("g", "p", "app", res(2, GI), None)).cpus
    pool = m.shared_pool()
    with pytest.raises(ResizeRefused) as e:
        m.update("g", res(4, GI))
    assert str(e.value) == ('Infeasible: Resize is infeasible for Guaranteed Pods alongside '
                            'CPU Manager policy "static"')
    assert m.state.get_cpuset("p", "app") == first and m.shared_pool() == pool
    # the same count (a memory-only or limit-only update) keeps the pinning, as before
    same = m.update("g", res(2, GI))
    assert same is not None and same.cpus == first and same.exclusive


def test_status_shows_pod_pools_and_resized_containers(tmp_path, capsys):
    from nri_cpumgr.checkpoint import Checkpoint
    from nri_cpumgr.cli import main

    m = manager(gates={**ON, **RESIZE_ON})
    _, _, main_app = docs_pod_scope(m)
    bubble = m.state.get_cpuset("p", POD_ENTRY)
    g = m.admit(ctr("g", "q", "app", res(1, GI), None))
    grown = m.update("g", res(2, GI)).cpus
    Checkpoint(tmp_path / "cpu_manager_state").save(m.checkpoint())
    assert main(["status", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    pool = bubble - main_app.cpus
    assert (f"  ns/p  bubble={bubble}  pod-shared-pool={pool}  mems=-  "
            "logging-sidecar=pod-shared main-app=pod-exclusive metrics-sidecar=pod-shared"
            ) in out.splitlines()
    assert f"  ns/q app  {g.cpus} -> {grown}  (promised {g.cpus})" in out.splitlines()


def test_promised_cpus_survive_a_restart_through_the_checkpoint():
    m = manager("container", gates=RESIZE_ON)
    first = m.admit(ctr("g", "p", "app", res(2, GI), None)).cpus
    m.update("g", res(4, GI))
    body = m.checkpoint()
    state = CPUManagerState(assignments={u: dict(c) for u, c in m.state.assignments.items()},
                            default_set=m.state.default_set)
    m2 = manager("container", gates=RESIZE_ON, state=state)
    m2.resizer.restore(body)
    grown = m.state.get_cpuset("p", "app")
    m2.synchronize([ctr("g", "p", "app", res(4, GI), None, current=str(grown))])
    assert m2.update("g", res(2, GI)).cpus == first
    m2.resizer.restore({"resized": {"gone/app": {"promised": "1"}, "p/app": {"x": 1}}})
    assert set(m2.resizer.promised) == {("p", "app")}


def test_the_container_manager_has_what_the_pod_level_managers_use():
    """podresources types its container manager as ContainerManagerView (it must not import
    ContainerManager): every member of the protocol is there, of the right kind."""
    import typing

    from nri_cpumgr.cm.memorymanager import manager as memory_manager
    from nri_cpumgr.cm.podresources.host import ContainerManagerView

    m = manager()
    # (MemoryManager is imported for type checking only there: the Memory Manager's package
    # is loaded when one is configured)
    attrs = set(typing.get_type_hints(ContainerManagerView, localns=vars(memory_manager)))
    methods = {n for n, v in vars(ContainerManagerView).items()
               if callable(v) and not n.startswith("_")}
    assert attrs == {"policy", "state", "memory", "tm", "cpu_provider", "devices", "static",
                     "containers", "owner", "whole_pod_admission"}
    assert methods == {"shared_pool", "row_changed", "track", "untrack", "pod_containers",
                       "mems", "kubelet_memory_hints"}
    for name in attrs:
        assert hasattr(m, name) and not callable(getattr(m, name)), name
    for name in methods:
        assert callable(getattr(m, name)), name
    assert m.pod_level is not None and m.pod_level.cm is m and m.resizer.cm is m


def test_topology_manager_policy_none_allocates_container_by_container_whatever_the_scope():
    """kubelet v1.37.2 topologymanager: with policy none the scope is not relevant
    (NewManager returns a none scope; scope.go admitPolicyNone calls each provider's
    Allocate per container, never AllocatePod), so a pod-level pod under
    ``topologyManagerScope: pod`` gets no pod-wide CPUs: its qualifying container takes
    exclusive CPUs from the node. Found by the differential run (seed 39: the plugin took
    an 8-CPU bubble for the pod and refused it)."""
    from nri_cpumgr.config import Config
    from nri_cpumgr.managers import pod_level_scope
    cfg = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
           "topologyManagerPolicy": "none", "topologyManagerScope": "pod", "featureGates": ON}
    assert pod_level_scope(Config.model_validate(cfg)) == "container"
    assert pod_level_scope(Config.model_validate(
        {**cfg, "topologyManagerPolicy": "best-effort"})) == "pod"
    machine = _machine()
    pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {
        "resources": {"limits": {"cpu": "10", "memory": "2Gi"}},
        "containers": [{"name": "app", "resources": {"limits": {"cpu": "4", "memory": "1Gi"}}},
                       {"name": "side"}]}}
    out = _add_one(cfg, pod, machine)
    assert out["admitted"] is True and "podCPUs" not in out
    app, side = out["containers"]
    assert app["exclusive"] is True and len(CPUSet.parse(app["cpus"])) == 4
    assert side["exclusive"] is False and "pool" not in side
    assert CPUSet.parse(side["cpus"]) == CPUSet(range(12)) - CPUSet.parse(app["cpus"])


def test_pod_scope_budget_of_no_whole_cpus_puts_the_pod_in_the_nodes_shared_pool():
    """kubelet v1.37.2 cpumanager policy_static.go allocatePodForAdd: a pod-level pod whose
    budget is no whole number of CPUs (podGuaranteedCPUs 0) "belongs in the shared pool",
    and under pod scope the Topology Manager calls only AllocatePod (scope_pod.go
    admitUsingPodResources), no container's Allocate: a container asking for whole CPUs
    of its own runs on the node's shared pool too. Found by the differential run (seed 384:
    the plugin gave it exclusive CPUs by the container-scope rules)."""
    cfg = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
           "topologyManagerPolicy": "best-effort", "topologyManagerScope": "pod",
           "featureGates": ON}
    machine = _machine()
    pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {
        "resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}},
        "containers": [{"name": "app", "resources": {"limits": {"cpu": "1", "memory": "128Mi"}}}]}}
    out = _add_one(cfg, pod, machine)
    assert out["admitted"] is True and "podCPUs" not in out
    assert out["containers"] == [{"name": "app", "cpus": "0-11", "exclusive": False, "mems": ""}]
    assert out["sharedPool"] == "0-11"


@pytest.mark.parametrize("policy,reason", [
    ("best-effort", "EmptyPodSharedPoolError: pod rejected, sum of exclusive container cpu "
                    "requests equals pod budget, leaving no cpus for shared containers"),
    ("restricted", "TopologyAffinityError: Pod Scope pod with pod-level resources failed "
                   "admission under pod-scope topology manager"),
])
def test_pod_scope_partition_is_checked_at_the_first_container_when_the_spec_is_known(
        policy, reason):
    """kubelet v1.37.2 cpumanager policy_static.go: allocatePodForAdd checks the whole pod's
    partition (validatePodScopeResources) before its SMT check and the bubble's allocation,
    and getPodTopologyHintsForAdd makes the same check and answers no hint, which
    restricted / single-numa-node refuse with the pod scope's TopologyAffinityError
    (scope_pod.go admitUsingPodResources). With the pod's spec known, the plugin refuses
    the pod's first container with the kubelet's reason, even where the bubble could not
    be taken anyway (here: 1 free CPU for a 2-CPU budget). Found by the differential run
    (seeds 58, 672)."""
    cfg = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0-9",
           "topologyManagerPolicy": policy, "topologyManagerScope": "pod", "featureGates": ON}
    machine = _machine()
    pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {
        "resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
        "containers": [{"name": "app", "resources": {"limits": {"cpu": "2", "memory": "128Mi"}}},
                       {"name": "side"}]}}
    out = _add_one(cfg, pod, machine)
    assert out["admitted"] is False
    assert f"{out['reason']}: {out['message']}" == reason
    assert out["sharedPool"] == "0-11"


def test_pod_scope_budget_of_no_whole_cpus_still_gets_the_pods_memory_pinned():
    """kubelet v1.37.2: the Memory Manager's AllocatePod pins a Guaranteed pod-level pod's
    memory (its pod hints, merged by the pod scope) even when the CPU manager puts the pod
    in the node's shared pool (a budget of no whole CPUs); each container's cpuset.mems is
    the pod's NUMA nodes (GetMemoryNUMANodes). Found by the differential run (seed 672)."""
    from nri_cpumgr.planner.scenario import run_scenario

    cfg = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
           "topologyManagerPolicy": "restricted", "topologyManagerScope": "pod",
           "memoryManagerPolicy": "Static", "systemReserved": {"memory": "924Mi"},
           "evictionHard": {"memory.available": "100Mi"},
           "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1Gi"}}], "featureGates": ON}
    machine = _machine(4 * GI)
    pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {
        "resources": {"limits": {"cpu": "1500m", "memory": "2Gi"}},
        "containers": [{"name": "app", "resources": {"limits": {"cpu": "1", "memory": "128Mi"}}},
                       {"name": "side"}]}}
    out = run_scenario({"machine": machine, "config": cfg,
                        "events": [{"op": "add", "pod": pod}, {"op": "delete", "name": "p"},
                                   {"op": "add", "pod": pod}]})["events"]
    for e in (out[0], out[2]):  # (its memory went back with the pod: the same again)
        assert e["admitted"] is True and "podCPUs" not in e
        assert e["containers"] == [
            {"name": "app", "cpus": "0-11", "exclusive": False, "mems": "0"},
            {"name": "side", "cpus": "0-11", "exclusive": False, "mems": "0"}]


def test_pod_scope_regular_init_container_slice_may_cover_the_pod_shared_pool():
    """kubelet v1.37.2 cpumanager policy_static.go allocatePodForAdd: the pod shared pool is
    the bubble minus the slices of its long-running containers (app containers, sidecars);
    a regular init container's slice overlaps it while it runs, and validatePodScopeResources
    checks long-running containers only. A 1-CPU budget with a sidecar without resources, a
    1-CPU init container and an app container without resources is admitted, every container
    on CPU 1 (differential seed 984: the plugin refused the init container)."""
    cfg = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
           "topologyManagerPolicy": "best-effort", "topologyManagerScope": "pod",
           "featureGates": ON}
    machine = {"cpus": [{"cpu": c, "core": c, "socket": 0, "numa": 0} for c in range(4)]}
    pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
        "initContainers": [
            {"name": "side", "restartPolicy": "Always"},
            {"name": "init", "resources": {"limits": {"cpu": "1", "memory": "256Mi"}}}],
        "containers": [{"name": "app"}]}}
    out = _add_one(cfg, pod, machine)
    assert out["admitted"] is True and out["podCPUs"] == "1"
    assert [(c["name"], c["cpus"], c["exclusive"], c.get("pool")) for c in out["containers"]] == [
        ("side", "1", False, "pod"), ("init", "1", True, None), ("app", "1", False, "pod")]


def test_container_without_memory_of_its_own_gets_no_memory_pinned():
    """kubelet v1.37.2 memorymanager policy_static.go Allocate: a container that requests no
    memory resources of its own is skipped ("container requests no memory resources"),
    though NRI shows it the pod's memory limit (kuberuntime getMemoryLimit): with the
    pod's spec known, a pod-level pod's container without resources gets no mems
    (differential seed 959: the plugin pinned the pod's limit to NUMA node 0)."""
    cfg = {"cpuManagerPolicy": "none", "memoryManagerPolicy": "Static",
           "systemReserved": {"memory": "412Mi"}, "evictionHard": {"memory.available": "100Mi"},
           "reservedMemory": [{"numaNode": 0, "limits": {"memory": "512Mi"}}],
           "featureGates": ON}
    machine = _machine(4 * GI)
    pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {
        "resources": {"limits": {"cpu": "4", "memory": "512Mi"}},
        "containers": [{"name": "app"}]}}
    out = _add_one(cfg, pod, machine)
    assert out["admitted"] is True
    assert out["containers"] == [{"name": "app", "cpus": "", "exclusive": False, "mems": ""}]


def test_container_whose_requests_are_not_its_limits_gets_no_memory_pinned():
    """kubelet v1.37.2 memorymanager policy_static.go getContainerRequestedResources: with
    PodLevelResourceManagers, a container of a pod with .spec.resources is eligible for
    exclusive memory only when its own cpu and memory requests equal its own limits (cm/qos
    IsContainerEquivalentQOSGuaranteed); one with requests alone gets no memory pinned, one
    with requests = limits does (differential seeds 43133, 43755: the plugin pinned the first
    to NUMA node 0)."""
    cfg = {"cpuManagerPolicy": "none", "memoryManagerPolicy": "Static",
           "systemReserved": {"memory": "412Mi"}, "evictionHard": {"memory.available": "100Mi"},
           "reservedMemory": [{"numaNode": 0, "limits": {"memory": "512Mi"}}],
           "featureGates": ON}
    pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {
        "resources": {"limits": {"cpu": "4", "memory": "1Gi"}},
        "containers": [
            {"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}},
            {"name": "exact", "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}}]}}
    out = _add_one(cfg, pod, _machine(4 * GI))
    assert out["admitted"] is True
    assert [(c["name"], c["mems"]) for c in out["containers"]] == [("app", ""), ("exact", "0")]


def test_container_scope_refuses_a_pod_level_pod_with_the_kubelets_text():
    """topologyManagerScope container, a pod with .spec.resources and the pod-level gates on:
    a container whose hints the policy refuses refuses the pod with the kubelet's pod-level
    text (scope_container.go Admit: PodLevelTopologyAffinityError, v1.37.2), as deployed
    (whole-pod admission) and NRI alone (differential seed 15)."""
    from nri_cpumgr.planner.scenario import run_scenario

    cpus = [{"cpu": i, "core": i, "socket": 0, "numa": i // 2, "uncore": 0} for i in range(4)]
    nodes = [{"id": n, "memory_bytes": 4 << 30, "distances": {"0": 10 if n == 0 else 20,
                                                              "1": 20 if n == 0 else 10}}
             for n in (0, 1)]
    r = {"cpu": "3", "memory": "64Mi"}
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
           "spec": {"containers": [{"name": "app0", "resources": {"requests": r, "limits": r}}],
                    "resources": {"requests": {"cpu": "3", "memory": "1Gi"},
                                  "limits": {"cpu": "3", "memory": "1Gi"}}}}
    for mode in ("as-deployed", "nri-alone"):
        out = run_scenario({
            "mode": mode, "machine": {"cpus": cpus, "numa_nodes": nodes},
            "config": {"cpuManagerPolicy": "static", "reservedSystemCPUs": "3",
                       "topologyManagerPolicy": "single-numa-node",
                       "topologyManagerScope": "container",
                       "featureGates": {"PodLevelResources": True,
                                        "PodLevelResourceManagers": True}},
            "events": [{"op": "add", "pod": pod}]})
        (ev,) = out["events"]
        assert (ev["admitted"], ev["reason"], ev["message"]) == (
            False, "TopologyAffinityError", "Pod Scope pod with pod-level resources failed "
            "admission with a container-level topology manager"), (mode, ev)


def test_memory_partition_check_is_the_kubelets():
    """memorymanager policy_static.go validatePodScopeResources (v1.37.2): the long-running
    containers' own memory (requests equal to limits) may not take a whole pod budget when
    a container has none of its own; a regular init container without memory needs what the
    sidecars before it leave."""
    from nri_cpumgr.cm.podresources.policy import validate_pod_scope_memory
    from nri_cpumgr.podmodel import ContainerSpec, Pod

    mi = 1 << 20

    def own(name, mem, restartable=False):
        r = {"cpu": 1000, "memory": mem * mi}
        return ContainerSpec(name, r, r, restartable)

    def bare(name, restartable=False):
        return ContainerSpec(name, {}, {}, restartable)

    def check(inits, apps, budget=512):
        pod = Pod(uid="u", containers=tuple(apps), init_containers=tuple(inits),
                  qos=QOSClass.GUARANTEED, pod_level_resources=True)
        return validate_pod_scope_memory({"memory": budget * mi, "cpu": 8000}, pod)

    full = [own("a", 256), own("b", 128), own("c", 128)]
    assert check([bare("side", True)], full) == (
        "pod rejected, sum of exclusive container memory requests equals pod budget, "
        "leaving no memory for shared containers")  # seed 404104
    assert check([], full) is None  # nobody needs the pod's shared memory
    assert check([bare("side", True)], full[:2]) is None  # 128Mi left
    assert check([own("side", 512, True), bare("init")], [own("a", 1)]) == (
        "pod rejected, pod has shared init containers but no memory available for them")
    # a container whose requests differ from its limits has no memory of its own
    half = ContainerSpec("h", {"cpu": 500, "memory": 256 * mi}, {"cpu": 1000, "memory": 256 * mi})
    assert check([], [own("a", 512), half]) is not None
