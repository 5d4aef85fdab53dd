"""The conformance corpus's pod-level cases (``cpumanager/pod_level.json``: the kubelet's
TestStaticPolicyAllocatePod and TestValidatePodScopeResources, transcribed, two of their
pod helpers assumed) checked against the kubelet oracle's answers: each case becomes a
scenario (the case's machine, CPU 0 reserved as the case reserves it, the gates, the pod
with its ``.spec.resources``) that the kubelet v1.37.2's own managers admit.

How a case maps (docs/development/differential.md, "The conformance corpus"):

* ``allocate_pod``: the kubelet's test stores a NUMA-node-0 affinity and calls AllocatePod;
  the scenario has ``topologyManagerPolicy: best-effort`` + pod scope, whose merged pod hint
  is node 0 for these pods (they fit it; best-effort, as under restricted the CPU manager's
  pod hints would refuse the empty-pool case before AllocatePod). Expected: each
  container's CPUs (the CPU manager's per-container entry: its slice, or the pod shared
  pool) and the default set; or the refusal's text.
* ``validate_pod_scope``: the kubelet's test calls validatePodScopeResources; the scenario
  has ``best-effort`` + pod scope, where AllocatePod runs the same check before allocating
  (``EmptyPodSharedPoolError``). Expected: refused or admitted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conformance_data import load_optional_group
from tests.differential import scenarios as S
from tests.differential.test_differential import oracle  # noqa: F401  (the fixture)

GROUP = "cpumanager/pod_level.json"
CASES = load_optional_group(GROUP) or []


def _container(c: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": c["name"], "resources": {}}
    for k in ("requests", "limits"):
        if c.get(k):
            out["resources"][k] = dict(c[k])
    if c.get("restart_policy"):
        out["restartPolicy"] = c["restart_policy"]
    return out


def scenario(case: dict[str, Any]) -> dict[str, Any]:
    """The case as a scenario (see the module docstring)."""
    machine = next(m for m in S.conformance_machines() if m["name"] == case["topology"])
    raw = case["pod"]
    spec: dict[str, Any] = {
        "resources": {k: dict(v) for k, v in raw["pod_resources"].items()},
        "containers": [_container(c) for c in raw.get("containers") or []],
    }
    if raw.get("init_containers"):
        spec["initContainers"] = [_container(c) for c in raw["init_containers"]]
    config = {"cpuManagerPolicy": "static",
              "reservedSystemCPUs": case.get("reserved") or "0",
              "topologyManagerPolicy": "best-effort",
              "topologyManagerScope": case.get("scope", "pod"),
              "featureGates": dict(case.get("feature_gates") or {})}
    return {"name": case["name"], "machine": machine, "config": config,
            "events": [{"op": "add", "pod": {
                "metadata": {"name": raw["name"], "uid": raw["uid"]}, "spec": spec}}]}


def _cases(kind: str) -> Iterator[Any]:
    for c in CASES:
        if c["kind"] == kind:
            yield pytest.param(c, id=c["name"].split("/", 1)[-1][:90])


@pytest.mark.parametrize("case", list(_cases("allocate_pod")))
def test_allocate_pod_case_is_the_kubelets_answer(oracle: S.Oracle,  # noqa: F811
                                                  case: dict[str, Any]) -> None:
    k = oracle.run(scenario(case))["events"][0]
    want = case.get("expect") or {}
    if case.get("expect_error"):
        assert k["admitted"] is False, json.dumps(k)
        assert case["expect_error"] in k["message"]
        return
    assert k["admitted"] is True, json.dumps(k)
    name = case["pod"]["name"]
    got = {f"{name}/{c['name']}": c["cpus"] for c in k["containers"] if c["cpus"] != k[
        "sharedPool"] or c.get("pool") or c.get("exclusive")}
    assert got == want["assignments"], json.dumps(k)
    assert k["sharedPool"] == want["default_set"]


@pytest.mark.parametrize("case", list(_cases("validate_pod_scope")))
def test_validate_pod_scope_case_is_the_kubelets_answer(oracle: S.Oracle,  # noqa: F811
                                                        case: dict[str, Any]) -> None:
    k = oracle.run(scenario(case))["events"][0]
    if case["expect_error"]:
        assert k["admitted"] is False and k["reason"] == "EmptyPodSharedPoolError", json.dumps(k)
    else:
        assert k["admitted"] is True, json.dumps(k)


def test_the_corpus_has_the_pod_level_cases() -> None:
    assert len(CASES) == 20
