"""The dry run: what the plugin would decide for some pods on some node, with no runtime.

Inputs: a :class:`~nri_cpumgr.config.Config`, a :class:`~nri_cpumgr.topology.Machine` (from
sysfs, or from ``nri-cpumgr topology --json``: :func:`machine_from_json`), optionally the
node's current state (the plugin's checkpoint bodies), and pods
(:mod:`nri_cpumgr.planner.manifest`). The managers are the plugin's own, built by
:mod:`nri_cpumgr.managers` and driven through the plugin's
:class:`~nri_cpumgr.cm.container_manager.ContainerManager` exactly as the plugin's handlers
drive it: each container is admitted when the runtime would create it (kubelet start order);
an init container that is not a sidecar is stopped before the next container of its pod
starts (its CPUs are then reused, as the plugin does when it sees it stop). Nothing is
written anywhere.

Output: :class:`PlanResult`, one :class:`ContainerPlan` per container (cpus, mems, NUMA nodes,
L3 groups, or the refusal with the kubelet's error text) and the shared pool after each pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from nri_cpumgr.cm.container_manager import AdmissionError
from nri_cpumgr.cm.memorymanager.state import MemoryState
from nri_cpumgr.config import Config, ConfigError
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.managers import (
    build_container_manager,
    build_memory_manager,
    build_policy,
    build_topology_manager,
    restore_state,
)
from nri_cpumgr.planner.manifest import PlannedPod, container_infos
from nri_cpumgr.topology import (
    CPUTopology,
    Machine,
    NUMANodeInfo,
    check_topology_doc,
    check_unique_ids,
)


@dataclass(slots=True)
class ContainerPlan:
    """The plan for one container. ``decision``: ``exclusive``, ``shared`` (runs on, and
    follows, the shared pool), ``unpinned`` (policy none: left alone), ``refused`` (``error``
    holds the text the kubelet would see) or ``not-started`` (an init container before it
    was refused, so the kubelet never gets there). ``cpus``/``mems``/``numa``/``l3``:
    cpulists ("" when none); ``l3`` are the L3 (uncore cache) ids of the CPUs."""

    pod: str
    container: str
    kind: str
    qos: str
    decision: str
    cpus: str = ""
    mems: str = ""
    numa: str = ""
    l3: str = ""
    error: str = ""
    explanation: dict[str, Any] | None = None


@dataclass(slots=True)
class PodPlan:
    pod: str
    uid: str
    qos: str
    containers: list[ContainerPlan] = field(default_factory=list)
    shared_pool_after: str = ""


@dataclass(slots=True)
class PlanResult:
    """``shared_pool_before``: the shared pool of the node's state before the first pod."""

    shared_pool_before: str
    pods: list[PodPlan]
    summary: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.summary,
            "sharedPoolBefore": self.shared_pool_before,
            "pods": [
                {
                    "pod": p.pod,
                    "uid": p.uid,
                    "qos": p.qos,
                    "sharedPoolAfter": p.shared_pool_after,
                    "containers": [
                        {k: v for k, v in asdict(c).items()
                         if k != "pod" and (k != "explanation" or v is not None)}
                        for c in p.containers
                    ],
                }
                for p in self.pods
            ],
        }


def machine_from_json(doc: Mapping[str, Any]) -> Machine:
    """The inverse of ``nri-cpumgr topology --json`` (nri_cpumgr.topology.render.to_json):
    the CPU table plus ``numa_nodes`` (memory, hugepages, distances). Raises
    :class:`~nri_cpumgr.topology.TopologyError` for a CPU or NUMA node id given twice,
    ValueError (KeyError, TypeError included) on a document of another shape."""
    check_topology_doc(doc)
    topo = CPUTopology.from_conformance(doc)
    check_unique_ids(doc.get("numa_nodes", []), "id", "NUMA node", "numa_nodes")
    nodes = {}
    for n in doc.get("numa_nodes", []):
        nid = int(n["id"])
        nodes[nid] = NUMANodeInfo(
            id=nid,
            memory_bytes=int(n.get("memory_bytes", 0)),
            hugepages={int(k): int(v) for k, v in (n.get("hugepages") or {}).items()},
            distances={int(k): int(v) for k, v in (n.get("distances") or {}).items()},
        )
    return Machine(topology=topo, numa_nodes=nodes)


