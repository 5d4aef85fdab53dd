"""The QEMU guest harness's pure parts: topology files -> QEMU options, and the judging."""

from __future__ import annotations

import pytest

from tests.e2e.harness.cri import cgroup_parent
from tests.vm import checks, topology
from tests.vm.topology import TopologyError, parse


def base(**over):
    d = {"sockets": 2, "dies": 1, "cores": 2, "threads": 2, "distances": [[10, 21], [21, 10]],
         "numa": [{"cpus": "0-3", "memory_mib": 1024}, {"cpus": "4-7", "memory_mib": 512}]}
    d.update(over)
    return d


def opt(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_qemu_options_of_a_two_socket_smt_machine():
    t = parse("x", base())
    a = t.qemu_args()
    assert opt(a, "-smp") == ["8,sockets=2,dies=1,cores=2,threads=2"]
    assert opt(a, "-cpu") == ["max,vendor=GenuineIntel"]
    assert opt(a, "-m") == ["1536M"]
    assert opt(a, "-object") == ["memory-backend-ram,id=m0,size=1024M",
                                 "memory-backend-ram,id=m1,size=512M"]
    assert opt(a, "-numa") == ["node,nodeid=0,cpus=0-3,memdev=m0",
                               "node,nodeid=1,cpus=4-7,memdev=m1", "dist,src=0,dst=1,val=21"]


def test_non_contiguous_numa_cpus_become_repeated_cpus_options():
    t = parse("x", base(numa=[{"cpus": "0-1,4-5", "memory_mib": 256},
                              {"cpus": "2-3,6-7", "memory_mib": 256}]))
    assert opt(t.qemu_args(), "-numa")[:2] == ["node,nodeid=0,cpus=0-1,cpus=4-5,memdev=m0",
                                              "node,nodeid=1,cpus=2-3,cpus=6-7,memdev=m1"]


def test_three_nodes_give_every_distance_pair_once():
    d = [[10, 21, 31], [21, 10, 21], [31, 21, 10]]
    t = parse("x", base(sockets=3, threads=1, distances=d, numa=[
        {"cpus": f"{2 * i}-{2 * i + 1}", "memory_mib": 128} for i in range(3)]))
    assert [x for x in opt(t.qemu_args(), "-numa") if x.startswith("dist")] == [
        "dist,src=0,dst=1,val=21", "dist,src=0,dst=2,val=31", "dist,src=1,dst=2,val=21"]


def test_cpu_layout_is_socket_major_with_dies_as_l3_groups():
    t = parse("x", base(dies=2, cores=2, threads=1))
    assert [(c.socket, c.die, c.core) for c in map(t.cpu, range(8))] == [
        (0, 0, 0), (0, 0, 1), (0, 1, 2), (0, 1, 3), (1, 2, 4), (1, 2, 5), (1, 3, 6), (1, 3, 7)]
    assert t.groups("die") == [frozenset({0, 1}), frozenset({2, 3}), frozenset({4, 5}),
                               frozenset({6, 7})]
    assert t.cpu(5).numa == 1
    with pytest.raises(IndexError):
        t.cpu(8)


@pytest.mark.parametrize("over, words", [
    ({"sockets": 0}, "sockets must be a positive integer"),
    ({"threads": "2"}, "threads must be a positive integer"),
    ({"numa": []}, "at least one [[numa]]"),
    ({"numa": [{"cpus": "0-3", "memory_mib": 1}, {"cpus": "3-7", "memory_mib": 1}]},
     "repeats cpus [3]"),
    ({"numa": [{"cpus": "0-3", "memory_mib": 1}, {"cpus": "4-6", "memory_mib": 1}]},
     "cover 0-7 exactly"),
    ({"numa": [{"cpus": "0-3", "memory_mib": 1}, {"cpus": "4-x", "memory_mib": 1}]},
     "numa[1].cpus"),
    ({"distances": [[10, 21]]}, "2x2 matrix"),
    ({"distances": [[10, 21], [20, 10]]}, "symmetric"),
    ({"distances": [[11, 21], [21, 10]]}, "must be 10"),
])
def test_bad_files_are_refused_with_the_field(over, words):
    with pytest.raises(TopologyError) as e:
        parse("bad", base(**over))
    assert words in str(e.value) and "topology bad" in str(e.value)


def test_every_shipped_topology_loads_and_one_is_fast():
    tops = topology.all_topologies()
    assert len(tops) >= 2 and tops[0].fast
    assert any(t.dies > 1 for t in tops), "a topology with several L3 groups per socket"


def test_systemd_cgroup_parent_is_the_kubelet_slice_form():
    p = cgroup_parent("Burstable", "ab-cd", kubepods="/nri-cpumgr-test/run-7/kubepods",
                      driver="systemd")
    assert p == "nri_cpumgr_test-run_7-kubepods-burstable-podab_cd.slice"
    assert cgroup_parent("Guaranteed", "u", kubepods="/k", driver="systemd") == "k-podu.slice"
    with pytest.raises(ValueError):
        cgroup_parent("Guaranteed", "u", driver="cgroupv3")


def _c(qos, cpu, spec, cg=None, proc=None):
    req = {"cpu": cpu} if cpu else {}
    return {"qos": qos, "requests": req, "limits": req, "spec": spec, "cgroup": cg or spec,
            "proc": proc or spec, "spec_mems": "", "cgroup_mems": "0-1", "proc_mems": "0-1"}


def docs_result(g2="2-3", g4="4-7", shared="0-1"):
    t = {"guaranteed-2cpu": _c("Guaranteed", "2", g2), "guaranteed-4cpu": _c(
        "Guaranteed", "4", g4), "besteffort": _c("BestEffort", "", shared)}
    t2 = {"guaranteed-2cpu": _c("Guaranteed", "2", g2), "besteffort": _c("BestEffort", "",
                                                                          "0-1,4-7")}
    return {"scenario": "docs", "error": None, "refused": {},
            "steps": [{"step": "allocated", "containers": t},
                      {"step": "released", "containers": t2}]}


def test_checks_pass_the_kubelet_answer_and_name_each_deviation():
    t = topology.load("2s-2numa-smt")
    assert checks.check(t, docs_result()) == []
    assert any("not one whole core" in b for b in checks.check(t, docs_result(g2="1-2")))
    assert any("fullest socket" in b for b in checks.check(t, docs_result(g2="4-5",
                                                                          g4="0-3")))
    bad = checks.check(t, docs_result(shared="0-3"))
    assert any("shared pool is 0-1" in b for b in bad)
    r = docs_result()
    r["steps"][0]["containers"]["besteffort"]["proc"] = "0-7"
    assert any("cpus disagree" in b for b in checks.check(t, r))
    r = docs_result()
    r["error"] = "TimeoutError: x\ntrace"
    assert checks.check(t, r) == ["did not run to the end: TimeoutError: x"]


def one_step(scenario, containers, refused=None, options=None):
    return {"scenario": scenario, "error": None, "refused": refused or {},
            "config": {"cpuManagerPolicyOptions": options or {}},
            "steps": [{"step": "allocated", "containers": containers}]}


def test_options_run_only_where_the_topology_makes_them_matter():
    smt, l3 = topology.load("2s-2numa-smt"), topology.load("2s-2die-l3")
    assert checks.applicable(smt, "full-pcpus-only") and not checks.applicable(
        l3, "full-pcpus-only")
    assert checks.applicable(l3, "prefer-align-cpus-by-uncorecache")
    assert not checks.applicable(smt, "prefer-align-cpus-by-uncorecache")
    assert checks.applicable(l3, "distribute-cpus-across-numa")
    assert not checks.applicable(smt, "no-such-scenario")


def test_uncore_distribute_and_strict_checks():
    l3 = topology.load("2s-2die-l3")
    be = _c("BestEffort", "", "0-1,4-7")
    ok = one_step("prefer-align-cpus-by-uncorecache",
                  {"l3-pod": _c("Guaranteed", "2", "2-3"), "besteffort": be})
    assert checks.check(l3, ok) == []
    across = one_step("prefer-align-cpus-by-uncorecache",
                      {"l3-pod": _c("Guaranteed", "2", "1-2"), "besteffort": _c(
                          "BestEffort", "", "0,3-7")})
    assert any("spans L3 groups" in b for b in checks.check(l3, across))
    spread = one_step("distribute-cpus-across-numa",
                      {"spread": _c("Guaranteed", "6", "1-3,4-6"), "besteffort": _c(
                          "BestEffort", "", "0,7")})
    assert checks.check(l3, spread) == []
    packed = one_step("distribute-cpus-across-numa",
                      {"spread": _c("Guaranteed", "6", "2-7"), "besteffort": _c(
                          "BestEffort", "", "0-1")})
    assert any("not distributed" in b for b in checks.check(l3, packed))
    strict = {"guaranteed-2cpu": _c("Guaranteed", "2", "2-3"), "besteffort": _c(
        "BestEffort", "", "1,4-7")}
    opts = {"strict-cpu-reservation": "true"}
    assert checks.check(l3, one_step("strict-cpu-reservation", strict, options=opts)) == []
    strict["besteffort"] = _c("BestEffort", "", "0-1,4-7")
    assert any("shared pool is 1,4-7" in b for b in checks.check(
        l3, one_step("strict-cpu-reservation", strict, options=opts)))


def test_a_file_may_limit_its_scenarios_and_align_by_socket_needs_numa_below_socket():
    snc = topology.load("2s-4numa-die")
    assert snc.scenarios is not None and checks.applicable(snc, "align-by-socket")
    assert not checks.applicable(snc, "docs")  # not in the file's list
    assert not checks.applicable(topology.load("2s-2numa-smt"), "align-by-socket")
    with pytest.raises(TopologyError, match="scenarios must be a list"):
        parse("bad", base(scenarios="docs"))
    one_socket = one_step("align-by-socket", {"socket-pod": _c("Guaranteed", "4", "4-7"),
                                              "besteffort": _c("BestEffort", "", "0-3")})
    assert checks.check(snc, one_socket) == []
    across = one_step("align-by-socket", {"socket-pod": _c("Guaranteed", "4", "2-5"),
                                          "besteffort": _c("BestEffort", "", "0-1,6-7")})
    assert any("crosses sockets" in b for b in checks.check(snc, across))


def _kc(spec, qos="Guaranteed", cpu=None, cpu_max="max 100000", cg=None):
    req = {"cpu": cpu, "memory": "100Mi"} if cpu else {}
    return {"qos": qos, "requests": req, "limits": req, "spec": spec, "cgroup": cg or spec,
            "proc": cg or spec, "spec_mems": "", "cgroup_mems": "0-1", "proc_mems": "0-1",
            "cpu_max": cpu_max}


def _resize_result(after="2-5", kept="2-5", reason="Error"):
    w = _kc("0-1,6-7", "BestEffort")
    return {"scenario": "resize", "error": None, "refused": {}, "steps": [
        {"step": "resize: before", "containers": {"witness": _kc("0-1,4-7", "BestEffort"),
                                                  "resize": _kc("2-3", cpu="2")}},
        {"step": "resize: 4 cpus", "containers": {"witness": w,
                                                  "resize": _kc(after, cpu="4")}},
        {"step": "resize: 8 refused", "containers": {"witness": w,
                                                     "resize": _kc(kept, cpu="4")},
         "condition": {"type": "PodResizeInProgress", "reason": reason,
                       "message": "NotEnoughCPUsError: not enough cpus available"}}]}


def _pod_scope_result(main="4-5", side="6-7", witness="0-3", msg=None):
    pod = {f"pod-scope-mixed/{n}": _kc(side) for n in ("metrics-sidecar", "logging-sidecar")}
    pod["pod-scope-mixed/main-app"] = _kc(main, cpu="2")
    return {"scenario": "pod_scope", "error": None, "refused": {}, "steps": [
        {"step": "pod-scope-mixed", "containers": {"witness": _kc(witness, "BestEffort"),
                                                   **pod}},
        {"step": "empty-shared-pool", "containers": {}, "describe_has_refusal": True,
         "refused_message": msg if msg is not None else
         "EmptyPodSharedPoolError: pod rejected, sum of exclusive container cpu requests "
         "equals pod budget, leaving no cpus for shared containers"}]}


def test_kubelet_checks_pass_the_expected_and_name_each_deviation():
    t = topology.load("2s-2numa-smt")
    assert checks.check_kubelet(t, _resize_result()) == []
    bad = checks.check_kubelet(t, _resize_result(after="4-7"))
    assert any("keeping the first 2" in b for b in bad)
    bad = checks.check_kubelet(t, _resize_result(kept="2-3", reason="Deferred"))
    assert any("after the refused resize" in b for b in bad)
    assert any("PodResizeInProgress" in b for b in bad)
    assert checks.check_kubelet(t, _pod_scope_result()) == []
    bad = checks.check_kubelet(t, _pod_scope_result(main="4-5", side="4-5"))
    assert any("2-CPU slice" in b for b in bad)
    bad = checks.check_kubelet(t, _pod_scope_result(main="3,4", side="6-7",
                                                    witness="0-2,5"))
    assert any("one NUMA node" in b for b in bad)
    # the empty-shared-pool pod's refusal is judged against the kubelet oracle's answer
    # (tests/unit/test_vm_kubelet_oracle.py)
    assert checks.check_kubelet(t, {"scenario": "resize", "error": "KubeletError: x\ny"}) \
        == ["did not run to the end: KubeletError: x"]
