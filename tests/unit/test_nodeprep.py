"""``nri-cpumgr enable-nri`` (nri_cpumgr/nodeprep, the chart's opt-in node preparation): NRI
turned on in containerd 1.7 / 2.x configs and a CRI-O drop-in, every other line kept; a second
run changes nothing (idempotent); ``--dry-run`` prints the diff and writes nothing; the restart
runs only after a change; a config that is not TOML is refused with status 2 and untouched.
NRI that runs but refuses external plugins (containerd ``disable_connections = true``, CRI-O
``nri_disable_connections = true``) counts as off and is opened; a runtime socket other than
the plugin's ``--socket-path`` gets a warning naming both.
A version-1 containerd config is edited in ``[plugins.nri]`` (what 1.7 reads there); no
config.toml follows containerd's defaults by its version; a non-UTF-8 or non-regular file, a
missing --host-root, valid TOML the edit cannot change, a later CRI-O drop-in turning NRI off
and a malformed own drop-in, a restart or version command with an unclosed quote and a
directory the file cannot be written in are refused in one line, status 2, nothing written or
restarted; a restart command that cannot run is status 3 with the file written.
The edits are checked against the repository's own drop-ins (deploy/containerd-*.toml,
deploy/crio-nri.conf), which turn NRI on."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from nri_cpumgr.cli import main
from nri_cpumgr.config.model import Config
from nri_cpumgr.nodeprep import (
    DEFAULT_SOCKET,
    NodePrepError,
    containerd_config,
    containerd_socket,
    crio_dropin,
    crio_socket,
    nri_enabled,
    same_socket,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

V2_OFF = '''version = 2
root = "/var/lib/containerd"

[plugins."io.containerd.nri.v1.nri"]
  disable = true  # 1.7's default
  socket_path = "/var/run/nri/nri.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
'''


@pytest.mark.parametrize("text", [
    V2_OFF,
    'version = 2\nroot = "/var/lib/containerd"\n',  # 1.7 without an NRI table: off
    'version = 2\n[plugins."io.containerd.nri.v1.nri"]\n  socket_path = "/x"\n',  # no disable
    'version = 3\n[plugins."io.containerd.nri.v1.nri"]\n    disable=true\n',
    "",  # no config at all: 1.7's defaults
])
def test_containerd_config_turns_nri_on_and_keeps_the_rest(text: str) -> None:
    assert not nri_enabled(text)
    new = containerd_config(text)
    assert nri_enabled(new) and containerd_config(new) == new  # idempotent
    old_doc, new_doc = tomllib.loads(text), tomllib.loads(new)
    new_doc["plugins"]["io.containerd.nri.v1.nri"].pop("disable")
    old_nri = old_doc.get("plugins", {}).get("io.containerd.nri.v1.nri", {})
    old_nri.pop("disable", None)
    if "io.containerd.nri.v1.nri" not in old_doc.get("plugins", {}):
        old_doc.setdefault("plugins", {})["io.containerd.nri.v1.nri"] = {}
    if not text:
        old_doc["version"] = 2  # a config written from nothing says its version
    assert new_doc == old_doc  # nothing else changed
    if text == V2_OFF:
        assert "  disable = false  # 1.7's default\n" in new  # comment and indent kept


@pytest.mark.parametrize("text", [
    "version = 3\n",  # 2.x default: on
    (DEPLOY / "containerd-1.7-nri.toml").read_text(),
    (DEPLOY / "containerd-2.x-nri.toml").read_text(),
])
def test_containerd_config_with_nri_on_is_left_alone(text: str) -> None:
    assert nri_enabled(text) and containerd_config(text) == text


def test_not_toml_is_refused() -> None:
    with pytest.raises(NodePrepError, match="not a TOML file"):
        containerd_config("version = 2\n[plugins\n")


def test_crio_dropin() -> None:
    ours = crio_dropin(None)
    assert tomllib.loads(ours)["crio"]["nri"]["enable_nri"] is True
    shipped = (DEPLOY / "crio-nri.conf").read_text()
    assert crio_dropin(shipped) == shipped
    assert crio_dropin("[crio.nri]\nenable_nri = false\n") == ours


def test_cli_dry_run_then_apply_then_again(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "etc/containerd/config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(V2_OFF)
    marker = tmp_path / "restarted"
    base = ["enable-nri", "--runtime", "containerd", "--host-root", str(tmp_path),
            "--restart-command", f"touch {marker}"]
    assert main([*base, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "-  disable = true  # 1.7's default" in out and "+  disable = false" in out
    assert "dry run" in out and cfg.read_text() == V2_OFF and not marker.exists()
    assert main(base) == 0
    assert nri_enabled(cfg.read_text()) and marker.exists()
    marker.unlink()
    assert main(base) == 0  # again: nothing to do, no restart
    assert "nothing to do" in capsys.readouterr().out and not marker.exists()


def test_cli_refuses_a_broken_config_and_a_failed_restart(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "etc/containerd/config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("version = 2\n[plugins\n")
    base = ["enable-nri", "--runtime", "containerd", "--host-root", str(tmp_path)]
    assert main([*base, "--restart-command", "true"]) == 2
    assert "not a TOML file" in capsys.readouterr().err
    assert cfg.read_text() == "version = 2\n[plugins\n"
    cfg.write_text(V2_OFF)
    assert main([*base, "--restart-command", "false"]) == 3
    assert "failed" in capsys.readouterr().err


def test_cli_crio_writes_the_dropin(tmp_path: Path) -> None:
    args = ["enable-nri", "--runtime", "crio", "--host-root", str(tmp_path),
            "--restart-command", ""]
    assert main(args) == 0
    dropin = tmp_path / "etc/crio/crio.conf.d/90-nri.conf"
    assert tomllib.loads(dropin.read_text())["crio"]["nri"]["enable_nri"] is True
    assert main(args) == 0 and dropin.read_text() == crio_dropin(None)


# the fresh-user repro: NRI running but closed to external plugins (the DaemonSet's plugin)
CLOSED = """version = 2

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = true  # no external plugins
  socket_path = "/var/run/nri/nri.sock"
