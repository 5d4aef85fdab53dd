"""Starting nri-cpumgr against a test containerd, exactly as a user runs it (CLI + YAML)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.harness import Containerd, PluginProcess

PLUGIN_NAME = "cpumgr"
PLUGIN_INDEX = "90"


def write_config(workdir: Path, containerd: Containerd, **keys: Any) -> Path:
    cfg = {
        "pluginName": PLUGIN_NAME,
        "pluginIndex": PLUGIN_INDEX,
        "socketPath": str(containerd.nri_socket),
        # this containerd's CRI socket, for sharedPoolUpdateMode cri (what auto takes before
        # containerd 2.4): the DaemonSet mounts the runtime's, at its default path
        "containerRuntimeEndpoint": str(containerd.cri_socket),
        "stateDirectory": str(workdir / "state"),
        "cpuManagerPolicy": "static",
        "reservedSystemCPUs": "0",
        # never adopt the host's kubelet checkpoints (a kubelet may run on a development
        # machine); tests/e2e/test_adopt_kubelet_node.py passes its own directory
        "kubeletStateDirectory": "",
    }
    cfg.update(keys)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def start_plugin(
    containerd: Containerd, workdir: Path, *, sysfs_root: Path | None = None,
    ready_timeout: float = 15.0, **keys: Any
) -> PluginProcess:
    """Run ``nri-cpumgr run --config ...`` and wait until containerd has it registered
    (``ready_timeout`` seconds per step: raise it in slow QEMU guests)."""
    cfg = write_config(workdir, containerd, **keys)
    argv = [sys.executable, "-m", "nri_cpumgr", "run", "--config", str(cfg)]
    if sysfs_root is not None:
        argv += ["--sysfs-root", str(sysfs_root)]
    since = containerd.log_offset()
    p = PluginProcess(argv, workdir / "plugin.log").start()
    try:
        containerd.wait_plugin_ready(PLUGIN_NAME, PLUGIN_INDEX, timeout=ready_timeout,
                                     since=since)
        p.wait_for_log("registered as", timeout=ready_timeout)
        # an external plugin always gets a Synchronize; its log line is written by the
        # logging thread, possibly just after containerd logged the plugin as connected
        p.wait_for_log("synchronize pods=", timeout=ready_timeout)
    except Exception:
        p.stop()
        raise AssertionError("plugin did not register:\n" + p.log_text()[-3000:]) from None
    return p


def eventually(fn: Callable[[], Any], expect: Any, timeout: float = 5.0) -> Any:
    """Poll ``fn()`` until it equals ``expect``; return the last value (for the assert)."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v == expect or time.monotonic() > deadline:
            return v
        time.sleep(0.05)
