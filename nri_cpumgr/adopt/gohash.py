"""The kubelet's checkpoint checksum, reproduced.

The kubelet's checkpoints (``cpu_manager_state``, ``memory_manager_state``) carry a
``checksum``: FNV-1a 32 over the text go-spew prints for the checkpoint struct with
``%#v`` (settings ``Indent " ", SortKeys, DisableMethods, SpewKeys``; the checksum field set
to 0), read by kubelet ``checkpointmanager/checksum`` (``New``/``Verify``, through
``hashutil.DeepHashObject`` or ``dump.ForHash``, which print these structs identically).
For the v1 CPU checkpoint and the memory checkpoint written before pod-level resources the
kubelet prints the struct under its old type name (``strings.Replace(..., "...V1", "...",
1)``), which is the name used here.

What go-spew prints (github.com/davecgh/go-spew format.go, as packaged by Debian
``golang-github-davecgh-go-spew-dev`` 1.1.1): a value's Go type in parentheses unless it is a
map key, map value or slice element; a pointer as ``(*T)`` (or ``<*>`` where the type is
not shown) followed by the value; strings and numbers bare; maps as ``map[k:v k:v]`` with
keys sorted; slices as ``[a b]``; structs as ``{Field:value Field:value}``; nil maps and
slices as ``<nil>``.

The Go types are described with :class:`GoType` (only what the kubelet's checkpoint structs
use: strings, integers, maps, slices, structs, pointers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FNV32_OFFSET = 0x811C9DC5
FNV32_PRIME = 0x01000193


def fnv1a32(data: bytes) -> int:
    """FNV-1a, 32 bit (Go ``hash/fnv.New32a``)."""
    h = FNV32_OFFSET
    for b in data:
        h = ((h ^ b) * FNV32_PRIME) & 0xFFFFFFFF
    return h


@dataclass(frozen=True)
class GoType:
    """A Go type: ``kind`` one of ``string``, ``int``, ``map``, ``slice``, ``struct``, ``ptr``;
    ``name`` as ``reflect.Type.String()`` prints it (``"map[string]string"``,
    ``"state.NUMANodeMap"``, ``"checksum.Checksum"``); ``key``/``elem`` for maps, slices and
    pointers; ``fields`` (Go name, JSON name, type) for structs."""

    kind: str
    name: str = ""
    key: GoType | None = None
    elem: GoType | None = None
    fields: tuple[tuple[str, str, GoType], ...] = field(default=())


def spew(value: Any, t: GoType, hide_type: bool = False) -> str:
    """go-spew's ``%#v`` of ``value`` (a JSON-decoded value; ``None`` = Go nil) as type ``t``."""
    if t.kind == "ptr":
        assert t.elem is not None
        head = "<*>" if hide_type else f"(*{t.elem.name})"
        if value is None:
            return "<nil>" if hide_type else head + "<nil>"
        return head + spew(value, t.elem, True)
    head = "" if hide_type else f"({t.name})"
    if t.kind == "string":
        return head + str(value)
    if t.kind == "int":
        return head + str(int(value))
    if t.kind == "map":
        if value is None:
            return head + "<nil>"
        assert t.key is not None and t.elem is not None
        keys = sorted(value, key=_sort_key(t.key))
        return head + "map[" + " ".join(
            spew(_key(k, t.key), t.key, True) + ":" + spew(value[k], t.elem, True)
            for k in keys) + "]"
    if t.kind == "slice":
        if value is None:
            return head + "<nil>"
        assert t.elem is not None
        return head + "[" + " ".join(spew(v, t.elem, True) for v in value) + "]"
    if t.kind == "struct":
        return head + "{" + " ".join(
            f"{name}:" + spew(value.get(json_name) if value is not None else None, ft)
            for name, json_name, ft in t.fields) + "}"
    raise ValueError(f"go type kind {t.kind!r} not supported")


def _key(k: Any, t: GoType) -> Any:
    return int(k) if t.kind == "int" else k


def _sort_key(t: GoType) -> Any:
    if t.kind == "int":
        return lambda k: int(k)
    return lambda k: str(k).encode()


def checksum(value: Mapping[str, Any], t: GoType) -> int:
    """The kubelet's checksum of a checkpoint ``value`` (JSON-decoded, Go field defaults
    applied) printed as struct type ``t`` behind a pointer, its ``checksum`` taken as 0."""
    doc = dict(value)
    doc["checksum"] = 0
    return fnv1a32(spew(doc, GoType("ptr", elem=t)).encode())


def decode(doc: Mapping[str, Any], t: GoType, defaults: Sequence[str] = ()) -> dict[str, Any]:
    """Go's ``json.Unmarshal`` into struct ``t`` at the top level: each field found under its
    JSON name, else case-insensitively (Go's rule), else absent (``None``: nil), except the
    ``defaults`` fields, which the kubelet's constructor pre-sets to empty maps. Raises
    ValueError when a value has the wrong JSON type."""
    out: dict[str, Any] = {}
    lower = {k.lower(): k for k in doc}
    for _, json_name, ft in t.fields:
        k = json_name if json_name in doc else lower.get(json_name.lower())
        v = doc.get(k) if k is not None else None
        if v is None and json_name in defaults and (k is None):
            v = {}
        _check(v, ft, json_name)
        out[json_name] = v
    return out


def _check(v: Any, t: GoType, where: str) -> None:
    if v is None:
        if t.kind in ("string", "int"):
            return
        return
    ok = {
        "string": isinstance(v, str),
        "int": isinstance(v, int) and not isinstance(v, bool),
        "map": isinstance(v, dict),
        "slice": isinstance(v, list),
        "struct": isinstance(v, dict),
        "ptr": True,
    }[t.kind]
    if not ok:
        raise ValueError(f"{where}: cannot unmarshal {type(v).__name__} into Go value of type "
                         f"{t.name or t.kind}")
    if t.kind == "ptr":
        assert t.elem is not None
        _check(v, t.elem, where)
    elif t.kind == "map":
        assert t.elem is not None and t.key is not None
        for k, x in v.items():
            if t.key.kind == "int":
                try:
                    int(k)
                except ValueError:
                    raise ValueError(f"{where}: map key {k!r} is not an integer") from None
            _check(x, t.elem, f"{where}.{k}")
    elif t.kind == "slice":
        assert t.elem is not None
        for i, x in enumerate(v):
            _check(x, t.elem, f"{where}[{i}]")
    elif t.kind == "struct":
        for _, jn, ft in t.fields:
            _check(v.get(jn), ft, f"{where}.{jn}")
