"""The test cluster itself: control plane + one node, in a private network and mount namespace.

Run by :class:`tests.cluster.harness.Cluster` as ``unshare -m -n --propagation private --
python -m tests.cluster.node SPEC.json``. Everything it changes is inside those namespaces or
under the cluster's work directory:

* network: its own namespace, whose only device ``lo`` also holds :data:`NODE_IP` (192.0.2.1,
  a documentation address no network routes). The kubelet refuses a loopback node
  IP, and the API server reaches the kubelet (logs, exec, proxy) and host-network pods at the
  node IP; in this namespace that is the test's own host. etcd, kube-apiserver, the controller
  manager and the scheduler listen on 127.0.0.1; nothing can reach the machine's network.
* mounts (private): files over ``/proc/sys/vm/overcommit_memory``, ``/proc/sys/kernel/panic``
  and ``/proc/sys/kernel/panic_on_oops`` holding the values the kubelet wants (with
  ``protectKernelDefaults: true`` it then only checks them), and a private directory over
  ``/var/log`` (kubelet 1.20 hard-codes ``/var/log/pods``);
* cgroups: the kubelet's ``cgroupRoot`` is under the harness's own ``/nri-cpumgr-test/run-<pid>``
  tree (created in every v1 controller, cpuset copied down), so its ``kubepods`` never meets the
  node's or another run's;
* containerd 1.7's root, state, runc root, NRI socket and CNI config: the work dir
  (:class:`tests.e2e.harness.Containerd`). A CNI plugin that configures nothing
  (``cni/bin/nri-cpumgr-noop``) lets the kubelet report the node Ready; the tests' pods use it
  (they need no network) or the host network.

It writes ``ready`` (JSON) into the work dir once the node is Ready, then waits for SIGTERM:
stops the kubelet, removes every pod through CRI, stops containerd (killing leftover shims),
stops the control plane, removes its cgroups and exits.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.e2e.harness import Containerd
from tests.e2e.harness import cgroups as cg

NODE_IP = "192.0.2.1"
PORTS = {"etcd": 2379, "etcd_peer": 2380, "apiserver": 6443, "kubelet": 10250,
         "kubelet_healthz": 10248, "cm": 10257, "sched": 10259}
"""Fixed ports: the namespace is the cluster's own, so nothing else listens there."""

# protectKernelDefaults: the values the kubelet 1.20 checks (pkg/kubelet/cm
# container_manager_linux.go setupKernelTunables); only these three differ from a default host
KERNEL_DEFAULTS = {
    "vm/overcommit_memory": "1",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
}

CNI_PLUGIN = """#!/bin/sh
# nri-cpumgr test cluster: a CNI plugin that configures nothing (the tests' pods need no network)
cat >/dev/null
case "$CNI_COMMAND" in
  ADD) echo '{"cniVersion":"0.4.0"%s}' ;;
  VERSION) echo '{"cniVersion":"0.4.0","supportedVersions":["0.3.0","0.3.1","0.4.0"]}' ;;
  *) : ;;
esac
"""
POD_IP = ',"ips":[{"version":"4","address":"169.254.99.1/32"}]'
"""The address every non-host-network pod reports (link-local, configured nowhere)."""
CNI_CONF = {"cniVersion": "0.4.0", "name": "nri-cpumgr-test",
            "plugins": [{"type": "nri-cpumgr-noop"}]}


class ClusterError(RuntimeError):
    """A component did not come up (the message carries the relevant log tail)."""


def tail(path: Path, n: int = 3000) -> str:
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
        except ClusterError:
            raise
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(interval)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}"
                       + (f" (last error: {last})" if last else "") + "\n" + on_timeout())


def _run(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True)


def _network() -> None:
    # the node IP on the namespace's own loopback device: reachable only from inside
    _run("ip", "addr", "add", f"{NODE_IP}/32", "dev", "lo")
    _run("ip", "link", "set", "lo", "up")


def _private_mounts(work: Path) -> None:
    tun = work / "sysctl"
    tun.mkdir(exist_ok=True)
    for key, value in KERNEL_DEFAULTS.items():
        if Path(f"/proc/sys/{key}").read_text().strip() == value:
            continue
        f = tun / key.replace("/", "-")
        f.write_text(value + "\n")
        _run("mount", "--bind", str(f), f"/proc/sys/{key}")
    logs = work / "var-log"
    logs.mkdir(exist_ok=True)
    _run("mount", "--bind", str(logs), "/var/log")


def _cgroup_root(rel: str) -> None:
    """Create ``rel`` in every hierarchy (v1 cpuset values copied down from the root)."""
    for mount in cg.all_hierarchies().values():
        cur = mount
        for part in [p for p in rel.strip("/").split("/") if p]:
            parent, cur = cur, cur / part
            cur.mkdir(exist_ok=True)
            for f in ("cpuset.cpus", "cpuset.mems"):
                if (parent / f).is_file() and not (cur / f).read_text().strip():
                    try:
                        (cur / f).write_text((parent / f).read_text().strip())
                    except OSError:  # v2 without the controller enabled here: inherited
                        pass


