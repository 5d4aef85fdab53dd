"""Field reports of issue 10 (items 3, 4, 5, 7, 8), replayed through the product's own
admission pipeline (ContainerManager -> TopologyManager -> CPU / Memory Manager) on the
topologies the reports describe."""

from __future__ import annotations

import dataclasses

import pytest

from nri_cpumgr.checkpoint import Checkpoint
from nri_cpumgr.cm.container_manager import AdmissionError, ContainerManager
from nri_cpumgr.cm.cpumanager import CPUManagerState, StaticPolicy
from nri_cpumgr.cm.memorymanager.config import MemoryReservation, new_manager
from nri_cpumgr.cm.topologymanager import TopologyAffinityError, TopologyManager
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import QOSClass
from nri_cpumgr.podmodel.nri import ContainerInfo, Resources
from nri_cpumgr.runtime.plugin import restore_state
from nri_cpumgr.topology import CPUInfo, CPUTopology, NUMANodeInfo
from tests.conformance_data import corpus_pod

GiB = 1 << 30
MiB = 1 << 20


def container(cid: str, pod: str, cpus: int, memory: int = MiB) -> ContainerInfo:
    """A Guaranteed container of ``cpus`` whole CPUs and ``memory`` bytes."""
    return ContainerInfo(
        id=cid, pod_id="sb-" + pod, pod_uid=pod, pod_name=pod, namespace="ns", name="c",
        restart_count=0, qos=QOSClass.GUARANTEED, qos_source="cgroup-parent",
        resources=Resources(cpus * 1024, cpus * 1000, cpus * 1000, memory, {}),
        cpus="", devices=(),
    )


