"""A scenario through the plugin's own decision path: the same JSON the kubelet oracle reads.

A scenario (docs/development/differential.md) is ``{"name", "machine", "config", "events"}``:

* ``machine``: the topology JSON of ``nri-cpumgr topology --json`` / the conformance corpus
  (``cpus`` rows; ``numa_nodes`` with ``memory_bytes`` and ``hugepages`` {page size in bytes:
  pages}). The header counts are derived from the table as discovery derives them (kubelet
  cpumanager/topology ``Discover``: a core's id is its lowest CPU id), so both sides see the
  machine a real node would report.
* ``config``: the plugin's config keys (KubeletConfiguration names).
* ``events``: ``{"op": "add", "pod": {"metadata": {...}, "spec": {...}}, "cri": {...}}``
  (``cri``, optional: the kubelet's own CRI requests for the pod, the sandbox's resources
  and each container's ``LinuxContainerResources`` as oracle/cmd/kubelet-cri prints them;
  without it the planner's model of them, nri_cpumgr.planner.manifest.linux_resources),
  ``{"op": "exit", "name": POD, "container": NAME}``, ``{"op": "delete", "name": POD}``.

The plugin sees what the runtime shows it (one container at a time, in the kubelet's start
order, nri_cpumgr.planner.manifest): an ``add`` creates the pod's containers one after the
other (an init container that is not a sidecar stops before the next starts); ``exit`` is a
StopContainer; ``delete`` stops every container of the pod, then StopPodSandbox. A container
the plugin refuses makes the pod "not admitted" (the error of the first refusal); the pod is
then deleted (its other containers released), as the kubelet never runs a pod it rejects.

The pod's spec facts (``.spec.resources``, each container's own resources) are passed to
the plugin as its API-server pod watch gives them (``podSpecSource: apiServer``,
nri_cpumgr.podmodel.spec). ``"mode"`` (optional) says how much of the spec the plugin
knows: ``"as-deployed"`` (default: the deployed DaemonSet's pod watch, every pod's spec, so
each pod is admitted whole when its sandbox starts, before its containers, as the kubelet
admits it; at its first container when it requests an extended resource:
ContainerManager.admit_sandbox) or
``"nri-alone"`` (container by container, as the plugin decides without a pod spec source or
when the API server is away; the spec's facts about ``.spec.resources`` are still used, as
before whole-pod admission, so that pod-level pods are told from their look-alikes).

Output (:func:`run_scenario`), the oracle's shape: ``{"name", "events": [{"op", "pod",
"admitted", "reason", "message", "containers": [{"name", "cpus", "exclusive", "mems",
"pool"}], "podCPUs", "sharedPool"}]}`` (``pool``: ``"pod"`` for a container on its pod's
shared pool, pod-level resource managers; ``podCPUs``: the pod's pod-level CPUs);
``configError`` instead of events when the config or machine is refused. ``reason`` is the
kubelet's admission reason (the error type name: TopologyAffinityError, SMTAlignmentError,
...; ``UnexpectedAdmissionError`` for an error the kubelet does not type). A refused pod's
event also carries ``refusedAt``: the container whose CreateContainer the refusal came at
(the plugin's side only: the kubelet refuses the pod).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nri_cpumgr.cm.container_manager import AdmissionError
from nri_cpumgr.config import Config, ConfigError
from nri_cpumgr.planner.manifest import ManifestError, container_infos, pod_from_spec
from nri_cpumgr.topology import CPUInfo, CPUTopology, Machine, NUMANodeInfo, check_unique_ids

#: config keys a scenario may carry (the decision-making part of the plugin's config)
SCENARIO_CONFIG_KEYS = (
    "cpuManagerPolicy", "cpuManagerPolicyOptions", "reservedSystemCPUs", "kubeReserved",
    "systemReserved", "evictionHard", "featureGates", "topologyManagerPolicy",
    "topologyManagerScope", "topologyManagerPolicyOptions", "memoryManagerPolicy",
    "reservedMemory",
)


def scenario_machine(doc: Mapping[str, Any]) -> Machine:
    """The machine of a scenario as discovery would report it (see the module docstring).
    Raises ValueError (KeyError, TypeError) on another shape, TopologyError (a ValueError)
    for a CPU or NUMA node id given twice."""
    rows = doc["cpus"]
    check_unique_ids(rows, "cpu", "CPU", "machine.cpus")
    check_unique_ids(doc.get("numa_nodes", []), "id", "NUMA node", "machine.numa_nodes")
    low: dict[tuple[int, int], int] = {}
    for r in rows:
        k = (int(r["numa"]), int(r["core"]))
        low[k] = min(low.get(k, int(r["cpu"])), int(r["cpu"]))
    details = {
        int(r["cpu"]): CPUInfo(numa=int(r["numa"]), socket=int(r["socket"]),
                               core=low[(int(r["numa"]), int(r["core"]))],
                               uncore=int(r.get("uncore", 0)))
        for r in rows
    }
    topo = CPUTopology.from_details(details)
    nodes = {}
    for n in doc.get("numa_nodes", []):
        nid = int(n["id"])
        nodes[nid] = NUMANodeInfo(
            id=nid, memory_bytes=int(n.get("memory_bytes", 0)),
            hugepages={int(k): int(v) for k, v in (n.get("hugepages") or {}).items()},
            distances={int(k): int(v) for k, v in (n.get("distances") or {}).items()},
        )
    return Machine(topology=topo, numa_nodes=nodes)


def _reason(text: str) -> tuple[str, str]:
    """``(reason, message)`` of an admission refusal's text ``"<Name>: <message>"``."""
    name, sep, rest = text.partition(":")
    if sep and name and " " not in name.strip():
        return name.strip(), rest.strip()
    return "UnexpectedAdmissionError", text


