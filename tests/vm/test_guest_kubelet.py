"""A real kubelet v1.37.2 on cgroup v2, inside a QEMU guest: nri-cpumgr under the kubelet.

The node (containerd ``NRI_VM_KUBELET_CONTAINERD``: default "2.1,2.4", Debian's 2.1.9 then the
modern build's 2.4.2 with runc 1.5.3, one after the other in one boot, as ``make test`` and
``make e2e-vm`` run it; "2.1" or "2.4" alone; the plugin; the kubelet) runs in the fast
topology's guest (8 vCPUs: 2 sockets = 2 NUMA nodes, 2 cores x 2 threads each); etcd and
kube-apiserver v1.37.2 run on the host (:mod:`tests.vm.controlplane`), reached through QEMU's
user-mode network. What the guest runs and records: :mod:`tests.vm.guest_kubelet`; how it is
judged: :func:`tests.vm.checks.check_kubelet` against the kubelet's own answers for the same
pods (:mod:`tests.vm.kubelet_oracle`: the oracle of ``make oracle``, built here when missing).
The kubelet, kubectl, kube-apiserver and etcd come from scripts/modern/build.sh (``make
modern``), the guest image from scripts/vm/build-guest.sh (unchanged by this test: the binaries
reach the guest over a read-only 9p share).

Gate: ``NRI_E2E_VM=1`` as tests/vm/test_guest_e2e.py (``make test`` sets it), unless
``NRI_E2E_VM_KUBELET=0``; when requested but the machine cannot run it (not root, QEMU tools,
the modern binaries not built) it is skipped with the reason, or fails when ``CI`` is set.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import modern_bin_dirs
from tests.vm import checks, kubelet_oracle, runner, topology
from tests.vm.conftest import FastGuest
from tests.vm.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

GUEST_MODERN = "/var/cache/nri-cpumgr/modern"
"""Where the guest mounts the host's modern build cache (paths.modern_bin_dir's default)."""


def kubelet_versions() -> list[str]:
    vs = [v for v in os.environ.get("NRI_VM_KUBELET_CONTAINERD", "2.1,2.4").split(",") if v]
    bad = [v for v in vs if v not in ("2.1", "2.4")]
    if bad:
        raise pytest.UsageError(f"NRI_VM_KUBELET_CONTAINERD: 2.1 or 2.4, not {bad}")
    return vs


def missing(versions: list[str]) -> tuple[dict[str, Path], list[str]]:
    """The modern bin dirs this run needs, and why it cannot run (empty = it can)."""
    comps = ["kubernetes", "etcd"] + (["containerd", "runc"] if "2.4" in versions else [])
    dirs, why = modern_bin_dirs(*comps)
    return dirs, runner.missing() + why


def run_kubelet_guest(topo: topology.Topology, versions: list[str], dirs: dict[str, Path],
                      keep: Path | None = None, timeout: float | None = None,
                      containerd: list[str] | None = None, drivers: list[str] | None = None,
                      scenarios: list[str] | None = None,
                      ) -> tuple[runner.GuestRun, dict[str, Any]]:
    """Start the control plane, boot ``topo`` with the kubelet job (then, in the same boot,
    ``scenarios`` on each ``containerd`` and driver: tests/vm/guest_scenarios.py), stop the
    control plane; the guest run and the timings (control plane start, guest)."""
    import time

    t0 = time.monotonic()
    cp = ControlPlane(dirs["kubernetes"], dirs["etcd"] / "etcd").start()
    times = {"controlplane_start_seconds": round(time.monotonic() - t0, 1)}
    try:
        modern = dirs["kubernetes"].parents[1]  # .../modern

        def guest(p: Path) -> str:
            return str(Path(GUEST_MODERN) / p.relative_to(modern))

        # run from the guest's disk, not the uncached 9p share: kubectl (each resize and
        # describe), containerd 2.4.2's shim (each pod) and runc 1.5.3 (each container
        # operation); Debian's containerd 2.1 and runc are in the image already
        local = [guest(dirs["kubernetes"] / "kubectl")] + (
            [guest(dirs["containerd"]), guest(dirs["runc"])] if "2.4" in versions else [])
        n_scen = len(scenarios or []) * len(containerd or []) * len(drivers or [])
        run = runner.run_guest(
            topo, containerd=containerd or [], drivers=drivers or [],
            scenarios=scenarios or [], keep=keep,
            timeout=timeout or 600 + 900 * len(versions) + 150 * n_scen,
            kubelet={"containerd": versions, "server": cp.guest_url,
                     "phases": [p for p in os.environ.get("NRI_VM_KUBELET_PHASES", "")
                                .split(",") if p]},
            files=cp.guest_files("/mnt/job/files/ca.crt"),
            shares={"modern": (modern, GUEST_MODERN)}, local=local)
    finally:
        cp.stop()
    return run, times


@pytest.fixture(scope="module")
def kubelet_guest(fast_guest: FastGuest) -> runner.GuestRun:
    """The shared boot of tests/vm/conftest.py, when it ran the kubelet's phases."""
    if fast_guest.kubelet_skipped:
        pytest.skip(fast_guest.kubelet_skipped)
    return fast_guest.run


@pytest.fixture(scope="module")
def kubelet_answers(kubelet_guest: runner.GuestRun, fast_topology: topology.Topology,
                    ) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The kubelet oracle's answers for every phase that ran (containerd, phase) -> ..."""
    return kubelet_oracle.expect_all(fast_topology,
                                     kubelet_guest.results.get("kubelet_results", []))


def test_kubelet_node_registered(kubelet_guest: runner.GuestRun) -> None:
    """The guest's kubelet registered as v1.37.2 on containerd, on cgroup v2."""
    res = kubelet_guest.results
    assert res["facts"]["cgroup_version"] == 2
    for v in kubelet_versions():
        failed = [r for r in res.get("kubelet_results", []) if r["scenario"] == "node"
                  and r["containerd"] == v]
        assert not failed, failed[0]["error"] + "\n" + failed[0].get("kubelet_log", "")
        info = res["kubelet_node"][v]["node_info"]
        assert info["kubeletVersion"] == "v1.37.2"
        want = {"2.1": "containerd://2.1.", "2.4": "containerd://2.4.2"}[v]
        assert info["containerRuntimeVersion"].startswith(want), info
        assert res["kubelet_node"][v]["cleanup"] == []


@pytest.mark.parametrize("phase", checks.KUBELET_PHASES)
def test_kubelet_phase(kubelet_guest: runner.GuestRun, fast_topology: topology.Topology,
                       kubelet_answers: dict[tuple[str, str], list[dict[str, Any]]],
                       phase: str) -> None:
    for v in kubelet_versions():
        r = next((x for x in kubelet_guest.results.get("kubelet_results", [])
                  if x["scenario"] == phase and x["containerd"] == v), None)
        assert r is not None, f"no result for {phase} on containerd {v} (guest done: " \
                              f"{kubelet_guest.results.get('done')})"
        bad = checks.check_kubelet(fast_topology, r, kubelet_answers.get((v, phase)))
        assert not bad, (f"containerd {v} {phase}: " + "\n".join(bad) + "\nseen: "
                         + checks.kubelet_summary(r) + "\n" + (r.get("error") or "")[-2000:]
                         + "\nplugin log:\n" + r.get("plugin_log_tail", "")[-1500:]
                         + "\nkubelet log:\n" + r.get("kubelet_log", "")[-1500:])
