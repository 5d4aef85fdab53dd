"""Every CPU manager policy option, end to end: the plugin runs on a sysfs fixture topology
against a real containerd, and the created containers' OCI specs show the option's choice.

Fixtures (tests/fixtures/sysfs): ``dual-socket-smt`` = 2 sockets (= NUMA nodes) x 4 cores x 2
threads, siblings n / n+8, socket 0 = 0-3,8-11; ``multi-l3`` = 1 socket, 2 NUMA nodes, 16
cores x 2 threads, four L3 caches of 4 cores (L3 0 = 0-3,16-19, L3 1 = 4-7,20-23, ...).
CPU 0 is reserved. Containers are created, not started (the host has 2 CPUs).
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from tests.e2e.plugin_run import eventually, start_plugin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
MEM = "64Mi"
ALPHA = {"CPUManagerPolicyAlphaOptions": True}

# (fixture, options, feature gates, [(CPUs requested, expected cpus or error name)], shared)
CASES = {
    "default": ("dual-socket-smt", {}, {}, [(10, "1,4-7,9,12-15")], "0,2-3,8,10-11"),
    "full-pcpus-only": (
        "dual-socket-smt", {"full-pcpus-only": "true"}, {},
        [(3, "SMTAlignmentError"), (2, "1,9"), (1, "SMTAlignmentError")],
        "0,2-8,10-15",
    ),
    "distribute-cpus-across-numa": (
        "dual-socket-smt", {"distribute-cpus-across-numa": "true"}, {},
        [(10, "1-2,4-6,8-10,12-13")],  # 5 + 5 instead of a whole node + a core
        "0,3,7,11,14-15",
    ),
    "align-by-socket": (
        "dual-socket-smt", {"align-by-socket": "true"}, ALPHA, [(2, "1,9")],
        "0,2-8,10-15",
    ),
    "distribute-cpus-across-cores": (
        "dual-socket-smt", {"distribute-cpus-across-cores": "true"}, ALPHA,
        [(2, "1-2"), (4, "3,8-10")],  # one thread per core first
        "0,4-7,11-15",
    ),
    "strict-cpu-reservation": (
        "dual-socket-smt", {"strict-cpu-reservation": "true"}, {}, [(2, "1,9")],
        "2-8,10-15",  # the reserved CPU leaves the shared pool too
    ),
    "uncore-default": ("multi-l3", {}, {}, [(8, "1-4,17-20")], "0,5-16,21-31"),
    "prefer-align-cpus-by-uncorecache": (
        "multi-l3", {"prefer-align-cpus-by-uncorecache": "true"}, {},
        [(8, "4-7,20-23")],  # one whole L3 group instead of spanning two
        "0-3,8-19,24-31",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_option_choice_in_oci_spec(case, containerd, cri, e2e_workdir):
    fixture, options, gates, steps, shared = CASES[case]
    plugin = start_plugin(
        containerd, e2e_workdir, sysfs_root=FIXTURES / fixture,
        cpuManagerPolicyOptions=options, featureGates=gates,
    )
    try:
        for i, (n, expect) in enumerate(steps):
            g = {"cpu": str(n), "memory": MEM}
            pod = cri.run_pod(f"g{i}", "Guaranteed")
            if expect[0].isdigit():
                cid = cri.create_container(pod, "app", requests=g, limits=g)
                assert cri.spec_cpus(cid) == expect, f"{n} CPUs"
            else:
                with pytest.raises(grpc.RpcError) as ei:
                    cri.create_container(pod, "app", requests=g, limits=g)
                assert expect in ei.value.details()
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        assert cri.spec_cpus(be) == shared
    finally:
        plugin.stop()


def test_smt_alignment_error_text_reaches_the_kubelet(containerd, cri, e2e_workdir):
    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=FIXTURES / "dual-socket-smt",
                          cpuManagerPolicyOptions={"full-pcpus-only": "true"})
    try:
        g = {"cpu": "3", "memory": MEM}
        with pytest.raises(grpc.RpcError) as ei:
            cri.create_container(cri.run_pod("odd", "Guaranteed"), "app", requests=g, limits=g)
        text = ei.value.details()
        assert "failed to get NRI adjustment" in text
        assert "SMTAlignmentError" in text and "requested 3 cpus not multiple cpus per core = 2" \
            in text
    finally:
        plugin.stop()


def test_update_container_resources_keeps_pinning(containerd, cri, e2e_workdir):
    """The kubelet's UpdateContainerResources (e.g. an in-place resize) rewrites cpu quota and
    cpuset; the plugin's answer keeps the exclusive CPU and the cleared quota."""
    plugin = start_plugin(containerd, e2e_workdir)
    try:
        g = {"cpu": "1", "memory": MEM}
        cid = cri.create_container(cri.run_pod("g", "Guaranteed"), "app", requests=g, limits=g)
        cri.start_container(cid)
        assert (cri.cgroup_cpus(cid), cri.cgroup_cfs_quota(cid)) == ("1", -1)
        cri.update_container_resources(cid, g, g, "Guaranteed", cpuset_cpus="0-1")
        assert (cri.cgroup_cpus(cid), cri.proc_cpus(cid)) == ("1", "1")
        assert eventually(lambda: cri.cgroup_cfs_quota(cid), -1) == -1
    finally:
        plugin.stop()
