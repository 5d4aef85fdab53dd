"""NodeResourceTopology: the object built from the machine and the plugin's checkpoints
(nri_cpumgr.nrt.model), and the exporter's write-on-change and backoff (nri_cpumgr.nrt.exporter)
with the API call replaced by a recording callable. The real API server is in tests/cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_cpumgr.checkpoint import Checkpoint
from nri_cpumgr.config import Config
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.nrt import exporter as ex
from nri_cpumgr.nrt import model
from nri_cpumgr.sysfs import discover

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
# dual-socket-smt: NUMA 0 = CPUs 0-3,8-11, NUMA 1 = 4-7,12-15; distances 10/21
MACHINE = discover(FIXTURES / "dual-socket-smt")


def _zone(obj: dict, name: str) -> dict:
    return next(z for z in obj["zones"] if z["name"] == name)


def _res(zone: dict, name: str) -> dict:
    return next(r for r in zone["resources"] if r["name"] == name)


def test_cpu_per_numa_zone_reserved_and_exclusive() -> None:
    state = {"policyName": "static", "reservedCpuSet": "0,8", "defaultCpuSet": "0-2,8-10,12-15",
             "entries": {"uid-a": {"app": "3,11"}, "uid-b": {"db": "4-7"}}}
    obj = model.build("node-a", MACHINE, policy="single-numa-node", scope="container",
                      cpu_state=state)
    assert obj["apiVersion"] == "topology.node.k8s.io/v1alpha2"
    assert obj["kind"] == "NodeResourceTopology" and obj["metadata"] == {"name": "node-a"}
    assert [z["name"] for z in obj["zones"]] == ["node-0", "node-1"]
    z0, z1 = _zone(obj, "node-0"), _zone(obj, "node-1")
    assert z0["type"] == "Node"
    assert _res(z0, "cpu") == {"name": "cpu", "capacity": "8", "allocatable": "6",
                               "available": "4"}
    assert _res(z1, "cpu") == {"name": "cpu", "capacity": "8", "allocatable": "8",
                               "available": "4"}
    assert z0["costs"] == [{"name": "node-0", "value": 10}, {"name": "node-1", "value": 21}]
    assert obj["topologyPolicies"] == ["SingleNUMANodeContainerLevel"]
    assert obj["attributes"] == [{"name": "topologyManagerPolicy", "value": "single-numa-node"},
                                 {"name": "topologyManagerScope", "value": "container"}]


def test_reserved_from_config_when_no_checkpoint_and_never_negative() -> None:
    obj = model.build("n", MACHINE, reserved=CPUSet.parse("0-1"))
    assert _res(_zone(obj, "node-0"), "cpu")["allocatable"] == "6"
    assert _res(_zone(obj, "node-0"), "cpu")["available"] == "6"
    assert obj["topologyPolicies"] == ["None"]
    # an exclusive assignment that overlaps the reserved CPUs is not counted twice
    state = {"reservedCpuSet": "0-1", "entries": {"u": {"c": "0-3"}}}
    assert _res(_zone(model.build("n", MACHINE, cpu_state=state), "node-0"),
                "cpu")["available"] == "4"


def test_memory_and_hugepages_from_the_memory_manager_state() -> None:
    mem = {"machine_state": {"1": {"memory_map": {
        "memory": {"total_mem_size": 8589934592, "system_reserved": 104857600,
                   "allocatable": 7948206080, "reserved": 1073741824, "free": 6874464256},
        "hugepages-2Mi": {"total_mem_size": 536870912, "system_reserved": 0,
                          "allocatable": 536870912, "reserved": 0, "free": 536870912}}}}}
    obj = model.build("n", MACHINE, memory_state=mem)
    z1 = _zone(obj, "node-1")
    assert _res(z1, "memory") == {"name": "memory", "capacity": "8589934592",
                                  "allocatable": "7948206080", "available": "6874464256"}
    assert _res(z1, "hugepages-2Mi")["available"] == "536870912"
    assert [r["name"] for r in _zone(obj, "node-0")["resources"]] == ["cpu"]


@pytest.mark.parametrize(("policy", "scope", "name"), [
    ("none", "container", "None"), ("best-effort", "pod", "BestEffortPodLevel"),
    ("restricted", "container", "RestrictedContainerLevel"),
    ("single-numa-node", "pod", "SingleNUMANodePodLevel")])
def test_topology_policy_names(policy: str, scope: str, name: str) -> None:
    assert model.topology_policy_name(policy, scope) == name


def test_unknown_policy_and_bad_cpuset_are_errors() -> None:
    with pytest.raises(ValueError):
        model.topology_policy_name("strict", "container")
    with pytest.raises(ValueError):
        model.build("n", MACHINE, cpu_state={"entries": {"u": {"c": "0-x"}}})


def _config(tmp_path: Path, **kw: str) -> Config:
    return Config(stateDirectory=str(tmp_path), cpuManagerPolicy="static",
                  reservedSystemCPUs="0", **kw)


def test_exporter_writes_on_change_only(tmp_path: Path) -> None:
    sent: list[dict] = []
    e = ex.Exporter("node-a", MACHINE, _config(tmp_path), lambda o: sent.append(o) or "x")
    assert e.step() == 0.0 and len(sent) == 1  # no checkpoint yet: the machine alone
    assert _res(_zone(sent[0], "node-0"), "cpu")["available"] == "7"
    e.step()
    assert len(sent) == 1  # nothing changed: no API call
    cp = Checkpoint(tmp_path / ex.CPU_STATE)
    cp.save({"policyName": "static", "reservedCpuSet": "0", "defaultCpuSet": "0-2,4-15",
             "entries": {"u": {"app": "3"}}})
    e.step()
    assert len(sent) == 2 and _res(_zone(sent[1], "node-0"), "cpu")["available"] == "6"
    cp.save({"policyName": "static", "reservedCpuSet": "0", "defaultCpuSet": "0-15",
             "entries": {}})
    e.step()
    assert len(sent) == 3 and _res(_zone(sent[2], "node-0"), "cpu")["available"] == "7"


def test_exporter_backs_off_and_keeps_last_state_on_a_corrupt_checkpoint(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[dict] = []
    fail = {"n": 3}

    def apply(obj: dict) -> str:
        calls.append(obj)
        if fail["n"]:
            fail["n"] -= 1
            raise ConnectionRefusedError("API server down")
        return "created"

    e = ex.Exporter("node-a", MACHINE, _config(tmp_path), apply)
    assert [e.step() for _ in range(3)] == [1.0, 2.0, 4.0]
    assert sum("not written" in r.message for r in caplog.records) == 1  # logged once
    assert e.step() == 0.0 and len(calls) == 4 and e.written is not None
    Checkpoint(tmp_path / ex.CPU_STATE).save({"reservedCpuSet": "0",
                                              "entries": {"u": {"app": "3"}}})
    e.step()
    (tmp_path / ex.CPU_STATE).write_text("{not json")
    e.step()  # corrupt: the last good state stays, nothing new is written
    assert len(calls) == 5 and _res(_zone(calls[-1], "node-0"), "cpu")["available"] == "6"


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
users: [{name: u, user: {token: t}}]
"""


