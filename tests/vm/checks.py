"""Judge what the guest recorded (:mod:`tests.vm.guest_scenarios`) against the kubelet's rules.

Expectations are derived from the topology data (:class:`tests.vm.topology.Topology`), not
hard-coded cpusets: sizes, disjointness, whole cores/sockets/NUMA nodes where the kubelet's
NUMA-packed take (kubelet cpumanager cpu_assignment.go ``takeByTopologyNUMAPacked``) must give
them, the shared pool = online CPUs - exclusive CPUs (reserved CPUs stay in it), and the three
views (OCI spec, cgroup v2 ``cpuset.*.effective``, ``/proc/<pid>/status``) agreeing.
:func:`check` returns a list of failures (empty = pass).
"""

from __future__ import annotations

import re
from typing import Any

from nri_cpumgr.cpuset import CPUSet
from tests.vm import reconfigure_checks
from tests.vm.topology import Topology

RESERVED = frozenset({0})  # reservedSystemCPUs of every scenario (tests/e2e/plugin_run.py)


def cpus(text: str) -> frozenset[int]:
    return frozenset(CPUSet.parse(text)) if text else frozenset()


def _exclusive(c: dict[str, Any]) -> bool:
    cpu = c["requests"].get("cpu", "")
    return c["qos"] == "Guaranteed" and cpu.isdigit()


def _views(name: str, c: dict[str, Any]) -> list[str]:
    bad = []
    if not (c["spec"] == c["cgroup"] == c["proc"]):
        bad.append(f"{name}: cpus disagree: spec={c['spec']} cgroup={c['cgroup']} "
                   f"proc={c['proc']}")
    if c["spec_mems"] and not (c["spec_mems"] == c["cgroup_mems"] == c["proc_mems"]):
        bad.append(f"{name}: mems disagree: spec={c['spec_mems']} cgroup={c['cgroup_mems']} "
                   f"proc={c['proc_mems']}")
    return bad


SCENARIOS = ["docs", "full-pcpus-only", "numa-memory", "distribute-cpus-across-numa",
             "prefer-align-cpus-by-uncorecache", "align-by-socket", "strict-cpu-reservation",
             "churn-plugin-kill", *reconfigure_checks.SCENARIOS]


def applicable(topo: Topology, scenario: str) -> bool:
    """Whether ``scenario`` proves anything on ``topo`` (the option makes a difference);
    a topology file's ``scenarios`` list, when given, limits them further."""
    if scenario not in SCENARIOS:
        return False
    if topo.scenarios is not None and scenario not in topo.scenarios:
        return False
    if scenario == "align-by-socket":
        return len(topo.numa) > topo.sockets  # several NUMA nodes per socket
    if scenario == "full-pcpus-only":
        return topo.threads > 1  # SMT
    if scenario == "prefer-align-cpus-by-uncorecache":
        return topo.dies > 1  # several L3 groups per socket
    if scenario == "distribute-cpus-across-numa":
        # without SMT the packed take (fill one node) and the distributed one differ
        return len(topo.numa) > 1 and topo.threads == 1
    if scenario == "numa-memory":
        return len(topo.numa) > 1
    if scenario in reconfigure_checks.SCENARIOS:
        return reconfigure_checks.applicable(topo, scenario)
    return scenario in SCENARIOS


def check_step(topo: Topology, step: dict[str, Any], strict: bool = False,
               reserved: frozenset[int] = RESERVED) -> list[str]:
    """Invariants of every recorded step: views agree, exclusive sets are disjoint, of the
    requested size and free of ``reserved`` CPUs; shared containers run on the shared pool
    (online - exclusive, and - reserved too under ``strict`` = strict-cpu-reservation)."""
    bad: list[str] = []
    online = frozenset(range(topo.ncpus))
    excl: dict[str, frozenset[int]] = {}
    for name, c in step["containers"].items():
        bad += _views(name, c)
        if _exclusive(c):
            s = cpus(c["spec"])
            excl[name] = s
            if len(s) != int(c["requests"]["cpu"]):
                bad.append(f"{name}: {len(s)} cpus ({c['spec']}), requested {c['requests']}")
            if s & reserved:
                bad.append(f"{name}: exclusive cpus {c['spec']} include reserved CPUs")
    names = sorted(excl)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if excl[a] & excl[b]:
                bad.append(f"{a} and {b} share cpus {CPUSet(excl[a] & excl[b])}")
    pool = online - frozenset().union(*excl.values()) if excl else online
    if strict:
        pool -= reserved
    for name, c in step["containers"].items():
        if not _exclusive(c) and cpus(c["cgroup"]) != pool:
            bad.append(f"{name}: shared container on {c['cgroup']}, shared pool is "
                       f"{CPUSet(pool)}")
    return bad