def _epoch(stamp: str | None) -> float:
    """An API server timestamp (RFC 3339, UTC, "2026-12-06T03:34:15Z") in epoch seconds; 0
    when absent."""
    if not stamp:
        return 0.0
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def kubelet_config(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    """The KubeletConfiguration (kubelet.config.k8s.io/v1beta1) of the test node: 1.20's,
    plus :func:`modern_kubelet_config` for kubelet 1.37 (``spec["flavor"]``)."""
    cfg: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": PORTS["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": PORTS["kubelet_healthz"],
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": spec["cgroup_root"],
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failSwapOn": False,
        "cpuManagerPolicy": "none",  # nri-cpumgr is the only owner of cpusets
        "topologyManagerPolicy": "none",
        "makeIPTablesUtilChains": False,
        "protectKernelDefaults": True,
        "hairpinMode": "none",
        "resolvConf": "",
        "imageGCHighThresholdPercent": 100,  # never delete the imported images
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%"},
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "serializeImagePulls": False,
        # the default, /usr/libexec/kubernetes/kubelet-plugins/volume/exec, would be created
        "volumePluginDir": str(work / "volume-plugins"),
    }
    if spec.get("flavor") == "1.37":
        cfg.update(modern_kubelet_config(spec, work))
    # the test's own settings (e.g. the static CPU manager of a node to migrate)
    cfg.update(spec.get("kubelet_config") or {})
    return cfg


