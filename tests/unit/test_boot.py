"""The entry point's early registration (nri_cpumgr.boot, issue 34): what it reads from the
command line and the config, what is loaded when RegisterPlugin is on the wire, and the plugin
started through it against the in-process fake runtime (the registration it sent is the
session's; a config it misreads or an invalid one changes nothing of the outcome)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nri_cpumgr import boot
from nri_cpumgr.api import nri_pb2
from nri_cpumgr.config import ConfigError, parse_config
from nri_cpumgr.runline import run_arguments

from .nri_peer import FakeRuntime

TOP = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("argv", "want"), [
    (["run"], {}),
    (["run", "--config", "c.yaml", "--socket", "/s", "--state-dir", "/d", "-v"],
     {"config": "c.yaml", "socket": "/s", "state_dir": "/d"}),
    (["run", "--config=a", "--config", "b", "--sysfs-root=/x", "--verbose"], {"config": "b"}),
    (["run", "--conf", "c.yaml"], None),  # an abbreviation: argparse's business
    (["run", "--config"], None),
    (["run", "--config", "-v"], None),
    (["run", "extra"], None),
    (["run", "-h"], None),
    (["--version"], None),
    (["status", "--config", "c"], None),
    ([], None),
])
def test_run_options(argv: list[str], want: dict[str, str] | None) -> None:
    assert boot.run_options(argv) == want


FLAT_DOCS = [
    "",
    "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n",
    "# c\npluginName: cpumgr2   # a comment\npluginIndex: '07'\n\nsocketPath: /run/x.sock\n",
    'pluginName: "a.b_c-d"\npluginIndex: "12" # c\n',
    "pluginName: x\nmetricsAddress: :9109\n",
    # the chart's config with the cluster tests' feature gates (nested values of other keys)
    "pluginName: cpumgr\npluginIndex: \"90\"\ncpuManagerPolicy: static\n"
    "reservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions:\n  full-pcpus-only: \"true\"\n"
    "featureGates:\n  PodLevelResources: true\n  # a comment\n\nsocketPath: /run/n.sock\n",
]


@pytest.mark.parametrize("text", FLAT_DOCS)
def test_registration_keys_are_the_validated_configs(text: str) -> None:
    """Whatever boot reads from a document it accepts, the config model reads the same."""
    got = boot.registration_keys(text)
    assert got is not None
    cfg = parse_config(text)
    assert got == {"pluginName": cfg.pluginName, "pluginIndex": cfg.pluginIndex,
                   "socketPath": cfg.socketPath}


@pytest.mark.parametrize("text", [
    "pluginName: yes\n",  # a bool to YAML
    "pluginName: null\n",
    "pluginIndex: 90\n",  # an int to YAML
    "pluginName: 'it''s'\n",
    'pluginName: "a\\tb"\n',
    "pluginName: a\npluginName: b\n",
    "pluginName:\n  nested: 1\n",
    "  pluginName: x\n",  # indented before any key
    "{pluginName: x}\n",
    "---\npluginName: x\n",
    "pluginName: x\tb\n",
    "pluginName: \"x\"y\n",
    "pluginName: x # ok\n\tother: 1\n",
    "socketPath: /a b\n",
    "socketPath: run/nri.sock\n",  # relative: the config model refuses it
    "pluginName: caf\u00e9\n",
])
def test_registration_keys_give_up_on_anything_else(text: str) -> None:
    assert boot.registration_keys(text) is None


def test_take_closes_a_connection_for_other_values(tmp_path: Path) -> None:
    a, b = socket.socketpair()
    try:
        boot._early = (os.dup(a.fileno()), 1, "cpumgr", "90", "/s")
        assert boot.take("cpumgr", "91", "/s") is None
        assert boot.skipped is not None and "another plugin" in boot.skipped
        assert boot.take("cpumgr", "90", "/s") is None  # once
        boot._early = (os.dup(a.fileno()), 1, "cpumgr", "90", "/s")
        fd, sid = boot.take("cpumgr", "90", "/s")  # type: ignore[misc]
        assert sid == 1
        os.close(fd)
    finally:
        boot._early = None
        a.close()
        b.close()


def test_registration_is_sent_before_the_plugin_is_imported(sock_path: Path,
                                                            tmp_path: Path) -> None:
    """When RegisterPlugin is on the wire, neither the command line's parser, logging, ``re``,
    the config model nor the ``socket`` module is loaded (a subprocess: this one has them)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\npluginIndex: '07'\n")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock_path))
    listener.listen()
    probe = ("import sys, nri_cpumgr.boot as b\n"
             "b._register(sys.argv[1:])\n"
             "print(b._early is not None, b.skipped)\n"
             "print(' '.join(sorted(sys.modules)))\n")
    try:
        out = subprocess.run(
            [sys.executable, "-c", probe, "run", "--config", str(cfg), "--socket",
             str(sock_path)], capture_output=True, text=True, timeout=60, check=True,
            cwd=TOP).stdout.splitlines()
        conn, _ = listener.accept()
        conn.settimeout(10)
        data = conn.recv(4096)
        conn.close()
    finally:
        listener.close()
    assert out[0] == "True None"
    from nri_cpumgr.transport.early import registration_bytes

    assert data == registration_bytes("cpumgr", "07", boot.REGISTER_TIMEOUT, 1)
    mods = set(out[1].split())
    for heavy in ("re", "argparse", "logging", "dataclasses", "socket", "struct",
                  "nri_cpumgr.cli", "nri_cpumgr.config", "nri_cpumgr.transport.wire",
                  "asyncio", "google.protobuf", "yaml"):
        assert heavy not in mods, heavy


