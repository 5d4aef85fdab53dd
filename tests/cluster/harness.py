"""A single-node Kubernetes 1.20 cluster on loopback, from the binaries scripts/cluster/build.sh
builds (see docs in README "Deploying to a cluster" and ../shared/docs/real-kubelet.md).

Control plane (this process' children, 127.0.0.1 only): etcd, kube-apiserver (secure port with
a CA and serving certificate made here with openssl, a static admin token, RBAC + Node
authorization, ServiceAccount tokens signed by a key made here), kube-controller-manager (its
service-account token controller included, so a DaemonSet's service account gets a real token)
and kube-scheduler. The node (containerd 1.7 with NRI + the kubelet) runs in a private mount
namespace (:mod:`tests.cluster.node`). ``stop()`` ends all of it and removes every cgroup and
mount it made; the work dir is removed unless ``NRI_E2E_KEEP=1``.

The node's name is ``nri-node``; its InternalIP is 127.0.0.1, so the API server reaches the
kubelet (logs, exec, proxy) and host-network pods on loopback only. Pods whose service-account
credentials are mounted get ``KUBERNETES_SERVICE_HOST=127.0.0.1`` from the test overlay (the
cluster's service IP range is never routed here).
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
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.harness import cgroups as cg
from tests.e2e.harness import images as images_mod
from tests.e2e.harness.paths import REPO

BUILD_SCRIPT = REPO / "scripts/cluster/build.sh"
NODE_NAME = "nri-node"
ADMIN_TOKEN_USER = "admin"


class ClusterError(RuntimeError):
    """The cluster did not come up (the message carries the relevant log tails)."""


def built_bin_dir() -> Path | None:
    """The cached binaries' directory, or None when scripts/cluster/build.sh has not run."""
    r = subprocess.run(["bash", str(BUILD_SCRIPT), "--print"], capture_output=True, text=True)
    return Path(r.stdout.strip()) if r.returncode == 0 else None


