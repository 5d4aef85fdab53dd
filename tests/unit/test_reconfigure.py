"""The reconfiguration planner (nri_cpumgr.reconfigure): the minimal-move rule per kind of
change, the refusals, the order of the updates, and a property test over the differential's
scenario generator: the plan agrees with a fresh plugin under the new config wherever the
minimal-move rule allows it."""

from __future__ import annotations

import random
from typing import Any

import pytest

from nri_cpumgr.cm.cpumanager import StaticPolicy
from nri_cpumgr.config import Config, ConfigError, parse_config
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.planner.manifest import container_infos, load_pods, pod_from_spec
from nri_cpumgr.planner.plan import Planner
from nri_cpumgr.planner.scenario import SCENARIO_CONFIG_KEYS, scenario_machine
from nri_cpumgr.reconfigure import format_reconfiguration, plan_reconfiguration, pod_pools_of
from nri_cpumgr.reconfigure.plan import ReconfigurationPlan

# one socket, two NUMA nodes of 4 cores, SMT 2: CPUs 0-7 the first threads, 8-15 the siblings
ROWS = [{"cpu": t * 8 + i, "core": i, "socket": 0, "numa": i // 4, "uncore": i // 4}
        for t in range(2) for i in range(8)]
GIB = 1 << 30
MACHINE = scenario_machine({"cpus": ROWS, "numa_nodes": [
    {"id": n, "memory_bytes": 8 * GIB, "hugepages": {}, "distances": {0: 10, 1: 20} if n == 0
     else {0: 20, 1: 10}} for n in (0, 1)]})
STATIC = "cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"


def pod(name: str, cpu: str, mem: str = "256Mi", qos: str = "Guaranteed") -> str:
    res = (f"{{limits: {{cpu: '{cpu}', memory: {mem}}}}}" if qos == "Guaranteed"
           else f"{{requests: {{cpu: '{cpu}', memory: {mem}}}}}")
    return (f"kind: Pod\nmetadata: {{name: {name}, namespace: default, uid: uid-{name}}}\n"
            f"spec:\n  containers:\n  - name: c\n    resources: {res}\n")


def node(cfg: str, pods: list[str], cpu_state: dict[str, Any] | None = None) -> Planner:
    p = Planner(parse_config(cfg), MACHINE, cpu_state)
    for d in load_pods("---\n".join(pods)):
        p.plan_pod(d)
    return p


def replan(p: Planner, new: str | Config) -> ReconfigurationPlan:
    m = p.manager
    cfg = parse_config(new) if isinstance(new, str) else new
    return plan_reconfiguration(
        p.machine, p.config, cfg, m.containers, m.shared_pool() if m.static else None,
        getattr(m.policy, "reserved_cpus", CPUSet()),
        m.memory.state.to_dict() if m.memory is not None else None,
        pod_pools_of(m.state.assignments))


def by_pod(plan: ReconfigurationPlan) -> dict[str, Any]:
    return {c.pod.split("/")[1]: c for c in plan.containers}


def check_consistent(plan: ReconfigurationPlan) -> None:
    """The planned state is one the new policy accepts, and what the rows say."""
    m = plan.manager
    assert m is not None
    excl = [c for c in plan.containers if c.exclusive_after]
    seen = CPUSet()
    for c in excl:
        assert not (seen & c.cpus_after), f"{c.pod} overlaps another exclusive container"
        seen |= c.cpus_after
        assert not (c.cpus_after & plan.shared_pool_after)
        assert not (c.cpus_after & plan.reserved_after)
    if isinstance(m.policy, StaticPolicy):
        state = m.state.copy()
        m.policy.start(state)  # raises on an inconsistent state
        pools = pod_pools_of(m.state.assignments)  # pod-level pods' bubbles hold slices
        assert CPUSet(set(seen).union(*pools.values())) == m.state.assigned_cpus()
        for c in plan.containers:
            if c.action == "pod-pool":
                assert m.pod_level is not None
                assert c.cpus_after == m.pod_level.pod_pool(c.pod_uid)
                assert c.cpus_after <= pools[c.pod_uid]
            elif c.exclusive_after and c.pod_uid in pools:
                assert c.cpus_after <= pools[c.pod_uid]
            elif not c.exclusive_after:
                assert c.cpus_after == plan.shared_pool_after
        for phase, c, _ in plan.steps():  # a pod's shared containers follow their pool only
            assert c.action != "pod-pool" or phase == "pool", (phase, c)


def test_reserved_grown_moves_only_the_container_on_the_new_reserved_cpu():
    p = node(STATIC, [pod("a", "2"), pod("b", "1"), pod("c", "1"), pod("d", "500m"),
                      pod("e", "1", qos="Burstable")])
    before = {c.pod_name: t.applied for t in p.manager.containers.values()
              for c in [t.info]}
    assert 1 in before["a"]  # the first whole core after the reserved CPU 0: 1,9
    plan = replan(p, "cpuManagerPolicy: static\nreservedSystemCPUs: '0-1'\n")
    rows = by_pod(plan)
    assert rows["a"].action == "move" and "CPU(s) 1 became reserved" in rows["a"].reason
    assert 1 not in rows["a"].cpus_after and len(rows["a"].cpus_after) == 2
    for name in ("b", "c"):
        assert rows[name].action == "keep" and not rows[name].changed
        assert rows[name].cpus_after == before[name]
    assert rows["d"].action == rows["e"].action == "shared"
    assert 1 in plan.reserved_after and 1 in plan.shared_pool_after  # reserved stay shared
    assert {c.pod for c in plan.moved if c.exclusive_after} == {"default/a"}
    assert plan.changes == {"reservedSystemCPUs": ("0", "0-1")}
    check_consistent(plan)
    text = format_reconfiguration(plan)
    assert "became reserved" in text and "[exclusive] default/a c" in text


def test_reserved_shrunk_keeps_everything_and_grows_the_pool():
    p = node("cpuManagerPolicy: static\nreservedSystemCPUs: '0-1'\n",
             [pod("a", "2"), pod("b", "500m")])
    plan = replan(p, STATIC)
    rows = by_pod(plan)
    assert rows["a"].action == "keep"
    assert plan.shared_pool_after == plan.shared_pool_before  # reserved CPUs were shared
    check_consistent(plan)


def test_none_to_static_agrees_with_a_fresh_plugin():
    pods = [pod("a", "2"), pod("b", "500m"), pod("c", "1"), pod("d", "1", qos="Burstable")]
    p = node("cpuManagerPolicy: none\n", pods)
    plan = replan(p, STATIC)
    rows = by_pod(plan)
    fresh = node(STATIC, pods)
    want = {t.info.pod_name: t.applied for t in fresh.manager.containers.values()}
    assert rows["a"].action == rows["c"].action == "move"
    assert rows["a"].reason == "exclusive CPUs under the static policy"
    assert rows["a"].cpus_before == MACHINE.topology.cpus()  # not pinned under none
    for name in ("a", "c"):
        assert rows[name].cpus_after == want[name]
        assert rows[name].quota_after == -1  # exclusive CPUs: no CFS quota
    assert rows["b"].quota_after is None and rows["d"].quota_after is None
    assert plan.shared_pool_after == fresh.manager.shared_pool()
    # the shared containers shrink first, before any exclusive CPU is given
    phases = [s[0] for s in plan.steps()]
    assert phases.index("exclusive") > 0 and set(phases[:phases.index("exclusive")]) == {
        "shrink"}
    check_consistent(plan)


def test_static_to_none_unpins_everything_and_leaks_no_cpu():
    p = node(STATIC, [pod("a", "2"), pod("b", "500m")])
    plan = replan(p, "cpuManagerPolicy: none\n")
    every = MACHINE.topology.cpus()
    assert all(c.cpus_after == every and not c.exclusive_after for c in plan.containers)
    assert {c.action for c in plan.containers} == {"unpin"}
    assert by_pod(plan)["a"].reason == "policy none: no exclusive CPUs"
    assert by_pod(plan)["a"].quota_after == 200000  # its 2-CPU limit's quota is back
    assert by_pod(plan)["b"].quota_after is None
    assert plan.manager is not None and not plan.manager.state.assignments


def test_none_static_none_round_trip_leaks_no_cpu():
    pods = [pod("a", "2"), pod("b", "1"), pod("c", "500m")]
    p = node("cpuManagerPolicy: none\n", pods)
    first = replan(p, STATIC)
    m = first.manager
    assert m is not None
    second = plan_reconfiguration(MACHINE, parse_config(STATIC),
                                  parse_config("cpuManagerPolicy: none\n"), m.containers,
                                  m.shared_pool(), m.policy.reserved_cpus)
    assert all(c.cpus_after == MACHINE.topology.cpus() for c in second.containers)
    assert second.manager is not None and not second.manager.state.assignments


def _seeded(entries: dict[str, str], default: str) -> dict[str, Any]:
    return {"policyName": "static", "defaultCpuSet": default,
            "entries": {f"uid-{k}": {"c": v} for k, v in entries.items()}}


def test_full_pcpus_only_moves_the_smt_misaligned_container_only():
    # a: CPUs 2,3 (two half cores: misaligned), b: 4,12 (one whole core)
    state = _seeded({"a": "2-3", "b": "4,12"}, "0-1,5-11,13-15")
    p = node(STATIC, [pod("a", "2"), pod("b", "2"), pod("c", "500m")], cpu_state=state)
    assert {t.info.pod_name: str(t.applied) for t in p.manager.containers.values()
            if t.exclusive} == {"a": "2-3", "b": "4,12"}
    plan = replan(p, STATIC + "cpuManagerPolicyOptions: {full-pcpus-only: 'true'}\n")
    rows = by_pod(plan)
    assert rows["a"].action == "move" and "not whole physical cores" in rows["a"].reason
    after = rows["a"].cpus_after
    assert len(after) == 2 and MACHINE.topology.cpus_in_cores(
        {MACHINE.topology.details[c].core for c in after}) == after
    assert rows["b"].action == "keep"
    assert [c.pod for c in plan.moved if c.exclusive_after] == ["default/a"]
    check_consistent(plan)


def test_full_pcpus_only_refuses_an_odd_request_which_keeps_running_shared():
    p = node(STATIC, [pod("a", "1"), pod("b", "2")])
    plan = replan(p, STATIC + "cpuManagerPolicyOptions: {full-pcpus-only: 'true'}\n")
    rows = by_pod(plan)
    assert rows["a"].action == "refused" and not rows["a"].exclusive_after
    assert rows["a"].cpus_after == plan.shared_pool_after
    assert [r.pod for r in plan.refused] == ["default/a"]
    assert plan.refused[0].error.startswith("SMTAlignmentError")
    assert "drained" in plan.refused[0].kubelet
    check_consistent(plan)


def test_single_numa_node_moves_a_container_spread_over_two_nodes():
    # a: CPUs 3 (NUMA 0) and 4 (NUMA 1)
    state = _seeded({"a": "3-4", "b": "5"}, "0-2,6-15")
    p = node(STATIC, [pod("a", "2"), pod("b", "1")], cpu_state=state)
    plan = replan(p, STATIC + "topologyManagerPolicy: single-numa-node\n")
    rows = by_pod(plan)
    assert rows["a"].action == "move" and "Topology Manager" in rows["a"].reason
    assert len({MACHINE.topology.details[c].numa for c in rows["a"].cpus_after}) == 1
    assert rows["b"].action == "keep"
    check_consistent(plan)


def test_topology_scope_change_keeps_valid_assignments():
    p = node(STATIC + "topologyManagerPolicy: restricted\n", [pod("a", "2"), pod("b", "3")])
    plan = replan(p, STATIC + "topologyManagerPolicy: restricted\ntopologyManagerScope: pod\n")
    assert {c.action for c in plan.containers} == {"keep"}
    assert plan.changes == {"topologyManagerScope": ("container", "pod")}


def test_memory_manager_none_to_static_pins_mems_and_back():
    mm = ("memoryManagerPolicy: Static\nsystemReserved: {memory: 412Mi}\n"
          "reservedMemory: [{numaNode: 0, limits: {memory: 512Mi}}]\n")
    p = node(STATIC, [pod("a", "2"), pod("b", "500m")])
    plan = replan(p, STATIC + mm)
    rows = by_pod(plan)
    assert rows["a"].action == "keep" and rows["a"].changed  # same CPUs, mems pinned
    numa = {MACHINE.topology.details[c].numa for c in rows["a"].cpus_after}
    assert rows["a"].mems_after == CPUSet(numa)
    # a Guaranteed pod's memory is pinned whatever its CPUs (memorymanager policy_static.go)
    assert rows["b"].action == "shared" and rows["b"].mems_after is not None
    m = plan.manager
    assert m is not None
    back = plan_reconfiguration(MACHINE, parse_config(STATIC + mm), parse_config(STATIC),
                                m.containers, m.shared_pool(), m.policy.reserved_cpus)
    a = by_pod(back)["a"]
    assert a.action == "keep" and a.mems_after == MACHINE.topology.numa_nodes()  # unpinned


def test_invalid_new_config_is_refused_with_the_key():
    p = node(STATIC, [pod("a", "2")])
    with pytest.raises(ConfigError, match="reservedSystemCPUs"):
        replan(p, "cpuManagerPolicy: static\nreservedSystemCPUs: '0-99'\n")
    with pytest.raises(ConfigError, match="strict-cpu-reservation"):  # every CPU reserved
        replan(p, "cpuManagerPolicy: static\nreservedSystemCPUs: '0-15'\n"
               "cpuManagerPolicyOptions: {strict-cpu-reservation: 'true'}\n")
    with pytest.raises(ConfigError, match="cpuManagerPolicyOptions"):
        replan(p, STATIC + "cpuManagerPolicyOptions: {full-pcpus-onyl: 'true'}\n")


def test_too_few_cpus_left_refuses_the_later_containers():
    p = node(STATIC, [pod("a", "6"), pod("b", "6")])
    plan = replan(p, "cpuManagerPolicy: static\nreservedSystemCPUs: '0-5'\n")
    rows = by_pod(plan)
    assert rows["a"].action == "move"  # it held CPU 1-3: reserved now
    assert rows["b"].action in ("keep", "refused")
    assert plan.refused and all(r.error for r in plan.refused)
    check_consistent(plan)


def test_steps_move_a_container_after_the_one_holding_its_new_cpus():
    # a holds 1,9 (1 reserved now), b holds 2-3 (half cores under full-pcpus-only): both
    # move, and a move never lands on a CPU another container still holds at that step
    state = _seeded({"a": "1,9", "b": "2-3"}, "0,4-8,10-15")
    p = node(STATIC, [pod("a", "2"), pod("b", "2")], cpu_state=state)
    plan = replan(p, "cpuManagerPolicy: static\nreservedSystemCPUs: '0-1'\n"
                  "cpuManagerPolicyOptions: {full-pcpus-only: 'true'}\n")
    held = {c.id: c.cpus_before for c in plan.containers if c.exclusive_before}
    for _phase, c, cpus in plan.steps():
        others = CPUSet()
        for k, v in held.items():
            if k != c.id:
                others = others | v
        if c.exclusive_after:
            assert not (cpus & others), f"{c.pod} moves onto CPUs still held"
        held[c.id] = cpus
    check_consistent(plan)


# ------------------------------------------------------------------ property test
def _fresh(machine_doc: dict[str, Any], cfg: dict[str, Any], pods: list[dict[str, Any]]):
    """A fresh plugin under ``cfg``, the running containers of ``pods`` admitted in order,
    container by container (as after a restart's Synchronize)."""
    p = Planner(Config.model_validate(cfg), scenario_machine(machine_doc))
    p.manager.whole_pod_admission = False
    return p


def _scenario_node(s: dict[str, Any]):
    """The scenario's pods through the plugin under its config, container by container;
    ``None`` when the config is refused. Returns (planner, [(info)...] running)."""
    from nri_cpumgr.cm.container_manager import AdmissionError

    cfg = {k: v for k, v in s["config"].items() if k in SCENARIO_CONFIG_KEYS}
    try:
        p = Planner(Config.model_validate(cfg), scenario_machine(s["machine"]))
    except (ConfigError, ValueError):
        return None, []
    m = p.manager
    m.whole_pod_admission = False
    infos = []
    n = 0
    for ev in s["events"]:
        if ev["op"] != "add":
            continue
        pod = pod_from_spec(ev["pod"]["metadata"], ev["pod"]["spec"], "event")
        if any(c.kind == "init" for c in pod.containers):
            continue  # (a finished init container's CPUs: not part of a running node)
        ids = [f"c{n + i:04d}" for i in range(len(pod.containers))]
        n += len(ids)
        got = []
        try:
            for info in container_infos(pod, ids):
                m.admit(info)
                got.append(info)
        except AdmissionError:
            for info in got:
                m.remove(info.id)
            continue
        infos += got
    return p, infos


def _mutate(rng: random.Random, s: dict[str, Any]) -> dict[str, Any]:
    """Another config for the scenario's machine: the generator's, or a small change."""
    from tests.differential.scenarios import gen_config

    if rng.random() < 0.5:
        return gen_config(rng, s["machine"])
    c = dict(s["config"])
    cpus = sorted(r["cpu"] for r in s["machine"]["cpus"])
    k = rng.choice(["reserved", "policy", "option", "tm", "scope"])
    if k == "reserved":
        c.pop("kubeReserved", None)
        c["reservedSystemCPUs"] = ",".join(str(x) for x in cpus[: rng.choice([1, 2, 3, 4])])
    elif k == "policy":
        c["cpuManagerPolicy"] = "none" if c.get("cpuManagerPolicy") == "static" else "static"
        if c["cpuManagerPolicy"] == "none":
            c.pop("cpuManagerPolicyOptions", None)
    elif k == "option":
        opts = dict(c.get("cpuManagerPolicyOptions") or {})
        if "full-pcpus-only" in opts:
            del opts["full-pcpus-only"]
        else:
            opts["full-pcpus-only"] = "true"
            opts.pop("distribute-cpus-across-cores", None)
        c["cpuManagerPolicyOptions"] = opts
    elif k == "tm":
        c["topologyManagerPolicy"] = rng.choice(
            ["none", "best-effort", "restricted", "single-numa-node"])
    else:
        c["topologyManagerScope"] = rng.choice(["container", "pod"])
    return c


@pytest.mark.parametrize("chunk", range(4))
def test_property_plan_agrees_with_a_fresh_plugin(chunk):
    """Over the differential's generator (tests/differential/scenarios.generate): for each
    scenario's running pods and a second config, the plan (a) is a state the new policy
    accepts, exclusive sets disjoint, none on a reserved CPU, shared containers on the new
    pool; (b) keeps every exclusive container whose CPUs stay valid (none reserved,
    full-pcpus-only's whole cores, a Topology Manager policy that cannot refuse); (c) when it
    keeps no exclusive CPUs, decides every container exactly as a fresh plugin under the new
    config does for the same containers in the same order (CPUs, mems, refusals); (d) with
    an unchanged config it keeps everything. Pod-level pods included: a pod pool whose CPUs
    stay valid is kept with the slices in it (under unchanged pod-level rules), and counts as
    kept in (c)."""
    from tests.differential.scenarios import generate

    checked = kept_some = agreed = 0
    for seed in range(chunk * 60, chunk * 60 + 60):
        s = generate(seed)
        rng = random.Random(f"reconfigure-{seed}")
        old, running = _scenario_node(s)
        if old is None or not running:
            continue
        new_cfg = {k: v for k, v in _mutate(rng, s).items() if k in SCENARIO_CONFIG_KEYS}
        try:
            new = Config.model_validate(new_cfg)
            m = old.manager
            plan = replan(old, new)
        except ConfigError:
            continue
        checked += 1
        check_consistent(plan)
        rows = {c.id: c for c in plan.containers}
        pm = plan.manager
        assert pm is not None
        # (b) the minimal-move rule: valid CPUs are kept
        if isinstance(pm.policy, StaticPolicy) and new.topologyManagerPolicy in (
                "none", "best-effort") and new.memoryManagerPolicy == "None":
            def valid(cpus: CPUSet, policy: StaticPolicy = pm.policy) -> bool:
                ok = not (cpus & policy.reserved_cpus)
                if policy.options.full_pcpus_only:
                    t = policy.topology
                    cores = {t.details[c].core for c in cpus}
                    ok = ok and t.cpus_in_cores(cores) == cpus and not (
                        cpus & policy.reserved_physical_cpus)
                return ok

            old_pools = pod_pools_of(m.state.assignments)
            same_pod_level = all(old.config.__dict__[k] == new.__dict__[k] for k in (
                "featureGates", "topologyManagerPolicy", "topologyManagerScope"))
            for cid, t in m.containers.items():
                if not (t.exclusive and t.applied) or t.info.resources.integer_cpus != len(
                        t.applied):
                    continue
                if t.info.pod_resources is not None and not same_pod_level:
                    continue  # (the pod-level rules change: it may not qualify any more)
                pool = old_pools.get(t.info.pod_uid)
                if valid(t.applied) and (pool is None or valid(pool)):
                    assert rows[cid].action == "keep", (seed, rows[cid])
        # (c) nothing kept: a fresh plugin decides the same
        new_pools = pod_pools_of(pm.state.assignments)
        pool_kept = any(new_pools.get(u) == c for u, c in pod_pools_of(
            m.state.assignments).items())
        if not pool_kept and not any(c.action == "keep" for c in plan.containers):
            fresh = Planner(new, old.machine)
            fresh.manager.whole_pod_admission = False
            for info in running:
                try:
                    d = fresh.manager.admit(info)
                except Exception as e:  # AdmissionError
                    assert rows[info.id].action == "refused", (seed, info.id)
                    assert [r.error for r in plan.refused if r.id == info.id] == [str(e)]
                    continue
                r = rows[info.id]
                assert r.exclusive_after == bool(d.exclusive), (seed, info.id)
                if d.exclusive:
                    assert r.cpus_after == d.cpus, (seed, info.id)
                if d.mems is not None:
                    assert r.mems_after == d.mems, (seed, info.id)
            assert plan.shared_pool_after == (
                fresh.manager.shared_pool() if fresh.manager.static
                else old.machine.topology.cpus())
            agreed += 1
        else:
            kept_some += 1
        # (d) the same config again: nothing moves
        if new_cfg == {k: v for k, v in s["config"].items() if k in SCENARIO_CONFIG_KEYS}:
            assert not plan.moved
        same = plan_reconfiguration(
            old.machine, old.config, old.config, m.containers,
            m.shared_pool() if m.static else None, None,
            m.memory.state.to_dict() if m.memory is not None else None,
            pod_pools_of(m.state.assignments))
        assert not same.moved, (seed, same.moved)
    print("reconfigure property:", checked, agreed, kept_some)
    assert checked >= 20 and agreed >= 5 and kept_some >= 5, (checked, agreed, kept_some)


# ------------------------------------------------------------------ plan --reconfigure
def _live_node(tmp_path, cfg: str, pods: list[str]) -> tuple[Any, Any, Any]:
    """A node's files: the config, the topology JSON, the plugin's state directory."""
    import json

    from nri_cpumgr.checkpoint import Checkpoint
    from nri_cpumgr.topology.render import to_json

    p = node(cfg, pods)
    (tmp_path / "old.yaml").write_text(cfg)
    (tmp_path / "topo.json").write_text(json.dumps(to_json(MACHINE, "test")))
    state = tmp_path / "state"
    Checkpoint(state / "cpu_manager_state").save(p.manager.checkpoint())
    if p.manager.memory is not None:
        Checkpoint(state / "memory_manager_state").save(p.manager.memory.state.to_dict())
    return tmp_path / "old.yaml", tmp_path / "topo.json", state


def test_cli_plan_reconfigure_prints_the_plan_and_applies_nothing(tmp_path, capsys):
    import json

    from nri_cpumgr.cli import main

    old, topo, state = _live_node(tmp_path, STATIC, [pod("a", "2"), pod("b", "1"),
                                                     pod("c", "500m")])
    before = (state / "cpu_manager_state").read_bytes()
    new = tmp_path / "new.yaml"
    new.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0-1'\n")
    argv = ["plan", "--config", str(old), "--topology", str(topo), "--state", str(state),
            "--reconfigure", str(new)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "reservedSystemCPUs: '0' -> '0-1'" in out
    assert "CPU(s) 1 became reserved" in out
    assert "default/b  c          keep (unchanged)" in out
    assert main(argv + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    acts = {c["pod"]: c["action"] for c in doc["containers"]}
    assert acts == {"default/a": "move", "default/b": "keep", "default/c": "shared"}
    assert (state / "cpu_manager_state").read_bytes() == before  # nothing applied
    # an invalid new config: one line naming the file, status 2
    new.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0-99'\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert str(new) in err and "reservedSystemCPUs" in err
    # a directory given as NEW.yaml is named as one (it said "no such file")
    assert main([*argv[:-1], str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"nri-cpumgr plan: {tmp_path}: not a file (a directory?)\n"
    assert main([*argv[:-1], str(tmp_path / "none.yaml")]) == 2
    assert capsys.readouterr().err == f"nri-cpumgr plan: {tmp_path}/none.yaml: no such file\n"


def test_cli_plan_reconfigure_from_policy_none_needs_the_manifests(tmp_path, capsys):
    import json

    from nri_cpumgr.cli import main

    pods = [pod("a", "2"), pod("b", "500m")]
    old, topo, state = _live_node(tmp_path, "cpuManagerPolicy: none\n", pods)
    new = tmp_path / "new.yaml"
    new.write_text(STATIC)
    argv = ["plan", "--config", str(old), "--topology", str(topo), "--state", str(state),
            "--reconfigure", str(new), "--json"]
    assert main(argv) == 0
    got = capsys.readouterr()
    assert "no known CPU request" in got.err
    man = tmp_path / "pods.yaml"
    man.write_text("---\n".join(pods))
    assert main([*argv, str(man)]) == 0
    doc = json.loads(capsys.readouterr().out)
    a = next(c for c in doc["containers"] if c["pod"] == "default/a")
    assert a["action"] == "move" and a["exclusiveAfter"] and len(
        CPUSet.parse(a["cpusAfter"])) == 2


def test_summary_counts_each_refused_container_once(tmp_path, capsys):
    """The summary's ``refused`` is the number of refused containers (text, --json and the
    daemon's log line all print plan.summary())."""
    import json

    from nri_cpumgr.cli import main

    p = node(STATIC, [pod("a", "1"), pod("b", "2")])
    plan = replan(p, STATIC + "cpuManagerPolicyOptions: {full-pcpus-only: 'true'}\n")
    assert len(plan.refused) == 1
    s = plan.summary()
    assert s["refused"] == 1 and s["containers"] == 2
    assert sum(v for k, v in s.items() if k not in ("containers", "changed")) == 2, s
    assert "refused 1," in format_reconfiguration(plan)
    old, topo, state = _live_node(tmp_path, STATIC, [pod("a", "1"), pod("b", "2")])
    new = tmp_path / "new.yaml"
    new.write_text(STATIC + "cpuManagerPolicyOptions: {full-pcpus-only: 'true'}\n")
    argv = ["plan", "--config", str(old), "--topology", str(topo), "--state", str(state),
            "--reconfigure", str(new), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["refused"] == len(doc["refused"]) == 1


def test_cli_plan_reconfigure_refuses_a_state_that_does_not_fit(tmp_path, capsys):
    """As plain ``plan --state``: another node's state is one line and status 2, no plan."""
    from nri_cpumgr.checkpoint import Checkpoint
    from nri_cpumgr.cli import main

    old, topo, _ = _live_node(tmp_path, STATIC, [pod("a", "1")])
    state = tmp_path / "two-cpu-node"
    Checkpoint(state / "cpu_manager_state").save({
        "policyName": "static", "defaultCpuSet": "0", "reservedCpuSet": "0",
        "entries": {"uid-a": {"c": "1"}},
        "containers": [{"id": "c1", "pod": "default/a", "podUID": "uid-a", "container": "c",
                        "qos": "Guaranteed", "exclusive": True, "cpus": "1", "mems": "",
                        "stopped": False}]})
    new = tmp_path / "new.yaml"
    new.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '1'\n")
    argv = ["plan", "--config", str(old), "--topology", str(topo), "--state", str(state),
            "--reconfigure", str(new)]
    assert main(argv) == 2
    got = capsys.readouterr()
    assert got.out == ""
    assert got.err.startswith(f"nri-cpumgr plan: state {state} does not fit this machine "
                              "and config: "), got.err
    assert len(got.err.strip().splitlines()) == 1


@pytest.mark.parametrize("seed", [3, 6])
def test_pod_level_pods_keep_their_pod_pool(seed):
    """The differential generator's scenarios 3 and 6 (pod-level pods under
    PodLevelResourceManagers): seed 3, a config with no change, the plan takes CPUs 5-7 for a
    second bubble of pod0 (kept on 2-4) and shrinks the node's shared pool; seed 6,
    reservedSystemCPUs 1,4,5,7 -> 0-3, pod0's pod pool 8-11 (none reserved) moves to 4-7."""
    from tests.differential.scenarios import generate

    s = generate(seed)
    rng = random.Random(f"reconfigure-{seed}")
    old, running = _scenario_node(s)
    assert old is not None and running
    new = Config.model_validate(
        {k: v for k, v in _mutate(rng, s).items() if k in SCENARIO_CONFIG_KEYS})
    plan = replan(old, new)
    m = old.manager
    for c in plan.containers:  # CPUs none of which became reserved are kept
        t = m.containers[c.id]
        if t.applied is not None and not (t.applied & plan.reserved_after):
            assert c.cpus_after == t.applied, (c.pod, c.container, t.applied, c.cpus_after)
    assert plan.manager is not None  # no CPU taken beyond what the pods held
    assert len(plan.manager.state.assigned_cpus()) <= len(m.state.assigned_cpus()), (
        m.state.assigned_cpus(), plan.manager.state.assigned_cpus())
