"""Conformance: Topology Manager policy merges (kubelet policy_*_test.go Test*Merge), one test
per case of ``topologymanager/merge.json``. Each case is also checked against the literal
permutation fold (reference_merge) and for independence from provider / resource order."""

from __future__ import annotations

from typing import Any

import pytest

from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cm.topologymanager.merge import (
    ProviderHints,
    filter_providers_hints,
    filter_single_numa_hints,
    reference_merge,
)
from nri_cpumgr.cm.topologymanager.numa_info import NUMAInfo
from nri_cpumgr.cm.topologymanager.options import PolicyOptions
from nri_cpumgr.cm.topologymanager.policy import POLICY_SINGLE_NUMA_NODE, new_policy
from tests.conformance_data import case_id, load_group

CASES = load_group("topologymanager/merge.json")


def decode_hint(doc: dict[str, Any]) -> TopologyHint:
    numa = doc["numa"]
    return TopologyHint(None if numa is None else frozenset(numa), bool(doc["preferred"]))


def decode_providers(docs: list[Any]) -> list[ProviderHints]:
    out: list[ProviderHints] = []
    for p in docs:
        if p is None:
            out.append(None)
        else:
            out.append(
                {r: None if hs is None else [decode_hint(h) for h in hs] for r, hs in p.items()}
            )
    return out


def numa_info_of(case: dict[str, Any]) -> NUMAInfo:
    dist = {int(k): tuple(v) for k, v in (case.get("numa_distances") or {}).items()}
    return NUMAInfo(tuple(case["numa_nodes"]), dist)


def options_of(case: dict[str, Any]) -> PolicyOptions:
    return PolicyOptions(prefer_closest_numa=bool(case["options"].get("prefer-closest-numa-nodes")))


def test_corpus_is_not_empty() -> None:
    assert len(CASES) > 0
    assert {c["policy"] for c in CASES} == {"none", "best-effort", "restricted", "single-numa-node"}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_merge(case: dict[str, Any]) -> None:
    info = numa_info_of(case)
    opts = options_of(case)
    policy = new_policy(case["policy"], info, opts)
    providers = decode_providers(case["providers"])
    expect = decode_hint(case["expect"])

    hint, admit = policy.merge(providers)
    assert hint == expect
    if "expect_admit" in case:
        assert admit is case["expect_admit"]
    assert admit == policy.can_admit(hint)

    # same answer with providers and resources in reverse order (Go map order is random)
    reversed_providers = [
        None if p is None else dict(reversed(list(p.items()))) for p in reversed(providers)
    ]
    assert policy.merge(reversed_providers)[0] == expect

    # the bounded merger agrees with the literal permutation fold
    if case["policy"] != "none":
        lists = filter_providers_hints(providers)
        closest = opts.prefer_closest_numa
        if case["policy"] == POLICY_SINGLE_NUMA_NODE:
            lists = filter_single_numa_hints(lists)
            closest = False
        ref = reference_merge(lists, info, closest)
        if case["policy"] == POLICY_SINGLE_NUMA_NODE and ref.numa == frozenset(info.nodes):
            ref = TopologyHint(None, ref.preferred)
        assert ref == expect
