"""Readers for where a container's cpuset and CPU quota show on the host, and cgroup cleanup.

Three views of a cpuset (they must agree after an NRI adjustment; see docs/real-containerd.md):
the OCI spec (``linux.resources.cpu.cpus``), the cgroup v1 ``cpuset`` controller file and the
kernel's ``Cpus_allowed_list`` / ``Mems_allowed_list`` in ``/proc/<pid>/status``.

``cgroupsPath`` forms (runc ``libcontainer/cgroups``): cgroupfs ``/kubepods/.../<id>`` (used
by the kubelet's cgroupfs driver and by these tests) and systemd ``slice:prefix:name``, which
expands to ``/<slice hierarchy>/<prefix>-<name>.scope`` (``a-b-c.slice`` lives in
``/a.slice/a-b.slice/a-b-c.slice``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def expand_slice(slice_name: str) -> str:
    """Return the cgroupfs path of a systemd slice (``a-b.slice`` -> ``/a.slice/a-b.slice``).

    ``-.slice`` (the root slice) and ``""`` give ``/``. Rule: systemd's unit name escaping as
    applied by runc ``systemd.ExpandSlice``. Raises ValueError on a malformed name.
    """
    if slice_name in ("", "-.slice"):
        return "/"
    if not slice_name.endswith(".slice") or "/" in slice_name:
        raise ValueError(f"invalid slice name {slice_name!r}")
    stem = slice_name[: -len(".slice")]
    path, prefix = "", ""
    for part in stem.split("-"):
        if not part:
            raise ValueError(f"invalid slice name {slice_name!r}")
        prefix = f"{prefix}-{part}" if prefix else part
        path += f"/{prefix}.slice"
    return path


def cgroup_relpath(cgroups_path: str) -> str:
    """Turn an OCI ``linux.cgroupsPath`` into a path relative to a controller mount.

    ``/kubepods/besteffort/pod<uid>/<id>`` stays as is (leading ``/`` kept);
    ``kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>`` becomes
    ``/kubepods.slice/kubepods-besteffort.slice/...pod<uid>.slice/cri-containerd-<id>.scope``.
    """
    if ":" in cgroups_path and not cgroups_path.startswith("/"):
        parts = cgroups_path.split(":")
        if len(parts) != 3:
            raise ValueError(f"invalid systemd cgroupsPath {cgroups_path!r}")
        slice_name, prefix, name = parts
        unit = f"{prefix}-{name}.scope" if prefix else name
        base = expand_slice(slice_name or "system.slice")
        return f"{base.rstrip('/')}/{unit}"
    return "/" + cgroups_path.lstrip("/")


def controller_dir(controller: str, cgroups_path: str, root: Path = CGROUP_ROOT) -> Path:
    """``<root>/<controller><relpath>`` for a cgroup v1 controller (``cpuset``, ``cpu``...)."""
    return root / controller / cgroup_relpath(cgroups_path).lstrip("/")


def read_cgroup_file(controller: str, cgroups_path: str, name: str,
                     root: Path = CGROUP_ROOT) -> str:
    """Stripped contents of one cgroup v1 file; raises FileNotFoundError if absent."""
    return (controller_dir(controller, cgroups_path, root) / name).read_text().strip()


def proc_status_field(pid: int, field: str) -> str:
    """Value of ``field`` (e.g. ``Cpus_allowed_list``) in ``/proc/<pid>/status``.

    Raises FileNotFoundError if the process is gone, KeyError if the field is absent.
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == field:
            return value.strip()
    raise KeyError(field)


def host_online_cpus() -> str:
    """The host's online CPU list, as the kernel prints it (``/sys/devices/system/cpu/online``)."""
    return Path("/sys/devices/system/cpu/online").read_text().strip()


def host_online_mems() -> str:
    """The host's NUMA nodes with memory (``/sys/devices/system/node/has_memory``, else online)."""
    for f in ("has_memory", "online"):
        p = Path("/sys/devices/system/node") / f
        if p.is_file():
            return p.read_text().strip()
    return "0"


def v1_controller_mounts() -> dict[str, Path]:
    """Every mounted cgroup v1 hierarchy: {mount-point name: path}, e.g. ``{"cpuset": ...}``.

    Read from ``/proc/self/mounts`` (fstype ``cgroup``); named hierarchies such as
    ``name=systemd`` are included under their directory name.
    """
    mounts: dict[str, Path] = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup":
            p = Path(fields[1])
            mounts[p.name] = p
    return mounts


def cgroup_v1_cpuset_available() -> bool:
    """True when a cgroup v1 cpuset hierarchy is mounted at ``/sys/fs/cgroup/cpuset``."""
    return (CGROUP_ROOT / "cpuset/cpuset.cpus").is_file()


def remove_cgroup_tree(relpath: str, mounts: dict[str, Path] | None = None) -> list[Path]:
    """rmdir ``relpath`` and every cgroup below it, deepest first, in every v1 hierarchy.

    Only empty cgroups can be removed (the kernel refuses others with EBUSY): those are left
    and returned. Missing directories are ignored. Returns the directories that remain.
    """
    rel = relpath.strip("/")
    if not rel:
        raise ValueError("refusing to remove a cgroup hierarchy root")
    left: list[Path] = []
    for base in (mounts if mounts is not None else v1_controller_mounts()).values():
        top = base / rel
        if not top.is_dir():
            continue
        dirs = [Path(d) for d, _, _ in os.walk(top)]
        for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno in (errno.EBUSY, errno.ENOTEMPTY):
                    left.append(d)
                else:
                    raise
    return left


def remove_pod_cgroups(cgroup_parents: list[str]) -> list[Path]:
    """Remove pod-level cgroups (``/kubepods/.../pod<uid>``) that containerd leaves behind.

    Returns what could not be removed (still holding processes).
    """
    left: list[Path] = []
    mounts = v1_controller_mounts()
    for parent in cgroup_parents:
        left += remove_cgroup_tree(cgroup_relpath(parent), mounts)
    return left


def remove_empty_kubepods(root: str = "/kubepods") -> list[Path]:
    """Remove the kubepods QoS tree (``/kubepods/{burstable,besteffort}``) if it is empty.

    Anything still in use stays; returns what remains.
    """
    return remove_cgroup_tree(root)