def topo_four_numa_256() -> CPUTopology:
    """#139430's machine: 256 CPUs, 4 NUMA nodes (2 per socket), 32 cores per node, SMT
    siblings 128 apart (NUMA n = CPUs 32n..32n+31 and 128+32n..128+32n+31)."""
    details = {}
    for core in range(128):
        numa = core // 32
        for cpu in (core, core + 128):
            details[cpu] = CPUInfo(numa=numa, socket=numa // 2, core=core)
    return CPUTopology.from_details(details)


def topo_sockets_numa(sockets: int, numa_per_socket: int, cpus_per_numa: int) -> CPUTopology:
    """No SMT; NUMA node n holds CPUs n*cpus_per_numa ..., sockets in NUMA order."""
    details = {}
    for n in range(sockets * numa_per_socket):
        for i in range(cpus_per_numa):
            cpu = n * cpus_per_numa + i
            details[cpu] = CPUInfo(numa=n, socket=n // numa_per_socket, core=cpu)
    return CPUTopology.from_details(details)


def static_manager(
    topo: CPUTopology, reserved: CPUSet, options: dict[str, str], tm: TopologyManager | None
) -> ContainerManager:
    policy = StaticPolicy(topo, len(reserved), reserved, options)
    state = CPUManagerState()
    policy.start(state)
    return ContainerManager(policy, state, topology_manager=tm)


def numa_of(topo: CPUTopology, cpus: CPUSet) -> dict[int, int]:
    out: dict[int, int] = {}
    for c in cpus:
        n = topo.details[c].numa
        out[n] = out.get(n, 0) + 1
    return out


# ---- item 3: distribute-cpus-across-numa keeps the Topology Manager's affinity --------------


def test_distributed_take_spreads_over_every_node_of_the_affinity() -> None:
    """kubernetes #139430 / PR #139456: 176 CPUs, affinity = all 4 NUMA nodes (devices on
    every node): 44 CPUs from each node, not 3 nodes as the released kubelet does."""
    topo = topo_four_numa_256()
    tm = TopologyManager("best-effort", numa_nodes=[0, 1, 2, 3])
    m = static_manager(
        topo, CPUSet({0, 128}), {"distribute-cpus-across-numa": "true"}, tm
    )
    d = m.admit(container("g", "p", 176), device_numa=frozenset({0, 1, 2, 3}))
    assert tm.get_affinity("p", "c").numa == frozenset({0, 1, 2, 3})
    assert len(d.cpus) == 176
    assert numa_of(topo, d.cpus) == {0: 44, 1: 44, 2: 44, 3: 44}
    assert not d.cpus & CPUSet({0, 128})


def test_without_the_affinity_floor_the_released_kubelets_take(monkeypatch) -> None:
    """StaticPolicy.affinity_floor off (the differential's evidence that a difference is PR
    #139456's alone): #139430's released behaviour, 176 CPUs on 3 of the affinity's 4 nodes."""
    monkeypatch.setattr(StaticPolicy, "affinity_floor", False)
    topo = topo_four_numa_256()
    tm = TopologyManager("best-effort", numa_nodes=[0, 1, 2, 3])
    m = static_manager(topo, CPUSet({0, 128}), {"distribute-cpus-across-numa": "true"}, tm)
    d = m.admit(container("g", "p", 176), device_numa=frozenset({0, 1, 2, 3}))
    assert len(d.cpus) == 176 and len(numa_of(topo, d.cpus)) == 3


def test_affinity_floor_ignored_when_request_has_fewer_groups_than_nodes() -> None:
    """2 CPUs cannot be spread over 4 nodes: the floor does not apply and the request stays
    on the fewest nodes (one)."""
    topo = topo_four_numa_256()
    tm = TopologyManager("best-effort", numa_nodes=[0, 1, 2, 3])
    m = static_manager(topo, CPUSet({0, 128}), {"distribute-cpus-across-numa": "true"}, tm)
    d = m.admit(container("g", "p", 2), device_numa=frozenset({0, 1, 2, 3}))
    assert len(d.cpus) == 2 and len(numa_of(topo, d.cpus)) == 1


# ---- item 4: align-by-socket is kept by the distributed take -------------------------------

ALIGN_DISTRIBUTE = {
    "align-by-socket": "true",
    "distribute-cpus-across-numa": "true",
}


def _sockets(topo: CPUTopology, cpus: CPUSet) -> set[int]:
    return {topo.details[c].socket for c in cpus}


def _manager_alpha(topo: CPUTopology, reserved: CPUSet) -> ContainerManager:
    policy = StaticPolicy(
        topo, len(reserved), reserved, ALIGN_DISTRIBUTE,
        feature_gates={"CPUManagerPolicyAlphaOptions": True},
    )
    state = CPUManagerState()
    policy.start(state)
    return ContainerManager(policy, state)


def test_align_by_socket_keeps_15_cpus_in_one_socket() -> None:
    """#114642 / PR #139778: 2 sockets x 2 NUMA nodes x 14 CPUs, 15 CPUs, Topology Manager
    none: both NUMA nodes of one socket, never both sockets."""
    topo = topo_sockets_numa(2, 2, 14)
    m = _manager_alpha(topo, CPUSet({0}))
    d = m.admit(container("g", "p", 15))
    assert len(d.cpus) == 15
    assert len(_sockets(topo, d.cpus)) == 1
    assert len(numa_of(topo, d.cpus)) == 2  # still distributed over that socket's nodes


def test_align_by_socket_keeps_120_cpus_in_one_socket() -> None:
    """#141237: 2 sockets x 4 NUMA nodes x 32 CPUs, NUMA 3 and 7 with 30 free; 120 CPUs fit
    socket 0 (126 free) and must stay there, 30 per NUMA node."""
    topo = topo_sockets_numa(2, 4, 32)
    reserved = CPUSet({96, 97, 224, 225})  # 2 CPUs each on NUMA 3 and NUMA 7
    m = _manager_alpha(topo, reserved)
    d = m.admit(container("g", "p", 120))
    assert len(d.cpus) == 120
    assert len(_sockets(topo, d.cpus)) == 1
    assert sorted(numa_of(topo, d.cpus).values()) == [30, 30, 30, 30]


# ---- item 5: memory that no allowed NUMA set can hold is refused at admission --------------


def _memory_pipeline(policy_name: str) -> ContainerManager:
    topo = topo_sockets_numa(2, 1, 4)  # 2 NUMA nodes, 4 CPUs each
    nodes = [NUMANodeInfo(id=0, memory_bytes=8 * GiB), NUMANodeInfo(id=1, memory_bytes=8 * GiB)]
    memory = new_manager(
        "Static",
        nodes,
        {"memory": "2Gi"},
        [MemoryReservation(0, {"memory": "1Gi"}), MemoryReservation(1, {"memory": "1Gi"})],
    )
    memory.start()
    tm = TopologyManager(policy_name, numa_nodes=[0, 1])
    policy = StaticPolicy(topo, 1, CPUSet({0}))
    state = CPUManagerState()
    policy.start(state)
    return ContainerManager(policy, state, topology_manager=tm, memory=memory)


@pytest.mark.parametrize("policy_name", ["restricted", "single-numa-node"])
def test_memory_no_numa_set_can_hold_is_refused_at_admission(policy_name: str) -> None:
    """#128708 / #138495: after 256 MiB on NUMA 0, 9 GiB fits no allowed NUMA set (a single
    node holds 7 GiB; NUMA 0 serves a single-node allocation so cannot join a group). The
    kubelet admits and fails in Allocate (ExtendHintError); we refuse at admission."""
    m = _memory_pipeline(policy_name)
    first = m.admit(container("a", "pa", 1, 256 * MiB))
    assert first.mems == CPUSet({0})
    ms = m.memory.state.get_machine_state()
    before_free = {n: ms[n].memory_map["memory"].free for n in ms}
    cpus_before = m.state.copy()
    with pytest.raises(AdmissionError) as err:
        m.admit(container("b", "pb", 1, 9 * GiB))
    text = str(err.value)
    assert text.startswith("TopologyAffinityError: Resources cannot be allocated")
    assert "ExtendHintError" not in text
    # nothing left allocated
    assert m.state.get_cpuset("pb", "c") is None
    assert m.state.default_set == cpus_before.default_set
    assert m.memory.get_memory("pb", "c") is None
    ms = m.memory.state.get_machine_state()
    assert {n: ms[n].memory_map["memory"].free for n in ms} == before_free


@pytest.mark.parametrize("policy_name", ["restricted", "single-numa-node"])
def test_memory_no_numa_set_can_hold_a_pod_admitted_whole_gets_the_kubelet_refusal(
        policy_name: str, caplog: pytest.LogCaptureFixture) -> None:
    """The same request in a pod whose spec is known (admitted whole, as deployed): nothing
    can be half admitted, so the kubelet's answer stands: no memory preference, then its
    Memory Manager's Allocate fails (UnexpectedAdmissionError, kubelet
    admission.GetPodAdmitResult); the plugin's reading of it goes to the log and explain,
    not into the refusal."""
    from nri_cpumgr.config import Config
    from nri_cpumgr.explain.explainer import Explainer
    from nri_cpumgr.podmodel.spec import facts_from_pod

    def known(cid: str, pod: str, memory: str, nbytes: int) -> ContainerInfo:
        facts = facts_from_pod({"metadata": {"uid": pod, "name": pod, "namespace": "ns"},
                                "spec": {"containers": [{"name": "c", "resources": {
                                    "limits": {"cpu": "1", "memory": memory}}}]}})
        return dataclasses.replace(container(cid, pod, 1, nbytes), pod_spec=facts)

    m = _memory_pipeline(policy_name)
    m.admit(known("a", "pa", "256Mi", 256 * MiB))
    ms = m.memory.state.get_machine_state()
    before_free = {n: ms[n].memory_map["memory"].free for n in ms}
    cpus_before = m.state.copy()
    ex = Explainer(m, Config.model_validate({
        "cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
        "topologyManagerPolicy": policy_name, "memoryManagerPolicy": "Static"}))
    with caplog.at_level("INFO"), pytest.raises(AdmissionError) as err:
        ex.admit(known("b", "pb", "9Gi", 9 * GiB))
    assert str(err.value) == (
        "UnexpectedAdmissionError: Allocate failed due to [memorymanager] failed to find NUMA "
        "nodes to extend the current topology hint, which is unexpected")
    assert m.admissions["pb"].unsatisfiable == ("c",)
    assert "no NUMA node set can hold the memory of container c" in caplog.text
    assert ex.refusals[("pb", "c")]["why"].startswith(
        "no NUMA node set can hold the memory of container c")
    # nothing left allocated, the record survives a checkpoint
    assert m.state.get_cpuset("pb", "c") is None
    assert m.state.default_set == cpus_before.default_set
    assert m.memory.get_memory("pb", "c") is None
    assert {n: ms[n].memory_map["memory"].free for n in ms} == before_free
    rec = m.admissions["pb"]
    assert type(rec).from_json(rec.to_json()) == rec
    # the container-by-container path (NRI alone) still refuses at admission
    m2 = _memory_pipeline(policy_name)
    m2.admit(container("a", "pa", 1, 256 * MiB))
    with pytest.raises(AdmissionError, match="^TopologyAffinityError"):
        m2.admit(container("b", "pb", 1, 9 * GiB))


def test_memory_best_effort_keeps_the_kubelet_answer() -> None:
    """best-effort admits on any hints; the Memory Manager's allocation error is reported."""
    m = _memory_pipeline("best-effort")
    m.admit(container("a", "pa", 1, 256 * MiB))
    with pytest.raises(AdmissionError, match="ExtendHintError|extend"):
        m.admit(container("b", "pb", 1, 9 * GiB))
    assert m.memory.get_memory("pb", "c") is None


# ---- item 7: the checkpoint written under strict-cpu-reservation always loads --------------


def test_strict_reservation_never_writes_an_empty_shared_pool(tmp_path) -> None:
    """The last non-reserved CPU is refused as exclusive (it would empty the shared pool, a
    state the kubelet's validation, and ours, rejects on restart); what is written loads."""
    topo = topo_sockets_numa(1, 1, 4)
    opts = {"strict-cpu-reservation": "true"}
    m = static_manager(topo, CPUSet({0}), opts, None)
    got_a = m.admit(container("a", "pa", 2)).cpus
    assert got_a is not None and len(got_a) == 2 and 0 not in got_a
    with pytest.raises(AdmissionError, match=r"requested=1, available=0"):
        m.admit(container("b", "pb", 1))
    assert len(m.state.default_set) == 1
    assert m.state.get_cpuset("pb", "c") is None

    # written and restored the way the plugin does it (ContainerManager.checkpoint ->
    # Checkpoint file -> restore_state, which rebuilds an empty state if the policy rejects)
    cp = Checkpoint(tmp_path / "cpu_manager_state")
    cp.save(m.checkpoint())
    fresh = StaticPolicy(topo, 1, CPUSet({0}), opts)
    restored = restore_state(fresh, cp.load(), cp.path)
    assert restored.assignments == m.state.assignments
    assert restored.default_set == m.state.default_set
    assert restored.default_set  # never empty


# ---- item 8: the error name once ------------------------------------------------------------


def test_topology_affinity_error_name_appears_once() -> None:
    topo = topo_sockets_numa(2, 1, 4)
    tm = TopologyManager("single-numa-node", numa_nodes=[0, 1])
    m = static_manager(topo, CPUSet({0}), {}, tm)
    with pytest.raises(AdmissionError) as err:
        m.admit(container("g", "p", 6))  # 6 CPUs fit no single NUMA node (4 each)
    text = str(err.value)
    assert text.startswith("TopologyAffinityError: Resources cannot be allocated")
    assert text.count("TopologyAffinityError") == 1
    # the admit result carries the kubelet's reason and message apart: the name is not
    # repeated inside the message
    res = {"cpu": "6", "memory": "1Gi"}
    pod = corpus_pod(
        {"uid": "p2", "containers": [{"name": "c", "requests": res, "limits": res}]}
    )
    result = tm.admit(pod)
    assert (result.admit, result.reason) == (False, "TopologyAffinityError")
    # the kubelet's text exactly (topology_manager.go TopologyAffinityError.Error, v1.37.2):
    # the pod and container are named by the plugin's CreateContainer error, not here
    assert result.message == "Resources cannot be allocated with Topology locality"
    assert isinstance(result.error, TopologyAffinityError)
    tm_pod = TopologyManager("single-numa-node", numa_nodes=[0, 1], scope="pod")
    static_manager(topo, CPUSet({0}), {}, tm_pod)
    result = tm_pod.admit(pod)
    assert (result.admit, result.reason) == (False, "TopologyAffinityError")
    assert result.message == "Resources cannot be allocated with Topology locality"
