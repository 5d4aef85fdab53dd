"""Kubelet conformance: Memory Manager static policy and manager (memorymanager/static.json).

One test per case. Machine states are compared exactly (stricter than the kubelet's
areMachineStatesEqual, which is checked as well); assignments as multisets of blocks per
container; errors by type and exact text; hints in order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from nri_cpumgr.cm.memorymanager import errors
from nri_cpumgr.cm.memorymanager.manager import MemoryManager
from nri_cpumgr.cm.memorymanager.policy import Hints, Policy
from nri_cpumgr.cm.memorymanager.policy_none import NonePolicy
from nri_cpumgr.cm.memorymanager.policy_static import StaticPolicy, pod_requested_resources
from nri_cpumgr.cm.memorymanager.state import (
    Block,
    ContainerMemoryAssignments,
    MemoryState,
    NUMANodeMap,
    machine_state_from_dict,
    machine_state_to_dict,
    machine_states_equal,
)
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.topology import NUMANodeInfo
from tests.conformance_data import case_id, corpus_pod, load_group

CASES = load_group("memorymanager/static.json")

# --- corpus -> model ---------------------------------------------------------------------


def _machine(m: dict[str, Any] | None) -> list[NUMANodeInfo] | None:
    if m is None:
        return None
    return [
        NUMANodeInfo(
            id=n["id"],
            memory_bytes=n.get("memory", 0),
            hugepages={h["page_size_kib"] * 1024: h["num_pages"] for h in n.get("hugepages", [])},
        )
        for n in m["numa_nodes"]
    ]


def _reserved(r: dict[str, Any] | None) -> dict[int, dict[str, int]] | None:
    return None if r is None else {int(n): dict(v) for n, v in r.items()}


def _assignments(a: dict[str, Any] | None) -> ContainerMemoryAssignments:
    return {
        pod: {
            ctr: [Block(tuple(b["numa"]), b["type"], b["size"]) for b in blocks]
            for ctr, blocks in ctrs.items()
        }
        for pod, ctrs in (a or {}).items()
    }


def _hint(h: dict[str, Any] | None) -> TopologyHint | None:
    if h is None:
        return None
    return TopologyHint(None if h["numa"] is None else frozenset(h["numa"]), h["preferred"])


def _state(case: dict[str, Any]) -> MemoryState:
    return MemoryState(
        machine_state_from_dict(case.get("initial_machine_state")),
        _assignments(case.get("initial_assignments")),
    )


def _static(case: dict[str, Any]) -> StaticPolicy:
    return StaticPolicy(_machine(case.get("machine")), _reserved(case.get("reserved")))


def _policy(case: dict[str, Any]) -> Policy:
    name = case.get("policy", "Static")
    if name == "Static":
        return _static(case)
    assert name == "None", f"unknown policy {name!r} in case"
    return NonePolicy()


def _manager(case: dict[str, Any]) -> MemoryManager:
    active = [corpus_pod(p) for p in case.get("active_pods") or []]
    return MemoryManager(_policy(case), state=_state(case), active_pods=lambda: active)


# --- comparisons -------------------------------------------------------------------------


def _normalized(ms: NUMANodeMap) -> dict[str, Any]:
    d = machine_state_to_dict(ms)
    for node in d.values():
        node["cells"] = sorted(node["cells"])
    return d


def _check_machine_state(state: MemoryState, expected: dict[str, Any]) -> None:
    actual = state.get_machine_state()
    want = machine_state_from_dict(expected)
    assert machine_states_equal(actual, want), "kubelet areMachineStatesEqual failed"
    assert _normalized(actual) == _normalized(want)


def _block_multisets(a: ContainerMemoryAssignments) -> dict[str, dict[str, Counter]]:
    return {
        pod: {ctr: Counter((b.numa_affinity, b.type, b.size) for b in bl) for ctr, bl in c.items()}
        for pod, c in a.items()
    }


def _check_assignments(state: MemoryState, expected: dict[str, Any]) -> None:
    assert _block_multisets(state.get_memory_assignments()) == _block_multisets(
        _assignments(expected)
    )


def _check_expect(state: MemoryState, expect: dict[str, Any]) -> None:
    checked = False
    if "assignments" in expect:
        _check_assignments(state, expect["assignments"])
        checked = True
    if "machine_state_after" in expect:
        _check_machine_state(state, expect["machine_state_after"])
        checked = True
    assert checked, "case asserts nothing"


def _hints_json(h: Hints | None) -> dict[str, list[dict[str, Any]]] | None:
    if h is None:
        return None
    return {
        r: [
            {"numa": None if x.numa is None else sorted(x.numa), "preferred": x.preferred}
            for x in hints
        ]
        for r, hints in h.items()
    }


def _raises_exact(exc_type: type[Exception], message: str, fn: Callable[[], object]) -> None:
    with pytest.raises(exc_type) as info:
        fn()
    assert str(info.value) == message


# --- operations --------------------------------------------------------------------------


def op_new_policy(case: dict[str, Any]) -> None:
    if case["expect_error"] is None:
        policy = _static(case)
        assert policy.system_reserved == (_reserved(case["reserved"]) or {})
    else:
        _raises_exact(
            errors.NoSystemReservedMemoryError, case["expect_error"], lambda: _static(case)
        )


def op_name(case: dict[str, Any]) -> None:
    assert _static(case).name == case["expect"]["name"]


def op_start(case: dict[str, Any]) -> None:
    policy, state = _static(case), _state(case)
    if case.get("expect_error"):
        _raises_exact(errors.InvalidStateError, case["expect_error"], lambda: policy.start(state))
        return
    policy.start(state)
    _check_expect(state, case["expect"])


def _allocate_and_check(
    case: dict[str, Any], run: Callable[[StaticPolicy, MemoryState, TopologyHint | None], None]
) -> None:
    policy, state = _static(case), _state(case)
    seeded = case.get("init_containers_reusable_memory") or {}
    for uid, table in seeded.items():
        policy.init_containers_reusable_memory[uid] = {
            tuple(int(n) for n in key.split(",") if n): dict(v) for key, v in table.items()
        }
    hint = _hint(case.get("numa_hint"))
    if case.get("expect_error"):
        before = state.to_dict()
        _raises_exact(
            errors.AllocationError, case["expect_error"], lambda: run(policy, state, hint)
        )
        assert state.to_dict() == before, "a failed allocation changed the state"
        return
    run(policy, state, hint)
    _check_expect(state, case["expect"])
    pod_uid = case["pod"]["uid"]
    # updatePodReusableMemory forgets every other pod's reusable memory
    assert set(policy.init_containers_reusable_memory) <= {pod_uid}


def op_allocate(case: dict[str, Any]) -> None:
    pod = corpus_pod(case["pod"])
    container = pod.container(case["container"])
    assert container is not None

    def run(policy: StaticPolicy, state: MemoryState, hint: TopologyHint | None) -> None:
        policy.allocate(state, pod, container, hint)

    _allocate_and_check(case, run)


def op_allocate_pod_containers(case: dict[str, Any]) -> None:
    pod = corpus_pod(case["pod"])

    def run(policy: StaticPolicy, state: MemoryState, hint: TopologyHint | None) -> None:
        for c in pod.init_containers + pod.containers:
            policy.allocate(state, pod, c, hint)

    _allocate_and_check(case, run)


def op_remove_container(case: dict[str, Any]) -> None:
    policy, state = _static(case), _state(case)
    policy.remove_container(state, case["pod_uid"], case["container"])
    _check_expect(state, case["expect"])


def op_get_topology_hints(case: dict[str, Any]) -> None:
    pod = corpus_pod(case["pod"])
    container = pod.container(case["container"])
    assert container is not None
    hints = _static(case).get_topology_hints(_state(case), pod, container)
    assert _hints_json(hints) == case["expect_hints"]


def op_pod_requested_resources(case: dict[str, Any]) -> None:
    assert pod_requested_resources(corpus_pod(case["pod"])) == case["expect"]["requested"]


def op_manager_remove_stale_state(case: dict[str, Any]) -> None:
    mgr = _manager(case)
    mgr.remove_stale_state()
    _check_expect(mgr.state, case["expect"])


def op_manager_allocate_and_add_container(case: dict[str, Any]) -> None:
    mgr = _manager(case)
    pod = corpus_pod(case["pod"])
    container = pod.container(case["container"])
    assert container is not None
    hint = _hint(case.get("numa_hint"))
    if case.get("expect_error"):
        _raises_exact(
            errors.AllocationError,
            case["expect_error"],
            lambda: mgr.allocate(pod, container, hint),
        )
    else:
        mgr.allocate(pod, container, hint)
    mgr.add_container(pod, container, "fakeID")
    assert mgr.container_map["fakeID"] == (pod.uid, container.name)
    _check_expect(mgr.state, case["expect"])


def op_manager_remove_container(case: dict[str, Any]) -> None:
    mgr = _manager(case)
    mgr.container_map = {cid: (ref[0], ref[1]) for cid, ref in case["container_map"].items()}
    assert case["expect_error"] is None  # RemoveContainer never fails in the static policy
    mgr.remove_container(case["remove_container_id"])
    assert case["remove_container_id"] not in mgr.container_map
    _check_expect(mgr.state, case["expect"])


def op_manager_get_topology_hints(case: dict[str, Any]) -> None:
    mgr = _manager(case)
    pod = corpus_pod(case["pod"])
    container = pod.container(case["container"])
    assert container is not None
    assert _hints_json(mgr.get_topology_hints(pod, container)) == case["expect_hints"]


def op_manager_allocate_and_add_pod(case: dict[str, Any]) -> None:
    mgr = _manager(case)
    pod = corpus_pod(case["pod"])
    hint = _hint(case.get("numa_hint"))
    assert case.get("expect_error") is None
    ordered = pod.init_containers + pod.containers
    for c in ordered:
        mgr.allocate(pod, c, hint)
    for i, c in enumerate(ordered):
        mgr.add_container(pod, c, f"id-{i}")
    _check_expect(mgr.state, case["expect"])


OPS: dict[str, Callable[[dict[str, Any]], None]] = {
    "new_policy": op_new_policy,
    "name": op_name,
    "start": op_start,
    "allocate": op_allocate,
    "allocate_pod_containers": op_allocate_pod_containers,
    "remove_container": op_remove_container,
    "get_topology_hints": op_get_topology_hints,
    "pod_requested_resources": op_pod_requested_resources,
    "manager_remove_stale_state": op_manager_remove_stale_state,
    "manager_allocate_and_add_container": op_manager_allocate_and_add_container,
    "manager_remove_container": op_manager_remove_container,
    "manager_get_topology_hints": op_manager_get_topology_hints,
    "manager_allocate_and_add_pod": op_manager_allocate_and_add_pod,
}


def test_corpus_is_not_empty() -> None:
    assert CASES, "memorymanager/static.json has no cases"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_static_policy_case(case: dict[str, Any]) -> None:
    op = OPS.get(case["op"])
    assert op is not None, f"unknown op {case['op']!r}"
    op(case)
