"""Explanations: the record's reasons checked against the topology table, the plugin keeping
them for live containers only, and `nri-cpumgr explain`."""

from __future__ import annotations

import json
from pathlib import Path

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.cli import main
from nri_cpumgr.config import parse_config
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.planner.manifest import load_pods
from nri_cpumgr.planner.plan import Planner
from nri_cpumgr.runtime.plugin import Plugin
from nri_cpumgr.sysfs import discover
from nri_cpumgr.transport.stub import PluginError
from tests.unit.nri_peer import nri_container, nri_pod

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def g(name: str, cpu: int) -> str:
    return (f"kind: Pod\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n  containers:\n"
            f"  - {{name: app, resources: {{limits: {{cpu: '{cpu}', memory: 1Gi}}}}}}\n---\n")


def test_distribute_across_numa_reason_matches_the_topology():
    machine = discover(str(FIXTURES / "multi-l3"))
    topo = machine.topology
    cfg = parse_config("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
                       "cpuManagerPolicyOptions: {distribute-cpus-across-numa: 'true'}\n")
    res = Planner(cfg, machine, explain=True).plan(load_pods(g("g20", 20)))
    row = res.pods[0].containers[0]
    rec = row.explanation
    assert rec is not None and rec["decision"] == "exclusive"
    got = CPUSet.parse(rec["cpus"])
    assert len(got) == 20
    # every step's CPUs sit where the step says, per the topology table
    per_numa: dict[int, int] = {}
    for step in rec["take"]:
        cpus = CPUSet.parse(step["cpus"])
        assert len(cpus) == step["count"]
        for c in cpus:
            info = topo.details[c]
            assert (info.socket, info.numa, info.uncore) == (step["socket"], step["numa"],
                                                             step["l3"])
        full = {topo.details[c].core for c in cpus if topo.siblings(c) <= got}
        assert step["fullCores"] == len(full)
        if step["whole"] == "L3 group":
            assert CPUSet(c for c, i in topo.details.items() if i.uncore == step["l3"]) <= got
        per_numa[step["numa"]] = per_numa.get(step["numa"], 0) + len(cpus)
    assert per_numa == {0: 10, 1: 10}  # spread evenly, as the option says
    assert sum(per_numa.values()) == 20
    # what the option changed: the packed take without it is another set of CPUs
    effect = rec["options"]["distribute-cpus-across-numa"]
    assert effect.startswith("without it: ")
    assert CPUSet.parse(effect.removeprefix("without it: ")) != got
    from nri_cpumgr.explain.explainer import render

    text = "\n".join(render(rec))
    assert "per NUMA node: NUMA 0: 10, NUMA 1: 10" in text
    assert "free before: NUMA 0: 1-7,16-23 (15), NUMA 1: 8-15,24-31 (16)" in text


def test_single_numa_node_refusal_reason_matches_the_topology():
    machine = discover(str(FIXTURES / "dual-socket-smt"))
    topo = machine.topology
    cfg = parse_config("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
                       "topologyManagerPolicy: single-numa-node\n")
    res = Planner(cfg, machine, explain=True).plan(load_pods(g("g4", 4) + g("g10", 10)))
    first, refused = (p.containers[0] for p in res.pods)
    rec = refused.explanation
    assert refused.decision == "refused" and rec is not None
    assert rec["reason"].startswith("TopologyAffinityError")
    taken = CPUSet.parse(first.cpus)
    for node, free in rec["free"].items():
        want = topo.cpus_in_numa_nodes([int(node)]) - taken - CPUSet({0})
        assert CPUSet.parse(free) == want
    # no node has 10 free CPUs: the CPU manager's only hint spans both, not preferred alone
    assert rec["hints"]["cpu"]["cpu"] == [{"numa": "0-1", "preferred": True}]
    assert rec["affinity"]["admit"] is False
    n0, n1 = (len(CPUSet.parse(rec["free"][n])) for n in ("0", "1"))
    assert rec["why"] == ("single-numa-node needs one NUMA node with 10 free CPUs; free CPUs "
                          f"per node: NUMA 0: {n0}, NUMA 1: {n1}")
    assert max(n0, n1) < 10


def _pod(uid: str, qos: str = "") -> nri_pb2.PodSandbox:
    return nri_pod(uid, qos)


def _ctr(uid: str, cpus_m: int) -> nri_pb2.Container:
    return nri_container(uid, cpus_m, state=nri_pb2.CONTAINER_UNKNOWN, memory=1 << 30)


