"""nri-cpumgr plan: manifests -> pod model, the dry run on the plugin's managers, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nri_cpumgr.checkpoint import Checkpoint
from nri_cpumgr.cli import main
from nri_cpumgr.config import ConfigError, parse_config
from nri_cpumgr.planner.manifest import ManifestError, load_pods
from nri_cpumgr.planner.plan import Planner, machine_from_json
from nri_cpumgr.podmodel import QOSClass
from nri_cpumgr.sysfs import discover
from nri_cpumgr.topology.render import to_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
DUAL = FIXTURES / "dual-socket-smt"

SIDECAR_POD = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  initContainers:
  - name: setup
    resources: {limits: {cpu: "4", memory: 1Gi}}
  - name: proxy
    restartPolicy: Always
    resources: {limits: {cpu: "2", memory: 1Gi}}
  containers:
  - name: app
    resources: {limits: {cpu: "4", memory: 1Gi}}
  - name: log
    resources: {limits: {cpu: 500m, memory: 100Mi}}
"""


def planner(text: str = "cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n", **kw):
    return Planner(parse_config(text), discover(str(DUAL)), **kw)


def test_manifest_start_order_kinds_and_qos():
    docs = SIDECAR_POD + """
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  template:
    spec:
      containers: [{name: c, resources: {requests: {cpu: 500m}, limits: {cpu: "1"}}}]
---
kind: Pod
metadata: {name: idle}
spec: {containers: [{name: c}]}
"""
    web, api, idle = load_pods(docs)
    assert [(c.name, c.kind) for c in web.containers] == [
        ("setup", "init"), ("proxy", "sidecar"), ("app", "app"), ("log", "app")]
    assert web.qos is QOSClass.GUARANTEED and web.key == "shop/web"
    assert api.key == "shop/api" and api.qos is QOSClass.BURSTABLE
    assert idle.key == "default/idle" and idle.qos is QOSClass.BESTEFFORT
    # a stable uid when the manifest has none
    assert load_pods(docs)[0].uid == web.uid


@pytest.mark.parametrize("text, needle", [
    ("kind: Service\nmetadata: {name: s}\n", "kind 'Service'"),
    ("kind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n", "spec.containers is empty"),
    ("kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
     "    resources: {limits: {cpu: lots}}\n", "resources.limits.cpu: invalid quantity"),
    ("kind: Pod\nspec: {containers: [{name: c}]}\n", "metadata.name is missing"),
    ("a: [", "not YAML"),
    ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}, {name: c}]}\n",
     "used twice"),
])
def test_manifest_errors_name_the_problem(text, needle):
    with pytest.raises(ManifestError, match="f.yaml") as ei:
        load_pods(text, "f.yaml")
    assert needle in str(ei.value)


def test_init_container_cpus_are_reused_sidecar_keeps_its_own():
    p = planner()
    res = p.plan(load_pods(SIDECAR_POD))
    rows = {c.container: c for c in res.pods[0].containers}
    assert [rows[n].decision for n in ("setup", "proxy", "app", "log")] == [
        "exclusive", "exclusive", "exclusive", "shared"]
    setup, proxy, app = (set(_cpus(rows[n].cpus)) for n in ("setup", "proxy", "app"))
    assert len(setup) == 4 and len(proxy) == 2 and len(app) == 4
    assert proxy.isdisjoint(app)
    assert app & setup, "the finished init container's CPUs are reused"
    pool = set(_cpus(res.pods[0].shared_pool_after))
    assert pool == set(range(16)) - proxy - app
    assert set(_cpus(rows["log"].cpus)) == pool


def test_refused_init_container_stops_the_pod():
    text = SIDECAR_POD.replace('cpu: "4", memory: 1Gi}}\n  - name: proxy',
                               'cpu: "16", memory: 1Gi}}\n  - name: proxy', 1)
    res = planner().plan(load_pods(text))
    rows = res.pods[0].containers
    assert rows[0].decision == "refused"
    # the pod is admitted whole (plan knows the spec): the kubelet's admission result
    assert rows[0].error.startswith(
        "UnexpectedAdmissionError: Allocate failed due to not enough cpus available")
    assert [r.decision for r in rows[1:]] == ["not-started"] * 3
    assert res.pods[0].shared_pool_after == "0-15"


