"""Where the plugin writes: ``stateDirectory``, ``logFile`` and ``run --state-dir`` are
absolute paths (a DaemonSet's or a runtime's working directory is anyone's guess, as for
``socketPath``), on no pseudo filesystem (proc, sysfs, devtmpfs, cgroup, ...: root passes
``os.access`` there, the kernel keeps no files), told by the mount of the nearest existing
ancestor in /proc/self/mountinfo (nri_cpumgr.mounts). One line naming the key, exit status 2,
in ``run`` and ``run --check-config`` alike."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from nri_cpumgr.cli import _fallback_log_file, main, parse_args
from nri_cpumgr.config import ConfigError, parse_config
from nri_cpumgr.config.model import location_error
from nri_cpumgr.mounts import (
    PSEUDO_FILESYSTEMS,
    mount_of,
    parse_mountinfo,
    pseudo_filesystem,
    pseudo_mount,
)
from nri_cpumgr.runline import run_arguments

DUAL = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "dual-socket-smt"
DOCS = Path(__file__).resolve().parents[2] / "docs"

# a cgroup v1 host's table (the shape of this repository's CI machines), with a blank in a
# mount point and two mounts on one point
MOUNTINFO = """\
22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw
23 1 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:6 - sysfs sysfs rw
24 1 0:5 / /dev rw,nosuid shared:2 - devtmpfs udev rw,size=4008840k,mode=755
25 24 0:23 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw
1 0 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
30 23 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/cpuset rw,nosuid shared:10 - cgroup cgroup rw,cpuset
32 30 0:28 / /sys/fs/cgroup/unified rw,nosuid shared:11 - cgroup2 cgroup2 rw
40 1 0:40 / /run rw,nosuid,nodev shared:12 - tmpfs tmpfs rw
41 1 0:41 / /mnt/my\\040disk rw shared:13 - xfs /dev/vdb rw
42 1 0:42 / /srv rw shared:14 - tmpfs tmpfs rw
43 1 0:43 / /srv rw shared:15 - proc proc rw
not a mountinfo line
"""


def test_the_mount_table_is_read_with_escapes_and_stacking() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert len(mounts) == 12  # (the malformed line skipped)
    assert mount_of("/mnt/my disk/state", mounts).fstype == "xfs"  # \040 decoded
    assert mount_of("/var/lib/nri-cpumgr", mounts).point == "/"
    assert mount_of("/procfoo", mounts).point == "/"  # a prefix of a name is no parent
    assert mount_of("/srv/x", mounts).fstype == "proc"  # the last mount on a point is on top


@pytest.mark.parametrize(("path", "why"), [
    ("/proc/nri", "on the proc filesystem mounted on /proc"),
    ("/sys/kernel", "on the sysfs filesystem mounted on /sys"),
    ("/dev/nri-cpumgr", "on the devtmpfs filesystem mounted on /dev"),
    ("/sys/fs/cgroup/cpuset/nri", "on the cgroup filesystem mounted on /sys/fs/cgroup/cpuset"),
    ("/sys/fs/cgroup/unified/x", "on the cgroup2 filesystem mounted on /sys/fs/cgroup/unified"),
    # a mount inside a pseudo filesystem's tree (cgroup v1's tmpfs, /dev/shm)
    ("/sys/fs/cgroup/nri", "on a tmpfs mounted on /sys/fs/cgroup inside the sysfs filesystem "
                           "on /sys"),
    ("/dev/shm/nri", "on a tmpfs mounted on /dev/shm inside the devtmpfs filesystem on /dev"),
    ("/var/lib/nri-cpumgr", None),
    ("/run/nri-cpumgr", None),  # a tmpfs, but storage
    ("/mnt/my disk", None),
])
def test_pseudo_mounts(path: str, why: str | None) -> None:
    assert pseudo_mount(path, parse_mountinfo(MOUNTINFO)) == why


def test_this_machines_proc_and_sys(tmp_path: Path) -> None:
    """The real table: /proc and /sys, and below a missing path its nearest existing
    ancestor; the test's own directory is none."""
    assert pseudo_filesystem("/proc/nri-cpumgr/a/b") == "on the proc filesystem mounted on /proc"
    assert pseudo_filesystem("/sys") == "on the sysfs filesystem mounted on /sys"
    assert pseudo_filesystem(str(tmp_path / "state")) is None
    (tmp_path / "to-proc").symlink_to("/proc")
    assert pseudo_filesystem(str(tmp_path / "to-proc" / "x")) == (
        "on the proc filesystem mounted on /proc")  # symlinks resolved
    assert pseudo_filesystem("/proc/x", mountinfo=str(tmp_path / "none")) is None  # no table


