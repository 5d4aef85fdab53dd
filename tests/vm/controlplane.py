"""Host side of the guest kubelet test: etcd + kube-apiserver v1.37.2 on the host's loopback,
reached from the QEMU guest through QEMU's user-mode network (slirp: the guest's
``10.0.2.2`` is the host's ``127.0.0.1``).

Why on the host and not in the guest: under TCG the API server would take minutes to start
and a few hundred MB of the guest's memory; on the host it is ready in seconds. Only the node
(containerd, nri-cpumgr, the kubelet) runs in the guest, on cgroup v2.

:class:`ControlPlane` makes a CA and a serving certificate (SANs 127.0.0.1 and
:data:`GUEST_HOST`) with openssl, a static token (group ``system:masters``; authorization
``AlwaysAllow``), a service-account key pair, picks free loopback ports, starts etcd
(Debian's, from scripts/modern/build.sh) and kube-apiserver (``--disable-admission-plugins
ServiceAccount``: no controller manager makes service accounts here; pods name their node,
so no scheduler either), and waits for ``/readyz``. :meth:`guest_files` is what the guest
needs to reach it (kubeconfig, CA, token). ``stop()`` ends both processes (each in its own
session, killed by pid) and removes the work dir unless ``NRI_E2E_KEEP=1``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.cluster.pki import make_pki

GUEST_HOST = "10.0.2.2"
"""The host's loopback as the guest sees it (QEMU slirp's default gateway)."""
FEATURE_GATES = "PodLevelResources=true"


class ControlPlaneError(RuntimeError):
    """etcd or kube-apiserver did not come up (the message has the log tail)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


class ControlPlane:
    """etcd + kube-apiserver for one guest run; ``with ControlPlane(bin_dir, etcd) as cp``."""

    def __init__(self, k8s_bin: Path, etcd_bin: Path, workdir: Path | None = None) -> None:
        self.bin = Path(k8s_bin)
        self.etcd_bin = Path(etcd_bin)
        self.work = Path(workdir or tempfile.mkdtemp(prefix="vm-cp-", dir="/tmp"))
        self.token = os.urandom(16).hex()
        self.port = 0
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def pki(self) -> Path:
        return self.work / "pki"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def guest_url(self) -> str:
        return f"https://{GUEST_HOST}:{self.port}"

    def _make_pki(self) -> None:
        make_pki(self.pki, ca_cn="nri-cpumgr-vm-ca", token=self.token,
                 sans=["IP:127.0.0.1", f"IP:{GUEST_HOST}", "DNS:localhost", "DNS:kubernetes"])

    def kubeconfig(self, server: str, ca: str) -> str:
        """A kubeconfig (JSON) for ``server`` with the admin token and the CA file ``ca``."""
        return json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "vm",
            "clusters": [{"name": "vm", "cluster": {"server": server,
                                                    "certificate-authority": ca}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "vm", "context": {"cluster": "vm", "user": "admin"}}]})

    def guest_files(self, ca_path_in_guest: str) -> dict[str, str]:
        """File name -> content for the guest: ``kubeconfig`` (server :attr:`guest_url`, CA
        at ``ca_path_in_guest``), ``ca.crt``, ``token``."""
        return {"kubeconfig": self.kubeconfig(self.guest_url, ca_path_in_guest),
                "ca.crt": (self.pki / "ca.crt").read_text(), "token": self.token}

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 - for the process' life
        self.procs[name] = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=self.work,
                                            start_new_session=True)

    def _readyz(self) -> int:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        req = urllib.request.Request(f"{self.url}/readyz",
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            return 0

    def start(self, timeout: float = 240.0) -> ControlPlane:
        """Start etcd and kube-apiserver; ControlPlaneError when /readyz is not 200 in time."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self._make_pki()
        etcd, peer, self.port = _free_port(), _free_port(), _free_port()
        self._spawn("etcd", [
            str(self.etcd_bin), "--name", "vm", "--data-dir", str(self.work / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"vm=http://127.0.0.1:{peer}", "--log-level", "warn"])
        pki = self.pki
        # loopback only: QEMU's slirp turns the guest's connection to GUEST_HOST into one
        # from the host to 127.0.0.1
        self._spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd}",
            "--bind-address=127.0.0.1", f"--advertise-address={GUEST_HOST}",
            f"--secure-port={self.port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=AlwaysAllow", "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--feature-gates={FEATURE_GATES}",
            f"--cert-dir={pki}", "--endpoint-reconciler-type=none", "--v=1"])
        deadline = time.monotonic() + timeout
        while self._readyz() != 200:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise ControlPlaneError(f"{name} exited with {p.returncode}:\n"
                                            + _tail(self.work / f"{name}.log"))
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"kube-apiserver not ready after {timeout:.0f} s:\n"
                                        + _tail(self.work / "kube-apiserver.log"))
            time.sleep(1)
        (self.work / "admin.kubeconfig").write_text(
            self.kubeconfig(self.url, str(pki / "ca.crt")))

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        """kubectl v1.37.2 against this API server (from the host); stdout."""
        r = subprocess.run([str(self.bin / "kubectl"),
                            f"--kubeconfig={self.work / 'admin.kubeconfig'}", *args],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def log(self, name: str, n: int = 3000) -> str:
        return _tail(self.work / f"{name}.log", n)

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd (SIGTERM, SIGKILL after 20 s); remove the work dir
        (kept with ``NRI_E2E_KEEP=1``)."""
        for name in ("kube-apiserver", "etcd"):
            p = self.procs.pop(name, None)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        if not os.environ.get("NRI_E2E_KEEP"):
            with contextlib.suppress(OSError):
                shutil.rmtree(self.work)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
