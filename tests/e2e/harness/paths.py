"""Where the project-local runtime binaries live (fetched by ``scripts/fetch-runtime.sh``).

The runtime directory is ``<repo>/.runtime`` unless ``NRI_CPUMGR_RUNTIME`` names another one.
Layout (Debian packages unpacked with ``dpkg -x``):
``containerd-1.7/usr/bin/{containerd,ctr,containerd-shim-runc-v2}``, the same for
``containerd-2.1``, ``root/usr/sbin/runc``, ``root/bin/busybox``, ``schema/cri/...``.

containerd 2.4 and the runc it runs with are not Debian's: ``scripts/modern/build.sh containerd
runc`` builds them from Go modules into the machine-wide cache
(``${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}/modern/<component>-<version>/bin``, versions in
``scripts/modern/versions.env``). So does CRI-O (``scripts/modern/build.sh crio``: crio, pinns,
copyimg), the runtime "version" ``crio``; its conmon and crun (or runc) are Debian's
(``apt-get install conmon``; crun is optional).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
RUNTIME_DIR = Path(os.environ.get("NRI_CPUMGR_RUNTIME", REPO / ".runtime"))
VERSIONS: tuple[str, ...] = ("1.7", "2.1", "2.4", "crio")
DEFAULT_VERSIONS: tuple[str, ...] = ("1.7", "2.1")
"""What ``NRI_E2E_CONTAINERD`` defaults to (2.4 and crio are run when named: ``make e2e-2.4``,
``make e2e-crio``)."""
CRIO_RUNTIME_ENV = "NRI_E2E_CRIO_RUNTIME"
"""``runc`` (default) or ``crun``: the OCI runtime CRI-O runs in the e2e harness. Debian
bookworm's crun 1.8.1 refuses the spec CRI-O 1.34 writes ("unknown version specified")."""
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


def crio_bin_dir() -> Path:
    """``bin/`` of the modern build's CRI-O (crio, pinns, copyimg), built or not."""
    return modern_bin_dir("crio", "CRIO_VERSION")


def crio_runtime() -> tuple[str, Path]:
    """``(name, path)`` of the OCI runtime CRI-O runs: the runc of the runtime dir (Debian's
    1.1.5), or with ``NRI_E2E_CRIO_RUNTIME=crun`` Debian's ``/usr/bin/crun``.
    Raises ValueError for another name."""
    name = os.environ.get(CRIO_RUNTIME_ENV, "runc")
    if name == "crun":
        return name, Path("/usr/bin/crun")
    if name == "runc":
        return name, RUNC
    raise ValueError(f"{CRIO_RUNTIME_ENV}={name!r}: expected crun or runc")


def containerd_bin_dir(version: str) -> Path:
    """Directory holding ``containerd``, ``ctr`` and the runc shim for ``version``
    ("1.7"/"2.1": Debian's, in the runtime dir; "2.4": the modern build's).

    Raises ValueError for a version we do not fetch.
    """
    if version not in VERSIONS:
        raise ValueError(f"unsupported containerd version {version!r}; known: {VERSIONS}")
    if version == "2.4":
        return modern_bin_dir("containerd", "CONTAINERD_VERSION")
    if version == "crio":
        return crio_bin_dir()
    return RUNTIME_DIR / f"containerd-{version}/usr/bin"


def runc_path(version: str) -> Path:
    """The runc containerd ``version`` runs: Debian's 1.1.5 for 1.7/2.1, the modern build's
    (runc 1.5.3) for 2.4."""
    if version == "2.4":
        return modern_bin_dir("runc", "RUNC_VERSION") / "runc"
    return RUNC


def missing_binaries(version: str) -> list[str]:
    """Paths (as strings) of the files a containerd ``version`` run needs that do not exist."""
    if version == "crio":
        need = [crio_bin_dir() / b for b in ("crio", "pinns", "copyimg")]
        need += [Path("/usr/bin/conmon"), crio_runtime()[1], BUSYBOX, CRI_PROTO]
        missing = [str(p) for p in need if not p.exists()]
        if missing:
            missing.append("(build CRI-O: scripts/modern/build.sh crio; conmon: "
                           "apt-get install conmon)")
        return missing
    d = containerd_bin_dir(version)
    need = [d / "containerd", d / "ctr", d / "containerd-shim-runc-v2", runc_path(version),
            BUSYBOX, CRI_PROTO]
    missing = [str(p) for p in need if not p.exists()]
    if missing and version == "2.4":
        missing.append("(build them: scripts/modern/build.sh containerd runc)")
    return missing
