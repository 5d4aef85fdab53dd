"""The static policy's CPU topology hints (StaticPolicy.generate_hints, issue 34: it visits only
the combinations holding the reusable CPUs' nodes) are the kubelet loop's hints, in the same
order, with the same preferred flags (``_generate_hints_reference``: every combination, as
generateCPUTopologyHints in the kubelet's policy_static.go, v1.37.2)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_cpumgr.cm.cpumanager.policy_options import StaticPolicyOptions
from nri_cpumgr.cm.cpumanager.policy_static import StaticPolicy
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.topology import CPUInfo, CPUTopology


def topology(sockets: int, nodes_per_socket: int, cores_per_node: list[int],
             threads: int) -> CPUTopology:
    """Nodes of uneven sizes (``cores_per_node`` cycled), ``threads`` per core."""
    details: dict[int, CPUInfo] = {}
    cpu = core = 0
    for node in range(sockets * nodes_per_socket):
        for _ in range(cores_per_node[node % len(cores_per_node)]):
            for _t in range(threads):
                details[cpu] = CPUInfo(numa=node, socket=node // nodes_per_socket, core=core)
                cpu += 1
            core += 1
    return CPUTopology.from_details(details)


def check(policy: StaticPolicy, available: CPUSet, reusable: CPUSet, request: int) -> None:
    got = policy.generate_hints(available, reusable, request)
    want = policy._generate_hints_reference(available, reusable, request)
    assert got == want


@settings(max_examples=150, deadline=None)
@given(sockets=st.integers(1, 2), per_socket=st.integers(1, 4),
       cores=st.lists(st.integers(1, 3), min_size=1, max_size=4), threads=st.integers(1, 2),
       align=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_hints_are_the_kubelet_loops(sockets: int, per_socket: int, cores: list[int],
                                     threads: int, align: bool, seed: int) -> None:
    topo = topology(sockets, per_socket, cores, threads)
    opts = StaticPolicyOptions(align_by_socket=align) if align else StaticPolicyOptions()
    policy = StaticPolicy(topo, 1, options=opts)
    rng = random.Random(seed)
    cpus = sorted(topo.details)
    for _ in range(6):
        available = CPUSet(c for c in cpus if rng.random() < 0.6)
        reusable = CPUSet(rng.sample(cpus, rng.randint(0, min(3, len(cpus)))))
        reusable = reusable - available
        check(policy, available, reusable, rng.randint(0, len(cpus) + 2))
    # a reusable CPU the topology does not have: no hint either way
    check(policy, topo.cpus(), CPUSet([max(cpus) + 1]), 1)


@pytest.mark.parametrize("request_cpus", [1, 5, 48, 100, 500])
def test_sixteen_nodes(request_cpus: int) -> None:
    """16 NUMA nodes (65,535 combinations), a fragmented free pool and reusable CPUs on two
    nodes."""
    topo = topology(2, 8, [6, 4, 5], 2)
    policy = StaticPolicy(topo, 1)
    rng = random.Random(request_cpus)
    available = CPUSet(c for c in topo.details if rng.random() < 0.5)
    check(policy, available, CPUSet(), request_cpus)
    reusable = CPUSet([c for c in topo.details if topo.details[c].numa in (3, 9)][:2])
    check(policy, available - reusable, reusable, request_cpus)
