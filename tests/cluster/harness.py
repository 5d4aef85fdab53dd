"""A single-node Kubernetes cluster for the tests: 1.20.2 with containerd 1.7, from the binaries
scripts/cluster/build.sh builds, or 1.37.2 with containerd 2.x, from scripts/modern/build.sh's
(../shared/docs/real-kubelet.md has what is known to work here).

The whole cluster, control plane and node, runs in a network and mount namespace of its own
(:mod:`tests.cluster.node`), so it touches neither the machine's network nor its mounts. This
side makes the cluster's credentials (a CA and serving certificate with openssl, a static admin
token, a service-account signing key), starts the namespace's process, and talks to the API
server through ``nsenter --net`` into that namespace (kubectl). The node's containerd is
reached through its unix socket (a file in the work dir), like any CRI client.

``stop()`` ends all of it, with every pod, cgroup and mount it made; the work dir is removed
unless ``NRI_E2E_KEEP=1``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.cluster.node import NODE_IP, PORTS, ClusterError, tail, wait_for
from tests.cluster.pki import make_pki
from tests.e2e.harness import cgroups as cg
from tests.e2e.harness import images as images_mod
from tests.e2e.harness.paths import REPO

__all__ = ["NODE_IP", "Cluster", "ClusterError", "built_bin_dir", "modern_bin_dirs",
           "wait_for"]

BUILD_SCRIPT = REPO / "scripts/cluster/build.sh"
MODERN_BUILD_SCRIPT = REPO / "scripts/modern/build.sh"
NODE_NAME = "nri-node"


def built_bin_dir() -> Path | None:
    """The cached binaries' directory, or None when scripts/cluster/build.sh has not run."""
    r = subprocess.run(["bash", str(BUILD_SCRIPT), "--print"], capture_output=True, text=True)
    return Path(r.stdout.strip()) if r.returncode == 0 else None


def modern_bin_dirs(*components: str) -> tuple[dict[str, Path], list[str]]:
    """The bin directories of scripts/modern/build.sh components that are built, and the
    reasons (one per missing component) for those that are not."""
    dirs, missing = {}, []
    for c in components:
        r = subprocess.run(["bash", str(MODERN_BUILD_SCRIPT), "--print", c],
                           capture_output=True, text=True)
        if r.returncode == 0:
            dirs[c] = Path(r.stdout.strip())
        else:
            missing.append(r.stderr.strip() or f"modern {c} not built")
    return dirs, missing