def _whole(topo: Topology, level: str, s: frozenset[int]) -> bool:
    """``s`` is a union of whole ``level`` groups."""
    return all(g <= s or not (g & s) for g in topo.groups(level))


def _within_one(topo: Topology, level: str, s: frozenset[int]) -> bool:
    return any(s <= g for g in topo.groups(level))


def check(topo: Topology, res: dict[str, Any]) -> list[str]:
    """Failures of one scenario result (empty list = pass)."""
    if res.get("scenario") in reconfigure_checks.SCENARIOS:
        return reconfigure_checks.check(topo, res)
    if res.get("error"):
        return [f"did not run to the end: {res['error'].splitlines()[0]}"]
    steps = res.get("steps") or []
    if not steps:
        return ["no step recorded"]
    bad: list[str] = []
    opts = (res.get("config") or {}).get("cpuManagerPolicyOptions") or {}
    strict = opts.get("strict-cpu-reservation") == "true"
    for st in steps:
        bad += [f"[{st['step']}] {b}" for b in check_step(topo, st, strict)]
    bad += [f"cleanup: {e}" for e in res.get("cleanup_errors") or []]
    first = steps[0]["containers"]

    def need(name: str) -> frozenset[int]:
        if name not in first:
            bad.append(f"{name}: not running (refused: {res['refused'].get(name)})")
            return frozenset()
        return cpus(first[name]["spec"])

    sc = res["scenario"]
    if sc == "docs":
        g2, g4 = need("guaranteed-2cpu"), need("guaranteed-4cpu")
        if topo.threads > 1 and g2 and not _whole(topo, "core", g2):
            bad.append(f"guaranteed-2cpu {CPUSet(g2)} is not one whole core (SMT siblings)")
        # fullest first: the 2-CPU pod comes from the socket with the fewest free CPUs
        free = [len(s - RESERVED) for s in topo.groups("socket")]
        fullest = topo.groups("socket")[free.index(min(free))]
        if g2 and not g2 <= fullest:
            bad.append(f"guaranteed-2cpu {CPUSet(g2)} not in the fullest socket "
                       f"{CPUSet(fullest)}")
        per_socket = topo.ncpus // topo.sockets
        if g4 and per_socket == 4 and g4 not in topo.groups("socket"):
            bad.append(f"guaranteed-4cpu {CPUSet(g4)} is not the free socket")
        if len(steps) < 2 or "guaranteed-4cpu" in steps[1]["containers"]:
            bad.append("the release step was not recorded")
    elif sc == "full-pcpus-only":
        if topo.threads > 1:
            why = res["refused"].get("guaranteed-1cpu", "")
            if "SMTAlignmentError" not in why:
                bad.append(f"guaranteed-1cpu not refused with SMTAlignmentError ({why!r})")
        for n in ("guaranteed-2cpu", "guaranteed-4cpu"):
            s = need(n)
            if s and not _whole(topo, "core", s):
                bad.append(f"{n} {CPUSet(s)} is not made of whole cores")
    elif sc == "numa-memory":
        st = steps[0]
        for n in ("numa-small", "numa-node"):
            s = need(n)
            if not s:
                continue
            c = first[n]
            nodes = [i for i, nd in enumerate(topo.numa) if s <= nd.cpus]
            if not nodes:
                bad.append(f"{n}: cpus {CPUSet(s)} span NUMA nodes")
                continue
            node = nodes[0]
            if c["spec_mems"] != str(node) or c["cgroup_mems"] != str(node):
                bad.append(f"{n}: mems spec={c['spec_mems']!r} cgroup={c['cgroup_mems']!r}, "
                           f"expected {node} (the node of its cpus)")
            pages = st.get("numa_pages", {}).get(n, {})
            here = pages.get(str(node), 0)
            total = sum(pages.values())
            if here < 0.9 * st.get("alloc_pages", 1) or here < 0.95 * total:
                bad.append(f"{n}: anonymous pages per node {pages}, expected >= "
                           f"{st.get('alloc_pages')} on node {node}")
        s = need("numa-node")
        if s and s not in [nd.cpus for nd in topo.numa]:
            bad.append(f"numa-node {CPUSet(s)} is not a whole free NUMA node")
        why = res["refused"].get("numa-too-big", "")
        if "TopologyAffinityError" not in why:
            bad.append(f"numa-too-big not refused with TopologyAffinityError ({why!r})")
    elif sc == "distribute-cpus-across-numa":
        s = need("spread")
        per = [n for n in (len(s & nd.cpus) for nd in topo.numa) if n]
        if s and (len(per) < 2 or max(per) - min(per) > topo.threads):
            bad.append(f"spread {CPUSet(s)} is not distributed evenly over NUMA nodes: "
                       f"{[len(s & nd.cpus) for nd in topo.numa]} per node")
    elif sc == "align-by-socket":
        s = need("socket-pod")
        if s and not _within_one(topo, "socket", s):
            bad.append(f"socket-pod {CPUSet(s)} crosses sockets {topo.groups('socket')}")
        if s and sum(1 for nd in topo.numa if s & nd.cpus) < 2:
            bad.append(f"socket-pod {CPUSet(s)} is on one NUMA node: the option did not matter")
    elif sc == "prefer-align-cpus-by-uncorecache":
        s = need("l3-pod")
        if s and not _within_one(topo, "die", s):
            bad.append(f"l3-pod {CPUSet(s)} spans L3 groups {topo.groups('die')}")
    elif sc == "strict-cpu-reservation":
        need("guaranteed-2cpu")
    elif sc == "churn-plugin-kill":
        names = sorted(n for n in steps[-1]["containers"] if n.startswith("churn-"))
        if names != ["churn-2", "churn-3", "churn-4"]:
            bad.append(f"after churn the running pods are {names}")
    return bad


