"""Run a real CRI-O (with NRI enabled) whose every path lives in a work dir, as
:class:`~.containerd.Containerd` runs containerd: the same public interface, so the e2e
fixtures hand either to a test (``NRI_E2E_CONTAINERD=crio``).

CRI-O v1.36.3 (``crio``, ``pinns`` and ``copyimg``) comes from ``scripts/modern/build.sh crio``
(Go module github.com/cri-o/cri-o; version in scripts/modern/versions.env); ``conmon`` (2.1.6)
and the OCI runtime are Debian's: runc 1.1.5 of the runtime dir by default;
``NRI_E2E_CRIO_RUNTIME=crun`` picks bookworm's crun 1.8.1, which refuses the spec CRI-O 1.34
writes ("container create failed: unknown version specified").

Layout under ``workdir``::

    crio.conf  crio.conf.d/     the config (``--config``; the drop-in dir is ours and empty)
    crio.log                    CRI-O's stderr (logrus text), appended across restarts
    crio.sock                   CRI (RuntimeService/ImageService)
    nri/nri.sock                NRI socket for external plugins; nri/plugins/, nri/conf.d/
    storage/  runroot/          containers/storage (overlay): graph root and run root
    runtime/                    the OCI runtime's state root (``<runtime> --root``)
    ns/  exits/  attach/        pinned namespaces (pinns), conmon exit files, attach sockets
    policy.json  registries.conf  storage.conf   the containers/* configs (no system file read)
    pod-logs/                   CRI log_directory root used by :meth:`Crio.cri_client`

Images: CRI-O pulls from registries only; the harness's busybox and pause archives
(:mod:`.images`) are copied into this instance's storage with ``copyimg`` (CRI-O's module:
``docker-archive:`` to ``containers-storage``) before the first start. Pods without a shared
PID namespace run without an infra container (``drop_infra_ctr``, CRI-O's default).

Settings CRI-O needs on a node that is not its own: ``clean_shutdown_file = ""`` and
``internal_wipe = false`` (a SIGKILLed CRI-O must not wipe its storage on the next start, the
tests kill it on purpose), ``cgroup_manager = "cgroupfs"`` with ``monitor_cgroup = "pod"``
(conmon beside the containers, CRI-O's rule for cgroupfs).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import psutil

from . import cgroups
from . import images as images_mod
from .containerd import Containerd, ContainerdError
from .cri import CRIClient
from .paths import crio_bin_dir, crio_runtime, modern_versions

CRIO_VERSION_KEY = "crio"
"""The ``NRI_E2E_CONTAINERD`` value (the fixtures' "version") that selects CRI-O."""

_POLICY = '{"default": [{"type": "insecureAcceptAnything"}]}\n'
_REGISTRIES = 'unqualified-search-registries = []\nshort-name-mode = "disabled"\n'

_CONFIG = """\
[crio]
root = "{storage}"
runroot = "{runroot}"
storage_driver = "overlay"
log_dir = "{w}/log"
version_file = "{w}/version"
version_file_persist = "{w}/version-persist"
clean_shutdown_file = ""
internal_wipe = false

[crio.api]
listen = "{sock}"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "{runtime_name}"
cgroup_manager = "cgroupfs"
log_level = "{log_level}"
namespaces_dir = "{w}/ns"
pinns_path = "{pinns}"
container_exits_dir = "{w}/exits"
container_attach_socket_dir = "{w}/attach"
hooks_dir = []
default_mounts_file = ""
cdi_spec_dirs = ["{w}/cdi"]
decryption_keys_path = "{w}/keys"
irqbalance_config_file = ""
irqbalance_config_restore_file = "disable"
rdt_config_file = ""
blockio_config_file = ""
seccomp_profile = ""
drop_infra_ctr = true
disable_hostport_mapping = true

[crio.runtime.runtimes.{runtime_name}]
runtime_path = "{runtime}"
runtime_type = "oci"
runtime_root = "{runtime_root}"
monitor_path = "{conmon}"
monitor_cgroup = "pod"

[crio.image]
signature_policy = "{w}/policy.json"
pause_image = "{pause}"
big_files_temporary_dir = "{w}/tmp"

[crio.network]
network_dir = "{w}/cni/conf"
plugin_dirs = ["{w}/cni/bin"]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = true
nri_listen = "{nri_sock}"
nri_plugin_dir = "{nri_plugins}"
nri_plugin_config_dir = "{nri_conf}"
nri_plugin_registration_timeout = "{reg_timeout}"
nri_plugin_request_timeout = "{req_timeout}"
nri_disable_connections = false
"""


class Crio(Containerd):
    """One CRI-O daemon confined to ``workdir``; ``version`` is :data:`CRIO_VERSION_KEY`.

    The interface is :class:`Containerd`'s (start, stop, restart, kill, logs, NRI readiness):
    ``start()`` copies the test images into its storage the first time, writes the config,
    launches ``crio`` in its own session and waits until CRI answers and the NRI socket exists;
    ``stop()`` removes every pod through CRI, terminates CRI-O and kills what is left of this
    instance (conmon, the runtime's containers, mounts under ``workdir``). ``ctr`` does not
    exist here (raises ContainerdError). ``systemd_cgroup`` is refused (ValueError): the
    harness runs cgroupfs only with CRI-O.
    """

    def __init__(self, version: str, workdir: Path | str, **kw: Any) -> None:
        if version != CRIO_VERSION_KEY:
            raise ValueError(f"Crio takes version {CRIO_VERSION_KEY!r}, not {version!r}")
        if kw.get("systemd_cgroup"):
            raise ValueError("the CRI-O harness runs the cgroupfs driver only")
        super().__init__("2.1", workdir, **kw)  # validates the paths; bin dir replaced below
        self.version = version
        self.bin_dir = crio_bin_dir()
        self.oci_runtime, self.runc = crio_runtime()
        self.conmon = Path("/usr/bin/conmon")

    def _what(self) -> str:
        return f"crio ({self.oci_runtime})"

    runtime_name = "cri-o"
    nri_log_markers = ("Create NRI interface", 'Registered domain \\"k8s.io\\" with NRI')

    @property
    def runtime_version(self) -> str:
        """CRI-O's version as its CRI reports it (``1.36.3``, from versions.env)."""
        return modern_versions()["CRIO_VERSION"].removeprefix("v")

    def cgroup_leaf(self, cid: str) -> str:
        """The last element of a container's ``cgroupsPath``: ``crio-<id>`` (cgroupfs)."""
        return f"crio-{cid}"

    applies_cpuset_at_create = True

    # -- paths
    @property
    def cri_socket(self) -> Path:
        """CRI-O's CRI socket (RuntimeService/ImageService)."""
        return self.workdir / "crio.sock"

    @property
    def runc_root(self) -> Path:
        """The OCI runtime's state root (containers under ``<runc_root>/<id>``)."""
        return self.workdir / "runtime"

    @property
    def log_path(self) -> Path:
        """CRI-O's combined stdout/stderr log (appended across restarts)."""
        return self.workdir / "crio.log"

    @property
    def config_path(self) -> Path:
        """The TOML config written by :meth:`start`."""
        return self.workdir / "crio.conf"

    # -- config
    def config_text(self) -> str:
        """The TOML config this instance writes."""
        w = self.workdir
        return _CONFIG.format(
            w=w, storage=w / "storage", runroot=w / "runroot", sock=self.cri_socket,
            runtime_name=self.oci_runtime, runtime=self.runc, runtime_root=self.runc_root,
            conmon=self.conmon, pinns=self.bin_dir / "pinns",
            log_level=self.log_level, pause=images_mod.PAUSE_IMAGE,
            nri_sock=self.nri_socket, nri_plugins=self.nri_plugin_dir,
            nri_conf=self.nri_conf_dir, reg_timeout=self.nri_registration_timeout,
            req_timeout=self.nri_request_timeout)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        w = self.workdir
        env["CONTAINERS_STORAGE_CONF"] = str(w / "storage.conf")
        env["CONTAINERS_REGISTRIES_CONF"] = str(w / "registries.conf")
        env["CONTAINERS_POLICY_JSON"] = str(w / "policy.json")
        env["TMPDIR"] = str(w / "tmp")
        return env

    def _write_files(self) -> None:
        w = self.workdir
        for d in ("storage", "runroot", "runtime", "ns", "exits", "attach", "log", "tmp", "cdi",
                  "keys", "crio.conf.d", "nri/plugins", "nri/conf.d", "cni/bin", "cni/conf",
                  "pod-logs"):
            (w / d).mkdir(parents=True, exist_ok=True)
        (w / "policy.json").write_text(_POLICY)
        (w / "registries.conf").write_text(_REGISTRIES)
        (w / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{w / "storage"}"\n'
            f'runroot = "{w / "runroot"}"\n')
        self.config_path.write_text(self.config_text())

    def import_images(self, archives: list[images_mod.ImageArchive] | None = None) -> None:
        """Copy docker-archive tarballs (default: the harness's busybox and pause) into this
        instance's storage with ``copyimg`` (CRI-O must not run: the storage is locked by it
        only per operation, but a running CRI-O does not see images added behind its back
        until it lists them again). Raises ContainerdError with copyimg's output on failure."""
        w = self.workdir
        for img in archives if archives is not None else images_mod.build_images():
            r = subprocess.run(
                [str(self.bin_dir / "copyimg"), "--root", str(w / "storage"),
                 "--runroot", str(w / "runroot"), "--storage-driver", "overlay",
                 "--signature-policy", str(w / "policy.json"), "--image-name", img.name,
                 "--import-from", f"docker-archive:{img.path}"],
                capture_output=True, text=True, timeout=120, env=self._env())
            if r.returncode != 0:
                raise ContainerdError(f"copyimg {img.name}: {r.stdout}{r.stderr}")

    # -- lifecycle
    def start(self) -> Crio:
        """Write the config, start CRI-O and wait until CRI and NRI are up.

        Raises ContainerdError (with the log's tail) if it exits or is not ready within
        ``start_timeout`` seconds; then the process is killed.
        """
        if self.running:
            return self
        self._write_files()
        if self._import_images and not self._images_imported:
            self.import_images()
            self._images_imported = True
        for s in (self.cri_socket, self.nri_socket):
            s.unlink(missing_ok=True)
        self._log_start = self.log_offset()
        with open(self.log_path, "ab") as log:
            log.write(f"=== harness: starting crio {self.version} ===\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                [str(self.bin_dir / "crio"), "--config", str(self.config_path),
                 "--config-dir", str(self.workdir / "crio.conf.d")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self._env(), cwd=self.workdir, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self._terminate(timeout=5.0)
            raise
        return self

    def _reap_leftovers(self) -> list[str]:
        problems: list[str] = []
        root = self.runc_root
        if root.is_dir():
            for cdir in root.iterdir():
                if not cdir.is_dir():
                    continue
                r = subprocess.run([str(self.runc), "--root", str(root), "delete", "--force",
                                    cdir.name], capture_output=True, text=True, timeout=30)
                if r.returncode != 0 and cdir.exists():
                    problems.append(f"{self.oci_runtime} delete {cdir.name[:12]}: "
                                    f"{r.stderr.strip()}")
        for p in self.shim_processes():
            problems.append(f"killed leftover conmon {p.pid}")
            try:
                for child in p.children(recursive=True):
                    child.kill()
                p.kill()
                p.wait(5)
            except psutil.Error:
                pass
        prefix = str(self.workdir) + "/"
        mounts = [line.split()[1].replace("\\040", " ")
                  for line in Path("/proc/self/mounts").read_text().splitlines()]
        for mp in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
            r = subprocess.run(["umount", "-l", mp], capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"umount {mp}: {r.stderr.strip()}")
        return problems

    def shim_processes(self) -> list[psutil.Process]:
        """Live conmon processes of this instance (their exit dir is ours)."""
        exits = str(self.workdir / "exits")
        found = []
        for p in psutil.process_iter(["name", "cmdline"]):
            cmd = p.info.get("cmdline") or []
            if cmd and os.path.basename(cmd[0]) == "conmon" and exits in cmd:
                found.append(p)
        return found

    def cri_client(self, **kw: Any) -> CRIClient:
        """A :class:`CRIClient` on this daemon's socket (pod logs under ``workdir/pod-logs``).

        Where the host's kernel has the hugetlb controller but no hierarchy mounts it (cgroup
        v1 here: ``hugetlb`` in /proc/cgroups, no /sys/fs/cgroup/hugetlb), the client sends
        no hugepage limits: CRI-O takes /proc/cgroups as proof of the controller
        (``node.CgroupHasHugetlb``) and puts the kubelet's zero limits into the spec, which the
        OCI runtime cannot apply ("cannot set hugetlb limit: container could not join or
        create cgroup"); containerd drops them itself (its tolerate_missing_hugetlb_controller).
        A node with the hierarchy mounted (every systemd host) is not affected. Pods are
        stopped as the kubelet stops them, containers first (``kill_before_stop_pod``).
        Without CAP_SYS_RESOURCE (this sandboxed host) no process may lower its
        oom_score_adj ("nsexec: failed to update /proc/self/oom_score_adj: Permission
        denied" for a Guaranteed container's -997): the client raises it to its own score,
        as containerd's ``restrict_oom_score_adj`` (the containerd harness's setting) does."""
        kw.setdefault("log_root", self.workdir / "pod-logs")
        kw.setdefault("kill_before_stop_pod", True)
        if not _has_cap_sys_resource():
            kw.setdefault("min_oom_score_adj",
                          int(Path("/proc/self/oom_score_adj").read_text()))
        if cgroups.cgroup_version() == 1 and not any(
                "hugetlb" in name.split(",") for name in cgroups.v1_controller_mounts()):
            kw.setdefault("hugepage_sizes", [])
        return CRIClient(self.cri_socket, **kw)

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Not available: CRI-O has no ``ctr``. Raises ContainerdError."""
        raise ContainerdError("CRI-O has no ctr: use the CRI client")


def _has_cap_sys_resource() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 24 & 1)  # CAP_SYS_RESOURCE = 24
    return False


def runtime_daemon(version: str, workdir: Path | str, **kw: Any) -> Containerd:
    """The daemon for an ``NRI_E2E_CONTAINERD`` value: :class:`Crio` for ``crio``, else a
    :class:`Containerd` of that version (not started). Raises ValueError for an unknown one."""
    if version == CRIO_VERSION_KEY:
        return Crio(version, workdir, **kw)
    return Containerd(version, workdir, **kw)
