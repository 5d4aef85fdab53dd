"""Conformance: topology-aware CPU take strategies against ``cpumanager/take.json``
(expected answers of the kubelet's cpu_assignment_test.go)."""

from __future__ import annotations

from typing import Any

import pytest

from nri_cpumgr.cm.cpumanager import NotEnoughCPUsError, take_distributed, take_packed
from nri_cpumgr.cpuset import CPUSet
from tests.conformance_data import case_id, load_group, topology

CASES = load_group("cpumanager/take.json")


def _take(case: dict[str, Any]) -> CPUSet:
    topo = topology(case["topology"])
    available = CPUSet.parse(case["available"])
    opts = case.get("options") or {}
    if case["mode"] == "packed":
        return take_packed(
            topo,
            available,
            case["request"],
            spread=bool(opts.get("distribute-cpus-across-cores", False)),
            prefer_align_by_uncorecache=bool(opts.get("prefer-align-cpus-by-uncorecache", False)),
        )
    assert case["mode"] == "distributed", case["mode"]
    return take_distributed(topo, available, case["request"], case["cpu_group_size"])


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_take(case: dict[str, Any]) -> None:
    available = CPUSet.parse(case["available"])
    if case.get("expect_error"):
        with pytest.raises(NotEnoughCPUsError) as exc:
            _take(case)
        assert str(exc.value) == case["expect_error"]
        assert exc.value.requested == case["request"]
        assert exc.value.available == len(available)
        return
    got = _take(case)
    assert got == CPUSet.parse(case["expect"])
    assert got <= available
    assert len(got) == case["request"]
