import json
from pathlib import Path

import pytest

from nri_cpumgr.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def test_bad_config_exits_2_with_one_line(tmp_path, capsys):
    assert _run(tmp_path, "cpuManagerPolicy: static\n"
                "cpuManagerPolicyOptions: {full-pcpus-onyl: 'true'}\n"
                "reservedSystemCPUs: '0'\n") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "full-pcpus-onyl" in err


def test_unwritable_log_file_exits_2_with_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    # (its directory is a file)
    assert _run(tmp_path, f"logFile: {tmp_path}/file/nri-cpumgr.log\n",
                "--socket", str(tmp_path / "no.sock")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "logFile: cannot write the log file" in err and "file/nri-cpumgr.log" in err


def test_static_without_reservation_is_refused(tmp_path, capsys):
    assert _run(tmp_path, "cpuManagerPolicy: static\n") == 2
    assert "greater than zero" in capsys.readouterr().err


def test_alpha_option_without_gate_is_refused(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
                   "cpuManagerPolicyOptions: {align-by-socket: 'true'}\n")
    assert main(["run", "--config", str(cfg), "--sysfs-root", str(FIXTURES / "dual-socket-smt"),
                 "--state-dir", str(tmp_path / "s")]) == 2
    assert "align-by-socket" in capsys.readouterr().err


def test_topology_json_is_the_corpus_format(capsys):
    assert main(["topology", "--json", "--sysfs-root", str(FIXTURES / "dual-socket-smt")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["declared"]["NumCPUs"] == 16 and doc["declared"]["NumNUMANodes"] == 2
    assert {c["cpu"]: c["core"] for c in doc["cpus"]}[8] == 0  # sibling of CPU 0


def test_topology_missing_sysfs(tmp_path, capsys):
    """A --sysfs-root that is no sysfs tree is bad input: exit 2, one line."""
    assert main(["topology", "--sysfs-root", str(tmp_path / "nonexistent")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read the topology" in err, err


def test_plan_missing_sysfs_exits_2_with_one_line(tmp_path, capsys):
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
                   "  - name: a\n    resources: {limits: {cpu: '1', memory: 1Gi}}\n")
    assert main(["plan", str(pod), "--sysfs-root", str(tmp_path / "nonexistent")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("nri-cpumgr plan: cannot read the topology: "), err


def test_status_without_checkpoint_is_an_empty_state(tmp_path, capsys):
    """No checkpoint yet (the plugin has not run with that state directory) is no error:
    a note on stderr naming the file looked for, the empty state, exit status 0."""
    assert main(["status", "--state-dir", str(tmp_path)]) == 0
    got = capsys.readouterr()
    assert got.err == (
        f"nri-cpumgr: no checkpoint yet at {tmp_path}/cpu_manager_state: the plugin writes it "
        "once a runtime has configured it with that stateDirectory (--config FILE or "
        "--state-dir DIR reads another); the state is empty\n")
    out = got.out.splitlines()
    assert out[:3] == ["policy:        -", "reserved CPUs: -", "shared pool:   -"]
    assert out[4].split() == ["POD", "CONTAINER", "QOS", "CPUS", "MEMS", "NUMA", "EXCLUSIVE",
                              "STATE"] and len(out) == 5
    assert main(["status", "--json", "--state-dir", str(tmp_path / "nowhere")]) == 0
    got = capsys.readouterr()
    assert json.loads(got.out) == {}
    assert f"no checkpoint yet at {tmp_path}/nowhere/cpu_manager_state (no directory " \
           f"{tmp_path}/nowhere): " in got.err


def test_status_of_a_corrupt_checkpoint_exits_1(tmp_path, capsys):
    (tmp_path / "cpu_manager_state").write_text("{not json")
    assert main(["status", "--state-dir", str(tmp_path)]) == 1
    got = capsys.readouterr()
    assert got.out == "" and got.err.startswith(
        f"nri-cpumgr: checkpoint {tmp_path}/cpu_manager_state: not JSON: ")


def test_status_table_from_checkpoint(tmp_path, capsys):
    from nri_cpumgr.checkpoint import Checkpoint

    Checkpoint(tmp_path / "cpu_manager_state").save({
        "policyName": "static", "defaultCpuSet": "0,2-3", "reservedCpuSet": "0",
        "entries": {"u1": {"app": "1"}},
        "containers": [
            {"id": "c1", "pod": "ns/g", "podUID": "u1", "container": "app", "qos": "Guaranteed",
             "exclusive": True, "cpus": "1", "mems": "0", "numa": "0", "stopped": False},
            {"id": "c2", "pod": "ns/be", "podUID": "u2", "container": "app",
             "qos": "BestEffort", "exclusive": False, "cpus": "0,2-3", "mems": "", "numa": "0",
             "stopped": False},
        ],
    })
    assert main(["status", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["policy:        static", "reserved CPUs: 0", "shared pool:   0,2-3"]
    rows = [line.split() for line in out[4:]]
    assert rows[0] == ["POD", "CONTAINER", "QOS", "CPUS", "MEMS", "NUMA", "EXCLUSIVE", "STATE"]
    # sorted by pod and container, whatever the checkpoint's order
    assert rows[1] == ["ns/be", "app", "BestEffort", "0,2-3", "-", "0", "no", "live"]
    assert rows[2] == ["ns/g", "app", "Guaranteed", "1", "0", "0", "yes", "live"]
    assert main(["status", "--json", "--state-dir", str(tmp_path)]) == 0
    assert '"reservedCpuSet": "0"' in capsys.readouterr().out


def _run(tmp_path, text, *extra):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
    return main(["run", "--config", str(cfg), "--sysfs-root", str(FIXTURES / "this-machine"),
                 "--state-dir", str(tmp_path / "s"), *extra])


@pytest.mark.parametrize(
    "text, words",
    [
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        ("cpuManagerPolicy: static\ncpuManagerPolicy: none\n", "duplicate key"),
        ("featureGates: {NoSuchGate: true}\n", "NoSuchGate"),
        ("metricsAddress: ':99999'\n", "out of range"),
    ],
)
def test_more_bad_configs(tmp_path, capsys, text, words):
    assert _run(tmp_path, text) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_checkpoint_of_another_policy_refuses_start(tmp_path, capsys):
    from nri_cpumgr.checkpoint import Checkpoint

    (tmp_path / "s").mkdir()
    Checkpoint(tmp_path / "s" / "cpu_manager_state").save(
        {"policyName": "static", "defaultCpuSet": "0", "entries": {"u": {"c": "1"}}})
    assert _run(tmp_path, "cpuManagerPolicy: none\n") == 2
    assert "written by cpuManagerPolicy 'static'" in capsys.readouterr().err
    # nothing was overwritten
    assert Checkpoint(tmp_path / "s" / "cpu_manager_state").load()["entries"] == {"u": {"c": "1"}}


def test_unwritable_state_directory_refuses_start(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"stateDirectory: {tmp_path / 'file' / 'sub'}\n")
    assert main(["run", "--config", str(cfg), "--sysfs-root", str(FIXTURES / "this-machine")]) == 2
    assert "stateDirectory" in capsys.readouterr().err


def test_metrics_port_in_use(tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert _run(tmp_path, f"metricsAddress: '127.0.0.1:{port}'\n",
                    "--socket", str(tmp_path / "none.sock")) == 2
    assert "metricsAddress" in capsys.readouterr().err


def test_launched_by_the_runtime_with_no_arguments(tmp_path, monkeypatch):
    """The runtime starts plugin_path/NN-name with no arguments and NRI_PLUGIN_SOCKET set:
    that is `run`, configured by Configure (the default config file gives the start-up
    state directory, hence the log file)."""
    import asyncio
    import socket
    import threading

    from nri_cpumgr import locations

    from .nri_peer import PeerConn

    boot = tmp_path / "boot"
    default = tmp_path / "config.yaml"
    default.write_text(f"stateDirectory: {boot}\n")
    monkeypatch.setattr(locations, "DEFAULT_CONFIG", str(default))
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.set_inheritable(True)
    monkeypatch.setenv("NRI_PLUGIN_SOCKET", str(ours.fileno()))
    monkeypatch.setenv("NRI_PLUGIN_NAME", "cpumgr")
    monkeypatch.setenv("NRI_PLUGIN_IDX", "90")
    state = tmp_path / "state"
    seen: dict[str, object] = {}

    async def runtime() -> None:
        conn = await PeerConn.from_socket(theirs)
        reg = await asyncio.wait_for(asyncio.shield(conn.registered), 10)
        seen["name"] = (reg.plugin_idx, reg.plugin_name)
        events, _ = await conn.handshake(
            config=f'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'
                   f"stateDirectory: {state}\n", timeout=10)
        seen["events"] = events
        await conn.close()

    t = threading.Thread(target=lambda: asyncio.run(runtime()), daemon=True)
    t.start()
    rc = main([])
    t.join(10)
    ours.detach()  # the plugin owned (and closed) the fd
    assert rc == 0
    assert seen["name"] == ("90", "cpumgr")
    assert seen["events"] != 0
    text = (boot / "nri-cpumgr.log").read_text()
    assert "configuration taken from the runtime" in text


def test_no_arguments_without_the_runtime_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.delenv("NRI_PLUGIN_SOCKET", raising=False)
    with pytest.raises(SystemExit) as ei:
        main([])
    assert ei.value.code == 2
    assert "required: cmd" in capsys.readouterr().err


def test_status_finds_the_state_directory_in_the_config(tmp_path, capsys, monkeypatch):
    from nri_cpumgr import locations
    from nri_cpumgr.checkpoint import Checkpoint

    state = tmp_path / "mine"
    state.mkdir()
    Checkpoint(state / "cpu_manager_state").save(
        {"policyName": "static", "defaultCpuSet": "0-1", "reservedCpuSet": "0", "entries": {},
         "containers": []})
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"stateDirectory: {state}\n")
    assert main(["status", "--config", str(cfg)]) == 0
    assert "shared pool:   0-1" in capsys.readouterr().out
    # no --config: the default config file names it too
    monkeypatch.setattr(locations, "DEFAULT_CONFIG", str(cfg))
    assert main(["status"]) == 0
    assert "reserved CPUs: 0" in capsys.readouterr().out
    # --state-dir overrides the config
    assert main(["status", "--config", str(cfg), "--state-dir", str(tmp_path / "none")]) == 0
    err = capsys.readouterr().err
    assert f"no checkpoint yet at {tmp_path}/none/cpu_manager_state" in err
    assert "--state-dir DIR" in err


@pytest.mark.parametrize(
    "text, words",
    [
        ("a: [\n", "c.yaml:2:1: not YAML"),
        ("metricsAddress: 'localhost'\n", "expected host:port"),
        ("cpuManagerPolicy: static\nreservedSystemCPUs: '0,7'\n", "reservedSystemCPUs '0,7'"),
        ("cpuManagerPolicy: static\nreservedSystemCPUs: '0-1'\ncpuManagerPolicyOptions:\n"
         "  strict-cpu-reservation: 'true'\nfeatureGates: {CPUManagerPolicyBetaOptions: true}\n",
         "the shared pool would be empty"),
        ("cpuManagerPolicy: static\nkubeReserved: {cpu: '3'}\n", "reserve fewer"),
    ],
)
def test_config_errors_say_where_and_what(tmp_path, capsys, text, words):
    assert _run(tmp_path, text) == 2
    err = capsys.readouterr().err.strip()
    assert words in err, err
    assert len(err.splitlines()) == 1


def test_version(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["--version"])
    assert ei.value.code == 0
    import nri_cpumgr

    assert capsys.readouterr().out.strip() == f"nri-cpumgr {nri_cpumgr.__version__}"


def test_help_is_plain_text_and_every_option_has_help(capsys):
    from nri_cpumgr.cli import build_parser

    p = build_parser()
    text = p.format_help()
    assert "``" not in text and "nri-cpumgr" in text
    for name, sub in p._subparsers._group_actions[0].choices.items():
        for action in sub._actions:
            assert action.help, (name, action.option_strings)


@pytest.mark.parametrize(
    "text, words",
    [
        # the checks against the machine and the kubelet's policy builders name the file too
        ("cpuManagerPolicy: static\nreservedSystemCPUs: '0,7'\n", "not on this machine"),
        ("cpuManagerPolicy: static\n", "greater than zero"),
        ("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
         "cpuManagerPolicyOptions: {full-pcpu-only: 'true'}\n",
         "cpuManagerPolicyOptions.full-pcpu-only: unknown CPU Manager Policy option: "
         "'full-pcpu-only'; did you mean 'full-pcpus-only'?"),
        ("memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 5, limits: {memory: 1Gi}}]\n",
         "NUMA node 5"),
        # did you mean: keys (also in another case), values, nested keys, feature gates
        ("reservedSystemCpus: '0'\n", "reservedSystemCpus: unknown key; did you mean "
                                      "'reservedSystemCPUs'?"),
        ("cpuManagerPolicyOption: {}\n", "did you mean 'cpuManagerPolicyOptions'?"),
        ("topologyManagerPolicy: single-numa\n", "did you mean 'single-numa-node'?"),
        ("memoryManagerPolicy: static\n", "did you mean 'Static'?"),
        ("reservedMemory: [{numaNode: 0, limit: {memory: 1Gi}}]\n",
         "reservedMemory.0.limit: unknown key; did you mean 'limits'?"),
        ("featureGates: {CPUManagerPolicyAlphaOption: true}\n",
         "did you mean 'CPUManagerPolicyAlphaOptions'?"),
    ],
)
def test_config_errors_name_the_file_and_key(tmp_path, capsys, text, words):
    assert _run(tmp_path, text) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert words in err, err
    assert err.endswith(f"({tmp_path / 'c.yaml'})"), err


def test_nothing_close_no_suggestion(tmp_path, capsys):
    assert _run(tmp_path, "zzzzqqq: 1\n") == 2
    err = capsys.readouterr().err
    assert "zzzzqqq: unknown key" in err and "did you mean" not in err


def _launched(monkeypatch, tmp_path, text: str) -> None:
    """As the runtime starts the plugin (no arguments, NRI_PLUGIN_SOCKET set), with ``text``
    as the start-up config file."""
    from nri_cpumgr import locations

    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    monkeypatch.setattr(locations, "DEFAULT_CONFIG", str(cfg))
    monkeypatch.setenv("NRI_PLUGIN_SOCKET", "99")  # never reached: the start fails first
    monkeypatch.setenv("NRI_PLUGIN_NAME", "cpumgr")
    monkeypatch.setenv("NRI_PLUGIN_IDX", "90")


@pytest.mark.parametrize(
    "text, logname, words",
    [
        # refused while loading: the log file is found from the keys that are valid
        ("stateDirectory: {state}\ncpuManagerPolicy: statc\n", "state/nri-cpumgr.log",
         "cpuManagerPolicy: 'statc' is not one of"),
        ("logFile: {tmp}/own.log\nreservedSystemCpus: '0'\n", "own.log",
         "did you mean 'reservedSystemCPUs'?"),
        # refused after the logging started: the machine checks
        ("stateDirectory: {state}\ncpuManagerPolicy: static\nreservedSystemCPUs: '0-999'\n",
         "state/nri-cpumgr.log", "not on this machine"),
    ],
)
def test_launched_start_errors_reach_the_log_file(tmp_path, monkeypatch, capsys, text, logname,
                                                  words):
    _launched(monkeypatch, tmp_path,
              text.format(state=tmp_path / "state", tmp=tmp_path))
    assert main([]) == 2
    line = (tmp_path / logname).read_text().strip().splitlines()[-1]
    assert " ERROR nri_cpumgr: invalid config" in line and words in line, line
    assert line.endswith(f"({tmp_path / 'config.yaml'}); exiting"), line
    assert words in capsys.readouterr().err  # and stderr, for a run by hand


def test_launched_run_from_a_wrapper_logs_start_errors_too(tmp_path, monkeypatch):
    """A plugin_path script may exec ``nri-cpumgr run --state-dir DIR`` (or --config): still
    launched, and the log file follows those options."""
    _launched(monkeypatch, tmp_path, f"stateDirectory: {tmp_path / 'cfg-state'}\n"
                                     "cpuManagerPolicy: statc\n")
    assert main(["run", "--state-dir", str(tmp_path / "given")]) == 2
    assert "'statc' is not one of" in (tmp_path / "given/nri-cpumgr.log").read_text()
    other = tmp_path / "other.yaml"
    other.write_text(f"logFile: {tmp_path / 'other.log'}\nreservedSystemCPUs: 'x'\n")
    assert main(["run", "--config", str(other)]) == 2
    assert "invalid cpulist 'x'" in (tmp_path / "other.log").read_text()
    assert not (tmp_path / "cfg-state").exists()


def test_launched_crash_traceback_reaches_the_log_file(tmp_path, monkeypatch):
    import nri_cpumgr.cli as cli

    _launched(monkeypatch, tmp_path, f"stateDirectory: {tmp_path / 'state'}\n")

    def boom(_root):
        raise RuntimeError("sysfs exploded")

    monkeypatch.setattr(cli, "_discover", boom)
    with pytest.raises(RuntimeError):
        main([])
    text = (tmp_path / "state/nri-cpumgr.log").read_text()
    assert "ERROR nri_cpumgr: crashed:" in text and "RuntimeError: sysfs exploded" in text


def test_run_by_hand_writes_no_launched_log(tmp_path, monkeypatch):
    monkeypatch.delenv("NRI_PLUGIN_SOCKET", raising=False)
    assert _run(tmp_path, f"stateDirectory: {tmp_path / 'state'}\ncpuManagerPolicy: statc\n") == 2
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("env, says", [
    ({"NRI_PLUGIN_SOCKET": "7"}, "but NRI_PLUGIN_NAME and NRI_PLUGIN_IDX are not"),
    ({"NRI_PLUGIN_SOCKET": "abc", "NRI_PLUGIN_NAME": "x", "NRI_PLUGIN_IDX": "10"},
     "NRI_PLUGIN_SOCKET='abc' is not a file descriptor number"),
])
def test_malformed_launch_variables_are_one_line_exit_2(tmp_path, capsys, monkeypatch, env, says):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["run", "--sysfs-root", str(FIXTURES / "this-machine"),
                 "--state-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err
    assert says in (tmp_path / "s" / "nri-cpumgr.log").read_text()  # stderr is /dev/null there


def test_launched_plugin_whose_connection_fails_exits_1(tmp_path, monkeypatch):
    import os

    r, w = os.pipe()  # a descriptor that is not a socket
    monkeypatch.setenv("NRI_PLUGIN_SOCKET", str(r))
    monkeypatch.setenv("NRI_PLUGIN_NAME", "cpumgr")
    monkeypatch.setenv("NRI_PLUGIN_IDX", "90")
    try:
        assert main(["run", "--sysfs-root", str(FIXTURES / "this-machine"),
                     "--state-dir", str(tmp_path / "s")]) == 1
    finally:
        for fd in (r, w):
            try:
                os.close(fd)
            except OSError:
                pass
    assert "NRI connection failed" in (tmp_path / "s" / "nri-cpumgr.log").read_text()


def test_state_directory_that_is_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "state").write_text("not a directory")
    cfg = tmp_path / "c.yaml"
    cfg.write_text('cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n')
    assert main(["run", "--config", str(cfg), "--sysfs-root", str(FIXTURES / "this-machine"),
                 "--state-dir", str(tmp_path / "state"),
                 "--socket", str(tmp_path / "no.sock")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        f"nri-cpumgr: invalid config: stateDirectory {tmp_path}/state: it is not a directory "
        f"({cfg})"]


@pytest.mark.parametrize("argv", [["plan", "--bogus"], ["status", "--x"], ["run", "--bogus"]])
def test_an_unknown_option_is_said_by_the_sub_command(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"nri-cpumgr {argv[0]}: error: unrecognized arguments: {argv[1]}" in err
    assert f"usage: nri-cpumgr {argv[0]}" in err


def test_status_on_a_kubelet_checkpoint_says_what_it_is(tmp_path, capsys):
    (tmp_path / "cpu_manager_state").write_text(
        '{"policyName":"static","defaultCpuSet":"0-1","entries":{},"checksum":2447357720}')
    assert main(["status", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "the kubelet's own checkpoint (policyName 'static')" in err
    assert "adopts" in err


def test_status_on_a_kubelet_1_37_checkpoint_says_what_it_is(tmp_path, capsys):
    """The kubelet 1.37 (v4) file carries its data as a JSON string with a dataChecksum: it is
    the kubelet's too, not a plugin checkpoint of an unknown version (was: "unknown version
    None"). Written by kubelet-checkpoint v1.37.2 (docs/operations/adopting.md)."""
    data = ('{"policyName":"static","defaultCpuSet":"0","entries":{"uid-a":{"app":"1"}},'
            '"baselines":{"uid-a":{"app":{"baseline":"1"}}}}')
    (tmp_path / "cpu_manager_state").write_text(json.dumps({
        "policyName": "static", "defaultCpuSet": "0", "entries": {"uid-a": {"app": "1"}},
        "checksum": 927919868, "data": data, "dataChecksum": 1448966848},
        separators=(",", ":")))
    assert main(["status", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "the kubelet's own checkpoint (policyName 'static')" in err
    assert "unknown version" not in err


def test_static_memory_manager_without_reserved_memory_names_the_keys(tmp_path, capsys):
    assert _run(tmp_path, 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'
                "memoryManagerPolicy: Static\nevictionHard: {memory.available: 100Mi}\n") == 2
    err = capsys.readouterr().err
    assert 'determined by Node Allocatable feature; set reservedMemory' in err
    assert "104857600" in err


def _unsearchable(monkeypatch, top):
    """What the kernel answers a non-root user under a directory ``top`` it may not search
    (mode 0700 of another user): EACCES for every path below it, from stat, open and mkdir."""
    import builtins
    import os

    def guard(f):
        def call(path, *a, **kw):
            p = os.fspath(path)
            if isinstance(p, str) and p.startswith(str(top) + "/"):
                raise PermissionError(13, "Permission denied", p)
            return f(path, *a, **kw)
        return call

    for name in ("stat", "open", "mkdir", "makedirs"):
        monkeypatch.setattr(os, name, guard(getattr(os, name)))
    monkeypatch.setattr(builtins, "open", guard(builtins.open))


@pytest.mark.parametrize("check", [False, True], ids=["run", "check-config"])
def test_a_state_directory_under_one_it_may_not_search(tmp_path, capsys, monkeypatch, check):
    """stateDirectory (or logFile) below a directory the user may not search: the start's one
    line and status 2, from run and run --check-config (were PermissionError tracebacks from
    a stat: of reconfiguration_plan in run, of the path in --check-config)."""
    cfg = tmp_path / "c.yaml"
    state = tmp_path / "priv" / "sub" / "st"
    cfg.write_text(f"stateDirectory: {state}\n")
    argv = ["run", "--config", str(cfg), "--sysfs-root", str(FIXTURES / "this-machine"),
            "--socket", str(tmp_path / "none.sock"), *(["--check-config"] if check else [])]
    _unsearchable(monkeypatch, tmp_path / "priv")
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"invalid config: stateDirectory {state}: cannot write cpu_manager_state: Permission "
        f"denied ({cfg})")
    if check:
        cfg.write_text(f"logFile: {tmp_path / 'priv' / 'x.log'}\n")
        assert main([*argv, "--state-dir", str(tmp_path / "ok")]) == 2
        assert capsys.readouterr().err.strip() == (
            f"nri-cpumgr: logFile: cannot write the log file {tmp_path / 'priv' / 'x.log'}: "
            f"Permission denied ({cfg})")
