"""Property tests of the CPU take strategies (nri_cpumgr.cm.cpumanager.cpu_assignment)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_cpumgr.cm.cpumanager import (
    CPUManagerState,
    InvalidPolicyOptionError,
    NotEnoughCPUsError,
    PolicyConfigError,
    StaticPolicy,
    take_distributed,
    take_packed,
)
from nri_cpumgr.cm.cpumanager.cpu_assignment import cpus_to_mask, mask_to_cpus, topology_index
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import ContainerSpec, Pod
from nri_cpumgr.topology import CPUInfo, CPUTopology


def make_topology(
    sockets: int, numa_per_socket: int, l3_per_numa: int, cores_per_l3: int, threads: int
) -> CPUTopology:
    """A consistent machine numbered like Linux: CPU c + t*cores is thread t of core c."""
    cores = sockets * numa_per_socket * l3_per_numa * cores_per_l3
    details: dict[int, CPUInfo] = {}
    for core in range(cores):
        l3 = core // cores_per_l3
        numa = l3 // l3_per_numa
        socket = numa // numa_per_socket
        for t in range(threads):
            details[core + t * cores] = CPUInfo(numa=numa, socket=socket, core=core, uncore=l3)
    return CPUTopology.from_details(details)


def make_hybrid_topology(sockets: int, single: int, smt: int) -> CPUTopology:
    """A hybrid machine (as Intel's P- and E-cores): per socket ``single`` one-thread cores,
    then ``smt`` two-thread cores, numbered like Linux (the first threads, then the
    siblings); one NUMA node and one L3 per socket."""
    details: dict[int, CPUInfo] = {}
    cores = sockets * (single + smt)
    for core in range(cores):
        socket = core // (single + smt)
        details[core] = CPUInfo(numa=socket, socket=socket, core=core, uncore=socket)
    n = cores
    for core in range(cores):
        if core % (single + smt) >= single:
            socket = core // (single + smt)
            details[n] = CPUInfo(numa=socket, socket=socket, core=core, uncore=socket)
            n += 1
    return CPUTopology.from_details(details)


uniform_topologies = st.builds(
    make_topology,
    sockets=st.integers(1, 3),
    numa_per_socket=st.integers(1, 2),
    l3_per_numa=st.integers(1, 2),
    cores_per_l3=st.integers(1, 4),
    threads=st.sampled_from([1, 2, 4]),
)
topologies = st.one_of(
    uniform_topologies,
    st.builds(make_hybrid_topology, sockets=st.integers(1, 2), single=st.integers(1, 8),
              smt=st.integers(1, 8)),
)


@st.composite
def topology_and_pool(draw: st.DrawFn) -> tuple[CPUTopology, CPUSet]:
    topo = draw(topologies)
    cpus = sorted(topo.details)
    keep = draw(st.lists(st.booleans(), min_size=len(cpus), max_size=len(cpus)))
    return topo, CPUSet(c for c, k in zip(cpus, keep, strict=True) if k)


@settings(max_examples=300, deadline=None)
@given(topology_and_pool(), st.booleans())
def test_best_core_from_the_sibling_masks_is_the_scan_of_the_cores(
    tp: tuple[CPUTopology, CPUSet], shuffle: bool
) -> None:
    """On a machine of two-thread cores numbered c and c + shift (TopologyIndex
    .sibling_shift), the best core of a socket or NUMA node made of whole cores (the fewest
    free CPUs, then the lowest id: kubelet cpu_assignment.go sortAvailableCores' first) from
    a few mask operations is the one the pass over its cores finds; a machine numbered
    otherwise (one thread, four, a hybrid, cores in another order) has no shift."""
    from nri_cpumgr.cm.cpumanager.cpu_assignment import _Accumulator

    topo, pool = tp
    if shuffle:  # (core ids against the CPU order: no shift may be found)
        ids = sorted({i.core for i in topo.details.values()})
        back = dict(zip(ids, reversed(ids), strict=True))
        topo = CPUTopology.from_details({c: CPUInfo(i.numa, i.socket, back[i.core], i.uncore)
                                         for c, i in topo.details.items()})
    idx = topology_index(topo)
    regular = topo.cpus_per_core() == 2 and all(
        sum(1 for i in topo.details.values() if i.core == core) == 2
        for core in {i.core for i in topo.details.values()})
    if not regular or (shuffle and len(idx.cores) > 1):
        assert idx.sibling_shift == 0
        return
    assert idx.sibling_shift > 0 and len(idx.core_of_low) == len(idx.cores)
    acc = _Accumulator(idx, cpus_to_mask(pool), 1, False)
    seen = 0
    for groups, lows in ((idx.numa_cores, idx.numa_lows), (idx.socket_cores, idx.socket_lows)):
        for g, cores in groups.items():
            if g in lows:
                seen += 1
                assert acc._best_core(cores, lows[g]) == acc._best_core(cores)
    assert seen


@st.composite
def smt2_topology_and_mostly_free_pool(draw: st.DrawFn) -> tuple[CPUTopology, CPUSet]:
    """A two-thread machine (make_topology's numbering has a sibling shift) and a pool
    where most CPUs are free (whole free cores for the take to choose among)."""
    topo = draw(st.builds(make_topology, sockets=st.integers(1, 3),
                          numa_per_socket=st.integers(1, 2), l3_per_numa=st.integers(1, 2),
                          cores_per_l3=st.integers(1, 4), threads=st.just(2)))
    cpus = sorted(topo.details)
    keep = draw(st.lists(st.integers(0, 9), min_size=len(cpus), max_size=len(cpus)))
    return topo, CPUSet(c for c, k in zip(cpus, keep, strict=True) if k < 8)


@settings(max_examples=400, deadline=None)
@given(st.one_of(smt2_topology_and_mostly_free_pool(), topology_and_pool()),
       st.integers(1, 12), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_the_sibling_mask_shortcuts_take_what_the_core_by_core_passes_take(
    tp: tuple[CPUTopology, CPUSet], count: int, spread: bool, uncore: bool,
    distribute: bool, by_socket: bool
) -> None:
    """The packed and distributed takes (kubelet cpu_assignment.go takeByTopologyNUMAPacked,
    takeByTopologyNUMADistributed, v1.37.2) give the same CPUs, or the same error, with the
    TopologyIndex.sibling_shift shortcuts (the best core, the free cores) as with the
    passes over every core they replace."""
    import dataclasses

    from nri_cpumgr.cm.cpumanager.cpu_assignment import _distributed, _packed

    topo, pool = tp
    idx = topology_index(topo)
    plain = dataclasses.replace(idx, sibling_shift=0, core_of_low={}, socket_lows={},
                                numa_lows={})
    avail = cpus_to_mask(pool)

    def take(index: object) -> object:
        try:
            if distribute:
                return _distributed(index, avail, count, len(pool), 1, spread, by_socket, 0)
            return _packed(index, avail, count, len(pool), spread, uncore)
        except Exception as e:  # noqa: BLE001 - the same error, the same text
            return (type(e), str(e))

    assert take(idx) == take(plain)


take_options = st.fixed_dictionaries(
    {"spread": st.booleans(), "prefer_align_by_uncorecache": st.booleans()}
)


@settings(max_examples=300, deadline=None)
@given(topology_and_pool(), st.integers(0, 80), take_options)
def test_packed_take_returns_exactly_count_from_available(
    tp: tuple[CPUTopology, CPUSet], count: int, opts: dict[str, bool]
) -> None:
    topo, pool = tp
    if count > len(pool):
        with pytest.raises(NotEnoughCPUsError) as exc:
            take_packed(topo, pool, count, **opts)
        assert (exc.value.requested, exc.value.available) == (count, len(pool))
        return
    got = take_packed(topo, pool, count, **opts)
    assert got <= pool
    assert len(got) == count
    assert take_packed(topo, pool, count, **opts) == got  # deterministic


@settings(max_examples=300, deadline=None)
@given(topology_and_pool(), st.integers(0, 80), st.sampled_from([1, 2, 4]), st.booleans())
def test_distributed_take_returns_exactly_count_from_available(
    tp: tuple[CPUTopology, CPUSet], count: int, group: int, align_by_socket: bool
) -> None:
    topo, pool = tp
    if count > len(pool):
        with pytest.raises(NotEnoughCPUsError):
            take_distributed(topo, pool, count, group, align_by_socket=align_by_socket)
        return
    got = take_distributed(topo, pool, count, group, align_by_socket=align_by_socket)
    assert got <= pool
    assert len(got) == count


@settings(max_examples=200, deadline=None)
@given(topologies, st.data())
def test_packed_take_of_a_numa_node_count_returns_one_free_node(
    topo: CPUTopology, data: st.DataObject
) -> None:
    nodes = sorted(topo.numa_nodes())
    target = data.draw(st.sampled_from(nodes))
    node_cpus = topo.cpus_in_numa_nodes([target])
    # the other nodes lose at least one CPU each, so the target is the only whole free node
    pool = set(node_cpus)
    for n in nodes:
        if n == target:
            continue
        others = sorted(topo.cpus_in_numa_nodes([n]))
        drop = data.draw(st.sampled_from(others))
        pool |= set(others) - {drop}
    got = take_packed(topo, CPUSet(pool), len(node_cpus))
    assert got == node_cpus


@settings(max_examples=200, deadline=None)
@given(uniform_topologies, st.data())  # (a hybrid machine has cores of 1 and 2 threads)
def test_packed_take_on_whole_cores_gives_whole_cores(
    topo: CPUTopology, data: st.DataObject
) -> None:
    per_core = topo.cpus_per_core()
    cores = sorted(topo.cores())
    free_cores = data.draw(st.lists(st.sampled_from(cores), unique=True, min_size=1))
    pool = topo.cpus_in_cores(free_cores)
    n_cores = data.draw(st.integers(1, len(free_cores)))
    got = take_packed(topo, pool, n_cores * per_core)
    assert len(got) == n_cores * per_core
    for cpu in got:
        assert topo.siblings(cpu) <= got


@settings(max_examples=100, deadline=None)
@given(topology_and_pool())
def test_mask_roundtrip_and_index(tp: tuple[CPUTopology, CPUSet]) -> None:
    topo, pool = tp
    assert mask_to_cpus(cpus_to_mask(pool)) == pool
    idx = topology_index(topo)
    assert idx is topology_index(topo)  # cached
    assert mask_to_cpus(idx.all_mask) == topo.cpus()
    for n in topo.numa_nodes():
        assert mask_to_cpus(idx.numa_mask[n]) == topo.cpus_in_numa_nodes([n])


def _gu_pod(uid: str, cpus: int) -> Pod:
    res = {"cpu": cpus * 1000, "memory": 1 << 30}
    return Pod(uid=uid, containers=(ContainerSpec("c", requests=res, limits=res),))


@settings(max_examples=100, deadline=None)
@given(topologies, st.lists(st.integers(1, 6), min_size=1, max_size=12), st.integers(1, 2))
def test_static_policy_allocations_never_overlap_and_release_restores_pool(
    topo: CPUTopology, requests: list[int], reserved: int
) -> None:
    if reserved >= len(topo.details):
        return
    policy = StaticPolicy(topo, reserved)
    state = CPUManagerState()
    policy.start(state)
    initial = state.default_set
    given_out: list[tuple[str, CPUSet]] = []
    for i, n in enumerate(requests):
        try:
            cpus = policy.allocate(state, _gu_pod(f"pod{i}", n), "c")
        except NotEnoughCPUsError:
            continue
        assert cpus is not None and len(cpus) == n
        assert not (cpus & policy.reserved_cpus)
        for _, other in given_out:
            assert not (cpus & other)
        assert not (cpus & state.default_set)
        given_out.append((f"pod{i}", cpus))
    for uid, _ in given_out:
        policy.remove_container(state, uid, "c")
    assert state.default_set == initial
    assert state.assignments == {}


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.text("abcdef0123456789-", min_size=1, max_size=8),
        st.dictionaries(
            st.text("abcxyz", min_size=1, max_size=5),
            st.frozensets(st.integers(0, 300), min_size=1),
            min_size=1,
        ),
    ),
    st.frozensets(st.integers(0, 300)),
)
def test_state_dict_roundtrip(
    assignments: dict[str, dict[str, frozenset[int]]], default: frozenset[int]
) -> None:
    state = CPUManagerState(
        assignments={p: {c: CPUSet(v) for c, v in cs.items()} for p, cs in assignments.items()},
        default_set=CPUSet(default),
    )
    doc = state.to_dict()
    assert set(doc) == {"defaultCpuSet", "entries"}
    back = CPUManagerState.from_dict(doc)
    assert back == state


def test_policy_config_errors() -> None:
    topo = make_topology(1, 1, 1, 4, 2)  # 8 CPUs
    with pytest.raises(PolicyConfigError, match="greater than zero"):
        StaticPolicy(topo, 0)
    with pytest.raises(PolicyConfigError, match="size of 0-1 did not equal 1"):
        StaticPolicy(topo, 1, CPUSet.parse("0-1"))
    with pytest.raises(PolicyConfigError, match="did not equal 9"):
        StaticPolicy(topo, 9)
    with pytest.raises(PolicyConfigError, match="not in the topology"):
        StaticPolicy(topo, 1, CPUSet.parse("42"))
    with pytest.raises(InvalidPolicyOptionError) as exc:
        StaticPolicy(topo, 1, options={"distribute-cpus-across-cores": "true"})
    assert exc.value.option == "distribute-cpus-across-cores"
    assert "Alpha-level" in str(exc.value)
    # reserved CPUs: lowest physical core first (CPU 0 and its sibling 4)
    assert StaticPolicy(topo, 2).reserved_cpus == CPUSet.parse("0,4")


def test_strict_reservation_keeps_reserved_out_of_shared_pool() -> None:
    topo = make_topology(1, 1, 1, 4, 2)
    policy = StaticPolicy(topo, 2, options={"strict-cpu-reservation": "true"})
    state = CPUManagerState()
    policy.start(state)
    assert policy.shared_pool(state) == CPUSet.parse("1-3,5-7")
    loose = StaticPolicy(topo, 2)
    state2 = CPUManagerState()
    loose.start(state2)
    assert loose.shared_pool(state2) == topo.cpus()
    assert loose.available_cpus(state2) == CPUSet.parse("1-3,5-7")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=4200), max_size=300))
def test_cpus_to_mask_is_the_union_of_the_bits_for_any_collection(ids):
    expect = 0
    for c in ids:
        expect |= 1 << c
    # sets take the table path below 2,048 and the shift path above; lists (duplicates
    # allowed) always the shift path
    assert cpus_to_mask(set(ids)) == expect
    assert cpus_to_mask(CPUSet(ids)) == expect
    assert cpus_to_mask(ids) == expect
    assert mask_to_cpus(expect) == CPUSet(ids)


def test_cpus_to_mask_refuses_a_negative_id():
    for bad in ({-1, 3}, [-1]):
        with pytest.raises(ValueError):
            cpus_to_mask(bad)


def test_distributed_take_reads_its_kept_combination_as_go_slices_leave_it():
    """kubelet v1.37.2 cpu_assignment.go takeByTopologyNUMADistributed keeps the best NUMA
    combination past iterateCombinations' callback (``bestCombo = combo``), and that slice
    shares its backing array with the combinations visited after it (``append(accum,
    n[i])`` writes in place while the capacity allows): with 4 nodes per combination the
    kept one ends with the last candidate for its first three. 8 NUMA nodes of 9 CPUs
    (2 sockets), CPU 2 reserved, 36 CPUs: every 4-node combination of nodes 1-7 leaves the
    same balance, the first one, {1, 2, 3, 4}, is kept, and the kubelet takes nodes
    {1, 2, 3, 7} (its oracle's answer, differential seed 24485)."""
    from nri_cpumgr.cm.cpumanager.cpu_assignment import _go_combinations

    topo = make_topology(2, 4, 3, 3, 1)
    got = take_distributed(topo, CPUSet(range(72)) - CPUSet({2}), 36)
    assert got == CPUSet.parse("9-35,63-71")
    # the views themselves: a kept 4-combination reads what later ones wrote
    views = list(_go_combinations([1, 2, 3, 4, 5], 4))
    assert [v.values() for v in views][-1] == (2, 3, 4, 5)
    assert views[0].values() == (1, 2, 3, 5)  # was (1, 2, 3, 4) when it was visited
    # 2 and 3 nodes: each append of the last node grows a full slice (a new array)
    assert [v.values() for v in _go_combinations([1, 2, 3], 2)] == [(1, 2), (1, 3), (2, 3)]


def test_hybrid_machine_take_never_returns_a_held_cpu() -> None:
    """8 one-thread cores and 8 two-thread cores (CPUsPerCore = 24 / 16 = 1): with core 9's
    first thread (CPU 9) held, the kubelet v1.37.2 (cpu_assignment.go isCoreFree and
    takeFullCores) counts core 9 as free and takes CPUs 9 and 17; the plugin takes only
    the free thread 17 and the next free CPU (differential seed 59070)."""
    topo = make_hybrid_topology(1, 8, 8)
    assert topo.cpus_per_core() == 1
    assert topo.details[9].core == topo.details[17].core == 9
    free = CPUSet.parse("10-15,17-23")  # the static policy's: reserved CPU 0 left out
    assert take_packed(topo, free, 2) == CPUSet.parse("10,17")
    assert take_packed(topo, free, 2) <= free


@settings(max_examples=300, deadline=None)
@given(topology_and_pool(), st.integers(0, 40),
       st.fixed_dictionaries({"distribute_cpus_across_numa": st.booleans(),
                              "full_pcpus_only": st.booleans(),
                              "distribute_cpus_across_cores": st.booleans(),
                              "prefer_align_by_uncorecache": st.booleans(),
                              "align_by_socket": st.booleans()}))
def test_the_take_of_a_mask_is_the_take_of_its_set(
    tp: tuple[CPUTopology, CPUSet], count: int, flags: dict[str, bool]
) -> None:
    """take_by_topology_mask (the static policy's no-hint allocation, issue 34) takes what
    take_by_topology takes from the same CPUs as a set, and fails the same way."""
    from nri_cpumgr.cm.cpumanager.cpu_assignment import take_by_topology, take_by_topology_mask
    from nri_cpumgr.cm.cpumanager.policy_options import StaticPolicyOptions

    topo, pool = tp
    opts = StaticPolicyOptions(**flags)

    def outcome(take, available):
        try:
            return take(topo, available, count, opts)
        except Exception as e:  # noqa: BLE001 - the same error, the same text
            return (type(e), str(e))

    set_way = outcome(take_by_topology, CPUSet(pool))
    mask_way = outcome(take_by_topology_mask, cpus_to_mask(pool))
    assert mask_way == set_way
    if isinstance(mask_way, CPUSet):
        assert mask_way.mask == cpus_to_mask(mask_way)  # (a CPUSet that knows its mask)


@settings(max_examples=150, deadline=None)
@given(topologies, st.lists(st.integers(1, 6), min_size=1, max_size=10), st.booleans(),
       st.booleans())
def test_allocate_cpus_without_a_hint_is_the_take_of_the_free_cpus(
    topo: CPUTopology, requests: list[int], strict: bool, reuse: bool
) -> None:
    """The static policy's allocation without a NUMA affinity (its mask path) gives what
    take_by_topology gives from available_cpus (plus the reusable CPUs), as the kubelet's
    allocateCPUs, and refuses as it (strict-cpu-reservation: never the last shared CPU)."""
    from nri_cpumgr.cm.cpumanager.cpu_assignment import take_by_topology

    if len(topo.details) < 2:
        return
    policy = StaticPolicy(topo, 1, options={"strict-cpu-reservation": "true"} if strict
                          else None)
    state = CPUManagerState()
    policy.start(state)
    reusable = CPUSet()
    for i, n in enumerate(requests):
        allocatable = policy.available_cpus(state) | reusable
        try:
            want = take_by_topology(topo, allocatable, n, policy.options)
            if strict and not (state.default_set - want):
                want = NotEnoughCPUsError
        except NotEnoughCPUsError:
            want = NotEnoughCPUsError
        try:
            got = policy.allocate_cpus(state, n, None, reusable)
        except NotEnoughCPUsError:
            got = NotEnoughCPUsError
        assert got == want
        if got is NotEnoughCPUsError:
            continue
        state.default_set = state.default_set - got
        state.set_cpuset(f"pod{i}", "c", got)
        # (the next take may reuse a CPU of this one, as an init container's)
        reusable = CPUSet(sorted(got)[:1]) if reuse else CPUSet()


@settings(max_examples=150, deadline=None)
@given(topologies, st.lists(st.tuples(st.integers(1, 6), st.booleans(), st.booleans()),
                            min_size=1, max_size=12), st.booleans())
def test_take_ahead_answers_as_the_take_and_only_for_the_free_cpus_it_saw(
    topo: CPUTopology, steps: list[tuple[int, bool, bool]], strict: bool
) -> None:
    """StaticPolicy.take_ahead (issue 34: the next create's take prepared after an answer)
    changes no state and no answer: allocations and releases in any order, with take_ahead
    called before some of them, give what a policy without it gives, and an allocation the
    prepared take covers (same free CPUs, a count asked before) does not take again."""
    from nri_cpumgr.cm.cpumanager import policy_static

    if len(topo.details) < 2:
        return
    opts = {"strict-cpu-reservation": "true"} if strict else None
    ahead, plain = StaticPolicy(topo, 1, options=opts), StaticPolicy(topo, 1, options=opts)
    sa, sp = CPUManagerState(), CPUManagerState()
    ahead.start(sa)
    plain.start(sp)
    takes = 0
    real = policy_static.take_by_topology_mask

    def counted(*args: object, **kw: object) -> CPUSet:
        nonlocal takes
        takes += 1
        return real(*args, **kw)  # type: ignore[arg-type]

    policy_static.take_by_topology_mask = counted  # type: ignore[assignment]
    try:
        for i, (n, prepare, release) in enumerate(steps):
            if release and sp.assignments:
                uid = sorted(sp.assignments)[0]
                for policy, state in ((ahead, sa), (plain, sp)):
                    policy.remove_container(state, uid, "c")
            if prepare:
                before = (dict(sa.assignments), sa.default_mask)
                ahead.take_ahead(sa)
                assert (dict(sa.assignments), sa.default_mask) == before
            kept = ahead._ahead.get((sa.default_mask & ~ahead.reserved_cpus.mask,
                                     policy_static.cpu_assignment
                                     .ALIGN_BY_SOCKET_KEEPS_CHOSEN_COMBO))
            covered = kept is not None and kept.get(n) is not None
            outcomes = []
            for policy, state in ((ahead, sa), (plain, sp)):
                takes_before = takes
                try:
                    got: object = policy.allocate_cpus(state, n, None, CPUSet())
                except NotEnoughCPUsError:
                    got = NotEnoughCPUsError
                outcomes.append((got, takes - takes_before))
            assert outcomes[0][0] == outcomes[1][0]
            assert outcomes[0][1] == (0 if covered else 1)
            got = outcomes[0][0]
            if got is NotEnoughCPUsError:
                continue
            for state in (sa, sp):
                state.take_from_default(got)  # type: ignore[arg-type]
                state.set_cpuset(f"pod{i}", "c", got)  # type: ignore[arg-type]
            assert sa.default_mask == sp.default_mask
    finally:
        policy_static.take_by_topology_mask = real  # type: ignore[assignment]


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from("abcd"), st.dictionaries(
    st.sampled_from("xyz"), st.frozensets(st.integers(0, 300), min_size=1), min_size=1)))
def test_assigned_count_is_the_size_of_the_union(
    assignments: dict[str, dict[str, frozenset[int]]]
) -> None:
    """assigned_count (the exclusive-CPU gauge, per create) counts a CPU held by two
    containers of a pod (an init container's, reused) once, as len(assigned_cpus())."""
    state = CPUManagerState(
        assignments={p: {c: CPUSet(v) for c, v in cs.items()} for p, cs in assignments.items()})
    assert state.assigned_count() == len(state.assigned_cpus())


@settings(max_examples=400, deadline=None)
@given(topology_and_pool())
def test_a_one_cpu_take_looks_at_the_first_group_of_the_full_order(
    tp: tuple[CPUTopology, CPUSet],
) -> None:
    """The 1-CPU take's shortcut (the first socket, or NUMA node, without sorting them all;
    then the best core in it) is the first core of the full order it replaces."""
    from nri_cpumgr.cm.cpumanager.cpu_assignment import _Accumulator

    topo, pool = tp
    acc = _Accumulator(topology_index(topo), cpus_to_mask(pool), 1, False)
    full = acc.sort_sockets() if acc.idx.numa_first else acc.sort_numas()
    assert acc._first_outer() == (full[0] if full else -1)
    runs = list(acc._core_runs(first_only=True))
    assert runs == ([[acc.sort_cores()[0]]] if pool else [])
