"""What the end-to-end tests need from this machine, and what is missing."""

from __future__ import annotations

import importlib.util
import os

from . import cgroups
from .paths import missing_binaries


def e2e_missing(version: str) -> list[str]:
    """Reasons a real-containerd ``version`` test cannot run here (empty list = can run).

    Needs: root, a cpuset controller (cgroup v1 ``/sys/fs/cgroup/cpuset``, or v2 with
    ``cpuset`` in ``/sys/fs/cgroup/cgroup.controllers``), the binaries of
    scripts/fetch-runtime.sh, grpcio + grpcio-tools, and a machine that is not a live node
    (:func:`cgroups.live_node_reasons`; ``NRI_E2E_ALLOW_LIVE_NODE=1`` overrides that check).
    """
    reasons = []
    if os.geteuid() != 0:
        reasons.append("not root")
    if not cgroups.cpuset_available():
        v = cgroups.cgroup_version()
        reasons.append("no cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset" if v == 1 else
                       "cgroup v2 without the cpuset controller in "
                       "/sys/fs/cgroup/cgroup.controllers")
    if os.environ.get(cgroups.ALLOW_LIVE_NODE_ENV) != "1":
        reasons += [f"this looks like a live node: {r} (set {cgroups.ALLOW_LIVE_NODE_ENV}=1 to "
                    "run anyway)" for r in cgroups.live_node_reasons()]
    missing = missing_binaries(version)
    if missing:
        reasons.append("runtime files missing (run scripts/fetch-runtime.sh): "
                       + ", ".join(missing))
    for mod in ("grpc", "grpc_tools"):
        if importlib.util.find_spec(mod) is None:
            reasons.append(f"python module {mod} not installed")
    return reasons
