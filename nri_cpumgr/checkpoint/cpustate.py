"""The shape of the CPU manager's checkpoint body (``cpu_manager_state``): a body whose
checksum is right can still be wrong in its fields (written by hand, by another tool, or by
a bug); it is refused as a corrupt file is, with the field that is wrong, so that every
reader (the plugin's start, ``status``, ``plan --state``, ``run --check-config``) says so in
one line and the plugin rebuilds its state from the runtime's Synchronize.

Pure: no I/O. The keys are those nri_cpumgr.cm.container_manager.ContainerManager.checkpoint
writes (the kubelet's ``policyName``, ``defaultCpuSet``, ``entries`` and the plugin's
``reservedCpuSet``, ``containers`` rows and pod-level sections)."""

from __future__ import annotations

from typing import Any

from nri_cpumgr.cpuset import CPUSet, CPUSetError

#: the row keys every reader uses, and their type
_ROW_REQUIRED = {"id": str, "pod": str, "podUID": str, "container": str, "qos": str,
                 "exclusive": bool}
#: the row keys that may be absent, and their type
_ROW_OPTIONAL = {"cpus": str, "mems": str, "numa": str, "stopped": bool, "pool": str}
_CPULISTS = ("cpus", "mems", "numa")
_QOS = ("Guaranteed", "Burstable", "BestEffort")
_MAPPINGS = ("podPools", "resized", "admittedPods")


def is_cpu_state(body: dict[str, Any]) -> bool:
    """Whether ``body`` is a CPU manager checkpoint body (it has ``defaultCpuSet``)."""
    return "defaultCpuSet" in body


def cpu_state_problem(body: dict[str, Any]) -> str | None:
    """What is wrong with the CPU manager checkpoint ``body``, as ``"<field>: <why>"``, or
    None when its shape is right (the policy still decides whether it fits the machine)."""
    name = body.get("policyName")
    if name is not None and not isinstance(name, str):
        return f"policyName: expected a string, got {kind_of(name)}"
    for key in ("defaultCpuSet", "reservedCpuSet"):
        if key in body:
            why = cpulist_problem(body[key])
            if why:
                return f"{key}: {why}"
    entries = body.get("entries", {})
    if not isinstance(entries, dict):
        return f"entries: expected a mapping, got {kind_of(entries)}"
    for uid, conts in entries.items():
        if not isinstance(conts, dict):
            return f"entries.{uid}: expected a mapping, got {kind_of(conts)}"
        for cname, cpus in conts.items():
            why = cpulist_problem(cpus)
            if why:
                return f"entries.{uid}.{cname}: {why}"
    rows = body.get("containers", [])
    if not isinstance(rows, list):
        return f"containers: expected a list, got {kind_of(rows)}"
    parsed: set[str] = set()  # (the cpulists seen right: most rows repeat the shared pool's)
    for i, row in enumerate(rows):
        why = _row_problem(row, parsed)
        if why:
            return f"containers[{i}]{why}"
    for key in _MAPPINGS:
        if key in body and not isinstance(body[key], dict):
            return f"{key}: expected a mapping, got {kind_of(body[key])}"
    for key, required, optional in _SECTIONS:
        for name, doc in body.get(key, {}).items():
            why = _section_problem(doc, required, optional)
            if why:
                return f"{key}.{name}{why}"
    return None


#: the pod-level sections whose values are mappings of cpulists: (key, the cpulist keys
#: every reader uses, those that may be absent)
_SECTIONS = (("podPools", ("bubble", "podSharedPool"), ("mems",)),
             ("resized", ("from", "to", "promised"), ()))


def _section_problem(doc: Any, required: tuple[str, ...], optional: tuple[str, ...]
                     ) -> str | None:
    if not isinstance(doc, dict):
        return f": expected a mapping, got {kind_of(doc)}"
    for key in required + optional:
        if key not in doc:
            if key in required:
                return f": {key} is missing"
            continue
        why = cpulist_problem(doc[key])
        if why:
            return f".{key}: {why}"
    return None


def _row_problem(row: Any, parsed: set[str]) -> str | None:
    if not isinstance(row, dict):
        return f": expected a mapping, got {kind_of(row)}"
    for key, kind in _ROW_REQUIRED.items():
        if key not in row:
            return f": {key} is missing"
        if type(row[key]) is not kind:
            return f".{key}: expected a {kind.__name__}, got {kind_of(row[key])}"
    for key, kind in _ROW_OPTIONAL.items():
        if key in row and type(row[key]) is not kind:
            return f".{key}: expected a {kind.__name__}, got {kind_of(row[key])}"
    if row["qos"] not in _QOS:
        return f".qos: {row['qos']!r} is not one of {', '.join(_QOS)}"
    for key in _CPULISTS:
        value = row.get(key)
        if value is not None and value not in parsed:
            why = cpulist_problem(value)
            if why:
                return f".{key}: {why}"
            parsed.add(value)
    return None


def cpulist_problem(value: Any) -> str | None:
    """Why ``value`` is not a cpulist string (the parser's error), or None."""
    if not isinstance(value, str):
        return f"expected a cpulist string, got {kind_of(value)}"
    try:
        CPUSet.parse(value)
    except CPUSetError as e:
        return str(e)
    return None


def kind_of(value: Any) -> str:
    """``value``'s JSON kind, for messages (``a number``, ``a mapping``, ``null``)."""
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "a list", dict: "a mapping", type(None): "null"}
    return names.get(type(value), type(value).__name__)
