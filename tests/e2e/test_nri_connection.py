"""The NRI connection against a real containerd: launched by the runtime, and reconnecting
after the runtime restarts (state rebuilt from Synchronize)."""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml

from tests.e2e.conftest import require_e2e
from tests.e2e.harness import Containerd, runtime_daemon
from tests.e2e.plugin_run import eventually, start_plugin

MEM = "200Mi"
G1 = {"cpu": "1", "memory": MEM}


def _launched(version: str, prefix: str, command: str,
              conf: dict | None = None) -> tuple[Containerd, Path, Path]:
    """A private containerd (not started) that launches ``plugin_path/90-cpumgr``, a shell
    script running ``command`` ({python}, {state} substituted), with
    ``plugin_config_path/90-cpumgr.conf`` = static policy, CPU 0 reserved, updated with
    ``conf``. Returns (containerd, work dir, plugin state dir)."""
    require_e2e(version)
    wd = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    c = runtime_daemon(version, wd)
    state = wd / "state"
    c.nri_plugin_dir.mkdir(parents=True, exist_ok=True)
    c.nri_conf_dir.mkdir(parents=True, exist_ok=True)
    exe = c.nri_plugin_dir / "90-cpumgr"
    exe.write_text("#!/bin/sh\n" + command.format(python=sys.executable, state=state) + "\n")
    exe.chmod(0o755)
    body = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
            "stateDirectory": str(state)}
    body.update(conf or {})
    (c.nri_conf_dir / "90-cpumgr.conf").write_text(yaml.safe_dump(body))
    return c, wd, state


