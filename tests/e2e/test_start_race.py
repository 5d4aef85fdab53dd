"""A shared container between its task's creation and its RUNNING state when the shrink reaches
it (found on the kubelet 1.37 cluster: the kubelet starts pods in parallel), in both
shared-pool update modes.

containerd's StartContainer creates the task (``runc create``: the cgroup is made with the
spec's cpuset), then starts it (``runc start``), and only then marks the container running.
An update that arrives in between (here: the shrink a Guaranteed container's CreateContainer
reply carries in ``reply`` mode, or the plugin's UpdateContainers after its start in ``async``
mode) finds the container "not running" and is written to its spec
alone (containerd 2.1.9 ``internal/cri/server/container_update_resources.go``
``updateContainerResources``): the cgroup keeps the old cpuset. The window is widened here,
deterministically, by a runc wrapper that waits 3 s before ``runc start`` of the one container
under test.

The plugin counts a container updated before its PostStartContainer as stale again at that
event and sends its update once more: in ``cri`` and ``async`` mode with the next pass (the
test passes), in ``reply`` mode only in the reply to the runtime's next CreateContainer,
UpdateContainer or StopContainer on the node (an UpdateContainers of its own is what
deadlocks containerd 1.7 and 2.1), so until then the container stays on the exclusive CPU:
the test marks itself xfail when it sees exactly that, after asserting every step before it
and that the next CreateContainer's reply moves the container.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.harness import Containerd
from tests.e2e.harness import cgroups as cg
from tests.e2e.plugin_run import start_plugin

G1 = {"cpu": "1", "memory": "100Mi"}
START_DELAY_S = 3


def _wait(pred, timeout: float) -> None:
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout, f"not reached within {timeout} s"
        time.sleep(0.02)


class SlowStartContainerd(Containerd):
    """A :class:`Containerd` whose runc is a wrapper: ``runc start`` waits START_DELAY_S while
    the file ``flag`` exists (the real runc otherwise)."""

    def __init__(self, version: str, workdir: Path, flag: Path) -> None:
        super().__init__(version, workdir)
        self.wrapper = workdir / "runc-slow-start.sh"
        self.wrapper.write_text(
            "#!/bin/sh\n"
            'for a in "$@"; do\n'
            f'  if [ "$a" = start ] && [ -e "{flag}" ]; then sleep {START_DELAY_S}; break; fi\n'
            "done\n"
            f'exec "{self.runc}" "$@"\n')
        self.wrapper.chmod(0o755)

    def config_text(self) -> str:
        text = super().config_text()
        real = f'BinaryName = "{self.runc}"'
        assert real in text, "containerd config without the runc BinaryName"
        return text.replace(real, f'BinaryName = "{self.wrapper}"')


@pytest.mark.parametrize("mode", ["reply", "default"])
def test_shrink_reaching_a_starting_container_reaches_its_cgroup(containerd_version, mode):
    from tests.e2e.conftest import require_e2e

    require_e2e(containerd_version)
    wd = Path(tempfile.mkdtemp(prefix="e2e-race-", dir="/tmp"))
    flag = wd / "slow-start"
    c = SlowStartContainerd(containerd_version, wd, flag).start()
    cri = c.cri_client()
    plugin = None
    try:
        # "default": the shipped auto (cri before containerd 2.4, async from 2.4 on)
        plugin = start_plugin(c, wd, **({} if mode == "default" else
                                         {"sharedPoolUpdateMode": mode}))
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        gpod = cri.run_pod("g", "Guaranteed")  # its sandbox started at full speed
        flag.touch()
        starting = threading.Thread(target=cri.start_container, args=(be,))
        starting.start()
        time.sleep(1.0)  # runc create done, runc start waiting: the container is not running
        gid = cri.create_container(gpod, "app", requests=G1, limits=G1)
        if mode != "reply":  # the plugin's pass follows the Guaranteed container's start
            cri.start_container(gid)
            _wait(lambda: cri.spec_cpus(be) == "0", START_DELAY_S + 2)
        starting.join(30)
        assert not starting.is_alive()
        flag.unlink()
        if mode == "reply":
            cri.start_container(gid)
        assert (cri.spec_cpus(gid), cri.cgroup_cpus(gid), cri.proc_cpus(gid)) == ("1",) * 3
        how = "in the reply" if mode == "reply" else \
            r"in \d+ (CRI UpdateContainerResources|UpdateContainers) calls"
        assert re.search(rf"shared pool: \d+ containers moved to 0 {how}",
                         plugin.log_text()), plugin.log_text()[-2000:]
        # the shrink reached the runtime: the spec has it ...
        assert cri.spec_cpus(be) == "0"
        time.sleep(2)
        # ... and the running container must have it too
        got = (cri.cgroup_cpus(be), cri.proc_cpus(be))
        if got == ("0-1", "0-1") and mode == "reply":
            # the re-send rides in the reply to the node's next CreateContainer
            cri.create_container(cri.run_pod("next", "BestEffort"), "app")
            _wait(lambda: (cri.cgroup_cpus(be), cri.proc_cpus(be)) == ("0", "0"), 5)
            pytest.xfail("open defect: the shrink reached the container between its runc "
                         "create and its RUNNING state, landed in its spec only (cgroup and "
                         "/proc keep CPU 1); in reply mode it is sent again only in the reply "
                         "to the runtime's next CreateContainer/UpdateContainer/StopContainer")
        assert got == ("0", "0")
    finally:
        if plugin is not None:
            plugin.stop()
        errors = cri.cleanup()
        cri.close()
        problems = c.stop()
        cg.remove_empty_kubepods()
        if not os.environ.get("NRI_E2E_KEEP") and not c.shim_processes():
            shutil.rmtree(wd, ignore_errors=True)
    assert not errors and not problems, (errors, problems)