"""


@pytest.mark.parametrize(("text", "changed"), [
    (CLOSED, {"disable_connections"}),
    (CLOSED.replace("version = 2", "version = 3"), {"disable_connections"}),
    # version 3, no disable key (on by default): only the connections are opened
    ('version = 3\n[plugins."io.containerd.nri.v1.nri"]\n    disable_connections=true\n',
     {"disable_connections"}),
    # both off: both turned
    ('version = 2\n[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n'
     '  disable_connections = true\n', {"disable", "disable_connections"}),
    # version 2 without disable (off) and closed: disable added, connections opened
    ('version = 2\n[plugins."io.containerd.nri.v1.nri"]\n  disable_connections = true\n'
     '[plugins."io.containerd.grpc.v1.cri"]\n  x = 1\n', {"disable", "disable_connections"}),
])
def test_disable_connections_true_is_not_on_and_is_opened(text: str, changed: set[str]) -> None:
    assert not nri_enabled(text)
    new = containerd_config(text)
    assert nri_enabled(new) and containerd_config(new) == new
    old_doc, new_doc = tomllib.loads(text), tomllib.loads(new)
    old_nri = old_doc["plugins"]["io.containerd.nri.v1.nri"]
    new_nri = new_doc["plugins"]["io.containerd.nri.v1.nri"]
    assert new_nri["disable_connections"] is False
    assert new_nri.get("disable", int(new_doc["version"]) < 3) is False
    assert {k for k in new_nri if new_nri[k] != old_nri.get(k)} == changed
    for k in changed:
        old_nri.pop(k, None)
        new_nri.pop(k)
    assert new_doc == old_doc  # nothing else changed
    if text == CLOSED:
        assert "  disable_connections = false  # no external plugins\n" in new
        assert new.replace("= false  # no", "= true  # no") == text  # that one line only


def test_disable_connections_false_is_on() -> None:
    text = CLOSED.replace("disable_connections = true", "disable_connections = false")
    assert nri_enabled(text) and containerd_config(text) == text


def test_repro_dry_run_shows_the_connections_diff(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The try-out's command line: it printed "NRI is on ...: nothing to do"."""
    cfg = tmp_path / "host/dc.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(CLOSED)
    assert main(["enable-nri", "--runtime", "containerd", "--config", str(cfg), "--dry-run",
                 "--restart-command", ""]) == 0
    out, err = capsys.readouterr()
    assert "nothing to do" not in out
    assert "-  disable_connections = true  # no external plugins" in out
    assert "+  disable_connections = false  # no external plugins" in out
    assert f"dry run: {cfg} not changed" in out and cfg.read_text() == CLOSED
    assert "warning" not in err  # the default socket on both sides
    assert main(["enable-nri", "--runtime", "containerd", "--config", str(cfg),
                 "--restart-command", ""]) == 0
    assert nri_enabled(cfg.read_text())
    capsys.readouterr()
    assert main(["enable-nri", "--runtime", "containerd", "--config", str(cfg),
                 "--restart-command", ""]) == 0
    assert f"NRI is on in {cfg}: nothing to do" in capsys.readouterr().out