class Planner:
    """The plugin's managers on a private state. ``cpu_state`` / ``memory_state``: the
    bodies of the plugin's ``cpu_manager_state`` / ``memory_manager_state`` checkpoints
    (``nri-cpumgr status --json`` prints the first), ``None`` for an empty node;
    ``state_source`` names them in errors (the ``--state`` path). Raises
    :class:`ConfigError` (bad config; a checkpoint written by another CPU policy; a CPU or
    memory state that does not fit the machine)."""

    def __init__(
        self,
        config: Config,
        machine: Machine,
        cpu_state: dict[str, Any] | None = None,
        memory_state: dict[str, Any] | None = None,
        *,
        explain: bool = False,
        state_source: str = "(given state)",
    ) -> None:
        self.config = config
        self.machine = machine
        self.explain = explain
        policy = build_policy(config, machine)
        tm = build_topology_manager(config, machine)
        memory = build_memory_manager(config, machine)
        state = restore_state(policy, cpu_state, state_source, strict=True)
        if memory is not None:
            try:
                memory.start(MemoryState.from_dict(memory_state) if memory_state
                             else MemoryState())
            except Exception as e:
                raise ConfigError(f"memory state {state_source} does not fit this machine "
                                  f"and config: {e}") from None
        # the plugin's construction (runtime/plugin.py Plugin._setup)
        self.manager = build_container_manager(config, policy, state, tm, memory)
        self._seq = 0
        self.explainer = None
        if explain:
            from nri_cpumgr.explain.explainer import Explainer

            self.explainer = Explainer(self.manager, config)

    def summary(self) -> dict[str, Any]:
        topo = self.machine.topology
        m = self.manager
        return {
            "cpus": str(topo.cpus()),
            "numaNodes": str(topo.numa_nodes()),
            "sockets": len(topo.sockets()),
            "cpuManagerPolicy": self.config.cpuManagerPolicy,
            "cpuManagerPolicyOptions": dict(self.config.cpuManagerPolicyOptions),
            "reservedCpus": str(getattr(m.policy, "reserved_cpus", "")),
            "topologyManagerPolicy": m.tm.policy_name,
            # the configured scope (the kubelet's manager runs a "none" scope under policy none)
            "topologyManagerScope": self.config.topologyManagerScope,
            "memoryManagerPolicy": self.config.memoryManagerPolicy,
        }

    def _where(self, cpus: CPUSet | None) -> tuple[str, str]:
        if not cpus:
            return "", ""
        d = self.machine.topology.details
        return (str(CPUSet(d[c].numa for c in cpus if c in d)),
                str(CPUSet(d[c].uncore for c in cpus if c in d)))

    def plan(self, pods: Sequence[PlannedPod]) -> PlanResult:
        """Admit ``pods`` one after the other (see the module docstring)."""
        before = str(self.manager.shared_pool()) if self.manager.static else ""
        out = [self.plan_pod(p) for p in pods]
        return PlanResult(before, out, self.summary())

    def plan_pod(self, pod: PlannedPod) -> PodPlan:
        ids = []
        for _ in pod.containers:
            self._seq += 1
            ids.append(f"plan-{self._seq:04d}")
        infos = container_infos(pod, ids)
        pp = PodPlan(pod.key, pod.uid, str(pod.qos))
        blocked = ""
        for c, info in zip(pod.containers, infos, strict=True):
            row = ContainerPlan(pod.key, c.name, c.kind, str(info.qos), "")
            pp.containers.append(row)
            if blocked:
                row.decision = "not-started"
                row.error = f"init container {blocked} was refused"
                continue
            ex = self.explainer
            try:
                d = (ex.admit if ex is not None else self.manager.admit)(info)
            except AdmissionError as e:
                row.decision = "refused"
                row.error = str(e)
                if ex is not None:
                    row.explanation = ex.refusals.get(info.key)
                if c.kind == "init":
                    blocked = c.name  # the kubelet retries it; nothing after it starts
                continue
            if d.cpus is None:
                row.decision = "unpinned"
            else:
                row.decision = "exclusive" if d.exclusive else "shared"
                row.cpus = str(d.cpus)
                row.numa, row.l3 = self._where(d.cpus)
            row.mems = str(d.mems) if d.mems else ""
            if ex is not None:
                row.explanation = ex.live.get(info.id)
            if c.kind == "init":
                self.manager.stop(info.id)  # runs to completion before the next starts
        pp.shared_pool_after = str(self.manager.shared_pool()) if self.manager.static else ""
        return pp


def format_plan(result: PlanResult) -> str:
    """The plan as a table, the shared pool after each pod under it."""
    s = result.summary
    lines = [
        f"node: CPUs {s['cpus']}, NUMA nodes {s['numaNodes']}, {s['sockets']} socket(s); "
        f"cpuManagerPolicy {s['cpuManagerPolicy']}"
        + (" " + ", ".join(f"{k}={v}" for k, v in s["cpuManagerPolicyOptions"].items())
           if s["cpuManagerPolicyOptions"] else "")
        + (f", reserved {s['reservedCpus']}" if s["reservedCpus"] else "")
        + f"; topologyManagerPolicy {s['topologyManagerPolicy']}"
        + (f" (scope {s['topologyManagerScope']})" if s["topologyManagerPolicy"] != "none"
           else "")
        + f"; memoryManagerPolicy {s['memoryManagerPolicy']}",
        f"shared pool before: {result.shared_pool_before or '-'}",
        "",
    ]
    hdr = ("POD", "CONTAINER", "KIND", "QOS", "DECISION", "CPUS", "MEMS", "NUMA", "L3")
    table: list[tuple[str, ...] | str] = [hdr]  # a str is a note under the row before it
    for p in result.pods:
        for c in p.containers:
            table.append((p.pod, c.container, c.kind, c.qos, c.decision, c.cpus or "-",
                          c.mems or "-", c.numa or "-", c.l3 or "-"))
            if c.error:
                table.append(f"    {c.decision}: {c.error}")
            if c.explanation is not None:
                table += [f"    {line}" for line in explain_lines(c.explanation)]
        table.append(f"    shared pool after {p.pod}: {p.shared_pool_after or '-'}")
    rows = [r for r in table if isinstance(r, tuple)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(hdr))]
    for r in table:
        if isinstance(r, str):
            lines.append(r)
        else:
            lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines) + "\n"


def explain_lines(record: dict[str, Any]) -> list[str]:
    """An explanation record as text lines (nri_cpumgr.explain renders them)."""
    from nri_cpumgr.explain.explainer import render

    return render(record)
