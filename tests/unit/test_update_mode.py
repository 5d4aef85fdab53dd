"""sharedPoolUpdateMode auto (issues 21, 31): the plugin calls UpdateContainers itself only on
a runtime whose vendored NRI no longer takes the Adaptation lock there (containerd/nri#301,
NRI v0.12.1, first in containerd 2.4.0); everywhere else it sends CRI UpdateContainerResources
calls on the runtime's CRI socket, and only without one do the updates ride on replies."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.config import parse_config
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.poolsync import (
    choose_update_mode,
    cri_endpoint,
    nri_lock_inversion,
    parse_version,
)
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
    ("cri-o", "1.35.2", True),
    ("cri-o", "1.36.3", True),             # NRI v0.11.0: still r.Lock() in updateContainers
    ("cri-o", "1.37.0", None),             # not read: not known
    ("cri-o", "", None),
    ("podman", "5.0.0", None),             # another runtime: not known here
    ("", "", None),
])
def test_nri_lock_inversion(name, version, want):
    assert nri_lock_inversion(name, version) is want


NO = "/run/containerd/containerd.sock does not exist"  # a CRI socket that cannot be used


@pytest.mark.parametrize("configured, name, version, no_cri, mode, hazard, overruled", [
    # auto: async where the fix is vendored, cri elsewhere, reply only without a CRI socket
    ("auto", "containerd", "1.7.24~ds1", None, "cri", False, False),
    ("auto", "containerd", "2.1.9+unknown", None, "cri", False, False),
    ("auto", "containerd", "v2.3.7", None, "cri", False, False),
    ("auto", "containerd", "v2.4.0", None, "async", False, False),
    ("auto", "containerd", "v2.4.0", NO, "async", False, False),
    ("auto", "cri-o", "1.31.0", None, "cri", False, False),
    ("auto", "cri-o", "1.36.3", None, "cri", False, False),   # the e2e tests' CRI-O
    ("auto", "cri-o", "1.37.0", None, "cri", False, False),   # not known: the safe path
    ("auto", "", "", None, "cri", False, False),
    ("auto", "containerd", "1.7.24~ds1", NO, "reply", False, False),
    ("auto", "cri-o", "1.37.0", NO, "reply", False, False),
    ("auto", "", "", NO, "reply", False, False),
    # async on a runtime known to have the inversion: not honoured
    ("async", "containerd", "1.7.24~ds1", None, "cri", False, True),
    ("async", "containerd", "1.7.24~ds1", NO, "reply", False, True),
    ("async", "cri-o", "1.31.0", None, "cri", False, True),
    ("async", "cri-o", "1.36.3", None, "cri", False, True),
    # async on a runtime not known: kept, flagged
    ("async", "cri-o", "1.37.0", None, "async", True, False),
    ("async", "containerd", "v2.4.2", None, "async", False, False),
    ("cri", "containerd", "v2.4.2", None, "cri", False, False),
    ("cri", "containerd", "1.7.24", NO, "reply", False, True),
    ("reply", "containerd", "v2.4.2", None, "reply", False, False),
    ("reply", "containerd", "1.7.24", None, "reply", False, False),
])
def test_choose_update_mode(configured, name, version, no_cri, mode, hazard, overruled):
    choice = choose_update_mode(configured, name, version, no_cri)
    assert (choice.mode, choice.hazard, choice.overruled) == (mode, hazard, overruled)
    assert choice.degraded == (configured == "auto" and mode == "reply")
    if configured == "auto":
        assert choice.reason.startswith("auto: ")
    elif not overruled:
        assert choice.reason.startswith("configured; ")


def test_an_unchecked_socket_is_not_used():
    assert choose_update_mode("auto", "containerd", "1.7.24").mode == "reply"


def test_choose_update_mode_reasons_name_the_bug_and_the_fix():
    bad = choose_update_mode("auto", "containerd", "2.1.9+unknown", None)
    assert bad.reason == (
        "auto: containerd 2.1.9+unknown vendors an NRI older than v0.12.1: a plugin's "
        "UpdateContainers can deadlock it against CRI calls (containerd/containerd#13733; "
        "fixed in containerd 2.4.0)")
    assert choose_update_mode("auto", "containerd", "2.1.9+unknown", NO).reason == \
        bad.reason + "; no CRI socket: " + NO
    good = choose_update_mode("auto", "containerd", "v2.4.2", None)
    assert good.reason == ("auto: containerd v2.4.2 vendors NRI v0.12.1 or later "
                           "(containerd/nri#301)")
    unknown = choose_update_mode("auto", "cri-o", "", None)
    assert unknown.reason == ("auto: cri-o ? is not known to be free of the NRI lock-order "
                              "inversion (containerd/containerd#13733)")
    crio = choose_update_mode("auto", "cri-o", "1.34.0", None)
    assert crio.reason == (
        "auto: cri-o 1.34.0 vendors an NRI older than v0.12.1: a plugin's UpdateContainers "
        "can deadlock it against CRI calls (containerd/containerd#13733; no CRI-O release "
        "known here with NRI v0.12.1+)")
    refused = choose_update_mode("async", "containerd", "1.7.24", None)
    assert refused.reason.startswith("configured async is not honoured: containerd 1.7.24 "
                                     "vendors an NRI older than v0.12.1")
    assert "fixed in containerd 2.4.0" in refused.reason
    with pytest.raises(ValueError, match="sharedPoolUpdateMode 'later'"):
        choose_update_mode("later", "containerd", "v2.4.2")


@pytest.mark.parametrize("configured, name, want", [
    ("", "containerd", "/run/containerd/containerd.sock"),
    ("", "cri-o", "/var/run/crio/crio.sock"),
    ("", "CRI-O", "/var/run/crio/crio.sock"),
    ("", "podman", None),
    ("unix:///tmp/x/containerd.sock", "containerd", "/tmp/x/containerd.sock"),
    ("/tmp/x.sock", "podman", "/tmp/x.sock"),
    ("tcp://localhost:1", "containerd", None),
])
def test_cri_endpoint(configured, name, want):
    assert cri_endpoint(configured, name) == want


def _configured(workdir: Path, extra: str, name: str, version: str,
                reachable: bool = True) -> Plugin:
    p = Plugin(parse_config(STATIC + extra + f"stateDirectory: {workdir}\n"), MACHINE)
    assert p.pool_sync is not None
    assert p.pool_sync.mode == ("reply" if "Mode" not in extra else  # before Configure
                                extra.split(": ")[1].strip())
    probed: list[str] = []

    def probe(path: str) -> str | None:
        probed.append(path)
        return None if reachable else f"{path} does not exist"

    p.cri_probe = probe
    p.configure(nri_pb2.ConfigureRequest(runtime_name=name, runtime_version=version))
    p.probed = probed  # type: ignore[attr-defined]
    return p


@pytest.mark.parametrize("version, mode", [("1.7.24~ds1", "cri"), ("2.1.9+unknown", "cri"),
                                           ("v2.4.2", "async")])
def test_configure_picks_the_mode_and_logs_why(tmp_path, caplog, version, mode):
    caplog.set_level(logging.INFO, logger="nri_cpumgr")
    p = _configured(tmp_path, "", "containerd", version)
    assert p.pool_sync is not None and p.pool_sync.mode == mode
    # containerd 2.4+ takes async whatever the CRI socket: it is not probed (issue 34: the
    # first Synchronize waits for no CRI module and no connect)
    probed = [] if mode == "async" else ["/run/containerd/containerd.sock"]
    assert p.probed == probed  # type: ignore[attr-defined]
    assert (p.cri is not None) == (mode == "cri")
    if p.cri is not None:
        assert p.cri.endpoint == "/run/containerd/containerd.sock"
    lines = [r for r in caplog.records if "shared pool update mode" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    where = " on /run/containerd/containerd.sock" if mode == "cri" else ""
    assert lines[0].getMessage().startswith(f"shared pool update mode {mode}{where} (auto: "
                                            f"containerd {version} vendors")
    p.close()
    assert p.cri is None


def test_no_cri_socket_takes_reply_and_says_why(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nri_cpumgr")
    p = _configured(tmp_path, "containerRuntimeEndpoint: unix:///x/c.sock\n", "containerd",
                    "1.7.24", reachable=False)
    assert p.pool_sync is not None and p.pool_sync.mode == "reply" and p.cri is None
    assert p.probed == ["/x/c.sock"]  # type: ignore[attr-defined]
    warn = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("shared pool update mode reply (auto: containerd 1.7.24") and
               "no CRI socket: /x/c.sock does not exist" in m and "released CPUs" in m
               for m in warn), warn
    p.close()


def test_reply_does_not_probe(tmp_path):
    p = _configured(tmp_path, "sharedPoolUpdateMode: reply\n", "containerd", "1.7.24")
    assert p.pool_sync is not None and p.pool_sync.mode == "reply"
    assert p.probed == [] and p.cri is None  # type: ignore[attr-defined]
    p.close()


def test_explicit_async_on_a_runtime_with_the_bug_is_not_honoured(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nri_cpumgr")
    p = _configured(tmp_path, "sharedPoolUpdateMode: async\n", "containerd", "1.7.24~ds1")
    assert p.pool_sync is not None and p.pool_sync.mode == "cri"
    err = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(m.startswith("shared pool update mode cri on /run/containerd/containerd.sock, "
                            "not async as configured (configured async is not honoured: "
                            "containerd 1.7.24~ds1 vendors an NRI older than v0.12.1") and
               "fixed in containerd 2.4.0" in m for m in err), err
    p.close()


def test_explicit_async_on_a_runtime_not_known_is_a_warning(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nri_cpumgr")
    p = _configured(tmp_path, "sharedPoolUpdateMode: async\n", "cri-o", "1.37.0")
    assert p.pool_sync is not None and p.pool_sync.mode == "async"
    warn = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("shared pool update mode async (configured; cri-o 1.37.0 is not "
                            "known") and "can hang for good" in m for m in warn), warn
    p.close()


def test_a_reconnect_to_another_runtime_decides_again(tmp_path):
    p = _configured(tmp_path, "", "containerd", "v2.4.2")
    assert p.pool_sync is not None and p.pool_sync.mode == "async" and p.cri is None
    p.configure(nri_pb2.ConfigureRequest(runtime_name="containerd", runtime_version="1.7.24"))
    assert p.pool_sync.mode == "cri" and p.cri is not None
    p.configure(nri_pb2.ConfigureRequest(runtime_name="containerd", runtime_version="2.4.2"))
    assert p.pool_sync.mode == "async" and p.cri is None
    p.close()


@pytest.mark.parametrize("mode", ["cri", "reply"])
def test_update_container_caused_by_a_cri_pass_carries_that_container_only(tmp_path, mode):
    """The UpdateContainer a CRI UpdateContainerResources of ours causes is answered at once
    with that container's own update (the pool now, no quota), never with a batch of the
    other stale containers riding on it; and a Guaranteed creation carries none (in reply
    mode it carries them all)."""
    from tests.unit.nri_peer import nri_container, nri_pod

    extra = "" if mode == "cri" else "sharedPoolUpdateMode: reply\n"
    p = _configured(tmp_path, extra, "containerd", "1.7.24")
    assert p.pool_sync is not None and p.pool_sync.mode == mode
    p.sender = _never_called
    be = [nri_container(u, cpus="0-1") for u in ("a", "b")]
    p.synchronize([nri_pod(u, "besteffort") for u in ("a", "b")], be)
    created = p.create_container(nri_pb2.CreateContainerRequest(
        pod=nri_pod("g"), container=nri_container("g", 1000)))
    assert str(p.manager.shared_pool()) == "0"
    # cri: the Guaranteed container's creation carries none of the shared containers
    assert sorted(u.container_id for u in created.update) == (
        [] if mode == "cri" else ["c-a", "c-b"])
    req = nri_pb2.UpdateContainerRequest(pod=nri_pod("a", "besteffort"), container=be[0])
    req.linux_resources.cpu.cpus = "0"  # what a CRI call of ours carries: the cpuset only
    resp = p.update_container(req)
    got = {u.container_id: u.linux.resources.cpu.cpus for u in resp.update}
    assert got == {"c-a": "0"}
    assert not resp.update[0].linux.resources.cpu.HasField("quota")
    assert not resp.update[0].linux.resources.HasField("memory")
    if mode == "cri":  # b is still stale (the worker moves it), yet not in this reply
        assert p.pool_sync.planner.overlapping(CPUSet.parse("1")) == ["c-b"]
    p.close()


async def _never_called(payload: bytes) -> set[str]:
    raise AssertionError("no NRI UpdateContainers in this mode")


def test_grpcio_is_imported_only_in_cri_mode(tmp_path):
    """grpcio (~11 MiB RSS) is loaded only once cri is chosen, on the worker thread."""
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from nri_cpumgr.api import nri_pb2\n"
        "from nri_cpumgr.config import parse_config\n"
        "from nri_cpumgr.runtime.plugin import Plugin\n"
        "from nri_cpumgr.topology import CPUInfo, CPUTopology, Machine\n"
        "m = Machine(CPUTopology.from_details({0: CPUInfo(0, 0, 0), 1: CPUInfo(0, 0, 1)}))\n"
        "def plugin(extra, version):\n"
        f"    p = Plugin(parse_config({STATIC!r} + extra + 'stateDirectory: {tmp_path}\\n'), m)\n"
        "    p.cri_probe = lambda path: None\n"
        "    p.configure(nri_pb2.ConfigureRequest(runtime_name='containerd',\n"
        "                                         runtime_version=version))\n"
        "    return p\n"
        "plugin('', 'v2.4.2'); plugin('sharedPoolUpdateMode: reply\\n', '1.7.24')\n"
        "print('grpc' in sys.modules)\n"
        "p = plugin('', '1.7.24')\n"
        "for _ in range(200):\n"
        "    if 'grpc' in sys.modules: break\n"
        "    time.sleep(0.05)\n"
        "print(p.pool_sync.mode, 'grpc' in sys.modules)\n"
        "p.close()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["False", "cri", "True"], out.stderr[-2000:]


def test_an_interrupted_cri_batch_is_sent_again_after_the_synchronize(tmp_path, caplog):
    """The containers a killed instance left in its CRI journal are stale after the next
    Synchronize whatever cpuset the runtime shows for them (a canceled call can leave the
    cgroup and the spec apart), and sent again as a shrink (soon)."""
    from nri_cpumgr.runtime.plugin import CRI_JOURNAL_NAME
    from tests.unit.nri_peer import nri_container, nri_pod

    caplog.set_level(logging.INFO, logger="nri_cpumgr")
    p = _configured(tmp_path, "", "containerd", "1.7.24")
    assert p.pool_sync is not None and p.pool_sync.mode == "cri"
    journal = tmp_path / CRI_JOURNAL_NAME
    journal.write_text("c-a\nc-gone\n")
    p.synchronize([nri_pod(u, "besteffort") for u in ("a", "b")],
                  [nri_container(u, cpus="0-1") for u in ("a", "b")])
    planner = p.pool_sync.planner
    assert planner.stale_count() == 1 and "c-a" in planner.overlapping(CPUSet.parse("4095"))
    assert planner.shrink_since is not None  # urgent: after the quiet period
    assert not journal.exists()
    assert "1 containers of an interrupted CRI batch are sent again" in caplog.text
    p.close()