def _run_plugin(sock_path: Path, tmp_path: Path, config: str,
                serve: bool = True) -> tuple[int, str, list]:
    """``python -m nri_cpumgr run`` against a fake runtime with ``config``: (exit status,
    stderr, the RegisterPlugin requests the runtime got); a plugin that registered is
    configured, synchronized and stopped (``serve``), else left to exit."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config)
    regs: list = []

    async def main() -> tuple[int, str]:
        async with FakeRuntime(sock_path) as rt:
            env = {k: v for k, v in os.environ.items() if k != "NRI_PLUGIN_SOCKET"}
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "nri_cpumgr", "run", "--config", str(cfg),
                "--socket", str(sock_path), "--state-dir", str(tmp_path / "state"),
                "-v", stderr=asyncio.subprocess.PIPE, cwd=TOP, env=env)
            wait = asyncio.ensure_future(proc.wait())
            conn_task = asyncio.ensure_future(rt.next_conn(timeout=60))
            done, _ = await asyncio.wait({wait, conn_task}, timeout=60,
                                         return_when=asyncio.FIRST_COMPLETED)
            if conn_task in done:
                conn = conn_task.result()
                try:
                    regs.append(await asyncio.wait_for(asyncio.shield(conn.registered), 30))
                except Exception:  # noqa: BLE001 - closed before registering
                    pass
                if serve:
                    await conn.call("Configure", nri_pb2.ConfigureRequest(
                        runtime_name="containerd", runtime_version="v2.4.2"),
                        nri_pb2.ConfigureResponse, timeout=60)
                    await conn.call("Synchronize", nri_pb2.SynchronizeRequest(),
                                    nri_pb2.SynchronizeResponse, timeout=60)
                    proc.terminate()
            else:
                conn_task.cancel()
            await asyncio.wait_for(wait, 60)
            err = (await proc.stderr.read()).decode()  # type: ignore[union-attr]
            return proc.returncode, err  # type: ignore[return-value]

    status, err = asyncio.run(main())
    return status, err, regs


def test_the_plugin_started_through_boot_serves_on_its_early_connection(
        sock_path: Path, tmp_path: Path) -> None:
    status, err, regs = _run_plugin(sock_path, tmp_path,
                                    "cpuManagerPolicy: none\npluginName: early\n"
                                    "featureGates:\n  PodLevelResources: true\n"
                                    "pluginIndex: '07'\n")
    assert status == 0, err
    assert [(r.plugin_name, r.plugin_idx) for r in regs] == [("early", "07")]
    assert "registration not sent at launch" not in err  # (logged at debug level)
    assert "early registration not sent" not in err


def test_an_invalid_config_fails_as_before(sock_path: Path, tmp_path: Path) -> None:
    """The early registration goes out, then the validation fails with the config model's
    error and exit status 2, as without it."""
    text = "cpuManagerPolicy: bogus\npluginName: early\n"
    with pytest.raises(ConfigError) as want:
        parse_config(text, str(tmp_path / "c.yaml"))
    status, err, regs = _run_plugin(sock_path, tmp_path, text, serve=False)
    assert status == 2
    assert err.strip() == f"nri-cpumgr: {want.value}"
    assert [(r.plugin_name, r.plugin_idx) for r in regs] in ([], [("early", "90")])


RUN_LINES = [
    ["run"],
    ["run", "--config", "c.yaml", "--socket", "/s", "--state-dir", "/d", "-v"],
    ["run", "--config=a", "--config", "b", "--sysfs-root=/x", "--verbose"],
    ["run", "--config=", "--state-dir", "", "--socket=/a=b", "-v", "--verbose"],
    ["run", "--sysfs-root", "/fixture", "--state-dir=/var/lib/x"],
]


@pytest.mark.parametrize("argv", RUN_LINES)
def test_run_arguments_are_the_run_parsers(argv: list[str]) -> None:
    """What the plugin's start reads without argparse is what the ``run`` parser reads."""
    from nri_cpumgr import cli

    want = vars(cli.build_parser(only_run=True).parse_args(argv))
    got = run_arguments(argv)
    assert got is not None
    assert {**got, "cmd": "run", "func": cli.cmd_run} == want
    assert vars(cli.parse_args(argv)) == want


@pytest.mark.parametrize("argv", [
    ["run", "--conf", "c"], ["run", "--config"], ["run", "-vv"], ["run", "-h"], ["run", "x"],
    ["run", "--verbose=1"], ["run", "--config", "-x"], ["status"], [],
    ["run", "--socket", "rel.sock"], ["run", "--socket="],
])
def test_run_arguments_leave_the_rest_to_argparse(argv: list[str]) -> None:
    assert run_arguments(argv) is None


@pytest.mark.parametrize("socket", ["rel.sock", "run/nri.sock", ""])
def test_a_relative_socket_on_the_command_line_is_refused(
        socket: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--socket`` must be absolute, as ``socketPath`` must: a usage error (status 2) that
    names the option, before anything starts."""
    from nri_cpumgr import boot

    with pytest.raises(SystemExit) as ei:
        boot.main(["run", "--socket", socket])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --socket: {socket!r}: expected an absolute path" in err


def test_a_plain_run_line_does_not_import_argparse() -> None:
    code = ("import sys; from nri_cpumgr import cli; "
            "a = cli.parse_args(['run', '--config', 'c', '-v']); "
            "print('argparse' in sys.modules, a.config, a.verbose, a.sysfs_root); "
            "cli.parse_args(['run', '--conf', 'c']); print('argparse' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=TOP, check=True).stdout.split()
    assert out == ["False", "c", "True", "/", "True"]
