"""A config change at runtime (issue 35) on a real containerd with the shipped update mode
(no sharedPoolUpdateMode in the config: ``auto`` takes ``cri`` on 1.7 and 2.1).

* ``reservedSystemCPUs`` 0 -> 0-1 with 20 containers (10 exclusive, 10 shared) on a 12-CPU
  topology written for the test (the kubelet's topoDualSocketHT, as
  test_kill_after_change.py): the host has 2 CPUs, so these containers are created, not
  started, and checked in the OCI spec the runtime keeps. Only the container on CPU 1 moves;
  the config file is rewritten (the plugin's watch picks it up).
* ``full-pcpus-only`` turned on with one SMT-misaligned exclusive container (made under
  ``distribute-cpus-across-cores``, a change that moves nothing) on the same topology: that
  container only moves, onto a whole core.
* policy none -> static -> none on the host's 2 CPUs with started containers (SIGHUP):
  checked in the OCI spec, the cgroup and /proc; at the end every container is back on every
  CPU (no CPU leaked).
* SIGKILL in the middle of a plan (reservedSystemCPUs 0 -> 1 on the host's CPUs): containerd
  is SIGSTOPped so the plan's first CRI call hangs, the plugin is killed once the plan is
  recorded, containerd resumed, the plugin relaunched on the new config: everything
  converges (spec, cgroup, /proc) and the recorded plan is gone.

``NRI_E2E_RECONF_INJECT`` names one check to feed a wrong expected answer (the checks are
shown to fail once): ``spec``, ``cgroup``, ``proc``, ``unmoved``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from nri_cpumgr.cpuset import CPUSet
from tests.e2e.plugin_run import eventually, start_plugin, write_config

G1 = {"cpu": "1", "memory": "64Mi"}
INJECT = os.environ.get("NRI_E2E_RECONF_INJECT", "")
PLAN = "reconfiguration_plan"


def _wrong(name: str, value: str) -> str:
    """``value``, or a wrong one when the check ``name`` is the injected one."""
    return "0-1" if INJECT == name and value != "0-1" else ("0" if INJECT == name else value)


def _applied(plugin: Any, since: int = 0, timeout: float = 20.0) -> str:
    plugin.wait_for_log(r"reconfiguration from .* (applied|refused|failed): ",
                        timeout=timeout, since=since)
    return plugin.log_text(since)


def test_reserved_grown_moves_only_the_container_on_cpu_1(containerd, cri, e2e_workdir,
                                                          twelve_cpus):
    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=twelve_cpus)
    try:
        want = "async" if containerd.version >= "2.4" else "cri"  # the default: auto
        assert f"shared pool update mode {want}" in plugin.log_text()
        excl = []
        for i in range(10):
            excl.append(cri.create_container(cri.run_pod(f"g{i}", "Guaranteed"), "app",
                                             requests=G1, limits=G1))
        shared = [cri.create_container(cri.run_pod(f"be{i}", "BestEffort"), "app")
                  for i in range(10)]
        before = {cid: CPUSet.parse(cri.spec_cpus(cid)) for cid in excl}
        held = CPUSet()
        for c in before.values():
            held = held | c
        assert len(held) == 10 and 0 not in held
        free = CPUSet(range(12)) - held - {0}
        on1 = [cid for cid, c in before.items() if 1 in c]
        assert len(on1) == 1, before
        pool = CPUSet({0}) | free
        for cid in shared:
            assert eventually(lambda c=cid: cri.spec_cpus(c), str(pool), 15) == str(pool)
        # the plan first, on the live node (nothing applied), then the change
        (e2e_workdir / "next").mkdir()
        new_yaml = write_config(e2e_workdir / "next", containerd, reservedSystemCPUs="0-1")
        out = subprocess.run(
            [sys.executable, "-m", "nri_cpumgr", "plan", "--config",
             str(e2e_workdir / "config.yaml"),
             "--sysfs-root", str(twelve_cpus), "--reconfigure", str(new_yaml), "--json"],
            capture_output=True, text=True, timeout=60, check=True).stdout
        planned = {c["id"]: c for c in json.loads(out)["containers"]}
        assert [cid for cid, c in planned.items() if c["action"] == "move"] == on1
        assert {cri.spec_cpus(cid) for cid in shared} == {str(pool)}  # nothing applied
        since = plugin.log_offset()
        write_config(e2e_workdir, containerd, reservedSystemCPUs="0-1")
        log = _applied(plugin, since)
        assert "reconfiguration from a change of the config file" in log, log[-3000:]
        after = {cid: CPUSet.parse(cri.spec_cpus(cid)) for cid in excl}
        for cid in excl:
            want = free if cid in on1 else before[cid]
            if INJECT == "unmoved" and cid in on1:
                want = before[cid]
            assert after[cid] == want, (cid, before[cid], after[cid], log[-3000:])
        for cid in excl:  # the daemon applied what plan printed
            assert planned[cid]["cpusAfter"] == str(after[cid]), cid
        new_pool = CPUSet({0, 1})
        for cid in shared:
            assert eventually(lambda c=cid: cri.spec_cpus(c), str(new_pool), 15) == \
                _wrong("spec", str(new_pool))
        moved = [line for line in log.splitlines() if "reconfiguration: move" in line]
        assert len(moved) == 1 and "CPU(s) 1 became reserved" in moved[0], moved
        assert not (e2e_workdir / "state" / PLAN).exists()
        print(f"\ncontainerd {containerd.version}: reserved 0 -> 0-1 with 20 containers: "
              f"moved {on1} {before[on1[0]]} -> {after[on1[0]]}; 9 exclusive untouched; "
              f"shared {pool} -> {new_pool}")
    finally:
        plugin.stop()


def _check(cri, cid: str, cpus: str) -> None:
    """The container's cpuset in the OCI spec, its cgroup and its process's /proc."""
    assert eventually(lambda: cri.spec_cpus(cid), _wrong("spec", cpus), 15) == \
        _wrong("spec", cpus), (cid, cri.spec_cpus(cid))
    assert eventually(lambda: cri.cgroup_cpus(cid), _wrong("cgroup", cpus), 15) == \
        _wrong("cgroup", cpus), (cid, cri.cgroup_cpus(cid))
    assert eventually(lambda: cri.proc_cpus(cid), _wrong("proc", cpus), 15) == \
        _wrong("proc", cpus), (cid, cri.proc_cpus(cid))


def _started(cri) -> tuple[str, list[str]]:
    g = cri.create_container(cri.run_pod("g", "Guaranteed"), "app", requests=G1, limits=G1)
    cri.start_container(g)
    be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
    cri.start_container(be)
    bu = cri.create_container(cri.run_pod("bu", "Burstable"), "app",
                              requests={"cpu": "250m", "memory": "64Mi"},
                              limits={"cpu": "500m", "memory": "128Mi"})
    cri.start_container(bu)
    return g, [be, bu]


def test_none_static_none_leaks_no_cpu(containerd, cri, e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir, cpuManagerPolicy="none",
                          reservedSystemCPUs="")
    try:
        g, shared = _started(cri)
        for cid in [g, *shared]:
            assert cri.cgroup_cpus(cid) == "0-1" and cri.proc_cpus(cid) == "0-1"
        quota = cri.cgroup_cfs_quota(g)
        assert quota == 100000, quota  # the kubelet's quota of a 1-CPU limit
        since = plugin.log_offset()
        write_config(e2e_workdir, containerd)  # static, reservedSystemCPUs "0"
        os.kill(plugin.pid, signal.SIGHUP)  # (also picked up by the watch: either is fine)
        log = _applied(plugin, since)
        assert "applied" in log, log[-3000:]
        _check(cri, g, "1")
        assert cri.cgroup_cfs_quota(g) == -1  # exclusive CPUs: no CFS quota
        for cid in shared:
            _check(cri, cid, "0")
        since = plugin.log_offset()
        write_config(e2e_workdir, containerd, cpuManagerPolicy="none", reservedSystemCPUs="")
        os.kill(plugin.pid, signal.SIGHUP)
        log = _applied(plugin, since)
        assert "applied" in log, log[-3000:]
        for cid in [g, *shared]:
            _check(cri, cid, "0-1")
        assert cri.cgroup_cfs_quota(g) == quota  # its 1-CPU limit's quota is back
        assert not (e2e_workdir / "state" / PLAN).exists()
        print(f"\ncontainerd {containerd.version}: none -> static (g on 1, shared on 0) -> "
              "none (all on 0-1): spec, cgroup and /proc agree")
    finally:
        plugin.stop()


def test_sigkill_mid_plan_converges_after_the_relaunch(containerd, cri, e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir)
    try:
        g, shared = _started(cri)
        _check(cri, g, "1")
        for cid in shared:
            _check(cri, cid, "0")
        write_config(e2e_workdir, containerd, reservedSystemCPUs="1")
        os.kill(containerd.pid, signal.SIGSTOP)  # the plan's first CRI call hangs
        try:
            os.kill(plugin.pid, signal.SIGHUP)
            deadline = time.monotonic() + 10
            while not (e2e_workdir / "state" / PLAN).exists():
                assert time.monotonic() < deadline, plugin.log_text()[-3000:]
                time.sleep(0.005)
            time.sleep(0.1)
            plugin.kill(signal.SIGKILL)
            plugin.wait(10)
        finally:
            os.kill(containerd.pid, signal.SIGCONT)
        assert (e2e_workdir / "state" / PLAN).exists()  # killed mid-plan
        plugin = start_plugin(containerd, e2e_workdir, reservedSystemCPUs="1")
        plugin.wait_for_log("interrupted reconfiguration completed", timeout=20)
        _check(cri, g, "0")
        for cid in shared:
            _check(cri, cid, "1")
        assert not (e2e_workdir / "state" / PLAN).exists()
        print(f"\ncontainerd {containerd.version}: SIGKILL mid-plan (reserved 0 -> 1): after "
              "the relaunch g on 0, shared on 1 (spec, cgroup, /proc)")
    finally:
        plugin.stop()


G2 = {"cpu": "2", "memory": "64Mi"}
SPREAD = {"cpuManagerPolicyOptions": {"distribute-cpus-across-cores": "true"},
          "featureGates": {"CPUManagerPolicyAlphaOptions": True}}


def test_full_pcpus_only_moves_the_smt_misaligned_container_only(containerd, cri, e2e_workdir,
                                                                  twelve_cpus):
    """Two 2-CPU containers on whole cores (the default take), then, under
    distribute-cpus-across-cores (a change that moves nothing), one spread over two cores;
    full-pcpus-only then moves that one only (12-CPU topology: core i = CPUs i and i+6)."""
    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=twelve_cpus)
    topo_core = {c: c % 6 for c in range(12)}

    def whole(cpus: CPUSet) -> bool:
        cores = {topo_core[c] for c in cpus}
        return CPUSet(c for c in range(12) if topo_core[c] in cores) == cpus

    def change(**keys: Any) -> str:
        since = plugin.log_offset()
        write_config(e2e_workdir, containerd, **keys)
        return _applied(plugin, since)

    try:
        aligned = [cri.create_container(cri.run_pod(f"a{i}", "Guaranteed"), "app",
                                        requests=G2, limits=G2) for i in range(2)]
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        first = {cid: CPUSet.parse(cri.spec_cpus(cid)) for cid in aligned}
        assert all(whole(c) for c in first.values()), first
        log = change(**SPREAD)
        assert "applied: 0 container(s) updated" in log, log[-2000:]
        spread = cri.create_container(cri.run_pod("s", "Guaranteed"), "app",
                                      requests=G2, limits=G2)
        was = CPUSet.parse(cri.spec_cpus(spread))
        assert not whole(was), was
        log = change(cpuManagerPolicyOptions={"full-pcpus-only": "true"})
        assert "not whole physical cores" in log, log[-3000:]
        now = CPUSet.parse(cri.spec_cpus(spread))
        assert whole(now) and len(now) == 2, now
        want = first if INJECT != "unmoved" else {**first, aligned[0]: was}
        assert {cid: CPUSet.parse(cri.spec_cpus(cid)) for cid in aligned} == want
        moved = [line for line in log.splitlines() if "reconfiguration: move" in line]
        assert len(moved) == 1, moved
        print(f"\ncontainerd {containerd.version}: full-pcpus-only: the spread container "
              f"{was} -> {now}; the aligned ones {first} untouched; shared "
              f"{cri.spec_cpus(be)}")
    finally:
        plugin.stop()
