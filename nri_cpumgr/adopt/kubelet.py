"""Reading the kubelet's CPU and Memory Manager checkpoints.

Formats (kubelet ``pkg/kubelet/cm/cpumanager/state/checkpoint.go`` and
``pkg/kubelet/cm/memorymanager/state/checkpoint.go``; the kubelet's own test vectors are in
tests/unit/test_adopt_kubelet.py):

* ``cpu_manager_state`` **v2** (written by every kubelet since 1.18, so since 1.20):
  ``{"policyName", "defaultCpuSet", "entries": {pod uid: {container name: cpulist}},
  "checksum"}``;
* ``cpu_manager_state`` **v1** (before 1.18): ``"entries": {container id: cpulist}``; its
  checksum is computed on the struct under the v2 type name, as the kubelet does;
* ``memory_manager_state`` (since 1.21, Memory Manager): ``{"policyName", "machineState":
  {numa id: {"numberOfAssignments", "memoryMap": {resource: {"total", "systemReserved",
  "allocatable", "reserved", "free"}}, "cells"}}, "entries": {pod uid: {container name:
  [{"numaAffinity", "type", "size"}]}}, "checksum"}``.

The checksum is verified the kubelet's way (:mod:`nri_cpumgr.adopt.gohash`); a checksum of 0
is accepted, as the kubelet accepts it ("compatibility with old file backend"). JSON keys
match case-insensitively, as Go's ``encoding/json`` does. Newer formats (pod-level entries,
``data``/``dataChecksum`` sections) are reported as not supported.

Errors: :class:`KubeletCheckpointError`, one line naming the file and the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nri_cpumgr.adopt.gohash import GoType, checksum, decode
from nri_cpumgr.cpuset import CPUSet

STRING = GoType("string", "string")
CHECKSUM = GoType("int", "checksum.Checksum")
CPU_V2 = GoType("struct", "state.CPUManagerCheckpoint", fields=(
    ("PolicyName", "policyName", STRING),
    ("DefaultCPUSet", "defaultCpuSet", STRING),
    ("Entries", "entries", GoType("map", "map[string]map[string]string", STRING,
                                  GoType("map", "map[string]string", STRING, STRING))),
    ("Checksum", "checksum", CHECKSUM),
))
CPU_V1 = GoType("struct", "state.CPUManagerCheckpoint", fields=(
    ("PolicyName", "policyName", STRING),
    ("DefaultCPUSet", "defaultCpuSet", STRING),
    ("Entries", "entries", GoType("map", "map[string]string", STRING, STRING)),
    ("Checksum", "checksum", CHECKSUM),
))
_UINT64 = GoType("int", "uint64")
_INTS = GoType("slice", "[]int", elem=GoType("int", "int"))
_RESOURCE = GoType("string", "v1.ResourceName")
_TABLE = GoType("struct", "state.MemoryTable", fields=(
    ("TotalMemSize", "total", _UINT64),
    ("SystemReserved", "systemReserved", _UINT64),
    ("Allocatable", "allocatable", _UINT64),
    ("Reserved", "reserved", _UINT64),
    ("Free", "free", _UINT64),
))
_NODE = GoType("struct", "state.NUMANodeState", fields=(
    ("NumberOfAssignments", "numberOfAssignments", GoType("int", "int")),
    ("MemoryMap", "memoryMap", GoType("map", "map[v1.ResourceName]*state.MemoryTable",
                                      _RESOURCE, GoType("ptr", elem=_TABLE))),
    ("Cells", "cells", _INTS),
))
_BLOCK = GoType("struct", "state.Block", fields=(
    ("NUMAAffinity", "numaAffinity", _INTS),
    ("Type", "type", _RESOURCE),
    ("Size", "size", _UINT64),
))
MEMORY = GoType("struct", "state.MemoryManagerCheckpoint", fields=(
    ("PolicyName", "policyName", STRING),
    ("MachineState", "machineState", GoType("map", "state.NUMANodeMap", GoType("int", "int"),
                                            GoType("ptr", elem=_NODE))),
    ("Entries", "entries", GoType("map", "state.ContainerMemoryAssignments", STRING,
                                  GoType("map", "map[string][]state.Block", STRING,
                                         GoType("slice", "[]state.Block", elem=_BLOCK)))),
    ("Checksum", "checksum", CHECKSUM),
))

_NEWER = ("podEntries", "data", "dataChecksum")


class KubeletCheckpointError(Exception):
    """A kubelet checkpoint that cannot be used: unreadable, not JSON, bad checksum, a
    format not supported. The message names the file."""


@dataclass
class KubeletCPUState:
    """A verified ``cpu_manager_state``. ``entries``: pod uid -> container name -> CPUs
    (v2); ``by_container_id``: container id -> CPUs (v1)."""

    path: Path
    version: int
    policy: str
    default_set: CPUSet
    entries: dict[str, dict[str, CPUSet]] = field(default_factory=dict)
    by_container_id: dict[str, CPUSet] = field(default_factory=dict)


@dataclass
class KubeletMemoryState:
    """A verified ``memory_manager_state``: ``policy``, ``machine_state`` and ``entries`` in
    the kubelet's JSON shape (nri_cpumgr.cm.memorymanager.state.MemoryState.from_dict
    reads the same keys)."""

    path: Path
    policy: str
    machine_state: dict[str, Any]
    entries: dict[str, dict[str, list[dict[str, Any]]]]


def _load(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise KubeletCheckpointError(f"kubelet checkpoint {path}: unreadable: {e.strerror}") \
            from None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise KubeletCheckpointError(f"kubelet checkpoint {path}: not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise KubeletCheckpointError(f"kubelet checkpoint {path}: not a JSON object")
    newer = [k for k in _NEWER if k in doc]
    if newer:
        raise KubeletCheckpointError(
            f"kubelet checkpoint {path}: a newer format (fields {newer}) that this version "
            "does not read")
    return doc


def _verify(path: Path, doc: dict[str, Any], t: GoType, defaults: tuple[str, ...]) \
        -> dict[str, Any]:
    try:
        value = decode(doc, t, defaults)
    except ValueError as e:
        raise KubeletCheckpointError(f"kubelet checkpoint {path}: {e}") from None
    want = value.get("checksum") or 0
    if want and checksum(value, t) != want:
        raise KubeletCheckpointError(
            f"kubelet checkpoint {path}: checksum mismatch (corrupt, or not written by a kubelet)")
    return value


def load_cpu_state(path: str | Path) -> KubeletCPUState | None:
    """The kubelet's ``cpu_manager_state`` at ``path``, verified; ``None`` when absent.
    Raises :class:`KubeletCheckpointError`."""
    path = Path(path)
    doc = _load(path)
    if doc is None:
        return None
    entries = doc.get("entries")
    if entries is None:
        entries = next((v for k, v in doc.items() if k.lower() == "entries"), None)
    v1 = isinstance(entries, dict) and any(isinstance(x, str) for x in entries.values())
    if v1:
        value = _verify(path, doc, CPU_V1, ("entries",))
    else:  # v2 first, then v1 (no entries: either), as the kubelet tries them
        try:
            value = _verify(path, doc, CPU_V2, ("entries",))
        except KubeletCheckpointError:
            if entries:
                raise
            value = _verify(path, doc, CPU_V1, ("entries",))
            v1 = True
    try:
        default = CPUSet.parse(value["defaultCpuSet"] or "")
        if v1:
            return KubeletCPUState(path, 1, value["policyName"] or "", default,
                                   by_container_id={k: CPUSet.parse(c)
                                                    for k, c in value["entries"].items()})
        return KubeletCPUState(path, 2, value["policyName"] or "", default, entries={
            uid: {n: CPUSet.parse(c) for n, c in (conts or {}).items()}
            for uid, conts in value["entries"].items()})
    except ValueError as e:
        raise KubeletCheckpointError(f"kubelet checkpoint {path}: bad cpuset: {e}") from None


def load_memory_state(path: str | Path) -> KubeletMemoryState | None:
    """The kubelet's ``memory_manager_state`` at ``path``, verified; ``None`` when absent.
    Raises :class:`KubeletCheckpointError`."""
    path = Path(path)
    doc = _load(path)
    if doc is None:
        return None
    value = _verify(path, doc, MEMORY, ("entries", "machineState"))
    return KubeletMemoryState(path, value["policyName"] or "", value["machineState"] or {},
                              value["entries"] or {})


def cpu_checksum(value: dict[str, Any], version: int = 2) -> int:
    """The checksum the kubelet writes for a ``cpu_manager_state`` body (tests, and writing
    a checkpoint in the kubelet's format)."""
    return checksum(value, CPU_V1 if version == 1 else CPU_V2)


def memory_checksum(value: dict[str, Any]) -> int:
    """The checksum the kubelet writes for a ``memory_manager_state`` body."""
    return checksum(value, MEMORY)