def summary(res: dict[str, Any]) -> str:
    """``name=cpus[/mems]`` of every container in each step, and the refused ones."""
    parts = []
    for st in res.get("steps") or []:
        cs = " ".join(
            f"{n}={c['cgroup']}" + (f"/m{c['cgroup_mems']}" if c["spec_mems"] else "")
            for n, c in st["containers"].items())
        parts.append(f"[{st['step']}] {cs}")
        if st.get("numa_pages"):
            parts.append("numa_maps anon pages per node: " + " ".join(
                f"{n}={pages}" for n, pages in st["numa_pages"].items()))
    if res.get("refused"):
        parts.append("refused: " + ", ".join(
            f"{n} ({_error_name(why)})" for n, why in res["refused"].items()))
    return "; ".join(parts)


def _error_name(text: str) -> str:
    m = re.search(r"\b(\w+Error)\b", text)
    return m.group(1) if m else text[:60]


KUBELET_PHASES = ["docs_pods", "sidecar_and_init", "container_scope", "resize", "pod_scope",
                  "pod_scope_best_effort"]
"""The phases of tests/vm/guest_kubelet.py, in the order the guest runs them."""


def check_kubelet(topo: Topology, res: dict[str, Any],
                  oracle: list[dict[str, Any]] | None = None) -> list[str]:
    """Failures of one phase of the real-kubelet run (tests/vm/guest_kubelet.py); empty =
    pass. ``oracle``: the kubelet's answers for the phase
    (:func:`tests.vm.kubelet_oracle.expect`), judged by :func:`check_oracle`; then every
    step but the pod-scope ones gets :func:`check_step` (views agree, exclusive sets
    disjoint and of the requested size, shared containers on online - exclusive) and each
    phase its own rules (what the oracle cannot say: the init container's own CPUs, the
    resize, quotas)."""
    if res.get("error"):
        return [f"did not run to the end: {res['error'].splitlines()[0]}"]
    steps = res.get("steps") or []
    if not steps:
        return ["no step recorded"]
    sc = res["scenario"]
    bad: list[str] = check_oracle(res, oracle) if oracle is not None else []
    if sc == "docs_pods":  # the CRI scenario's judge: fullest socket, free socket, release
        return bad + check(topo, {**res, "scenario": "docs"})
    for st in steps:
        if sc not in ("pod_scope", "pod_scope_best_effort"):
            bad += [f"[{st['step']}] {b}" for b in check_step(topo, st)]
        else:
            bad += [f"[{st['step']}] {b}" for n, c in st["containers"].items()
                    for b in _views(n, c)]
    by = {st["step"]: st["containers"] for st in steps}
    online = frozenset(range(topo.ncpus))
    if sc == "sidecar_and_init":
        side = by.get("sidecar", {})
        s = cpus(side.get("sidecar/sidecar", {}).get("spec", ""))
        if len(s) != 1:
            bad.append(f"the sidecar has cpus {CPUSet(s)}, expected one exclusive CPU")
        init = next((st for st in steps if st["step"] == "init-reuse"), None)
        if init is None:
            bad.append("the init-reuse step was not recorded")
        else:
            app = cpus(init["containers"]["init-reuse/app"]["spec"])
            line = init.get("init_log", "")
            seen = cpus(line.split()[-1]) if line.split() else frozenset()
            if not app or app != seen:
                bad.append(f"the app container {CPUSet(app)} did not reuse its init "
                           f"container's CPUs (init log {line!r})")
    elif sc == "container_scope":
        cs = by.get("container-scope-mixed", {})
        s = cpus(cs.get("container-scope-mixed/infrastructure-sidecar", {}).get("spec", ""))
        if len(s) != 2 or not any(s <= nd.cpus for nd in topo.numa):
            bad.append(f"infrastructure-sidecar {CPUSet(s)}: expected 2 CPUs of one NUMA node")
    elif sc == "resize":
        before = cpus(by.get("resize: before", {}).get("resize", {}).get("spec", ""))
        after = cpus(by.get("resize: 4 cpus", {}).get("resize", {}).get("spec", ""))
        if len(before) != 2 or len(after) != 4 or not before <= after:
            bad.append(f"resize 2 -> 4: {CPUSet(before)} -> {CPUSet(after)} (expected 4 "
                       "CPUs keeping the first 2)")
        for st in steps:
            if st["step"] != "resize: before" and st["containers"].get("resize", {}).get(
                    "cpu_max", "").split()[:1] != ["max"]:
                bad.append(f"[{st['step']}] cpu.max of the resized container is "
                           f"{st['containers'].get('resize', {}).get('cpu_max')!r}, "
                           "expected no quota (max)")
        four = next((st for st in steps if st["step"] == "resize: 4 cpus"), {})
        if any(c.get("type") == "PodResizeInProgress" for c in four.get("conditions") or []):
            bad.append("the resize to 4 CPUs still shows PodResizeInProgress")
        ref = next((st for st in steps if st["step"] == "resize: 8 refused"), None)
        if ref is None:
            bad.append("the refused resize was not recorded")
        else:
            kept = cpus(ref["containers"]["resize"]["spec"])
            if kept != after:
                bad.append(f"after the refused resize the container has {CPUSet(kept)}, "
                           f"not its {CPUSet(after)}")
            cond = ref.get("condition") or {}
            if cond.get("reason") != "Error" or "NotEnoughCPUs" not in cond.get("message", ""):
                bad.append(f"PodResizeInProgress condition {cond}")
    elif sc == "pod_scope":
        st = by.get("pod-scope-mixed", {})
        main = cpus(st.get("pod-scope-mixed/main-app", {}).get("spec", ""))
        sides = [cpus(st.get(f"pod-scope-mixed/{n}", {}).get("spec", ""))
                 for n in ("metrics-sidecar", "logging-sidecar")]
        bubble = main | sides[0]
        if len(main) != 2 or sides[0] != sides[1] or len(sides[0]) != 2 or main & sides[0]:
            bad.append(f"main-app {CPUSet(main)}, sidecars {[str(CPUSet(s)) for s in sides]}: "
                       "expected a 2-CPU slice and the sidecars on the other 2 of the bubble")
        if bubble and not any(bubble <= nd.cpus for nd in topo.numa):
            bad.append(f"the bubble {CPUSet(bubble)} is not on one NUMA node")
        if bubble & RESERVED:
            bad.append(f"the bubble {CPUSet(bubble)} has reserved CPUs")
        w = cpus(st.get("witness", {}).get("cgroup", ""))
        if w != online - bubble:
            bad.append(f"the node's shared pool {CPUSet(w)}, expected {CPUSet(online - bubble)}")
        for c in ("main-app", "metrics-sidecar", "logging-sidecar"):
            q = st.get(f"pod-scope-mixed/{c}", {}).get("cpu_max", "").split()[:1]
            if c == "main-app" and q != ["max"]:
                bad.append(f"main-app cpu.max {q}: an exclusive slice runs without quota")
    return bad


