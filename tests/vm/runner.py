"""Host side of the guest e2e tests: build (or reuse) the guest, boot it on a topology, collect.

:func:`run_guest` stages a job directory (the project's wheel, the ``tests/`` tree, job.json,
``scripts/vm/guest-run.sh`` as ``run``), boots QEMU (TCG, ``nice -n 10``, the image
``-snapshot`` so it stays pristine) with the job directory shared over 9p, waits for the guest
to power itself off, and returns the parsed ``results.json``. On timeout QEMU is killed; it
never outlives the call. Nothing touches the host's cgroups.

Knobs (environment): ``NRI_VM_CACHE`` (guest image and tools, default
``$NRI_CPUMGR_CACHE/vm``, that is ``/var/cache/nri-cpumgr/vm``), ``NRI_VM_TIMEOUT`` (seconds
per boot, default 1500).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.vm.topology import Topology

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("NRI_VM_CACHE")
             or os.environ.get("NRI_CPUMGR_CACHE", "/var/cache/nri-cpumgr") + "/vm")
# panic=-1 oops=panic: a guest kernel that crashes reboots at once, and -no-reboot makes
# that QEMU's exit (instead of a hung guest until the timeout)
BOOT_ARGS = ("root=/dev/vda rw console=ttyS0 quiet loglevel=3 mitigations=off "
             "systemd.show_status=false systemd.log_level=warning panic=-1 oops=panic")
#: What a crashed guest kernel writes on the console. Seen under TCG: an oops on an int3 in
#: the scheduler (set_next_task_fair) while the kernel patched its own text, in a guest that
#: had run for 90 s; the same boot passes when run again. The one read closely
#: (set_next_task_fair+0x37, 2026-12-06) was on the static key __cfs_bandwidth_used, flipped
#: by the first / last cgroup with a CPU quota: scripts/vm/guest-run.sh now switches it on
#: once, before the tests, and keeps it on.
KERNEL_CRASH = ("Kernel panic", "Oops:", "BUG: kernel")
#: The image's job unit could not mount the share "job" (seen once: no results after 26 s).
#: Most likely udev's coldplug was loading the 9p virtio transport at that moment: the
#: module registers the "virtio" transport before it binds its devices (net/9p/
#: trans_virtio.c p9_virtio_init: v9fs_register_trans, then register_virtio_driver), so the
#: mount finds the transport but no channel tagged "job" yet (ENOENT). The image's job unit
#: (scripts/vm/build-guest.sh) now runs ``modprobe -a 9pnet_virtio 9p`` first, which waits
#: for a load under way, and tries the mount 5 times 1 s apart; a boot that still cannot
#: mount it is run once more. (modules_load=9pnet_virtio on the command line was tried:
#: systemd-modules-load then took 83 s on the boot's critical path under load and ended
#: failed.)
NO_JOB_SHARE = "special device job does not exist"
class GuestError(RuntimeError):
    """The guest could not be built, booted or did not report results (message says why)."""


@dataclass
class GuestRun:
    """What one boot produced: parsed results.json, wall seconds, the serial console text."""

    results: dict[str, Any]
    seconds: float
    console: str


def missing() -> list[str]:
    """Reasons the guest tests cannot run on this machine (empty = they can)."""
    reasons = []
    if os.geteuid() != 0:
        reasons.append("not root (the image build uses debootstrap and unshare)")
    for tool in ("unshare", "mkfs.ext4", "wget", "dpkg", "apt-get", "flock"):
        if shutil.which(tool) is None:
            reasons.append(f"{tool} not found")
    if not Path("/usr/share/keyrings/debian-archive-keyring.gpg").exists():
        reasons.append("no Debian archive keyring (debian-archive-keyring)")
    return reasons


def _sh(cmd: list[str], what: str, timeout: float = 1800) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise GuestError(f"{what} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    lines = p.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def build_guest() -> Path:
    """Build or reuse the guest image (scripts/vm/build-guest.sh); returns its directory."""
    return Path(_sh(["nice", "-n", "10", "bash", str(REPO / "scripts/vm/build-guest.sh")],
                    "guest image build"))


def tools() -> Path:
    """The unpacked QEMU (scripts/vm/fetch-tools.sh)."""
    return Path(_sh(["bash", str(REPO / "scripts/vm/fetch-tools.sh")], "fetching QEMU"))


def build_wheel(dest: Path) -> Path:
    """The project's wheel, built from this checkout (pip wheel, no dependencies)."""
    _sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), str(REPO)],
        "building the wheel", timeout=600)
    wheels = list(dest.glob("nri_cpumgr-*.whl"))
    if not wheels:
        raise GuestError(f"no wheel in {dest}")
    return wheels[0]


