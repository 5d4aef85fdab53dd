"""Conformance: pod-level resource managers (KEP-5526) against ``cpumanager/pod_level.json``
(expected answers of the kubelet's TestStaticPolicyAllocatePod and
TestValidatePodScopeResources, PodLevelResources + PodLevelResourceManagers on).

The group is newer than the shared corpus: when ``NRI_CPUMGR_CONFORMANCE`` names a corpus
without it, the cases are skipped with that reason (the required groups never are)."""

from __future__ import annotations

from typing import Any

import pytest

from nri_cpumgr.cm.cpumanager import CPUManagerState, StaticPolicy
from nri_cpumgr.cm.podresources.policy import (
    EmptyPodSharedPoolError,
    allocate_pod,
    pod_budget_cpus,
    validate_pod_scope,
)
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import ContainerSpec, Pod, QOSClass, parse_quantity, pod_qos
from tests.conformance_data import (
    case_id,
    cases_or_skip,
    corpus_pod,
    load_optional_group,
    topology,
)

GROUP = "cpumanager/pod_level.json"
CASES = load_optional_group(GROUP)  # None: not in $NRI_CPUMGR_CONFORMANCE (the repo's has it)


def _pod(raw: dict[str, Any]) -> tuple[Pod, int]:
    """The corpus pod with its QoS from the pod-level budget (pod-level resources decide the
    pod's QoS class), and the pod-level CPU request in millicores."""
    pod = corpus_pod(raw)
    res = raw["pod_resources"]
    req = {k: parse_quantity(v, milli=(k == "cpu")) for k, v in res["requests"].items()}
    lim = {k: parse_quantity(v, milli=(k == "cpu")) for k, v in res["limits"].items()}
    budget_pod = Pod(uid="q", containers=(ContainerSpec("pod", req, lim),))
    qos = pod_qos(budget_pod)
    return Pod(uid=pod.uid, name=pod.name, containers=pod.containers,
               init_containers=pod.init_containers, qos=qos), req["cpu"]


def _policy(case: dict[str, Any]) -> StaticPolicy:
    reserved = CPUSet.parse(case.get("reserved") or "")
    return StaticPolicy(topology(case["topology"]), case.get("reserved_count", 0),
                        reserved if reserved else None, allow_no_reservation=True)


@pytest.mark.parametrize("case", cases_or_skip(CASES, GROUP, "allocate_pod"), ids=case_id)
def test_allocate_pod(case: dict[str, Any]) -> None:
    policy = _policy(case)
    state = CPUManagerState(default_set=CPUSet.parse(case["default_set"]))
    pod, cpu_milli = _pod(case["pod"])
    numa = (case.get("numa_hint") or {}).get("numa")
    if "expect_error" in case:
        with pytest.raises(EmptyPodSharedPoolError) as e:
            allocate_pod(policy, state, pod, cpu_milli, numa)
        assert str(e.value) == case["expect_error"]
        assert e.value.type() == case["expect_error_type"]
        assert state.default_set == CPUSet.parse(case["default_set"])
        assert not state.assignments.get(pod.uid)
        return
    allocate_pod(policy, state, pod, cpu_milli, numa)
    got = {f"{uid}/{n}": c for uid, conts in state.assignments.items() for n, c in conts.items()}
    want = {k: CPUSet.parse(v) for k, v in case["expect"]["assignments"].items()}
    assert got == want
    assert state.default_set == CPUSet.parse(case["expect"]["default_set"])


@pytest.mark.parametrize("case", cases_or_skip(CASES, GROUP, "validate_pod_scope"), ids=case_id)
def test_validate_pod_scope(case: dict[str, Any]) -> None:
    pod, cpu_milli = _pod(case["pod"])
    assert pod.qos_class() is QOSClass.GUARANTEED
    budget = pod_budget_cpus(pod, cpu_milli)
    if case["expect_error"]:
        with pytest.raises(EmptyPodSharedPoolError):
            validate_pod_scope(pod, budget)
    else:
        validate_pod_scope(pod, budget)
