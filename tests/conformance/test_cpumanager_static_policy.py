"""Conformance: the static CPU manager policy against ``cpumanager/static_policy.json``
(expected answers of the kubelet's policy_static_test.go / topology_hints_test.go)."""

from __future__ import annotations

from typing import Any

import pytest

from nri_cpumgr.cm.cpumanager import (
    CPUManagerState,
    InvalidStateError,
    NotEnoughCPUsError,
    PolicyConfigError,
    SMTAlignmentError,
    StaticPolicy,
    pod_guaranteed_cpus,
)
from nri_cpumgr.cm.cpumanager.errors import CPUManagerError
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cpuset import CPUSet
from tests.conformance_data import case_id, corpus_pod, load_group, topology

CASES = load_group("cpumanager/static_policy.json")


# ---- corpus -> model helpers (also used by test_cpumanager_hints.py) -------------------------
def corpus_state(case: dict[str, Any]) -> CPUManagerState:
    state = CPUManagerState(default_set=CPUSet.parse(case.get("default_set", "")))
    for key, cpus in (case.get("assignments") or {}).items():
        pod_uid, _, container = key.partition("/")
        state.set_cpuset(pod_uid, container, CPUSet.parse(cpus))
    return state


def corpus_policy(case: dict[str, Any]) -> StaticPolicy:
    reserved = CPUSet.parse(case.get("reserved") or "")
    return StaticPolicy(
        topology(case["topology"]),
        case["reserved_count"],
        reserved if reserved else None,
        options=case.get("options") or {},
        topology_manager_policy=case.get("topology_manager_policy", "none"),
        feature_gates=case.get("feature_gates") or {},
        # the kubelet's zero-reservation refusal lives in its manager, not in the policy
        allow_no_reservation=True,
    )


def corpus_hint(raw: dict[str, Any] | None) -> TopologyHint | None:
    if raw is None:
        return None
    numa = raw.get("numa")
    return TopologyHint(frozenset(numa) if numa is not None else None, bool(raw["preferred"]))


def _check_error(case: dict[str, Any], err: Exception | None) -> None:
    assert err is not None, f"expected error {case['expect_error']!r}, got none"
    if case.get("expect_error_type") == "SMTAlignmentError":
        assert isinstance(err, SMTAlignmentError)
        f = case["expect_error_fields"]
        assert (
            err.requested,
            err.cpus_per_core,
            err.available_physical_cpus,
            err.caused_by_physical_cpus,
        ) == (
            f["RequestedCPUs"],
            f["CpusPerCore"],
            f["AvailablePhysicalCPUs"],
            f["CausedByPhysicalCPUs"],
        )
    elif case["expect_error"].startswith("not enough cpus available"):
        assert isinstance(err, NotEnoughCPUsError)
    assert str(err) == case["expect_error"]


# ---- runners per kind -------------------------------------------------------------------------
def _run_allocate(case: dict[str, Any]) -> None:
    policy = corpus_policy(case)
    state = corpus_state(case)
    pod = corpus_pod(case["pod"])
    hint = corpus_hint(case.get("numa_hint"))
    err: Exception | None = None
    for name in case["allocate"]:
        try:
            policy.allocate(state, pod, name, hint)
        except CPUManagerError as exc:
            err = exc
            break
    expect = case["expect"]
    if case.get("expect_error"):
        _check_error(case, err)
    else:
        assert err is None, f"unexpected error: {err}"
    got = state.get_cpuset(pod.uid, case["container"])
    if not expect["allocated"]:
        assert got is None
        return
    if "cpus" in expect:
        assert got == CPUSet.parse(expect["cpus"])
        if expect.get("disjoint_from_default_set_after"):
            assert not (state.default_set & got)
    if "pod_uncore_cache_ids" in expect:
        topo = topology(case["topology"])
        uncores: set[int] = set()
        for c in pod.containers:
            for cpu in state.get_cpuset(pod.uid, c.name) or ():
                uncores.add(topo.details[cpu].uncore)
        assert uncores == set(CPUSet.parse(expect["pod_uncore_cache_ids"]))


def _run_start(case: dict[str, Any]) -> None:
    phase = case.get("expect_error_phase")
    if phase == "new_policy":
        with pytest.raises(PolicyConfigError) as exc:
            corpus_policy(case)
        assert str(exc.value) == case["expect_error"]
        return
    policy = corpus_policy(case)
    state = corpus_state(case)
    if case.get("expect_error"):
        with pytest.raises(InvalidStateError) as exc:
            policy.start(state)
        assert str(exc.value) == case["expect_error"]
        return
    policy.start(state)
    assert state.default_set == CPUSet.parse(case["expect"]["default_set"])


def _run_reserved_selection(case: dict[str, Any]) -> None:
    policy = corpus_policy(case)
    assert policy.reserved_cpus == CPUSet.parse(case["expect_reserved"])


def _run_remove(case: dict[str, Any]) -> None:
    policy = corpus_policy(case)
    state = corpus_state(case)
    policy.remove_container(state, case["pod_uid"], case["container"])
    assert state.default_set == CPUSet.parse(case["expect"]["default_set"])
    if case["expect"].get("container_removed_from_assignments"):
        assert state.get_cpuset(case["pod_uid"], case["container"]) is None


def _run_reuse(case: dict[str, Any]) -> None:
    policy = corpus_policy(case)
    state = corpus_state(case)
    pod = corpus_pod(case["pod"])
    errors: list[Exception] = []
    for name in case["allocate"]:
        try:
            policy.allocate(state, pod, name)
        except CPUManagerError as exc:
            errors.append(exc)
    expect = case["expect"]
    if expect.get("allocate_errors") is False:
        assert errors == []
    assert state.default_set == CPUSet.parse(expect["default_set_after_allocate"])
    if "remove" in case:
        rm = case["remove"]
        policy.remove_container(state, rm["pod_uid"], rm["container"])
        assert state.default_set == CPUSet.parse(expect["default_set_after_remove"])
        if expect.get("removed_container_absent"):
            assert state.get_cpuset(rm["pod_uid"], rm["container"]) is None


def _run_allocate_cpus(case: dict[str, Any]) -> None:
    policy = corpus_policy(case)
    state = corpus_state(case)
    policy.start(state)
    got = policy.allocate_cpus(
        state,
        case["request"],
        case.get("numa_affinity"),
        CPUSet.parse(case.get("reusable_cpus") or ""),
    )
    assert got == CPUSet.parse(case["expect"]["cpus"])


def _run_smt_error_text(case: dict[str, Any]) -> None:
    f = case["error_fields"]
    err = SMTAlignmentError(
        f["RequestedCPUs"], f["CpusPerCore"], f["AvailablePhysicalCPUs"], f["CausedByPhysicalCPUs"]
    )
    assert str(err) == case["expect_message"]
    assert err.type == "SMTAlignmentError"


def _run_pod_guaranteed_cpus(case: dict[str, Any]) -> None:
    assert pod_guaranteed_cpus(corpus_pod(case["pod"])) == case["expect"]["guaranteed_cpus"]


RUNNERS = {
    "allocate": _run_allocate,
    "start": _run_start,
    "reserved_selection": _run_reserved_selection,
    "remove": _run_remove,
    "reuse": _run_reuse,
    "allocate_cpus": _run_allocate_cpus,
    "smt_error_text": _run_smt_error_text,
    "pod_guaranteed_cpus": _run_pod_guaranteed_cpus,
}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_static_policy(case: dict[str, Any]) -> None:
    runner = RUNNERS.get(case["kind"])
    assert runner is not None, f"unknown case kind {case['kind']!r}"
    runner(case)
