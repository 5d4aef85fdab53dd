"""NUMA affinity of devices, from sysfs.

A device node (``/dev/...``) is known to sysfs by its type and number:
``/sys/dev/char/<major>:<minor>`` and ``/sys/dev/block/<major>:<minor>`` are symlinks to the
device's directory under ``/sys/devices``. A PCI function's directory carries ``numa_node``
(-1 when the platform gives no affinity); class devices (``uio0``, ``nvme0n1``) sit below
their PCI function, reachable through ``device`` links and parent directories. This is the
information the kubelet's device plugins report as a device's ``TopologyInfo``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

from nri_cpumgr.sysfs.discovery import read_int

if TYPE_CHECKING:
    from pathlib import Path

_MAX_LINKS = 40  # like the kernel's ELOOP limit


def _resolve_in_root(root: Path, path: Path) -> Path:
    """Resolve symlinks in ``path`` (which lies under ``root``) as if ``root`` were ``/``:
    absolute link targets are re-rooted, ``..`` never climbs above ``root``. Components that
    do not exist are kept as they are."""
    from pathlib import Path

    root = Path(os.path.abspath(root))
    rel = Path(os.path.abspath(path)).relative_to(root)
    todo = list(rel.parts)
    done: list[str] = []
    links = 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        candidate = root.joinpath(*done, part)
        if candidate.is_symlink():
            links += 1
            if links > _MAX_LINKS:
                raise OSError(f"too many levels of symbolic links resolving {path}")
            target = os.readlink(candidate)
            if os.path.isabs(target):
                done = []
                target = target.lstrip("/")
            todo = list(Path(target).parts) + todo
            continue
        done.append(part)
    return root.joinpath(*done)


def device_numa_node(
    root: str | Path, kind: Literal["c", "b"], major: int, minor: int
) -> int | None:
    """The NUMA node of the hardware behind device node ``kind`` ``major``:``minor``.

    ``kind`` is ``"c"`` (character device, ``sys/dev/char``) or ``"b"`` (block device,
    ``sys/dev/block``), as in an OCI ``linux.devices[].type``. The device's sysfs directory is
    found through ``<root>/sys/dev/<char|block>/<major>:<minor>``; the first ``numa_node`` file
    met is read, looking in that directory, then along its ``device`` link, then in each parent
    directory up to ``<root>/sys/devices``.

    Returns the node id (>= 0), or ``None`` when the device has no NUMA affinity: the device
    is not in sysfs, no ``numa_node`` file exists on the path (virtual devices), or it holds
    -1. Raises :class:`ValueError` for a ``kind`` other than ``"c"``/``"b"`` and
    :class:`~nri_cpumgr.sysfs.discovery.SysfsParseError` for a ``numa_node`` that is not an
    integer.
    """
    from pathlib import Path  # (imported once a container has devices, not at the start)

    if kind not in ("c", "b"):
        raise ValueError(f"device kind must be 'c' or 'b', got {kind!r}")
    root = Path(os.path.abspath(root))
    sys_devices = root / "sys" / "devices"
    link = root / "sys" / "dev" / ("char" if kind == "c" else "block") / f"{major}:{minor}"
    if not (link.is_symlink() or link.exists()):
        return None
    start = _resolve_in_root(root, link)

    candidates: list[Path] = [start]
    device_link = start / "device"
    if device_link.is_symlink() or device_link.exists():
        cur = _resolve_in_root(root, device_link)
    else:
        cur = start.parent
    while cur != sys_devices and sys_devices in cur.parents:
        candidates.append(cur)
        cur = cur.parent

    for d in candidates:
        f = d / "numa_node"
        if f.is_file():
            node = read_int(f)
            return node if node >= 0 else None
    return None
