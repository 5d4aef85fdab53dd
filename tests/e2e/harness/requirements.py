"""What the end-to-end tests need from this machine, and what is missing."""

from __future__ import annotations

import importlib.util
import os

from . import cgroups
from .paths import missing_binaries


def e2e_missing(version: str) -> list[str]:
    """Reasons a real-containerd ``version`` test cannot run here (empty list = can run).

    Needs: root, a cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset, the binaries of
    scripts/fetch-runtime.sh, and grpcio + grpcio-tools.
    """
    reasons = []
    if os.geteuid() != 0:
        reasons.append("not root")
    if not cgroups.cgroup_v1_cpuset_available():
        reasons.append("no cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset")
    missing = missing_binaries(version)
    if missing:
        reasons.append("runtime files missing (run scripts/fetch-runtime.sh): "
                       + ", ".join(missing))
    for mod in ("grpc", "grpc_tools"):
        if importlib.util.find_spec(mod) is None:
            reasons.append(f"python module {mod} not installed")
    return reasons
