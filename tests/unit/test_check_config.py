"""``nri-cpumgr run --check-config``: the config checked as ``run``'s start checks it, with no
runtime and nothing written; the same error line and exit status as ``run`` for each kind of
bad config (the file, the key checks, the machine, the checkpoint, the state directory, the
log file, the pod spec source); ``config OK`` and the values that differ from the defaults
otherwise. ``run``'s plain command line keeps its argparse-free path."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from nri_cpumgr import boot
from nri_cpumgr.checkpoint import Checkpoint
from nri_cpumgr.cli import main, parse_args
from nri_cpumgr.config import parse_config
from nri_cpumgr.configcheck import differences, directory_error, file_error

DUAL = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "dual-socket-smt"


def _both(tmp_path: Path, capsys, text: str, *extra: str) -> tuple[int, str, int, str]:
    """(status, stderr) of `run` (dialing a socket that is not there: its start-up checks
    run after the first failed attempt) and of `run --check-config`, on the config ``text``."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    argv = ["run", "--config", str(cfg), "--sysfs-root", str(DUAL), *extra]
    run = main([*argv, "--socket", str(tmp_path / "no.sock")])
    run_err = capsys.readouterr().err
    checked = main([*argv, "--check-config"])
    got = capsys.readouterr()
    assert got.out == ""
    return run, run_err, checked, got.err


def _checkpoint_of_static(state: Path) -> None:
    Checkpoint(state / "cpu_manager_state").save(
        {"policyName": "static", "defaultCpuSet": "0-15", "entries": {}})


