"""Readers for where a container's cpuset and CPU quota show on the host, and cgroup cleanup.

Three views of a cpuset (they must agree after an NRI adjustment; see docs/real-containerd.md):
the OCI spec (``linux.resources.cpu.cpus``), the cgroup's cpuset file and the kernel's
``Cpus_allowed_list`` / ``Mems_allowed_list`` in ``/proc/<pid>/status``.

cgroup v1 (one hierarchy per controller, ``/sys/fs/cgroup/<controller>/<path>``) and v2 (the
unified hierarchy, ``/sys/fs/cgroup/<path>``, detected by ``/sys/fs/cgroup/cgroup.controllers``)
are both read; v2 files: ``cpuset.cpus.effective``, ``cpuset.mems.effective``, ``cpu.max``
(``"<quota> <period>"`` or ``"max <period>"``), ``cpu.weight``, ``memory.max`` (kernel
Documentation/admin-guide/cgroup-v2.rst; runc libcontainer/cgroups/fs2).

The tests and the demo put their pods under a cgroup parent of their own, :data:`KUBEPODS`
(``/nri-cpumgr-test/kubepods/...``), never the node's ``/kubepods``, and remove everything
under :data:`TEST_ROOT` afterwards, in every hierarchy (v1 controllers and the unified one).
The plugin's QoS classifier recognises the kubelet's forms under any prefix.

``cgroupsPath`` forms (runc ``libcontainer/cgroups``): cgroupfs ``/kubepods/.../<id>`` (used
by the kubelet's cgroupfs driver and by these tests) and systemd ``slice:prefix:name``, which
expands to ``/<slice hierarchy>/<prefix>-<name>.scope`` (``a-b-c.slice`` lives in
``/a.slice/a-b.slice/a-b-c.slice``).
"""

from __future__ import annotations

import errno
import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
TEST_BASE = "/nri-cpumgr-test"
"""The cgroup (relative to a hierarchy's root) under which every run's pods live."""
RUN_ROOT_ENV = "NRI_E2E_CGROUP_ROOT"
TEST_ROOT = os.environ.setdefault(RUN_ROOT_ENV, f"{TEST_BASE}/run-{os.getpid()}")
"""This run's own cgroup: ``TEST_BASE/run-<pid of the first process that imported this>``.

Exported through the environment, so the processes a run starts (plugins, benchmark
children) share it, while two runs side by side (a demo beside ``make e2e``, two checkouts)
never see each other's pods as leftovers."""
if not TEST_ROOT.startswith(TEST_BASE + "/"):
    raise ValueError(f"{RUN_ROOT_ENV}={TEST_ROOT!r} is not under {TEST_BASE}")
KUBEPODS = f"{TEST_ROOT}/kubepods"
"""The harness's kubepods: pod cgroups are ``KUBEPODS/pod<uid>``, ``KUBEPODS/burstable/...``."""
ALLOW_LIVE_NODE_ENV = "NRI_E2E_ALLOW_LIVE_NODE"

# cgroup v1 file -> the cgroup v2 file holding the same fact (values in the same format)
V2_FILES = {
    "cpuset.cpus": "cpuset.cpus.effective",
    "cpuset.mems": "cpuset.mems.effective",
    "memory.limit_in_bytes": "memory.max",
}


def cgroup_version(root: Path = CGROUP_ROOT) -> int:
    """2 when ``root`` is the unified hierarchy (it has ``cgroup.controllers``), else 1."""
    return 2 if (root / "cgroup.controllers").is_file() else 1


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
    """The directory of ``cgroups_path`` holding ``controller``'s files (``cpuset``, ``cpu``...):
    ``<root>/<controller><relpath>`` on cgroup v1, ``<root><relpath>`` on v2."""
    rel = cgroup_relpath(cgroups_path).lstrip("/")
    return root / rel if cgroup_version(root) == 2 else root / controller / rel


def read_cgroup_file(controller: str, cgroups_path: str, name: str,
                     root: Path = CGROUP_ROOT) -> str:
    """Stripped contents of one cgroup file, named by its v1 name (``cpuset.cpus``,
    ``cpuset.mems``, ``memory.limit_in_bytes``); on v2 the file of :data:`V2_FILES` is read
    (``memory.max`` ``max`` is returned as is). Raises FileNotFoundError if absent."""
    d = controller_dir(controller, cgroups_path, root)
    if cgroup_version(root) == 2:
        name = V2_FILES.get(name, name)
    return (d / name).read_text().strip()


