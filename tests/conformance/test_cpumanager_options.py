"""Conformance: CPU manager policy options against ``cpumanager/options.json``
(expected answers of the kubelet's policy_options_test.go / policy_static_test.go)."""

from __future__ import annotations

from typing import Any

import pytest

from nri_cpumgr.cm.cpumanager import (
    InvalidPolicyOptionError,
    StaticPolicyOptions,
    check_option_available,
    validate_static_policy_options,
)
from nri_cpumgr.cm.cpumanager.policy_options import ALL_OPTIONS
from tests.conformance_data import case_id, load_group, topology

CASES = load_group("cpumanager/options.json")


def _outcome(case: dict[str, Any]) -> tuple[bool, Exception | None, StaticPolicyOptions | None]:
    gates = case.get("feature_gates") or {}
    try:
        if case["kind"] == "check_available":
            check_option_available(case["option"], gates)
            return True, None, None
        opts = StaticPolicyOptions.parse(case.get("options") or {}, gates)
        if case["kind"] == "validate":
            validate_static_policy_options(
                opts, topology(case["topology"]), case["topology_manager_policy_effective"]
            )
        return True, None, opts
    except InvalidPolicyOptionError as exc:
        return False, exc, None


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_options(case: dict[str, Any]) -> None:
    assert case["kind"] in ("check_available", "parse", "validate"), case["kind"]
    valid, err, opts = _outcome(case)
    assert valid == case["expect_valid"], f"unexpected outcome, error={err}"
    if err is not None:
        # the error names the option it is about
        assert err.option in str(err) or err.option.lower() in str(err).lower()
        names = set(case.get("options") or {}) | {case.get("option")}
        assert err.option in names
    parsed = case.get("expect_parsed")
    if parsed is not None:
        assert opts is not None
        assert opts.enabled_options() == sorted(parsed["enabled_options"])
        for name in ALL_OPTIONS - set(parsed["enabled_options"]):
            assert not opts.enabled(name)
