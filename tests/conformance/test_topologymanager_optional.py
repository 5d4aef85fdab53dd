"""Optional conformance groups of the Topology Manager (kubelet-internal helpers that our
design shares): ``optional/topologymanager/hint_merger.json`` (HintMerger.compare,
maxOfMinAffinityCounts, filterSingleNumaHints), ``numa_info.json`` (NewNUMAInfo,
CalculateAverageFor, Closest) and ``scope.json`` (hints a scope hands to the policy).
``bitmask.json`` is not used: it tests Go's 64-bit BitMask API (String(), range errors),
which our int masks do not have."""

from __future__ import annotations

from typing import Any

import pytest

from nri_cpumgr.cm.topologymanager import (
    NUMAInfo,
    TopologyHint,
    TopologyManagerConfigError,
    new_numa_info,
)
from nri_cpumgr.cm.topologymanager.bitmask import mask_of, nodes_of
from nri_cpumgr.cm.topologymanager.merge import (
    ProviderHints,
    compare_hints,
    filter_single_numa_hints,
    max_of_min_affinity_counts,
)
from nri_cpumgr.cm.topologymanager.policy import Policy
from nri_cpumgr.cm.topologymanager.scope import ContainerScope, PodScope
from nri_cpumgr.podmodel import ContainerSpec, Pod
from tests.conformance_data import case_id, cases_or_skip, load_optional_group

# optional groups: skipped (with the group's name) when $NRI_CPUMGR_CONFORMANCE lacks them
_HINT_MERGER = "optional/topologymanager/hint_merger.json"
_NUMA_INFO = "optional/topologymanager/numa_info.json"
_SCOPE = "optional/topologymanager/scope.json"
HINT_MERGER = cases_or_skip(load_optional_group(_HINT_MERGER), _HINT_MERGER)
NUMA_INFO = cases_or_skip(load_optional_group(_NUMA_INFO), _NUMA_INFO)
SCOPE = cases_or_skip(load_optional_group(_SCOPE), _SCOPE)


def decode_hint(doc: dict[str, Any]) -> TopologyHint:
    numa = doc["numa"]
    return TopologyHint(None if numa is None else frozenset(numa), bool(doc["preferred"]))


def decode_provider(doc: Any) -> ProviderHints:
    if doc is None:
        return None
    return {r: None if hs is None else [decode_hint(h) for h in hs] for r, hs in doc.items()}


def distances_of(doc: dict[str, Any]) -> dict[int, tuple[int, ...]]:
    return {int(k): tuple(v) for k, v in doc.items()}


@pytest.mark.parametrize("case", HINT_MERGER, ids=case_id)
def test_hint_merger(case: dict[str, Any]) -> None:
    args = case["args"]
    if case["op"] == "max_of_min_affinity_counts":
        lists = [[decode_hint(h) for h in lst] for lst in args["hints"]]
        assert max_of_min_affinity_counts(lists) == case["expect"]
    elif case["op"] == "compare_hints":
        info = NUMAInfo(tuple(args["numa_nodes"]))
        closest = bool(args["options"].get("prefer-closest-numa-nodes"))
        current = None if args["current"] is None else decode_hint(args["current"])
        candidate = decode_hint(args["candidate"])
        got = compare_hints(
            current, candidate, info, closest, args["best_non_preferred_affinity_count"]
        )
        assert got is (current if case["expect"] == "current" else candidate)
    elif case["op"] == "filter_single_numa_hints":
        lists = [[decode_hint(h) for h in lst] for lst in args["all_resources_hints"]]
        got = filter_single_numa_hints(lists)
        # Go nil and empty slices both mean "nothing": compare as lists
        expect = [[decode_hint(h) for h in (lst or [])] for lst in (case["expect"] or [])]
        assert got == expect
    else:
        raise AssertionError(f"unknown op {case['op']!r}")


@pytest.mark.parametrize("case", NUMA_INFO, ids=case_id)
def test_numa_info(case: dict[str, Any]) -> None:
    args = case["args"]
    if case["op"] == "new_numa_info":
        nodes = [n["id"] for n in args["topology"]]
        dist = {n["id"]: n["distances"] for n in args["topology"] if "distances" in n}
        closest = bool(args["options"].get("prefer-closest-numa-nodes"))
        if "expect_error" in case:
            with pytest.raises(TopologyManagerConfigError) as ei:
                new_numa_info(nodes, dist, closest)
            assert case["expect_error"] in str(ei.value)
            return
        info = new_numa_info(nodes, dist, closest)
        assert list(info.nodes) == case["expect"]["nodes"]
        got = {str(k): None if v is None else list(v) for k, v in info.distances.items()}
        assert got == case["expect"]["distances"]
    elif case["op"] == "average_distance":
        info = NUMAInfo((), distances_of(args["numa_distances"]))
        assert info.average_distance(mask_of(args["mask"])) == case["expect"]
    elif case["op"] == "closest":
        info = NUMAInfo((), distances_of(args["numa_distances"]))
        cur, cand = mask_of(args["current"]), mask_of(args["candidate"])
        got = info.closest(cand, cur)  # argument order of the Go test: candidate first
        assert got == (cur if case["expect"] == "current" else cand)
        assert sorted(nodes_of(got)) == case["expect_mask"]
    else:
        raise AssertionError(f"unknown op {case['op']!r}")


class RecordingPolicy(Policy):
    """Records what the scope hands to the policy (the Go test's mockPolicy)."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def can_admit(self, hint: TopologyHint) -> bool:
        return True

    def merge(self, providers_hints: Any) -> tuple[TopologyHint, bool]:
        self.seen.append(providers_hints)
        return TopologyHint(None, False), True


class FixedProvider:
    def __init__(self, hints: ProviderHints) -> None:
        self.hints = hints

    def get_topology_hints(self, pod: Pod, container_name: str) -> ProviderHints:
        return self.hints

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        return self.hints

    def allocate(self, pod: Pod, container_name: str) -> None:
        return None


@pytest.mark.parametrize("case", SCOPE, ids=case_id)
def test_scope(case: dict[str, Any]) -> None:
    policy = RecordingPolicy()
    scope = ContainerScope(policy) if case["scope"] == "container" else PodScope(policy)
    for doc in case["providers"]:
        scope.add_hint_provider(FixedProvider(decode_provider(doc)))
    pod = Pod(uid="uid", containers=(ContainerSpec("c"),))
    expect = None if case["expect"] is None else [decode_provider(p) for p in case["expect"]]
    if isinstance(scope, ContainerScope):
        got = scope.accumulate_providers_hints(pod, "c")
    else:
        got = scope.accumulate_providers_hints(pod)
    assert got == expect
    if case["op"] == "providers_hints_passed_to_policy":
        assert scope.admit(pod).admit is True
        assert policy.seen == [expect or []]