def qemu_command(topo: Topology, image: Path, tool_dir: Path, job_dir: Path, *,
                 shares: dict[str, Path] | None = None, network: bool = False) -> list[str]:
    """The full QEMU command line (after ``nice``) for ``topo`` booting ``image``.

    ``shares``: more 9p shares, tag -> host directory, read-only (the guest mounts them as
    ``job_dir/shares`` lists). ``network``: QEMU's user-mode network (slirp; the guest's
    10.0.2.2 is the host's loopback, used to reach a host API server), else none."""
    q = tool_dir / "usr/bin/qemu-system-x86_64"
    extra: list[str] = []
    for tag, path in (shares or {}).items():
        extra += ["-virtfs", f"local,path={path},mount_tag={tag},security_model=none,"
                             f"readonly=on,id={tag}"]
    net = (["-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0"] if network
           else ["-net", "none"])
    return [
        str(q), "-L", str(tool_dir / "usr/share/qemu"), "-L", str(tool_dir / "usr/share/seabios"),
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-accel", "tcg,thread=multi,tb-size=512",
        *topo.qemu_args(),
        "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.img"),
        "-append", BOOT_ARGS,
        "-drive", f"file={image / 'disk.img'},if=virtio,format=raw,snapshot=on",
        "-virtfs", f"local,path={job_dir},mount_tag=job,security_model=none,id=job",
        "-serial", f"file:{job_dir / 'console.log'}",
        *extra, *net,
    ]


def run_guest(topo: Topology, *, containerd: list[str], drivers: list[str],
              scenarios: list[str], timeout: float | None = None,
              keep: Path | None = None, kubelet: dict[str, Any] | None = None,
              files: dict[str, str] | None = None,
              shares: dict[str, tuple[Path, str]] | None = None,
              local: list[str] | None = None) -> GuestRun:
    """Boot ``topo`` and run ``scenarios`` for each containerd version and driver; a boot
    whose guest kernel crashed (:data:`KERNEL_CRASH` on the console: emulation, not the
    plugin) or whose job share could not be mounted (:data:`NO_JOB_SHARE`) is booted
    again, up to :data:`GUEST_BOOTS` boots, each retry said on stderr.

    ``keep``: copy the job directory (results.json, guest.log, console.log, containerd logs)
    there. ``kubelet``: the job's kubelet section (:mod:`tests.vm.guest_kubelet`; turns the
    guest's network on); ``files``: name -> text written to ``job/files/`` (credentials);
    ``shares``: tag -> (host directory, guest mount point), read-only 9p; ``local``: guest
    paths inside those shares (files or directories) that guest-run.sh copies to the guest's
    disk and bind-mounts over themselves before the job (binaries run often: an exec from the
    uncached 9p share reads the binary again each time).
    Raises GuestError when the guest produced no results.json or crashed at every boot.
    """
    for boot in range(1, GUEST_BOOTS + 1):
        try:
            return _run_guest_once(topo, containerd=containerd, drivers=drivers,
                                   scenarios=scenarios, timeout=timeout, keep=keep,
                                   kubelet=kubelet, files=files, shares=shares, local=local)
        except _GuestCrashed as e:
            if boot == GUEST_BOOTS:
                raise GuestError(f"the guest failed {GUEST_BOOTS} times: {e.line}\n"
                                 f"{e.console[-3000:]}") from None
            print(f"\nQEMU guest failed ({e.line}); booting it once more "
                  f"(boot {boot + 1} of {GUEST_BOOTS})", file=sys.stderr)
    raise AssertionError("unreachable")


#: boots of one guest before its crash is a failure: multi-threaded TCG still crashes a
#: guest kernel now and then during its own start-up (an ``Oops: int3`` at 2.6 s of uptime,
#: before the job runs; docs/development/qemu-guests.md), each crash said on stderr
GUEST_BOOTS = 3
#: QEMU's exit statuses of a crash of the emulator itself (SIGSEGV, SIGBUS, SIGABRT, SIGILL),
#: booted again like a guest kernel's crash: multi-threaded TCG (QEMU 7.2) was seen to
#: segfault 5 s into a boot, before the guest ran anything of ours (CI run of 2026-12-07)
QEMU_CRASHES = frozenset(-s for s in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT,
                                      signal.SIGILL))