CASES = {
    "unknown key": ("cpuManagerPolcy: static\n", "unknown key; did you mean"),
    "bad quantity": ('kubeReserved: {cpu: " 2 "}\n', "blanks around it"),
    "relative socketPath": ("socketPath: nri.sock\n", "expected an absolute path"),
    "relative stateDirectory": ("stateDirectory: state\n",
                                "stateDirectory: 'state': expected an absolute path"),
    "relative logFile": ("logFile: nri.log\n", "logFile: 'nri.log': expected an absolute path"),
    # (root passes os.access there: only the filesystem's type tells)
    "stateDirectory under /proc": (
        "stateDirectory: /proc/nri-cpumgr\n",
        "stateDirectory: '/proc/nri-cpumgr': on the proc filesystem mounted on /proc: "),
    "stateDirectory under /sys": (
        "stateDirectory: /sys/nri-cpumgr/state\n",
        "stateDirectory: '/sys/nri-cpumgr/state': on the sysfs filesystem mounted on /sys: "),
    "logFile under /proc": ("logFile: /proc/nri-cpumgr.log\n",
                            "logFile: '/proc/nri-cpumgr.log': on the proc filesystem"),
    "not YAML": ("a: [\n", "not YAML"),
    "reserved CPUs off the machine": ("cpuManagerPolicy: static\nreservedSystemCPUs: '0,99'\n",
                                      "CPU(s) 99 not on this machine (CPUs 0-15)"),
    "no reservation": ("cpuManagerPolicy: static\n", "greater than zero"),
    "bad option": ("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
                   "cpuManagerPolicyOptions: {full-pcpus-onyl: 'true'}\n", "full-pcpus-only"),
    "reservedMemory off the machine": (
        "memoryManagerPolicy: Static\nkubeReserved: {memory: 100Mi}\nevictionHard: {}\n"
        "reservedMemory: [{numaNode: 5, limits: {memory: 100Mi}}]\n", "NUMA node 5"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_errors_of_run(tmp_path, capsys, case):
    text, words = CASES[case]
    run, run_err, checked, err = _both(tmp_path, capsys, text, "--state-dir",
                                       str(tmp_path / "state"))
    assert (run, checked) == (2, 2)
    assert err == run_err and words in err and err.count("\n") == 1, err
    assert err.rstrip().endswith(f"({tmp_path}/c.yaml)") or "not YAML" in err


def test_a_checkpoint_of_another_policy(tmp_path, capsys):
    _checkpoint_of_static(tmp_path / "state")
    run, run_err, checked, err = _both(tmp_path, capsys, "cpuManagerPolicy: none\n",
                                       "--state-dir", str(tmp_path / "state"))
    assert (run, checked) == (2, 2) and err == run_err
    assert "written by cpuManagerPolicy 'static' but the config says 'none'" in err


@pytest.mark.parametrize("where", ["file", "file/sub"])
def test_a_state_directory_that_cannot_be(tmp_path, capsys, where):
    (tmp_path / "file").write_text("")
    run, run_err, checked, err = _both(tmp_path, capsys,
                                       f"stateDirectory: {tmp_path / where}\n")
    assert (run, checked) == (2, 2) and err == run_err, (run_err, err)
    assert f"stateDirectory {tmp_path / where}: " in err


@pytest.mark.parametrize("where", ["file/x.log", "file/sub/x.log", "dir"])
def test_a_log_file_that_cannot_be_written(tmp_path, capsys, where):
    (tmp_path / "file").write_text("")
    (tmp_path / "dir").mkdir()
    run, run_err, checked, err = _both(tmp_path, capsys, f"logFile: {tmp_path / where}\n",
                                       "--state-dir", str(tmp_path / "state"))
    assert (run, checked) == (2, 2) and err == run_err, (run_err, err)
    assert f"logFile: cannot write the log file {tmp_path / where}: " in err


def test_a_pod_spec_source_that_cannot_be_set_up(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("NODE_NAME", raising=False)
    run, run_err, checked, err = _both(tmp_path, capsys, "podSpecSource: apiServer\n",
                                       "--state-dir", str(tmp_path / "state"))
    assert (run, checked) == (2, 2) and err == run_err
    assert "no apiServerURL and no KUBERNETES_SERVICE_HOST" in err


def test_config_ok_and_what_differs_from_the_defaults(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
                   "cpuManagerPolicyOptions: {full-pcpus-only: true}\n"
                   "reservedMemory: [{numaNode: 1, limits: {memory: 1Gi}}]\n")
    state = tmp_path / "state"
    assert main(["run", "--check-config", "--config", str(cfg), "--sysfs-root", str(DUAL),
                 "--state-dir", str(state), "--socket", str(tmp_path / "nri.sock")]) == 0
    got = capsys.readouterr()
    assert got.err == ""
    assert got.out.splitlines() == [
        f"config OK: {cfg} (checked against {DUAL}/sys: CPUs 0-15, NUMA nodes 0-1)",
        f"note: socketPath {tmp_path}/nri.sock: no socket there now (is NRI enabled in the "
        "runtime? `nri-cpumgr enable-nri`); `run` keeps trying to connect",
        "effective values that differ from the defaults:",
        f'  socketPath: "{tmp_path}/nri.sock" (--socket)',
        f'  stateDirectory: "{state}" (--state-dir)',
        '  cpuManagerPolicy: "static"',
        '  cpuManagerPolicyOptions: {"full-pcpus-only": "true"}',
        '  reservedSystemCPUs: "0"',
        '  reservedMemory: [{"numaNode": 1, "limits": {"memory": "1Gi"}}]',
    ]
    assert not state.exists()  # nothing written


def test_defaults_and_a_checkpoint_of_the_same_policy(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"stateDirectory: {tmp_path / 'state'}\ncpuManagerPolicy: static\n"
                   "reservedSystemCPUs: '0'\n")
    _checkpoint_of_static(tmp_path / "state")
    before = (tmp_path / "state" / "cpu_manager_state").read_bytes()
    assert main(["run", "--check-config", "--config", str(cfg), "--sysfs-root",
                 str(DUAL)]) == 0
    assert "config OK" in capsys.readouterr().out
    assert (tmp_path / "state" / "cpu_manager_state").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["cpu_manager_state"]
    assert differences(parse_config("")) == []
    assert differences(parse_config("pluginIndex: '90'\n")) == []  # the default, written


def test_a_corrupt_checkpoint_is_a_note(tmp_path, capsys):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "cpu_manager_state").write_text("{")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("")
    assert main(["run", "--check-config", "--config", str(cfg), "--sysfs-root", str(DUAL),
                 "--state-dir", str(tmp_path / "state")]) == 0
    out = capsys.readouterr().out
    assert "note: checkpoint " in out and "not JSON" in out and "rebuild its state" in out
    assert "every value is the default" in out.splitlines()[-1] or "stateDirectory" in out


def test_the_plain_run_line_keeps_its_fast_path():
    """`run --check-config` goes to argparse; a plain `run` line does not, and boot sends no
    early registration for a check."""
    plain = parse_args(["run", "--config", "c.yaml"])
    assert isinstance(plain, SimpleNamespace) and plain.check_config is False
    checked = parse_args(["run", "--check-config", "--config", "c.yaml"])
    assert not isinstance(checked, SimpleNamespace) and checked.check_config is True
    assert checked.config == "c.yaml" and checked.sysfs_root == "/"
    assert boot.run_options(["run", "--check-config"]) is None


def test_what_creating_a_path_would_fail_with(tmp_path):
    (tmp_path / "file").write_text("")
    assert directory_error(tmp_path / "new" / "deeper") is None
    assert directory_error(tmp_path) is None
    assert directory_error(tmp_path / "file") == "it is not a directory"
    assert directory_error(tmp_path / "file" / "sub") == "Not a directory"
    assert file_error(tmp_path / "new" / "x.log") is None
    assert file_error(tmp_path / "file") is None
    assert file_error(tmp_path) == "Is a directory"
    assert file_error(tmp_path / "file" / "x.log") == "File exists"
    assert file_error(tmp_path / "file" / "sub" / "x.log") == "Not a directory"


@pytest.mark.parametrize("write, want", [
    (lambda p: p.write_text("{"), "not JSON"),
    (lambda p: Checkpoint(p).save({"machine_state": 5, "assignments": {}}), "rejected ("),
])
def test_a_corrupt_memory_checkpoint_is_a_note(tmp_path, capsys, write, want):
    """The Memory Manager's checkpoint, corrupt or rejected, is a note as the CPU one is
    (the start goes on with a fresh memory state: managers.restore_memory_state)."""
    (tmp_path / "state").mkdir()
    write(tmp_path / "state" / "memory_manager_state")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("memoryManagerPolicy: Static\nkubeReserved: {memory: 100Mi}\n"
                   "evictionHard: {}\nreservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n")
    assert main(["run", "--check-config", "--config", str(cfg), "--sysfs-root", str(DUAL),
                 "--state-dir", str(tmp_path / "state")]) == 0
    out = capsys.readouterr().out
    note = [line for line in out.splitlines() if "memory_manager_state" in line]
    assert len(note) == 1 and note[0].startswith("note: checkpoint ") and want in note[0], out
    assert "memory state" in note[0]


def test_what_the_start_warns_of_is_a_note(tmp_path, capsys, monkeypatch):
    """The start's own warnings are notes, after ``config OK``, not unlabelled stderr lines
    before it: a checkpoint the policy rejects (CPU 1 reserved now, held by a container in it:
    the start rebuilds from the runtime), every CPU reserved."""
    import logging

    # as in a fresh `nri-cpumgr run --check-config` process: no handler of `run`'s (the
    # `run` of the tests above leaves its root handler, on a closed capture stream)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [h for h in root.handlers
                                           if type(h).__module__.startswith("_pytest")])
    state = tmp_path / "state"
    Checkpoint(state / "cpu_manager_state").save(
        {"policyName": "static", "defaultCpuSet": "0,2-15", "entries": {"u": {"c": "1"}}})
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0-1'\n")
    argv = ["run", "--check-config", "--config", str(cfg), "--sysfs-root", str(DUAL),
            "--state-dir", str(state)]
    assert main(argv) == 0
    got = capsys.readouterr()
    assert got.err == ""
    lines = got.out.splitlines()
    assert lines[0].startswith("config OK")
    assert lines[1] == (
        f"note: checkpoint {state}/cpu_manager_state: state rejected by the policy (not all "
        "reserved cpus: \"0-1\" are present in defaultCpuSet: \"0,2-15\"): rebuilding from "
        "the runtime")
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0-15'\n")
    assert main(argv) == 0
    got = capsys.readouterr()
    assert got.err == "" and got.out.splitlines()[1] == (
        "note: reservedSystemCPUs/kubeReserved/systemReserved reserve all 16 CPUs: every "
        "container runs on them and every container asking for exclusive CPUs is refused, as "
        "the kubelet's static policy does")



