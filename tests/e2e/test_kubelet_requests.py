"""The harness's CRI client and the planner's request builder against the kubelet's own CRI
requests (oracle/cmd/kubelet-cri: the kubelet v1.37.2's kuberuntime manager, SyncPod against
the CRI API's fake runtime service), case by case over the harness's pod catalogue: the
docs' static-policy pods (tests/e2e/harness/docs_pods.py), pods with ``.spec.resources``
(resource-less containers, partial container resources, sidecars, init containers), the
look-alike pods. No containerd needed; Go is (under CI it must be there)."""

from __future__ import annotations

import pytest

from nri_cpumgr.planner.manifest import container_infos, load_pods
from nri_cpumgr.podmodel.nri import resources_from_nri
from tests.e2e.harness import kubelet_cri
from tests.e2e.harness.cri import linux_resources, memory_capacity
from tests.e2e.harness.docs_pods import DOCS_PODS
from tests.e2e.harness.kubelet_cri import k8s_pod

G4 = {"cpu": "4", "memory": "256Mi"}
B4 = {"requests": G4, "limits": G4}


def _catalogue() -> list[tuple[dict, str, dict | None]]:
    """(v1.Pod, QoS class, the pod's .spec.resources) of every case."""
    out = []
    for i, (name, qos, req, lim) in enumerate(DOCS_PODS):
        out.append((k8s_pod(name, f"00000001-0000-4000-8000-{i:012d}", [("app", req, lim)]),
                    qos, None))
    pod_level = [
        ("pl-two-shared", "Guaranteed", B4, [("a", None, None), ("b", None, None)], []),
        ("pl-look-alike", "Guaranteed", B4, [("app", None, None)], []),
        ("pl-mixed", "Guaranteed", {"requests": {"cpu": "4", "memory": "4Gi"},
                                    "limits": {"cpu": "4", "memory": "4Gi"}},
         [("main", {"cpu": "2", "memory": "2Gi"}, {"cpu": "2", "memory": "2Gi"}),
          ("cpu-only", {"cpu": "1"}, {"cpu": "1"}), ("mem-only", None, {"memory": "1Gi"})],
         [("init", None, None, False), ("side", {"cpu": "1", "memory": "128Mi"},
                                         {"cpu": "1", "memory": "128Mi"}, True)]),
        ("pl-burstable", "Burstable", {"requests": {"cpu": "1", "memory": "128Mi"},
                                       "limits": {"cpu": "2", "memory": "256Mi"}},
         [("app", None, None), ("req-only", {"cpu": "500m"}, None)], []),
        ("pl-fractional", "Guaranteed", {"requests": {"cpu": "1500m", "memory": "256Mi"},
                                         "limits": {"cpu": "1500m", "memory": "256Mi"}},
         [("app", None, None)], []),
    ]
    for i, (name, qos, pr, cs, inits) in enumerate(pod_level):
        out.append((k8s_pod(name, f"00000002-0000-4000-8000-{i:012d}", cs, pod_resources=pr,
                            init_containers=inits), qos, pr))
    return out


CATALOGUE = _catalogue()


@pytest.fixture(scope="module")
def kubelet() -> dict:
    return kubelet_cri.requests_or_skip([p for p, _, _ in CATALOGUE],
                                        memory_capacity=memory_capacity())


def _own(pod: dict, name: str) -> tuple[dict, dict]:
    for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
        if c["name"] == name:
            return c["resources"].get("requests", {}), c["resources"].get("limits", {})
    raise KeyError(name)


CASES = [(p, qos, pr, c) for p, qos, pr in CATALOGUE
         for c in [x["name"] for x in p["spec"].get("initContainers", [])
                   + p["spec"]["containers"]]]


@pytest.mark.parametrize("pod,qos,pod_res,name", CASES,
                         ids=[f"{p['metadata']['name']}/{c}" for p, _, _, c in CASES])
def test_harness_cri_client_sends_what_the_kubelet_sends(kubelet, pod, qos, pod_res, name):
    got = kubelet[pod["metadata"]["name"]]["containers"][name]
    req, lim = _own(pod, name)
    ours = linux_resources(req, lim, qos, capacity=memory_capacity(), hugepage_sizes=[],
                           pod_resources=pod_res)
    assert (ours["cpu_shares"], ours["cpu_quota"], ours["cpu_period"],
            ours["memory_limit_in_bytes"]) == (
        got["cpuShares"], got["cpuQuota"], got["cpuPeriod"], got["memoryLimitInBytes"])
    if qos == "Burstable" and pod_res and (pod_res.get("requests") or {}).get("memory"):
        # the kubelet adds each container's share of the pod's unrequested memory to its
        # request (qos/policy.go, PodLevelResources); the harness does not: the kubelet's
        # score is at most ours
        assert 2 <= got["oomScoreAdj"] <= ours["oom_score_adj"]
    else:
        assert ours["oom_score_adj"] == got["oomScoreAdj"]


@pytest.mark.parametrize("pod,qos,pod_res", CATALOGUE,
                         ids=[p["metadata"]["name"] for p, _, _ in CATALOGUE])
def test_harness_sandbox_resources_are_the_kubelets(kubelet, pod, qos, pod_res):
    """What the CRI client sends as the sandbox's resources for ``pod_resources`` (a pod
    with ``.spec.resources``) is what the kubelet sends."""
    sb = kubelet[pod["metadata"]["name"]]["sandbox"]["resources"]
    if pod_res is None:
        return  # the client sends none then; the kubelet's summed ones: see the look-alikes
    ours = linux_resources(pod_res.get("requests"), pod_res.get("limits"), qos,
                           hugepage_sizes=[])
    assert (ours["cpu_shares"], ours["cpu_quota"], ours["cpu_period"],
            ours["memory_limit_in_bytes"]) == (sb["cpuShares"], sb["cpuQuota"],
                                               sb["cpuPeriod"], sb["memoryLimitInBytes"])


@pytest.mark.parametrize("pod,qos,pod_res", CATALOGUE,
                         ids=[p["metadata"]["name"] for p, _, _ in CATALOGUE])
def test_planner_builds_the_kubelets_container_requests(kubelet, pod, qos, pod_res):
    """``nri-cpumgr plan`` reads each container as the plugin would from the kubelet's
    requests: the same QoS class, CPU request/limit and memory limit."""
    import json

    (planned,) = load_pods(json.dumps(pod))
    assert planned.qos.value == qos
    want = kubelet[pod["metadata"]["name"]]["containers"]
    infos = container_infos(planned, [f"c{i}" for i in range(len(planned.containers))])
    from nri_cpumgr.api import nri_pb2

    for info in infos:
        k = want[info.name]
        r = nri_pb2.LinuxResources()
        r.cpu.shares.value = k["cpuShares"]
        if k["cpuQuota"]:
            r.cpu.quota.value = k["cpuQuota"]
            r.cpu.period.value = k["cpuPeriod"]
        if k["memoryLimitInBytes"]:
            r.memory.limit.value = k["memoryLimitInBytes"]
        theirs = resources_from_nri(r)
        assert (info.resources.shares, info.resources.cpu_request_milli,
                info.resources.cpu_limit_milli, info.resources.memory_limit) == (
            theirs.shares, theirs.cpu_request_milli, theirs.cpu_limit_milli,
            theirs.memory_limit), info.name
