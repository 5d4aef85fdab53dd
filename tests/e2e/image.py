"""The project's container image in the e2e tests: build it (scripts/build_image.sh, cached),
import it into a test containerd, and run the plugin from it as a pod through CRI the way the
kubelet runs deploy/base/daemonset.yaml (same mounts, same security context, host network).

The CRI ContainerConfig is built here from the harness's generated CRI stubs (the harness's
``CRIClient.container_config`` plus mounts, args and the security context), so the harness
itself is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.harness import Containerd, CRIClient
from tests.e2e.harness.paths import IMAGE_CACHE, REPO

IMAGE_TAG = "nri-cpumgr:dev"
IMAGE_REF = f"docker.io/library/{IMAGE_TAG}"  # containerd's normalized name of the tag
BUILD_SCRIPT = REPO / "scripts/build_image.sh"
DEPLOY = REPO / "deploy" / "base"
BUILD_TIMEOUT = 900.0


class ImageBuildError(RuntimeError):
    """scripts/build_image.sh failed (its output is the message)."""


def image_sources() -> list[Path]:
    """Every file the image is built from (what the Dockerfile copies, and the recipe)."""
    files = [REPO / "Dockerfile", REPO / ".dockerignore", REPO / "pyproject.toml",
             REPO / "README.md", BUILD_SCRIPT, REPO / "deploy" / "examples/config.yaml"]
    files += [p for p in (REPO / "nri_cpumgr").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts]
    return [p for p in files if p.exists()]


def sources_digest() -> str:
    """A hash of every source file's path and content (16 hex digits)."""
    h = hashlib.sha256()
    for p in sorted(image_sources()):
        h.update(str(p.relative_to(REPO)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def archive_path() -> Path:
    """Where the image built from the current sources is cached: named by their digest, so two
    checkouts sharing a runtime directory (or a checkout switching branches) never take one
    another's image for their own."""
    return IMAGE_CACHE / f"nri-cpumgr-{sources_digest()}.tar"


def ensure_image(archive: Path | None = None) -> Path:
    """The docker-archive tarball of the image of the current sources, built with
    scripts/build_image.sh when not cached yet (older archives are removed). Raises
    :class:`ImageBuildError` with the script's output (e.g. buildah could not be fetched from
    Debian's archive)."""
    archive = archive or archive_path()
    if archive.is_file():
        return archive
    env = dict(os.environ, OUT=str(archive))
    try:
        r = subprocess.run(["bash", str(BUILD_SCRIPT), IMAGE_TAG], capture_output=True,
                           text=True, timeout=BUILD_TIMEOUT, env=env, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        raise ImageBuildError(f"scripts/build_image.sh timed out after {e.timeout} s") from None
    if r.returncode != 0 or not archive.is_file():
        raise ImageBuildError(f"scripts/build_image.sh failed ({r.returncode}):\n"
                              + (r.stdout + r.stderr)[-4000:])
    for old in IMAGE_CACHE.glob("nri-cpumgr*.tar"):
        if old != archive and time.time() - old.stat().st_mtime > 3600:
            old.unlink(missing_ok=True)  # another checkout's may still be in use for an hour
    return archive


def import_image(containerd: Containerd, archive: Path) -> None:
    """``ctr images import`` into the k8s.io namespace (CRI sees it as :data:`IMAGE_REF`)."""
    containerd.ctr("images", "import", str(archive))
    out = containerd.ctr("images", "ls", "-q").stdout.split()
    if IMAGE_REF not in out:
        raise ImageBuildError(f"{IMAGE_REF} not in containerd after import: {out}")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def daemonset_config() -> dict[str, Any]:
    """The plugin configuration the DaemonSet runs with (deploy/base/configmap.yaml)."""
    for doc in yaml.safe_load_all((DEPLOY / "configmap.yaml").read_text()):
        if doc and doc.get("kind") == "ConfigMap":
            return dict(yaml.safe_load(doc["data"]["config.yaml"]))
    raise KeyError("no ConfigMap in deploy/base/configmap.yaml")


@dataclass
class PluginPod:
    """The plugin running as a pod: ids, the host directories behind its mounts, its port."""

    pod_id: str
    container_id: str
    metrics_port: int
    state_dir: Path
    log_path: Path | None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.metrics_port}{path}"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """``(status, body)`` of an HTTP GET on the plugin's metrics port."""
        try:
            with urllib.request.urlopen(self.url(path), timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def log_text(self) -> str:
        """The container's CRI log (the plugin logs to stderr)."""
        if self.log_path is None or not self.log_path.is_file():
            return "(no container log)"
        return self.log_path.read_text(errors="replace")


def run_plugin_pod(cri: CRIClient, containerd: Containerd, workdir: Path,
                   **config_overrides: Any) -> PluginPod:
    """Run the plugin from the image as the DaemonSet does, on ``containerd``.

    Mounts (as deploy/base/daemonset.yaml): the test containerd's NRI socket directory at the
    directory of the ConfigMap's ``socketPath``, the host's /sys read-only at /host/sys
    (``--sysfs-root /host``), ``workdir/state`` at ``stateDirectory``, ``workdir/etc`` (the
    ConfigMap's config.yaml plus ``config_overrides``) read-only at /etc/nri-cpumgr, a /tmp,
    the test containerd's CRI socket read-only at /run/containerd/containerd.sock.
    Security (as the DaemonSet): not privileged, every capability dropped, no_new_privs,
    read-only root filesystem, uid 0; host network, so ``metricsAddress`` becomes
    127.0.0.1:<free port>. Resources: Burstable (50m/64Mi requests, 1 CPU/256Mi limits).
    Returns once the container is started (not yet registered: wait for that).
    """
    pb = cri.pb
    cfg = daemonset_config()
    port = free_port()
    # no API server beside this CRI-only pod: the DaemonSet's pod watch (podSpecSource
    # apiServer, which needs KUBERNETES_SERVICE_HOST and NODE_NAME) is off unless a test
    # gives it one
    cfg.update({"metricsAddress": f"127.0.0.1:{port}", "podSpecSource": "none"},
               **config_overrides)
    etc = workdir / "etc"
    state = workdir / "state"
    tmp = workdir / "tmp"
    for d in (etc, state, tmp):
        d.mkdir(parents=True, exist_ok=True)
    (etc / "config.yaml").write_text(yaml.safe_dump(cfg))
    sock_dir = str(Path(cfg["socketPath"]).parent)

    pod = cri.run_pod("nri-cpumgr", "Burstable", namespace="nri-cpumgr")
    config = cri.container_config(
        pod, "nri-cpumgr", requests={"cpu": "50m", "memory": "64Mi"},
        limits={"cpu": "1", "memory": "256Mi"}, image=IMAGE_REF)
    del config.command[:]  # the image's entrypoint (nri-cpumgr run), as the DaemonSet
    config.args.extend(["--config", "/etc/nri-cpumgr/config.yaml", "--sysfs-root", "/host"])
    config.mounts.extend([
        pb.Mount(container_path=sock_dir, host_path=str(containerd.nri_socket.parent)),
        pb.Mount(container_path="/host/sys", host_path="/sys", readonly=True),
        pb.Mount(container_path=cfg["stateDirectory"], host_path=str(state)),
        pb.Mount(container_path="/etc/nri-cpumgr", host_path=str(etc), readonly=True),
        pb.Mount(container_path="/tmp", host_path=str(tmp)),
        # the runtime's CRI socket at containerd's default path, read-only (the DaemonSet
        # mounts /run/containerd; the test daemon's socket is in its work dir): the
        # shipped sharedPoolUpdateMode (auto) takes cri through it before containerd 2.4
        pb.Mount(container_path="/run/containerd/containerd.sock",
                 host_path=str(containerd.cri_socket), readonly=True),
    ])
    sc = config.linux.security_context
    sc.privileged = False
    sc.capabilities.CopyFrom(pb.Capability(drop_capabilities=["ALL"]))
    sc.no_new_privs = True
    sc.readonly_rootfs = True
    sc.run_as_user.value = 0
    resp = cri.runtime.CreateContainer(
        pb.CreateContainerRequest(pod_sandbox_id=pod, config=config,
                                  sandbox_config=cri.pods[pod]),
        timeout=cri.timeout)
    cid = resp.container_id
    cri.start_container(cid)
    sandbox = cri.pods[pod]
    log_path = (Path(sandbox.log_directory) / config.log_path) if sandbox.log_directory else None
    return PluginPod(pod, cid, port, state, log_path)


def wait_http(pod: PluginPod, path: str, status: int = 200, timeout: float = 15.0) -> int:
    """Poll ``path`` until it answers ``status``; returns the last status (0 = no answer)."""
    deadline = time.monotonic() + timeout
    last = 0
    while True:
        try:
            last = pod.get(path, timeout=2.0)[0]
        except OSError:
            last = 0
        if last == status or time.monotonic() > deadline:
            return last
        time.sleep(0.1)


def exec_sync(cri: CRIClient, cid: str, cmd: list[str], timeout: int = 20) -> tuple[int, str]:
    """CRI ExecSync (what ``kubectl exec`` does): ``(exit code, stdout + stderr)``."""
    r = cri.runtime.ExecSync(cri.pb.ExecSyncRequest(container_id=cid, cmd=cmd, timeout=timeout),
                             timeout=timeout + 10)
    return r.exit_code, r.stdout.decode() + r.stderr.decode()


def process_status(cri: CRIClient, cid: str) -> dict[str, str]:
    """``/proc/<pid>/status`` of the container's init process, as a dict."""
    pid = int(json.loads(cri.container_status(cid, verbose=True).info["info"])["pid"])
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out
