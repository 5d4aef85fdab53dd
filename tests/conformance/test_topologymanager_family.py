"""The Topology Manager's merge on described hint lists (MaskFamily: the CPU manager's
up-closed "every combination holding enough CPUs", int bitmasks, issue 34) gives the same
result as on the listed hints, which is the kubelet's permutation fold (reference_merge, the
literal loop of policy.go in v1.37.2), for every policy and both fitness orders; and the
family lists the same hints as the CPU manager's loop."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_cpumgr.cm.topologymanager.bitmask import mask_of
from nri_cpumgr.cm.topologymanager.family import MaskFamily
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cm.topologymanager.merge import (
    filter_providers_hints,
    max_of_min_affinity_counts,
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


def literal_family(nodes: list[int], required: list[int], weight: dict[int, int], short: int,
                   min_size: int, aligned_set: frozenset[int] | None) -> list[TopologyHint]:
    """Every combination, in the kubelet's IterateBitMasks order (size, then ids)."""
    out = []
    for size in range(1, len(nodes) + 1):
        for combo in itertools.combinations(nodes, size):
            if not set(required) <= set(combo):
                continue
            if sum(weight[n] for n in combo if n not in required) < short:
                continue
            numa = frozenset(combo)
            pref = size == min_size or (aligned_set is not None and mask_of(numa) in aligned_set)
            out.append(TopologyHint(numa, pref))
    return out


@st.composite
def families(draw: st.DrawFn, nodes: list[int]) -> MaskFamily | None:
    required = sorted(draw(st.sets(st.sampled_from(nodes), max_size=2))) if nodes else []
    weight = {n: draw(st.integers(0, 4)) for n in nodes if n not in required}
    short = draw(st.integers(-2, 10))
    if short > 0 and sum(weight.values()) < short:
        return None
    min_size = draw(st.integers(1, max(1, len(nodes))))
    aligned = None
    if draw(st.booleans()):
        chosen = frozenset(draw(st.sets(st.integers(1, (1 << len(nodes)) * 4), max_size=6)))
        aligned = _Aligned(chosen)
    return MaskFamily(nodes, required, weight, short, min_size, aligned)


class _Aligned:
    def __init__(self, masks: frozenset[int]) -> None:
        self.masks = masks

    def __call__(self, numa: frozenset[int]) -> bool:
        return mask_of(numa) in self.masks


@st.composite
def numa_infos(draw: st.DrawFn) -> NUMAInfo:
    nodes = sorted(draw(st.sets(st.integers(0, 5), min_size=1, max_size=5)))
    table = {(a, b): draw(st.integers(11, 14)) for a in range(6) for b in range(a + 1, 6)}
    dist = {a: tuple(10 if a == b else table[(min(a, b), max(a, b))] for b in range(6))
            for a in nodes}
    return NUMAInfo(tuple(nodes), dist)


explicit_hint = st.builds(
    TopologyHint,
    st.one_of(st.none(), st.frozensets(st.integers(0, 5), min_size=1, max_size=4)),
    st.booleans(),
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[NUMAInfo, list]:  # type: ignore[type-arg]
    info = draw(numa_infos())
    # the family's nodes are the machine's (as in the plugin), sometimes fewer
    nodes = list(info.nodes)
    if draw(st.booleans()) and len(nodes) > 1:
        nodes = sorted(draw(st.sets(st.sampled_from(nodes), min_size=1)))
    lists: list = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 2)) == 0:
            lists.append(draw(st.lists(explicit_hint, min_size=0, max_size=4)))
        else:
            fam = draw(families(nodes))
            lists.append(fam if fam is not None else [])
    return info, lists


def listed(lists: list) -> list[list[TopologyHint]]:  # type: ignore[type-arg]
    return [list(lst) for lst in lists]


@settings(max_examples=300, deadline=None)
@given(nodes=st.lists(st.integers(0, 6), min_size=1, max_size=6, unique=True).map(sorted),
       data=st.data())
def test_family_lists_the_loops_hints(nodes: list[int], data: st.DataObject) -> None:
    fam = data.draw(families(nodes))
    if fam is None:
        return
    aligned_set = fam.aligned.masks if fam.aligned is not None else None  # type: ignore[attr-defined]
    want = literal_family(nodes, list(fam.required), fam.weight, fam.short, fam.min_size,
                          aligned_set)
    assert fam == want
    assert want, "a family is built only when the whole machine qualifies"
    assert fam.min_count() == min(len(h.numa or ()) for h in want)
    assert sorted(fam.preferred_masks()) == sorted(mask_of(h.numa or ()) for h in want
                                                   if h.preferred)
    for m in range(1 << 7):
        member = [h for h in want if mask_of(h.numa or ()) == m]
        assert fam.qualifies(m) == bool(member)
        assert fam.is_preferred(m) == (bool(member) and member[0].preferred)


@settings(max_examples=800, deadline=None)
@given(case=cases(), closest=st.booleans())
def test_merge_on_families_is_the_merge_on_lists(case: tuple, closest: bool) -> None:  # type: ignore[type-arg]
    info, lists = case
    got = merge_filtered_hints(lists, info, closest)
    plain = listed(lists)
    assert max_of_min_affinity_counts(lists) == max_of_min_affinity_counts(plain)
    assert got == merge_filtered_hints(plain, info, closest)
    size = 1
    for lst in plain:
        size *= max(1, len(lst))
    if size <= 4000:
        assert got == reference_merge(plain, info, closest)


@settings(max_examples=300, deadline=None)
@given(case=cases(), closest=st.booleans())
def test_policies_on_families(case: tuple, closest: bool) -> None:  # type: ignore[type-arg]
    info, lists = case
    opts = PolicyOptions(prefer_closest_numa=closest)
    providers = [{f"r{i}": lst} for i, lst in enumerate(lists)]
    plain = [{f"r{i}": list(lst)} for i, lst in enumerate(lists)]
    for policy in (BestEffortPolicy(info, opts), RestrictedPolicy(info, opts),
                   SingleNumaNodePolicy(info, opts)):
        assert policy.merge(providers) == policy.merge(plain)
    assert [list(x) for x in filter_providers_hints(providers)] == \
        [list(x) for x in filter_providers_hints(plain)]


def test_sixteen_nodes() -> None:
    """16 nodes (65,535 combinations): the described merge is the listed merge, for a request
    one node holds, one no single node holds, and with reusable CPUs' nodes required."""
    nodes = list(range(16))
    info = NUMAInfo(tuple(nodes), {n: tuple(10 if n == m else 20 + abs(n - m) for m in nodes)
                                   for n in nodes})
    weights = {n: (n * 7) % 13 for n in nodes}
    for required, short, min_size in (((), 12, 1), ((), 30, 1), ((3, 9), 20, 2)):
        w = {n: weights[n] for n in nodes if n not in required}
        fam = MaskFamily(nodes, required, w, short, min_size)
        device = [TopologyHint(frozenset({2, 5}), True), TopologyHint(frozenset({7}), False)]
        for lists in ([fam], [fam, device], [fam, [TopologyHint(None, True)]]):
            for closest in (False, True):
                assert merge_filtered_hints(lists, info, closest) == \
                    merge_filtered_hints(listed(lists), info, closest)