@pytest.mark.parametrize(("text", "message"), [
    ("stateDirectory: var/lib/nri-cpumgr\n",
     "invalid config: stateDirectory: 'var/lib/nri-cpumgr': expected an absolute path (the "
     "plugin's state directory, e.g. /var/lib/nri-cpumgr) (c.yaml)"),
    ("stateDirectory: ./state\n", "stateDirectory: './state': expected an absolute path"),
    ("logFile: nri-cpumgr.log\n",
     "invalid config: logFile: 'nri-cpumgr.log': expected an absolute path (the log file, "
     "e.g. /var/log/nri-cpumgr.log) (c.yaml)"),
    ("stateDirectory: /proc/nri-cpumgr\n",
     "invalid config: stateDirectory: '/proc/nri-cpumgr': on the proc filesystem mounted on "
     "/proc: the kernel's interface, not storage (expected the plugin's state directory on "
     "the node's disk, e.g. /var/lib/nri-cpumgr) (c.yaml)"),
    ("logFile: /sys/nri-cpumgr.log\n",
     "logFile: '/sys/nri-cpumgr.log': on the sysfs filesystem mounted on /sys"),
])
def test_the_keys_refuse_relative_and_pseudo_paths(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(text, "c.yaml")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_what_the_keys_take(tmp_path: Path) -> None:
    assert parse_config(f"stateDirectory: {tmp_path}/s\nlogFile: {tmp_path}/l.log\n"
                        ).stateDirectory == f"{tmp_path}/s"
    for empty in ("logFile:\n", "logFile: ''\n", "logFile: null\n"):
        assert not parse_config(empty).logFile  # no log file
    # a device or a pipe is a stream the log goes to, wherever its node is (/proc/1/fd/1:
    # a container's stdout)
    assert parse_config("logFile: /dev/null\n").logFile == "/dev/null"
    r, w = os.pipe()
    try:
        assert location_error("logFile", f"/proc/self/fd/{w}") is None
    finally:
        os.close(r)
        os.close(w)
    assert location_error("logFile", "/proc/self/status") is not None  # a file of the kernel's


@pytest.mark.parametrize("state_dir", ["state", "./state", "/proc/nri-cpumgr"])
@pytest.mark.parametrize("check", [False, True])
def test_a_bad_state_dir_option_is_refused(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path, state_dir: str,
                                           check: bool) -> None:
    """``run --state-dir`` takes what ``stateDirectory`` takes: a usage error naming the
    option (status 2), on the argparse-free command line of the plugin's start too."""
    argv = ["run", "--state-dir", state_dir, "--socket", str(tmp_path / "no.sock"),
            "--sysfs-root", str(DUAL)] + (["--check-config"] if check else [])
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --state-dir: {state_dir!r}: " in err
    assert ("expected an absolute path" in err) != state_dir.startswith("/")
    assert not (tmp_path / "state").exists()


def test_the_fast_run_line_leaves_a_bad_state_dir_to_argparse() -> None:
    assert run_arguments(["run", "--state-dir", "state"]) is None
    assert run_arguments(["run", "--state-dir", "/proc/x"]) is not None  # (no I/O there)
    with pytest.raises(SystemExit):  # but cli.parse_args looks before taking it
        parse_args(["run", "--state-dir", "/proc/x"])
    assert isinstance(parse_args(["run", "--state-dir", "/var/lib/x"]), SimpleNamespace)
    assert isinstance(parse_args(["run", "--state-dir", ""]), SimpleNamespace)  # (the config's)


def test_a_refused_configs_fatal_line_goes_to_the_defaults_log(tmp_path: Path) -> None:
    """Launched by the runtime, a start-up config refused for its stateDirectory/logFile
    logs its fatal line in the defaults' log file, not at the refused path."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("stateDirectory: state\nlogFile: /proc/x.log\nbogus: 1\n")
    args = SimpleNamespace(config=str(cfg), state_dir=None)
    assert _fallback_log_file(args) == "/var/lib/nri-cpumgr/nri-cpumgr.log"
    cfg.write_text(f"stateDirectory: {tmp_path}/s\nbogus: 1\n")
    assert _fallback_log_file(args) == f"{tmp_path}/s/nri-cpumgr.log"


def test_the_docs_name_every_refused_filesystem() -> None:
    text = (DOCS / "configuration.md").read_text()
    assert [t for t in sorted(PSEUDO_FILESYSTEMS) if f"`{t}`" not in text] == []
