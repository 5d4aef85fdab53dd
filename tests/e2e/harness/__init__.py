"""End-to-end harness: a real containerd (or CRI-O: :class:`Crio`) with NRI, driven over CRI
like the kubelet drives it.

Public API: :class:`Containerd`, :class:`CRIClient`, :class:`PluginProcess`, the image
builders (:func:`build_images`, :data:`BUSYBOX_IMAGE`, :data:`PAUSE_IMAGE`), the cgroup
readers/cleaners in :mod:`.cgroups` and :func:`e2e_missing` (why e2e tests cannot run here).
"""

from __future__ import annotations

from . import cgroups
from .containerd import Containerd, ContainerdError
from .cri import (
    CRIClient,
    cgroup_parent,
    linux_resources,
    load_cri,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
)
from .crio import Crio, runtime_daemon
from .images import BUSYBOX_IMAGE, PAUSE_IMAGE, build_images
from .paths import VERSIONS
from .plugin import PluginProcess
from .requirements import e2e_missing

__all__ = [
    "BUSYBOX_IMAGE",
    "PAUSE_IMAGE",
    "VERSIONS",
    "CRIClient",
    "Containerd",
    "ContainerdError",
    "Crio",
    "PluginProcess",
    "build_images",
    "cgroup_parent",
    "cgroups",
    "e2e_missing",
    "linux_resources",
    "load_cri",
    "milli_cpu_to_quota",
    "milli_cpu_to_shares",
    "runtime_daemon",
]