@pytest.mark.parametrize(("case", "message"), [
    ("missing", "kubeconfig {f}: cannot read it: No such file or directory"),
    ("directory", "kubeconfig {f}: cannot read it: Is a directory"),
    ("empty", "kubeconfig {f}: not a usable kubeconfig: ConfigException: Invalid kube-config."),
    ("not YAML", "kubeconfig {f}: not a usable kubeconfig: not YAML at line 2, column 1: "),
    ("no context", "kubeconfig {f}: not a usable kubeconfig: ConfigException: "),
])
def test_a_bad_kubeconfig_is_a_config_error_at_start(tmp_path: Path, monkeypatch, case: str,
                                                     message: str) -> None:
    """A kubeconfig that is missing, unreadable or malformed is a configuration error at
    start (one line naming the file; `nrt-export` exits 2), never retried: the loop would
    only log it again every minute."""
    monkeypatch.setattr(ex.signal, "signal", lambda *a: None)
    f = tmp_path / "kubeconfig"
    if case == "directory":
        f.mkdir()
    elif case != "missing":
        f.write_text({"empty": "", "not YAML": "a: [\n",
                      "no context": "apiVersion: v1\nkind: Config\nclusters: []\n"}[case])
    calls: list[int] = []
    monkeypatch.setattr(ex.Exporter, "step", lambda self: calls.append(1) or 0.01)
    with pytest.raises(ex.ConfigError) as e:
        ex.run("node-a", MACHINE, _config(tmp_path), kubeconfig=str(f), interval=0.01,
               passes=1)
    assert str(e.value).startswith(message.format(f=f)), str(e.value)
    assert "\n" not in str(e.value) and calls == []  # nothing tried


def test_the_cli_exits_2_naming_the_kubeconfig(tmp_path: Path, capsys) -> None:
    from nri_cpumgr.cli import main

    missing = tmp_path / "nope"
    assert main(["nrt-export", "--node-name", "n", "--kubeconfig", str(missing),
                 "--sysfs-root", str(FIXTURES / "dual-socket-smt"),
                 "--state-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"nri-cpumgr: kubeconfig {missing}: cannot read it: "
                                       "No such file or directory\n")


def test_a_server_that_is_down_is_retried(tmp_path: Path, monkeypatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """A good kubeconfig naming a server that does not answer: the write fails, is logged
    and retried with backoff (run returns after its passes, no error)."""
    monkeypatch.setattr(ex.signal, "signal", lambda *a: None)
    f = tmp_path / "kubeconfig"
    f.write_text(KUBECONFIG)
    waits: list[float] = []
    real_step = ex.Exporter.step

    def step(self: ex.Exporter) -> float:
        waits.append(real_step(self))
        return 0.01  # (the loop's sleep kept short)

    monkeypatch.setattr(ex.Exporter, "step", step)
    assert ex.run("node-a", MACHINE, _config(tmp_path), kubeconfig=str(f), interval=0.01,
                  passes=2) == 0
    assert waits == [1.0, 2.0]  # backed off, twice
    assert sum("not written" in r.message for r in caplog.records) == 1


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "inf", "x"])
def test_an_interval_that_would_spin_is_a_usage_error(interval, capsys):
    """`nrt-export --interval 0` (or less) would look at the state directory without pause:
    refused at parsing, exit 2, one error line."""
    from nri_cpumgr.cli import main

    with pytest.raises(SystemExit) as ei:
        main(["nrt-export", "--node-name", "n", "--interval", interval])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --interval: '{interval}': expected a number of seconds" in err