def kubelet_summary(res: dict[str, Any]) -> str:
    """``name=cpus`` of every container in each step of a kubelet phase, and the refused
    ones with their error's name."""
    parts = []
    for st in res.get("steps") or []:
        cs = " ".join(f"{n}={c['cgroup']}" for n, c in st["containers"].items())
        cs += "".join(f" {n}=refused({_error_name(m)})"
                      for n, m in (st.get("refused") or {}).items())
        parts.append(f"[{st['step']}] {cs}")
    return "; ".join(parts)


def check_oracle(res: dict[str, Any], answers: list[dict[str, Any]]) -> list[str]:
    """Failures of a kubelet phase's recorded steps against the kubelet's own answers
    (:func:`tests.vm.kubelet_oracle.expect`: one per admission order of pods created
    together); empty = the guest's outcome is the kubelet's for one of those orders. Else
    the failures against the order as created (and how many orders were tried).

    Per step the oracle answers: a running container of a pod the kubelet refuses fails; an
    exclusive container (or one on its pod's shared pool) must have the oracle's cpuset in
    cgroup v2 ``cpuset.cpus.effective``, any other the node's shared pool; a refused
    container's message must name the kubelet's reason for its pod, which must be refused;
    a step's ``describe_errors`` (``kubectl describe pod``) must name it too."""
    if not answers:
        return ["the oracle gave no answer"]
    if not any(st["step"] in answers[0]["steps"] for st in res.get("steps") or []):
        return ["no recorded step the oracle answers for (were the events recorded?)"]
    first: list[str] | None = None
    for a in answers:
        bad = _against_oracle(res, a)
        if not bad:
            return []
        first = bad if first is None else first
    assert first is not None
    more = f" (none of {len(answers)} admission orders fits)" if len(answers) > 1 else ""
    return [f"kubelet oracle{more}: {b}" for b in first]


