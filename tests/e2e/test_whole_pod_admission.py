"""Whole-pod admission on a real containerd (1.7 and 2.1, the default matrix): a
multi-container Guaranteed pod (an init container with exclusive CPUs, a sidecar, a shared
container, two exclusive app containers) sent with the kubelet's REAL requests (from
oracle/cmd/kubelet-cri, kubelet v1.37.2), the plugin reading its spec from a loopback fake
API server (``podSpecSource: apiServer``, as the DaemonSet deploys it), gets for every
container the cpuset the kubelet's own managers give it (oracle/cmd/kubelet-oracle on the
same machine and config). Containers are created, not started, and checked in the OCI spec.

The check can fail: the same pod decided container by container (NRI alone, the plugin's
own planner) starts the shared container on the pool before the app containers took their
CPUs, which the comparison flags.
"""

from __future__ import annotations

import pytest

from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.sysfs.discovery import discover
from nri_cpumgr.topology.render import to_json
from tests.differential import scenarios as S
from tests.e2e.harness import kubelet_cri
from tests.e2e.harness.kubelet_cri import k8s_pod
from tests.e2e.test_pod_spec_source import FIXTURE, api, plugin_for, run, spec  # noqa: F401

G = {"memory": "128Mi"}
#: the issue's pod: init (2 exclusive CPUs, reused by app1), sidecar (1), shared (500m),
#: app1 (2), app2 (1)
POD = k8s_pod("whole", "0000000b-0000-4000-8000-000000000001", [
    ("shared", {"cpu": "500m", **G}, {"cpu": "500m", **G}),
    ("app1", {"cpu": "2", **G}, {"cpu": "2", **G}),
    ("app2", {"cpu": "1", **G}, {"cpu": "1", **G})],
    init_containers=[("init", {"cpu": "2", **G}, {"cpu": "2", **G}, False),
                     ("sidecar", {"cpu": "1", **G}, {"cpu": "1", **G}, True)])
NAMES = ["init", "sidecar", "shared", "app1", "app2"]
CONFIG = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
          "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "container"}


@pytest.fixture(scope="module")
def kubelet() -> dict:
    return kubelet_cri.requests_or_skip([POD])


@pytest.fixture(scope="module")
def expected() -> dict[str, str]:
    """The kubelet's cpusets, from its own managers (the oracle), on the fixture's machine."""
    o = S.Oracle(S.oracle_path())
    try:
        s = {"name": "whole", "machine": to_json(discover(FIXTURE), "dual-socket-smt"),
             "config": CONFIG, "events": [{"op": "add", "pod": POD}]}
        k = o.run(s)
    finally:
        o.close()
    ev = k["events"][0]
    assert ev["admitted"], ev
    got = {c["name"]: c["cpus"] for c in ev["containers"]}
    # what the scenario is about: a shared container before exclusive ones, a reused init
    assert got["app1"] == got["init"] and not CPUSet.parse(got["shared"]) & CPUSet.parse(
        got["app2"])
    # and the wrong answer NRI alone gives is one the comparison sees
    alone = S.plugin({**s, "mode": "nri-alone"})
    assert S.compare(k, alone, {**s, "mode": "nri-alone"}), "the check cannot fail"
    return got


def test_every_container_gets_the_kubelets_cpuset(containerd, cri, e2e_workdir, api,  # noqa: F811
                                                  kubelet, expected):
    plugin = plugin_for(containerd, e2e_workdir, api, scope="container")
    try:
        assert kubelet["whole"]["order"] == NAMES
        _, c = run(cri, api, POD, kubelet)
        got = {n: str(spec(cri, c[n])) for n in NAMES}
        assert got == expected
    finally:
        plugin.stop()
