"""Property tests of the bounded hint merger against the kubelet's literal permutation fold,
and of policy invariants (single-numa-node results, order independence)."""

from __future__ import annotations

import itertools

from hypothesis import example, given, settings
from hypothesis import strategies as st

from nri_cpumgr.cm.topologymanager.bitmask import mask_of
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cm.topologymanager.merge import (
    ProviderHints,
    _achievable_by_counting,
    _achievable_by_propagation,
    _to_int_hints,
    filter_providers_hints,
    filter_single_numa_hints,
    merge_filtered_hints,
    reference_merge,
)
from nri_cpumgr.cm.topologymanager.numa_info import NUMAInfo
from nri_cpumgr.cm.topologymanager.options import PolicyOptions
from nri_cpumgr.cm.topologymanager.policy import (
    BestEffortPolicy,
    RestrictedPolicy,
    SingleNumaNodePolicy,
)

MAX_ID = 5


@st.composite
def numa_infos(draw: st.DrawFn) -> NUMAInfo:
    nodes = sorted(draw(st.sets(st.integers(0, MAX_ID), min_size=0, max_size=5)))
    dist: dict[int, tuple[int, ...]] = {}
    # symmetric distances with small values so that ties in average distance happen
    pairs = [(a, b) for a in range(MAX_ID + 1) for b in range(a + 1, MAX_ID + 1)]
    table = {pair: draw(st.integers(11, 14)) for pair in pairs}
    for a in nodes:
        dist[a] = tuple(10 if a == b else table[(min(a, b), max(a, b))] for b in range(MAX_ID + 1))
    return NUMAInfo(tuple(nodes), dist)


hints = st.builds(
    TopologyHint,
    st.one_of(st.none(), st.frozensets(st.integers(0, MAX_ID), max_size=4)),
    st.booleans(),
)
resource_hints = st.one_of(st.none(), st.lists(hints, min_size=0, max_size=4))
provider = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["cpu", "memory", "gpu"]), resource_hints, max_size=2),
)
providers = st.lists(provider, min_size=0, max_size=3)


def product_size(lists: list[list[TopologyHint]]) -> int:
    n = 1
    for lst in lists:
        n *= len(lst)
    return n


@settings(max_examples=400, deadline=None)
@given(numa_infos(), providers, st.booleans())
def test_bounded_merge_equals_permutation_fold(
    info: NUMAInfo, provs: list[ProviderHints], closest: bool
) -> None:
    lists = filter_providers_hints(provs)
    assert merge_filtered_hints(lists, info, closest) == reference_merge(lists, info, closest)
    single = filter_single_numa_hints(lists)
    assert merge_filtered_hints(single, info, False) == reference_merge(single, info, False)


non_preferred_lists = st.lists(
    st.lists(
        st.builds(
            TopologyHint, st.frozensets(st.integers(0, 3), min_size=1, max_size=4), st.just(False)
        ),
        min_size=1,
        max_size=5,
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=400, deadline=None)
@given(non_preferred_lists, st.booleans())
@example(
    [
        [TopologyHint(frozenset({0, 1, 2}), False)],
        [TopologyHint(frozenset({0}), False), TopologyHint(frozenset({0, 1}), False)],
    ],
    False,
)
def test_non_preferred_selection_equals_permutation_fold(
    lists: list[list[TopologyHint]], closest: bool
) -> None:
    # every merged hint is non-preferred: exercises the bestNonPreferredAffinityCount rules
    info = NUMAInfo(
        (0, 1, 2, 3),
        {0: (10, 11, 12, 13), 1: (11, 10, 13, 12), 2: (12, 13, 10, 11), 3: (13, 12, 11, 10)},
    )
    assert merge_filtered_hints(lists, info, closest) == reference_merge(lists, info, closest)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.frozensets(st.integers(0, 6), max_size=5), min_size=1, max_size=6),
        min_size=1,
        max_size=4,
    )
)
def test_achievable_sets_are_exact(mask_lists: list[list[frozenset[int]]]) -> None:
    lists = [[TopologyHint(m, False) for m in lst] for lst in mask_lists]
    universe = mask_of(range(7))
    brute = set()
    for combo in itertools.product(*[[mask_of(m) for m in lst] for lst in mask_lists]):
        acc = universe
        for m in combo:
            acc &= m
        if acc:
            brute.add(acc)
    int_lists = _to_int_hints(lists)
    assert set(_achievable_by_counting(int_lists, universe)) == brute
    assert set(_achievable_by_propagation(int_lists, universe)) == brute


@settings(max_examples=300, deadline=None)
@given(numa_infos(), providers)
def test_single_numa_node_is_single_or_refused(info: NUMAInfo, provs: list[ProviderHints]) -> None:
    hint, admit = SingleNumaNodePolicy(info).merge(provs)
    assert admit == hint.preferred
    if admit:
        assert hint.numa is None or len(hint.numa) == 1
        if hint.numa is not None:
            assert hint.numa <= frozenset(info.nodes)


@settings(max_examples=300, deadline=None)
@given(numa_infos(), providers, st.booleans(), st.randoms(use_true_random=False))
def test_merge_independent_of_provider_and_resource_order(
    info: NUMAInfo, provs: list[ProviderHints], closest: bool, rnd: object
) -> None:
    shuffled = list(provs)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    shuffled = [None if p is None else dict(reversed(list(p.items()))) for p in shuffled]
    opts = PolicyOptions(prefer_closest_numa=closest)
    for cls in (BestEffortPolicy, RestrictedPolicy, SingleNumaNodePolicy):
        policy = cls(info, opts)
        assert policy.merge(provs) == policy.merge(shuffled)


@settings(max_examples=200, deadline=None)
@given(numa_infos(), providers, st.booleans())
def test_restricted_merges_like_best_effort(
    info: NUMAInfo, provs: list[ProviderHints], closest: bool
) -> None:
    opts = PolicyOptions(prefer_closest_numa=closest)
    be_hint, be_admit = BestEffortPolicy(info, opts).merge(provs)
    r_hint, r_admit = RestrictedPolicy(info, opts).merge(provs)
    assert be_admit is True
    assert r_hint == be_hint
    assert r_admit == r_hint.preferred
    # a merged mask never leaves the machine's NUMA nodes
    assert be_hint.numa is not None and be_hint.numa <= frozenset(info.nodes)