#: the scenario modes (``"mode"``): the plugin knows every pod's spec / only NRI's view
MODES = ("as-deployed", "nri-alone")


def run_scenario(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Run one scenario through the plugin's managers (nri_cpumgr.planner.plan.Planner);
    the result in the oracle's shape (module docstring). Never raises for a bad config or
    machine (``configError``); raises :class:`ManifestError` for a malformed pod."""
    from nri_cpumgr.planner.plan import Planner

    out: dict[str, Any] = {"name": doc.get("name", ""), "events": []}
    try:
        cfg = {k: v for k, v in (doc.get("config") or {}).items() if k in SCENARIO_CONFIG_KEYS}
        config = Config.model_validate(cfg)
        machine = scenario_machine(doc["machine"])
        planner = Planner(config, machine)
    except (ConfigError, ValueError, KeyError, TypeError) as e:
        out["configError"] = str(e)
        return out
    mode = doc.get("mode") or MODES[0]
    if mode not in MODES:
        out["configError"] = f"scenario mode {mode!r}: expected one of {', '.join(MODES)}"
        return out
    m = planner.manager
    m.whole_pod_admission = mode != "nri-alone"
    live: dict[str, tuple[str, list[str]]] = {}  # pod name -> (uid, container ids)
    names: dict[tuple[str, str], str] = {}  # (pod, container) -> id
    seq = 0
    for n, ev in enumerate(doc.get("events") or []):
        op = ev.get("op")
        if op == "add":
            p = ev.get("pod") or {}
            pod = pod_from_spec(p.get("metadata") or {}, p.get("spec"), f"event {n}")
            if pod.name in live:
                raise ManifestError(f"event {n}: pod {pod.name} added twice")
            ids = []
            for _ in pod.containers:
                seq += 1
                ids.append(f"c{seq:05d}")
            er: dict[str, Any] = {"op": op, "pod": pod.name, "admitted": True, "containers": []}
            started: list[str] = []
            infos = container_infos(pod, ids, ev.get("cri"))
            first = infos[0] if infos else None
            if mode == "as-deployed" and first is not None and first.pod_spec is not None:
                # the RunPodSandbox before the pod's containers, as the deployed plugin
                # (its pod watch has shown the pod: a refusal comes at the first container)
                m.admit_sandbox(first.pod_uid, first.pod_name, first.namespace, first.qos,
                                first.pod_spec)
            for c, info in zip(pod.containers, infos, strict=True):
                try:
                    d = m.admit(info)
                except AdmissionError as e:
                    er["admitted"] = False
                    er["reason"], er["message"] = _reason(str(e))
                    er["refusedAt"] = c.name
                    er.pop("containers")
                    for cid in started:
                        m.stop(cid)
                    m.remove_pod(pod.uid)
                    break
                started.append(info.id)
                row = {
                    "name": c.name,
                    "cpus": str(d.cpus) if d.cpus else "",
                    "exclusive": bool(d.exclusive),
                    "mems": str(d.mems) if d.mems else "",
                }
                if m.pod_level is not None and m.pod_level.role(info.id) == "pod-shared":
                    row["pool"] = "pod"
                er["containers"].append(row)
                if c.kind == "init":
                    m.stop(info.id)  # runs to completion before the next starts
            if er["admitted"]:
                live[pod.name] = (pod.uid, started)
                for c, cid in zip(pod.containers, ids, strict=True):
                    names[(pod.name, c.name)] = cid
            if er["admitted"] and m.pod_level is not None:
                bubble = m.pod_level.bubble(pod.uid)
                if bubble:
                    er["podCPUs"] = str(bubble)
            er["sharedPool"] = str(m.shared_pool()) if m.static else ""
            out["events"].append(er)
        elif op == "exit":
            cid = names.get((ev.get("name", ""), ev.get("container", "")))
            if cid is not None:
                m.stop(cid)
            out["events"].append({"op": op, "pod": ev.get("name", "")})
        elif op == "delete":
            got = live.pop(ev.get("name", ""), None)
            if got is not None:
                uid, cids = got
                for cid in cids:
                    m.stop(cid)
                m.remove_pod(uid)
            out["events"].append({"op": op, "pod": ev.get("name", "")})
        else:
            raise ManifestError(f"event {n}: unknown op {op!r} (add, exit, delete)")
    return out
