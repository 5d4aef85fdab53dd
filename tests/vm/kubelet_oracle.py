"""What the kubelet's own managers answer for the pods of a guest kubelet phase.

The guest (:mod:`tests.vm.guest_kubelet`) records, per phase, the plugin's configuration and
its events: the pods it created (the manifests sent to the API server), deleted and resized,
and where it recorded a step. This module replays them through the kubelet oracle
(oracle/cmd/kubelet-oracle: the kubelet v1.37.2's CPU and Topology Managers imported as Go
modules; scenario format: docs/development/differential.md) on the guest's topology, and
returns, for every recorded step, what each pod got there: admitted with which cpusets (an
exclusive container's own, a pod-level pod's shared pool), or refused with which reason, and
the node's shared pool. :func:`tests.vm.checks.check_oracle` compares that with what the
guest saw; nothing of it is written by hand.

* **Concurrency.** Pods created one after the other without a wait between them (the guest
  waits for nothing in between) reach the kubelet together: it may admit them in any order.
  Every order of those of them whose answer takes CPUs (exclusive CPUs, a pod bubble) or is
  a refusal is replayed (at most :data:`MAX_ORDERS`); the guest's outcome must be one of
  them. Pods that only use the shared pool change nothing for the others.
* **Shared pool.** At each step a BestEffort probe pod is admitted (and deleted again): the
  kubelet's default cpuset then, after its stale-state collection has released what deleted
  pods held, is the node's shared pool a shared container must run on.
* **Resize.** The oracle has no in-place resize: events from a resize on are not replayed,
  those steps are judged by :func:`tests.vm.checks.check_kubelet`'s rules only.

Raises :class:`OracleError` when the oracle cannot answer (a config error, an exited
process).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from tests.vm.topology import Topology

PROBE = "nri-oracle-probe"
"""Name prefix of the BestEffort probe pods (never created in the guest)."""

MAX_ORDERS = 120
"""At most this many admission orders are replayed per phase."""


class OracleError(RuntimeError):
    """The oracle gave no usable answer (the message says why)."""


def machine(topo: Topology) -> dict[str, Any]:
    """The oracle's machine for ``topo``: one row per CPU (cpu, core, socket, numa, uncore =
    the L3 group, QEMU's socket-major numbering of :meth:`Topology.cpu`) and the NUMA nodes'
    memory and distances."""
    rows = []
    for i in range(topo.ncpus):
        c = topo.cpu(i)
        rows.append({"cpu": i, "core": c.core, "socket": c.socket, "numa": c.numa,
                     "uncore": c.die})
    nodes = [{"id": i, "memory_bytes": nd.memory_mib << 20, "hugepages": {},
              "distances": {str(j): d for j, d in enumerate(topo.distances[i])}}
             for i, nd in enumerate(topo.numa)]
    return {"name": topo.name, "cpus": rows, "numa_nodes": nodes}


def _items(res: dict[str, Any]) -> list[tuple[str, Any]]:
    """The phase's events up to its first resize: ("group", [manifests]) for consecutive
    creations, ("delete", name), ("step", name)."""
    out: list[tuple[str, Any]] = []
    for e in res.get("events") or []:
        op = e["op"]
        if op == "resize":
            break
        if op == "add":
            if out and out[-1][0] == "group":
                out[-1][1].append(e["pod"])
            else:
                out.append(("group", [e["pod"]]))
        elif op == "delete":
            out.append(("delete", e["name"]))
        elif op == "step":
            out.append(("step", e["step"]))
    return out


def _probe(k: int) -> dict[str, Any]:
    name = f"{PROBE}-{k}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "probe", "image": "busybox"}]}}


def scenario(topo: Topology, res: dict[str, Any],
             orders: list[list[int]] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The oracle scenario of a phase result and how to read its answer: (scenario, plan),
    plan = {"adds": [(event index, pod name)], "steps": [(event index of the probe, step)]}.
    ``orders``: per creation group, the order of its manifests (default: as created)."""
    events: list[dict[str, Any]] = []
    adds: list[tuple[int, str]] = []
    steps: list[tuple[int, str]] = []
    g = 0
    for kind, what in _items(res):
        if kind == "group":
            order = orders[g] if orders else list(range(len(what)))
            for i in order:
                pod = copy.deepcopy(what[i])
                name = pod["metadata"]["name"]
                pod["metadata"]["uid"] = f"uid-{name}-{len(events)}"
                adds.append((len(events), name))
                events.append({"op": "add", "pod": pod})
            g += 1
        elif kind == "delete":
            events.append({"op": "delete", "name": what})
        else:
            steps.append((len(events), what))
            probe = _probe(len(steps))
            events.append({"op": "add", "pod": probe})
            events.append({"op": "delete", "name": probe["metadata"]["name"]})
    cfg = dict(res.get("config") or {})
    cfg.setdefault("evictionHard", {"memory.available": "100Mi"})
    s = {"name": f"guest-kubelet-{res.get('containerd')}-{res.get('scenario')}",
         "machine": machine(topo), "config": cfg, "events": events}
    return s, {"adds": adds, "steps": steps}