class _GuestCrashed(GuestError):
    def __init__(self, line: str, console: str) -> None:
        super().__init__(line)
        self.line = line
        self.console = console


def _run_guest_once(topo: Topology, *, containerd: list[str], drivers: list[str],
                    scenarios: list[str], timeout: float | None = None,
                    keep: Path | None = None, kubelet: dict[str, Any] | None = None,
                    files: dict[str, str] | None = None,
                    shares: dict[str, tuple[Path, str]] | None = None,
                    local: list[str] | None = None) -> GuestRun:
    timeout = timeout or float(os.environ.get("NRI_VM_TIMEOUT", "1500"))
    image = build_guest()
    tool_dir = tools()
    job = Path(tempfile.mkdtemp(prefix="nri-vm-job-"))
    try:
        build_wheel(job)
        shutil.copytree(REPO / "tests", job / "tests",
                        ignore=shutil.ignore_patterns("__pycache__", "fixtures", "_cri", "data",
                                                      "*.pyc"))
        (job / "scripts").mkdir()
        shutil.copy(REPO / "scripts/gen_cri.py", job / "scripts/gen_cri.py")  # CRI stubs
        shutil.copy(REPO / "scripts/vm/guest-run.sh", job / "run")
        (job / "scripts/modern").mkdir()  # paths.modern_bin_dir reads the versions
        shutil.copy(REPO / "scripts/modern/versions.env", job / "scripts/modern/versions.env")
        (job / "job.json").write_text(json.dumps({
            "topology": {"name": topo.name, "numa": [{"cpus": sorted(n.cpus)}
                                                      for n in topo.numa]},
            "containerd": containerd, "drivers": drivers, "scenarios": scenarios,
            **({"kubelet": kubelet} if kubelet else {})}))
        if files:
            (job / "files").mkdir()
            for name, text in files.items():
                (job / "files" / name).write_text(text)
        if shares:  # read by guest-run.sh: "tag mountpoint" per line
            (job / "shares").write_text("".join(f"{t} {m}\n" for t, (_, m) in shares.items()))
        if local:  # read by guest-run.sh: one guest path per line
            (job / "local").write_text("".join(f"{p}\n" for p in local))
        if kubelet:
            (job / "net").write_text("10.0.2.15/24 10.0.2.2\n")  # read by guest-run.sh
        env = dict(os.environ, LD_LIBRARY_PATH=f"{tool_dir}/usr/lib/x86_64-linux-gnu:"
                                               f"{tool_dir}/lib/x86_64-linux-gnu",
                   QEMU_MODULE_DIR=f"{tool_dir}/usr/lib/x86_64-linux-gnu/qemu")
        cmd = ["nice", "-n", "10", *qemu_command(
            topo, image, tool_dir, job, network=bool(kubelet),
            shares={t: p for t, (p, _) in (shares or {}).items()})]
        t0 = time.monotonic()
        with open(job / "qemu.log", "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
            finally:  # timeout, or the caller interrupted: QEMU never outlives the call
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(30)
        seconds = round(time.monotonic() - t0, 1)
        console = (job / "console.log").read_text(errors="replace") if (
            job / "console.log").exists() else ""
        if keep is not None:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(job, keep, ignore=shutil.ignore_patterns("tests", "*.whl",
                                                                     "files"))
        crash = next((line for line in console.splitlines()
                      if any(mark in line for mark in KERNEL_CRASH)), None)
        if crash is not None:
            raise _GuestCrashed(crash.strip(), console)
        res = job / "results.json"
        if not res.exists() and NO_JOB_SHARE in console:
            raise _GuestCrashed(f"the job share was not there to mount ({NO_JOB_SHARE})",
                                console)
        if not res.exists() and proc.returncode in QEMU_CRASHES:
            raise _GuestCrashed(f"QEMU itself died of signal {-proc.returncode} after "
                                f"{seconds} s", console)
        if not res.exists():
            tail = (job / "guest.log").read_text()[-3000:] if (job / "guest.log").exists() \
                else console[-3000:]
            raise GuestError(f"guest gave no results after {seconds} s (qemu exit "
                             f"{proc.returncode}):\n{tail}\n{(job / 'qemu.log').read_text()}")
        return GuestRun(json.loads(res.read_text()), seconds, console)
    finally:
        shutil.rmtree(job, ignore_errors=True)
