"""What happens while a shared-pool pass is under way (issue 31), with the shipped defaults
(``sharedPoolUpdateMode`` left out: ``auto`` takes ``cri`` on containerd 1.7.24 and 2.1.9,
``async`` on 2.4.2 and ``cri`` on CRI-O):

* a shared container created and started while the pass moves the others ends on the shared
  pool in its OCI spec, its cgroup and /proc, as do the others;
* the plugin SIGKILLed in the middle of a pass loses nothing: after its relaunch every shared
  container reaches the shared pool (spec, cgroup, /proc), the Guaranteed container keeps its
  CPU, and the checkpoint assigns that CPU to it alone (not on containerd 2.4, whose pass is
  one UpdateContainers: nothing is left half done there).

On containerd 2.4.2 the first test is an expected failure for now (see the test).

A pass takes about 10 ms per container on an idle node, too short to act in; here the OCI
runtime is a wrapper whose ``runc update`` waits ``UPDATE_DELAY_S`` while a flag file exists
(every update of a pass is a ``runc update``, whichever path carries it), so a pass over
``SHARED`` containers lasts several seconds and "under way" is seen, not guessed: some shared
containers' specs already on the new pool, others not yet.

This machine has 2 CPUs; with ``reservedSystemCPUs: "0"`` CPU 1 is the only exclusive CPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nri_cpumgr.runtime.plugin import CHECKPOINT_NAME
from tests.e2e.harness import Containerd, Crio
from tests.e2e.harness import cgroups as cg
from tests.e2e.plugin_run import start_plugin

G1 = {"cpu": "1", "memory": "100Mi"}
SHARED = 5
UPDATE_DELAY_S = 3
SETTLE = 30.0  # s: a pass over SHARED slow updates, on a loaded 2-CPU machine


def _wrapper(workdir: Path, runc: Path, flag: Path) -> Path:
    w = workdir / "runc-slow-update.sh"
    w.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do\n'
        f'  if [ "$a" = update ] && [ -e "{flag}" ]; then sleep {UPDATE_DELAY_S}; break; fi\n'
        "done\n"
        f'exec "{runc}" "$@"\n')
    w.chmod(0o755)
    return w


class SlowUpdateContainerd(Containerd):
    """A :class:`Containerd` whose runc waits UPDATE_DELAY_S in ``runc update`` while
    ``flag`` exists."""

    def __init__(self, version: str, workdir: Path, flag: Path) -> None:
        super().__init__(version, workdir)
        self.wrapper = _wrapper(workdir, self.runc, flag)

    def config_text(self) -> str:
        text = super().config_text()
        real = f'BinaryName = "{self.runc}"'
        assert real in text, "containerd config without the runc BinaryName"
        return text.replace(real, f'BinaryName = "{self.wrapper}"')


class SlowUpdateCrio(Crio):
    """The same for CRI-O: its ``runtime_path`` is the wrapper."""

    def __init__(self, version: str, workdir: Path, flag: Path) -> None:
        super().__init__(version, workdir)
        self.wrapper = _wrapper(workdir, self.runc, flag)

    def config_text(self) -> str:
        text = super().config_text()
        real = f'runtime_path = "{self.runc}"'
        assert real in text, "CRI-O config without the runtime_path"
        return text.replace(real, f'runtime_path = "{self.wrapper}"')


def _wait(pred: Callable[[], bool], timeout: float, what: Callable[[], object] = str) -> float:
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"not reached within {timeout} s: {what()}")
        time.sleep(0.05)
    return time.monotonic() - t0


def _seen(cri, cid: str) -> tuple[str, str, str]:
    return cri.spec_cpus(cid), cri.cgroup_cpus(cid), cri.proc_cpus(cid)


@pytest.fixture
def slow_node(containerd_version):
    """``(runtime, cri client, workdir, flag)``: a private runtime whose ``runc update`` is
    slow while ``flag`` exists, and SHARED running BestEffort containers on it."""
    from tests.e2e.conftest import require_e2e

    require_e2e(containerd_version)
    wd = Path(tempfile.mkdtemp(prefix="e2e-pass-", dir="/tmp"))
    flag = wd / "slow-update"
    kind = SlowUpdateCrio if containerd_version == "crio" else SlowUpdateContainerd
    c = kind(containerd_version, wd, flag).start()
    cri = c.cri_client()
    try:
        yield c, cri, wd, flag
    finally:
        flag.unlink(missing_ok=True)
        errors = cri.cleanup()
        cri.close()
        problems = c.stop()
        cg.remove_empty_kubepods()
        if not os.environ.get("NRI_E2E_KEEP") and not c.shim_processes():
            shutil.rmtree(wd, ignore_errors=True)
    assert not errors and not problems, (errors, problems)


def _start_pass(c, cri, plugin, flag: Path
                ) -> tuple[list[str], str, Callable[[], dict[str, str]]]:
    """SHARED BestEffort containers running on 0-1, then a Guaranteed 1-CPU container whose
    start sets off the shrink pass, slowed; returns once the pass is seen under way: (shared
    ids, the Guaranteed id, a reader of the shared containers' cgroup cpusets)."""
    want = "async" if c.version == "2.4" else "cri"
    assert f"shared pool update mode {want}" in plugin.log_text(), plugin.log_text()[-2000:]
    shared = []
    for i in range(SHARED):
        cid = cri.create_container(cri.run_pod(f"be{i}", "BestEffort"), "app")
        cri.start_container(cid)
        shared.append(cid)
    assert all(_seen(cri, cid) == ("0-1",) * 3 for cid in shared)
    flag.touch()
    gid = cri.create_container(cri.run_pod("g", "Guaranteed"), "app", requests=G1, limits=G1)
    cri.start_container(gid)
    assert _seen(cri, gid) == ("1",) * 3
    cpus = _cgroup_reader(cri, shared)  # (paths taken before the pass)
    # under way: a shared container's cgroup already on 0, another's not yet (read from
    # cgroupfs: the runtime's ContainerStatus of a container being updated waits for the
    # update's end, containerd 2.1.9 holding the container's status lock throughout)
    _wait(lambda: "0" in cpus().values() and "0-1" in cpus().values(), SETTLE, cpus)
    return shared, gid, cpus


def _cgroup_reader(cri, ids: list[str]) -> Callable[[], dict[str, str]]:
    """``{id: cgroup cpuset}`` of ``ids``, read straight from cgroupfs (paths taken now)."""
    paths = {cid: cri.cgroups_path(cid) for cid in ids}
    return lambda: {cid: cg.read_cgroup_file("cpuset", path, "cpuset.cpus")
                    for cid, path in paths.items()}


def test_shared_container_created_while_a_pass_runs(slow_node):
    c, cri, wd, flag = slow_node
    # containerd 2.4 (async): the pass is one UpdateContainers of the 5 containers (10 s+
    # with the slowed runc update); with a fixed 10 s deadline containerd cancelled the
    # updates still under way and 2 stayed on 0-1 (seen 2 of 2, 2026-12-06); the deadline
    # now grows after a call without an answer (transport/stub.py): passed 3 of 3 after it
    plugin = start_plugin(c, wd)
    try:
        late = cri.run_pod("late", "BestEffort")  # its sandbox before the pass
        shared, gid, cpus = _start_pass(c, cri, plugin, flag)
        new = cri.create_container(late, "app")
        # created while the pass had containers left to move (containerd 2.1.9 answers the
        # CreateContainer after the UpdateContainerResources in flight: one slowed update)
        still = [cid for cid, s in cpus().items() if s == "0-1"]
        assert still, "the pass ended before the new container was created"
        cri.start_container(new)
        _wait(lambda: all(_seen(cri, cid) == ("0",) * 3 for cid in [*shared, new]), SETTLE,
              lambda: {cid[:12]: _seen(cri, cid) for cid in [*shared, new]})
        flag.unlink()
        time.sleep(1.0)  # nothing moves it afterwards
        assert _seen(cri, new) == ("0",) * 3
        assert _seen(cri, gid) == ("1",) * 3
        print(f"\n{c.version}: a shared container created while {len(still)} of {SHARED} "
              f"shared containers were still to be moved: spec/cgroup/proc "
              f"{_seen(cri, new)}")
    finally:
        plugin.stop()


def test_plugin_killed_in_the_middle_of_a_pass(slow_node):
    c, cri, wd, flag = slow_node
    if c.version == "2.4":
        pytest.skip("containerd 2.4's default (async) sends a pass as one UpdateContainers, "
                    "which the runtime applies whole after the plugin's death: no pass is "
                    "left half done (the restarts tests cover the relaunch there)")
    plugin = start_plugin(c, wd)
    try:
        shared, gid, cpus = _start_pass(c, cri, plugin, flag)
        plugin.kill()  # SIGKILL, the pass under way
        plugin.wait(10)
        killed_at = time.monotonic()
        flag.unlink()
        time.sleep(UPDATE_DELAY_S + 1)  # the call in flight at the kill has ended
        left = [cid for cid, s in cpus().items() if s != "0"]
        assert left, "every shared container was moved before the kill landed"
        since = plugin.log_offset()
        plugin = start_plugin(c, wd)
        t = _wait(lambda: all(_seen(cri, cid) == ("0",) * 3 for cid in shared), SETTLE,
                  lambda: {cid[:12]: _seen(cri, cid) for cid in shared})
        assert _seen(cri, gid) == ("1",) * 3
        time.sleep(1.0)  # and it stays so
        assert all(_seen(cri, cid) == ("0",) * 3 for cid in shared)
        body = json.loads((wd / "state" / CHECKPOINT_NAME).read_text())["data"]
        entries = [cpus for pod in body.get("entries", {}).values() for cpus in pod.values()]
        assert entries == ["1"], body  # the Guaranteed container's CPU, assigned once
        log = plugin.log_text(since)
        assert re.search(r"synchronize pods=\d+ containers=\d+", log), log[-2000:]
        print(f"\n{c.version}: plugin SIGKILLed with {len(left)} of {SHARED} shared containers "
              f"not yet moved; all on 0 (spec, cgroup, /proc) "
              f"{time.monotonic() - killed_at:.1f} s after the kill ({t:.1f} s after the "
              f"relaunch)")
    finally:
        plugin.stop()