def test_topology_json_plans_like_sysfs():
    m = discover(str(DUAL))
    again = machine_from_json(json.loads(json.dumps(to_json(m, "x"))))
    assert again == m


def test_current_state_is_respected_and_foreign_policy_refused(tmp_path):
    first = planner()
    first.plan(load_pods("kind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n"
                         "  - {name: c, resources: {limits: {cpu: '8', memory: 1G}}}\n"))
    body = first.manager.checkpoint()
    taken = set(_cpus(next(iter(body["entries"].values()))["c"]))
    second = planner(cpu_state=body)
    res = second.plan(load_pods("kind: Pod\nmetadata: {name: b}\nspec:\n  containers:\n"
                                "  - {name: c, resources: {limits: {cpu: '4', memory: 1G}}}\n"))
    got = set(_cpus(res.pods[0].containers[0].cpus))
    assert len(got) == 4 and got.isdisjoint(taken)
    with pytest.raises(ConfigError, match="cpuManagerPolicy 'static'"):
        planner("cpuManagerPolicy: none\n", cpu_state=body)


def test_cli_plan_text_json_and_state_dir(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
                   "topologyManagerPolicy: single-numa-node\n")
    pods = tmp_path / "p.yaml"
    pods.write_text("kind: Pod\nmetadata: {name: big}\nspec:\n  containers:\n"
                    "  - {name: c, resources: {limits: {cpu: '9', memory: 1G}}}\n")
    argv = ["plan", "--config", str(cfg), "--sysfs-root", str(DUAL), str(pods)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "refused: TopologyAffinityError: Resources cannot be allocated" in out
    assert "shared pool after default/big: 0-15" in out
    # the plugin's state directory: 12 CPUs already exclusive on node 1 + node 0
    state = tmp_path / "state"
    Checkpoint(state / "cpu_manager_state").save({
        "policyName": "static", "defaultCpuSet": "0,3,8,11", "reservedCpuSet": "0",
        "entries": {"u1": {"x": "1-2,4-7,9-10,12-15"}}})
    pods.write_text(pods.read_text().replace("'9'", "'2'"))
    assert main(argv + ["--state", str(state), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sharedPoolBefore"] == "0,3,8,11"
    c = doc["pods"][0]["containers"][0]
    assert (c["decision"], c["cpus"], c["numa"]) == ("exclusive", "3,11", "0")
    # bad input: one line, status 2
    pods.write_text("kind: Pod\n")
    assert main(argv) == 2
    assert "metadata.name is missing" in capsys.readouterr().err


def _cpus(text: str) -> list[int]:
    from nri_cpumgr.cpuset import CPUSet

    return list(CPUSet.parse(text))


STATUS = {"policyName": "static", "defaultCpuSet": "0,3-8,11-15", "reservedCpuSet": "0",
          "entries": {"u1": {"x": "1-2,9-10"}}, "containers": []}


@pytest.mark.parametrize("edit, why", [
    ({}, None),
    ({"entries": [1]}, "entries: expected a mapping of pod uid to containers, got [1]"),
    ({"entries": {"u1": "1"}},
     "entries.u1: expected a mapping of container name to CPUs, got '1'"),
    ({"entries": {"u1": {"x": 5}}}, "entries.u1.x: expected a CPU list (a string), got 5"),
    ({"entries": {"u1": {"x": "1-x"}}},
     "entries.u1.x: invalid cpulist '1-x': bad element '1-x'"),
    ({"defaultCpuSet": 7}, "defaultCpuSet: expected a CPU list (a string), got 7"),
    ({"policyName": ["static"]}, "policyName: expected a string, got ['static']"),
])
def test_plan_on_an_edited_status_json(tmp_path, capsys, edit, why):
    """`status --json` output carries no checksum: a field of the wrong shape is one line
    naming the file and the field, status 2 (was an AttributeError or CPUSetError traceback
    from the managers' restore)."""
    f = tmp_path / "status.json"
    f.write_text(json.dumps({**STATUS, **edit}))
    pods = tmp_path / "p.yaml"
    pods.write_text("kind: Pod\nmetadata: {name: two}\nspec:\n  containers:\n"
                    "  - {name: c, resources: {limits: {cpu: '2', memory: 1G}}}\n")
    code = main(["plan", "--json", "--config", str(_cfg(tmp_path)), "--sysfs-root", str(DUAL),
                 "--state", str(f), str(pods)])
    got = capsys.readouterr()
    if why is None:
        assert code == 0 and json.loads(got.out)["sharedPoolBefore"] == "0,3-8,11-15"
    else:
        assert code == 2 and got.err == f"nri-cpumgr plan: {f}: {why}\n"


def _cfg(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n")
    return cfg


def test_plan_on_the_kubelets_checkpoint(tmp_path, capsys):
    from nri_cpumgr.adopt.kubelet import cpu_checksum

    body = {"policyName": "static", "defaultCpuSet": "0,3,8,11",
            "entries": {"u1": {"x": "1-2,4-7,9-10,12-15"}}}
    k = tmp_path / "cpu_manager_state"
    k.write_text(json.dumps({**body, "checksum": cpu_checksum(body)}))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n")
    pods = tmp_path / "p.yaml"
    pods.write_text("kind: Pod\nmetadata: {name: two}\nspec:\n  containers:\n"
                    "  - {name: c, resources: {limits: {cpu: '2', memory: 1G}}}\n")
    argv = ["plan", "--json", "--config", str(cfg), "--sysfs-root", str(DUAL), "--state", str(k),
            str(pods)]
    assert main(argv) == 0
    c = json.loads(capsys.readouterr().out)["pods"][0]["containers"][0]
    assert (c["decision"], c["cpus"]) == ("exclusive", "3,11")
    # its directory (/var/lib/kubelet, or adopting.md's copy) is read as the file is (was:
    # "the kubelet's own checkpoint, not one of the plugin's", status 2)
    in_dir = [*argv[:-2], str(tmp_path), str(pods)]
    assert main(in_dir) == 0
    c = json.loads(capsys.readouterr().out)["pods"][0]["containers"][0]
    assert (c["decision"], c["cpus"]) == ("exclusive", "3,11")
    k.write_text(json.dumps({**body, "checksum": cpu_checksum(body) ^ 1}))
    assert main(argv) == 2
    assert "checksum mismatch" in capsys.readouterr().err
    assert main(in_dir) == 2
    assert f"kubelet checkpoint {k}: checksum mismatch" in capsys.readouterr().err


def test_plan_on_a_kubelet_137_checkpoint(tmp_path, capsys):
    """kubelet 1.37's cpu_manager_state (v4, written by the kubelet's own code): its data,
    not taken for the plugin's own checkpoint; a pod-level pod's bubble is held whole."""
    from tests.unit.kubelet_checkpoint import write, writer_path

    write(writer_path(), tmp_path, {
        "policyName": "static", "defaultCpuSet": "0,3,8,11",
        "entries": {"u1": {"x": "1-2,9-10"}, "pl": {"main": "4,12", "side": "5-7,13-15"}},
        "podEntries": {"pl": "4-7,12-15"}}, None)
    k = tmp_path / "cpu_manager_state"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n")
    pods = tmp_path / "p.yaml"
    pods.write_text("kind: Pod\nmetadata: {name: two}\nspec:\n  containers:\n"
                    "  - {name: c, resources: {limits: {cpu: '2', memory: 1G}}}\n")
    argv = ["plan", "--json", "--config", str(cfg), "--sysfs-root", str(DUAL), "--state", str(k),
            str(pods)]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sharedPoolBefore"] == "0,3,8,11"
    c = doc["pods"][0]["containers"][0]
    assert (c["decision"], c["cpus"]) == ("exclusive", "3,11")
    raw = json.loads(k.read_text())
    k.write_text(json.dumps({**raw, "dataChecksum": raw["dataChecksum"] ^ 1}))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "dataChecksum" in err and str(k) in err


def test_replicas_plan_one_pod_each_named_like_the_controller(tmp_path, capsys):
    sts = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  replicas: 3
  template:
    spec:
      containers: [{name: c, resources: {limits: {cpu: "2", memory: 1Gi}}}]
"""
    pods = load_pods(sts)
    assert [p.key for p in pods] == ["shop/db-0", "shop/db-1", "shop/db-2"]
    assert len({p.uid for p in pods}) == 3
    with pytest.raises(ManifestError, match="spec.replicas 'many' is not a count"):
        load_pods(sts.replace("replicas: 3", "replicas: many"))
    # a DaemonSet has no replicas: one pod, its own name
    assert [p.key for p in load_pods(sts.replace("StatefulSet", "DaemonSet"))] == ["shop/db"]
    f = tmp_path / "sts.yaml"
    f.write_text(sts)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
                   "cpuManagerPolicyOptions: {full-pcpus-only: 'true', "
                   "distribute-cpus-across-numa: 'true'}\n")
    assert main(["plan", "--config", str(cfg), "--sysfs-root", str(DUAL), str(f)]) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0]
    assert "cpuManagerPolicy static full-pcpus-only=true, distribute-cpus-across-numa=true, " \
           "reserved 0" in head, head
    assert "{" not in head
    for i in range(3):
        assert f"shared pool after shop/db-{i}: " in out


def test_cli_plan_state_that_does_not_fit_is_an_error(tmp_path, capsys):
    """A state naming CPUs the machine lacks (another node's checkpoint) is one line and
    status 2, naming the file: never a plan of an empty node (the daemon, which can rebuild
    from the runtime, starts fresh instead)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n")
    pods = tmp_path / "p.yaml"
    pods.write_text("kind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n"
                    "  - {name: c, resources: {limits: {cpu: '2', memory: 1G}}}\n")
    state = tmp_path / "state"
    Checkpoint(state / "cpu_manager_state").save({
        "policyName": "static", "defaultCpuSet": "0-3,8-11", "reservedCpuSet": "0",
        "entries": {"u1": {"x": "4-7,12-15,40-47"}}})
    argv = ["plan", "--config", str(cfg), "--sysfs-root", str(DUAL), str(pods),
            "--state", str(state)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("nri-cpumgr plan: state ") and str(state) in err
    assert "does not fit this machine" in err and len(err.strip().splitlines()) == 1
    # the same checkpoint through the daemon's path: logged and rebuilt, not an error
    from nri_cpumgr.managers import restore_state

    p = planner().manager.policy
    body = Checkpoint(state / "cpu_manager_state").load()
    assert restore_state(p, body, "x").assignments == {}
    with pytest.raises(ConfigError, match="state x does not fit"):
        restore_state(planner().manager.policy, body, "x", strict=True)


@pytest.mark.parametrize("source", ["topology", "sysfs"])
def test_cli_plan_machine_check_names_the_files_it_read(tmp_path, capsys, source):
    """A config refused against the machine (reservedSystemCPUs outside it) names the config
    file and where the machine was read: the --topology JSON, or the sysfs tree."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0,40'\n")
    pods = tmp_path / "p.yaml"
    pods.write_text("kind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n"
                    "  - {name: c, resources: {limits: {cpu: '2', memory: 1G}}}\n")
    if source == "topology":
        topo = tmp_path / "node7.json"
        topo.write_text(json.dumps(to_json(discover(str(DUAL)), "node7")))
        machine, where = ["--topology", str(topo)], str(topo)
    else:
        machine, where = ["--sysfs-root", str(DUAL)], f"{DUAL}/sys"
    assert main(["plan", "--config", str(cfg), *machine, str(pods)]) == 2
    assert capsys.readouterr().err == (
        "nri-cpumgr plan: invalid config: reservedSystemCPUs '0,40': CPU(s) 40 not on this "
        f"machine (CPUs 0-15) ({cfg}; machine: {where})\n")


def test_deeply_nested_yaml_is_a_clear_error(tmp_path, capsys):
    deep = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    pods = tmp_path / "deep.yaml"
    pods.write_text(deep)
    assert main(["plan", "--sysfs-root", str(DUAL), str(pods)]) == 2
    err = capsys.readouterr().err
    assert f"{pods}: not a pod manifest: YAML nested too deeply" in err
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_config(deep)


@pytest.mark.parametrize("resources, needle", [
    ("{requests: {cpu: '-1', memory: 1Gi}, limits: {cpu: '-1', memory: 1Gi}}",
     "c: resources.requests.cpu: '-1' is negative"),
    ("{limits: {cpu: '1', memory: -1Gi}}", "c: resources.limits.memory: '-1Gi' is negative"),
    ("{requests: {cpu: '2', memory: 1Gi}, limits: {cpu: '1', memory: 1Gi}}",
     "c: resources.requests.cpu: '2' is more than its limit '1'"),
    ("{requests: {cpu: '1', memory: 2Gi}, limits: {cpu: '1', memory: 1Gi}}",
     "c: resources.requests.memory: '2Gi' is more than its limit '1Gi'"),
])
def test_manifest_quantities_the_api_server_rejects(tmp_path, capsys, resources, needle):
    """A negative quantity or a request above its limit (the API server's rule: quantities
    non-negative, a request <= its limit) is a manifest error: one line, status 2."""
    text = f"kind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n" \
           f"  - {{name: c, resources: {resources}}}\n"
    with pytest.raises(ManifestError, match="f.yaml") as ei:
        load_pods(text, "f.yaml")
    assert needle in str(ei.value), str(ei.value)
    f = tmp_path / "p.yaml"
    f.write_text(text)
    assert main(["plan", "--sysfs-root", str(DUAL), str(f)]) == 2
    got = capsys.readouterr()
    assert got.out == "" and len(got.err.strip().splitlines()) == 1
    assert got.err.startswith(f"nri-cpumgr plan: {f} document 1: pod p containers: c: ")
    # the same in an init container; pod-level resources (.spec.resources) too
    init = (f"kind: Pod\nmetadata: {{name: p}}\nspec:\n  initContainers:\n"
            f"  - {{name: c, resources: {resources}}}\n  containers: [{{name: x}}]\n")
    with pytest.raises(ManifestError) as ei:
        load_pods(init, "f.yaml")
    assert needle in str(ei.value) and "initContainers" in str(ei.value), str(ei.value)
    pod_level = (f"kind: Pod\nmetadata: {{name: p}}\nspec:\n  resources: {resources}\n"
                 "  containers: [{name: c}]\n")
    with pytest.raises(ManifestError) as ei:
        load_pods(pod_level, "f.yaml")
    assert needle.replace("c: resources.", "spec.resources.") in str(ei.value), str(ei.value)


def test_manifest_zero_quantities_and_equal_request_stay_accepted():
    zero, eq = load_pods(
        "kind: Pod\nmetadata: {name: z}\nspec:\n  containers:\n"
        "  - {name: c, resources: {requests: {cpu: '0'}, limits: {cpu: '0'}}}\n"
        "---\nkind: Pod\nmetadata: {name: e}\nspec:\n  containers:\n"
        "  - {name: c, resources: {requests: {cpu: 1000m, memory: 1Gi}, "
        "limits: {cpu: '1', memory: 1Gi}}}\n")
    assert zero.qos is QOSClass.BESTEFFORT and eq.qos is QOSClass.GUARANTEED


def test_replicas_above_the_bound_are_refused_at_once(tmp_path, capsys):
    """``replicas: 100000000`` is refused before any pod is built (it ran for ever), as is a
    plan of more than MAX_PODS pods over several documents; MAX_PODS replicas are planned."""
    from nri_cpumgr.planner.manifest import MAX_PODS

    dep = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n"
           "  replicas: N\n  template: {spec: {containers: [{name: a}]}}\n")
    f = tmp_path / "d.yaml"
    f.write_text(dep.replace("N", "100000000"))
    assert main(["plan", "--sysfs-root", str(DUAL), str(f)]) == 2
    got = capsys.readouterr()
    assert got.out == "" and len(got.err.strip().splitlines()) == 1
    assert got.err.startswith(f"nri-cpumgr plan: {f} document 1: spec.replicas 100000000 "
                              f"is more than {MAX_PODS} pods"), got.err
    assert len(load_pods(dep.replace("N", str(MAX_PODS)))) == MAX_PODS
    half = dep.replace("N", str(MAX_PODS // 2 + 1))
    with pytest.raises(ManifestError, match=f"more than {MAX_PODS} pods"):
        load_pods(f"{half}---\n{half}", "f.yaml")
    # over several files too
    g = tmp_path / "half.yaml"
    g.write_text(half)
    assert main(["plan", "--sysfs-root", str(DUAL), str(g), str(g)]) == 2
    assert f"more than {MAX_PODS} pods" in capsys.readouterr().err


@pytest.mark.parametrize("text,scope", [
    ("cpuManagerPolicy: none\n", "container"),
    ("cpuManagerPolicy: none\ntopologyManagerScope: pod\n", "pod"),
    ("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\ntopologyManagerPolicy: restricted\n"
     "topologyManagerScope: pod\n", "pod"),
])
def test_plan_shows_the_configured_topology_manager_scope(text, scope):
    """The summary names the config's scope, never the kubelet's internal "none" scope of
    policy none (a value the key cannot take)."""
    assert planner(text).summary()["topologyManagerScope"] == scope


@pytest.mark.parametrize(("cpu", "shares", "quota"), [
    ("255", 261120, 25500000), ("256", 262144, 25600000), ("300", 262144, 30000000),
    ("1e20", 262144, 2**63 - 1)])
def test_linux_resources_bounded_as_the_kubelet_bounds_them(cpu, shares, quota):
    """cpu.shares at most 262144 (kubelet cm.MaxShares: the plugin reads 256 CPUs from a
    larger request, as on a node); a quota past the field's int64 held at its end, not an
    error (the API server takes a CPU of 1e20, capped at 2**63-1)."""
    from nri_cpumgr.planner.manifest import linux_resources
    from nri_cpumgr.podmodel import ContainerSpec, parse_quantity

    milli = parse_quantity(cpu, milli=True)
    r = linux_resources(ContainerSpec("app", requests={"cpu": milli}, limits={"cpu": milli}))
    assert (r.cpu.shares.value, r.cpu.quota.value) == (shares, quota)


def test_cli_plan_huge_cpu_is_refused_not_a_crash(tmp_path, capsys):
    f = tmp_path / "pod.yaml"
    f.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: huge}\nspec:\n"
                 "  containers: [{name: app, resources: {limits: {cpu: '1e20', memory: 1Gi}}}]\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n")
    assert main(["plan", "--config", str(cfg), "--sysfs-root", str(DUAL), str(f)]) == 0
    out = capsys.readouterr().out
    assert "default/huge" in out and "refused" in out, out


def test_plan_state_below_a_directory_it_may_not_search(tmp_path, capsys, monkeypatch):
    """`--state DIR` below a directory the user may not search (stat answers EACCES): one
    line naming it, status 2 (was a PermissionError traceback from Path.is_dir)."""
    import os

    real = os.stat
    top = str(tmp_path / "priv") + "/"

    def stat(path, *a, **kw):
        if os.fspath(path).startswith(top):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path, *a, **kw)

    pods = tmp_path / "p.yaml"
    pods.write_text("kind: Pod\nmetadata: {name: one}\nspec:\n  containers: [{name: c}]\n")
    monkeypatch.setattr(os, "stat", stat)
    assert main(["plan", "--config", str(_cfg(tmp_path)), "--sysfs-root", str(DUAL),
                 "--state", str(tmp_path / "priv" / "st"), str(pods)]) == 2
    assert capsys.readouterr().err == f"nri-cpumgr plan: {tmp_path}/priv/st: Permission denied\n"


@pytest.mark.parametrize("policy, code, err", [
    ("none", 0, ""),
    ("dynamic", 2, "written by cpuManagerPolicy 'dynamic', which this plugin does not adopt "
                   "(only static)"),
])
def test_plan_on_a_kubelet_checkpoint_of_another_policy(tmp_path, capsys, policy, code, err):
    """The kubelet's checkpoint of another policy, as adoption reads it: `none` holds no
    exclusive CPUs (an empty node), any other is not adopted (was: 'checkpoint ... was written
    by cpuManagerPolicy ...: start it with the checkpoint's policy and change the policy in
    its config file while it runs ...', the advice for the plugin's own checkpoint)."""
    from nri_cpumgr.adopt.kubelet import cpu_checksum

    body = {"policyName": policy, "defaultCpuSet": "", "entries": {}}
    k = tmp_path / "cpu_manager_state"
    k.write_text(json.dumps({**body, "checksum": cpu_checksum(body)}))
    pods = tmp_path / "p.yaml"
    pods.write_text("kind: Pod\nmetadata: {name: two}\nspec:\n  containers:\n"
                    "  - {name: c, resources: {limits: {cpu: '2', memory: 1G}}}\n")
    assert main(["plan", "--json", "--config", str(_cfg(tmp_path)), "--sysfs-root", str(DUAL),
                 "--state", str(k), str(pods)]) == code
    got = capsys.readouterr()
    assert err in got.err and "start it with" not in got.err
    if code == 0:
        assert json.loads(got.out)["sharedPoolBefore"] == "0-15"
