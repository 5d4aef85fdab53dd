"""Adoption: the plugin's first state taken from the kubelet's checkpoints.

When the plugin starts with no checkpoint of its own, it looks for the kubelet's
``cpu_manager_state`` (and ``memory_manager_state``) in ``kubeletStateDirectory`` (default
``/var/lib/kubelet``; ``""`` turns adoption off):

1. :func:`seed` reads and verifies them and gives the plugin's starting state: the kubelet's
   exclusive assignments (pod uid -> container name -> CPUs) and default set, and its Memory
   Manager machine state and blocks. A corrupt checkpoint, or one written by a policy other
   than ``static`` / ``Static``, is refused with one line and nothing is adopted: the
   runtime's cpusets are the truth, as without a checkpoint.
2. :meth:`Adoption.reconcile`, at the first Synchronize, before the container manager's own
   reconciliation: every assignment is matched by pod uid and container name (v1 checkpoints:
   by container id) to the containers the runtime lists, running or exited. An assignment
   whose container's cpuset, as the runtime reports it, differs is dropped with a warning
   (the runtime wins: the container keeps what it runs on, adopted from the runtime when
   those CPUs are free). An assignment of a live pod's container the runtime does not list
   (containerd 1.7 lists no exited containers) is kept for its restart, as the kubelet keeps
   it. Assignments of pods the runtime no longer has are reported as not matched (the
   container manager releases them). Nothing that matches is moved.

Pod-level pods (kubelet 1.36+ ``podEntries``, the ``PodLevelResourceManagers`` gate): the
pod's bubble becomes the pod's :data:`~nri_cpumgr.cm.podresources.manager.POD_ENTRY`
assignment (CPUs and memory blocks), as the plugin records it. The kubelet also records
every container of such a pod: a slice for each container that qualifies, the pod shared
pool (or the bubble minus the sidecars' slices, for a regular init container) for the
others. The plugin records slices only (its pod shared pool follows from the bubble), so at
the first Synchronize the entry of a listed container that does not qualify on its own is
dropped (its CPUs stay in the bubble), and so is the entry of an exited or not listed
container that overlaps the pod shared pool the running containers use (a finished init
container's). Resize baselines (v4 ``baselines`` that differ from the entry) become the
plugin's promised CPUs of a resized container.

Pure apart from :func:`seed` reading the two files.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nri_cpumgr.adopt import CPU_STATE  # noqa: F401 - re-exported
from nri_cpumgr.adopt.kubelet import (
    KubeletCheckpointError,
    KubeletCPUState,
    load_cpu_state,
    load_memory_state,
)
from nri_cpumgr.cm.cpumanager import CPUManagerState
from nri_cpumgr.cm.podresources.manager import POD_ENTRY, container_qualifies
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel.nri import ContainerInfo

log = logging.getLogger("nri_cpumgr.adopt")

MEMORY_STATE = "memory_manager_state"


@dataclass
class Adoption:
    """What was taken from the kubelet, waiting for the first Synchronize."""

    cpu: KubeletCPUState
    memory_entries: int = 0
    lines: list[str] = field(default_factory=list)

    def reconcile(
        self,
        state: CPUManagerState,
        live: Iterable[ContainerInfo],
        stopped: Iterable[ContainerInfo],
        live_pods: Iterable[str],
    ) -> list[str]:
        """Match the adopted assignments to the runtime's containers (see the module
        docstring); mutates ``state``. Returns the report, one line per finding (also
        logged: the summary at INFO, disagreements as WARNING)."""
        live, stopped = list(live), list(stopped)
        pods = set(live_pods) | {i.pod_uid for i in live}
        by_id = {i.id: i for i in live + stopped}
        if self.cpu.version == 1:  # keyed by container id: find pod uid and name
            for cid, cpus in self.cpu.by_container_id.items():
                i = by_id.get(cid)
                if i is None:  # seed() left its CPUs in the default set
                    self._say(f"not matched: container id {cid} (cpus {cpus}) is not in the "
                              "runtime; its CPUs stay in the shared pool")
                    continue
                state.set_cpuset(i.pod_uid, i.name, cpus)
                state.default_set = state.default_set - cpus
        by_key = {i.key: (i, False) for i in stopped}
        by_key.update({i.key: (i, True) for i in live})
        adopted = exited = bubbles = pooled = 0
        for uid, conts in list(state.assignments.items()):
            bubble = conts.get(POD_ENTRY)
            if bubble is not None:
                if uid not in pods:
                    self._say(f"not matched: pod {uid} pod-level bubble (cpus {bubble}): its "
                              "pod is gone: released")
                    continue
                bubbles += 1
                pooled += self._pod_level(state, uid, by_key)
            for name, cpus in list(state.assignments.get(uid, {}).items()):
                if name == POD_ENTRY:
                    continue
                found = by_key.get((uid, name))
                if found is None:
                    if uid not in pods:
                        self._say(f"not matched: pod {uid} container {name} (cpus {cpus}): "
                                  "its pod is gone: released")
                        continue
                    # the pod lives, the container is not listed: an exited container (the
                    # runtime may list only live ones) or one not created yet: kept, as the
                    # kubelet keeps it, for its (re)start
                    adopted += 1
                    exited += 1
                    continue
                i, running = found
                runtime = CPUSet.parse(i.cpus) if i.cpus else None
                if runtime is not None and runtime != cpus:
                    state.delete(uid, name)
                    if bubble is None:  # (a pod-level pod's CPUs stay in its bubble)
                        state.default_set = state.default_set | cpus
                    msg = (f"disagrees: pod {i.namespace}/{i.pod_name} container {name}: kubelet "
                           f"checkpoint says cpus {cpus}, the runtime reports {runtime}; the "
                           "runtime wins")
                    log.warning("%s", msg)
                    self.lines.append(msg)
                    continue
                adopted += 1
                exited += not running
        summary = (f"adopted from {self.cpu.path}: {adopted} exclusive assignment(s) "
                   f"({exited} of exited or not listed containers of live pods), "
                   f"{bubbles} pod-level bubble(s) ({pooled} container(s) in a pod shared "
                   f"pool), {self.memory_entries} container(s) with memory blocks; "
                   f"shared pool {state.default_set}")
        log.info("%s", summary)
        self.lines.insert(0, summary)
        return self.lines

    def _pod_level(self, state: CPUManagerState, uid: str,
                   by_key: dict[tuple[str, str], tuple[ContainerInfo, bool]]) -> int:
        """A pod-level pod's container entries as the plugin keeps them (module docstring):
        drops the pool entries; returns how many."""
        conts = state.assignments[uid]
        bubble = conts[POD_ENTRY]
        pool = CPUSet()  # the pod shared pool the running containers use
        slices = CPUSet()
        for name in conts:
            found = by_key.get((uid, name))
            if found is None or not found[1] or not found[0].cpus:
                continue
            cur = CPUSet.parse(found[0].cpus)
            if container_qualifies(found[0]):
                slices = slices | cur
            else:
                pool = pool | cur
        if not pool:
            pool = bubble - slices
        dropped = 0
        for name, cpus in list(conts.items()):
            if name == POD_ENTRY:
                continue
            found = by_key.get((uid, name))
            if found is not None and found[1]:
                if container_qualifies(found[0]):
                    continue
            elif not (cpus & pool):
                continue  # an exited slice that leaves the pod shared pool as it is
            state.delete(uid, name)
            dropped += 1
        return dropped

    def _say(self, msg: str) -> None:
        log.info("%s", msg)
        self.lines.append(msg)


def seed(
    directory: str, cpu_policy: str, memory_policy: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, Adoption | None]:
    """``(cpu body, memory body, adoption)`` from the kubelet's checkpoints in
    ``directory`` (``(None, None, None)``: nothing to adopt). ``cpu body`` has the keys of
    the plugin's own ``cpu_manager_state``, ``memory body`` those of
    :meth:`~nri_cpumgr.cm.memorymanager.state.MemoryState.to_dict`. Logs one line for a
    checkpoint that is refused (corrupt, foreign policy, unreadable)."""
    if not directory:
        return None, None, None
    d = Path(directory)
    try:
        cpu = load_cpu_state(d / CPU_STATE)
    except KubeletCheckpointError as e:
        log.error("%s: not adopted; the runtime's cpusets are the truth", e)
        return None, None, None
    if cpu is None:
        return None, None, None
    if cpu.policy == "none":
        log.info("kubelet checkpoint %s: cpuManagerPolicy none, no exclusive CPUs to adopt",
                 cpu.path)
        return None, None, None
    if cpu.policy != "static":
        log.error("kubelet checkpoint %s: written by cpuManagerPolicy %r, which this plugin "
                  "does not adopt (only static): not adopted; the runtime's cpusets are the "
                  "truth", cpu.path, cpu.policy)
        return None, None, None
    if cpu_policy != "static":
        log.warning("kubelet checkpoint %s holds static assignments but cpuManagerPolicy is "
                    "%r: not adopted", cpu.path, cpu_policy)
        return None, None, None
    default = cpu.default_set
    for cpus in cpu.by_container_id.values():  # v1: placed at the first Synchronize
        default = default | cpus
    entries = {uid: {n: str(c) for n, c in conts.items()} for uid, conts in cpu.entries.items()}
    for uid, bubble in cpu.pod_entries.items():  # pod-level bubbles, as the plugin keeps them
        entries.setdefault(uid, {})[POD_ENTRY] = str(bubble)
    body: dict[str, Any] = {"policyName": "static", "defaultCpuSet": str(default),
                            "entries": entries}
    resized = {f"{uid}/{n}": {"from": str(b), "to": str(cpu.entries[uid][n]),
                              "promised": str(b)}
               for uid, conts in cpu.baselines.items() for n, b in conts.items()
               if n in cpu.entries.get(uid, {}) and b != cpu.entries[uid][n]}
    if resized:  # in-place resizes (v4 baselines): the CPUs each was admitted with
        body["resized"] = resized
    mem_body, n_mem = _memory(d, memory_policy)
    log.info("no checkpoint of our own: starting from the kubelet's %s (v%d, %d pod(s), %d "
             "pod-level)", cpu.path, cpu.version,
             len(set(cpu.entries) | set(cpu.pod_entries)) or len(cpu.by_container_id),
             len(cpu.pod_entries))
    return body, mem_body, Adoption(cpu, n_mem)


def _memory(d: Path, memory_policy: str) -> tuple[dict[str, Any] | None, int]:
    if memory_policy != "Static":
        return None, 0
    try:
        mem = load_memory_state(d / MEMORY_STATE)
    except KubeletCheckpointError as e:
        log.error("%s: memory not adopted", e)
        return None, 0
    if mem is None:
        return None, 0
    if mem.policy != "Static":
        log.error("kubelet checkpoint %s: written by memoryManagerPolicy %r: memory not "
                  "adopted", mem.path, mem.policy)
        return None, 0
    machine = {
        str(n): {
            "number_of_assignments": s.get("numberOfAssignments") or 0,
            "memory_map": {
                res: {"total_mem_size": t.get("total") or 0,
                      "system_reserved": t.get("systemReserved") or 0,
                      "allocatable": t.get("allocatable") or 0,
                      "reserved": t.get("reserved") or 0, "free": t.get("free") or 0}
                for res, t in (s.get("memoryMap") or {}).items() if t is not None},
            "cells": s.get("cells") or [],
        }
        for n, s in mem.machine_state.items() if s is not None
    }
    def blocks_of(blocks: Any) -> list[dict[str, Any]]:
        return [{"numa_affinity": b.get("numaAffinity") or [], "type": b.get("type"),
                 "size": b.get("size") or 0} for b in blocks or [] if b is not None]

    assignments = {
        uid: {name: blocks_of(blocks) for name, blocks in (conts or {}).items()}
        for uid, conts in mem.entries.items()
    }
    for uid, blocks in mem.pod_entries.items():
        # pod-level: the bubble's blocks alone, as the plugin keeps them (its containers take
        # their NUMA nodes from it) and as the kubelet counts them (validateState counts a
        # pod-level pod's blocks, not its containers' partitions of them)
        assignments[uid] = {POD_ENTRY: blocks_of(blocks)}
    n = sum(len(c) for c in assignments.values())
    return {"machine_state": machine, "assignments": assignments}, n


def adopt_memory(memory: Any, body: dict[str, Any]) -> None:
    """Start the Memory Manager (nri_cpumgr.cm.memorymanager.manager.MemoryManager) on the
    kubelet's memory state; fresh, with a warning, when it does not fit the machine and the
    reservation (the kubelet's own check, policy_static.go validateState)."""
    from nri_cpumgr.cm.memorymanager.state import MemoryState

    try:
        memory.start(MemoryState.from_dict(body))
    except Exception as e:  # noqa: BLE001 - any rejection means: not adopted
        log.warning("kubelet memory state rejected (%s): memory not adopted, starting fresh", e)
        memory.start(MemoryState())