def cpu_quota_us(cgroups_path: str, root: Path = CGROUP_ROOT) -> int:
    """The CFS quota in microseconds, -1 = unlimited: v1 ``cpu.cfs_quota_us``, v2 the first
    field of ``cpu.max`` (``max`` = -1)."""
    d = controller_dir("cpu", cgroups_path, root)
    if cgroup_version(root) == 2:
        quota = (d / "cpu.max").read_text().split()[0]
        return -1 if quota == "max" else int(quota)
    return int((d / "cpu.cfs_quota_us").read_text())


def shares_to_weight(shares: int) -> int:
    """cgroup v2 ``cpu.weight`` (1-10000) for v1 ``cpu.shares`` (2-262144), as runc before
    1.3.2 converts it (libcontainer/cgroups utils ``ConvertCPUSharesToCgroupV2Value``,
    linear: 1024 -> 39); 0 = unset. Newer runtimes: :func:`shares_to_weight_log`."""
    if shares == 0:
        return 0
    return 1 + ((shares - 2) * 9999) // 262142


def shares_to_weight_log(shares: int) -> int:
    """cgroup v2 ``cpu.weight`` for v1 ``cpu.shares`` as runc >= 1.3.2 / crun >= 1.23 convert
    it (opencontainers/cgroups PR #20, after kubernetes#131216): a quadratic in log2(shares)
    through the ends and the defaults, so 2 -> 1, 1024 -> 100 (the v1 default onto the v2
    default) and 262144 -> 10000: ``ceil(10 ** ((l*l + 125*l) / 612 - 7/34))``, l = log2.
    0 = unset; values outside 2..262144 are clamped to 1..10000."""
    if shares == 0:
        return 0
    if shares <= 2:
        return 1
    if shares >= 262144:
        return 10000
    exp2 = math.log2(shares)
    return math.ceil(10 ** ((exp2 * exp2 + 125 * exp2) / 612 - 7 / 34))


def cpu_weight_or_shares(cgroups_path: str, root: Path = CGROUP_ROOT) -> int:
    """What the cgroup holds for the CPU request, unconverted: v1 ``cpu.shares``, v2
    ``cpu.weight``. Compare it with :func:`expected_cpu_weight_or_shares`."""
    d = controller_dir("cpu", cgroups_path, root)
    name = "cpu.weight" if cgroup_version(root) == 2 else "cpu.shares"
    return int((d / name).read_text())


def expected_cpu_weight_or_shares(shares: int, root: Path = CGROUP_ROOT) -> set[int]:
    """The values :func:`cpu_weight_or_shares` may read for a container whose OCI spec says
    ``linux.resources.cpu.shares = shares``: on v1 exactly ``{shares}``; on v2 the weight of
    the runtime's conversion, which depends on the runc version (linear
    :func:`shares_to_weight` before runc 1.3.2, :func:`shares_to_weight_log` since), so
    either one (the kubelet's own e2e tests accept both the same way)."""
    if cgroup_version(root) != 2:
        return {shares}
    return {shares_to_weight(shares), shares_to_weight_log(shares)}


def cpu_shares(cgroups_path: str, root: Path = CGROUP_ROOT) -> int:
    """v1 ``cpu.shares``. On v2 the runtime writes ``cpu.weight`` (many shares values map to
    one weight): the smallest shares value of that weight under the linear
    :func:`shares_to_weight` is returned, which is exact only for shares 2 (weight 1) and
    the extremes; to check a request, compare :func:`cpu_weight_or_shares` with
    :func:`expected_cpu_weight_or_shares` instead."""
    d = controller_dir("cpu", cgroups_path, root)
    if cgroup_version(root) == 2:
        weight = int((d / "cpu.weight").read_text())
        return 2 + -(-(weight - 1) * 262142 // 9999)
    return int((d / "cpu.shares").read_text())


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
    return {p.name: p for p, fstype in _cgroup_mounts() if fstype == "cgroup"}


def all_hierarchies() -> dict[str, Path]:
    """Every mounted cgroup hierarchy, v1 and v2 (``cgroup2``: the unified one, e.g.
    ``/sys/fs/cgroup`` on a v2 host or ``/sys/fs/cgroup/unified`` on a hybrid v1 host)."""
    return {str(p): p for p, _ in _cgroup_mounts()}


def _cgroup_mounts(mounts_file: Path = Path("/proc/self/mounts")) -> list[tuple[Path, str]]:
    out = []
    for line in mounts_file.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] in ("cgroup", "cgroup2"):
            out.append((Path(fields[1]), fields[2]))
    return out


