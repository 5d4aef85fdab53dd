"""Where the project-local runtime binaries live (fetched by ``scripts/fetch-runtime.sh``).

The runtime directory is ``<repo>/.runtime`` unless ``NRI_CPUMGR_RUNTIME`` names another one.
Layout (Debian packages unpacked with ``dpkg -x``):
``containerd-1.7/usr/bin/{containerd,ctr,containerd-shim-runc-v2}``, the same for
``containerd-2.1``, ``root/usr/sbin/runc``, ``root/bin/busybox``, ``schema/cri/...``.

containerd 2.4 and the runc it runs with are not Debian's: ``scripts/modern/build.sh containerd
runc`` builds them from Go modules into the machine-wide cache
(``${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}/modern/<component>-<version>/bin``, versions in
``scripts/modern/versions.env``).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
RUNTIME_DIR = Path(os.environ.get("NRI_CPUMGR_RUNTIME", REPO / ".runtime"))
VERSIONS: tuple[str, ...] = ("1.7", "2.1", "2.4")
DEFAULT_VERSIONS: tuple[str, ...] = ("1.7", "2.1")
"""What ``NRI_E2E_CONTAINERD`` defaults to (2.4 is run when named: ``make e2e-2.4``)."""
MODERN_VERSIONS = REPO / "scripts/modern/versions.env"
RUNC = RUNTIME_DIR / "root/usr/sbin/runc"
BUSYBOX = RUNTIME_DIR / "root/bin/busybox"
IMAGE_CACHE = RUNTIME_DIR / "images"
CRI_PROTO = (
    RUNTIME_DIR / "schema/cri/usr/share/gocode/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"
)


def modern_versions() -> dict[str, str]:
    """``scripts/modern/versions.env`` as a mapping (``CONTAINERD_VERSION`` -> ``v2.4.2``)."""
    out = {}
    for line in MODERN_VERSIONS.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def modern_bin_dir(component: str, version_key: str) -> Path:
    """``bin/`` of a scripts/modern/build.sh component (e.g. ``("containerd",
    "CONTAINERD_VERSION")``) in the machine-wide cache, built or not."""
    cache = Path(os.environ.get("NRI_CPUMGR_CACHE", "/var/cache/nri-cpumgr"))
    return cache / "modern" / f"{component}-{modern_versions()[version_key]}" / "bin"


def containerd_bin_dir(version: str) -> Path:
    """Directory holding ``containerd``, ``ctr`` and the runc shim for ``version``
    ("1.7"/"2.1": Debian's, in the runtime dir; "2.4": the modern build's).

    Raises ValueError for a version we do not fetch.
    """
    if version not in VERSIONS:
        raise ValueError(f"unsupported containerd version {version!r}; known: {VERSIONS}")
    if version == "2.4":
        return modern_bin_dir("containerd", "CONTAINERD_VERSION")
    return RUNTIME_DIR / f"containerd-{version}/usr/bin"


def runc_path(version: str) -> Path:
    """The runc containerd ``version`` runs: Debian's 1.1.5 for 1.7/2.1, the modern build's
    (runc 1.5.3) for 2.4."""
    if version == "2.4":
        return modern_bin_dir("runc", "RUNC_VERSION") / "runc"
    return RUNC


def missing_binaries(version: str) -> list[str]:
    """Paths (as strings) of the files a containerd ``version`` run needs that do not exist."""
    d = containerd_bin_dir(version)
    need = [d / "containerd", d / "ctr", d / "containerd-shim-runc-v2", runc_path(version),
            BUSYBOX, CRI_PROTO]
    missing = [str(p) for p in need if not p.exists()]
    if missing and version == "2.4":
        missing.append("(build them: scripts/modern/build.sh containerd runc)")
    return missing
