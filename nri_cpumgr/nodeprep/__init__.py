"""Node preparation: turn NRI on in the container runtime's configuration when it is off
(``nri-cpumgr enable-nri``; the chart's opt-in ``nodePreparation`` init container runs it).

Pure text edits here (:func:`containerd_config`, :func:`crio_dropin`), I/O in :mod:`.cli`.
Each returns the new text, equal to the old one when NRI is on already (so running it again
changes nothing). The edits keep every other line of the file as it was.

"On" means NRI runs *and* accepts externally started plugins (the DaemonSet's plugin is one):
``disable_connections = true`` (containerd) / ``nri_disable_connections = true`` (CRI-O)
keeps NRI running but refuses every connection to its socket, so it counts as off and is set
to ``false`` (containerd/nri ``pkg/adaptation`` ``WithDisabledExternalConnections``: "disable
connections from externally started plugins"; default ``false`` in both runtimes).

containerd (1.7: config version 2, NRI off by default; 2.x: version 3, on by default): the
``[plugins."io.containerd.nri.v1.nri"]`` table's ``disable`` set to ``false``; the table added
(with ``disable = false``) when a version-2 config has none; its ``disable_connections`` set
to ``false`` when ``true``. Keys: containerd 1.7.35 ``pkg/nri/config.go`` / 2.4.2
``internal/nri/config.go`` (``disable``, ``disable_connections``, ``socket_path``, ...).
CRI-O (1.26+): a drop-in for ``/etc/crio/crio.conf.d/`` with ``[crio.nri] enable_nri = true``
and ``nri_disable_connections = false`` (crio.conf(5), "CRIO.NRI TABLE"; CRI-O 1.36.3
``internal/config/nri/nri.go``: ``enable_nri``, ``nri_listen``, ``nri_disable_connections``).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Sequence

NRI_TABLE = 'plugins."io.containerd.nri.v1.nri"'
_HEADER = re.compile(r'^\s*\[\s*plugins\s*\.\s*"io\.containerd\.nri\.v1\.nri"\s*\]\s*(#.*)?$')
_ANY_HEADER = re.compile(r"^\s*\[")
_KEY = r"^(\s*)({key})(\s*)=(\s*)(true|false)(\s*(#.*)?)$"

DEFAULT_SOCKET = "/var/run/nri/nri.sock"
"""NRI's default socket (containerd/nri ``pkg/api`` ``DefaultSocketPath``): containerd's
``socket_path`` and CRI-O's ``nri_listen`` when unset, and the plugin's ``socketPath``."""

CRIO_DROPIN = """# written by nri-cpumgr enable-nri (the chart's nodePreparation): NRI on, open to
# externally started plugins (the DaemonSet's)
[crio.nri]
enable_nri = true
nri_disable_connections = false
"""


class NodePrepError(ValueError):
    """The runtime's configuration cannot be read (not TOML) or the edit did not turn NRI on."""


