"""``nri-cpumgr enable-nri`` (nri_cpumgr/nodeprep, the chart's opt-in node preparation): NRI
turned on in containerd 1.7 / 2.x configs and a CRI-O drop-in, every other line kept; a second
run changes nothing (idempotent); ``--dry-run`` prints the diff and writes nothing; the restart
runs only after a change; a config that is not TOML is refused with status 2 and untouched.
The edits are checked against the repository's own drop-ins (deploy/containerd-*.toml,
deploy/crio-nri.conf), which turn NRI on."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from nri_cpumgr.cli import main
from nri_cpumgr.nodeprep import NodePrepError, containerd_config, crio_dropin, nri_enabled

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