def test_default_socket_is_the_plugins() -> None:
    assert DEFAULT_SOCKET == Config().socketPath


def test_socket_paths() -> None:
    assert containerd_socket(CLOSED) == DEFAULT_SOCKET
    assert containerd_socket("version = 3\n") == DEFAULT_SOCKET
    assert containerd_socket(V2_OFF.replace("/var/run/nri/nri.sock", "/x/nri.sock")) \
        == "/x/nri.sock"
    assert same_socket("/var/run/nri/nri.sock", "/run/nri/nri.sock")
    assert same_socket("unix:///run/nri/nri.sock", "/var/run/nri/nri.sock")
    assert not same_socket("/var/run/nri/nri.sock", "/var/run/nri/other.sock")
    assert crio_socket(['[crio.nri]\nnri_listen = "/a"\n', "[crio]\n",
                        '[crio.nri]\nnri_listen = "/b"\n']) == "/b"
    assert crio_socket(["[crio.nri]\nenable_nri = true\n", "not toml ["]) is None


@pytest.mark.parametrize("runtime_socket", ["/run/containerd/nri.sock", None])
def test_cli_warns_when_the_sockets_differ(tmp_path: Path, runtime_socket: str | None,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "etc/containerd/config.toml"
    cfg.parent.mkdir(parents=True)
    text = V2_OFF if runtime_socket is None else V2_OFF.replace(
        "/var/run/nri/nri.sock", runtime_socket)
    cfg.write_text(text)
    base = ["enable-nri", "--runtime", "containerd", "--host-root", str(tmp_path),
            "--restart-command", "", "--dry-run"]
    assert main([*base, "--socket-path", "/var/run/nri/custom.sock"]) == 0
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if "warning" in ln]
    assert f"NRI socket is {runtime_socket or DEFAULT_SOCKET}" in line
    assert "socketPath is /var/run/nri/custom.sock" in line and str(cfg) in line
    same = runtime_socket or "/run/nri/nri.sock"  # /var/run is /run
    assert main([*base, "--socket-path", same]) == 0
    assert "warning" not in capsys.readouterr().err
    if runtime_socket:  # the plugin's default socket vs the config's
        assert main(base) == 0
        assert f"socketPath is {DEFAULT_SOCKET}" in capsys.readouterr().err


def test_crio_disable_connections() -> None:
    ours = crio_dropin(None)
    assert tomllib.loads(ours)["crio"]["nri"]["nri_disable_connections"] is False
    closed = "[crio.nri]\nenable_nri = true\nnri_disable_connections = true\n"
    assert crio_dropin(closed) == ours
    old_ours = "[crio.nri]\nenable_nri = true\n"  # what earlier releases wrote: still on
    assert crio_dropin(old_ours) == old_ours
    # ... unless another drop-in closes NRI: ours must then say false itself
    assert crio_dropin(old_ours, ["[crio.nri]\nnri_disable_connections = true\n"]) == ours
    assert crio_dropin(ours, ["[crio.nri]\nnri_disable_connections = true\n"]) == ours


