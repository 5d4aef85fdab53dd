"""The shape of the ``explanations`` records (``<stateDirectory>/explanations``): a body whose
checksum is right can still hold fields of the wrong type (written by hand, by another
tool, or by a bug); ``nri-cpumgr explain`` refuses it as corrupt, with the field that is
wrong, as the CPU checkpoint's readers do (nri_cpumgr.checkpoint.cpustate).

Pure: no I/O. The keys are those nri_cpumgr.explain.explainer.Explainer records."""

from __future__ import annotations

from typing import Any

from nri_cpumgr.checkpoint.cpustate import cpulist_problem, kind_of

#: the record's keys and their type (all may be absent but ``pod`` and ``container``)
_STR = ("pod", "podUID", "container", "containerID", "qos", "qosSource", "admission",
        "decision", "cpus", "mems", "reason", "why")
_INT_OR_NULL = ("cpuRequestMilli", "cpuLimitMilli", "memoryLimit", "exclusiveCpusAsked")
_TAKE_INT = ("socket", "numa", "l3", "count", "fullCores")
_TAKE_STR = ("cpus", "whole", "threads")


def explanations_problem(body: dict[str, Any]) -> str | None:
    """What is wrong with the explanations ``body``, as ``"<field>: <why>"``, or None."""
    live = body.get("containers", {})
    if not isinstance(live, dict):
        return f"containers: expected a mapping, got {kind_of(live)}"
    for cid, rec in live.items():
        why = _record_problem(rec)
        if why:
            return f"containers.{cid}{why}"
    refusals = body.get("refusals", [])
    if not isinstance(refusals, list):
        return f"refusals: expected a list, got {kind_of(refusals)}"
    for i, rec in enumerate(refusals):
        why = _record_problem(rec)
        if why:
            return f"refusals[{i}]{why}"
    return None


def _is_int(v: Any) -> bool:
    return type(v) is int


def _record_problem(rec: Any) -> str | None:
    if not isinstance(rec, dict):
        return f": expected a mapping, got {kind_of(rec)}"
    for key in ("pod", "container"):
        if key not in rec:
            return f": {key} is missing"
    for key in _STR:
        if key in rec and not isinstance(rec[key], str):
            return f".{key}: expected a string, got {kind_of(rec[key])}"
    for key in ("cpus", "mems"):
        if rec.get(key):
            why = cpulist_problem(rec[key])
            if why:
                return f".{key}: {why}"
    for key in ("resources", "config", "free", "hints", "affinity", "options"):
        if key in rec and not isinstance(rec[key], dict):
            return f".{key}: expected a mapping, got {kind_of(rec[key])}"
    for key, v in rec.get("resources", {}).items():
        if key in _INT_OR_NULL and v is not None and not _is_int(v):
            return f".resources.{key}: expected a number, got {kind_of(v)}"
    opts = rec.get("config", {}).get("cpuManagerPolicyOptions", {})
    if not isinstance(opts, dict):
        return f".config.cpuManagerPolicyOptions: expected a mapping, got {kind_of(opts)}"
    for node, cpus in rec.get("free", {}).items():
        why = cpulist_problem(cpus)
        if why:
            return f".free.{node}: {why}"
    for prov, hs in rec.get("hints", {}).items():
        if isinstance(hs, str):
            continue
        if not isinstance(hs, dict):
            return f".hints.{prov}: expected a mapping or a string, got {kind_of(hs)}"
        for res, lst in hs.items():
            if not isinstance(lst, list):
                return f".hints.{prov}.{res}: expected a list, got {kind_of(lst)}"
            for j, h in enumerate(lst):
                why = _hint_problem(h)
                if why:
                    return f".hints.{prov}.{res}[{j}]{why}"
    aff = rec.get("affinity", {})
    if aff and not isinstance(aff.get("note"), str):
        why = _hint_problem(aff)
        if why:
            return f".affinity{why}"
        for key, kind in (("admit", bool), ("policy", str)):
            if key in aff and type(aff[key]) is not kind:
                return f".affinity.{key}: expected a {kind.__name__}, got {kind_of(aff[key])}"
    take = rec.get("take", [])
    if not isinstance(take, list):
        return f".take: expected a list, got {kind_of(take)}"
    for j, st in enumerate(take):
        if not isinstance(st, dict):
            return f".take[{j}]: expected a mapping, got {kind_of(st)}"
        for key in _TAKE_INT:
            if key not in st:
                return f".take[{j}]: {key} is missing"
            if not _is_int(st[key]):
                return f".take[{j}].{key}: expected a number, got {kind_of(st[key])}"
        for key in _TAKE_STR:
            if key not in st:
                return f".take[{j}]: {key} is missing"
            if not isinstance(st[key], str):
                return f".take[{j}].{key}: expected a string, got {kind_of(st[key])}"
    for opt, effect in rec.get("options", {}).items():
        if not isinstance(effect, str):
            return f".options.{opt}: expected a string, got {kind_of(effect)}"
    return None


def _hint_problem(h: Any) -> str | None:
    if not isinstance(h, dict):
        return f": expected a mapping, got {kind_of(h)}"
    for key, kind in (("numa", str), ("preferred", bool)):
        if key not in h:
            return f": {key} is missing"
        if type(h[key]) is not kind:
            return f".{key}: expected a {kind.__name__}, got {kind_of(h[key])}"
    return None
