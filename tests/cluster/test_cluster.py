"""nri-cpumgr on a real single-node Kubernetes cluster, deployed as users deploy it.

A kubelet 1.20.2 with containerd 1.7 (NRI on), an API server, controller manager and scheduler,
all on loopback (tests/cluster/harness.py). The project's image is built with
scripts/build_image.sh and imported into the node's containerd; ``kubectl apply -k`` of an
overlay over ``deploy/`` deploys it; the DaemonSet's rollout must finish (readiness =
registered with the runtime); then the docs' example pods are created through the API server
and their cpusets checked in the OCI spec, the cgroup and /proc; the DaemonSet is restarted
while they run; they are deleted; the metrics are read through the API server's pod proxy;
and the node's NodeResourceTopology object follows the exclusive CPUs.

The overlay changes only what the test node needs (tests/cluster/kustomize.py
``write_overlay``). Not in ``make test`` (``make cluster-e2e``): the kubelet 1.37 cluster
(test_modern.py) runs the same kustomize checks there.
"""

from __future__ import annotations

import os

import pytest

from tests.cluster.harness import Cluster
from tests.cluster.kustomize import (
    NS,
    apply_kustomize,
    create_docs_pods,
    metrics_through_the_api_server,
    restart_keeps_and_delete_returns,
)
from tests.e2e.harness import CRIClient, cgroups
from tests.e2e.image import ImageBuildError, ensure_image


@pytest.fixture(scope="module")
def deployed(cluster: Cluster) -> Cluster:
    """The image built and imported, deploy/ applied (through the overlay), rollout done."""
    assert cgroups.host_online_cpus() == "0-1", "this scenario needs a 2-CPU host"
    try:
        archive = ensure_image()
    except ImageBuildError as e:
        if os.environ.get("CI"):
            pytest.fail(f"cannot build the nri-cpumgr image: {e}", pytrace=False)
        pytest.skip(f"cannot build the nri-cpumgr image: {e}")
    cluster.import_image(archive)
    apply_kustomize(cluster)
    return cluster


def test_rollout_registers_and_the_plugin_runs_as_deployed(deployed: Cluster) -> None:
    ds = deployed.get_json("daemonset", "nri-cpumgr", "-n", NS)
    assert ds["status"]["numberReady"] == 1 and ds["status"]["desiredNumberScheduled"] == 1
    log = deployed.kubectl("logs", "-n", NS, "ds/nri-cpumgr", "-c", "nri-cpumgr")
    assert "registered" in log


def test_docs_pods_pinned_nrt_follows_restart_keeps_delete_returns(deployed: Cluster) -> None:
    cri = CRIClient(deployed.cri_socket)
    ids = create_docs_pods(deployed, cri)
    restart_keeps_and_delete_returns(deployed, cri, ids)
    cri.close()


def test_metrics_through_the_api_server(deployed: Cluster) -> None:
    metrics_through_the_api_server(deployed)
