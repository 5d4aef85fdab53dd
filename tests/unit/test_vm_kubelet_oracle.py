"""The guest kubelet's expectations come from the kubelet oracle (tests/vm/kubelet_oracle.py)
and the check of a phase against them (tests/vm/checks.py check_oracle) fails on a wrong
answer: a mutated cpuset, a refusal with another reason, a container running in a pod the
kubelet refuses.

The phase results here are the guest's records (tests/vm/guest_kubelet.py: the events it
sends to the API server, the steps it records) of the pod-scope phases, with what the
plugin did on containerd 2.1 (docs/development/qemu-guests.md, "Seen"). The tests with the
oracle run it (``make oracle``; without Go they skip, except under CI).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.differential import scenarios as S
from tests.vm import checks, kubelet_oracle, topology
from tests.vm import guest_kubelet as G

TOPO = topology.load("2s-2numa-smt")
GATES = {"PodLevelResources": True, "PodLevelResourceManagers": True,
         "InPlacePodVerticalScalingExclusiveCPUs": True}
TAE = ("failed to create containerd container: ... plugin \"90-cpumgr\" failed to handle "
       "CreateContainer request: TopologyAffinityError: Pod Scope pod with pod-level "
       "resources failed admission under pod-scope topology manager")
EPSP = ("... CreateContainer request: EmptyPodSharedPoolError: pod rejected, sum of exclusive "
        "container cpu requests equals pod budget, leaving no cpus for shared containers")


@pytest.fixture(scope="module")
def oracle() -> Iterator[S.Oracle]:
    o = S.oracle_for_tests()
    yield o
    o.close()


def _entry(pod: str, ctr: str, cg: str, qos: str = "Guaranteed",
           cpu: str | None = None) -> dict[str, Any]:
    req = {"cpu": cpu, "memory": "100Mi"} if cpu else {}
    return {"qos": qos, "requests": req, "limits": req, "pod": pod, "container": ctr,
            "id": f"id-{pod}-{ctr}", "spec": cg, "cgroup": cg, "proc": cg, "spec_mems": "",
            "cgroup_mems": "0-1", "proc_mems": "0-1", "cpu_max": "max 100000"}


def _empty_pool_pod() -> dict[str, Any]:
    return G.pod("empty-shared-pool", [
        G.container("metrics-sidecar", "1", "100Mi"), G.container("logging-sidecar", None),
        G.container("main-app", "3", "200Mi")], resources=G.POD_BUDGET)


def _empty_step(refusal: str, witness: str = "0-7") -> dict[str, Any]:
    names = ("metrics-sidecar", "logging-sidecar", "main-app")
    return {"step": "empty-shared-pool",
            "describe_errors": sorted(set(re.findall(r"\b\w+Error\b", refusal))),
            "containers": {"witness": _entry("witness", "app", witness, "BestEffort")},
            "refused": {f"empty-shared-pool/{c}": refusal for c in names}}


def pod_scope_result(main: str = "4-5", side: str = "6-7", witness: str = "0-3",
                     refusal: str = TAE) -> dict[str, Any]:
    """The pod_scope phase as the guest records it (single-numa-node, pod scope)."""
    mixed = G.pod("pod-scope-mixed", [
        G.container("metrics-sidecar", None), G.container("logging-sidecar", None),
        G.container("main-app", "2", "200Mi")], resources=G.POD_BUDGET)
    step1 = {"step": "pod-scope-mixed", "refused": {}, "containers": {
        "witness": _entry("witness", "app", witness, "BestEffort"),
        "pod-scope-mixed/metrics-sidecar": _entry("pod-scope-mixed", "metrics-sidecar", side),
        "pod-scope-mixed/logging-sidecar": _entry("pod-scope-mixed", "logging-sidecar", side),
        "pod-scope-mixed/main-app": _entry("pod-scope-mixed", "main-app", main, cpu="2")}}
    events = [{"op": "add", "pod": G.pod("witness", [G.container("app", None)])},
              {"op": "add", "pod": mixed}, {"op": "step", "step": "pod-scope-mixed"},
              {"op": "delete", "name": "pod-scope-mixed"},
              {"op": "add", "pod": _empty_pool_pod()},
              {"op": "step", "step": "empty-shared-pool"},
              {"op": "delete", "name": "empty-shared-pool"}, {"op": "delete", "name": "witness"}]
    return {"containerd": "2.1", "scenario": "pod_scope", "error": None, "refused": {},
            "steps": [step1, _empty_step(refusal)], "events": events,
            "config": {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
                       "featureGates": GATES, "topologyManagerPolicy": "single-numa-node",
                       "topologyManagerScope": "pod"}}


def best_effort_result(refusal: str = EPSP) -> dict[str, Any]:
    """The pod_scope_best_effort phase as the guest records it."""
    r = pod_scope_result(refusal=refusal)
    r["scenario"] = "pod_scope_best_effort"
    r["config"]["topologyManagerPolicy"] = "best-effort"
    r["steps"] = [_empty_step(refusal)]
    r["events"] = [{"op": "add", "pod": G.pod("witness", [G.container("app", None)])},
                   {"op": "add", "pod": _empty_pool_pod()},
                   {"op": "step", "step": "empty-shared-pool"},
                   {"op": "delete", "name": "empty-shared-pool"},
                   {"op": "delete", "name": "witness"}]
    return r


# ------------------------------------------------------------------ without the oracle
def test_the_scenario_replays_the_events_with_a_probe_at_each_step_and_stops_at_a_resize():
    r = pod_scope_result()
    s, plan = kubelet_oracle.scenario(TOPO, r)
    ops = [(e["op"], e.get("name") or e["pod"]["metadata"]["name"]) for e in s["events"]]
    probe = kubelet_oracle.PROBE
    assert ops == [("add", "witness"), ("add", "pod-scope-mixed"), ("add", f"{probe}-1"),
                   ("delete", f"{probe}-1"), ("delete", "pod-scope-mixed"),
                   ("add", "empty-shared-pool"), ("add", f"{probe}-2"),
                   ("delete", f"{probe}-2"), ("delete", "empty-shared-pool"),
                   ("delete", "witness")]
    assert plan["steps"] == [(2, "pod-scope-mixed"), (6, "empty-shared-pool")]
    assert s["config"]["topologyManagerScope"] == "pod"
    # the machine: QEMU's numbering, SMT siblings adjacent, one L3 per socket
    rows = s["machine"]["cpus"]
    assert [(c["core"], c["socket"], c["numa"], c["uncore"]) for c in rows[:4]] == [
        (0, 0, 0, 0), (0, 0, 0, 0), (1, 0, 0, 0), (1, 0, 0, 0)]
    assert rows[7] == {"cpu": 7, "core": 3, "socket": 1, "numa": 1, "uncore": 1}
    # the two creations are one group: a second order swaps them
    s2, _ = kubelet_oracle.scenario(TOPO, r, orders=[[1, 0], [0]])
    assert [e["pod"]["metadata"]["name"] for e in s2["events"][:2]] == [
        "pod-scope-mixed", "witness"]
    r["events"].insert(3, {"op": "resize", "name": "pod-scope-mixed", "cpu": "4"})
    s3, plan3 = kubelet_oracle.scenario(TOPO, r)
    assert plan3["steps"] == [(2, "pod-scope-mixed")] and len(s3["events"]) == 4


def _answer(main: str = "4-5", pool: str = "0-3", reason: str = "TopologyAffinityError"):
    mixed = {"admitted": True, "containers": [
        {"name": "metrics-sidecar", "cpus": "6-7", "pool": "pod"},
        {"name": "logging-sidecar", "cpus": "6-7", "pool": "pod"},
        {"name": "main-app", "cpus": main, "exclusive": True}], "podCPUs": "4-7"}
    witness = {"admitted": True, "containers": [{"name": "app", "cpus": pool}]}
    empty = {"admitted": False, "reason": reason, "message": "..."}
    return [{"order": [], "steps": {
        "pod-scope-mixed": {"pool": pool, "pods": {"witness": witness,
                                                   "pod-scope-mixed": mixed}},
        "empty-shared-pool": {"pool": "0-7", "pods": {"witness": witness,
                                                      "pod-scope-mixed": mixed,
                                                      "empty-shared-pool": empty}}}}]


def test_check_oracle_names_each_deviation_from_the_kubelets_answer():
    assert checks.check_oracle(pod_scope_result(), _answer()) == []
    bad = checks.check_oracle(pod_scope_result(main="2-3"), _answer())
    assert any("main-app: cpus 2-3, the kubelet's: 4-5 (exclusive)" in b for b in bad)
    bad = checks.check_oracle(pod_scope_result(side="4-5"), _answer())
    assert any("metrics-sidecar: cpus 4-5, the kubelet's: 6-7 (pod shared pool)" in b
               for b in bad)
    bad = checks.check_oracle(pod_scope_result(witness="0-7"), _answer())
    assert any("witness: cpus 0-7, the kubelet's: 0-3 (node shared pool)" in b for b in bad)
    bad = checks.check_oracle(pod_scope_result(refusal=EPSP), _answer())
    assert any("refused with EmptyPodSharedPoolError; the kubelet: TopologyAffinityError"
               in b for b in bad)
    r = pod_scope_result()  # main-app ran although the kubelet refuses its pod
    r["steps"][1]["containers"]["empty-shared-pool/main-app"] = _entry(
        "empty-shared-pool", "main-app", "1-3", cpu="3")
    del r["steps"][1]["refused"]["empty-shared-pool/main-app"]
    bad = checks.check_oracle(r, _answer())
    assert any("main-app runs on 1-3; the kubelet refuses its pod: TopologyAffinityError"
               in b for b in bad)
    r = pod_scope_result()
    r["steps"][1]["describe_errors"] = ["CreateContainerError"]
    assert any("describe pod empty-shared-pool shows" in b
               for b in checks.check_oracle(r, _answer()))
    # one admission order that fits is enough; none: the first order's failures
    assert checks.check_oracle(pod_scope_result(main="2-3"),
                               _answer() + _answer(main="2-3")) == []
    bad = checks.check_oracle(pod_scope_result(main="0-1"), _answer() + _answer(main="2-3"))
    assert bad and "none of 2 admission orders fits" in bad[0] and "4-5" in bad[0]
    assert checks.check_oracle(pod_scope_result(), []) == ["the oracle gave no answer"]
    r = pod_scope_result()
    r["steps"] = [dict(st, step="elsewhere") for st in r["steps"]]
    assert "no recorded step" in checks.check_oracle(r, _answer())[0]


def test_check_kubelet_uses_the_oracle_when_given():
    assert checks.check_kubelet(TOPO, pod_scope_result(), _answer()) == []
    bad = checks.check_kubelet(TOPO, pod_scope_result(refusal=EPSP), _answer())
    assert bad and bad[0].startswith("kubelet oracle: [empty-shared-pool]")


# ------------------------------------------------------------------ with the oracle
def test_the_kubelet_refuses_the_empty_shared_pool_pod_by_policy(oracle: S.Oracle):
    """single-numa-node: TopologyAffinityError (its CPU hints for the pod are none);
    best-effort: EmptyPodSharedPoolError (admitted by the policy, refused by the CPU
    manager's allocation). The plugin's answers as the guest saw them pass; each injected
    wrong answer fails."""
    r = pod_scope_result()
    answers = kubelet_oracle.expect(TOPO, r, oracle)
    assert answers[0]["steps"]["empty-shared-pool"]["pods"]["empty-shared-pool"][
        "reason"] == "TopologyAffinityError"
    assert checks.check_oracle(r, answers) == [], answers[0]
    for wrong in (pod_scope_result(refusal=EPSP), pod_scope_result(main="6-7", side="4-5"),
                  pod_scope_result(witness="0-7")):
        assert checks.check_oracle(wrong, kubelet_oracle.expect(TOPO, wrong, oracle))
    b = best_effort_result()
    answers = kubelet_oracle.expect(TOPO, b, oracle)
    assert answers[0]["steps"]["empty-shared-pool"]["pods"]["empty-shared-pool"][
        "reason"] == "EmptyPodSharedPoolError"
    assert checks.check_oracle(b, answers) == [], answers[0]
    wrong = best_effort_result(refusal=TAE)
    bad = checks.check_oracle(wrong, kubelet_oracle.expect(TOPO, wrong, oracle))
    assert any("the kubelet: EmptyPodSharedPoolError" in x for x in bad)


def test_concurrent_creations_are_replayed_in_every_order_that_matters(oracle: S.Oracle):
    """The docs' pods, created together: the two exclusive ones in either order (the
    BestEffort and Burstable ones take nothing), both orders give the same CPUs here."""
    pods = [G.pod(name, [{**G.container("app", None), "resources": G._res(req, lim)}])
            for name, (req, lim) in G.DOCS.items()]
    r = copy.deepcopy(pod_scope_result())
    r.update(scenario="docs_pods", events=[{"op": "add", "pod": p} for p in pods]
             + [{"op": "step", "step": "allocated"}],
             steps=[{"step": "allocated", "refused": {}, "containers": {}}])
    r["config"].update(topologyManagerScope="container")
    answers = kubelet_oracle.expect(TOPO, r, oracle)
    assert len(answers) == 2
    assert {tuple(a["order"][-2:]) for a in answers} == {
        ("guaranteed-2cpu", "guaranteed-4cpu"), ("guaranteed-4cpu", "guaranteed-2cpu")}
    for a in answers:
        st = a["steps"]["allocated"]
        got = {n: st["pods"][n]["containers"][0]["cpus"]
               for n in ("guaranteed-2cpu", "guaranteed-4cpu")}
        assert got == {"guaranteed-2cpu": "2-3", "guaranteed-4cpu": "4-7"}
        assert st["pool"] == "0-1"


# ------------------------------------------------------------------ a real guest's record
RECORD = S.ROOT / "tests" / "data" / "vm" / "guest-kubelet-2.1.json"


def _recorded(phase: str) -> dict[str, Any]:
    import json

    res = json.loads(RECORD.read_text())["kubelet_results"]
    return copy.deepcopy(next(r for r in res if r["scenario"] == phase))


@pytest.mark.parametrize("phase", ["docs_pods", "pod_scope", "pod_scope_best_effort"])
def test_a_real_guest_record_passes_and_fails_once_an_answer_is_wrong(oracle: S.Oracle,
                                                                      phase: str):
    """The guest's own record passes against the oracle; a wrong cpuset of the first
    exclusive container, or the refusal's reason swapped, fails."""
    r = _recorded(phase)
    answers = kubelet_oracle.expect(TOPO, r, oracle)
    assert checks.check_kubelet(TOPO, r, answers) == []
    wrong = copy.deepcopy(r)
    swapped = False
    for st in wrong["steps"]:
        for key, msg in (st.get("refused") or {}).items():
            other = ("EmptyPodSharedPoolError" if "TopologyAffinityError" in msg
                     else "TopologyAffinityError")
            st["refused"][key] = re.sub(r"\w+Error", other, msg)
            swapped = True
    if not swapped:  # no refusal in the phase: move an exclusive container
        st = wrong["steps"][0]
        key, c = next((k, c) for k, c in st["containers"].items()
                      if checks.cpus(c["cgroup"]) and len(checks.cpus(c["cgroup"])) == 2)
        c["cgroup"] = c["spec"] = c["proc"] = "6-7" if c["cgroup"] != "6-7" else "2-3"
    bad = checks.check_oracle(wrong, kubelet_oracle.expect(TOPO, wrong, oracle))
    assert bad and all(b.startswith("kubelet oracle") for b in bad), bad
