"""sharedPoolUpdateMode auto (issue 21): the plugin calls UpdateContainers itself only on a
runtime whose vendored NRI no longer takes the Adaptation lock there (containerd/nri#301,
NRI v0.12.1, first in containerd 2.4.0); everywhere else the updates ride on replies."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.config import parse_config
from nri_cpumgr.poolsync import choose_update_mode, nri_lock_inversion, parse_version
from nri_cpumgr.runtime.plugin import Plugin
from nri_cpumgr.topology import CPUInfo, CPUTopology, Machine

MACHINE = Machine(CPUTopology.from_details({0: CPUInfo(0, 0, 0), 1: CPUInfo(0, 0, 1)}))
STATIC = 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'


@pytest.mark.parametrize("text, want", [
    ("1.7.24", (1, 7, 24, False)),
    ("v2.1.9", (2, 1, 9, False)),
    ("2.1.9+unknown", (2, 1, 9, False)),           # Debian's 2.1.9 (version.Version)
    ("1.7.24~ds1", (1, 7, 24, False)),             # Debian's 1.7.24 (a repack, not a pre-release)
    ("v2.4.0-rc.1", (2, 4, 0, True)),
    ("2.4.0~rc1", (2, 4, 0, True)),
    ("v2.4.0-beta.0", (2, 4, 0, True)),
    ("v2.4.0-12-gabcdef0", (2, 4, 0, False)),      # git describe: commits after the tag
    ("v2.4.2", (2, 4, 2, False)),
    ("1.31", (1, 31, 0, False)),
    (" v10.0.1 ", (10, 0, 1, False)),
    ("", None),
    ("unknown", None),
    ("2.1.9x", None),
    ("git-abcdef", None),
])
def test_parse_version(text, want):
    assert parse_version(text) == want


@pytest.mark.parametrize("name, version, want", [
    ("containerd", "1.7.24~ds1", True),    # NRI v0.6.1
    ("containerd", "v1.7.35", True),       # NRI v0.8.0
    ("containerd", "2.1.9+unknown", True),  # NRI v0.8.0
    ("containerd", "v2.2.9", True),        # NRI v0.11.0
    ("containerd", "v2.3.7", True),        # NRI v0.12.0: still r.Lock() in updateContainers
    ("containerd", "v2.4.0-rc.1", True),   # before the release: not known to carry the fix
    ("containerd", "v2.4.0", False),       # NRI v0.12.3
    ("containerd", "2.4.2", False),
    ("containerd", "v3.0.0", False),
    ("Containerd", "v2.4.1", False),
    ("containerd", "", None),
    ("containerd", "devel", None),
    ("cri-o", "1.34.0", True),             # NRI v0.9.1-0.20250219030224-e597e7849f24
    ("CRI-O", "v1.34.1", True),
    ("cri-o", "1.31.0", True),             # older still
    ("cri-o", "1.35.0", None),             # not read: not known
    ("cri-o", "", None),
    ("podman", "5.0.0", None),             # another runtime: not known here
    ("", "", None),
])
def test_nri_lock_inversion(name, version, want):
    assert nri_lock_inversion(name, version) is want


@pytest.mark.parametrize("configured, name, version, mode, hazard", [
    ("auto", "containerd", "1.7.24~ds1", "reply", False),
    ("auto", "containerd", "2.1.9+unknown", "reply", False),
    ("auto", "containerd", "v2.3.7", "reply", False),
    ("auto", "containerd", "v2.4.0", "async", False),
    ("auto", "cri-o", "1.31.0", "reply", False),
    ("auto", "", "", "reply", False),
    ("async", "containerd", "1.7.24~ds1", "async", True),
    ("async", "cri-o", "1.31.0", "async", True),
    ("async", "cri-o", "1.36.0", "async", True),
    ("auto", "cri-o", "1.36.0", "reply", False),
    ("async", "containerd", "v2.4.2", "async", False),
    ("reply", "containerd", "v2.4.2", "reply", False),
    ("reply", "containerd", "1.7.24", "reply", False),
])
def test_choose_update_mode(configured, name, version, mode, hazard):
    choice = choose_update_mode(configured, name, version)
    assert (choice.mode, choice.hazard) == (mode, hazard)
    assert choice.reason.startswith("auto: " if configured == "auto" else "configured; ")


def test_choose_update_mode_reasons_name_the_bug_and_the_fix():
    bad = choose_update_mode("auto", "containerd", "2.1.9+unknown")
    assert bad.reason == (
        "auto: containerd 2.1.9+unknown vendors an NRI older than v0.12.1: a plugin's "
        "UpdateContainers can deadlock it against CRI calls (containerd/containerd#13733; "
        "fixed in containerd 2.4.0)")
    good = choose_update_mode("auto", "containerd", "v2.4.2")
    assert good.reason == ("auto: containerd v2.4.2 vendors NRI v0.12.1 or later "
                           "(containerd/nri#301)")
    unknown = choose_update_mode("auto", "cri-o", "")
    assert unknown.reason == ("auto: cri-o ? is not known to be free of the NRI lock-order "
                              "inversion (containerd/containerd#13733)")
    crio = choose_update_mode("auto", "cri-o", "1.34.0")
    assert crio.reason == (
        "auto: cri-o 1.34.0 vendors an NRI older than v0.12.1: a plugin's UpdateContainers "
        "can deadlock it against CRI calls (containerd/containerd#13733; no CRI-O release "
        "known here with NRI v0.12.1+)")
    with pytest.raises(ValueError, match="sharedPoolUpdateMode 'later'"):
        choose_update_mode("later", "containerd", "v2.4.2")


def _configured(workdir: Path, extra: str, name: str, version: str) -> Plugin:
    p = Plugin(parse_config(STATIC + extra + f"stateDirectory: {workdir}\n"), MACHINE)
    assert p.pool_sync is not None
    assert p.pool_sync.mode == ("reply" if "async" not in extra else "async")  # before Configure
    p.configure(nri_pb2.ConfigureRequest(runtime_name=name, runtime_version=version))
    return p


@pytest.mark.parametrize("version, mode", [("1.7.24~ds1", "reply"), ("2.1.9+unknown", "reply"),
                                           ("v2.4.2", "async")])
def test_configure_picks_the_mode_and_logs_why(tmp_path, caplog, version, mode):
    caplog.set_level(logging.INFO, logger="nri_cpumgr")
    p = _configured(tmp_path, "", "containerd", version)
    assert p.pool_sync is not None and p.pool_sync.mode == mode
    lines = [r for r in caplog.records if "shared pool update mode" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert lines[0].getMessage().startswith(f"shared pool update mode {mode} (auto: containerd "
                                            f"{version} vendors")
    p.close()


def test_explicit_async_on_a_runtime_with_the_bug_is_a_warning(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nri_cpumgr")
    p = _configured(tmp_path, "sharedPoolUpdateMode: async\n", "containerd", "1.7.24~ds1")
    assert p.pool_sync is not None and p.pool_sync.mode == "async"
    warn = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("shared pool update mode async (configured; containerd 1.7.24~ds1 "
                            "vendors an NRI older than v0.12.1") and "can hang for good" in m
               for m in warn), warn
    p.close()


def test_a_reconnect_to_another_runtime_decides_again(tmp_path):
    p = _configured(tmp_path, "", "containerd", "v2.4.2")
    assert p.pool_sync is not None and p.pool_sync.mode == "async"
    p.configure(nri_pb2.ConfigureRequest(runtime_name="containerd", runtime_version="1.7.24"))
    assert p.pool_sync.mode == "reply"
    p.close()
