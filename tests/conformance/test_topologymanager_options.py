"""Conformance: Topology Manager options and construction (kubelet policy_options_test.go,
TestNewManager, TestManagerScope, Test*Name), one test per case of
``topologymanager/options.json``."""

from __future__ import annotations

from typing import Any

import pytest

from nri_cpumgr.cm.topologymanager import (
    NUMAInfo,
    PolicyOptionError,
    TopologyManager,
    TopologyManagerConfigError,
    new_policy,
    new_policy_options,
)
from nri_cpumgr.cm.topologymanager.options import (
    DEFAULT_OPTION_SETS,
    OptionSets,
    PolicyOptions,
    is_policy_option_available,
)
from tests.conformance_data import case_id, load_group

CASES = load_group("topologymanager/options.json")


def option_sets(args: dict[str, Any]) -> OptionSets:
    extra = args.get("extra_options") or {}
    return DEFAULT_OPTION_SETS.with_extra(
        alpha=frozenset(extra.get("alpha", ())), beta=frozenset(extra.get("beta", ()))
    )


def as_dict(o: PolicyOptions) -> dict[str, Any]:
    return {
        "prefer-closest-numa-nodes": o.prefer_closest_numa,
        "max-allowable-numa-nodes": o.max_allowable_numa_nodes,
    }


def run_new_policy_options(case: dict[str, Any]) -> None:
    args = case["args"]
    gates, sets = args["feature_gates"], option_sets(args)
    if "expect_error" in case:
        with pytest.raises(PolicyOptionError) as ei:
            new_policy_options(args["policy_options"], gates, sets)
        assert case["expect_error"] in str(ei.value)
        return
    try:
        got = new_policy_options(args["policy_options"], gates, sets)
    except PolicyOptionError as e:
        # the kubelet returns the options together with an error the test ignores
        assert case.get("error_checked") is False, str(e)
        assert e.options is not None
        got = e.options
    assert as_dict(got) == case["expect"]


def run_new_manager(case: dict[str, Any]) -> None:
    args = case["args"]
    topo = args["topology"] or []
    nodes = [n["id"] for n in topo]
    distances = {n["id"]: n["distances"] for n in topo if n.get("distances") is not None}
    build = lambda: TopologyManager(  # noqa: E731
        args["policy"], args["scope"], args["policy_options"], nodes, distances
    )
    if "expect_error" in case:
        with pytest.raises(TopologyManagerConfigError) as ei:
            build()
        assert case["expect_error"] in str(ei.value)
        return
    mgr = build()
    if "policy" in case["expect"]:
        assert mgr.policy_name == case["expect"]["policy"]
    if "scope" in case["expect"]:
        assert mgr.scope_name == case["expect"]["scope"]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_options(case: dict[str, Any]) -> None:
    op = case["op"]
    if op == "new_policy_options":
        run_new_policy_options(case)
    elif op == "check_option_available":
        args = case["args"]
        got = is_policy_option_available(args["option"], args["feature_gates"], option_sets(args))
        assert got is case["expect"]
    elif op == "new_manager":
        run_new_manager(case)
    elif op == "policy_name":
        assert new_policy(case["args"]["policy"], NUMAInfo(())).name == case["expect"]
    else:
        raise AssertionError(f"unknown op {op!r}")


# --- configuration edges beyond the corpus (kubelet NewManager / NewPolicyOptions) --------


def test_max_allowable_numa_nodes_raises_the_limit() -> None:
    nodes = list(range(34))
    with pytest.raises(TopologyManagerConfigError, match="more than 8 NUMA Nodes"):
        TopologyManager("single-numa-node", "pod", None, nodes)
    mgr = TopologyManager("single-numa-node", "pod", {"max-allowable-numa-nodes": "34"}, nodes)
    assert mgr.options.max_allowable_numa_nodes == 34
    assert mgr.scope_name == "pod"
    with pytest.raises(PolicyOptionError, match="beta-level options not enabled"):
        TopologyManager(
            "best-effort",
            "pod",
            {"max-allowable-numa-nodes": "34"},
            nodes,
            feature_gates={"TopologyManagerPolicyBetaOptions": False},
        )
    with pytest.raises(PolicyOptionError, match="should not be less than 8"):
        new_policy_options({"max-allowable-numa-nodes": "4"})


def test_none_policy_ignores_options_and_scope() -> None:
    mgr = TopologyManager("none", "bogus", {"unknown-option": "x"}, list(range(20)))
    assert mgr.policy_name == "none"
    assert mgr.scope_name == "none"


def test_prefer_closest_needs_distances_for_every_node() -> None:
    opts = {"prefer-closest-numa-nodes": "true"}
    with pytest.raises(TopologyManagerConfigError, match="error getting NUMA distances"):
        TopologyManager("best-effort", "container", opts, [0, 1], {0: [10, 11]})
    mgr = TopologyManager("best-effort", "container", opts, [0, 1], {0: [10, 11], 1: [11, 10]})
    assert mgr.options.prefer_closest_numa is True
    with pytest.raises(PolicyOptionError, match="bad value for option"):
        new_policy_options({"prefer-closest-numa-nodes": "yes"})