def modern_kubelet_config(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    """What kubelet 1.37 needs on top of :func:`kubelet_config`: to run on this cgroup v1 host
    at all (``failCgroupV1: false``; 1.35+ refuse v1 otherwise), the runtime endpoint (a
    config field since 1.27, the flags are deprecated), the pod logs directory in the work dir,
    and the feature gates of ``spec["feature_gates"]`` (PodLevelResources is on by default in
    1.34+, InPlacePodVerticalScaling GA in 1.35; the CPU manager stays ``none``)."""
    endpoint = f"unix://{spec['cri_socket']}"
    return {
        "failCgroupV1": False,
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "podLogsDir": str(work / "pod-logs"),
        "featureGates": dict(spec.get("feature_gates") or {}),
    }


class Inside:
    """The processes of the cluster, started and stopped from inside the namespaces."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.work = Path(spec["workdir"])
        self.bin = Path(spec["bin_dir"])
        self.pki = self.work / "pki"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ctrd: Containerd | None = None

    def spawn(self, name: str, args: list[str]) -> None:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 - for the process' life
        self.procs[name] = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=self.work)

    def alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise ClusterError(f"{name} exited with {p.returncode}:\n"
                                   + tail(self.work / f"{name}.log"))
        if self.ctrd is not None and not self.ctrd.running:
            raise ClusterError("containerd exited:\n" + self.ctrd.log_tail())

    def api_get(self, path: str) -> tuple[int, bytes]:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        req = urllib.request.Request(f"https://127.0.0.1:{PORTS['apiserver']}{path}",
                                     headers={"Authorization": f"Bearer {self.spec['token']}"})
        try:
            with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def node_ready(self, since: float = 0.0) -> bool:
        """The node's Ready condition is True, posted at or after ``since`` (epoch seconds; a
        restarted kubelet's node is Ready from before until its heartbeat says otherwise)."""
        code, body = self.api_get(f"/api/v1/nodes/{self.spec['node_name']}")
        if code != 200:
            return False
        conds = json.loads(body)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True"
                   and _epoch(c.get("lastHeartbeatTime")) >= int(since) for c in conds)

    def start(self) -> dict[str, Any]:
        p, pki, kubeconfig = PORTS, self.pki, self.spec["kubeconfig"]
        modern = self.spec.get("flavor") == "1.37"
        # flags 1.20 needs and later releases removed (insecure ports: 1.24)
        old_only = [] if modern else ["--insecure-port=0"]
        no_port = [] if modern else ["--port=0"]
        self.spawn("etcd", [
            self.spec.get("etcd_bin") or str(self.bin / "etcd"), "--name", "test",
            "--data-dir", str(self.work / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{p['etcd']}",
            "--advertise-client-urls", f"http://127.0.0.1:{p['etcd']}",
            "--listen-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
            "--initial-cluster", f"test=http://127.0.0.1:{p['etcd_peer']}",
            "--log-level", "warn"])
        self.spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
            "--bind-address=127.0.0.1", f"--advertise-address={NODE_IP}",
            f"--secure-port={p['apiserver']}", *old_only,
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--cert-dir={pki}", "--endpoint-reconciler-type=none", "--v=1"])
        wait_for(lambda: self.alive() or self.api_get("/readyz")[0] == 200, 180,
                 "kube-apiserver /readyz",
                 on_timeout=lambda: tail(self.work / "kube-apiserver.log"))
        self.spawn("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"), f"--kubeconfig={kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", *no_port,
            f"--secure-port={p['cm']}", f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            # 1.20's cloud controllers are off here; 1.37 has none of them in this binary
            "--controllers=*" if modern else
            "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service,-route", "--v=1"])
        self.spawn("kube-scheduler", [
            str(self.bin / "kube-scheduler"), f"--kubeconfig={kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", *no_port,
            f"--secure-port={p['sched']}", "--v=1"])

        self.ctrd = Containerd(self.spec.get("containerd", "1.7"), self.work / "node",
                               nri_request_timeout="2s",
                               log_level=self.spec.get("containerd_log_level", "info"))
        cni = self.ctrd.workdir / "cni"
        (cni / "bin").mkdir(parents=True, exist_ok=True)
        (cni / "conf").mkdir(parents=True, exist_ok=True)
        # containerd 1.7 also runs the "loopback" plugin: it reports no address
        for name, ips in (("nri-cpumgr-noop", POD_IP), ("loopback", "")):
            (cni / "bin" / name).write_text(CNI_PLUGIN % ips)
            (cni / "bin" / name).chmod(0o755)
        (cni / "conf/10-test.conflist").write_text(json.dumps(CNI_CONF))
        self.ctrd.start()
        self.spec["cri_socket"] = str(self.ctrd.cri_socket)
        self.start_kubelet()
        return {"nri_socket": str(self.ctrd.nri_socket), "cri_socket": str(self.ctrd.cri_socket),
                "containerd_bin": str(self.ctrd.bin_dir), "node_ip": NODE_IP}

    def start_kubelet(self) -> None:
        """Write the kubelet's config, start it and wait for the node to be Ready."""
        assert self.ctrd is not None
        modern = self.spec.get("flavor") == "1.37"
        kubeconfig = self.spec["kubeconfig"]
        kdir = self.work / "kubelet"
        kdir.mkdir(exist_ok=True)
        (self.work / "kubelet-config.json").write_text(
            json.dumps(kubelet_config(self.spec, self.work), indent=1))
        endpoint = f"unix://{self.ctrd.cri_socket}"
        # 1.37: the runtime endpoint is in the config, the sandbox image is containerd's
        runtime_flags = [] if modern else [
            "--container-runtime=remote", f"--container-runtime-endpoint={endpoint}",
            f"--image-service-endpoint={endpoint}",
            f"--pod-infra-container-image={self.spec['pause_image']}"]
        since = time.time()
        self.spawn("kubelet", [
            str(self.bin / "kubelet"), f"--config={self.work / 'kubelet-config.json'}",
            f"--kubeconfig={kubeconfig}", *runtime_flags,
            "--runtime-request-timeout=5m", f"--root-dir={kdir}",
            f"--hostname-override={self.spec['node_name']}", f"--node-ip={NODE_IP}",
            f"--v={self.spec.get('kubelet_verbosity', 2)}"])
        wait_for(lambda: self.alive() or self.node_ready(since), 180, "the node to be Ready",
                 on_timeout=lambda: tail(self.work / "kubelet.log", 6000))

    def restart_kubelet(self, request: dict[str, Any]) -> None:
        """Stop the kubelet (its containers keep running), apply ``request`` (``config``:
        KubeletConfiguration fields to set; ``move_aside``: files of the kubelet's root dir
        renamed to NAME.old, as an operator moves its checkpoints aside) and start it
        again."""
        kubelet = self.procs.pop("kubelet", None)
        if kubelet is not None:
            _stop(kubelet)
        self.spec["kubelet_config"] = {**(self.spec.get("kubelet_config") or {}),
                                       **(request.get("config") or {})}
        kdir = self.work / "kubelet"
        for name in request.get("move_aside") or ():
            f = kdir / name
            if f.exists():
                f.rename(kdir / f"{name}.old")
        self.start_kubelet()

    def stop(self) -> list[str]:
        problems: list[str] = []
        kubelet = self.procs.pop("kubelet", None)
        if kubelet is not None:
            _stop(kubelet)
        if self.ctrd is not None:
            problems += self.ctrd.stop(cleanup=True)
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                _stop(proc)
        problems += [f"cgroup left: {x}" for x in cg.remove_empty_kubepods()]
        return problems


def _stop(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    work = Path(spec["workdir"])
    stop = {"now": False}

    def on_term(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    inside = Inside(spec)
    code = 0
    try:
        _network()
        _private_mounts(work)
        _cgroup_root(spec["cgroup_root"])
        info = inside.start()
        info["pid"] = os.getpid()
        (work / "ready.tmp").write_text(json.dumps(info))
        os.rename(work / "ready.tmp", work / "ready")
        restart = work / "kubelet-restart.json"
        while not stop["now"]:
            inside.alive()
            if restart.exists():  # Cluster.restart_kubelet's request
                request = json.loads(restart.read_text())
                restart.unlink()
                inside.restart_kubelet(request)
                (work / "kubelet-restarted").write_text(str(request.get("id", "")))
            time.sleep(0.2)
    except ClusterError as e:
        (work / "failed").write_text(str(e))
        print(e, file=sys.stderr)
        code = 3
    finally:
        problems = inside.stop()
        if problems:
            print(f"cleanup: {problems}", file=sys.stderr)
            (work / "cleanup-problems").write_text("\n".join(problems))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
