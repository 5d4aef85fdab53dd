"""The node's NodeResourceTopology object, computed from the machine and the plugin's state (pure).

Shape: ``topology.node.k8s.io/v1alpha2`` ``NodeResourceTopology`` (kubernetes-sigs /
k8stopologyawareschedwg noderesourcetopology-api, ``pkg/apis/topology/v1alpha2/types.go``),
cluster-scoped, named after the node:

* ``zones``: one per NUMA node, ``name: node-<id>``, ``type: Node`` (the zone type the
  scheduler-plugins ``NodeResourceTopologyMatch`` filter reads), ``costs`` = the SLIT distances
  to every NUMA node (``node-<j>``: distance, 10 = local), ``resources``:

  - ``cpu``: capacity = the node's logical CPUs; allocatable = capacity minus the reserved CPUs
    on it (``reservedCpuSet`` of the checkpoint, else the config's); available = allocatable
    minus the exclusive CPUs assigned on it (every checkpoint entry; reserved CPUs are not
    counted twice). Whole CPUs.
  - ``memory`` and ``hugepages-<size>`` (only with ``memoryManagerPolicy: Static``, from the
    Memory Manager's checkpoint): capacity = ``total_mem_size``, allocatable =
    ``allocatable``, available = ``free``. Bytes.

* ``attributes``: ``topologyManagerPolicy`` and ``topologyManagerScope`` (the kubelet's
  config values, as the scheduler plugin expects them), and the deprecated
  ``topologyPolicies`` list with the combined name (``SingleNUMANodeContainerLevel``, ...).

Quantities are Kubernetes quantity strings (plain integers here). The object carries no
status; an exporter (:mod:`nri_cpumgr.nrt.exporter`) creates or replaces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.topology.model import Machine

GROUP = "topology.node.k8s.io"
VERSION = "v1alpha2"
PLURAL = "noderesourcetopologies"
KIND = "NodeResourceTopology"

_POLICY_NAMES = {"single-numa-node": "SingleNUMANode", "restricted": "Restricted",
                 "best-effort": "BestEffort"}


def topology_policy_name(policy: str, scope: str) -> str:
    """The deprecated ``topologyPolicies`` value for a Topology Manager policy and scope:
    ``none`` -> ``None``; ``single-numa-node`` + ``container`` ->
    ``SingleNUMANodeContainerLevel``; ``restricted`` + ``pod`` -> ``RestrictedPodLevel``.
    Raises ValueError on an unknown policy or scope (the config refuses those already)."""
    if policy == "none":
        return "None"
    if policy not in _POLICY_NAMES or scope not in ("container", "pod"):
        raise ValueError(f"unknown Topology Manager policy/scope {policy!r}/{scope!r}")
    return _POLICY_NAMES[policy] + ("ContainerLevel" if scope == "container" else "PodLevel")


def _res(name: str, capacity: int, allocatable: int, available: int) -> dict[str, str]:
    return {"name": name, "capacity": str(capacity), "allocatable": str(allocatable),
            "available": str(max(0, available))}


def build(node_name: str, machine: Machine, *, policy: str = "none", scope: str = "container",
          reserved: CPUSet | None = None, cpu_state: Mapping[str, Any] | None = None,
          memory_state: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The NodeResourceTopology object (a JSON-able dict) for ``node_name``.

    ``cpu_state``: the plugin's ``cpu_manager_state`` body (``reservedCpuSet``, ``entries``:
    pod UID -> container -> cpuset text) or None (nothing assigned yet). ``reserved``: the
    reserved CPUs when the checkpoint does not say (the config's). ``memory_state``: the
    ``memory_manager_state`` body (``machine_state``: NUMA id -> ``memory_map``) or None.
    Raises ValueError on a malformed cpuset in the state.
    """
    topo = machine.topology
    state = cpu_state or {}
    res_text = state.get("reservedCpuSet")
    reserved_set = CPUSet.parse(res_text) if res_text else (reserved or CPUSet())
    exclusive = CPUSet()
    for conts in (state.get("entries") or {}).values():
        for text in conts.values():
            exclusive = exclusive | CPUSet.parse(text)
    exclusive = exclusive - reserved_set
    mem_nodes = (memory_state or {}).get("machine_state") or {}
    zones = []
    for numa in sorted(topo.numa_nodes()):
        cpus = topo.cpus_in_numa_nodes([numa])
        alloc = len(cpus) - len(cpus & reserved_set)
        resources = [_res("cpu", len(cpus), alloc, alloc - len(cpus & exclusive))]
        node_mem = mem_nodes.get(str(numa)) or mem_nodes.get(numa) or {}
        for kind, table in sorted((node_mem.get("memory_map") or {}).items()):
            resources.append(_res(kind, int(table.get("total_mem_size", 0)),
                                  int(table.get("allocatable", 0)), int(table.get("free", 0))))
        info = machine.numa_nodes.get(numa)
        costs = [{"name": f"node-{j}", "value": int(d)}
                 for j, d in sorted((info.distances if info else {}).items())]
        zone: dict[str, Any] = {"name": f"node-{numa}", "type": "Node", "resources": resources}
        if costs:
            zone["costs"] = costs
        zones.append(zone)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": node_name},
        "topologyPolicies": [topology_policy_name(policy, scope)],
        "attributes": [{"name": "topologyManagerPolicy", "value": policy},
                       {"name": "topologyManagerScope", "value": scope}],
        "zones": zones,
    }


def content(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What an update changes (everything but metadata): equal contents need no API call."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}
