"""Unit tests of the Memory Manager state model (kubelet memorymanager/state)."""

from __future__ import annotations

import json

from nri_cpumgr.cm.memorymanager.state import (
    Block,
    MemoryState,
    MemoryTable,
    NUMANodeState,
    machine_states_equal,
)

GB = 1 << 30


def _state() -> MemoryState:
    ms = {
        0: NUMANodeState(2, {"memory": MemoryTable(4 * GB, GB, 3 * GB, 2 * GB, GB)}, [0, 1]),
        1: NUMANodeState(2, {"memory": MemoryTable(4 * GB, GB, 3 * GB, GB, 2 * GB)}, [0, 1]),
    }
    return MemoryState(ms, {"pod": {"c": [Block((0, 1), "memory", 3 * GB)]}})


def test_round_trip_through_json() -> None:
    s = _state()
    back = MemoryState.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back.get_machine_state() == s.get_machine_state()
    assert back.get_memory_assignments() == s.get_memory_assignments()
    assert s.to_dict()["assignments"] == {
        "pod": {"c": [{"numa_affinity": [0, 1], "type": "memory", "size": 3 * GB}]}
    }


def test_getters_return_copies() -> None:
    s = _state()
    ms = s.get_machine_state()
    ms[0].memory_map["memory"].free = 0
    ms[0].cells.append(7)
    assert s.get_machine_state()[0].memory_map["memory"].free == GB
    assert s.get_machine_state()[0].cells == [0, 1]


def test_blocks_none_vs_empty_and_delete_drops_pod() -> None:
    s = MemoryState()
    assert s.get_memory_blocks("p", "c") is None
    s.set_memory_blocks("p", "c", [])
    assert s.get_memory_blocks("p", "c") == []
    s.delete("p", "c")
    assert s.get_memory_assignments() == {}
    s.delete("p", "c")  # unknown: no error


def test_machine_states_equal_compares_group_sums() -> None:
    a = _state().get_machine_state()
    b = _state().get_machine_state()
    # move 1Gi reserved from node 0 to node 1 inside the group [0, 1]
    b[0].memory_map["memory"] = MemoryTable(4 * GB, GB, 3 * GB, GB, 2 * GB)
    b[1].memory_map["memory"] = MemoryTable(4 * GB, GB, 3 * GB, 2 * GB, GB)
    assert machine_states_equal(a, b)
    b[1].memory_map["memory"].free += 1
    assert not machine_states_equal(a, b)
    c = _state().get_machine_state()
    c[1].number_of_assignments = 1
    assert not machine_states_equal(a, c)
    d = _state().get_machine_state()
    d[0].memory_map["memory"].allocatable -= 1
    assert not machine_states_equal(a, d)