def test_plugin_records_live_containers_and_refusals_for_explain(tmp_path, capsys):
    state = tmp_path / "state"
    cfg = parse_config("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
                       "topologyManagerPolicy: single-numa-node\nexplainDecisions: true\n"
                       f"stateDirectory: {state}\nkubeletStateDirectory: ''\n")
    p = Plugin(cfg, discover(str(FIXTURES / "dual-socket-smt")))
    p.synchronize([], [])
    p.create_container(nri_pb2.CreateContainerRequest(pod=_pod("g4"), container=_ctr("g4", 4000)))
    try:
        p.create_container(nri_pb2.CreateContainerRequest(pod=_pod("g10"),
                                                          container=_ctr("g10", 10000)))
    except PluginError as e:
        # the kubelet's reason and text, then the pod and container the runtime's log needs
        assert str(e) == ("TopologyAffinityError: Resources cannot be allocated with Topology "
                          "locality (pod ns/g10, uid g10, container app)")
    else:
        raise AssertionError("g10 must be refused")
    p.create_container(nri_pb2.CreateContainerRequest(pod=_pod("be", "besteffort"),
                                                      container=_ctr("be", 0)))
    assert set(p.explainer.live) == {"c-g4", "c-be"}
    p.save()
    assert main(["explain", "--state-dir", str(state), "ns/g4"]) == 0
    out = capsys.readouterr().out
    assert "take: socket 0 NUMA 0 L3 0: CPUs" in out and "decision: exclusive cpus" in out
    assert main(["explain", "--state-dir", str(state), "g10/app", "--json"]) == 0
    (rec,) = json.loads(capsys.readouterr().out)
    assert rec["decision"] == "refused" and "needs one NUMA node with 10 free CPUs" in rec["why"]
    # removal: the record goes with the container (bounded to live containers)
    p.state_change(nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_CONTAINER, pod=_pod("g4"),
                                            container=_ctr("g4", 4000)))
    p.save()
    assert main(["explain", "--state-dir", str(state), "ns/g4"]) == 1
    assert "no record for ns/g4" in capsys.readouterr().err
    # not enabled: nothing recorded, and explain says how to enable it
    off = tmp_path / "off"
    cfg2 = cfg.model_copy(update={"explainDecisions": False, "stateDirectory": str(off)})
    q = Plugin(cfg2, discover(str(FIXTURES / "dual-socket-smt")))
    assert q.explainer is None
    q.save()
    assert main(["explain", "--state-dir", str(off), "x"]) == 1
    assert "explainDecisions: true" in capsys.readouterr().err


def test_debug_level_turns_explanations_on_and_logs_them(tmp_path, caplog):
    import logging

    caplog.set_level(logging.DEBUG, "nri_cpumgr")
    cfg = parse_config("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
                       "topologyManagerPolicy: single-numa-node\n"
                       f"stateDirectory: {tmp_path}\n")
    p = Plugin(cfg, discover(str(FIXTURES / "dual-socket-smt")))
    assert p.explainer is not None  # explainDecisions is false, but -v asks for them
    p.synchronize([], [])
    try:
        p.create_container(nri_pb2.CreateContainerRequest(pod=_pod("g10"),
                                                          container=_ctr("g10", 10000)))
    except PluginError:
        pass
    lines = [r.message for r in caplog.records
             if r.name == "nri_cpumgr.explain" and r.levelno == logging.DEBUG]
    assert any("why: single-numa-node needs one NUMA node with 10 free CPUs" in m
               for m in lines), lines


def test_explain_refuses_records_of_the_wrong_type_as_corrupt(tmp_path, capsys):
    """A checksum-valid explanations file whose fields have the wrong type: one line naming
    the field, exit 1 (as a corrupt file), never a traceback."""
    from nri_cpumgr.checkpoint import Checkpoint

    good = {"pod": "ns/g1", "podUID": "u1", "container": "app", "containerID": "c1",
            "qos": "Guaranteed", "resources": {"cpuRequestMilli": 1000,
                                               "cpuLimitMilli": 1000, "memoryLimit": None,
                                               "exclusiveCpusAsked": 1},
            "free": {"0": "1-3"}, "hints": {"cpu": "no preference"},
            "decision": "exclusive", "cpus": "1", "reason": "r"}
    cases = [({"pod": 5}, "containers.c1.pod: expected a string, got a number"),
             ({"resources": "x"}, "containers.c1.resources: expected a mapping"),
             ({"hints": [1, 2]}, "containers.c1.hints: expected a mapping"),
             ({"hints": {"cpu": {"cpu": [1]}}}, "containers.c1.hints.cpu.cpu[0]: expected a"),
             ({"free": {"0": "zz"}}, "containers.c1.free.0: invalid cpulist 'zz'")]
    state = tmp_path / "state"
    Checkpoint(state / "explanations").save({"containers": {"c1": good}, "refusals": []})
    assert main(["explain", "--state-dir", str(state), "ns/g1"]) == 0
    capsys.readouterr()
    for change, want in cases:
        Checkpoint(state / "explanations").save({"containers": {"c1": {**good, **change}},
                                                 "refusals": []})
        assert main(["explain", "--state-dir", str(state), "ns/g1"]) == 1, change
        err = capsys.readouterr().err
        assert "malformed: " + want in err and err.count("\n") == 1, (change, err)
    Checkpoint(state / "explanations").save({"containers": {}, "refusals": 5})
    assert main(["explain", "--state-dir", str(state), "ns/g1"]) == 1
    assert "malformed: refusals: expected a list, got a number" in capsys.readouterr().err
