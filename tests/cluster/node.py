"""One Kubernetes node (containerd 1.7 with NRI + a real kubelet 1.20) in a private mount namespace.

Run by :class:`tests.cluster.harness.Cluster` as
``unshare -m --propagation private -- python -m tests.cluster.node SPEC.json``; everything it
changes is either inside that namespace or under the cluster's work directory:

* bind mounts (private, gone with the namespace): files over ``/proc/sys/vm/overcommit_memory``,
  ``/proc/sys/kernel/panic`` and ``/proc/sys/kernel/panic_on_oops`` holding the values the
  kubelet wants (with ``protectKernelDefaults: true`` it then checks them and writes nothing),
  and a private directory over ``/var/log`` (kubelet 1.20 hard-codes ``/var/log/pods``);
* cgroups: the kubelet's ``cgroupRoot`` is ``<run root>/node`` under the harness's own
  ``/nri-cpumgr-test/run-<pid>`` tree (created in every v1 controller, cpuset copied down), so its
  ``kubepods`` never meets the node's or another run's;
* containerd's root, state, runc root, NRI socket, CNI config: the work dir
  (:class:`tests.e2e.harness.Containerd`).

The process writes ``ready`` into the work dir once both daemons run, then waits for SIGTERM: it
stops the kubelet, removes every pod through CRI, stops containerd (killing leftover shims) and
exits. A trivial CNI plugin (``cni/bin/nri-cpumgr-noop``) reports a link-local address and
configures nothing: the kubelet reports the node Ready only once the runtime has a CNI config,
while every pod of the tests uses the host network (kubelet notes in docs/real-kubelet.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.e2e.harness import Containerd
from tests.e2e.harness import cgroups as cg

# protectKernelDefaults: the values the kubelet 1.20 checks (pkg/kubelet/cm
# container_manager_linux.go setupKernelTunables); only these three differ from a default host
KERNEL_DEFAULTS = {
    "vm/overcommit_memory": "1",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
}

CNI_PLUGIN = """#!/bin/sh
# nri-cpumgr test node: a CNI plugin that configures nothing (every test pod is host-network)
cat >/dev/null
case "$CNI_COMMAND" in
  ADD) echo '{"cniVersion":"0.4.0","ips":[{"version":"4","address":"169.254.99.1/32"}]}' ;;
  VERSION) echo '{"cniVersion":"0.4.0","supportedVersions":["0.3.0","0.3.1","0.4.0"]}' ;;
  *) : ;;
esac
"""
CNI_CONF = {"cniVersion": "0.4.0", "name": "nri-cpumgr-test",
            "plugins": [{"type": "nri-cpumgr-noop"}]}


def _mount_bind(src: Path, dst: str) -> None:
    subprocess.run(["mount", "--bind", str(src), dst], check=True)


def _private_mounts(work: Path) -> None:
    tun = work / "sysctl"
    tun.mkdir(exist_ok=True)
    for key, value in KERNEL_DEFAULTS.items():
        if Path(f"/proc/sys/{key}").read_text().strip() == value:
            continue
        f = tun / key.replace("/", "-")
        f.write_text(value + "\n")
        _mount_bind(f, f"/proc/sys/{key}")
    logs = work / "var-log"
    logs.mkdir(exist_ok=True)
    _mount_bind(logs, "/var/log")


def _cgroup_root(rel: str) -> None:
    """Create ``rel`` in every v1 hierarchy (cpuset values copied down from the root)."""
    for mount in cg.all_hierarchies().values():
        parts = [p for p in rel.strip("/").split("/") if p]
        cur = mount
        for part in parts:
            parent, cur = cur, cur / part
            cur.mkdir(exist_ok=True)
            for f in ("cpuset.cpus", "cpuset.mems"):
                if (parent / f).is_file() and not (cur / f).read_text().strip():
                    (cur / f).write_text((parent / f).read_text().strip())


def kubelet_config(spec: dict[str, Any]) -> dict[str, Any]:
    """The KubeletConfiguration (kubelet.config.k8s.io/v1beta1, 1.20) of the test node."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": spec["kubelet_port"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": spec["kubelet_healthz_port"],
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": spec["cgroup_root"],
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failSwapOn": False,
        "cpuManagerPolicy": "none",
        "topologyManagerPolicy": "none",
        "makeIPTablesUtilChains": False,
        "protectKernelDefaults": True,
        "hairpinMode": "none",
        "resolvConf": "",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%"},
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "serializeImagePulls": False,
    }


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    work = Path(spec["workdir"])
    stop = {"now": False}

    def on_term(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    _private_mounts(work)
    _cgroup_root(spec["cgroup_root"])

    ctrd = Containerd("1.7", work / "ctrd", nri_request_timeout="2s")
    (ctrd.workdir / "cni/bin").mkdir(parents=True, exist_ok=True)
    (ctrd.workdir / "cni/conf").mkdir(parents=True, exist_ok=True)
    plugin = ctrd.workdir / "cni/bin/nri-cpumgr-noop"
    plugin.write_text(CNI_PLUGIN)
    plugin.chmod(0o755)
    (ctrd.workdir / "cni/conf/10-test.conflist").write_text(json.dumps(CNI_CONF))
    ctrd.start()
    kdir = work / "kubelet"
    kdir.mkdir(exist_ok=True)
    (work / "kubelet-config.json").write_text(json.dumps(kubelet_config(spec), indent=1))
    endpoint = f"unix://{ctrd.cri_socket}"
    log = open(work / "kubelet.log", "ab")  # noqa: SIM115 - open for the process' life
    kubelet = subprocess.Popen(
        [spec["kubelet"], f"--config={work / 'kubelet-config.json'}",
         f"--kubeconfig={spec['kubeconfig']}", "--container-runtime=remote",
         f"--container-runtime-endpoint={endpoint}", f"--image-service-endpoint={endpoint}",
         "--runtime-request-timeout=5m", f"--root-dir={kdir}",
         f"--hostname-override={spec['node_name']}", "--node-ip=127.0.0.1",
         f"--pod-infra-container-image={spec['pause_image']}", "--v=2"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    info = {"nri_socket": str(ctrd.nri_socket), "cri_socket": str(ctrd.cri_socket),
            "containerd_bin": str(ctrd.bin_dir), "kubelet_pid": kubelet.pid,
            "containerd_pid": ctrd.pid, "ns_pid": os.getpid()}
    (work / "ready.tmp").write_text(json.dumps(info))
    os.rename(work / "ready.tmp", work / "ready")
    code = 0
    while not stop["now"]:
        if kubelet.poll() is not None:
            code = 3
            print(f"kubelet exited with {kubelet.returncode}", file=sys.stderr)
            break
        if not ctrd.running:
            code = 4
            print("containerd exited", file=sys.stderr)
            break
        time.sleep(0.2)
    if kubelet.poll() is None:
        kubelet.terminate()
        try:
            kubelet.wait(20)
        except subprocess.TimeoutExpired:
            kubelet.kill()
            kubelet.wait(10)
    problems = ctrd.stop(cleanup=True)
    if problems:
        print(f"containerd cleanup: {problems}", file=sys.stderr)
    left = cg.remove_empty_kubepods()
    if left:
        print(f"cgroups left: {left}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
