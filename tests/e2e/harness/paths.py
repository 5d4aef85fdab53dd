"""Where the project-local runtime binaries live (fetched by ``scripts/fetch-runtime.sh``).

The runtime directory is ``<repo>/.runtime`` unless ``NRI_CPUMGR_RUNTIME`` names another one.
Layout (Debian packages unpacked with ``dpkg -x``):
``containerd-1.7/usr/bin/{containerd,ctr,containerd-shim-runc-v2}``, the same for
``containerd-2.1``, ``root/usr/sbin/runc``, ``root/bin/busybox``, ``schema/cri/...``.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
RUNTIME_DIR = Path(os.environ.get("NRI_CPUMGR_RUNTIME", REPO / ".runtime"))
VERSIONS: tuple[str, ...] = ("1.7", "2.1")
RUNC = RUNTIME_DIR / "root/usr/sbin/runc"
BUSYBOX = RUNTIME_DIR / "root/bin/busybox"
IMAGE_CACHE = RUNTIME_DIR / "images"
CRI_PROTO = (
    RUNTIME_DIR / "schema/cri/usr/share/gocode/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"
)


def containerd_bin_dir(version: str) -> Path:
    """Directory holding ``containerd``, ``ctr`` and the runc shim for ``version`` ("1.7"/"2.1").

    Raises ValueError for a version we do not fetch.
    """
    if version not in VERSIONS:
        raise ValueError(f"unsupported containerd version {version!r}; known: {VERSIONS}")
    return RUNTIME_DIR / f"containerd-{version}/usr/bin"


def missing_binaries(version: str) -> list[str]:
    """Paths (as strings) of the files a containerd ``version`` run needs that do not exist."""
    d = containerd_bin_dir(version)
    need = [d / "containerd", d / "ctr", d / "containerd-shim-runc-v2", RUNC, BUSYBOX, CRI_PROTO]
    return [str(p) for p in need if not p.exists()]