def build(timeout: float = 3600.0) -> Path:
    """Build (or reuse) the binaries; returns their directory. Raises ClusterError."""
    r = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise ClusterError(f"scripts/cluster/build.sh failed:\n{r.stderr[-4000:]}")
    return Path(r.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def wait_for(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.5,
             on_timeout: Callable[[], str] = lambda: "") -> Any:
    """Poll ``pred`` until it returns something truthy; ClusterError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(interval)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}"
                       + (f" (last error: {last})" if last else "") + "\n" + on_timeout())


class Cluster:
    """The test cluster; ``with Cluster(bin_dir) as c: c.kubectl("get", "nodes")``."""

    def __init__(self, bin_dir: Path, workdir: Path | None = None) -> None:
        self.bin = Path(bin_dir)
        self.work = Path(workdir or tempfile.mkdtemp(prefix="k8s-", dir="/tmp"))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports = {k: free_port() for k in (
            "etcd", "etcd_peer", "apiserver", "cm", "sched", "kubelet", "kubelet_healthz")}
        self.token = os.urandom(16).hex()
        self.node_info: dict[str, Any] = {}
        self.cgroup_root = f"{cg.TEST_ROOT}/node"

    # -- paths
    @property
    def kubeconfig(self) -> Path:
        return self.work / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def ca_cert(self) -> Path:
        return self.work / "pki/ca.crt"

    # -- set-up
    def _pki(self) -> None:
        pki = self.work / "pki"
        pki.mkdir(parents=True, exist_ok=True)

        def ossl(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=pki)

        ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "2", "-subj", "/CN=nri-cpumgr-test-ca")
        (pki / "san.cnf").write_text(
            "[req]\ndistinguished_name=dn\n[dn]\n[ext]\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
            "extendedKeyUsage=serverAuth\n")
        ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out",
             "apiserver.csr", "-subj", "/CN=kube-apiserver")
        ossl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "apiserver.crt", "-days", "2", "-extfile", "san.cnf",
             "-extensions", "ext")
        ossl("genrsa", "-out", "sa.key", "2048")
        ossl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        (pki / "tokens.csv").write_text(
            f'{self.token},{ADMIN_TOKEN_USER},{ADMIN_TOKEN_USER},"system:masters"\n')
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {
                "server": self.server, "certificate-authority": str(self.ca_cert)}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }))

    def _spawn(self, name: str, args: list[str], **kw: Any) -> None:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 - kept for the process' life
        self.procs[name] = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=self.work, **kw)

    def _alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise ClusterError(f"{name} exited with {p.returncode}:\n"
                                   + _tail(self.work / f"{name}.log"))

    def _get(self, path: str) -> tuple[int, bytes]:
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        req = urllib.request.Request(self.server + path,
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def start(self, timeout: float = 240.0) -> Cluster:
        """Start everything and wait for the node to be Ready. Raises ClusterError."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        t0 = time.monotonic()
        self.work.mkdir(parents=True, exist_ok=True)
        self._pki()
        pki = self.work / "pki"
        p = self.ports
        self._spawn("etcd", [
            str(self.bin / "etcd"), "--name", "test", "--data-dir", str(self.work / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{p['etcd']}",
            "--advertise-client-urls", f"http://127.0.0.1:{p['etcd']}",
            "--listen-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
            "--initial-cluster", f"test=http://127.0.0.1:{p['etcd_peer']}",
            "--log-level", "warn"])
        self._spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={p['apiserver']}", "--insecure-port=0",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--cert-dir={pki}", "--endpoint-reconciler-type=none", "--v=1"])
        wait_for(lambda: self._alive() or self._get("/readyz")[0] == 200, 120,
                 "kube-apiserver /readyz",
                 on_timeout=lambda: _tail(self.work / "kube-apiserver.log"))
        self._spawn("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", "--port=0",
            f"--secure-port={p['cm']}", f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}", "--use-service-account-credentials=false",
            "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service,-route",
            "--v=1"])
        self._spawn("kube-scheduler", [
            str(self.bin / "kube-scheduler"), f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", "--port=0",
            f"--secure-port={p['sched']}", "--v=1"])
        spec = {"workdir": str(self.work / "node"), "kubelet": str(self.bin / "kubelet"),
                "kubeconfig": str(self.kubeconfig), "cgroup_root": self.cgroup_root,
                "kubelet_port": p["kubelet"], "kubelet_healthz_port": p["kubelet_healthz"],
                "node_name": NODE_NAME, "pause_image": images_mod.PAUSE_IMAGE}
        (self.work / "node").mkdir(exist_ok=True)
        (self.work / "node.json").write_text(json.dumps(spec))
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self._spawn("node", ["unshare", "-m", "--propagation", "private", "--",
                             sys.executable, "-m", "tests.cluster.node",
                             str(self.work / "node.json")], env=env, cwd=REPO)
        ready = self.work / "node/ready"
        wait_for(lambda: self._alive() or ready.is_file(), 90, "the node's containerd",
                 on_timeout=lambda: _tail(self.work / "node.log"))
        self.node_info = json.loads(ready.read_text())
        left = max(30.0, timeout - (time.monotonic() - t0))
        wait_for(lambda: self._alive() or self.node_ready(), left, f"node {NODE_NAME} Ready",
                 on_timeout=lambda: _tail(self.work / "node/kubelet.log", 6000))

    def node_ready(self) -> bool:
        code, body = self._get(f"/api/v1/nodes/{NODE_NAME}")
        if code != 200:
            return False
        conds = json.loads(body)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    # -- use
    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120.0) -> str:
        """Run the cluster's kubectl; returns stdout. Raises ClusterError when it fails."""
        r = subprocess.run([str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}",
                            *args], input=input, capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args))

    @property
    def cri_socket(self) -> Path:
        return Path(self.node_info["cri_socket"])

    def import_image(self, archive: Path) -> None:
        """Import a docker-archive tarball into the node's containerd (CRI namespace)."""
        ctr = Path(self.node_info["containerd_bin"]) / "ctr"
        r = subprocess.run([str(ctr), "--address", str(self.cri_socket), "-n", "k8s.io",
                            "images", "import", "--no-unpack", str(archive)],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise ClusterError(f"ctr images import {archive}: {r.stderr.strip()}")

    # -- tear-down
    def stop(self) -> list[str]:
        """Stop the node (its pods removed), then the control plane; returns problems met."""
        problems: list[str] = []
        node = self.procs.pop("node", None)
        if node is not None and node.poll() is None:
            node.send_signal(signal.SIGTERM)
            try:
                node.wait(120)
            except subprocess.TimeoutExpired:
                problems.append("node did not stop in 120 s: killed")
                node.kill()
                node.wait(10)
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            p = self.procs.pop(name, None)
            if p is None or p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        problems += [f"cgroup left: {x}" for x in cg.remove_empty_kubepods()]
        if not os.environ.get("NRI_E2E_KEEP"):
            with contextlib.suppress(OSError):
                shutil.rmtree(self.work)
        return problems

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
