"""Conformance: CPU manager topology hints against ``cpumanager/hints.json``
(expected answers of the kubelet's topology_hints_test.go)."""

from __future__ import annotations

from typing import Any

import pytest

from nri_cpumgr.cm.cpumanager import CPUManagerState, StaticPolicy
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cpuset import CPUSet
from tests.conformance_data import case_id, corpus_pod, load_group, topology

CASES = load_group("cpumanager/hints.json")


def _key(h: TopologyHint) -> tuple[int, int, tuple[int, ...]]:
    return h.sort_key()


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_hints(case: dict[str, Any]) -> None:
    policy = StaticPolicy(
        topology(case["topology"]),
        0,
        None,
        options=case.get("options") or {},
        feature_gates=case.get("feature_gates") or {},
        allow_no_reservation=True,
    )
    state = CPUManagerState(default_set=CPUSet.parse(case["available"]))
    for key, cpus in (case.get("assignments") or {}).items():
        pod_uid, _, container = key.partition("/")
        state.set_cpuset(pod_uid, container, CPUSet.parse(cpus))
    pod = corpus_pod(case["pod"])
    if case["scope"] == "pod":
        hints = policy.get_pod_topology_hints(state, pod)
    else:
        assert case["scope"] == "container", case["scope"]
        hints = policy.get_topology_hints(state, pod, case["container"])
    expected = [
        TopologyHint(frozenset(h["numa"]) if h["numa"] is not None else None, h["preferred"])
        for h in case["expect_hints"]
    ]
    got = hints or []
    assert sorted(got, key=_key) == sorted(expected, key=_key)
    if case["request"] > 0:
        # a Guaranteed integer request always yields a list (possibly empty), never None
        assert hints is not None