def _start_and_check(tmp_path: Path, capsys, text: str, state: Path) -> tuple[str, str]:
    """The error of the start (the plugin's set-up, as ``run`` builds it after registering)
    and the stderr of ``run --check-config`` (status 2), for the config ``text`` with
    ``stateDirectory`` ``state``; each must refuse (a start that does not would keep
    dialing: hence the set-up, not ``run``)."""
    from nri_cpumgr.config import ConfigError
    from nri_cpumgr.runtime.plugin import Plugin
    from nri_cpumgr.sysfs import discover

    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as e:
        Plugin(parse_config(text + f"stateDirectory: {state}\n"), discover(DUAL))
    assert main(["run", "--config", str(cfg), "--sysfs-root", str(DUAL), "--state-dir",
                 str(state), "--check-config"]) == 2
    got = capsys.readouterr()
    assert got.out == ""
    return str(e.value), got.err


def test_the_kubelets_state_directory_is_refused_as_the_state_directory(tmp_path, capsys):
    """stateDirectory = kubeletStateDirectory (here through a symbolic link): the plugin's
    cpu_manager_state would replace the kubelet's, which the kubelet refuses at its next
    start; the start and ``--check-config`` refuse it alike, and write nothing there."""
    kubelet = tmp_path / "kubelet"
    kubelet.mkdir()
    (tmp_path / "link").symlink_to(kubelet)
    text = f"cpuManagerPolicy: static\nreservedSystemCPUs: '0'\nkubeletStateDirectory: {kubelet}\n"
    start, checked = _start_and_check(tmp_path, capsys, text, tmp_path / "link")
    line = (f"invalid config: stateDirectory {tmp_path}/link: the kubelet's state directory "
            f"(kubeletStateDirectory {kubelet}): the plugin's cpu_manager_state and "
            "memory_manager_state would replace the kubelet's own")
    assert line in start and line in checked, (start, checked)
    assert list(kubelet.iterdir()) == []


def test_a_kubelet_checkpoint_in_the_state_directory_is_never_written_over(tmp_path, capsys):
    """A stateDirectory holding the kubelet's own cpu_manager_state (the kubelet's directory
    under another name, or a copy): refused by the start and ``--check-config`` alike (the
    start rebuilt its state over it before), the file left as it was."""
    state = tmp_path / "state"
    state.mkdir()
    kubelet_file = state / "cpu_manager_state"
    kubelet_file.write_text(
        '{"policyName":"static","defaultCpuSet":"0-15","entries":{},"checksum":2447357720}')
    before = kubelet_file.read_bytes()
    start, checked = _start_and_check(
        tmp_path, capsys, "cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n", state)
    for got in (start, checked):
        assert f"invalid config: stateDirectory {state}: checkpoint {kubelet_file}: the " \
               "kubelet's own checkpoint (policyName 'static')" in got, got
        assert "the plugin would write over it" in got
    assert kubelet_file.read_bytes() == before
    assert sorted(p.name for p in state.iterdir()) == ["cpu_manager_state"]
