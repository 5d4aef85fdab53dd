"""Conformance: Topology Manager admission (kubelet TestPolicy*CanAdmitPodResult, TestAdmit),
one test per case of ``topologymanager/admit.json``; TestAdmit cases run through the
TopologyManager with every listed scope."""

from __future__ import annotations

from typing import Any

import pytest

from nri_cpumgr.cm.topologymanager import (
    ERROR_TOPOLOGY_AFFINITY,
    NUMAInfo,
    TopologyAffinityError,
    TopologyHint,
    TopologyManager,
    new_policy,
)
from nri_cpumgr.cm.topologymanager.merge import ProviderHints
from nri_cpumgr.podmodel import ContainerSpec, Pod, QOSClass
from tests.conformance_data import case_id, load_group

CASES = load_group("topologymanager/admit.json")


def decode_hint(doc: dict[str, Any]) -> TopologyHint:
    numa = doc["numa"]
    return TopologyHint(None if numa is None else frozenset(numa), bool(doc["preferred"]))


class FixedProvider:
    """Answers the same hints for containers and pods, records allocations."""

    def __init__(self, doc: Any, manager: TopologyManager) -> None:
        self.hints: ProviderHints = (
            None
            if doc is None
            else {r: None if hs is None else [decode_hint(h) for h in hs] for r, hs in doc.items()}
        )
        self.manager = manager
        self.allocated: list[tuple[str, str, TopologyHint]] = []

    def get_topology_hints(self, pod: Pod, container_name: str) -> ProviderHints:
        return self.hints

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        return self.hints

    def allocate(self, pod: Pod, container_name: str) -> None:
        self.allocated.append(
            (pod.uid, container_name, self.manager.get_affinity(pod.uid, container_name))
        )


def make_pod(case: dict[str, Any]) -> Pod:
    shape = case["pod"]
    return Pod(
        uid="pod-uid",
        name="pod",
        containers=tuple(ContainerSpec(f"c{i}") for i in range(shape["containers"])),
        init_containers=tuple(ContainerSpec(f"i{i}") for i in range(shape["init_containers"])),
        qos=QOSClass(case["qos_class"]),
    )


def run_admit(case: dict[str, Any]) -> None:
    distances = {int(k): v for k, v in case["numa_distances"].items()}
    assert case["scopes"]
    for scope in case["scopes"]:
        mgr = TopologyManager(
            case["policy"],
            scope,
            {k: str(v).lower() for k, v in case["options"].items()},
            case["numa_nodes"],
            distances,
        )
        providers = [FixedProvider(doc, mgr) for doc in case["providers"]]
        for p in providers:
            mgr.add_hint_provider(p)
        pod = make_pod(case)
        result = mgr.admit(pod)
        assert result.admit is case["expect_admit"], scope
        names = [c.name for c in pod.init_containers + pod.containers]
        if not result.admit:
            assert result.reason == case["expect_reason"] == ERROR_TOPOLOGY_AFFINITY
            assert isinstance(result.error, TopologyAffinityError)
            assert "TopologyAffinityError" in str(result.error)
            assert all(p.allocated == [] for p in providers)
            continue
        # admitted: every provider allocated every container, seeing the stored affinity
        expected_hint = (
            TopologyHint(None, False)
            if case["policy"] == "none"
            else mgr.policy.merge([p.hints for p in providers])[0]
        )
        for p in providers:
            assert [a[1] for a in p.allocated] == names
            assert all(a[2] == expected_hint for a in p.allocated)
        for n in names:
            assert mgr.get_affinity(pod.uid, n) == expected_hint


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_admit(case: dict[str, Any]) -> None:
    if case["op"] == "can_admit_pod_result":
        policy = new_policy(case["policy"], NUMAInfo((0, 1)))
        assert policy.can_admit(decode_hint(case["hint"])) is case["expect_admit"]
    elif case["op"] == "admit":
        run_admit(case)
    else:
        raise AssertionError(f"unknown op {case['op']!r}")


# --- scope bookkeeping beyond the corpus (kubelet scope.go semantics) ---------------------


class ScriptedProvider:
    """Per-container hints; optionally fails allocation of one container."""

    def __init__(self, per_container: dict[str, ProviderHints], fail_on: str = "") -> None:
        self.per_container = per_container
        self.fail_on = fail_on
        self.allocated: list[str] = []

    def get_topology_hints(self, pod: Pod, container_name: str) -> ProviderHints:
        return self.per_container.get(container_name)

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        return None

    def allocate(self, pod: Pod, container_name: str) -> None:
        if container_name == self.fail_on:
            raise RuntimeError("not enough cpus available")
        self.allocated.append(container_name)


def two_container_pod() -> Pod:
    return Pod(uid="u1", containers=(ContainerSpec("a"), ContainerSpec("b")))


def test_container_scope_refusal_keeps_earlier_containers() -> None:
    mgr = TopologyManager("restricted", "container", None, [0, 1])
    n0 = TopologyHint(frozenset({0}), True)
    both = TopologyHint(frozenset({0, 1}), False)
    prov = ScriptedProvider({"a": {"cpu": [n0]}, "b": {"cpu": [both]}})
    mgr.add_hint_provider(prov)
    result = mgr.admit(two_container_pod())
    assert result.admit is False
    assert result.reason == ERROR_TOPOLOGY_AFFINITY
    # the kubelet's text (topology_manager.go, v1.37.2); b is where it stopped: a alone allocated
    assert result.message == "Resources cannot be allocated with Topology locality"
    assert prov.allocated == ["a"]
    assert mgr.get_affinity("u1", "a") == n0
    assert mgr.get_affinity("u1", "b") == TopologyHint(None, False)


def test_allocation_failure_is_unexpected_admission_error() -> None:
    mgr = TopologyManager("best-effort", "pod", None, [0, 1])
    mgr.add_hint_provider(ScriptedProvider({}, fail_on="b"))
    result = mgr.admit(two_container_pod())
    assert result.admit is False
    assert result.reason == "UnexpectedAdmissionError"
    assert "not enough cpus available" in result.message


def test_remove_container_keeps_hint_of_restarted_container() -> None:
    mgr = TopologyManager("best-effort", "pod", None, [0, 1])
    pod = two_container_pod()
    assert mgr.admit(pod).admit is True
    stored = mgr.get_affinity("u1", "a")
    assert stored == TopologyHint(frozenset({0, 1}), True)  # no providers: default, preferred
    mgr.add_container(pod, "a", "id-1")
    mgr.add_container(pod, "a", "id-2")  # restarted container, same (pod, name)
    mgr.remove_container("id-1")
    assert mgr.get_affinity("u1", "a") == stored
    mgr.remove_container("id-2")
    assert mgr.get_affinity("u1", "a") == TopologyHint(None, False)
    assert mgr.get_affinity("u1", "b") == stored
    mgr.remove_container("unknown-id")  # ignored
