"""The documented migration (docs/operations/adopting.md) of a real kubelet 1.37 node from its
static CPU manager and Static Memory Manager to nri-cpumgr, on the first containerd of
``NRI_CLUSTER_CONTAINERD`` (one cluster start: this test is heavy on a 2-CPU machine).

The node (tests/cluster: kubelet v1.37.2, cgroup v1, 2 CPUs, CPU 0 reserved) has one CPU to
give exclusively, so one Guaranteed pod holds it: a pod-level pod (``.spec.resources``, the
``PodLevelResourceManagers`` gate on, ``topologyManagerScope: pod``) whose regular init
container ran and exited on its bubble, and whose app container runs on the pod shared pool
(CPU 1); a BestEffort pod runs on the kubelet's default set (CPU 0). The kubelet's own
checkpoints (cpu_manager_state v4, memory_manager_state v3, with the pod-level entries) are
checked, then: cordon, the checkpoints copied next to the plugin's state, the chart installed
with ``kubeletStateDirectory`` and the kubelet's settings, the kubelet restarted with
``cpuManagerPolicy: none`` (its checkpoints moved aside), uncordon. Nothing running moves
(same containers, same CPUs in the cgroup and /proc), the exclusive CPU stays out of the
shared pool (a new BestEffort pod runs on CPU 0), and a Guaranteed pod, pending while the
pod-level pod holds the node's one allocatable CPU, gets CPU 1 once it is gone.

In ``make test`` (``make cluster-adopt`` alone). Without root, cgroups or the modern node's
binaries it skips with the reason, or fails with ``CI`` set.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_cpumgr.adopt.kubelet import load_cpu_state, load_memory_state
from nri_cpumgr.cpuset import CPUSet
from tests.cluster.harness import NODE_NAME, Cluster, modern_bin_dirs, wait_for, wait_rollout
from tests.cluster.test_modern import (
    NS,
    _fail_or_skip,
    container,
    create,
    delete,
    helm_apply,
    helm_values,
    plugin_log,
    pod,
    running_id,
    statuses,
    wait_running,
)
from tests.e2e.harness import CRIClient, cgroups, e2e_missing
from tests.e2e.image import ImageBuildError, ensure_image

RESERVED_MEMORY = [{"numaNode": 0, "limits": {"memory": "100Mi"}}]
#: the kubelet's managers, as the node ran before the migration, and the plugin's config
STATIC = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
          "memoryManagerPolicy": "Static", "reservedMemory": RESERVED_MEMORY,
          "topologyManagerPolicy": "best-effort", "topologyManagerScope": "pod"}
GATES = {"PodLevelResourceManagers": True}


@pytest.fixture(scope="module")
def static_node() -> Iterator[tuple[Cluster, dict[str, Path]]]:
    version = [v for v in os.environ.get("NRI_CLUSTER_CONTAINERD", "2.1").split(",") if v][0]
    reasons = e2e_missing(version)
    dirs, missing = modern_bin_dirs("kubernetes", "etcd", "helm", "crictl")
    reasons += missing
    if reasons:
        _fail_or_skip(f"the kubelet 1.37 cluster cannot run here: {'; '.join(reasons)}")
    assert cgroups.host_online_cpus() == "0-1", "this scenario needs a 2-CPU host"
    c = Cluster(dirs["kubernetes"], flavor="1.37", containerd=version,
                etcd_bin=dirs["etcd"] / "etcd", feature_gates=GATES, kubelet_config=STATIC)
    c.start()
    try:
        yield c, dirs
    finally:
        problems = c.stop()
        assert not problems, f"cluster cleanup: {problems}"


def cpus(cri: CRIClient, cid: str) -> tuple[str, str]:
    """What the container runs on: its cgroup's cpuset and its process' Cpus_allowed_list."""
    return cri.cgroup_cpus(cid), cri.proc_cpus(cid)


def test_static_kubelet_node_migrates_with_nothing_moved(static_node) -> None:
    c, dirs = static_node
    cri = CRIClient(c.cri_socket)
    # -- the node as the kubelet's static managers run it
    budget = {"requests": {"cpu": "1", "memory": "128Mi"},
              "limits": {"cpu": "1", "memory": "128Mi"}}
    init = container("init", None, command=["true"])
    create(c, pod("pl", [container("app", None)], initContainers=[init], resources=budget))
    create(c, pod("be", [container("app", None)]))
    app = wait_running(c, "pl", "app", timeout=180)
    be = wait_running(c, "be", "app", timeout=180)
    assert statuses(c, "pl")["init"]["state"].get("terminated", {}).get("exitCode") == 0
    wait_for(lambda: cpus(cri, app) == ("1", "1"), 60, "pl/app on CPU 1 (the kubelet's)",
             on_timeout=lambda: str(cpus(cri, app)))
    wait_for(lambda: cpus(cri, be) == ("0", "0"), 60, "be on CPU 0 (the kubelet's)",
             on_timeout=lambda: str(cpus(cri, be)))
    uid = c.get_json("pod", "pl", "-n", "default")["metadata"]["uid"]
    k = load_cpu_state(c.kubelet_dir / "cpu_manager_state")
    assert k is not None and k.version == 4, k
    assert k.pod_entries == {uid: CPUSet({1})}, k
    assert k.entries[uid] == {"init": CPUSet({1}), "app": CPUSet({1})}, k
    assert k.default_set == CPUSet({0})
    m = load_memory_state(c.kubelet_dir / "memory_manager_state")
    assert m is not None and m.version == 3 and uid in m.pod_entries, m

    # -- the migration, as docs/operations/adopting.md says
    c.kubectl("cordon", NODE_NAME)
    state = c.work / "plugin-state"
    copy = state / "kubelet"
    copy.mkdir(parents=True, exist_ok=True)
    for name in ("cpu_manager_state", "memory_manager_state"):
        shutil.copy2(c.kubelet_dir / name, copy / name)
    try:
        archive = ensure_image()
    except ImageBuildError as e:
        _fail_or_skip(f"cannot build the nri-cpumgr image: {e}")
    c.import_image(archive)
    c.kubectl("create", "namespace", NS)
    c.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=privileged")
    values = helm_values(c, kubeletStateDirectory=str(copy), **STATIC)
    values["namespace"]["create"] = False
    helm_apply(c, dirs["helm"] / "helm", values)
    wait_rollout(c, NS, "nri-cpumgr")
    log = wait_for(lambda: (lambda t: t if "adopted from" in t else "")(plugin_log(c)), 60,
                   "the plugin's adoption line", on_timeout=lambda: plugin_log(c)[-3000:])
    assert "1 pod-level bubble(s)" in log, log[-3000:]
    assert "disagrees:" not in log and "not adopted" not in log, log[-3000:]
    assert "memory not adopted" not in log and "memory state rejected" not in log, log[-3000:]
    c.restart_kubelet({"cpuManagerPolicy": "none", "memoryManagerPolicy": "None",
                       "reservedMemory": [], "topologyManagerPolicy": "none",
                       "topologyManagerScope": "container"},
                      move_aside=("cpu_manager_state", "memory_manager_state"))
    c.kubectl("uncordon", NODE_NAME)

    # -- nothing running moved
    wait_for(lambda: running_id(c, "pl", "app") and running_id(c, "be", "app"), 120,
             "the pods running after the kubelet's restart")
    assert (running_id(c, "pl", "app"), running_id(c, "be", "app")) == (app, be)
    assert cpus(cri, app) == ("1", "1")
    assert cpus(cri, be) == ("0", "0")
    # the exclusive CPU stays out of the shared pool: a new BestEffort pod runs on CPU 0 (the
    # kubelet, now under policy none, sets no cpuset: without the plugin it would get 0-1)
    create(c, pod("be2", [container("app", None)]))
    be2 = wait_running(c, "be2", "app")
    assert cpus(cri, be2) == ("0", "0")
    # a Guaranteed pod waits: the kubelet keeps reservedSystemCPUs (its allocatable is 1 CPU,
    # which the pod-level pod requests), as before the migration
    create(c, pod("g", [container("app", "1")]))

    def unschedulable() -> str:
        conds = c.get_json("pod", "g", "-n", "default")["status"].get("conditions") or []
        return next((x.get("message", "") for x in conds if x["type"] == "PodScheduled"
                     and x["status"] == "False"), "")

    msg = wait_for(unschedulable, 60, "the Guaranteed pod pending (no allocatable CPU)",
                   on_timeout=lambda: str(c.get_json("pod", "g", "-n", "default")["status"]))
    assert "Insufficient cpu" in msg, msg
    # the pod-level pod gone, its bubble comes back: the next Guaranteed pod gets CPU 1
    delete(c, "pl")
    g = wait_running(c, "g", "app", timeout=180)
    wait_for(lambda: cpus(cri, g) == ("1", "1"), 60, "g on CPU 1",
             on_timeout=lambda: str(cpus(cri, g)))
    delete(c, "g", "be2", "be")
