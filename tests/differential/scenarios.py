"""Differential testing against the kubelet: seeded scenarios, both sides, comparison, shrinking.

A scenario (docs/development/differential.md) runs through the kubelet oracle
(oracle/cmd/kubelet-oracle:
the kubelet's own CPU, Topology and Memory managers, k8s.io/kubernetes imported as a Go
module) and through the plugin's decision path (nri_cpumgr.planner.scenario.run_scenario).
:func:`generate` makes a random valid scenario from a seed (same seed, same scenario);
:func:`compare` lists where the two answers differ; :func:`shrink` removes what a mismatch
does not need; :func:`known_difference` says whether a mismatch is one the project documents
(``known_differences.json``, docs/concepts/differences.md).
"""

from __future__ import annotations

import collections
import copy
import json
import os
import random
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = ROOT / "tests" / "data" / "conformance" / "topologies"
KNOWN = Path(__file__).with_name("known_differences.json")
REGRESSIONS = Path(__file__).with_name("regressions")

AREAS = ("cpu manager options", "topology manager", "memory manager", "pod-level", "lifecycle",
         "base")

GIB = 1 << 30
MIB = 1 << 20


# ------------------------------------------------------------------ machines
def conformance_machines() -> list[dict[str, Any]]:
    """Every topology of the conformance corpus (name, cpus rows)."""
    out = []
    for f in sorted(TOPOLOGIES.glob("*.json")):
        d = json.loads(f.read_text())
        out.append({"name": d["name"], "cpus": [
            {k: int(r.get(k, 0)) for k in ("cpu", "core", "socket", "numa", "uncore")}
            for r in d["cpus"]]})
    return out


def synthetic_machine(rng: random.Random) -> dict[str, Any]:
    """A real machine shape: 1-4 sockets, 1-4 NUMA nodes per socket (2-8 in all when more
    than one), SMT on or off, 1-3 L3 groups per NUMA node; CPUs numbered the Linux way
    (first threads of every core, then the siblings)."""
    sockets = rng.choice([1, 1, 2, 2, 2, 4])
    numa_per = rng.choice([1, 1, 2, 4]) if sockets < 4 else rng.choice([1, 2])
    l3_per = rng.choice([1, 1, 2, 3])
    cores_per_l3 = rng.choice([2, 3, 4])
    smt = rng.choice([1, 2, 2])
    cores = []  # (socket, numa, uncore)
    for s in range(sockets):
        for n in range(numa_per):
            for u in range(l3_per):
                cores += [(s, s * numa_per + n, (s * numa_per + n) * l3_per + u)] * cores_per_l3
    rows = []
    for t in range(smt):
        for i, (s, n, u) in enumerate(cores):
            rows.append({"cpu": t * len(cores) + i, "core": i, "socket": s, "numa": n,
                         "uncore": u})
    return {"name": f"synthetic-{sockets}s{numa_per}n{l3_per}l3x{cores_per_l3}c-smt{smt}",
            "cpus": rows}