def test_cli_crio_opens_connections_and_warns(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "etc/crio/crio.conf.d"
    d.mkdir(parents=True)
    (d / "10-site.conf").write_text('[crio.nri]\nnri_disable_connections = true\n'
                                    'nri_listen = "/run/crio/nri.sock"\n')
    (d / "90-nri.conf").write_text("[crio.nri]\nenable_nri = true\n")
    args = ["enable-nri", "--runtime", "crio", "--host-root", str(tmp_path),
            "--restart-command", ""]
    assert main([*args, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "+nri_disable_connections = false" in out and "nothing to do" not in out
    (line,) = [ln for ln in err.splitlines() if "warning" in ln]
    assert "NRI socket is /run/crio/nri.sock" in line and f"socketPath is {DEFAULT_SOCKET}" in line
    assert main(args) == 0
    assert (d / "90-nri.conf").read_text() == crio_dropin(None)
    capsys.readouterr()
    (d / "99-late.conf").write_text("[crio.nri]\nenable_nri = false\n")
    # a later drop-in turning NRI off wins: refused (status 2), nothing restarted
    assert main([*args, "--socket-path", "/run/crio/nri.sock"]) == 2
    out, err = capsys.readouterr()
    assert "99-late.conf comes after 90-nri.conf" in err and len(err.splitlines()) == 1


def test_a_relative_config_is_the_working_directorys(tmp_path: Path, monkeypatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``--config config.toml`` is the file where the user stands, as every ``--config`` of
    nri-cpumgr (it was looked up under ``--host-root``: /config.toml on a node); an absolute
    one stays the host's, under ``--host-root``."""
    work, host = tmp_path / "work", tmp_path / "host"
    (host / "etc/containerd").mkdir(parents=True)
    work.mkdir()
    (work / "config.toml").write_text(V2_OFF)
    (host / "etc/containerd/config.toml").write_text(V2_OFF)
    (host / "config.toml").write_text(V2_OFF)
    monkeypatch.chdir(work)
    assert main(["enable-nri", "--runtime", "containerd", "--config", "config.toml",
                 "--host-root", str(host), "--restart-command", ""]) == 0
    assert f"wrote {work}/config.toml;" in capsys.readouterr().out
    assert nri_enabled((work / "config.toml").read_text())
    assert (host / "config.toml").read_text() == V2_OFF  # not under --host-root
    assert main(["enable-nri", "--runtime", "containerd", "--config", "./config.toml",
                 "--dry-run"]) == 0  # the default --host-root: the same file
    assert f"NRI is on in {work}/config.toml: nothing to do" in capsys.readouterr().out
    assert main(["enable-nri", "--runtime", "containerd", "--config",
                 "/etc/containerd/config.toml", "--host-root", str(host), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"dry run: {host}/etc/containerd/config.toml not changed" in out


def test_the_help_says_where_config_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["enable-nri", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "An absolute path is the host's, looked up under --host-root" in text
    assert "a relative one is taken from the working directory" in text


# --- a new user's try-out (enable-nri findings) ---

V1_FILE = 'root = "/var/lib/containerd"\n[plugins.cri]\n  sandbox_image = "x"\n'


@pytest.mark.parametrize("text", [
    V1_FILE,
    "version = 1\n" + V1_FILE,
    # the v2 table in a v1 file: containerd 1.7 ignores it (config dump: disable = true)
    V1_FILE + '[plugins."io.containerd.nri.v1.nri"]\n  disable = false\n',
    V1_FILE + "[plugins.nri]\n  disable = false\n  disable_connections = true\n",
])
def test_a_version_1_config_is_edited_in_plugins_nri(text: str) -> None:
    """containerd 1.7 reads a version-1 file's NRI settings from [plugins.nri] only
    (checked with 1.7.24's `containerd --config FILE config dump`)."""
    assert not nri_enabled(text)
    new = containerd_config(text)
    nri = tomllib.loads(new)["plugins"]["nri"]
    assert nri["disable"] is False and nri.get("disable_connections", False) is False
    assert nri_enabled(new) and containerd_config(new) == new
    assert new.startswith(text.split("[plugins.nri]")[0])  # the rest kept


def test_a_version_1_socket_path_is_read_from_plugins_nri() -> None:
    assert containerd_socket(V1_FILE + '[plugins.nri]\n  socket_path = "/x/nri.sock"\n') \
        == "/x/nri.sock"


@pytest.mark.parametrize("text, key", [
    ('version = 2\nplugins."io.containerd.nri.v1.nri".disable = true\n', "dotted"),
    ('version = 2\n[plugins]\n"io.containerd.nri.v1.nri" = { disable = true }\n', "inline"),
    ('version = 2\n[plugins."io.containerd.nri.v1.nri"]\n  disable = "true"\n',
     "disable = 'true'"),
    ('version = 2\nplugins = { x = 1 }\n', "dotted"),
])
def test_valid_toml_the_editor_cannot_change_names_what_to_set(text: str, key: str) -> None:
    tomllib.loads(text)  # valid
    with pytest.raises(NodePrepError) as e:
        containerd_config(text)
    msg = str(e.value)
    assert "not a TOML file" not in msg and "valid TOML" in msg and key in msg
    assert 'disable = false' in msg and '[plugins."io.containerd.nri.v1.nri"]' in msg


def _containerd_cfg(tmp_path: Path) -> Path:
    cfg = tmp_path / "etc/containerd/config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    return cfg


@pytest.mark.parametrize("runtime, rel", [
    ("containerd", "etc/containerd/config.toml"),
    ("crio", "etc/crio/crio.conf.d/90-nri.conf"),
    ("crio", "etc/crio/crio.conf.d/10-site.conf"),  # a sibling drop-in
])
def test_a_non_utf8_config_is_refused_in_one_line(tmp_path: Path, runtime: str, rel: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / rel
    f.parent.mkdir(parents=True)
    f.write_bytes(b"# caf\xe9\n")
    marker = tmp_path / "restarted"
    assert main(["enable-nri", "--runtime", runtime, "--host-root", str(tmp_path),
                 "--restart-command", f"touch {marker}"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "UTF-8" in err and "Traceback" not in err
    assert f.read_bytes() == b"# caf\xe9\n" and not marker.exists()
    assert sorted(p.name for p in f.parent.iterdir()) == [f.name]


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_config_that_is_a_directory_is_refused(tmp_path: Path, dry: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _containerd_cfg(tmp_path)
    cfg.mkdir()
    marker = tmp_path / "restarted"
    assert main(["enable-nri", "--runtime", "containerd", "--host-root", str(tmp_path),
                 "--restart-command", f"touch {marker}", *dry]) == 2
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and "not a regular file" in err
    assert "runs its defaults" not in out + err and not marker.exists()
    assert cfg.is_dir() and list(cfg.iterdir()) == []
    assert sorted(p.name for p in cfg.parent.iterdir()) == ["config.toml"]


def test_a_missing_host_root_is_refused(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "nohost"
    marker = tmp_path / "restarted"
    for runtime in ("containerd", "crio"):
        assert main(["enable-nri", "--runtime", runtime, "--host-root", str(root),
                     "--restart-command", f"touch {marker}"]) == 2
        assert f"no host root {root}" in capsys.readouterr().err
    assert not root.exists() and not marker.exists()


def test_crio_refuses_a_malformed_dropin_of_its_own(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "etc/crio/crio.conf.d/90-nri.conf"
    f.parent.mkdir(parents=True)
    f.write_text("[crio.nri\nenable_nri = true\n")
    assert main(["enable-nri", "--runtime", "crio", "--host-root", str(tmp_path),
                 "--restart-command", "false"]) == 2
    assert "not a TOML file" in capsys.readouterr().err
    assert f.read_text() == "[crio.nri\nenable_nri = true\n"


def test_cli_version_1_config_and_by_hand_forms(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _containerd_cfg(tmp_path)
    v1_v2table = V1_FILE + '[plugins."io.containerd.nri.v1.nri"]\n  disable = false\n'
    cfg.write_text(v1_v2table)
    base = ["enable-nri", "--runtime", "containerd", "--host-root", str(tmp_path),
            "--restart-command", ""]
    assert main([*base, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "nothing to do" not in out and "+[plugins.nri]" in out
    assert 'ignores [plugins."io.containerd.nri.v1.nri"]' in err
    dotted = 'version = 2\nplugins."io.containerd.nri.v1.nri".disable = true\n'
    cfg.write_text(dotted)
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "not a TOML file" not in err and "by hand" in err and cfg.read_text() == dotted


@pytest.mark.parametrize("printed, written", [
    ("containerd github.com/containerd/containerd/v2 2.1.9+unknown", False),
    ("containerd containerd.io v2.0.0 207ad71", False),
    ("containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1", True),
    (None, False),  # the version command failed: unknown, nothing written
])
def test_no_config_follows_the_runtimes_defaults(tmp_path: Path, printed: str | None,
                                                 written: bool,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """No config.toml: containerd's defaults. 2.x has NRI on: nothing to do, nothing
    restarted; 1.7 has it off: a config.toml with NRI on is written; unknown: status 2."""
    cfg = _containerd_cfg(tmp_path)
    marker = tmp_path / "restarted"
    version = "false" if printed is None else f"echo {printed}"
    code = main(["enable-nri", "--runtime", "containerd", "--host-root", str(tmp_path),
                 "--restart-command", f"touch {marker}", "--version-command", version])
    out, err = capsys.readouterr()
    assert cfg.exists() == written and marker.exists() == written
    if written:
        assert code == 0 and nri_enabled(cfg.read_text()) and "NRI off" in err
    elif printed is None:
        assert code == 2 and "version is unknown" in err and "nothing written" in err
    else:
        assert code == 0 and "NRI on: nothing to do" in out


@pytest.mark.parametrize("option", ["--restart-command", "--version-command"])
def test_cli_refuses_a_command_that_is_no_command_line(
        tmp_path: Path, option: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An unclosed quote in --restart-command or --version-command: one line naming the
    option, status 2, nothing written (was a ValueError traceback from shlex, after the
    file was written for --restart-command)."""
    cfg = tmp_path / "etc/containerd/config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(V2_OFF)
    args = ["enable-nri", "--runtime", "containerd", "--host-root", str(tmp_path),
            "--restart-command", "", option, "systemctl 'restart containerd"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{option} \"systemctl 'restart containerd\" is not a command line" in err
    assert "No closing quotation" in err and "nothing written, nothing restarted" in err
    assert cfg.read_text() == V2_OFF


def test_cli_a_restart_command_that_cannot_run_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The file is written, the restart command does not exist (an image without nsenter or
    systemctl): status 3 and a line saying the file was written and to restart by hand."""
    cfg = tmp_path / "etc/containerd/config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(V2_OFF)
    missing = tmp_path / "no-such-command"
    assert main(["enable-nri", "--runtime", "containerd", "--host-root", str(tmp_path),
                 "--restart-command", f"{missing} restart containerd"]) == 3
    err = capsys.readouterr().err
    assert f"wrote {cfg}, but '{missing} restart containerd' could not run" in err
    assert "No such file or directory; restart containerd by hand" in err
    assert nri_enabled(cfg.read_text())


def test_cli_a_directory_it_cannot_write_in_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The config's directory refuses the temporary file (read-only /host, no permission):
    one line naming the file, status 2, the file untouched and no restart."""
    import tempfile

    cfg = tmp_path / "etc/containerd/config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(V2_OFF)
    marker = tmp_path / "restarted"

    def refuse(*a: object, **kw: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    assert main(["enable-nri", "--runtime", "containerd", "--host-root", str(tmp_path),
                 "--restart-command", f"touch {marker}"]) == 2
    err = capsys.readouterr().err
    assert f"{cfg}: cannot write it: Permission denied: nothing written" in err
    assert cfg.read_text() == V2_OFF and not marker.exists()


def test_a_config_that_is_a_symbolic_link_is_edited_where_it_points(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """/etc/containerd/config.toml as a link (config management): the file it names is
    edited and the link kept (the link was replaced by a file, the file it names left as it
    was); an absolute target is the host's, under --host-root (read in the container it
    named the container's file); a link to a file that is not there writes nothing (a
    missing config.toml would get containerd 1.7's defaults written)."""
    etc = tmp_path / "etc/containerd"
    etc.mkdir(parents=True)
    real = etc / "real.toml"
    real.write_text(V2_OFF)
    link = etc / "config.toml"
    link.symlink_to("/etc/containerd/real.toml")
    args = ["enable-nri", "--runtime", "containerd", "--host-root", str(tmp_path),
            "--restart-command", "", "--version-command", "echo containerd x 1.7.24"]
    assert main(args) == 0
    assert link.is_symlink() and nri_enabled(real.read_text())
    assert f"wrote {real}" in capsys.readouterr().out
    # a relative --config (the working directory's) through a relative link
    (tmp_path / "rel.toml").symlink_to("etc/containerd/real.toml")
    real.write_text(V2_OFF)
    monkeypatch.chdir(tmp_path)
    assert main([*args, "--config", "rel.toml"]) == 0
    assert (tmp_path / "rel.toml").is_symlink() and nri_enabled(real.read_text())
    capsys.readouterr()
    link.unlink()
    link.symlink_to("/opt/conf/containerd.toml")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{link}: a symbolic link to {tmp_path}/opt/conf/containerd.toml, which is not " \
        "there: nothing written" in err
    assert link.is_symlink() and not (tmp_path / "opt").exists()
