"""Run a real containerd (1.7 or 2.1, with NRI enabled) whose every path lives in a work dir.

Layout under ``workdir`` (kept short: unix socket paths must stay under 108 bytes)::

    config.toml          containerd.log
    root/  state/        containerd root and state (never /var/lib/containerd, /run/containerd)
    containerd.sock      CRI + containerd gRPC;   containerd.sock.ttrpc
    nri/nri.sock         NRI socket for external plugins
    nri/plugins/         pre-installed plugins (``NN-name`` executables), nri/conf.d/
    runc/                runc state root (``runc/<namespace>/<id>``)
    cni/{bin,conf}/      empty: host-network pods only
    opt/                 containerd's "opt" plugin directory
    pod-logs/            CRI log_directory root used by :meth:`Containerd.cri_client`

One exception the shims impose: containerd-shim-runc-v2 puts its own socket under
``/run/containerd/s/<sha256>`` (containerd ``pkg/shim`` ``SocketAddress``, the directory is not
configurable); the hash includes our grpc address, so it never collides with a system daemon.

Config format: containerd 1.7 takes version 2, 2.1 version 3 (CRI split into
``io.containerd.cri.v1.images`` / ``io.containerd.cri.v1.runtime``); see
docs/real-containerd.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from . import images as images_mod
from .cri import CRIClient
from .logs import LogFile
from .paths import containerd_bin_dir, runc_path

NRI_REGISTRATION_TIMEOUT = "5s"
NRI_REQUEST_TIMEOUT = "2s"

_CONFIG_17 = """\
version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  level = "{log_level}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = "{nri_sock}"
  plugin_path = "{nri_plugins}"
  plugin_config_path = "{nri_conf}"
  plugin_registration_timeout = "{reg_timeout}"
  plugin_request_timeout = "{req_timeout}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      BinaryName = "{runc}"
      Root = "{runc_root}"
      SystemdCgroup = {systemd_cgroup}
"""

_CONFIG_21 = """\
version = 3
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  level = "{log_level}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = "{nri_sock}"
  plugin_path = "{nri_plugins}"
  plugin_config_path = "{nri_conf}"
  plugin_registration_timeout = "{reg_timeout}"
  plugin_request_timeout = "{req_timeout}"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{pause}"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = "{runc}"
      Root = "{runc_root}"
      SystemdCgroup = {systemd_cgroup}