def test_launched_by_the_runtime_takes_its_config_from_configure(containerd_version):
    # the runtime starts it with no arguments, no PATH and stdio on /dev/null
    c, wd, state = _launched(containerd_version, "e2e-launch-",
                             "exec {python} -m nri_cpumgr run --state-dir {state}")
    log = state / "nri-cpumgr.log"
    try:
        c.start()
        assert eventually(lambda: log.is_file() and "configuration taken from the runtime"
                          in log.read_text(), True, 15), c.log_tail()
        cri = c.cri_client()
        try:
            pod = cri.run_pod("g", "Guaranteed")
            gid = cri.create_container(pod, "app", requests=G1, limits=G1)
            cri.start_container(gid)
            assert (cri.spec_cpus(gid), cri.cgroup_cpus(gid), cri.proc_cpus(gid)) == ("1",) * 3
            be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
            cri.start_container(be)
            assert (cri.cgroup_cpus(be), cri.proc_cpus(be)) == ("0", "0")
            assert "qos=Guaranteed cpus=1 exclusive=true" in log.read_text()
        finally:
            assert not cri.cleanup()
            cri.close()
    finally:
        c.stop()
        shutil.rmtree(wd, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def test_launched_plugin_serves_metrics_named_by_the_runtime_config(containerd_version):
    """metricsAddress in plugin_config_path/90-cpumgr.conf (not in the start-up config)
    starts the metrics server once Configure is taken."""
    port = _free_port()
    c, wd, state = _launched(containerd_version, "e2e-launch-metrics-",
                             "exec {python} -m nri_cpumgr run --state-dir {state}",
                             conf={"metricsAddress": f"127.0.0.1:{port}"})
    try:
        c.start()
        assert eventually(lambda: _readyz(port)[0], 200, 15) == 200, c.log_tail()
    finally:
        c.stop()
        shutil.rmtree(wd, ignore_errors=True)


def test_launched_plugin_with_a_bad_conf_leaves_the_runtime_running(containerd_version):
    """A typo in 90-cpumgr.conf must not take the runtime down (containerd 1.7 exits when a
    plugin fails Configure): the plugin answers, logs the ERROR and pins nothing."""
    c, wd, state = _launched(containerd_version, "e2e-launch-bad-",
                             "exec {python} -m nri_cpumgr run --state-dir {state}",
                             conf={"reservedSystemCpus": "0"})
    log = state / "nri-cpumgr.log"
    try:
        c.start()
        assert eventually(lambda: log.is_file() and "stays inert" in log.read_text(),
                          True, 15), c.log_tail()
        cri = c.cri_client()
        try:
            gid = cri.create_container(cri.run_pod("g", "Guaranteed"), "app", requests=G1,
                                       limits=G1)
            cri.start_container(gid)
            assert cri.spec_cpus(gid) == ""  # not pinned
        finally:
            assert not cri.cleanup()
            cri.close()
        assert c.running, c.log_tail()
        text = log.read_text()
        assert "ERROR" in text and "reservedSystemCpus: unknown key" in text, text
        assert "90-cpumgr.conf" in text, text
        assert not (state / "cpu_manager_state").exists()
    finally:
        c.stop()
        shutil.rmtree(wd, ignore_errors=True)


def test_reconnects_after_containerd_restart(containerd, cri, e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir)
    try:
        gid = cri.create_container(cri.run_pod("g", "Guaranteed"), "app", requests=G1, limits=G1)
        cri.start_container(gid)
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        cri.start_container(be)
        assert cri.proc_cpus(gid) == "1"
        assert eventually(lambda: cri.proc_cpus(be), "0") == "0"

        since = plugin.log_offset()
        containerd.restart()
        plugin.wait_for_log(r"registered as", timeout=30, since=since)
        plugin.wait_for_log(r"synchronize pods=", timeout=10, since=since)
        text = plugin.log_text(since)
        assert "disconnected" in text and "synchronize pods=" in text
        time.sleep(0.2)
        # containers keep their cpusets across the runtime restart
        assert (cri.cgroup_cpus(gid), cri.proc_cpus(gid)) == ("1", "1")
        assert (cri.cgroup_cpus(be), cri.proc_cpus(be)) == ("0", "0")
        # the rebuilt state still holds CPU 1 for the running Guaranteed container
        pod2 = cri.run_pod("g2", "Guaranteed")
        with pytest.raises(grpc.RpcError) as ei:
            cri.create_container(pod2, "app", requests=G1, limits=G1)
        assert "requested=1, available=0" in ei.value.details()
        be2 = cri.create_container(cri.run_pod("be2", "BestEffort"), "app")
        assert cri.spec_cpus(be2) == "0"
    finally:
        plugin.stop()


def test_launched_with_no_arguments_as_the_runtime_starts_it(containerd_version):
    """The runtime execs ``plugin_path/90-cpumgr`` with no arguments: the executable is the
    plain ``nri-cpumgr`` entry point; the config comes from ``plugin_config_path``. Its
    start-up log goes to the default state directory, so the plugin runs in a private mount
    namespace with a tmpfs over /var/lib (the host's stays untouched)."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed for this test")
    c, wd, state = _launched(
        containerd_version, "e2e-noarg-",
        "exec unshare -m --propagation private sh -c "
        "'mount -t tmpfs tmpfs /var/lib && exec {python} -m nri_cpumgr'")
    try:
        c.start()
        checkpoint = state / "cpu_manager_state"
        assert eventually(checkpoint.is_file, True, 15), c.log_tail()
        cri = c.cri_client()
        try:
            gid = cri.create_container(cri.run_pod("g", "Guaranteed"), "app", requests=G1,
                                       limits=G1)
            cri.start_container(gid)
            assert (cri.spec_cpus(gid), cri.cgroup_cpus(gid), cri.proc_cpus(gid)) == ("1",) * 3
            assert cri.cgroup_cfs_quota(gid) == -1
        finally:
            assert not cri.cleanup()
            cri.close()
    finally:
        c.stop()
        shutil.rmtree(wd, ignore_errors=True)


def test_auto_update_mode_follows_the_runtime_name_and_version(containerd, cri, e2e_workdir):
    """``sharedPoolUpdateMode: auto`` (the default) decides from what the runtime sends in
    Configure: cri on containerd 1.7 / 2.1 and CRI-O 1.36.3 (NRI before v0.12.1: the
    lock-order inversion; the harness gives the plugin the runtime's CRI socket), async on
    containerd 2.4.2 (nri_cpumgr/poolsync/runtimes.py)."""
    from nri_cpumgr.poolsync.runtimes import choose_update_mode

    plugin = start_plugin(containerd, e2e_workdir)
    try:
        m = plugin.wait_for_log(r"shared pool update mode (\S+)(?: on \S+)? \((auto: [^\n]*)\)",
                                timeout=5)
        v = cri.version()
        want = choose_update_mode("auto", v.runtime_name, v.runtime_version, None)
        assert (m.group(1), m.group(2)) == (want.mode, want.reason)
        # the runtime told the plugin the same name and version as its CRI Version
        assert f"{v.runtime_name} {v.runtime_version} " in m.group(2)
        expected = {"1.7": "cri", "2.1": "cri", "2.4": "async", "crio": "cri"}
        assert m.group(1) == expected[containerd.version]
    finally:
        plugin.stop()
