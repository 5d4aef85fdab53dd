"""nri-cpumgr deployed as users deploy it: the container image, run as a pod through CRI with
the DaemonSet's mounts and security settings, pinning containers on a real containerd.

The image is built by scripts/build_image.sh (buildah; cached in .runtime/images/ until a
source changes). When it cannot be built (no root, buildah not installable) the test is
skipped, or fails when CI is set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import cgroups
from tests.e2e.image import (
    ImageBuildError,
    ensure_image,
    exec_sync,
    import_image,
    process_status,
    run_plugin_pod,
    wait_http,
)
from tests.e2e.plugin_run import eventually

MEM = "200Mi"


@pytest.fixture(scope="session")
def plugin_image() -> Path:
    """The image tarball (built once per session at most)."""
    try:
        return ensure_image()
    except ImageBuildError as e:
        msg = f"cannot build the nri-cpumgr image: {e}"
        if os.environ.get("CI"):
            pytest.fail(msg + "\n(CI is set: the in-pod test is required)", pytrace=False)
        pytest.skip(msg)


def _metrics(text: str) -> dict[str, float]:
    return {s.name: s.value for fam in text_string_to_metric_families(text)
            for s in fam.samples if not s.labels}


def test_plugin_as_a_pod_pins_containers(containerd, cri, e2e_workdir, plugin_image):
    assert cgroups.host_online_cpus() == "0-1", "this scenario needs a 2-CPU host"
    import_image(containerd, plugin_image)
    since = containerd.log_offset()
    plugin = run_plugin_pod(cri, containerd, e2e_workdir)
    try:
        containerd.wait_plugin_ready("cpumgr", "90", timeout=60, since=since)
    except Exception as e:
        log = plugin.log_text()[-3000:]
        raise AssertionError(f"plugin pod did not register: {e}\n{log}") from None

    # the DaemonSet's security settings really apply, and the plugin works under them
    status = process_status(cri, plugin.container_id)
    assert status["CapEff"] == "0000000000000000" and status["CapPrm"] == "0000000000000000"
    assert status["NoNewPrivs"] == "1"
    spec = cri.inspect(plugin.container_id)[1]
    assert spec["root"].get("readonly") is True
    # host network: the node's network namespace (the metrics port is on the node)
    pid = cri.inspect(plugin.container_id)[0]
    assert os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")

    assert wait_http(plugin, "/healthz") == 200, plugin.log_text()[-2000:]
    assert wait_http(plugin, "/readyz") == 200, plugin.log_text()[-2000:]

    # the static policy: a Guaranteed 1-CPU container alone on CPU 1, BestEffort on CPU 0
    g = {"cpu": "1", "memory": MEM}
    gid = cri.create_container(cri.run_pod("guaranteed", "Guaranteed"), "app",
                               requests=g, limits=g)
    cri.start_container(gid)
    be = cri.create_container(cri.run_pod("besteffort", "BestEffort"), "app")
    cri.start_container(be)
    assert (cri.spec_cpus(gid), cri.cgroup_cpus(gid), cri.proc_cpus(gid)) == ("1", "1", "1")
    assert cri.cgroup_cfs_quota(gid) == -1
    assert cri.spec_cpus(be) == "0"
    assert (cri.cgroup_cpus(be), cri.proc_cpus(be)) == ("0", "0")
    # the plugin's own (Burstable) container was moved to the shared pool too
    assert eventually(lambda: cri.cgroup_cpus(plugin.container_id), "0") == "0"

    # the README's check: `kubectl exec ... nri-cpumgr status` (CRI ExecSync here)
    code, out = exec_sync(cri, plugin.container_id,
                          ["nri-cpumgr", "status", "--config", "/etc/nri-cpumgr/config.yaml"])
    assert code == 0, out
    rows = {tuple(line.split()[:4]) for line in out.splitlines()[1:]}
    assert ("e2e/guaranteed", "app", "Guaranteed", "1") in rows, out
    assert ("e2e/besteffort", "app", "BestEffort", "0") in rows, out
    assert (plugin.state_dir / "cpu_manager_state").is_file()

    # the image's command imports nothing before the plugin's entry point (pip >= 25.0: a
    # console script of Debian's bundled pip imports re, enum and functools first, issue 34)
    code, out = exec_sync(cri, plugin.container_id,
                          ["head", "-4", "/opt/nri-cpumgr/bin/nri-cpumgr"])
    assert code == 0, out
    assert out.splitlines()[1:3] == ["import sys", "from nri_cpumgr.boot import main"], out

    # metrics
    code, text = plugin.get("/metrics")
    assert code == 200
    m = _metrics(text)
    assert m["cpu_manager_pinning_requests_total"] == 1, text
    assert m["cpu_manager_pinning_errors_total"] == 0
    assert m["cpu_manager_exclusive_cpu_allocation_count"] == 1
    assert m["cpu_manager_shared_pool_size_millicores"] == 1000
    assert m["nri_cpumgr_nri_connected"] == 1 and m["nri_cpumgr_nri_registered"] == 1
    assert "nri_cpumgr_nri_request_duration_seconds_bucket" in text

    # the shared-pool path the DaemonSet's mounts give the shipped default: cri through the
    # runtime's CRI socket (read-only mount) before containerd 2.4, async from 2.4 on
    log = plugin.log_text()
    if containerd.version < "2.4":
        assert "shared pool update mode cri on /run/containerd/containerd.sock" in log, \
            log[-3000:]
    else:
        assert "shared pool update mode async" in log, log[-3000:]
    assert "in the reply" not in log