"""


class ContainerdError(RuntimeError):
    """containerd failed to start, died, or a log line did not show up in time."""


class Containerd:
    """One containerd daemon of ``version`` ("1.7", "2.1" or "2.4") confined to ``workdir``.

    ``start()`` writes the config, launches containerd in its own session (log appended to
    ``log_path``), waits until CRI answers and the NRI socket exists, and imports the test
    images the first time. ``stop()`` removes every pod through CRI, terminates the daemon and
    cleans up leftover containers, shims and mounts. ``restart()`` keeps containers running,
    as a node's runtime restart does. Usable as a context manager.
    """

    def __init__(self, version: str, workdir: Path | str, *,
                 nri_registration_timeout: str = NRI_REGISTRATION_TIMEOUT,
                 nri_request_timeout: str = NRI_REQUEST_TIMEOUT, log_level: str = "info",
                 start_timeout: float = 30.0, import_images: bool = True,
                 systemd_cgroup: bool = False) -> None:
        self.version = version
        self.systemd_cgroup = systemd_cgroup  # runc's systemd cgroup driver (needs systemd)
        self.bin_dir = containerd_bin_dir(version)
        self.runc = runc_path(version)
        self.workdir = Path(workdir).resolve()
        self.nri_registration_timeout = nri_registration_timeout
        self.nri_request_timeout = nri_request_timeout
        self.log_level = log_level
        self.start_timeout = start_timeout
        self._import_images = import_images
        self._images_imported = False
        self._proc: subprocess.Popen[bytes] | None = None
        if len(str(self.nri_socket)) > 100 or len(str(self.cri_socket)) + 6 > 100:
            raise ValueError(f"workdir {self.workdir} too long for unix socket paths")

    # -- paths
    @property
    def cri_socket(self) -> Path:
        """containerd's gRPC socket (CRI RuntimeService/ImageService and containerd API)."""
        return self.workdir / "containerd.sock"

    @property
    def address(self) -> str:
        """``unix://`` URL of :attr:`cri_socket` (what the kubelet's --container-runtime-endpoint
        would be)."""
        return f"unix://{self.cri_socket}"

    @property
    def nri_socket(self) -> Path:
        """The NRI socket external plugins dial."""
        return self.workdir / "nri/nri.sock"

    @property
    def nri_plugin_dir(self) -> Path:
        """Directory containerd launches pre-installed NRI plugins (``NN-name``) from."""
        return self.workdir / "nri/plugins"

    @property
    def nri_conf_dir(self) -> Path:
        """Directory of pre-installed plugins' config files (``NN-name.conf``)."""
        return self.workdir / "nri/conf.d"

    @property
    def runc_root(self) -> Path:
        """runc's state root (containers under ``<runc_root>/k8s.io/<id>``)."""
        return self.workdir / "runc"

    @property
    def log_path(self) -> Path:
        """containerd's combined stdout/stderr log (appended across restarts)."""
        return self.workdir / "containerd.log"

    @property
    def config_path(self) -> Path:
        """The TOML config written by :meth:`start`."""
        return self.workdir / "config.toml"

    @property
    def pid(self) -> int | None:
        """The daemon's pid while started (even if it has died since), else None."""
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        """True while the daemon process is alive."""
        return self._proc is not None and self._proc.poll() is None

    # -- config
    def config_text(self) -> str:
        """The TOML config this instance writes."""
        w = self.workdir
        tmpl = _CONFIG_17 if self.version == "1.7" else _CONFIG_21
        return tmpl.format(
            root=w / "root", state=w / "state", sock=self.cri_socket, log_level=self.log_level,
            opt=w / "opt", nri_sock=self.nri_socket, nri_plugins=self.nri_plugin_dir,
            nri_conf=self.nri_conf_dir, reg_timeout=self.nri_registration_timeout,
            req_timeout=self.nri_request_timeout, pause=images_mod.PAUSE_IMAGE,
            cni_bin=w / "cni/bin", cni_conf=w / "cni/conf", runc=self.runc,
            runc_root=self.runc_root,
            systemd_cgroup=str(self.systemd_cgroup).lower(),
        )

    # -- lifecycle
    def start(self) -> Containerd:
        """Write the config, start containerd and wait until CRI and NRI are up.

        Raises ContainerdError (with the log's tail) if it exits or is not ready within
        ``start_timeout`` seconds; then the process is killed.
        """
        if self.running:
            return self
        for d in ("root", "state", "nri/plugins", "nri/conf.d", "runc", "cni/bin", "cni/conf",
                  "opt", "pod-logs"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text())
        for s in (self.cri_socket, self.nri_socket):
            with contextlib.suppress(FileNotFoundError):
                s.unlink()
        env = dict(os.environ)
        env["PATH"] = f"{self.bin_dir}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        self._log_start = self.log_offset()
        with open(self.log_path, "ab") as log:
            log.write(f"=== harness: starting containerd {self.version} ===\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                [str(self.bin_dir / "containerd"), "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=self.workdir, start_new_session=True)
        try:
            self._wait_ready()
            if self._import_images and not self._images_imported:
                images_mod.import_images(self.bin_dir / "ctr", str(self.cri_socket))
                self._wait_images_seen()
                self._images_imported = True
        except BaseException:
            self._terminate(timeout=5.0)
            raise
        return self

    def _wait_images_seen(self, timeout: float = 30.0) -> None:
        """Wait until the CRI image service knows the imported images: ``ctr images import``
        returns once the content store has them, and the CRI plugin learns of them from an
        event; a RunPodSandbox before that tries to pull the pause image (seen at load ~12 on
        2.1.9: "failed to pull image docker.io/local/pause:1"). Raises ContainerdError."""
        refs = [images_mod.PAUSE_IMAGE, images_mod.BUSYBOX_IMAGE]
        deadline = time.monotonic() + timeout
        with CRIClient(self.cri_socket, timeout=5.0) as client:
            while True:
                missing = [r for r in refs if not client.has_image(r)]
                if not missing:
                    return
                if time.monotonic() > deadline:
                    raise ContainerdError(f"{self._what()}: CRI does not see {missing} "
                                          f"{timeout}s after their import:\n" + self.log_tail())
                time.sleep(0.05)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        client: CRIClient | None = None
        try:
            while True:
                if not self.running:
                    raise ContainerdError(
                        f"{self._what()} exited with {self._proc.returncode if self._proc else None}:\n"  # noqa: E501
                        + self.log_tail())
                if self.cri_socket.exists() and self.nri_socket.exists():
                    if client is None:
                        client = CRIClient(self.cri_socket, timeout=2.0)
                    try:
                        client.version()
                        return
                    except Exception:  # noqa: BLE001 - not ready yet, retry until deadline
                        pass
                if time.monotonic() > deadline:
                    raise ContainerdError(
                        f"{self._what()} not ready after {self.start_timeout}s "
                        f"(cri={self.cri_socket.exists()} nri={self.nri_socket.exists()}):\n"
                        + self.log_tail())
                time.sleep(0.05)
        finally:
            if client is not None:
                client.close()

    def _what(self) -> str:
        return f"containerd {self.version}"

    # -- what differs between runtimes (the tests ask these instead of the version)
    #: the CRI ``runtime_name`` and the NRI runtime name this daemon reports
    runtime_name = "containerd"
    #: log lines proving the NRI interface was created and registered the CRI namespace
    nri_log_markers: tuple[str, ...] = (
        "created NRI interface", 'Registered namespace \\"k8s.io\\" with NRI',
        "disable nri plugin")

    @property
    def runtime_version(self) -> str:
        """The version its CRI reports, less a leading ``v`` and Debian's suffixes start
        with this (``"2.1"`` -> ``"2.1."``)."""
        return self.version + "."

    def cgroup_leaf(self, cid: str) -> str:
        """The last element of a container's ``cgroupsPath`` (cgroupfs driver)."""
        return cid

    #: CreateContainer runs the OCI runtime's ``create`` (the cgroup, the cpuset applied):
    #: a container pinned to CPUs the host lacks (a sysfs-fixture topology) fails there.
    #: containerd creates the runc container at StartContainer only.
    applies_cpuset_at_create = False

    def _terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the daemon, SIGKILL after ``timeout`` s, reap it; returns its exit code."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(10)
        return proc.returncode

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the daemon only (crash simulation); shims and containers live on.

        Call :meth:`start` to bring it back (or :meth:`stop` to clean up).
        """
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self._proc.wait(15)

    def restart(self, timeout: float = 10.0) -> Containerd:
        """Stop the daemon (containers keep running) and start it again; waits until ready."""
        self._terminate(timeout)
        return self.start()

    def stop(self, cleanup: bool = True, timeout: float = 10.0) -> list[str]:
        """Stop containerd; with ``cleanup`` first stop+remove every pod via CRI and afterwards
        kill leftover runc containers and shims of this instance and unmount what is left under
        ``workdir``. Returns a list of problems met (empty = clean); never raises for them.
        """
        problems: list[str] = []
        if cleanup and self.running:
            try:
                with self.cri_client(timeout=20.0) as c:
                    for pod in c.list_pods():
                        for op in (c.stop_pod, c.remove_pod):
                            for attempt in (1, 2):
                                try:
                                    op(pod.id)
                                    break
                                except Exception as e:  # noqa: BLE001 - report, keep going
                                    # a container that exited as it was stopped: its shim
                                    # was closing ("failed to kill container ...: ttrpc:
                                    # closed", containerd 2.4 after the kubelet's own
                                    # StopContainer was cancelled); asked again, the pod
                                    # stops (a second failure is a problem)
                                    if attempt == 1 and "ttrpc: closed" in str(e):
                                        time.sleep(1.0)
                                        continue
                                    problems.append(f"{op.__name__}({pod.id[:12]}): {e}")
            except Exception as e:  # noqa: BLE001
                problems.append(f"CRI cleanup: {e}")
        self._terminate(timeout)
        if cleanup:
            problems += self._reap_leftovers()
        return problems

    def _reap_leftovers(self) -> list[str]:
        problems: list[str] = []
        runc_root = self.runc_root
        if runc_root.is_dir():
            for ns_root in runc_root.iterdir():
                if not ns_root.is_dir():
                    continue
                for cdir in ns_root.iterdir():
                    r = subprocess.run([str(self.runc), "--root", str(ns_root), "delete", "--force",
                                        cdir.name], capture_output=True, text=True, timeout=30)
                    if r.returncode != 0 and cdir.exists():
                        problems.append(f"runc delete {cdir.name[:12]}: {r.stderr.strip()}")
        for p in self.shim_processes():
            problems.append(f"killed leftover shim {p.pid}")
            with contextlib.suppress(psutil.Error):
                for child in p.children(recursive=True):
                    child.kill()
                p.kill()
                p.wait(5)
        mounts = []
        prefix = str(self.workdir) + "/"
        for line in Path("/proc/self/mounts").read_text().splitlines():
            mp = line.split()[1].replace("\\040", " ")
            if mp.startswith(prefix):
                mounts.append(mp)
        for mp in sorted(mounts, key=len, reverse=True):
            r = subprocess.run(["umount", "-l", mp], capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"umount {mp}: {r.stderr.strip()}")
        return problems

    def shim_processes(self) -> list[psutil.Process]:
        """Live containerd-shim processes started for this instance (``-address`` ours)."""
        sock = str(self.cri_socket)
        found = []
        for p in psutil.process_iter(["name", "cmdline"]):
            cmd = p.info.get("cmdline") or []
            if cmd and "containerd-shim" in os.path.basename(cmd[0]) and sock in cmd:
                found.append(p)
        return found

    def __enter__(self) -> Containerd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients and tools
    def cri_client(self, **kw: Any) -> CRIClient:
        """A :class:`CRIClient` on this daemon's socket (pod logs under ``workdir/pod-logs``)."""
        kw.setdefault("log_root", self.workdir / "pod-logs")
        return CRIClient(self.cri_socket, **kw)

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run this version's ``ctr -a <socket> -n k8s.io <args>``; captures text output."""
        return subprocess.run(
            [str(self.bin_dir / "ctr"), "-a", str(self.cri_socket), "-n", "k8s.io", *args],
            check=check, capture_output=True, text=True, timeout=60)

    # -- log
    def log_offset(self) -> int:
        """Current size of the log in bytes: pass as ``since`` to only look at later lines."""
        return LogFile(self.log_path).offset()

    def log_text(self, since: int = 0) -> str:
        """The log from byte offset ``since`` on."""
        return LogFile(self.log_path).text(since)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log (for error messages)."""
        return LogFile(self.log_path).tail(lines)

    def wait_for_log(self, pattern: str | re.Pattern[str], timeout: float = 10.0,
                     since: int = 0) -> re.Match[str]:
        """Wait until ``pattern`` (regex) matches the log after byte ``since``; return the match.

        Raises ContainerdError on timeout or if the daemon dies meanwhile.
        """
        return LogFile(self.log_path).wait_for(
            pattern, timeout, since, lambda: self.running,
            lambda why: ContainerdError(f"containerd: {why}"))

    def wait_plugin_ready(self, name: str, index: str | int | None = None, timeout: float = 10.0,
                          since: int = 0, stale_failures: int = 0) -> re.Match[str]:
        """Wait until containerd logs that NRI plugin ``name`` is connected and synchronized.

        containerd 1.7 (NRI v0.6.1) logs ``plugin "<idx>-<name>" connected`` after a
        synchronize attempt (``failed to synchronize plugin`` precedes it on failure, which
        raises ContainerdError here); 2.1 (NRI v0.8) logs ``plugin "<idx>-<name>" connected and
        synchronized`` only on success (nri pkg/adaptation/adaptation.go).

        The failure line names no plugin, and containerd may log it for an instance killed
        mid-Synchronize after the next instance started: ``stale_failures`` is how many
        ``ttrpc: closed`` failures (the connection of a killed instance) to pass over.
        """
        idx = f"{int(index):02d}" if index is not None else r"\d\d"
        q = r'\\?"'
        ok = rf"plugin {q}{idx}-{re.escape(name)}{q} connected"
        fail = r"failed to synchronize plugin"
        deadline = time.monotonic() + timeout
        while True:
            m = self.wait_for_log(rf"(?P<fail>{fail}[^\n]*)|(?P<ok>{ok})",
                                  max(0.0, deadline - time.monotonic()), since)
            if not m.group("fail"):
                return m
            if stale_failures <= 0 or "ttrpc: closed" not in m.group("fail"):
                raise ContainerdError(
                    f"NRI plugin {name} failed to synchronize: {m.group('fail')}")
            stale_failures -= 1
            since += len(self.log_text(since)[:m.end()].encode(errors="replace"))
