import json
from pathlib import Path

import pytest

from nri_cpumgr.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def test_bad_config_exits_2_with_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\ncpuManagerPolicyOptions: {full-pcpus-onyl: 'true'}\n"
                   "reservedSystemCPUs: '0'\n")
    assert main(["run", "--config", str(cfg), "--sysfs-root", str(FIXTURES / "this-machine"),
                 "--state-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "full-pcpus-onyl" in err


def test_static_without_reservation_is_refused(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\n")
    assert main(["run", "--config", str(cfg), "--sysfs-root", str(FIXTURES / "this-machine"),
                 "--state-dir", str(tmp_path / "s")]) == 2
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
    assert main(["topology", "--sysfs-root", str(tmp_path)]) == 1
    assert "cannot read the topology" in capsys.readouterr().err


def test_status_without_checkpoint(tmp_path, capsys):
    assert main(["status", "--state-dir", str(tmp_path)]) == 1
    assert "no checkpoint" in capsys.readouterr().err


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
    assert rows[1] == ["ns/g", "app", "Guaranteed", "1", "0", "0", "yes", "live"]
    assert rows[2] == ["ns/be", "app", "BestEffort", "0,2-3", "-", "0", "no", "live"]
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
