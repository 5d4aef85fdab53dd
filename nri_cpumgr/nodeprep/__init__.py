"""Node preparation: turn NRI on in the container runtime's configuration when it is off
(``nri-cpumgr enable-nri``; the chart's opt-in ``nodePreparation`` init container runs it).

Pure text edits here (:func:`containerd_config`, :func:`crio_dropin`), I/O in :mod:`.cli`.
Each returns the new text, equal to the old one when NRI is on already (so running it again
changes nothing). The edits keep every other line of the file as it was.

containerd (1.7: config version 2, NRI off by default; 2.x: version 3, on by default): the
``[plugins."io.containerd.nri.v1.nri"]`` table's ``disable`` set to ``false``; the table added
(with ``disable = false``) when a version-2 config has none. Keys: containerd 1.7.24
``pkg/nri/config.go`` / 2.1 ``internal/nri/config.go`` (``disable``, ``socket_path``, ...).
CRI-O (1.26+): a drop-in for ``/etc/crio/crio.conf.d/`` with ``[crio.nri] enable_nri = true``
(crio.conf(5), "CRIO.NRI TABLE").
"""

from __future__ import annotations

import difflib
import re
import tomllib

NRI_TABLE = 'plugins."io.containerd.nri.v1.nri"'
_HEADER = re.compile(r'^\s*\[\s*plugins\s*\.\s*"io\.containerd\.nri\.v1\.nri"\s*\]\s*(#.*)?$')
_ANY_HEADER = re.compile(r"^\s*\[")
_DISABLE = re.compile(r"^(\s*)disable(\s*)=(\s*)(true|false)(\s*(#.*)?)$")

CRIO_DROPIN = """# written by nri-cpumgr enable-nri (the chart's nodePreparation): NRI on
[crio.nri]
enable_nri = true
"""


class NodePrepError(ValueError):
    """The runtime's configuration cannot be read (not TOML) or the edit did not turn NRI on."""


def nri_enabled(text: str) -> bool:
    """Whether a containerd config (TOML text) has NRI on: ``disable = false`` in its NRI
    table, or no such table in a version-3 config (containerd 2.x's default is on). Raises
    :class:`NodePrepError` on text that is not TOML."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise NodePrepError(f"not a TOML file: {e}") from None
    table = doc.get("plugins", {}).get("io.containerd.nri.v1.nri")
    if table is None:
        return int(doc.get("version", 1)) >= 3
    return table.get("disable", int(doc.get("version", 1)) < 3) is False


def containerd_config(text: str) -> str:
    """``text`` (containerd's config.toml) with NRI on; unchanged when it is on already."""
    if nri_enabled(text):
        return text
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if _HEADER.match(ln.rstrip("\n"))), None)
    if start is None:
        if not text.strip():  # no config: containerd's defaults; version 2 reads on 1.7 and 2.x
            text = "version = 2\n"
        sep = "" if text.endswith("\n") else "\n"
        new = text + sep + f"\n[{NRI_TABLE}]\n  disable = false\n"
    else:
        end = next((i for i in range(start + 1, len(lines))
                    if _ANY_HEADER.match(lines[i])), len(lines))
        for i in range(start + 1, end):
            m = _DISABLE.match(lines[i].rstrip("\n"))
            if m:
                nl = "\n" if lines[i].endswith("\n") else ""
                lines[i] = f"{m.group(1)}disable{m.group(2)}={m.group(3)}false{m.group(5)}{nl}"
                break
        else:
            indent = re.match(r"^(\s*)", lines[start + 1]).group(1) if start + 1 < end else "  "
            lines.insert(start + 1, f"{indent}disable = false\n")
        new = "".join(lines)
    if not nri_enabled(new):
        raise NodePrepError("could not turn NRI on in this configuration")
    return new


def crio_dropin(existing: str | None) -> str:
    """The CRI-O drop-in's text: ``existing`` when it turns NRI on already, else ours."""
    if existing is not None:
        try:
            if tomllib.loads(existing).get("crio", {}).get("nri", {}).get("enable_nri") is True:
                return existing
        except tomllib.TOMLDecodeError:
            pass
    return CRIO_DROPIN


def diff(path: str, old: str, new: str) -> str:
    """A unified diff of the edit (empty when nothing changes)."""
    return "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True),
                                        fromfile=path, tofile=path))