def with_memory(m: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The machine with ``numa_nodes``: memory (4-16 GiB) and 2Mi hugepages per node."""
    nodes = sorted({r["numa"] for r in m["cpus"]})
    sock = {r["numa"]: r["socket"] for r in m["cpus"]}
    m = dict(m)
    far = rng.choice([20, 21, 32])

    def dist(a: int, b: int) -> int:
        return 10 if a == b else (12 if sock[a] == sock[b] else far)

    m["numa_nodes"] = [{"id": n, "memory_bytes": rng.choice([4, 8, 16]) * GIB,
                        "hugepages": {str(2 * MIB): rng.choice([0, 512, 1024])},
                        "distances": {str(j): dist(n, j) for j in nodes}}
                       for n in nodes]
    return m


# ------------------------------------------------------------------ config
CPU_OPTIONS = ["full-pcpus-only", "distribute-cpus-across-numa", "align-by-socket",
               "distribute-cpus-across-cores", "strict-cpu-reservation",
               "prefer-align-cpus-by-uncorecache"]


def gen_config(rng: random.Random, m: dict[str, Any]) -> dict[str, Any]:
    cpus = sorted(r["cpu"] for r in m["cpus"])
    numa = sorted({r["numa"] for r in m["cpus"]})
    c: dict[str, Any] = {"cpuManagerPolicy": "static" if rng.random() < 0.95 else "none"}
    if rng.random() < 0.6:
        n = rng.choice([1, 1, 2, 4])
        # the kubelet's usual: the first core(s), or a spread
        c["reservedSystemCPUs"] = ",".join(str(x) for x in sorted(
            rng.sample(cpus[: max(n * 2, 4)], min(n, len(cpus) - 1))))
    else:
        c["kubeReserved"] = {"cpu": rng.choice(["1", "500m", "2", "1500m"])}
    opts: dict[str, str] = {}
    for o in CPU_OPTIONS:
        if rng.random() < 0.2:
            opts[o] = "true"
    # mostly (97%) combinations the kubelet accepts: a refused config tests only the
    # config check (the runner counts them apart)
    valid = rng.random() < 0.97
    if valid:
        if "prefer-align-cpus-by-uncorecache" in opts:
            opts.pop("distribute-cpus-across-numa", None)
            opts.pop("distribute-cpus-across-cores", None)
        if "full-pcpus-only" in opts or "distribute-cpus-across-numa" in opts:
            opts.pop("distribute-cpus-across-cores", None)
        if c["cpuManagerPolicy"] == "none":
            opts.clear()
    if opts:
        c["cpuManagerPolicyOptions"] = opts
    gates = {}
    if (rng.random() < 0.9 or valid) and (
            {"align-by-socket", "distribute-cpus-across-cores"} & set(opts)):
        gates["CPUManagerPolicyAlphaOptions"] = True
    c["topologyManagerPolicy"] = rng.choice(
        ["none", "best-effort", "restricted", "single-numa-node"])
    sockets = {r["socket"] for r in m["cpus"]}
    if valid and "align-by-socket" in opts and (
            c["topologyManagerPolicy"] == "single-numa-node" or len(sockets) > len(numa)):
        del opts["align-by-socket"]
        if not opts:
            del c["cpuManagerPolicyOptions"]
    c["topologyManagerScope"] = rng.choice(["container", "pod"])
    if rng.random() < 0.2:
        c["topologyManagerPolicyOptions"] = {"prefer-closest-numa-nodes": "true"}
    if rng.random() < 0.35:
        c["memoryManagerPolicy"] = "Static"
        sysres = rng.choice([412, 924])  # + 100Mi eviction = 512Mi / 1Gi
        c["systemReserved"] = {"memory": f"{sysres}Mi"}
        total = sysres + 100
        if len(numa) > 1 and rng.random() < 0.5:
            half = total // 2
            c["reservedMemory"] = [{"numaNode": numa[0], "limits": {"memory": f"{half}Mi"}},
                                   {"numaNode": numa[1],
                                    "limits": {"memory": f"{total - half}Mi"}}]
        else:
            c["reservedMemory"] = [{"numaNode": numa[0], "limits": {"memory": f"{total}Mi"}}]
    c["evictionHard"] = {"memory.available": "100Mi"}
    if gates:
        c["featureGates"] = gates
    return c


# ------------------------------------------------------------------ pods
def _container(rng: random.Random, name: str, qos: str, max_cpus: int,
               hugepages: bool) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if qos == "Guaranteed":
        if rng.random() < 0.8:
            cpu = str(rng.choice([1, 1, 2, 2, 3, 4, 6, 8, max(1, max_cpus)]))
        else:
            cpu = rng.choice(["500m", "1500m", "250m", "2500m"])
        mem = f"{rng.choice([128, 256, 512, 1024, 2048])}Mi"
        lim = {"cpu": cpu, "memory": mem}
        if hugepages and rng.random() < 0.3:
            lim["hugepages-2Mi"] = f"{rng.choice([2, 64, 128])}Mi"
        res = {"requests": dict(lim), "limits": dict(lim)}
    elif qos == "Burstable":
        k = rng.random()
        if k < 0.4:
            res = {"requests": {"cpu": rng.choice(["100m", "1", "2"]), "memory": "64Mi"}}
        elif k < 0.8:
            res = {"requests": {"cpu": "1", "memory": "128Mi"},
                   "limits": {"cpu": "2", "memory": "128Mi"}}
        else:
            res = {"requests": {"memory": "64Mi"}}
    return {"name": name, "resources": res}


def gen_pod(rng: random.Random, name: str, max_cpus: int, hugepages: bool) -> dict[str, Any]:
    qos = rng.choices(["Guaranteed", "Burstable", "BestEffort"], [0.7, 0.2, 0.1])[0]
    spec: dict[str, Any] = {"containers": []}
    inits = []
    for i in range(rng.choice([0, 0, 0, 1, 2])):
        c = _container(rng, f"init{i}", qos, max_cpus, hugepages)
        if rng.random() < 0.4:
            c["restartPolicy"] = "Always"
            c["name"] = f"sidecar{i}"
        inits.append(c)
    if inits:
        spec["initContainers"] = inits
    for i in range(rng.choice([1, 1, 1, 2, 3])):
        spec["containers"].append(_container(rng, f"app{i}", qos, max_cpus, hugepages))
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": spec}


def pod_uses_hugepages(pod: dict[str, Any]) -> bool:
    cs = (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]
    return any("hugepages-2Mi" in (c.get("resources") or {}).get("limits", {}) for c in cs)


def generate(seed: int) -> dict[str, Any]:
    """A random valid scenario for ``seed`` (deterministic)."""
    rng = random.Random(seed)
    machines = conformance_machines()
    if rng.random() < 0.5:
        m = rng.choice(machines)
    else:
        m = synthetic_machine(rng)
    m = with_memory(m, rng)
    cfg = gen_config(rng, m)
    ncpu = len(m["cpus"])
    hp = any(int(v) for n in m["numa_nodes"] for v in n["hugepages"].values())
    events: list[dict[str, Any]] = []
    live: list[dict[str, Any]] = []
    for i in range(rng.randint(1, 8)):
        k = rng.random()
        if live and k < 0.2:
            p = live.pop(rng.randrange(len(live)))
            events.append({"op": "delete", "name": p["metadata"]["name"]})
            continue
        if live and k < 0.3:
            p = rng.choice(live)
            c = rng.choice(p["spec"]["containers"])
            events.append({"op": "exit", "name": p["metadata"]["name"], "container": c["name"]})
            continue
        pod = gen_pod(rng, f"pod{i}", max(1, ncpu // rng.choice([2, 4, 8])), hp)
        events.append({"op": "add", "pod": pod})
        live.append(pod)
    s = {"name": f"seed-{seed}", "seed": seed, "machine": m, "config": cfg, "events": events}
    return with_pod_level(s, random.Random(f"pod-level-{seed}"))


# ------------------------------------------------------------------ pod-level pods
POD_LEVEL_GATES = ("PodLevelResources", "PodLevelResourceManagers")
#: pod-level scenarios in the generator (NRI_DIFFERENTIAL_POD_LEVEL=0: none)
POD_LEVEL_ON = os.environ.get("NRI_DIFFERENTIAL_POD_LEVEL", "1") != "0"


def with_pod_level(s: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A quarter of the scenarios get pods with ``.spec.resources`` (their own random
    stream, so that the other scenarios of a seed stay as they were): the gates
    ``PodLevelResources`` + ``PodLevelResourceManagers`` on (mostly) or not, in the kubelet's
    config and the plugin's alike; each added pod becomes a pod-level pod with odds 0.6."""
    if rng.random() >= 0.25 or not POD_LEVEL_ON:
        return s
    gates = dict(s["config"].get("featureGates") or {})
    both = rng.random() < 0.75
    on = (True, True) if both else rng.choice([(True, False), (False, True), (False, False)])
    for g, v in zip(POD_LEVEL_GATES, on, strict=True):
        gates[g] = v
    s["config"]["featureGates"] = gates
    for e in s["events"]:
        if e["op"] == "add" and rng.random() < 0.6:
            e["pod"]["spec"] = pod_level_spec(rng, e["pod"]["spec"])
    return s


def pod_level_spec(rng: random.Random, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with ``.spec.resources`` (cpu and memory: Guaranteed, requests = limits,
    mostly with whole CPUs; or Burstable) and its containers' own resources kept (fitted
    inside the pod's: the API server's validation) or dropped (a sidecar without resources
    runs on the pod's budget). No hugepages in a pod-level pod."""
    spec = copy.deepcopy(spec)
    guaranteed = rng.random() < 0.8
    if guaranteed and rng.random() < 0.85:
        cpu_m = 1000 * rng.choice([1, 2, 2, 3, 4, 4, 6, 8])
    else:
        cpu_m = rng.choice([1500, 2500, 3500])
    mem_mi = rng.choice([512, 1024, 2048, 4096])
    if guaranteed:
        pod = {"requests": {"cpu": f"{cpu_m}m", "memory": f"{mem_mi}Mi"},
               "limits": {"cpu": f"{cpu_m}m", "memory": f"{mem_mi}Mi"}}
    else:
        pod = {"requests": {"cpu": f"{cpu_m // 2}m", "memory": f"{mem_mi // 2}Mi"},
               "limits": {"cpu": f"{cpu_m}m", "memory": f"{mem_mi}Mi"}}
    spec["resources"] = pod
    left_cpu, left_mem = cpu_m // 2 if not guaranteed else cpu_m, mem_mi // (1 if guaranteed else 2)
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if rng.random() < 0.45 or left_cpu < 1000 or left_mem < 64:
                c["resources"] = {}
                continue
            # its own: Guaranteed with whole CPUs (a slice) or a small Burstable request
            if rng.random() < 0.75:
                n = rng.randint(1, max(1, min(4, left_cpu // 1000)))
                mem = rng.choice([64, 128, 256])
                mem = min(mem, left_mem)
                lim = {"cpu": str(n), "memory": f"{mem}Mi"}
                c["resources"] = {"requests": dict(lim), "limits": dict(lim)}
                if key == "containers" or c.get("restartPolicy") == "Always":
                    left_cpu -= n * 1000
                    left_mem -= mem
            else:
                c["resources"] = {"requests": {"cpu": "100m", "memory": "32Mi"}}
                if key == "containers" or c.get("restartPolicy") == "Always":
                    left_cpu -= 100
                    left_mem -= 32
    return spec


def pod_level_pods(s: dict[str, Any]) -> bool:
    """Whether the scenario adds a pod with ``.spec.resources``."""
    return any(e["op"] == "add" and e["pod"]["spec"].get("resources") for e in s["events"])


_CRI_CACHE: dict[str, dict[str, Any]] = {}


def with_kubelet_requests(s: dict[str, Any]) -> dict[str, Any]:
    """``s`` with, on every ``add`` event, ``cri``: the CRI requests the kubelet v1.37.2
    sends for that pod (sandbox resources, each container's ``LinuxContainerResources``),
    from oracle/cmd/kubelet-cri (the kubelet's kuberuntime manager against the CRI API's
    fake runtime), with the scenario's feature gates and the machine's memory. Only for a
    scenario with a pod-level pod (elsewhere the planner's model of the requests is used,
    checked against the kubelet's by tests/e2e/test_kubelet_requests.py); else ``s``."""
    gates = {g: bool(v) for g, v in (s["config"].get("featureGates") or {}).items()
             if g in POD_LEVEL_GATES}
    if not pod_level_pods(s) or (gates.get(POD_LEVEL_GATES[1]) and not gates.get(
            POD_LEVEL_GATES[0], True)):
        return s  # (a kubelet with that pair of gates does not start: a config error)
    pods = [e["pod"] for e in s["events"] if e["op"] == "add"]
    mem = sum(int(n.get("memory_bytes", 0)) for n in s["machine"].get("numa_nodes") or [])
    key = json.dumps([pods, gates, mem], sort_keys=True)
    got = _CRI_CACHE.get(key)
    if got is None:
        from tests.e2e.harness import kubelet_cri

        k8s = copy.deepcopy(pods)
        for p in k8s:
            p.update(apiVersion="v1", kind="Pod")
            for c in p["spec"].get("initContainers", []) + p["spec"]["containers"]:
                c.setdefault("image", "busybox")
        got = kubelet_cri.kubelet_requests(k8s, gates=gates,
            memory_capacity=mem or None)
        if len(_CRI_CACHE) > 4096:
            _CRI_CACHE.clear()
        _CRI_CACHE[key] = got
    t = copy.deepcopy(s)
    for e in t["events"]:
        if e["op"] == "add":
            r = got[e["pod"]["metadata"]["name"]]
            e["cri"] = {"sandbox": r["sandbox"], "containers": r["containers"]}
    return t


def areas(s: dict[str, Any]) -> list[str]:
    """The areas a scenario exercises (a scenario counts in each of them)."""
    c = s["config"]
    out = []
    if c.get("cpuManagerPolicyOptions"):
        out.append("cpu manager options")
    if c.get("topologyManagerPolicy", "none") != "none":
        out.append("topology manager")
    if c.get("memoryManagerPolicy") == "Static":
        out.append("memory manager")
    if any(e["op"] == "add" and e["pod"]["spec"].get("resources") for e in s["events"]):
        out.append("pod-level")
    if any(e["op"] != "add" or e["pod"]["spec"].get("initContainers") for e in s["events"]):
        out.append("lifecycle")
    return out or ["base"]


# ------------------------------------------------------------------ the two sides
def oracle_for_tests() -> Oracle:
    """The oracle for a test module's fixture: without Go (and no ``NRI_CPUMGR_ORACLE``) the
    test is skipped, or fails when ``CI`` is set."""
    import shutil

    import pytest

    if not os.environ.get("NRI_CPUMGR_ORACLE") and shutil.which("go") is None:
        if os.environ.get("CI"):
            pytest.fail("the kubelet oracle needs Go 1.26 (make oracle)")
        pytest.skip("no Go: the kubelet oracle cannot be built (make oracle)")
    return Oracle(oracle_path())


def oracle_path() -> Path:
    """The oracle binary: $NRI_CPUMGR_ORACLE, else where `make oracle` puts it."""
    env = os.environ.get("NRI_CPUMGR_ORACLE")
    if env:
        return Path(env)
    out = subprocess.run(["bash", str(ROOT / "scripts" / "build-oracle.sh"), "--print-path"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


class Oracle:
    """A kubelet-oracle process in batch mode: one scenario per line in, one result out."""

    def __init__(self, path: Path, restart_every: int = 2000) -> None:
        self.path = path
        self.restart_every = restart_every  # the cpu manager's reconcile goroutine stays
        self.proc: subprocess.Popen[str] | None = None
        self.count = 0

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.count >= self.restart_every:
            self.close()
            self.proc = subprocess.Popen([str(self.path)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, bufsize=1)
            self.count = 0
        return self.proc

    def run(self, s: dict[str, Any]) -> dict[str, Any]:
        p = self._start()
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(json.dumps(s) + "\n")
        p.stdin.flush()
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"kubelet-oracle exited ({p.wait()}) on {s.get('name')}")
        self.count += 1
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait()
            self.proc = None


def plugin(s: dict[str, Any]) -> dict[str, Any]:
    from nri_cpumgr.planner.scenario import run_scenario

    return run_scenario(with_kubelet_requests(s))


# ------------------------------------------------------------------ comparison
#: kinds of difference no documented class ever explains (an error of the plugin's own)
NEVER_DOCUMENTED = ("plugin-double-assign", "plugin-pool-inconsistent", "containers")
#: kinds that leave the two sides' states alike (a refusal's text, a cpuset at creation)
STATELESS = ("reason", "message", "shared-cpus")


class Difference(dict[str, Any]):
    """One difference (a dict, as JSON shows it) that knows both answers' event (for the
    evidence :func:`known_difference` asks of a documented class)."""

    answers: dict[str, dict[str, Any]] | None = None


def _regular_inits(ev: dict[str, Any]) -> set[str]:
    spec = (ev.get("pod") or {}).get("spec") or {}
    return {c["name"] for c in spec.get("initContainers") or []
            if c.get("restartPolicy") != "Always"}


def double_assignments(s: dict[str, Any], answer: dict[str, Any]) -> list[tuple[int, str]]:
    """Every event of ``answer`` (either side's) that hands out a CPU another live pod
    holds: any container's cpuset (exclusive or shared, a pod-level pod's CPUs too)
    overlapping the exclusive CPUs of another pod not deleted, an exclusive container's
    overlapping those of a sidecar or app container of its own pod, or a shared pool
    holding such a CPU. A regular init container's CPUs
    count as released in ``nri-alone`` mode (the plugin releases a finished init
    container's: ``finished-init-released``), as held by its pod (reusable by its pod's
    later containers only) as deployed, as the kubelet keeps them; an exited container
    keeps its CPUs until its pod is
    deleted, on both sides (the kubelet's state keeps the assignment; the plugin
    releases a stopped container's only when its pod's next container is created).
    ``[(event index, what)]``, the first such hand-out of each event; the events after one
    are still checked (the kubelet's bug can strike again at a later pod)."""
    found: list[tuple[int, str]] = []
    held: dict[str, dict[str, set[int]]] = {}  # pod -> container (or "" for the pod) -> CPUs
    keep_init = s.get("mode", MODES[0]) != "nri-alone"
    init_key = "\0init:"  # (a regular init container's CPUs, held against other pods only)
    # (an answer of a refused config has no events)
    for i, (ev, r) in enumerate(zip(s.get("events", []), answer.get("events", []),
                                    strict=False)):
        if r.get("op") == "delete":
            held.pop(r.get("pod"), None)
            continue
        if r.get("op") != "add":
            continue
        others: set[int] = set()
        for pod, cs in held.items():
            if pod != r.get("pod"):
                for cpus in cs.values():
                    others |= cpus
        init = _regular_inits(ev)
        mine: dict[str, set[int]] = {}
        what: list[str] = []  # this event's hand-outs of held CPUs, the first reported
        if r.get("admitted"):
            if r.get("podCPUs"):
                mine[""] = _cpus(r["podCPUs"])
            for c in r.get("containers") or []:
                cpus = _cpus(c.get("cpus", ""))
                if cpus & others:
                    what.append(f"{r['pod']}/{c['name']} got CPUs "
                                f"{sorted(cpus & others)} another pod holds")
                if c.get("exclusive"):
                    # its pod's sidecars and app containers run together: exclusive CPUs
                    # of theirs are no one else's (a regular init container's are reused)
                    siblings = set().union(*(v for k, v in mine.items()
                                             if k and not k.startswith(init_key)))
                    if cpus & siblings:
                        what.append(f"{r['pod']}/{c['name']} got CPUs "
                                    f"{sorted(cpus & siblings)} another container of its "
                                    "pod holds")
                    if c["name"] not in init:
                        mine[c["name"]] = cpus
                    elif keep_init:
                        mine[init_key + c["name"]] = cpus
            if mine.get("", set()) & others:
                what.append(f"{r['pod']} got pod CPUs {sorted(mine[''] & others)} another pod "
                            "holds")
            held[r["pod"]] = mine
        pool = _cpus(r.get("sharedPool", ""))
        taken = set().union(*(cpus for cs in held.values() for cpus in cs.values()))
        if pool & taken:
            what.append(f"the shared pool after {r.get('pod')} has CPUs "
                        f"{sorted(pool & taken)} a pod holds")
        if what:
            found.append((i, what[0]))
    return found


def double_assigned(s: dict[str, Any], answer: dict[str, Any]) -> tuple[int, str] | None:
    """The first of :func:`double_assignments` (``(event index, what)``), or None."""
    found = double_assignments(s, answer)
    return found[0] if found else None


def _held(s: dict[str, Any], answer: dict[str, Any], with_inits: bool,
          ) -> list[tuple[dict[str, tuple[Any, ...]], set[int]]]:
    """Per event of ``answer``: the live admitted pods' allocations (pod -> a tuple of
    (container, cpus, exclusive, mems, pool) and the pod CPUs) and the CPUs they hold
    (exclusive containers' and pod CPUs; a regular init container's only ``with_inits``),
    as they are after the event."""
    live: dict[str, tuple[Any, ...]] = {}
    cpus: dict[str, set[int]] = {}
    out = []
    for ev, r in zip(s.get("events", []), answer.get("events", []), strict=False):
        if r.get("op") == "delete":
            live.pop(r.get("pod"), None)
            cpus.pop(r.get("pod"), None)
        elif r.get("op") == "add" and r.get("admitted"):
            init = set() if with_inits else _regular_inits(ev)
            cs = r.get("containers") or []
            live[r["pod"]] = (r.get("podCPUs", ""), *(
                (c["name"], c.get("cpus", ""), bool(c.get("exclusive")), c.get("mems", ""),
                 c.get("pool", "")) for c in cs))
            h = _cpus(r.get("podCPUs", ""))
            for c in cs:
                if c.get("exclusive") and c["name"] not in init:
                    h |= _cpus(c.get("cpus", ""))
            cpus[r["pod"]] = h
        out.append((dict(live), set().union(*cpus.values()) if cpus else set()))
    return out


def _reserved_out_of_pool(s: dict[str, Any], kubelet: dict[str, Any]) -> set[int] | None:
    """The CPUs the kubelet keeps out of its shared pool though no pod holds them (the
    reserved CPUs under ``strict-cpu-reservation``, else none): from its first admitted or
    refused pod's event. None when it cannot tell (policy none, no add event)."""
    cfg = s.get("config", {})
    if cfg.get("cpuManagerPolicy", "none") != "static":
        return None
    if "strict-cpu-reservation" not in (cfg.get("cpuManagerPolicyOptions") or {}):
        return set()
    every = {int(r["cpu"]) for r in s["machine"]["cpus"]}
    for (_, held), r in zip(_held(s, kubelet, True), kubelet.get("events") or [],
                            strict=False):
        if r.get("op") == "add":
            return every - _cpus(r.get("sharedPool", "")) - held
    return None


def pool_inconsistent(s: dict[str, Any], kubelet: dict[str, Any],
                      ours: dict[str, Any]) -> tuple[int, str] | None:
    """The first event where the plugin's shared pool is not every CPU but those its live
    pods hold and the reserved CPUs the kubelet keeps out (``strict-cpu-reservation``):
    ``(event index, what)``, or None. In ``nri-alone`` mode the plugin releases a finished
    (regular) init container's CPUs, so they are not counted as held; as deployed it keeps
    them for the pod's life, as the kubelet does."""
    r = _reserved_out_of_pool(s, kubelet)
    if r is None:
        return None
    keep_init = s.get("mode", MODES[0]) != "nri-alone"
    every = {int(c["cpu"]) for c in s["machine"]["cpus"]}
    for i, ((_, held), e) in enumerate(zip(_held(s, ours, keep_init),
                                           ours.get("events") or [], strict=False)):
        if e.get("op") != "add":
            continue
        want = every - held - r
        got = _cpus(e.get("sharedPool", ""))
        if got != want:
            return i, (f"the shared pool after {e.get('pod')} lacks {sorted(want - got)}, "
                       f"has {sorted(got - want)} beyond every CPU no pod holds")
    return None


def compare(kubelet: dict[str, Any], ours: dict[str, Any],
            s: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Where the answers differ, every difference of every event: a list of ``{"kind",
    "event", "what", "kubelet", "plugin"}`` (``kind``: config, admission, reason (both
    refused, for another reason), message (the same reason, another text), containers
    (not the same containers), exclusive, pool (a shared container on the node's or its
    pod's shared pool), cpus (exclusive CPUs), shared-cpus (a shared container's cpuset
    when created), mems, pod-cpus (a pod's pod-level CPUs), shared-pool (after the event)).
    A ``reason`` difference carries the oracle's ``memoryUnsatisfiable`` (the rejected
    pod's containers its Memory Manager finds no NUMA node set for).

    With the scenario ``s``: a plugin answer that hands out a CPU another pod holds comes
    first, as kind ``plugin-double-assign``, and one whose shared pool is not what its own
    allocations leave, as ``plugin-pool-inconsistent`` (neither is ever a documented
    difference); a difference at the event where the kubelet's answer hands out a held CPU
    (:func:`double_assigned`) carries ``kubeletDoubleAssigned``, what it handed out; a
    difference at an event the two sides enter with different states (an earlier
    difference changed them) carries ``diverged``: the first event whose difference did."""
    out = _compare(kubelet, ours)
    # the pod-level pod's CPUs (its bubble) of the difference's event, where they differ:
    # every difference of that pod there follows from them
    kev, pev = kubelet.get("events") or [], ours.get("events") or []
    for d in out:
        i = d.get("event")
        if i is not None and i < min(len(kev), len(pev)):
            kp, pp = kev[i].get("podCPUs", ""), pev[i].get("podCPUs", "")
            if kp and pp and kp != pp:
                d["podCPUs"] = {"kubelet": kp, "plugin": pp}
    for n, d in enumerate(out):  # the events' answers, for the evidence of a class
        out[n] = Difference(d)
        i = d.get("event")
        if i is not None and i < min(len(kev), len(pev)):
            out[n].answers = {"kubelet": kev[i], "plugin": pev[i]}
    if s is None or not out and not ours.get("events"):
        return out
    if ours.get("events") and not kubelet.get("configError"):
        bad = pool_inconsistent(s, kubelet, ours)
        if bad is not None:
            out.insert(0, Difference({"kind": "plugin-pool-inconsistent", "event": bad[0],
                           "what": bad[1], "kubelet": "", "plugin": bad[1]}))
    mine = double_assigned(s, ours)
    if mine is not None:
        out.insert(0, Difference({"kind": "plugin-double-assign", "event": mine[0],
                                  "what": mine[1], "kubelet": "", "plugin": mine[1]}))
    if not out:
        return out
    theirs = dict(double_assignments(s, kubelet))  # every event where the kubelet does
    for d in out:
        if d.get("event") in theirs:
            d["kubeletDoubleAssigned"] = theirs[d["event"]]
    # the states the two sides enter each event with
    ks, ps = _held(s, kubelet, True), _held(s, ours, True)
    first: int | None = None  # the first event with a difference that changes the state
    for i in range(min(len(ks), len(ps))):
        here = [d for d in out if d.get("event") == i]
        if first is not None and i > 0 and (
                ks[i - 1][0] != ps[i - 1][0] or _pool_at(kev, i) != _pool_at(pev, i)):
            for d in here:
                d["diverged"] = first
        if first is None and any(d["kind"] not in STATELESS for d in here):
            first = i
    return out


def _pool_at(events: list[dict[str, Any]], i: int) -> str:
    """The shared pool a side enters event ``i`` with (after its last add event before)."""
    for e in reversed(events[:i]):
        if e.get("op") == "add":
            return str(e.get("sharedPool", ""))
    return ""


def _compare(kubelet: dict[str, Any], ours: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    ke, pe = kubelet.get("configError"), ours.get("configError")
    if bool(ke) != bool(pe):
        return [{"kind": "config", "event": None, "what": "config accepted",
                 "kubelet": ke or "accepted", "plugin": pe or "accepted"}]
    if ke:
        return []
    for i, (k, p) in enumerate(zip(kubelet["events"], ours["events"], strict=True)):
        if k["op"] != "add":
            continue
        if bool(k.get("admitted")) != bool(p.get("admitted")):
            out.append({"kind": "admission", "event": i, "what": k["pod"],
                        "kubelet": _verdict(k), "plugin": _verdict(p)})
        elif not k.get("admitted"):
            if k.get("reason") != p.get("reason"):
                d = {"kind": "reason", "event": i, "what": k["pod"],
                     "kubelet": _verdict(k), "plugin": _verdict(p)}
                if k.get("memoryUnsatisfiable"):
                    d["memoryUnsatisfiable"] = k["memoryUnsatisfiable"]
                out.append(d)
            elif k.get("message") != p.get("message"):
                out.append({"kind": "message", "event": i, "what": k["pod"],
                            "kubelet": _verdict(k), "plugin": _verdict(p)})
        else:
            out += _compare_containers(i, k, p)
            if k.get("podCPUs", "") != p.get("podCPUs", ""):
                out.append({"kind": "pod-cpus", "event": i, "what": k["pod"],
                            "kubelet": k.get("podCPUs", ""), "plugin": p.get("podCPUs", "")})
        # the pool after the event (after a rejection: the oracle's once the managers'
        # stale-state collection released what the rejected pod's admission took)
        if k.get("sharedPool", "") != p.get("sharedPool", ""):
            out.append({"kind": "shared-pool", "event": i, "what": k["pod"],
                        "kubelet": k.get("sharedPool", ""), "plugin": p.get("sharedPool", "")})
    return out


def _compare_containers(i: int, k: dict[str, Any], p: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    kcs, pcs = k.get("containers") or [], p.get("containers") or []
    if [c["name"] for c in kcs] != [c["name"] for c in pcs]:
        return [{"kind": "containers", "event": i, "what": k["pod"],
                 "kubelet": [c["name"] for c in kcs], "plugin": [c["name"] for c in pcs]}]
    for kc, pc in zip(kcs, pcs, strict=True):
        what = f"{k['pod']}/{kc['name']}"
        if kc.get("exclusive") != pc.get("exclusive"):
            out.append({"kind": "exclusive", "event": i, "what": what,
                        "kubelet": kc.get("exclusive"), "plugin": pc.get("exclusive")})
        elif kc.get("pool", "") != pc.get("pool", ""):  # the node's or its pod's
            out.append({"kind": "pool", "event": i, "what": what,
                        "kubelet": kc.get("pool", "") or "node",
                        "plugin": pc.get("pool", "") or "node"})
        for f in ("cpus", "mems"):
            if kc.get(f, "") != pc.get(f, ""):
                kind = f if f == "mems" or kc.get("exclusive") else "shared-cpus"
                out.append({"kind": kind, "event": i, "what": what,
                            "kubelet": kc.get(f, ""), "plugin": pc.get(f, "")})
    return out


def _verdict(e: dict[str, Any]) -> str:
    if e.get("admitted"):
        return "admitted"
    return f"{e.get('reason')}: {e.get('message')}"


# ------------------------------------------------------------------ known differences
#: the plugin's modes (a scenario's ``"mode"``, nri_cpumgr.planner.scenario): it knows every
#: pod's spec and admits each pod whole (the deployed DaemonSet's pod watch), or NRI alone
MODES = ("as-deployed", "nri-alone")
#: the documented classes NRI imposes (one container at a time, no init containers named):
#: they explain a difference only in ``nri-alone`` mode. ``memory-extend-hint`` is the
#: plugin's choice on that path only (a pod met container by container is refused at
#: admission rather than half admitted); a pod admitted whole gets the kubelet's answer
NRI_IMPOSED = frozenset({"shared-before-exclusive", "finished-init-released",
                         "pod-scope-one-at-a-time", "memory-extend-hint"})


def load_known() -> list[dict[str, Any]]:
    return json.loads(KNOWN.read_text())["differences"]


#: what :func:`classify` files a difference under that follows from an earlier documented one
CONSEQUENCE = "consequence"


def classify(s: dict[str, Any], diffs: list[dict[str, Any]],
             known: list[dict[str, Any]] | None = None) -> list[str | None]:
    """Per difference of ``diffs`` (:func:`compare`'s, with the scenario): the id of the
    documented difference whose evidence it shows, :data:`CONSEQUENCE` for one at an event
    the sides entered with different states (``diverged``) after documented ones, or None.
    Nothing is documented in an answer where the plugin hands out a held CPU or keeps a
    shared pool its own allocations do not leave (:data:`NEVER_DOCUMENTED`)."""
    known = known if known is not None else load_known()
    as_deployed = s.get("mode", MODES[0]) != "nri-alone"
    if as_deployed:  # the plugin knew the pod: no NRI-imposed class
        known = [k for k in known if k["id"] not in NRI_IMPOSED]
    if any(d["kind"] in NEVER_DOCUMENTED for d in diffs):
        return [None] * len(diffs)
    out: list[str | None] = []
    for d in diffs:
        kid = _explained(s, d, known, diffs)
        if kid is None and d.get("diverged") is not None:
            kid = CONSEQUENCE
        out.append(kid)
    # the shared pool after an event where a documented difference changed what the pod
    # holds: the plugin's pool is what its allocations leave (pool_inconsistent), so the
    # pool's difference is that one's
    for n, d in enumerate(diffs):
        if out[n] is None and d["kind"] == "shared-pool" and any(
                c not in (None, CONSEQUENCE) and o.get("event") == d.get("event")
                and o["kind"] in ("admission", "cpus", "pod-cpus", "exclusive")
                for o, c in zip(diffs, out, strict=True)):
            out[n] = CONSEQUENCE
    if not as_deployed:
        # container by container, a container's CPUs or mems at the event where an earlier
        # container of its pod got other CPUs for a documented reason: it was decided on
        # another free set (seeds 150, 636: a sidecar placed before the pod's hints were
        # merged, the app container after it)
        for n, d in enumerate(diffs):
            if out[n] is None and d["kind"] in ("cpus", "mems") and "/" in str(d["what"]):
                pod, _, name = str(d["what"]).partition("/")
                order = _container_names(_spec(s, d))
                before = set(order[:order.index(name)]) if name in order else set()
                if any(o["kind"] == "cpus" and c not in (None, CONSEQUENCE)
                       and o.get("event") == d.get("event")
                       and str(o["what"]).partition("/")[0] == pod
                       and str(o["what"]).partition("/")[2] in before
                       for o, c in zip(diffs, out, strict=True)):
                    out[n] = CONSEQUENCE
    if as_deployed:
        # admitted whole, a shared container starts on the shared pool after its pod's
        # admission: at an event with another difference (an exclusive container's CPUs,
        # mems, a refusal), a shared container's cpuset differing is its consequence
        other = {d.get("event") for d in diffs if d["kind"] != "shared-cpus"}
        for n, d in enumerate(diffs):
            if out[n] is None and d["kind"] == "shared-cpus" and d.get("event") in other:
                out[n] = CONSEQUENCE
    return out


def known_difference(s: dict[str, Any], diffs: list[dict[str, Any]],
                     known: list[dict[str, Any]] | None = None) -> str | None:
    """The ids of the documented differences that explain every one of ``diffs`` (joined
    with ``+``; a consequence of an earlier one adds no id), or None when one of them is not
    documented (:func:`classify`). Each entry of known_differences.json has ``match``:
    ``kind`` and optional substrings ``kubelet`` / ``plugin`` of the two answers, config
    values, a policy option, ``relation`` and ``needs``: the evidence the scenario and the
    two answers must show (:data:`EVIDENCE`); ``podLevel`` (whether the mismatch's pod is
    handled by the pod-level resource managers)."""
    if not diffs:
        return None
    ids: list[str] = []
    for kid in classify(s, diffs, known):
        if kid is None:
            return None
        if kid != CONSEQUENCE and kid not in ids:
            ids.append(kid)
    return "+".join(ids) if ids else None


def _possible_refusal(cfg: dict[str, Any], text: str) -> bool:
    """Whether the plugin's refusal ``text`` ("Reason: message") is one its config can give:
    the Memory Manager's needs its Static policy, an SMT alignment error full-pcpus-only,
    a topology affinity error a Topology Manager policy other than none."""
    if "[memorymanager]" in text and cfg.get("memoryManagerPolicy") != "Static":
        return False
    if text.startswith("SMTAlignmentError") and "full-pcpus-only" not in (
            cfg.get("cpuManagerPolicyOptions") or {}):
        return False
    return not (text.startswith("TopologyAffinityError")
                and cfg.get("topologyManagerPolicy", "none") == "none")


def _explained(s: dict[str, Any], d: dict[str, Any], known: list[dict[str, Any]],
               diffs: list[dict[str, Any]] | None = None) -> str | None:
    cfg = s.get("config", {})
    if d["kind"] in ("admission", "reason", "message") and not _possible_refusal(
            cfg, str(d["plugin"])):
        return None
    for k in known:
        m = k["match"]
        # (a "reason" entry explains a "message" difference too: both sides refused with
        # the same reason, UnexpectedAdmissionError for a pod admitted whole, another text)
        if m.get("kind") and m["kind"] != d["kind"] and (m["kind"], d["kind"]) != (
                "reason", "message"):
            continue
        if m.get("kubelet") and m["kubelet"] not in str(d["kubelet"]):
            continue
        if m.get("plugin") and m["plugin"] not in str(d["plugin"]):
            continue
        if any(cfg.get(key) != val for key, val in (m.get("config") or {}).items()):
            continue
        if m.get("option") and m["option"] not in (cfg.get("cpuManagerPolicyOptions") or {}):
            continue
        if "podLevel" in m and _pod_level_managed(s, d) != m["podLevel"]:
            continue
        if any(not EVIDENCE[e](s, d, diffs or [d])
               for e in (m.get("needs"), m.get("relation")) if e):
            continue
        return str(k["id"])
    return None


_NOT_ENOUGH = re.compile(r"requested=(\d+), available=(\d+)")
#: the kubelet's admission reasons (NUMAAllocationViolationError is no admission type in
#: v1.37.2: its pods are refused as UnexpectedAdmissionError, seed 964)
_TYPED = ("TopologyAffinityError", "SMTAlignmentError", "UnexpectedAdmissionError",
          "EmptyPodSharedPoolError")
Evidence = Callable[[dict[str, Any], dict[str, Any], list[dict[str, Any]]], bool]


def _event(s: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    return s["events"][d["event"]] if d.get("event") is not None else {}


def _spec(s: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    return (_event(s, d).get("pod") or {}).get("spec") or {}


def _container_names(spec: dict[str, Any]) -> list[str]:
    """The pod's containers in the kubelet's allocation order (init, then app)."""
    return [c["name"] for c in (spec.get("initContainers") or []) + spec.get("containers", [])]


def _answer_event(s: dict[str, Any], d: dict[str, Any], side: str) -> dict[str, Any]:
    """The event of difference ``d`` in the ``side`` ("kubelet", "plugin") answer."""
    return (getattr(d, "answers", None) or {}).get(side) or {}


def _same_text(s: dict[str, Any], d: dict[str, Any], diffs: list[dict[str, Any]]) -> bool:
    """The plugin names the error's kind (not one of the kubelet's admission reasons) and
    its message, at least a few words, is inside the kubelet's."""
    reason, _, msg = str(d["plugin"]).partition(": ")
    return (reason.endswith("Error") and reason not in _TYPED and len(msg) >= 16
            and msg in str(d["kubelet"]))


def _guaranteed_cpus(c: dict[str, Any]) -> int:
    """A container's whole CPUs if it is a Guaranteed one's request of whole CPUs, else 0."""
    res = c.get("resources") or {}
    lim = res.get("limits") or {}
    req = res.get("requests") or lim
    cpu = str(lim.get("cpu", ""))
    if not cpu or str(req.get("cpu", cpu)) != cpu:
        return 0
    try:
        milli = int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)
    except ValueError:
        return 0
    return milli // 1000 if milli % 1000 == 0 else 0


def _hinted(s: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """The pod's containers that give the Topology Manager hints (whole CPUs of a
    Guaranteed pod's container, or its memory under the Static Memory Manager), in order."""
    static_mm = s.get("config", {}).get("memoryManagerPolicy") == "Static"
    cs = (spec.get("initContainers") or []) + spec.get("containers", [])
    guaranteed = all(_guaranteed_cpus(c) or (c.get("resources") or {}).get("limits")
                     for c in cs)
    return [c["name"] for c in cs
            if _guaranteed_cpus(c) or (static_mm and guaranteed and (
                (c.get("resources") or {}).get("limits") or {}).get("memory"))]


def _pod_scope_later(s: dict[str, Any], d: dict[str, Any], diffs: list[dict[str, Any]]) -> bool:
    """``topologyManagerScope: pod`` does something (a policy other than none) and the pod
    has two or more containers that give hints (:func:`_hinted`); then, by kind: a
    container's CPUs, at one after the first of them, on other NUMA nodes than the
    kubelet's; its mems, at one after the first, holding its own CPUs' NUMA nodes (the
    affinity it was given); a shared container's cpuset or the pool, when such a CPU
    difference of the pod is there too; a refusal of the plugin's naming such a container
    (or the Memory Manager's); a pod the kubelet refused and the plugin admitted with its
    containers that give hints on different NUMA nodes (each fitted alone, the pod's
    totals did not)."""
    cfg = s.get("config", {})
    if cfg.get("topologyManagerPolicy", "none") == "none":
        return False
    hinted = _hinted(s, _spec(s, d))
    if len(hinted) < 2:
        return False
    later = hinted[1:]
    name = str(d.get("what", "")).partition("/")[2]
    pe = _answer_event(s, d, "plugin")
    p = _cpus(d["plugin"])
    if d["kind"] == "cpus":
        if name not in hinted:
            return False
        ke = _answer_event(s, d, "kubelet")

        def pod_cpus(e: dict[str, Any]) -> set[int]:
            return set().union(*(_cpus(c.get("cpus", "")) for c in e.get("containers") or []
                                 if c.get("exclusive")))

        # the pod got the same CPUs, split otherwise among its containers; or this one's
        # on other NUMA nodes (the pod's merged hint against the hints so far), whole cores
        return pod_cpus(ke) == pod_cpus(pe) or (
            _numas(s, d["plugin"]) != _numas(s, d["kubelet"]) and _whole_cores(s, p))
    if d["kind"] == "mems":
        mine = next((c for c in pe.get("containers") or [] if c["name"] == name), {})
        first = name in hinted and any(  # the first: with its CPUs on other NUMA nodes
            o["kind"] == "cpus" and o.get("event") == d.get("event") and o["what"] == d["what"]
            and _pod_scope_later(s, o, diffs) for o in diffs if o is not d)
        return (name in later or first) and bool(d["plugin"]) and _numas(
            s, mine.get("cpus", "") if mine.get("exclusive") else "") <= _cpus(d["plugin"])
    if d["kind"] in ("shared-cpus", "shared-pool"):
        return any(o["kind"] == "cpus" and o.get("event") == d.get("event")
                   and _pod_scope_later(s, o, diffs) for o in diffs if o is not d)
    if d["kind"] == "reason" and str(d["kubelet"]).startswith("TopologyAffinityError"):
        return True  # the pod's merged hint refused; the plugin got further, then refused
    if d["kind"] in ("admission", "reason") and str(d["plugin"]) != "admitted":
        at = pe.get("refusedAt")  # the container the plugin's refusal came at
        return at in later or "[memorymanager]" in str(d["plugin"])
    if d["kind"] == "admission":
        sets = [frozenset(_numas(s, c.get("cpus", ""))) for c in pe.get("containers") or []
                if c["name"] in hinted and c.get("exclusive")]
        return len(set(sets)) > 1
    return False


def _init_held(s: dict[str, Any], d: dict[str, Any]) -> set[int] | None:
    """The exclusive CPUs the pod's regular init containers hold in the kubelet's answer
    (an empty set when they pin memory only), or None when none held anything."""
    e = _answer_event(s, d, "kubelet")
    if not e.get("admitted"):  # refused: what the plugin's admission gave it
        e = _answer_event(s, d, "plugin")
    init = _regular_inits(_event(s, d))
    held: set[int] = set()
    pinned = False
    for c in e.get("containers") or []:
        if c["name"] in init:
            if c.get("exclusive"):
                held |= _cpus(c.get("cpus", ""))
            pinned = pinned or bool(c.get("mems"))
    if not held and not pinned and d["kind"] in ("reason", "message"):
        # refused by both: the pod's spec says what its init containers would hold
        static_mm = s.get("config", {}).get("memoryManagerPolicy") == "Static"
        spec = _spec(s, d)
        pinned = any(c["name"] in init and (_guaranteed_cpus(c) or static_mm and (
            (c.get("resources") or {}).get("limits") or {}).get("memory"))
            for c in spec.get("initContainers") or [])
    return held if held or pinned else None


def _within_init(s: dict[str, Any], d: dict[str, Any], diffs: list[dict[str, Any]]) -> bool:
    """A regular init container of the pod held exclusive CPUs or pinned memory (in the
    kubelet's answer) and the difference is within what it held: for a later container's
    CPUs, the kubelet reused some of the init container's and every CPU only the kubelet
    gives is one of them; for the shared pool, every CPU only the plugin's has is one of
    them (the kubelet keeps them out) and every CPU only the kubelet's has is one a
    container of the pod got from the plugin only; for mems, the init container pinned
    memory; a refusal or admission, when it held any."""
    held = _init_held(s, d)
    if held is None:
        return False
    init = _regular_inits(_event(s, d))
    k, p = _cpus(d["kubelet"]), _cpus(d["plugin"])
    if d["kind"] == "cpus":
        name = str(d["what"]).partition("/")[2]
        if name in init:  # a later init container reuses the earlier ones' CPUs only
            order = _container_names(_spec(s, d))
            earlier = set(order[:order.index(name)]) & init if name in order else set()
            held = set().union(*(
                _cpus(c.get("cpus", "")) for c in _answer_event(s, d, "kubelet").get(
                    "containers") or [] if c["name"] in earlier and c.get("exclusive")))
        return (bool(k & held) and bool(k - p) and k - p <= held
                and _whole_cores(s, p))
    if d["kind"] == "shared-pool":
        ke, pe = _answer_event(s, d, "kubelet"), _answer_event(s, d, "plugin")
        kx = set().union(*(_cpus(c.get("cpus", "")) for c in ke.get("containers") or []
                           if c.get("exclusive")))
        px = set().union(*(_cpus(c.get("cpus", "")) for c in pe.get("containers") or []
                           if c.get("exclusive")))
        return bool(held) and p - k <= held | (kx - px) and k - p <= px - kx
    if d["kind"] == "shared-cpus":  # a shared container created after the init container
        # (the rest of the extra: CPUs a later exclusive sibling takes, shared-before-exclusive)
        return bool(k) and k < p and bool((p - k) & held) and p - k <= held | _later_exclusive(d)
    if d["kind"] == "mems":
        name = str(d["what"]).partition("/")[2]
        mine = next((c for c in _answer_event(s, d, "plugin").get("containers") or []
                     if c["name"] == name), {})
        return name not in init and bool(p) and bool(mine.get("exclusive")) and any(
            c["name"] in init and c.get("mems")
            for c in _answer_event(s, d, "kubelet").get("containers") or []) and _numas(
            s, mine.get("cpus", "") if mine.get("exclusive") else "") <= p
    return d["kind"] in ("admission", "reason", "message")


def _later_sibling_takes(s: dict[str, Any], d: dict[str, Any],
                         diffs: list[dict[str, Any]]) -> bool:
    """A shared container's cpuset at creation: the kubelet's is not empty, the plugin's
    has it all and more, and every extra CPU is one an exclusive container created after
    it in the same pod takes (the plugin's answer), so the pool shrank after its creation."""
    k, p = _cpus(d["kubelet"]), _cpus(d["plugin"])
    return bool(k) and k < p and p - k <= _later_exclusive(d)


def _later_exclusive(d: dict[str, Any]) -> set[int]:
    """The CPUs of the exclusive containers created after difference ``d``'s container in
    its pod (the plugin's answer)."""
    name = str(d["what"]).partition("/")[2]
    cs = _answer_event({}, d, "plugin").get("containers") or []
    names = [c["name"] for c in cs]
    if name not in names:
        return set()
    return set().union(*(_cpus(c.get("cpus", "")) for c in cs[names.index(name) + 1:]
                         if c.get("exclusive")))


def _takes_the_last_cpu(s: dict[str, Any], d: dict[str, Any],
                        diffs: list[dict[str, Any]]) -> bool:
    """Under strict-cpu-reservation: the kubelet admitted the pod and left its shared pool
    empty (it gave the last non-reserved CPU away), or its refusal says none was left
    (``available=0``, or the Memory Manager's after the CPU manager gave them all), or the
    plugin refused a request of every free CPU but the last (``requested`` = ``available``
    + 1: it keeps the last one in the pool)."""
    ke = _answer_event(s, d, "kubelet")
    if d["kind"] == "admission" and ke.get("admitted"):
        return ke.get("sharedPool", "x") == ""
    p = _NOT_ENOUGH.search(str(d["plugin"]))
    if p and int(p.group(1)) == int(p.group(2)) + 1:
        return True  # the plugin refused to take the last CPU (it keeps one in the pool)
    m = _NOT_ENOUGH.search(str(d["kubelet"]))
    if m:
        return m.group(2) == "0"
    return ke.get("sharedPool", "x") == "" or "[memorymanager]" in str(d["kubelet"])


def _memory_topology(s: dict[str, Any], d: dict[str, Any], diffs: list[dict[str, Any]]) -> bool:
    """The Static Memory Manager under restricted or single-numa-node (where a memory
    request no NUMA set holds is refused at admission by the plugin)."""
    cfg = s.get("config", {})
    return cfg.get("memoryManagerPolicy") == "Static" and cfg.get(
        "topologyManagerPolicy") in ("restricted", "single-numa-node")


def _memory_unsatisfiable(s: dict[str, Any], d: dict[str, Any],
                          diffs: list[dict[str, Any]]) -> bool:
    return bool(d.get("memoryUnsatisfiable")) and s.get("config", {}).get(
        "topologyManagerPolicy") in ("restricted", "single-numa-node")


def _kubelet_double_assigned(s: dict[str, Any], d: dict[str, Any],
                             diffs: list[dict[str, Any]]) -> bool:
    """At an event where the kubelet's answer hands out a CPU another container holds
    (later events are its consequences): a CPU difference there involving those CPUs, or
    the refusal or admission that follows from it."""
    held = d.get("kubeletDoubleAssigned")
    if not held:
        return False
    m = re.search(r"\[([\d, ]+)\]", str(held))
    cpus = {int(x) for x in m.group(1).split(",")} if m else set()
    if d["kind"] in ("cpus", "shared-cpus", "pod-cpus", "shared-pool"):
        if cpus & (_cpus(d["kubelet"]) ^ _cpus(d["plugin"])):
            return True
        # a container of the same pod allocated after the one given the held CPU: the
        # kubelet's take for it started from a free set one CPU larger (seed 400019)
        taker = str(held).split(" ", 1)[0]
        pod, _, first = taker.partition("/")
        what_pod, _, name = str(d["what"]).partition("/")
        order = [c["name"] for c in _answer_event(s, d, "kubelet").get("containers") or []]
        return (d["kind"] == "cpus" and what_pod == pod and first in order and name in order
                and order.index(name) > order.index(first))
    return d["kind"] in ("admission", "reason", "message")


def _counts_a_held_cpu(s: dict[str, Any], d: dict[str, Any],
                       diffs: list[dict[str, Any]] | None = None) -> bool:
    """Both refused for want of CPUs, the same request, the kubelet counting more CPUs
    available than the plugin, on a hybrid machine (cores of unequal thread counts): its
    takeFullCores put a CPU held by another container in the partial result, so one free
    CPU fewer was taken and counted as left (``kubelet-takes-a-held-cpu``)."""
    k, p = _NOT_ENOUGH.search(str(d["kubelet"])), _NOT_ENOUGH.search(str(d["plugin"]))
    if not k or not p or k.group(1) != p.group(1) or int(k.group(2)) <= int(p.group(2)):
        return False
    threads: dict[tuple[int, int], int] = collections.Counter(
        (c["socket"], c["core"]) for c in s["machine"]["cpus"])
    return len(set(threads.values())) > 1


def _pod_level_managed(s: dict[str, Any], d: dict[str, Any]) -> bool:
    """The pod of mismatch ``d`` is one the pod-level resource managers handle: it sets
    ``.spec.resources`` and both gates are on."""
    gates = s.get("config", {}).get("featureGates") or {}
    if not all(gates.get(g) for g in POD_LEVEL_GATES):
        return False
    return bool(_spec(s, d).get("resources"))


def _numas(s: dict[str, Any], text: str) -> set[int]:
    """The NUMA nodes of the machine's CPUs in cpuset ``text``."""
    return _groups(s, text, "numa")


def _whole_cores(s: dict[str, Any], cpus: set[int]) -> bool:
    """A take of a count of CPUs that whole cores can make is whole cores (what the
    kubelet's packed take gives from free cores): on a machine with SMT, when the count is
    a multiple of the threads per core, every core touched is in it whole."""
    try:  # (reserved CPUs are never taken: a core is whole without them)
        reserved = _cpus(str(s.get("config", {}).get("reservedSystemCPUs") or ""))
    except ValueError:
        reserved = set()
    core: dict[int, tuple[int, int]] = {int(r["cpu"]): (int(r["socket"]), int(r["core"]))
                                        for r in s["machine"]["cpus"]
                                        if int(r["cpu"]) not in reserved}
    threads: dict[tuple[int, int], set[int]] = collections.defaultdict(set)
    for c, k in core.items():
        threads[k].add(c)
    smt = max((len(v) for v in threads.values()), default=1)
    if smt == 1 or len(cpus) % smt:
        return True
    return all(threads[core[c]] <= cpus for c in cpus if c in core)


_COUNTERFACTUAL_CACHE: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {}


def _set_floor(on: bool) -> None:
    from nri_cpumgr.cm.cpumanager.policy_static import StaticPolicy

    StaticPolicy.affinity_floor = on


def _set_socket_combo(on: bool) -> None:
    from nri_cpumgr.cm.cpumanager import cpu_assignment

    cpu_assignment.ALIGN_BY_SOCKET_KEEPS_CHOSEN_COMBO = on


def _set_strict_last_cpu(on: bool) -> None:
    from nri_cpumgr.cm.cpumanager.policy_static import StaticPolicy

    StaticPolicy.strict_keeps_last_cpu = on


#: the newer upstream fixes the plugin follows that a switch can turn off, for the
#: counterfactual evidence: the affinity floor of PR #139456 (``StaticPolicy.affinity_floor``)
#: and the NUMA combination chosen under align-by-socket (PR #139778's intent, against
#: #141237's kept Go slice: ``cpu_assignment.ALIGN_BY_SOCKET_KEEPS_CHOSEN_COMBO``); and the
#: refusal of the last non-reserved CPU under strict-cpu-reservation (#141196, open PR
#: #141197: ``StaticPolicy.strict_keeps_last_cpu``)
_SWITCHES: dict[str, Callable[[bool], None]] = {
    "floor": _set_floor, "socket-combo": _set_socket_combo,
    "strict-last-cpu": _set_strict_last_cpu}


def _counterfactual_answers(s: dict[str, Any], fix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plugin's answer to ``s`` as it is and with the newer upstream fix ``fix``
    (:data:`_SWITCHES`) off (the kubelet v1.37.2's rule)."""
    key = (fix, json.dumps(s, sort_keys=True))
    if key not in _COUNTERFACTUAL_CACHE:
        on = plugin(s)
        _SWITCHES[fix](False)
        try:
            off = plugin(s)
        finally:
            _SWITCHES[fix](True)
        if len(_COUNTERFACTUAL_CACHE) > 8:
            _COUNTERFACTUAL_CACHE.clear()
        _COUNTERFACTUAL_CACHE[key] = (on, off)
    return _COUNTERFACTUAL_CACHE[key]


def _fix_only(s: dict[str, Any], d: dict[str, Any], fix: str) -> bool:
    """Difference ``d`` is the newer upstream fix ``fix``'s alone: the plugin's answer at
    ``d`` is what it decides with the fix, and with the fix off it decides what the kubelet
    did there (the same container's or pod's value at the same event)."""
    if d.get("event") is None:
        return False
    on, off = _counterfactual_answers(s, fix)
    i = d["event"]
    if len(on.get("events") or []) <= i or len(off.get("events") or []) <= i:
        return False

    def differs(a: dict[str, Any], b: dict[str, Any]) -> bool:
        return any((x["kind"], x["what"]) == (d["kind"], d["what"])
                   for x in _compare({"events": [a]}, {"events": [b]}))

    ke, pe = _answer_event(s, d, "kubelet"), _answer_event(s, d, "plugin")
    return (bool(ke) and bool(pe) and not differs(on["events"][i], pe)
            and differs(on["events"][i], off["events"][i])
            and not differs(ke, off["events"][i]))


def _floor_only(s: dict[str, Any], d: dict[str, Any], diffs: list[dict[str, Any]]) -> bool:
    """Difference ``d`` is the affinity floor's alone (PR #139456): under
    distribute-cpus-across-numa and a Topology Manager policy other than none, with the
    floor off the plugin decides what the kubelet did there (:func:`_fix_only`)."""
    cfg = s.get("config", {})
    if ("distribute-cpus-across-numa" not in (cfg.get("cpuManagerPolicyOptions") or {})
            or cfg.get("topologyManagerPolicy", "none") == "none"):
        return False
    return _fix_only(s, d, "floor")


def _strict_last_cpu_only(s: dict[str, Any], d: dict[str, Any],
                          diffs: list[dict[str, Any]]) -> bool:
    """Difference ``d`` is the strict reservation's last CPU alone (#141196): under
    strict-cpu-reservation, with the plugin's refusal of a take that empties the shared
    pool off, the plugin decides what the kubelet did there (:func:`_fix_only`; seed 600169:
    the kubelet gives a pod's second container the last CPUs and refuses its third with its
    own numbers, the plugin refuses the second)."""
    opts = s.get("config", {}).get("cpuManagerPolicyOptions") or {}
    if "strict-cpu-reservation" not in opts:
        return False
    return _fix_only(s, d, "strict-last-cpu")


def _socket_combo_only(s: dict[str, Any], d: dict[str, Any],
                       diffs: list[dict[str, Any]]) -> bool:
    """Difference ``d`` is #141237's alone: under distribute-cpus-across-numa and
    align-by-socket, with the kubelet v1.37.2's kept Go slice (the chosen NUMA combination
    overwritten by those visited after it) the plugin decides what the kubelet did there
    (:func:`_fix_only`; seed 403245: no combination in one socket, the chosen one's nodes
    1-4 against the kubelet's 1-3 and 7)."""
    opts = s.get("config", {}).get("cpuManagerPolicyOptions") or {}
    if "distribute-cpus-across-numa" not in opts or "align-by-socket" not in opts:
        return False
    return _fix_only(s, d, "socket-combo")


def _fewer_sockets(s: dict[str, Any], d: dict[str, Any], diffs: list[dict[str, Any]]) -> bool:
    """The plugin's CPUs span fewer sockets than the kubelet's, as many CPUs."""
    return (len(_sockets(s, d["plugin"])) < len(_sockets(s, d["kubelet"]))
            and len(_cpus(d["plugin"])) == len(_cpus(d["kubelet"])))


def _sockets(s: dict[str, Any], text: str) -> set[int]:
    """The sockets of the machine's CPUs in cpuset ``text``."""
    return _groups(s, text, "socket")


def _groups(s: dict[str, Any], text: str, field: str) -> set[int]:
    """The ``field`` ids (socket, numa, ...) of the machine's CPUs in cpuset ``text``."""
    of = {int(r["cpu"]): int(r[field]) for r in s["machine"]["cpus"]}
    return {of[c] for c in _cpus(text) if c in of}


def _cpus(text: Any) -> set[int]:
    out: set[int] = set()
    if not isinstance(text, str):
        return out
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        if not a.strip().isdigit():
            return set()
        out.update(range(int(a), int(b or a) + 1))
    return out


#: the evidence a documented difference's ``needs`` / ``relation`` names
EVIDENCE: dict[str, Evidence] = {
    "later-sibling-takes-the-extra": _later_sibling_takes,
    "same-text": _same_text,
    "memory-unsatisfiable": _memory_unsatisfiable,
    "memory-topology": _memory_topology,
    "takes-the-last-cpu": _takes_the_last_cpu,
    "init-held": _within_init,
    "pod-scope-later-container": _pod_scope_later,
    "kubelet-double-assigned": _kubelet_double_assigned,
    "kubelet-counts-a-held-cpu": _counts_a_held_cpu,
    "floor-only": _floor_only,
    "plugin-fewer-sockets": _fewer_sockets,
    "socket-combo-only": _socket_combo_only,
    "strict-last-cpu-only": _strict_last_cpu_only,
}


# ------------------------------------------------------------------ shrinking
def _candidates(s: dict[str, Any]) -> Iterator[dict[str, Any]]:
    ev = s["events"]
    for i in range(len(ev) - 1, -1, -1):  # drop an event (later ones first)
        t = copy.deepcopy(s)
        del t["events"][i]
        yield t
    for i, e in enumerate(ev):  # drop a container of a pod
        if e["op"] != "add":
            continue
        spec = e["pod"]["spec"]
        for key in ("initContainers", "containers"):
            for j in range(len(spec.get(key) or [])):
                if key == "containers" and len(spec[key]) == 1:
                    continue
                t = copy.deepcopy(s)
                del t["events"][i]["pod"]["spec"][key][j]
                if not t["events"][i]["pod"]["spec"][key]:
                    del t["events"][i]["pod"]["spec"][key]
                yield t
    cfg = s["config"]
    for o in list(cfg.get("cpuManagerPolicyOptions") or {}):  # drop an option
        t = copy.deepcopy(s)
        del t["config"]["cpuManagerPolicyOptions"][o]
        if not t["config"]["cpuManagerPolicyOptions"]:
            del t["config"]["cpuManagerPolicyOptions"]
        yield t
    for key, val in (("topologyManagerPolicy", "none"), ("topologyManagerScope", "container"),
                     ("topologyManagerPolicyOptions", None), ("memoryManagerPolicy", None)):
        if key in cfg and cfg[key] != val:
            t = copy.deepcopy(s)
            if val is None:
                del t["config"][key]
                if key == "memoryManagerPolicy":
                    t["config"].pop("reservedMemory", None)
                    t["config"].pop("systemReserved", None)
            else:
                t["config"][key] = val
            yield t


def shrink(s: dict[str, Any], still_fails: Callable[[dict[str, Any]], bool],
           budget: int = 300) -> dict[str, Any]:
    """The smallest scenario (greedy: one removal at a time) for which ``still_fails``."""
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        for t in _candidates(s):
            tries += 1
            if still_fails(t):
                s = t
                improved = True
                break
            if tries >= budget:
                break
    return s
