"""The running containers of a node as its checkpoint records them (pure: dicts in, records
out), for ``nri-cpumgr plan --reconfigure`` on a live node.

The plugin's ``cpu_manager_state`` checkpoint carries one row per tracked container (id,
pod, pod uid, name, QoS class, exclusive, cpus, mems, stopped) but not its resources; they
are recovered as far as the rows and the Memory Manager's state allow: an exclusive
container requests as many CPUs as it holds (the static policy gives exactly the integer
request), its memory is its Memory Manager blocks; a shared Guaranteed container requests a
fraction of a CPU (under the static policy an integer request would have made it exclusive).
Under policy none nothing says how many CPUs a Guaranteed container requests: the running
pods' manifests (``pods``) fill that in, matched by namespace, name and container name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from nri_cpumgr.cm.records import Tracked
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.planner.manifest import PlannedPod, container_infos
from nri_cpumgr.podmodel import QOSClass
from nri_cpumgr.podmodel.nri import SHARES_PER_CPU, ContainerInfo, Resources


@dataclasses.dataclass(slots=True)
class NodeRows:
    """``containers``: id -> record, in the checkpoint's order; ``shared_pool`` (None under
    policy none) and ``reserved`` from the checkpoint; ``unknown``: containers whose CPU
    request could not be recovered (planned as shared)."""

    containers: dict[str, Tracked]
    shared_pool: CPUSet | None
    reserved: CPUSet
    unknown: list[str]


def node_rows(cpu_body: Mapping[str, Any], memory_body: Mapping[str, Any] | None = None,
              pods: Iterable[PlannedPod] = ()) -> NodeRows:
    """The checkpoint bodies as records (see the module docstring). Raises ValueError
    (KeyError, TypeError) for a body of another shape or without container rows."""
    rows = cpu_body.get("containers")
    if not isinstance(rows, list):
        raise ValueError("the checkpoint has no container rows (a kubelet's cpu_manager_state "
                         "or a status --json without them cannot be planned on)")
    static = cpu_body.get("policyName") == "static"
    blocks = (memory_body or {}).get("assignments") or {}
    specs: dict[tuple[str, str, str], ContainerInfo] = {}
    for p in pods:
        for info in container_infos(p, [f"manifest-{i}" for i in range(len(p.containers))]):
            specs[(p.namespace, p.name, info.name)] = info
    out: dict[str, Tracked] = {}
    unknown: list[str] = []
    for r in rows:
        cid = str(r["id"])
        ns, _, name = str(r["pod"]).partition("/")
        cpus = CPUSet.parse(str(r.get("cpus") or ""))
        exclusive = bool(r.get("exclusive"))
        qos = QOSClass(str(r["qos"]))
        spec = specs.get((ns, name, str(r["container"])))
        if spec is not None:
            res = spec.resources
        else:
            res = _resources(qos, len(cpus) if exclusive else 0,
                             (blocks.get(str(r["podUID"])) or {}).get(str(r["container"])))
            if qos is QOSClass.GUARANTEED and not exclusive and not static:
                unknown.append(cid)
        info = ContainerInfo(
            id=cid, pod_id=str(r["podUID"]), pod_uid=str(r["podUID"]), pod_name=name,
            namespace=ns, name=str(r["container"]), restart_count=0, qos=qos,
            qos_source="resources", resources=res, cpus=str(cpus), devices=())
        mems = str(r.get("mems") or "")
        out[cid] = Tracked(info, exclusive, cpus if exclusive else None,
                           stopped=bool(r.get("stopped")),
                           mems=CPUSet.parse(mems) if mems else None)
    pool = CPUSet.parse(str(cpu_body.get("defaultCpuSet", ""))) if static else None
    return NodeRows(out, pool, CPUSet.parse(str(cpu_body.get("reservedCpuSet") or "")),
                    unknown)


def _resources(qos: QOSClass, cpus: int, blocks: Any) -> Resources:
    memory: int | None = None
    huge: dict[str, int] = {}
    for b in blocks or ():
        if b.get("type") == "memory":
            memory = (memory or 0) + int(b.get("size", 0))
        elif str(b.get("type", "")).startswith("hugepages-"):
            huge[str(b["type"])] = huge.get(str(b["type"]), 0) + int(b.get("size", 0))
    if qos is QOSClass.GUARANTEED:
        # exclusive: its CPU count; shared: a fraction (an integer would be exclusive)
        milli = cpus * 1000 if cpus else 500
        shares = cpus * SHARES_PER_CPU if cpus else SHARES_PER_CPU // 2
        return Resources(shares, milli, milli, memory if memory is not None else 1 << 28, huge)
    if qos is QOSClass.BURSTABLE:
        return Resources(SHARES_PER_CPU // 10, 100, None, None, huge)
    return Resources(2, None, None, None, huge)
