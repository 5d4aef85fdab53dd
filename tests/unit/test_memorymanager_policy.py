"""Unit tests of the Memory Manager static policy beyond the conformance corpus.

The Start cases below are the kubelet's TestStaticPolicyStart cases that the corpus file
does not carry (policy_static_test.go, transcribed as data); the rest are scenarios built
from the rules in policy_static.go, with hand-computed expectations.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_cpumgr.cm.memorymanager import errors
from nri_cpumgr.cm.memorymanager.manager import MemoryManager, mems_for
from nri_cpumgr.cm.memorymanager.policy_static import (
    StaticPolicy,
    find_best_hint,
    pod_requested_resources,
)
from nri_cpumgr.cm.memorymanager.state import (
    Block,
    MemoryState,
    MemoryTable,
    NUMANodeState,
    machine_states_equal,
)
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import ContainerSpec, Pod
from nri_cpumgr.topology import NUMANodeInfo

MB = 1 << 20
GB = 1 << 30
HP1G = "hugepages-1Gi"


def node(nid: int, memory: int, pages_1g: int = 0) -> NUMANodeInfo:
    return NUMANodeInfo(id=nid, memory_bytes=memory, hugepages={GB: pages_1g} if pages_1g else {})


def table(alloc: int, free: int, reserved: int, sysres: int, total: int) -> MemoryTable:
    return MemoryTable(
        total_mem_size=total,
        system_reserved=sysres,
        allocatable=alloc,
        reserved=reserved,
        free=free,
    )


def guaranteed(name: str, memory: int, hugepages: int = 0, restartable: bool = False):
    res = {"cpu": 1000, "memory": memory}
    if hugepages:
        res[HP1G] = hugepages
    return ContainerSpec(name=name, requests=res, limits=res, restartable=restartable)


def policy(nodes: list[NUMANodeInfo], reserved_mb: int = 512) -> StaticPolicy:
    return StaticPolicy(nodes, {n.id: {"memory": reserved_mb * MB} for n in nodes})


# --- Start (kubelet TestStaticPolicyStart cases missing from the corpus file) -------------


def _start_error(nodes, ms, assignments=None) -> str:
    p = policy(nodes)
    with pytest.raises(errors.InvalidStateError) as info:
        p.start(MemoryState(ms, assignments or {}))
    return str(info.value)


MISMATCH = "[memorymanager] the expected machine state is different from the real one"


def test_start_fails_when_state_lacks_a_numa_node() -> None:
    ms = {
        0: NUMANodeState(
            0,
            {
                "memory": table(1536 * MB, 1536 * MB, 0, 512 * MB, 2 * GB),
                HP1G: table(GB, GB, 0, 0, GB),
            },
            [0],
        )
    }
    assert _start_error([node(0, 2 * GB, 1), node(1, 2 * GB, 1)], ms) == MISMATCH


def test_start_fails_when_state_lacks_memory_resource() -> None:
    ms = {0: NUMANodeState(0, {HP1G: table(GB, GB, 0, 0, GB)}, [0])}
    assert _start_error([node(0, 2 * GB, 1)], ms) == MISMATCH


def test_start_fails_on_wrong_system_reserved_hugepages() -> None:
    ms = {
        0: NUMANodeState(
            0,
            {
                "memory": table(1536 * MB, 1536 * MB, 0, 512 * MB, 2 * GB),
                HP1G: table(GB, GB, 0, GB, 2 * GB),
            },
            [0],
        )
    }
    assert _start_error([node(0, 2 * GB, 2)], ms) == MISMATCH


def test_start_fails_on_wrong_number_of_assignments() -> None:
    ms = {
        0: NUMANodeState(
            1,
            {
                "memory": table(1536 * MB, 1536 * MB, 0, 512 * MB, 2 * GB),
                HP1G: table(GB, GB, 0, 0, GB),
            },
            [0],
        )
    }
    a = {"pod1": {"container1": [Block((0,), "memory", GB), Block((0,), HP1G, GB)]}}
    assert _start_error([node(0, 2 * GB, 1)], ms, a) == MISMATCH


def _cross_numa_state() -> tuple[dict[int, NUMANodeState], dict[str, dict[str, list[Block]]]]:
    ms = {
        0: NUMANodeState(
            4,
            {
                "memory": table(640 * MB, 0, 640 * MB, 512 * MB, 2176 * MB),
                HP1G: table(GB, 0, GB, 0, GB),
            },
            [0, 1],
        ),
        1: NUMANodeState(
            4,
            {
                "memory": table(640 * MB, 256 * MB, 384 * MB, 512 * MB, 2176 * MB),
                HP1G: table(GB, 0, GB, 0, GB),
            },
            [0, 1],
        ),
    }
    a = {
        "pod1": {"container1": [Block((0, 1), "memory", 768 * MB), Block((0, 1), HP1G, GB)]},
        "pod2": {"container2": [Block((0, 1), "memory", 256 * MB), Block((0, 1), HP1G, GB)]},
    }
    return ms, a


def test_start_accepts_cross_numa_state_matching_assignments() -> None:
    ms, a = _cross_numa_state()
    p = policy([node(0, 2176 * MB, 1), node(1, 2176 * MB, 1)])
    s = MemoryState(ms, a)
    p.start(s)
    assert s.get_memory_assignments() == a
    assert machine_states_equal(s.get_machine_state(), ms)
    assert s.get_machine_state() == ms  # restored state is kept as it was


def test_start_tolerates_other_split_inside_a_group() -> None:
    ms, a = _cross_numa_state()
    # move 128Mi of reserved memory from node 0 to node 1: same group sums
    ms[0].memory_map["memory"] = table(640 * MB, 128 * MB, 512 * MB, 512 * MB, 2176 * MB)
    ms[1].memory_map["memory"] = table(640 * MB, 128 * MB, 512 * MB, 512 * MB, 2176 * MB)
    policy([node(0, 2176 * MB, 1), node(1, 2176 * MB, 1)]).start(MemoryState(ms, a))


def test_start_rejects_cross_numa_state_with_wrong_group_sum() -> None:
    ms, a = _cross_numa_state()
    ms[1].memory_map["memory"] = table(640 * MB, 0, 640 * MB, 512 * MB, 2176 * MB)
    assert _start_error([node(0, 2176 * MB, 1), node(1, 2176 * MB, 1)], ms, a) == MISMATCH


def test_default_machine_state_subtracts_hugepages_and_reserved() -> None:
    p = StaticPolicy([node(0, 4 * GB, 2)], {0: {"memory": 512 * MB, HP1G: GB}})
    ms = p.default_machine_state()
    assert ms[0].cells == [0] and ms[0].number_of_assignments == 0
    assert ms[0].memory_map["memory"] == table(1536 * MB, 1536 * MB, 0, 512 * MB, 4 * GB)
    assert ms[0].memory_map[HP1G] == table(GB, GB, 0, GB, 2 * GB)


# --- allocation rules -------------------------------------------------------------------


def _two_nodes() -> tuple[StaticPolicy, MemoryState]:
    p = policy([node(0, 4 * GB, 2), node(1, 4 * GB, 2)])
    s = MemoryState()
    p.start(s)
    return p, s


def test_allocate_prefers_single_node_and_pins_hugepages_too() -> None:
    p, s = _two_nodes()
    pod = Pod(uid="p", containers=(guaranteed("c", GB, GB),))
    p.allocate(s, pod, pod.containers[0])
    blocks = s.get_memory_blocks("p", "c")
    assert sorted(blocks, key=lambda b: b.type) == [
        Block((0,), HP1G, GB),
        Block((0,), "memory", GB),
    ]
    assert mems_for(blocks) == CPUSet({0})
    assert s.get_machine_state()[0].number_of_assignments == 2


def test_allocate_rejects_hint_that_mixes_single_and_group_nodes() -> None:
    p, s = _two_nodes()
    small = Pod(uid="a", containers=(guaranteed("c", GB),))
    p.allocate(s, small, small.containers[0], TopologyHint(frozenset({0}), True))
    wide = Pod(uid="b", containers=(guaranteed("c", GB),))
    before = s.to_dict()
    with pytest.raises(errors.NUMAAllocationViolationError) as info:
        p.allocate(s, wide, wide.containers[0], TopologyHint(frozenset({0, 1}), False))
    assert str(info.value) == "[memorymanager] preferred hint violates NUMA node allocation"
    assert s.to_dict() == before


def test_extended_hint_keeps_topology_manager_nodes() -> None:
    p, s = _two_nodes()
    # each node has 1.5Gi allocatable memory (4Gi - 512Mi reserved - 2Gi hugepages)
    pod = Pod(uid="p", containers=(guaranteed("c", 3 * GB),))
    p.allocate(s, pod, pod.containers[0], TopologyHint(frozenset({1}), False))
    assert s.get_memory_blocks("p", "c") == [Block((0, 1), "memory", 3 * GB)]
    ms = s.get_machine_state()
    assert ms[0].cells == [0, 1] and ms[1].cells == [0, 1]
    # node 0 is filled first (ascending ids), the rest spills to node 1
    assert ms[0].memory_map["memory"].free == 0
    assert ms[1].memory_map["memory"].reserved == 3 * GB - ms[0].memory_map["memory"].reserved


def test_group_nodes_are_not_offered_as_single_node_hints() -> None:
    p, s = _two_nodes()
    big = Pod(uid="a", containers=(guaranteed("c", 2 * GB),))  # 1.5Gi on node 0, 0.5Gi on 1
    p.allocate(s, big, big.containers[0])
    other = Pod(uid="b", containers=(guaranteed("c", 128 * MB),))
    hints = p.get_topology_hints(s, other, other.containers[0])
    assert hints == {"memory": [TopologyHint(frozenset({0, 1}), False)]}


def test_remove_restores_default_state() -> None:
    p, s = _two_nodes()
    pod = Pod(uid="p", containers=(guaranteed("c", 3 * GB, GB),))
    p.allocate(s, pod, pod.containers[0])
    p.remove_container(s, "p", "c")
    p.remove_container(s, "p", "c")  # idempotent
    assert s.get_memory_assignments() == {}
    assert s.get_machine_state() == p.default_machine_state()


def test_find_best_hint_prefers_preferred_then_narrower_then_lower_mask() -> None:
    a = TopologyHint(frozenset({1}), False)
    b = TopologyHint(frozenset({0, 1}), True)
    c = TopologyHint(frozenset({0, 2}), True)
    assert find_best_hint([a, c, b]) == b
    assert find_best_hint([]) is None


# --- pod-level requests and hints -------------------------------------------------------


def test_pod_requested_resources_counts_sidecars_in_init_peak() -> None:
    pod = Pod(
        uid="p",
        init_containers=(
            guaranteed("i1", 1 * GB),
            guaranteed("side", 2 * GB, restartable=True),
            guaranteed("i2", 3 * GB),
        ),
        containers=(guaranteed("app", 1 * GB),),
    )
    # peak: sidecar (2Gi) running while i2 (3Gi) runs = 5Gi > app + sidecar = 3Gi
    assert pod_requested_resources(pod) == {"memory": 5 * GB}


def test_pod_requested_resources_long_running_wins() -> None:
    pod = Pod(
        uid="p",
        init_containers=(guaranteed("side", 2 * GB, restartable=True), guaranteed("i", GB)),
        containers=(guaranteed("a", 2 * GB), guaranteed("b", 2 * GB)),
    )
    assert pod_requested_resources(pod) == {"memory": 6 * GB}


def test_pod_hints_use_pod_request_and_regenerate_from_existing_blocks() -> None:
    p, s = _two_nodes()
    pod = Pod(uid="p", containers=(guaranteed("a", 2 * GB), guaranteed("b", GB)))
    hints = p.get_pod_topology_hints(s, pod)
    # 3Gi do not fit one node (1.5Gi allocatable each)
    assert hints == {"memory": [TopologyHint(frozenset({0, 1}), True)]}
    s.set_memory_blocks("p", "a", [Block((1,), "memory", 3 * GB)])
    assert p.get_pod_topology_hints(s, pod) == {"memory": [TopologyHint(frozenset({1}), True)]}
    s.set_memory_blocks("p", "a", [Block((1,), "memory", GB)])
    assert p.get_pod_topology_hints(s, pod) is None


def test_no_hints_for_non_guaranteed_pod() -> None:
    p, s = _two_nodes()
    c = ContainerSpec(name="c", requests={"memory": GB}, limits={"memory": 2 * GB})
    pod = Pod(uid="p", containers=(c,))
    assert p.get_topology_hints(s, pod, c) is None
    assert p.get_pod_topology_hints(s, pod) is None
    p.allocate(s, pod, c)
    assert s.get_memory_assignments() == {}


def test_limits_only_container_is_treated_like_request() -> None:
    """NRI hands over limits only; for a Guaranteed pod they are the requests."""
    p, s = _two_nodes()
    c = ContainerSpec(name="c", limits={"cpu": 1000, "memory": GB, HP1G: GB})
    pod = Pod(uid="p", containers=(c,))
    p.allocate(s, pod, c)
    assert {b.type: b.size for b in s.get_memory_blocks("p", "c")} == {"memory": GB, HP1G: GB}


# --- manager ----------------------------------------------------------------------------


def test_add_container_releases_regular_init_containers_only() -> None:
    p, s = _two_nodes()
    pod = Pod(
        uid="p",
        init_containers=(guaranteed("init", GB), guaranteed("side", GB, restartable=True)),
        containers=(guaranteed("app", 512 * MB),),
    )
    mgr = MemoryManager(p, s, active_pods=lambda: [pod])
    for i, c in enumerate(pod.init_containers + pod.containers):
        mgr.allocate(pod, c, TopologyHint(frozenset({0}), True))
        mgr.add_container(pod, c, f"id{i}")
    assigned = mgr.state.get_memory_assignments()["p"]
    assert set(assigned) == {"side", "app"}
    assert mgr.get_memory_numa_nodes(pod, pod.containers[0]) == CPUSet({0})
    ms = mgr.state.get_machine_state()[0].memory_map["memory"]
    # the init container's 1Gi is gone: 1Gi (sidecar) + 512Mi (app, none reused) reserved
    assert ms.reserved == GB + 512 * MB
    mgr.remove_container("id2")
    mgr.remove_container("unknown")
    assert set(mgr.state.get_memory_assignments()["p"]) == {"side"}
    assert "id2" not in mgr.container_map


def test_manager_without_active_pods_keeps_state() -> None:
    p, s = _two_nodes()
    s.set_memory_blocks("gone", "c", [Block((0,), "memory", GB)])
    MemoryManager(p, s).remove_stale_state()
    assert s.get_memory_blocks("gone", "c") == [Block((0,), "memory", GB)]


def test_mems_for_empty() -> None:
    assert mems_for(None) == CPUSet()
    assert str(mems_for([Block((0, 1), "memory", 1), Block((1,), HP1G, 1)])) == "0-1"


# --- invariants under random allocate/remove sequences ------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=12),  # memory in 256Mi units
            st.integers(min_value=0, max_value=2),  # 1Gi hugepages
            st.sampled_from([None, (0,), (1,), (0, 1), (2,)]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_allocate_remove_invariants(requests) -> None:
    p = policy([node(0, 4 * GB, 2), node(1, 4 * GB, 2), node(2, 4 * GB, 2)])
    s = MemoryState()
    p.start(s)
    placed = []
    only_default_hints = True
    for i, (mem, hp, numa) in enumerate(requests):
        pod = Pod(uid=f"p{i}", containers=(guaranteed("c", mem * 256 * MB, hp * GB),))
        hint = TopologyHint(frozenset(numa), False) if numa is not None else None
        try:
            p.allocate(s, pod, pod.containers[0], hint)
        except errors.AllocationError:
            continue
        placed.append(pod.uid)
        only_default_hints = only_default_hints and numa is None
        ms = s.get_machine_state()
        for n, nst in ms.items():
            for t in nst.memory_map.values():
                assert t.free >= 0 and t.free + t.reserved == t.allocatable
            # group rule: every node of a used group points at the same group. Only for
            # calculated hints: like the kubelet, a single-node hint from the Topology
            # Manager is accepted even on a grouped node (isAffinityViolatingNUMAAllocations
            # does not check single-node affinities).
            if nst.number_of_assignments and only_default_hints:
                assert all(ms[m].cells == nst.cells for m in nst.cells)
                assert n in nst.cells
        # the state still validates as a restored state
        p.start(MemoryState(s.get_machine_state(), s.get_memory_assignments()))
    for uid in placed:
        p.remove_container(s, uid, "c")
    assert s.get_machine_state() == p.default_machine_state()
