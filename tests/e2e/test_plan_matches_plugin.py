"""`nri-cpumgr plan` answers what the real plugin does on a real containerd.

The same pods (same uids, same order) go through `nri-cpumgr plan --json` (the config file
the plugin runs with, the same sysfs fixture) and through the plugin on containerd, created
through CRI the way the kubelet creates them, each pod shown first by a fake API server (the
plugin deployed with its pod spec source, as the chart deploys it: pods admitted whole, as
`plan` admits the manifest's). Every container's cpuset and mems, every refusal's text, and
the shared pool at the end must be the same.

Scenarios: the Kubernetes docs' static-policy example pods on the 2-CPU fixture (the last one
refused: NotEnoughCPUsError), single-numa-node + Memory Manager on the dual-socket fixture
(TopologyAffinityError refusals), full-pcpus-only (SMTAlignmentError) and
distribute-cpus-across-numa on the multi-L3 fixture.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from tests.e2e.harness.docs_pods import DOCS_PODS
from tests.e2e.harness.fakeapi import FakeAPIServer
from tests.e2e.plugin_run import eventually, start_plugin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def g(name: str, cpu: str, mem: str = "1Gi") -> tuple[str, str, dict[str, str], dict[str, str]]:
    res = {"cpu": cpu, "memory": mem}
    return (name, "Guaranteed", res, res)


SCENARIOS: dict[str, tuple[str, dict[str, Any], list[Any]]] = {
    "docs-pods-2cpu": ("this-machine", {}, DOCS_PODS),
    "single-numa-node": (
        "dual-socket-smt",
        {"topologyManagerPolicy": "single-numa-node", "memoryManagerPolicy": "Static",
         "reservedMemory": [{"numaNode": 0, "limits": {"memory": "100Mi"}}]},
        [g("g4", "4"), g("g10", "10"), g("bigmem", "2", "9Gi"), g("g8", "8"),
         ("be", "BestEffort", {}, {}), g("g3", "3")],
    ),
    "full-pcpus-only": (
        "dual-socket-smt",
        {"cpuManagerPolicyOptions": {"full-pcpus-only": "true"}},
        [g("g2", "2"), g("g3", "3"), ("bu", "Burstable", {"cpu": "1"}, {"cpu": "2"}),
         g("g6", "6")],
    ),
    "distribute-across-numa": (
        "multi-l3",
        {"cpuManagerPolicyOptions": {"distribute-cpus-across-numa": "true"},
         "featureGates": {"CPUManagerPolicyAlphaOptions": True}},
        # 20 CPUs fit no NUMA node (16 each, CPU 0 reserved): spread evenly, 10 + 10
        [g("g20", "20"), g("g3", "3"), ("be", "BestEffort", {}, {}), g("g9", "9")],
    ),
}


NODE = "plan-node"


def manifest(pods: list[Any], uids: dict[str, str]) -> str:
    return yaml.safe_dump_all(manifest_docs(pods, uids))


def manifest_docs(pods: list[Any], uids: dict[str, str]) -> list[dict[str, Any]]:
    docs = []
    for name, _qos, req, lim in pods:
        res: dict[str, Any] = {}
        if req:
            res["requests"] = req
        if lim:
            res["limits"] = lim
        docs.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "e2e", "uid": uids[name]},
            "spec": {"containers": [{"name": "app", "image": "busybox", "resources": res}]},
        })
    return docs


def run_plan(config: Path, sysfs: Path, manifest_path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "nri_cpumgr", "plan", "--json", "--config", str(config),
         "--sysfs-root", str(sysfs), str(manifest_path)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_plan_gives_the_plugins_cpusets(containerd, cri, e2e_workdir, scenario):
    fixture, keys, pods = SCENARIOS[scenario]
    sysfs = FIXTURES / fixture
    uids = {p[0]: str(uuid.uuid4()) for p in pods}
    docs = {d["metadata"]["name"]: d for d in manifest_docs(pods, uids)}
    api = FakeAPIServer(NODE).__enter__()  # (closed in the finally below)
    plugin = start_plugin(containerd, e2e_workdir, sysfs_root=sysfs, podSpecSource="apiServer",
                          apiServerURL=api.url, nodeName=NODE, **keys)
    try:
        plugin.wait_for_log(f"pod spec source: 0 pods of node {NODE}", timeout=10)
        real: dict[str, tuple[str, str, str]] = {}  # name -> (cpus, mems, refusal)
        for name, qos, req, lim in pods:
            api.add(docs[name])  # the API server shows the pod before the kubelet runs it
            pod = cri.run_pod(name, qos, uid=uids[name])
            try:
                cid = cri.create_container(pod, "app", requests=req, limits=lim)
            except grpc.RpcError as e:
                real[name] = ("", "", e.details())
                continue
            real[name] = (cri.spec_cpus(cid), cri.spec_mems(cid), "")
        state = e2e_workdir / "state"

        def pool() -> str:
            body = json.loads((state / "cpu_manager_state").read_text())["data"]
            return body["defaultCpuSet"]

        # the plan, from the same config file and fixture, on an empty node
        mpath = e2e_workdir / "pods.yaml"
        mpath.write_text(manifest(pods, uids))
        plan = run_plan(e2e_workdir / "config.yaml", sysfs, mpath)
        planned = {p["pod"].split("/", 1)[1]: p for p in plan["pods"]}
        assert list(planned) == [p[0] for p in pods]
        for name, _qos, _req, _lim in pods:
            c = planned[name]["containers"][0]
            cpus, mems, refusal = real[name]
            if refusal:
                assert c["decision"] == "refused", (name, c, refusal)
                # the runtime wraps the plugin's text: "... failed to create container ...:
                # <the plugin's error>"
                assert c["error"] and c["error"] in refusal, (name, c["error"], refusal)
            else:
                assert c["decision"] in ("exclusive", "shared"), (name, c)
                assert (c["cpus"], c["mems"]) == (cpus, mems), (name, c, real[name])
        refused = [n for n, r in real.items() if r[2]]
        assert refused, "every scenario has a refusal"
        assert eventually(pool, plan["pods"][-1]["sharedPoolAfter"]) == \
            plan["pods"][-1]["sharedPoolAfter"]
    finally:
        plugin.stop()
        api.close()


def explain(state: Path, target: str) -> list[dict[str, Any]]:
    out = subprocess.run([sys.executable, "-m", "nri_cpumgr", "explain", "--json",
                          "--state-dir", str(state), target],
                         capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout) if out.returncode == 0 else []


def test_explain_from_the_running_plugin_matches_plan_explain(containerd, cri, e2e_workdir):
    """`explain` reads the running plugin's records: a container placed under
    distribute-cpus-across-numa, one refused by single-numa-node; `plan --explain` gives the
    same take and the same reason."""
    cases = [
        ("multi-l3", {"cpuManagerPolicyOptions": {"distribute-cpus-across-numa": "true"}},
         [g("g20", "20")], "g20"),
        ("dual-socket-smt", {"topologyManagerPolicy": "single-numa-node"},
         [g("g4", "4"), g("g10", "10")], "g10"),
    ]
    for n, (fixture, keys, pods, target) in enumerate(cases):
        work = e2e_workdir / f"case{n}"
        work.mkdir()
        uids = {p[0]: str(uuid.uuid4()) for p in pods}
        plugin = start_plugin(containerd, work, sysfs_root=FIXTURES / fixture,
                              explainDecisions=True, **keys)
        try:
            for name, qos, req, lim in pods:
                try:
                    cri.create_container(cri.run_pod(name, qos, uid=uids[name]), "app",
                                         requests=req, limits=lim)
                except grpc.RpcError:
                    pass
            live = eventually(lambda t=target, w=work: bool(explain(w / "state", f"e2e/{t}")),
                              True)
            assert live, plugin.log_text()[-2000:]
            (rec,) = explain(work / "state", f"e2e/{target}")
        finally:
            plugin.stop()
        mpath = work / "pods.yaml"
        mpath.write_text(manifest(pods, uids))
        out = subprocess.run(
            [sys.executable, "-m", "nri_cpumgr", "plan", "--json", "--explain", "--config",
             str(work / "config.yaml"), "--sysfs-root", str(FIXTURES / fixture), str(mpath)],
            capture_output=True, text=True, timeout=60, check=True)
        planned = json.loads(out.stdout)["pods"][-1]["containers"][0]["explanation"]
        if target == "g20":
            assert rec["decision"] == "exclusive"
            per: dict[int, int] = {}
            for step in rec["take"]:
                per[step["numa"]] = per.get(step["numa"], 0) + step["count"]
            assert per == {0: 10, 1: 10}
            assert rec["take"] == planned["take"]
            assert rec["options"] == planned["options"]
        else:
            assert rec["decision"] == "refused"
            assert rec["why"].startswith("single-numa-node needs one NUMA node with 10 free")
            assert rec["why"] == planned["why"]
            assert rec["free"] == planned["free"]