def _against_oracle(res: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    bad: list[str] = []
    for st in res.get("steps") or []:
        exp = answer["steps"].get(st["step"])
        if exp is None:
            continue  # after a resize: not replayed
        tag = f"[{st['step']}]"
        refused_pods: set[str] = set()
        for key, c in st["containers"].items():
            r = exp["pods"].get(c["pod"])
            if r is None:
                bad.append(f"{tag} {key}: pod {c['pod']} is not among the phase's pods")
                continue
            if not r.get("admitted"):
                bad.append(f"{tag} {key} runs on {c['cgroup']}; the kubelet refuses its pod: "
                           f"{r.get('reason')}: {r.get('message')}")
                continue
            o = next((x for x in r.get("containers") or [] if x["name"] == c["container"]),
                     None)
            if o is None:
                bad.append(f"{tag} {key}: the kubelet has no container {c['container']}")
                continue
            own = o.get("exclusive") or o.get("pool") == "pod"
            want = o.get("cpus", "") if own else exp["pool"]
            what = ("exclusive" if o.get("exclusive") else "pod shared pool" if own
                    else "node shared pool")
            if cpus(c["cgroup"]) != cpus(want):
                bad.append(f"{tag} {key}: cpus {c['cgroup']}, the kubelet's: {want} ({what})")
        for key, msg in (st.get("refused") or {}).items():
            pod = key.split("/", 1)[0]
            r = exp["pods"].get(pod)
            if r is None:
                bad.append(f"{tag} {key}: pod {pod} is not among the phase's pods")
            elif r.get("admitted"):
                bad.append(f"{tag} {key} refused ({_error_name(msg)}); the kubelet admits "
                           "its pod")
            elif str(r.get("reason")) not in msg:
                bad.append(f"{tag} {key} refused with {_error_name(msg)}; the kubelet: "
                           f"{r.get('reason')}: {r.get('message')}")
            else:
                refused_pods.add(pod)
        if "describe_errors" in st:
            for pod in sorted(refused_pods):
                reason = exp["pods"][pod].get("reason")
                if reason not in st["describe_errors"]:
                    bad.append(f"{tag} kubectl describe pod {pod} shows "
                               f"{st['describe_errors']}, not {reason}")
    return bad