class Cluster:
    """The test cluster; ``with Cluster(bin_dir) as c: c.kubectl("get", "nodes")``."""

    def __init__(self, bin_dir: Path, workdir: Path | None = None, *, flavor: str = "1.20",
                 containerd: str = "1.7", etcd_bin: Path | None = None,
                 feature_gates: dict[str, bool] | None = None,
                 containerd_log_level: str = "info", kubelet_verbosity: int = 2,
                 kubelet_config: dict[str, Any] | None = None) -> None:
        """``flavor`` "1.20" (kubelet 1.20.2, CRI v1alpha2: containerd "1.7") or "1.37"
        (kubelet 1.37.2: containerd "2.1" or "2.4"); ``feature_gates`` for the kubelet
        (1.37 only); ``etcd_bin`` when ``bin_dir`` has no etcd; ``kubelet_config``:
        KubeletConfiguration fields set on top of the test node's (tests/cluster/node.py)."""
        if flavor not in ("1.20", "1.37"):
            raise ValueError(f"unknown cluster flavor {flavor!r}")
        if (flavor == "1.20") != (containerd == "1.7"):
            raise ValueError(f"kubelet {flavor} does not run with containerd {containerd}")
        self.flavor, self.containerd = flavor, containerd
        self.etcd_bin = etcd_bin
        self.feature_gates = dict(feature_gates or {})
        self.kubelet_config = dict(kubelet_config or {})
        self.containerd_log_level, self.kubelet_verbosity = containerd_log_level, kubelet_verbosity
        self.bin = Path(bin_dir)
        self.work = Path(workdir or tempfile.mkdtemp(prefix="k8s-", dir="/tmp"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.token = os.urandom(16).hex()
        self.info: dict[str, Any] = {}
        self.cgroup_root = f"{cg.TEST_ROOT}/node"
        self.ports = dict(PORTS)

    @property
    def kubeconfig(self) -> Path:
        return self.work / "admin.kubeconfig"

    @property
    def cri_socket(self) -> Path:
        return Path(self.info["cri_socket"])

    @property
    def nri_socket(self) -> Path:
        return Path(self.info["nri_socket"])

    def _pki(self) -> None:
        pki = self.work / "pki"
        make_pki(pki, ca_cn="nri-cpumgr-test-ca", token=self.token,
                 sans=["IP:127.0.0.1", f"IP:{NODE_IP}", "DNS:localhost", "DNS:kubernetes",
                       "DNS:kubernetes.default", "DNS:kubernetes.default.svc"])
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {
                "server": f"https://127.0.0.1:{PORTS['apiserver']}",
                "certificate-authority": str(pki / "ca.crt")}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }))

    def start(self, timeout: float = 360.0) -> Cluster:
        """Start the cluster and wait for its node to be Ready. Raises ClusterError (with the
        log tail of what failed)."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self._pki()
        spec = {"workdir": str(self.work), "bin_dir": str(self.bin),
                "kubeconfig": str(self.kubeconfig), "token": self.token,
                "cgroup_root": self.cgroup_root, "node_name": NODE_NAME,
                "pause_image": images_mod.PAUSE_IMAGE, "flavor": self.flavor,
                "containerd": self.containerd,
                "etcd_bin": str(self.etcd_bin) if self.etcd_bin else None,
                "feature_gates": self.feature_gates, "kubelet_config": self.kubelet_config,
                "containerd_log_level": self.containerd_log_level,
                "kubelet_verbosity": self.kubelet_verbosity}
        (self.work / "cluster.json").write_text(json.dumps(spec))
        log = open(self.work / "cluster.log", "ab")  # noqa: SIM115 - for the process' life
        self.proc = subprocess.Popen(
            ["unshare", "-m", "-n", "--propagation", "private", "--",
             sys.executable, "-m", "tests.cluster.node", str(self.work / "cluster.json")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)))
        ready, failed = self.work / "ready", self.work / "failed"

        def up() -> bool:
            if failed.exists():
                raise ClusterError(failed.read_text())
            if self.proc is not None and self.proc.poll() is not None:
                raise ClusterError(f"cluster process exited with {self.proc.returncode}:\n"
                                   + tail(self.work / "cluster.log"))
            return ready.is_file()

        wait_for(up, timeout, "the cluster", on_timeout=lambda: tail(self.work / "kubelet.log"))
        self.info = json.loads(ready.read_text())

    # -- use
    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120.0) -> str:
        """Run kubectl (1.20 cluster: Debian's 1.32; 1.37: the modern build's) in the cluster's
        network namespace; returns stdout. Raises ClusterError when it fails (unless
        ``check`` is False)."""
        return self.run_in_net([str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}",
                                *args], input=input, check=check, timeout=timeout)

    def helm(self, helm_bin: Path, *args: str, timeout: float = 300.0) -> str:
        """Run ``helm`` against the cluster (its config, cache and data dirs in the work dir);
        returns stdout. Raises ClusterError when it fails."""
        home = self.work / "helm"
        env = {"KUBECONFIG": str(self.kubeconfig), "HELM_CACHE_HOME": str(home / "cache"),
               "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
        return self.run_in_net([str(helm_bin), *args], timeout=timeout, env=env)

    def run_in_net(self, argv: list[str], *, input: str | None = None, check: bool = True,
                   timeout: float = 120.0, env: dict[str, str] | None = None) -> str:
        """Run ``argv`` in the cluster's network namespace; returns stdout. Raises
        ClusterError when it exits non-zero (unless ``check`` is False)."""
        assert self.proc is not None, "cluster not started"
        r = subprocess.run(["nsenter", f"--net=/proc/{self.proc.pid}/ns/net", "--", *argv],
                           input=input, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, **(env or {})))
        if check and r.returncode != 0:
            raise ClusterError(f"{Path(argv[0]).name} {' '.join(argv[1:])}: "
                               f"{r.stderr.strip()}")
        return r.stdout

    def restart_kubelet(self, config: dict[str, Any], move_aside: tuple[str, ...] = (),
                        timeout: float = 240.0) -> None:
        """Restart the node's kubelet with ``config`` set on its KubeletConfiguration, the
        files ``move_aside`` of its root dir renamed to NAME.old while it is stopped; waits
        until the node is Ready again. Raises ClusterError."""
        self.restart_id = getattr(self, "restart_id", 0) + 1
        done = self.work / "kubelet-restarted"
        done.unlink(missing_ok=True)
        tmp = self.work / "kubelet-restart.tmp"
        tmp.write_text(json.dumps({"id": self.restart_id, "config": config,
                                   "move_aside": list(move_aside)}))
        tmp.rename(self.work / "kubelet-restart.json")

        def restarted() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                raise ClusterError("the cluster process exited during the kubelet's restart:\n"
                                   + tail(self.work / "cluster.log"))
            return done.is_file() and done.read_text() == str(self.restart_id)

        wait_for(restarted, timeout, "the kubelet's restart",
                 on_timeout=lambda: tail(self.work / "kubelet.log"))

    @property
    def kubelet_dir(self) -> Path:
        """The kubelet's root dir (its checkpoints: cpu_manager_state, ...)."""
        return self.work / "kubelet"

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args))

    def import_image(self, archive: Path) -> None:
        """Import a docker-archive tarball into the node's containerd (the CRI namespace)."""
        ctr = Path(self.info["containerd_bin"]) / "ctr"
        r = subprocess.run([str(ctr), "--address", str(self.cri_socket), "-n", "k8s.io",
                            "images", "import", str(archive)],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise ClusterError(f"ctr images import {archive}: {r.stderr.strip()}")

    def log(self, name: str, n: int = 4000) -> str:
        """The tail of a component's log (``kubelet``, ``kube-apiserver``, ``node/containerd``)."""
        return tail(self.work / f"{name}.log", n)

    # -- tear-down
    def stop(self, timeout: float = 180.0) -> list[str]:
        """Stop everything (the node's pods removed first); returns the problems met."""
        problems: list[str] = []
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                problems.append(f"the cluster did not stop in {timeout:.0f} s: killed")
                proc.kill()
                proc.wait(10)
        left = self.work / "cleanup-problems"
        if left.exists():
            problems += left.read_text().splitlines()
        problems += [f"cgroup left: {x}" for x in cg.remove_empty_kubepods()]
        if not os.environ.get("NRI_E2E_KEEP") and not problems:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.work)
        return problems

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_rollout(c: Cluster, ns: str, ds: str, timeout: float = 240.0) -> None:
    """``kubectl rollout status`` of a DaemonSet, with the pods' description on failure."""
    t0 = time.monotonic()
    try:
        c.kubectl("rollout", "status", "-n", ns, f"daemonset/{ds}", f"--timeout={timeout:.0f}s",
                  timeout=timeout + 20)
    except ClusterError:
        pods = c.kubectl("get", "pods", "-A", "-o", "wide", check=False)
        desc = c.kubectl("describe", "pods", "-n", ns, check=False)
        raise ClusterError(f"rollout of {ns}/{ds} not done after "
                           f"{time.monotonic() - t0:.0f}s:\n{pods}\n{desc[-4000:]}") from None


def nrt_cpu(c: Cluster) -> dict[str, str]:
    """Available CPUs per zone of the node's NodeResourceTopology object ({} while it does not
    exist)."""
    out = c.kubectl("get", "-o", "json", "noderesourcetopologies.topology.node.k8s.io",
                    NODE_NAME, "--ignore-not-found")
    zones = json.loads(out)["zones"] if out.strip() else []
    return {z["name"]: next(r["available"] for r in z["resources"] if r["name"] == "cpu")
            for z in zones}
