"""Registry-free container images for the end-to-end tests.

Two images share one layer built from the static busybox binary (``/bin/busybox`` plus a
symlink per applet, ``/etc/passwd``, ``/etc/group``, empty ``/tmp``, ``/proc``, ``/sys``,
``/dev``):

* ``docker.io/local/busybox:1`` - default command ``sh``;
* ``docker.io/local/pause:1`` - entrypoint ``/bin/sleep``, cmd ``inf`` (the sandbox image).

Each is written as a docker-archive tarball (``manifest.json`` with ``RepoTags``, the image
config, ``<digest>/layer.tar``), the format ``ctr images import`` reads (containerd
``core/images/archive``). The layer is byte-for-byte reproducible (fixed mtimes, owners and
order), so the cached tarballs in ``.runtime/images/`` are rebuilt only when the busybox binary
or this builder changes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from .paths import BUSYBOX, IMAGE_CACHE

BUSYBOX_IMAGE = "docker.io/local/busybox:1"
PAUSE_IMAGE = "docker.io/local/pause:1"
_BUILDER_VERSION = "1"
_MTIME = 0
_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ImageArchive:
    """A built docker-archive tarball: ``name`` is its RepoTag, ``path`` the file."""

    name: str
    path: Path


def _go_arch() -> str:
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le",
            "s390x": "s390x", "riscv64": "riscv64"}.get(m, m)


def _applets(busybox: Path) -> list[str]:
    out = subprocess.run([str(busybox), "--list"], check=True, capture_output=True, text=True)
    return sorted({a.strip() for a in out.stdout.split() if a.strip() and "/" not in a})


def _add(tar: tarfile.TarFile, name: str, *, mode: int, data: bytes | None = None,
         kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.mtime = _MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.type = kind
    if kind == tarfile.SYMTYPE:
        info.linkname = link
    if data is not None:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def build_layer(busybox: Path = BUSYBOX) -> bytes:
    """Return the uncompressed layer tar (bytes) for the busybox root filesystem.

    Raises FileNotFoundError if ``busybox`` is missing, CalledProcessError if it cannot list
    its applets.
    """
    binary = Path(busybox).read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for d, mode in (("bin", 0o755), ("dev", 0o755), ("etc", 0o755), ("proc", 0o555),
                        ("root", 0o700), ("sys", 0o555), ("tmp", 0o1777), ("usr", 0o755),
                        ("var", 0o755)):
            _add(tar, d + "/", mode=mode, kind=tarfile.DIRTYPE)
        _add(tar, "bin/busybox", mode=0o755, data=binary)
        for applet in _applets(Path(busybox)):
            if applet != "busybox":
                _add(tar, f"bin/{applet}", mode=0o777, kind=tarfile.SYMTYPE, link="busybox")
        _add(tar, "etc/passwd", mode=0o644,
             data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        _add(tar, "etc/group", mode=0o644, data=b"root:x:0:\nnogroup:x:65534:\n")
    return buf.getvalue()


def write_docker_archive(path: Path, name: str, layer: bytes, *, entrypoint: list[str] | None,
                         cmd: list[str]) -> ImageArchive:
    """Write a single-image docker-archive tarball at ``path`` tagged ``name``.

    ``layer`` is an uncompressed tar; ``entrypoint``/``cmd`` go into the image config.
    """
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": _go_arch(),
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"Env": [_PATH_ENV], "Entrypoint": entrypoint, "Cmd": cmd,
                   "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z",
                     "created_by": "tests/e2e/harness/images.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.split(":", 1)[1] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [name], "Layers": [layer_name]}]
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    with tarfile.open(tmp, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        _add(tar, layer_name.split("/")[0] + "/", mode=0o755, kind=tarfile.DIRTYPE)
        _add(tar, layer_name, mode=0o644, data=layer)
        _add(tar, config_name, mode=0o644, data=config_bytes)
        _add(tar, "manifest.json", mode=0o644, data=json.dumps(manifest).encode())
    os.replace(tmp, path)
    return ImageArchive(name, path)


def build_images(cache: Path = IMAGE_CACHE, busybox: Path = BUSYBOX) -> list[ImageArchive]:
    """Build (or reuse from ``cache``) the busybox and pause archives; return both.

    The cache key is the SHA-256 of the busybox binary plus the builder version.
    """
    cache.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(Path(busybox).read_bytes() + _BUILDER_VERSION.encode()).hexdigest()
    stamp = cache / ".stamp"
    images = [ImageArchive(BUSYBOX_IMAGE, cache / "busybox.tar"),
              ImageArchive(PAUSE_IMAGE, cache / "pause.tar")]
    if stamp.is_file() and stamp.read_text().strip() == key and all(
        i.path.is_file() for i in images
    ):
        return images
    layer = build_layer(busybox)
    write_docker_archive(images[0].path, BUSYBOX_IMAGE, layer, entrypoint=None, cmd=["sh"])
    write_docker_archive(images[1].path, PAUSE_IMAGE, layer, entrypoint=["/bin/sleep"],
                         cmd=["inf"])
    stamp.write_text(key + "\n")
    return images


def import_images(ctr: Path, address: str, images: list[ImageArchive] | None = None,
                  namespace: str = "k8s.io", timeout: float = 60.0) -> None:
    """Import the archives into containerd at ``address`` with ``ctr images import``.

    Raises subprocess.CalledProcessError (with ctr's output) if an import fails.
    """
    for img in images if images is not None else build_images():
        subprocess.run(
            [str(ctr), "-a", address, "-n", namespace, "images", "import", str(img.path)],
            check=True, capture_output=True, text=True, timeout=timeout,
        )
