"""nri-cpumgr on a real single-node Kubernetes cluster, deployed as users deploy it.

A kubelet 1.20.2 with containerd 1.7 (NRI on), an API server, controller manager and scheduler,
all on loopback (tests/cluster/harness.py). The project's image is built with
scripts/build_image.sh and imported into the node's containerd; ``kubectl apply -k`` of an
overlay over ``deploy/`` deploys it; the DaemonSet's rollout must finish (readiness =
registered with the runtime); then the docs' example pods are created through the API server
and their cpusets checked in the OCI spec, the cgroup and /proc; the DaemonSet is restarted
while they run; they are deleted; the metrics are read through the API server's pod proxy;
and the node's NodeResourceTopology object follows the exclusive CPUs.

The overlay changes only what the test node needs (see :func:`write_overlay`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.harness import Cluster, nrt_cpu, wait_for, wait_rollout
from tests.e2e.harness import CRIClient, cgroups
from tests.e2e.harness.docs_pods import DOCS_PODS
from tests.e2e.harness.images import BUSYBOX_IMAGE
from tests.e2e.harness.paths import REPO
from tests.e2e.image import ImageBuildError, ensure_image

NS = "nri-cpumgr"


def write_overlay(c: Cluster) -> Path:
    """An overlay over the repository's ``deploy/`` for the test node. What it changes, and why:

    * the ``nri-socket`` and ``state`` hostPaths point into the cluster's work dir: the test
      node's containerd is not the machine's (its NRI socket lives in its work dir) and the test
      must not write the machine's ``/var/lib``;
    * ``sharedPoolGrowDelay: 2s`` in the ConfigMap, so a deleted pod's CPU is back in the shared
      pool within the test's patience (the default is the kubelet's 10 s);
    * the exporter's ``KUBERNETES_SERVICE_HOST``/``PORT`` name the API server on 127.0.0.1:
      the test cluster has no service network (no kube-proxy, no CNI), so the service IP the
      kubelet injects is not routed.
    Everything else (image, security context, probes, RBAC, projected token) is deploy/'s.
    """
    ov = c.work / "overlay"
    ov.mkdir(exist_ok=True)
    base_cm = next(d for d in yaml.safe_load_all((REPO / "deploy/base/configmap.yaml").read_text())
                   if d and d["kind"] == "ConfigMap")
    cfg = yaml.safe_load(base_cm["data"]["config.yaml"])
    cfg["sharedPoolGrowDelay"] = "2s"
    state = c.work / "plugin-state"
    state.mkdir(exist_ok=True)
    nri_dir = str(c.nri_socket.parent)
    ds_patch = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "nri-cpumgr", "namespace": NS},
        "spec": {"template": {"spec": {
            "containers": [
                {"name": "nrt-exporter", "env": [
                    {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                    {"name": "KUBERNETES_SERVICE_PORT", "value": str(c.ports["apiserver"])}]}],
            "volumes": [{"name": "nri-socket", "hostPath": {"path": nri_dir}},
                        {"name": "state", "hostPath": {"path": str(state)}}]}}}}
    cm_patch = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "nri-cpumgr-config", "namespace": NS},
                "data": {"config.yaml": yaml.safe_dump(cfg)}}
    (ov / "daemonset.yaml").write_text(yaml.safe_dump(ds_patch))
    (ov / "configmap.yaml").write_text(yaml.safe_dump(cm_patch))
    (ov / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(REPO / "deploy", ov)],
        "patches": [{"path": "daemonset.yaml"}, {"path": "configmap.yaml"}]}))
    return ov


def pod_manifest(name: str, requests: dict[str, str] | None,
                 limits: dict[str, str] | None) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"terminationGracePeriodSeconds": 0, "enableServiceLinks": False,
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "app", "image": BUSYBOX_IMAGE,
                                     "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"], "resources": res}]}}


def container_id(c: Cluster, pod: str) -> str:
    st = c.get_json("pod", pod, "-n", "default")["status"]
    (cs,) = st.get("containerStatuses") or [{}]
    if not cs.get("state", {}).get("running"):
        return ""
    return str(cs["containerID"]).split("://", 1)[1]


def cpus_seen(cri: CRIClient, cid: str) -> tuple[str, str, str]:
    return cri.spec_cpus(cid), cri.cgroup_cpus(cid), cri.proc_cpus(cid)


def plugin_status(c: Cluster) -> dict[str, Any]:
    pod = c.kubectl("get", "pods", "-n", NS, "-o", "jsonpath={.items[0].metadata.name}")
    out = c.kubectl("exec", "-n", NS, pod, "-c", "nri-cpumgr", "--", "nri-cpumgr", "status",
                    "--config", "/etc/nri-cpumgr/config.yaml", "--json")
    return json.loads(out)




def exporter_log(c: Cluster) -> str:
    return c.kubectl("logs", "-n", NS, "ds/nri-cpumgr", "-c", "nrt-exporter", "--tail=30",
                     check=False)


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
    cluster.kubectl("apply", "-k", str(write_overlay(cluster)))
    wait_rollout(cluster, NS, "nri-cpumgr")
    return cluster


def test_rollout_registers_and_the_plugin_runs_as_deployed(deployed: Cluster) -> None:
    ds = deployed.get_json("daemonset", "nri-cpumgr", "-n", NS)
    assert ds["status"]["numberReady"] == 1 and ds["status"]["desiredNumberScheduled"] == 1
    log = deployed.kubectl("logs", "-n", NS, "ds/nri-cpumgr", "-c", "nri-cpumgr")
    assert "registered" in log


def test_docs_pods_pinned_nrt_follows_restart_keeps_delete_returns(deployed: Cluster) -> None:
    c = deployed
    cri = CRIClient(c.cri_socket)
    # the docs' pods that fit the node's 2 allocatable CPUs beside the plugin's own pod (the
    # scheduler admits by requests; the refusals are the CRI-level e2e tests' business)
    pods = {n: (req, lim) for n, _, req, lim in DOCS_PODS
            if n in ("besteffort", "burstable-cpu", "guaranteed-1cpu")}
    for name, (req, lim) in pods.items():
        c.kubectl("apply", "-f", "-", input=json.dumps(pod_manifest(name, req, lim)))
    ids = {n: wait_for(lambda n=n: container_id(c, n), 120, f"pod {n} running",
                       on_timeout=lambda: c.kubectl("describe", "pods", check=False)[-3000:])
           for n in pods}
    # the static policy with CPU 0 reserved: Guaranteed 1-CPU alone on 1, the others on 0
    want = {"besteffort": "0", "burstable-cpu": "0", "guaranteed-1cpu": "1"}
    for name, cid in ids.items():
        wait_for(lambda cid=cid, w=want[name]: cpus_seen(cri, cid) == (w, w, w), 30,
                 f"{name} on CPU {want[name]}",
                 on_timeout=lambda cid=cid: str(cpus_seen(cri, cid)))
    # README step 4, as a user checks it: from inside the pod, through the API server
    out = c.kubectl("exec", "guaranteed-1cpu", "-n", "default", "--", "grep",
                    "Cpus_allowed_list", "/proc/self/status")
    assert out.split() == ["Cpus_allowed_list:", "1"]
    # the plugin pod itself is Burstable: in the shared pool, off the exclusive CPU
    wait_for(lambda: nrt_cpu(c) == {"node-0": "0"}, 30, "NRT available cpu 0 on node-0",
             on_timeout=lambda: f"{nrt_cpu(c)}\n{exporter_log(c)}")
    before = {n: cpus_seen(cri, cid) for n, cid in ids.items()}

    # a rolling restart of the plugin while the pods run: nothing moves, nothing doubles
    c.kubectl("rollout", "restart", "-n", NS, "daemonset/nri-cpumgr")
    wait_rollout(c, NS, "nri-cpumgr")
    time.sleep(3)
    assert {n: cpus_seen(cri, cid) for n, cid in ids.items()} == before
    status = plugin_status(c)
    exclusive = [r for r in status["containers"] if r["exclusive"]]
    assert [(r["pod"].split("/")[-1], r["cpus"]) for r in exclusive] == [("guaranteed-1cpu", "1")]
    assert status["defaultCpuSet"] == "0"

    # deleting the pods returns the CPU: to the shared pool, the checkpoint and the NRT object
    for name in pods:
        c.kubectl("delete", "pod", name, "-n", "default", "--wait=true", timeout=120)
    wait_for(lambda: nrt_cpu(c) == {"node-0": "1"}, 60, "NRT available cpu back to 1",
             on_timeout=lambda: f"{nrt_cpu(c)}\n{exporter_log(c)}")
    status = plugin_status(c)
    assert not [r for r in status["containers"] if r["exclusive"]]
    assert status["defaultCpuSet"] == "0-1"
    cri.close()


def test_metrics_through_the_api_server(deployed: Cluster) -> None:
    pod = deployed.kubectl("get", "pods", "-n", NS, "-o", "jsonpath={.items[0].metadata.name}")
    port = yaml.safe_load(deployed.get_json("configmap", "nri-cpumgr-config", "-n", NS)
                          ["data"]["config.yaml"])["metricsAddress"].rsplit(":", 1)[1]
    text = deployed.kubectl("get", "--raw",
                            f"/api/v1/namespaces/{NS}/pods/{pod}:{port}/proxy/metrics")
    assert "nri_cpumgr_nri_registered 1.0" in text
    assert "cpu_manager_pinning_requests_total" in text