def _toml(text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise NodePrepError(f"not a TOML file: {e}") from None


def _nri_table(doc: dict) -> dict | None:
    table = doc.get("plugins", {}).get("io.containerd.nri.v1.nri")
    return table if isinstance(table, dict) else None


def nri_enabled(text: str) -> bool:
    """Whether a containerd config (TOML text) has NRI on and open to external plugins:
    ``disable = false`` in its NRI table (or no such table, or no ``disable`` in it, in a
    version-3 config: containerd 2.x's default is on) and no ``disable_connections = true``.
    Raises :class:`NodePrepError` on text that is not TOML."""
    doc = _toml(text)
    v3 = int(doc.get("version", 1)) >= 3
    table = _nri_table(doc)
    if table is None:
        return v3
    return table.get("disable", not v3) is False and table.get("disable_connections") is not True


def containerd_socket(text: str) -> str:
    """The NRI socket a containerd config (TOML text) listens on: its NRI table's
    ``socket_path``, else :data:`DEFAULT_SOCKET` (containerd's default). Raises
    :class:`NodePrepError` on text that is not TOML."""
    table = _nri_table(_toml(text)) or {}
    return str(table.get("socket_path") or DEFAULT_SOCKET)


def _set_false(lines: list[str], start: int, end: int, key: str) -> bool:
    """Set ``key = true|false`` in ``lines[start:end]`` to ``false`` (indent, spacing and
    comment kept); False when no such line."""
    pattern = re.compile(_KEY.format(key=re.escape(key)))
    for i in range(start, end):
        m = pattern.match(lines[i].rstrip("\n"))
        if m:
            nl = "\n" if lines[i].endswith("\n") else ""
            lines[i] = f"{m.group(1)}{key}{m.group(3)}={m.group(4)}false{m.group(6)}{nl}"
            return True
    return False


def containerd_config(text: str) -> str:
    """``text`` (containerd's config.toml) with NRI on and open to external plugins
    (``disable = false``, ``disable_connections`` not ``true``); unchanged when it is so
    already. Raises :class:`NodePrepError` on text that is not TOML or that this edit cannot
    turn on (e.g. the NRI table written as an inline table)."""
    if nri_enabled(text):
        return text
    doc = _toml(text)
    table = _nri_table(doc)
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
        v3 = int(doc.get("version", 1)) >= 3
        if (table is None or table.get("disable", not v3) is not False) \
                and not _set_false(lines, start + 1, end, "disable"):
            indent = re.match(r"^(\s*)", lines[start + 1]).group(1) if start + 1 < end else "  "
            lines.insert(start + 1, f"{indent}disable = false\n")
            end += 1
        if table is not None and table.get("disable_connections") is True:
            _set_false(lines, start + 1, end, "disable_connections")
        new = "".join(lines)
    if not nri_enabled(new):
        raise NodePrepError("could not turn NRI on in this configuration")
    return new


def _crio_nri(text: str | None) -> dict:
    if text is None:
        return {}
    try:
        nri = tomllib.loads(text).get("crio", {}).get("nri", {})
    except tomllib.TOMLDecodeError:
        return {}
    return nri if isinstance(nri, dict) else {}


def crio_dropin(existing: str | None, others: Sequence[str] = ()) -> str:
    """The CRI-O drop-in's text: ``existing`` when it turns NRI on already (``enable_nri =
    true``, no ``nri_disable_connections = true``), else ours (:data:`CRIO_DROPIN`).
    ``others``: the texts of the other drop-ins beside it; when one of them sets
    ``nri_disable_connections = true``, ``existing`` must set it ``false`` itself."""
    nri = _crio_nri(existing)
    if nri.get("enable_nri") is True:
        conn = nri.get("nri_disable_connections")
        if conn is False or (conn is None and not any(
                _crio_nri(t).get("nri_disable_connections") is True for t in others)):
            return existing  # type: ignore[return-value]
    return CRIO_DROPIN


def crio_closes(text: str) -> bool:
    """Whether a CRI-O drop-in (text) turns NRI off (``enable_nri = false``) or closes it to
    external plugins (``nri_disable_connections = true``)."""
    nri = _crio_nri(text)
    return nri.get("enable_nri") is False or nri.get("nri_disable_connections") is True


def crio_socket(dropins: Sequence[str]) -> str | None:
    """The ``nri_listen`` the last of ``dropins`` (texts, in CRI-O's reading order: by file
    name) that sets it gives, or None when none does (then crio.conf or CRI-O's default,
    :data:`DEFAULT_SOCKET`, decides)."""
    found = None
    for t in dropins:
        v = _crio_nri(t).get("nri_listen")
        if isinstance(v, str) and v:
            found = v
    return found


def same_socket(a: str, b: str) -> bool:
    """Whether two socket paths name the same socket, ``/var/run`` being ``/run`` (the
    symlink every systemd host has; NRI's default is spelled with ``/var/run``)."""
    def norm(p: str) -> str:
        p = p.removeprefix("unix://")
        return "/run/" + p[len("/var/run/"):] if p.startswith("/var/run/") else p
    return norm(a) == norm(b)


def diff(path: str, old: str, new: str) -> str:
    """A unified diff of the edit (empty when nothing changes)."""
    return "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True),
                                        fromfile=path, tofile=path))