def cpuset_available(root: Path = CGROUP_ROOT) -> bool:
    """True when containers can get a cpuset here: a v1 cpuset hierarchy at
    ``<root>/cpuset``, or a v2 unified hierarchy at ``root`` offering the ``cpuset``
    controller."""
    if cgroup_version(root) == 2:
        return "cpuset" in (root / "cgroup.controllers").read_text().split()
    return (root / "cpuset/cpuset.cpus").is_file()


def cgroup_v1_cpuset_available() -> bool:
    """True when a cgroup v1 cpuset hierarchy is mounted at ``/sys/fs/cgroup/cpuset``."""
    return (CGROUP_ROOT / "cpuset/cpuset.cpus").is_file()


def live_node_reasons(proc: Path = Path("/proc"),
                      hierarchies: dict[str, Path] | None = None) -> list[str]:
    """Why this machine looks like a live Kubernetes node (empty list = it does not): a
    ``kubelet`` process runs in this mount namespace, or a cgroup in the node's own
    ``/kubepods`` / ``/kubepods.slice`` tree holds processes, in some hierarchy. The tests
    refuse to run there unless ``NRI_E2E_ALLOW_LIVE_NODE=1``. A kubelet in a mount namespace of
    its own (the project's test cluster, a kind node) manages its own containers, not this
    node's: it does not count."""
    reasons: list[str] = []
    for comm in proc.glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "kubelet" and _same_mount_ns(comm.parent, proc):
                reasons.append(f"a kubelet process runs (pid {comm.parent.name})")
                break
        except OSError:
            continue
    for base in (hierarchies if hierarchies is not None else all_hierarchies()).values():
        for top in ("kubepods", "kubepods.slice"):
            d = base / top
            if not d.is_dir():
                continue
            busy = [c for c in (d, *d.rglob("*")) if c.is_dir() and _has_procs(c)]
            if busy:  # empty cgroups left behind by earlier runs do not make a node live
                reasons.append(f"{d} holds processes (in {len(busy)} cgroups, e.g. {busy[0]})")
                return reasons
    return reasons


def _same_mount_ns(pid_dir: Path, proc: Path) -> bool:
    """Whether the process shares our mount namespace (True when that cannot be read)."""
    try:
        return os.readlink(pid_dir / "ns/mnt") == os.readlink(proc / "self/ns/mnt")
    except OSError:
        return True


def _has_procs(d: Path) -> bool:
    try:
        return bool((d / "cgroup.procs").read_text().split())
    except OSError:
        return False


def remove_cgroup_tree(relpath: str, mounts: dict[str, Path] | None = None) -> list[Path]:
    """rmdir ``relpath`` and every cgroup below it, deepest first, in every hierarchy (v1 and
    the unified one; ``mounts`` defaults to :func:`all_hierarchies`).

    Only empty cgroups can be removed (the kernel refuses others with EBUSY): those are left
    and returned. Missing directories are ignored. Returns the directories that remain.
    """
    rel = relpath.strip("/")
    if not rel:
        raise ValueError("refusing to remove a cgroup hierarchy root")
    left: list[Path] = []
    for base in (mounts if mounts is not None else all_hierarchies()).values():
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
    """Remove pod-level cgroups (``KUBEPODS/.../pod<uid>``) that containerd leaves behind.

    Returns what could not be removed (still holding processes).
    """
    left: list[Path] = []
    mounts = all_hierarchies()
    for parent in cgroup_parents:
        left += remove_cgroup_tree(cgroup_relpath(parent), mounts)
    return left


def remove_empty_kubepods(root: str = TEST_ROOT) -> list[Path]:
    """Remove the harness's cgroup tree (:data:`TEST_ROOT`: its kubepods and QoS cgroups) where
    empty, in every hierarchy. Never the node's ``/kubepods``: ``root`` must be under
    :data:`TEST_ROOT`. Anything still in use stays; returns what remains."""
    if root.rstrip("/") != TEST_ROOT and not root.startswith(TEST_ROOT + "/"):
        raise ValueError(f"refusing to remove {root!r}: not under {TEST_ROOT}")
    left = remove_cgroup_tree(root)
    for mount in all_hierarchies().values():  # TEST_BASE itself once no run uses it
        try:
            (mount / TEST_BASE.lstrip("/")).rmdir()
        except OSError:
            pass
    return left
