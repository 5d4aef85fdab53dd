"""Kubelet conformance: Memory Manager configuration (memorymanager/config.json).

reservedMemory validation and conversion, and manager construction. Errors are compared by
type and exact text; reserved maps exactly (every machine NUMA node present).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nri_cpumgr.cm.memorymanager import errors
from nri_cpumgr.cm.memorymanager.config import (
    MemoryReservation,
    convert_reserved,
    get_system_reserved_memory,
    new_manager,
    validate_reserved_memory,
)
from nri_cpumgr.cm.memorymanager.manager import MemoryManager
from nri_cpumgr.cm.memorymanager.policy_static import StaticPolicy
from nri_cpumgr.topology import NUMANodeInfo
from tests.conformance_data import case_id, load_group

CASES = load_group("memorymanager/config.json")


def _machine(m: dict[str, Any]) -> list[NUMANodeInfo]:
    return [
        NUMANodeInfo(
            id=n["id"],
            memory_bytes=n.get("memory", 0),
            hugepages={h["page_size_kib"] * 1024: h["num_pages"] for h in n.get("hugepages", [])},
        )
        for n in m["numa_nodes"]
    ]


def _reservations(rs: list[dict[str, Any]] | None) -> list[MemoryReservation]:
    return [MemoryReservation(r["numa_node"], dict(r.get("limits") or {})) for r in rs or []]


def _reserved_json(r: dict[int, dict[str, int]] | None) -> dict[str, dict[str, int]] | None:
    return None if r is None else {str(n): v for n, v in r.items()}


def _raises_exact(message: str, fn: Callable[[], object]) -> None:
    with pytest.raises(errors.MemoryManagerError) as info:
        fn()
    assert str(info.value) == message


def op_validate_reserved_memory(case: dict[str, Any]) -> None:
    def run() -> None:
        validate_reserved_memory(
            _machine(case["machine"]),
            case.get("node_allocatable_reservation") or {},
            _reservations(case["reserved_memory"]),
        )

    if case.get("expect_error") is None:
        run()
    else:
        with pytest.raises(errors.ConfigError):
            run()
        _raises_exact(case["expect_error"], run)


def op_convert_reserved(case: dict[str, Any]) -> None:
    got = convert_reserved(_machine(case["machine"]), _reservations(case["reserved_memory"]))
    assert _reserved_json(got) == case["expect"]["reserved"]


def op_get_system_reserved_memory(case: dict[str, Any]) -> None:
    def run() -> dict[int, dict[str, int]]:
        return get_system_reserved_memory(
            _machine(case["machine"]),
            case.get("node_allocatable_reservation") or {},
            _reservations(case["reserved_memory"]),
        )

    if case.get("expect_error") is None:
        assert _reserved_json(run()) == case["expect"]["reserved"]
    else:
        assert case.get("expect", {}).get("reserved") is None
        _raises_exact(case["expect_error"], run)


def op_new_manager(case: dict[str, Any]) -> None:
    def run() -> MemoryManager:
        return new_manager(
            case["policy"],
            _machine(case["machine"]),
            case.get("node_allocatable_reservation") or {},
            _reservations(case["reserved_memory"]),
        )

    if case.get("expect_error") is not None:
        _raises_exact(case["expect_error"], run)
        return
    mgr = run()
    assert mgr.policy.name == case["expect"]["policy"]
    if case["expect"]["policy"] == "Static":
        assert isinstance(mgr.policy, StaticPolicy)
        assert _reserved_json(mgr.policy.system_reserved) == case["expect"]["reserved"]


OPS: dict[str, Callable[[dict[str, Any]], None]] = {
    "validate_reserved_memory": op_validate_reserved_memory,
    "convert_reserved": op_convert_reserved,
    "get_system_reserved_memory": op_get_system_reserved_memory,
    "new_manager": op_new_manager,
}


def test_corpus_is_not_empty() -> None:
    assert CASES, "memorymanager/config.json has no cases"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_config_case(case: dict[str, Any]) -> None:
    op = OPS.get(case["op"])
    assert op is not None, f"unknown op {case['op']!r}"
    op(case)