def _read(answer: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """step -> {"pool": the shared pool, "pods": pod name -> the oracle's add result}."""
    if answer.get("configError"):
        raise OracleError(f"the oracle refuses the phase's config: {answer['configError']}")
    ev = answer["events"]
    out: dict[str, Any] = {}
    pods: dict[str, Any] = {}
    marks = sorted([(i, "add", n) for i, n in plan["adds"]]
                   + [(i, "step", n) for i, n in plan["steps"]])
    for i, kind, name in marks:
        r = ev[i]
        if r.get("reason") == "BadEvent":
            raise OracleError(f"the oracle could not read event {i}: {r.get('message')}")
        if kind == "add":
            pods[name] = r
        else:
            if not r.get("admitted"):
                raise OracleError(f"the probe pod at step {name!r} was refused: {r}")
            out[name] = {"pool": r.get("sharedPool") or "", "pods": dict(pods)}
    return out


def _significant(r: dict[str, Any]) -> bool:
    """An add result that takes CPUs from the others or is a refusal."""
    return (not r.get("admitted") or bool(r.get("podCPUs"))
            or any(c.get("exclusive") or c.get("pool") for c in r.get("containers") or []))


def expect(topo: Topology, res: dict[str, Any], oracle: Any) -> list[dict[str, Any]]:
    """The kubelet's answers for a phase result, one per admission order tried (the order
    as created first): each {"order": [pod names], "steps": step -> {"pool", "pods"}}.
    ``oracle``: a :class:`tests.differential.scenarios.Oracle` (``run(scenario)``)."""
    groups = [what for kind, what in _items(res) if kind == "group"]
    s, plan = scenario(topo, res)
    first = oracle.run(s)
    steps = _read(first, plan)
    by_name = {n: first["events"][i] for i, n in plan["adds"]}
    # per group: the positions of the pods whose order matters, permuted
    choices: list[list[list[int]]] = []
    for grp in groups:
        pos = [i for i, m in enumerate(grp)
               if _significant(by_name.get(m["metadata"]["name"], {}))]
        perms = []
        for p in itertools.permutations(pos):
            order = list(range(len(grp)))
            for a, b in zip(pos, p, strict=True):
                order[a] = b
            perms.append(order)
        choices.append(perms)
    names = [[m["metadata"]["name"] for m in grp] for grp in groups]
    out = [{"order": [n for grp in names for n in grp], "steps": steps}]
    for combo in itertools.islice(itertools.product(*choices), MAX_ORDERS):
        orders = [list(o) for o in combo]
        if all(o == sorted(o) for o in orders):
            continue  # the order as created: done above
        s, plan = scenario(topo, res, orders)
        out.append({"order": [names[g][i] for g, o in enumerate(orders) for i in o],
                    "steps": _read(oracle.run(s), plan)})
    return out


def expect_all(topo: Topology, results: list[dict[str, Any]],
               oracle_path: Any = None) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """:func:`expect` for every phase result of a guest run that ran to the end (one
    oracle process): (containerd, phase) -> answers. ``oracle_path``: the binary (default:
    ``make oracle``'s, built when missing or stale: scripts/build-oracle.sh)."""
    from tests.differential import scenarios as S

    oracle = S.Oracle(oracle_path or S.oracle_path())
    try:
        return {(r["containerd"], r["scenario"]): expect(topo, r, oracle) for r in results
                if r.get("scenario") != "node" and not r.get("error") and r.get("events")}
    finally:
        oracle.close()
