"""Which filesystem holds a path, from the mount table of ``/proc/self/mountinfo`` (the
kernel's ``Documentation/filesystems/proc.rst``, "/proc/<pid>/mountinfo"): used to refuse a
state directory or a log file on a pseudo filesystem (``/proc``, ``/sys``, ``/dev``, cgroup
trees), where root passes every permission check and nothing written is kept. Imports
nothing the start does not load already: the config's checks run before the plugin
registers (issue 34)."""

from __future__ import annotations

import os
from collections import namedtuple

#: Filesystem types that are the kernel's interfaces, not storage: files in them are the
#: kernel's objects (a directory made in a cgroup tree is a cgroup; one made in tracefs'
#: ``instances`` a trace buffer), most refuse new files, none keeps what is written across a
#: reboot.
PSEUDO_FILESYSTEMS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
    "securityfs", "configfs", "bpf", "pstore", "efivarfs", "fusectl", "mqueue",
    "binfmt_misc", "nsfs", "selinuxfs", "hugetlbfs", "rpc_pipefs", "nfsd",
})

MOUNTINFO = "/proc/self/mountinfo"


#: One line of mountinfo: its mount id, its parent's, the mount point (decoded), the type.
#: (collections' namedtuple: ``typing`` is not loaded before the plugin registers.)
Mount = namedtuple("Mount", "id parent point fstype")


def _unescape(field: str) -> str:
    r"""A mountinfo path field with its octal escapes (``\040`` for a blank, ``\134`` for a
    backslash) decoded."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a mountinfo text, in its order (a later mount on the same point is on
    top). Lines of another shape are skipped."""
    out = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
            out.append(Mount(fields[0], fields[1], _unescape(fields[4]), fields[sep + 1]))
        except (ValueError, IndexError):
            continue
    return out


def _within(path: str, point: str) -> bool:
    return point == "/" or path == point or path.startswith(point + "/")


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount holding the absolute, resolved ``path``: the one with the longest mount
    point above it, the last listed of those on one point; None when none is."""
    best = None
    for m in mounts:
        if _within(path, m.point) and (best is None or len(m.point) >= len(best.point)):
            best = m
    return best


def _nearest_existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def pseudo_filesystem(path: str, mountinfo: str = MOUNTINFO) -> str | None:
    """Why the absolute ``path`` (or, when it is not there, its nearest existing ancestor,
    symlinks resolved) is on a pseudo filesystem, as :func:`pseudo_mount` says it; None when
    it is not, or when the mount table cannot be read (nothing to tell by).

    A filesystem on a block device is never one (its device's major number is not 0): that
    case, the usual state directory on the node's disk, is told by one ``stat``, without
    reading the mount table."""
    here = _nearest_existing(path)
    try:
        if os.major(os.stat(here).st_dev) != 0:
            return None
        real = os.path.realpath(here)
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            mounts = parse_mountinfo(f.read())
    except (OSError, ValueError):
        return None
    return pseudo_mount(real, mounts)


def pseudo_mount(path: str, mounts: list[Mount]) -> str | None:
    """Why the absolute, resolved ``path`` is on a pseudo filesystem
    (:data:`PSEUDO_FILESYSTEMS`) by the mount table ``mounts``, as a phrase for a message
    (``"on the proc filesystem mounted on /proc"``; a mount inside a pseudo filesystem's
    tree counts too: ``"on a tmpfs mounted on /sys/fs/cgroup inside the sysfs filesystem on
    /sys"``); None when it is not."""
    found = mount_of(path, mounts)
    if found is None:
        return None
    if found.fstype in PSEUDO_FILESYSTEMS:
        return f"on the {found.fstype} filesystem mounted on {found.point}"
    by_id = {m.id: m for m in mounts}
    seen = {found.id}
    up = by_id.get(found.parent)
    while up is not None and up.id not in seen:
        if up.fstype in PSEUDO_FILESYSTEMS:
            return (f"on a {found.fstype} mounted on {found.point} inside the {up.fstype} "
                    f"filesystem on {up.point}")
        seen.add(up.id)
        up = by_id.get(up.parent)
    return None
