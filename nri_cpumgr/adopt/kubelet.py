"""Reading the kubelet's CPU and Memory Manager checkpoints.

Formats (kubelet ``pkg/kubelet/cm/cpumanager/state/checkpoint.go`` and
``pkg/kubelet/cm/memorymanager/state/checkpoint.go``, read in releases v1.35.4, v1.36.3 and
v1.37.2; the kubelet's own test vectors are in tests/unit/test_adopt_kubelet.py, files
written by the kubelet's code in tests/unit/test_adopt_kubelet_go.py):

* ``cpu_manager_state`` **v4** (written by every kubelet 1.37): the v2 fields inline (for
  older kubelets; their ``checksum`` is not what counts) plus ``data``, the JSON text of
  ``CPUManagerCheckpointData`` (``policyName``, ``defaultCpuSet``, ``entries``,
  ``podEntries``: pod uid -> ``{"cpuSet"}``, the pod-level bubble, and ``baselines``: pod
  uid -> container -> ``{"baseline"}``, the CPUs a container was admitted with before an
  in-place resize), and ``dataChecksum``: FNV-1a 32 of the text go-spew prints for the Go
  string ``data`` (``(string)`` followed by its bytes, :func:`data_checksum`). A file with a
  ``data`` or a ``dataChecksum`` is read as v4 only, as the kubelet does (no fall back);
* **v3** (kubelet 1.36 with the ``PodLevelResourceManagers`` gate on): the v2 fields plus
  ``podEntries``, with ``checksum`` over the struct (pod entries' cpusets printed as Go's
  ``cpuset.CPUSet``); no zero-checksum exemption;
* **v2** (every kubelet since 1.18 up to 1.36, the gate off):
  ``{"policyName", "defaultCpuSet", "entries": {pod uid: {container name: cpulist}},
  "checksum"}``;
* **v1** (before 1.18): ``"entries": {container id: cpulist}``; its checksum is computed on
  the struct under the v2 type name, as the kubelet does;
* ``memory_manager_state`` **v3** (kubelet 1.37): the v1 fields inline plus ``data``
  (``MemoryManagerCheckpointData``: ``policyName``, ``machineState``, ``entries``,
  ``podEntries``: pod uid -> ``{"memoryBlocks"}``) and ``dataChecksum``, as the CPU v4;
  **v2** (1.36, gate on): v1 plus ``podEntries``; **v1** (since 1.21): ``{"policyName",
  "machineState": {numa id: {"numberOfAssignments", "memoryMap": {resource: {"total",
  "systemReserved", "allocatable", "reserved", "free"}}, "cells"}}, "entries": {pod uid:
  {container name: [{"numaAffinity", "type", "size"}]}}, "checksum"}``.

The checksums are verified the kubelet's way (:mod:`nri_cpumgr.adopt.gohash`), under the
type names the kubelets of those releases print (a v2/v3 checksum under the legacy
``CPUManagerCheckpoint`` name or the versioned one); a ``checksum`` of 0 is accepted for v1
and v2, as the kubelet accepts it ("compatibility with old file backend"). JSON keys match
case-insensitively at the top level, as Go's ``encoding/json`` does.

Errors: :class:`KubeletCheckpointError`, one line naming the file and the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nri_cpumgr.adopt.gohash import GoType, checksum, decode, fnv1a32, spew
from nri_cpumgr.cpuset import CPUSet

STRING = GoType("string", "string")
CHECKSUM = GoType("int", "checksum.Checksum")
_ENTRIES = GoType("map", "map[string]map[string]string", STRING,
                  GoType("map", "map[string]string", STRING, STRING))
#: k8s.io/utils/cpuset.CPUSet as go-spew prints it (its unexported ``elems`` set)
_CPUSET = GoType("struct", "cpuset.CPUSet", fields=(
    ("elems", "elems", GoType("map", "map[int]struct {}", GoType("int", "int"),
                              GoType("struct", "struct {}"))),))
_POD_CPUS = GoType("map", "state.PodCPUAssignments", STRING, GoType(
    "struct", "state.PodEntry", fields=(("CPUSet", "cpuSet", _CPUSET),)))
CPU_V2 = GoType("struct", "state.CPUManagerCheckpoint", fields=(
    ("PolicyName", "policyName", STRING),
    ("DefaultCPUSet", "defaultCpuSet", STRING),
    ("Entries", "entries", _ENTRIES),
    ("Checksum", "checksum", CHECKSUM),
))
CPU_V3 = GoType("struct", "state.CPUManagerCheckpoint", fields=(
    ("PolicyName", "policyName", STRING),
    ("DefaultCPUSet", "defaultCpuSet", STRING),
    ("Entries", "entries", _ENTRIES),
    ("PodEntries", "podEntries", _POD_CPUS),
    ("Checksum", "checksum", CHECKSUM),
))
CPU_V1 = GoType("struct", "state.CPUManagerCheckpoint", fields=(
    ("PolicyName", "policyName", STRING),
    ("DefaultCPUSet", "defaultCpuSet", STRING),
    ("Entries", "entries", GoType("map", "map[string]string", STRING, STRING)),
    ("Checksum", "checksum", CHECKSUM),
))
#: the JSON shape of a v3 file (podEntries' cpuSet is a cpulist string in JSON)
_CPU_V3_JSON = replace(CPU_V3, fields=tuple(
    (g, j, GoType("map", "", STRING, GoType("struct", "", fields=(("CPUSet", "cpuSet", STRING),)))
     if j == "podEntries" else t) for g, j, t in CPU_V3.fields))
#: the JSON shapes of the v4 ``data`` (checked, not hashed: ``dataChecksum`` hashes the text)
_CPU_DATA = GoType("struct", "state.CPUManagerCheckpointData", fields=(
    ("PolicyName", "policyName", STRING),
    ("DefaultCPUSet", "defaultCpuSet", STRING),
    ("Entries", "entries", _ENTRIES),
    ("PodEntries", "podEntries", GoType("map", "", STRING, GoType(
        "struct", "", fields=(("CPUSet", "cpuSet", STRING),)))),
    ("Baselines", "baselines", GoType("map", "", STRING, GoType("map", "", STRING, GoType(
        "struct", "", fields=(("Baseline", "baseline", STRING),))))),
))
_V4_OUTER = GoType("struct", "", fields=(
    ("Data", "data", STRING), ("DataChecksum", "dataChecksum", CHECKSUM)))
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
_BLOCKS = GoType("slice", "[]state.Block", elem=_BLOCK)
_MACHINE = GoType("map", "state.NUMANodeMap", GoType("int", "int"), GoType("ptr", elem=_NODE))
_MEM_ENTRIES = GoType("map", "state.ContainerMemoryAssignments", STRING,
                      GoType("map", "map[string][]state.Block", STRING, _BLOCKS))
_POD_BLOCKS = GoType("map", "state.PodMemoryAssignments", STRING, GoType(
    "struct", "state.PodEntry", fields=(("MemoryBlocks", "memoryBlocks", _BLOCKS),)))
MEMORY = GoType("struct", "state.MemoryManagerCheckpoint", fields=(
    ("PolicyName", "policyName", STRING),
    ("MachineState", "machineState", _MACHINE),
    ("Entries", "entries", _MEM_ENTRIES),
    ("Checksum", "checksum", CHECKSUM),
))
MEMORY_V2 = GoType("struct", "state.MemoryManagerCheckpoint", fields=(
    ("PolicyName", "policyName", STRING),
    ("MachineState", "machineState", _MACHINE),
    ("Entries", "entries", _MEM_ENTRIES),
    ("PodEntries", "podEntries", _POD_BLOCKS),
    ("Checksum", "checksum", CHECKSUM),
))
_MEM_DATA = GoType("struct", "state.MemoryManagerCheckpointData", fields=(
    ("PolicyName", "policyName", STRING),
    ("MachineState", "machineState", _MACHINE),
    ("Entries", "entries", _MEM_ENTRIES),
    ("PodEntries", "podEntries", _POD_BLOCKS),
))


class KubeletCheckpointError(Exception):
    """A kubelet checkpoint that cannot be used: unreadable, not JSON, bad checksum, a
    format not supported. The message names the file."""


@dataclass
class KubeletCPUState:
    """A verified ``cpu_manager_state``. ``entries``: pod uid -> container name -> CPUs
    (v2-v4); ``by_container_id``: container id -> CPUs (v1); ``pod_entries``: pod uid -> the
    pod-level bubble (v3, v4); ``baselines``: pod uid -> container name -> the CPUs it was
    admitted with (v4, when the kubelet's ``InPlacePodVerticalScalingExclusiveCPUs`` gate
    was on)."""

    path: Path
    version: int
    policy: str
    default_set: CPUSet
    entries: dict[str, dict[str, CPUSet]] = field(default_factory=dict)
    by_container_id: dict[str, CPUSet] = field(default_factory=dict)
    pod_entries: dict[str, CPUSet] = field(default_factory=dict)
    baselines: dict[str, dict[str, CPUSet]] = field(default_factory=dict)


@dataclass
class KubeletMemoryState:
    """A verified ``memory_manager_state``: ``policy``, ``machine_state`` and ``entries`` in
    the kubelet's JSON shape (nri_cpumgr.cm.memorymanager.state.MemoryState.from_dict
    reads the same keys); ``pod_entries``: pod uid -> the pod-level blocks (v2, v3)."""

    path: Path
    policy: str
    machine_state: dict[str, Any]
    entries: dict[str, dict[str, list[dict[str, Any]]]]
    version: int = 1
    pod_entries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _err(path: Path, what: str) -> KubeletCheckpointError:
    return KubeletCheckpointError(f"kubelet checkpoint {path}: {what}")


def _load(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _err(path, f"unreadable: {e.strerror}") from None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise _err(path, f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise _err(path, "not a JSON object")
    return doc


def data_checksum(data: str) -> int:
    """The kubelet's ``dataChecksum`` of a v4 CPU / v3 memory checkpoint's ``data``:
    ``checksum.New(cp.Data)`` hashes go-spew's ``%#v`` of the Go string, which is
    ``(string)`` followed by the string's bytes, with FNV-1a 32 (kubelet
    checkpointmanager/checksum, k8s.io/utils/dump ForHash, v1.37.2)."""
    return fnv1a32(spew(data, STRING).encode("utf-8", "surrogateescape"))


def _data(path: Path, doc: dict[str, Any], t: GoType, defaults: tuple[str, ...]) \
        -> dict[str, Any] | None:
    """The verified, decoded ``data`` of a v4 (CPU) / v3 (memory) checkpoint; None when the
    file is of an older format (no ``data``, no ``dataChecksum``: the kubelet falls back)."""
    try:
        outer = decode(doc, _V4_OUTER)
    except ValueError as e:
        raise _err(path, str(e)) from None
    data, want = outer["data"] or "", outer["dataChecksum"] or 0
    if not data and not want:
        return None
    if data_checksum(data) != want:
        raise _err(path, f"dataChecksum {want} does not match its data (corrupt, or not "
                         "written by a kubelet)")
    try:
        inner = json.loads(data)
    except ValueError as e:
        raise _err(path, f"data is not JSON: {e}") from None
    if not isinstance(inner, dict):
        raise _err(path, "data is not a JSON object")
    try:
        return decode(inner, t, defaults)
    except ValueError as e:
        raise _err(path, f"data: {e}") from None


def _verify(path: Path, doc: dict[str, Any], t: GoType, defaults: tuple[str, ...],
            names: tuple[str, ...] = (), zero_ok: bool = True, prepare: Any = None,
            shape: GoType | None = None) -> dict[str, Any]:
    """Decode ``doc`` as ``t`` and verify its ``checksum`` under ``t``'s name or one of
    ``names`` (``prepare``: value -> the value go-spew sees, for fields whose Go type is
    not their JSON shape; ``shape``: the JSON shape to check, ``t`` by default)."""
    try:
        value = decode(doc, shape or t, defaults)
        spewed = prepare(value) if prepare is not None else value
    except ValueError as e:
        raise _err(path, str(e)) from None
    want = value.get("checksum") or 0
    if not want and zero_ok:
        return value
    for name in (t.name, *names):
        if checksum(spewed, replace(t, name=name)) == want:
            return value
    raise _err(path, "checksum mismatch (corrupt, or not written by a kubelet)")


def _cpus(path: Path, s: Any, where: str) -> CPUSet:
    try:
        return CPUSet.parse(s or "")
    except ValueError as e:
        raise _err(path, f"bad cpuset in {where}: {e}") from None


def _pod_cpus_for_spew(value: dict[str, Any]) -> dict[str, Any]:
    """podEntries as go-spew sees them: each ``cpuSet`` parsed into a cpuset.CPUSet (the
    kubelet's PodEntry.UnmarshalJSON); ValueError on a bad cpuset or shape."""
    out = dict(value)
    pods = {}
    for uid, e in (value.get("podEntries") or {}).items():
        if e is None:
            e = {}
        if not isinstance(e, dict) or not isinstance(e.get("cpuSet", ""), str):
            raise ValueError(f"podEntries.{uid}: not a pod entry")
        cpus = CPUSet.parse(e.get("cpuSet") or "")
        pods[uid] = {"cpuSet": {"elems": {str(c): {} for c in cpus}}}
    out["podEntries"] = pods if value.get("podEntries") is not None else None
    return out


def _pod_cpus(path: Path, value: dict[str, Any]) -> dict[str, CPUSet]:
    return {uid: _cpus(path, (e or {}).get("cpuSet"), f"podEntries.{uid}")
            for uid, e in (value.get("podEntries") or {}).items()}


def load_cpu_state(path: str | Path) -> KubeletCPUState | None:
    """The kubelet's ``cpu_manager_state`` at ``path`` (v1-v4), verified; ``None`` when
    absent. Raises :class:`KubeletCheckpointError`."""
    path = Path(path)
    doc = _load(path)
    if doc is None:
        return None
    data = _data(path, doc, _CPU_DATA, ("entries", "podEntries", "baselines"))
    if data is not None:
        return KubeletCPUState(
            path, 4, data["policyName"] or "",
            _cpus(path, data["defaultCpuSet"], "defaultCpuSet"),
            entries={uid: {n: _cpus(path, c, f"entries.{uid}.{n}")
                           for n, c in (conts or {}).items()}
                     for uid, conts in (data["entries"] or {}).items()},
            pod_entries=_pod_cpus(path, data),
            baselines={uid: {n: _cpus(path, (b or {}).get("baseline"),
                                      f"baselines.{uid}.{n}")
                             for n, b in (conts or {}).items()}
                       for uid, conts in (data["baselines"] or {}).items()})
    entries = doc.get("entries")
    if entries is None:
        entries = next((v for k, v in doc.items() if k.lower() == "entries"), None)
    v1 = isinstance(entries, dict) and any(isinstance(x, str) for x in entries.values())
    version = 1
    if v1:
        value = _verify(path, doc, CPU_V1, ("entries",))
    else:  # v3, v2, then v1 (no entries: either), as the kubelet tries them
        try:
            value = _verify(path, doc, CPU_V3, ("entries", "podEntries"),
                            ("state.CPUManagerCheckpointV3",), zero_ok=False,
                            prepare=_pod_cpus_for_spew, shape=_CPU_V3_JSON)
            version = 3
        except KubeletCheckpointError:
            try:
                value = _verify(path, doc, CPU_V2, ("entries",), ("state.CPUManagerCheckpointV2",))
                version = 2
            except KubeletCheckpointError:
                if entries:
                    raise
                value = _verify(path, doc, CPU_V1, ("entries",))
                v1 = True
    default = _cpus(path, value["defaultCpuSet"], "defaultCpuSet")
    if v1:
        return KubeletCPUState(path, 1, value["policyName"] or "", default,
                               by_container_id={k: _cpus(path, c, f"entries.{k}")
                                                for k, c in value["entries"].items()})
    return KubeletCPUState(
        path, version, value["policyName"] or "", default,
        entries={uid: {n: _cpus(path, c, f"entries.{uid}.{n}")
                       for n, c in (conts or {}).items()}
                 for uid, conts in value["entries"].items()},
        pod_entries=_pod_cpus(path, value) if version == 3 else {})


def load_memory_state(path: str | Path) -> KubeletMemoryState | None:
    """The kubelet's ``memory_manager_state`` at ``path`` (v1-v3), verified; ``None`` when
    absent. Raises :class:`KubeletCheckpointError`."""
    path = Path(path)
    doc = _load(path)
    if doc is None:
        return None
    value = _data(path, doc, _MEM_DATA, ("entries", "machineState", "podEntries"))
    version = 3
    if value is None:
        try:
            value = _verify(path, doc, MEMORY_V2, ("entries", "machineState", "podEntries"),
                            ("state.MemoryManagerCheckpointV2",), zero_ok=False)
            version = 2
        except KubeletCheckpointError:
            value = _verify(path, doc, MEMORY, ("entries", "machineState"),
                            ("state.MemoryManagerCheckpointV1",))
            version = 1
    pods = {} if version == 1 else {uid: list((e or {}).get("memoryBlocks") or [])
                                    for uid, e in (value.get("podEntries") or {}).items()}
    return KubeletMemoryState(path, value["policyName"] or "", value["machineState"] or {},
                              value["entries"] or {}, version, pods)


def cpu_checksum(value: dict[str, Any], version: int = 2) -> int:
    """The checksum the kubelet writes for a ``cpu_manager_state`` body (tests, and writing
    a checkpoint in the kubelet's format; the v2 fields of a v4 file too)."""
    if version == 3:
        return checksum(_pod_cpus_for_spew(value), CPU_V3)
    return checksum(value, CPU_V1 if version == 1 else CPU_V2)


def memory_checksum(value: dict[str, Any], version: int = 1) -> int:
    """The checksum the kubelet writes for a ``memory_manager_state`` body (v1, v2)."""
    return checksum(value, MEMORY_V2 if version == 2 else MEMORY)
