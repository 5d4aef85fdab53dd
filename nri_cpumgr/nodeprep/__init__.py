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
to ``false`` when ``true``. A version-1 config (no ``version`` line) is read by 1.7 through
``[plugins.nri]`` instead (:data:`V1_TABLE`), so that one is edited there.
Keys: containerd 1.7.35 ``pkg/nri/config.go`` / 2.4.2
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
V1_TABLE = "plugins.nri"
"""The NRI table of a version-1 config (no ``version`` line, or ``version = 1``): containerd
1.7 reads only this one there (``containerd --config FILE config dump``: ``[plugins.nri]``'s
``disable``, ``disable_connections`` and ``socket_path`` become the NRI plugin's;
``[plugins."io.containerd.nri.v1.nri"]`` in such a file is ignored)."""
_HEADERS = {
    NRI_TABLE: re.compile(r'^\s*\[\s*plugins\s*\.\s*"io\.containerd\.nri\.v1\.nri"\s*\]\s*(#.*)?$'),
    V1_TABLE: re.compile(r'^\s*\[\s*plugins\s*\.\s*(nri|"nri"|\'nri\')\s*\]\s*(#.*)?$'),
}
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


def _version(doc: dict) -> int:
    v = doc.get("version", 1)
    if not isinstance(v, int) or isinstance(v, bool):
        raise NodePrepError(f"version = {v!r}: containerd's config version is a number "
                            f"(1, 2 or 3)")
    return v


def table_name(doc: dict) -> str:
    """The NRI table containerd reads in this config: :data:`V1_TABLE` in a version-1 one,
    else :data:`NRI_TABLE`."""
    return V1_TABLE if _version(doc) < 2 else NRI_TABLE


def _nri_table(doc: dict) -> dict | None:
    plugins = doc.get("plugins", {})
    if not isinstance(plugins, dict):
        return None
    key = "nri" if table_name(doc) == V1_TABLE else "io.containerd.nri.v1.nri"
    table = plugins.get(key)
    return table if isinstance(table, dict) else None


def nri_enabled(text: str) -> bool:
    """Whether a containerd config (TOML text) has NRI on and open to external plugins:
    ``disable = false`` in its NRI table (:func:`table_name`: ``[plugins.nri]`` in a
    version-1 config) (or no such table, or no ``disable`` in it, in a version-3 config:
    containerd 2.x's default is on) and no ``disable_connections = true``.
    Raises :class:`NodePrepError` on text that is not TOML."""
    doc = _toml(text)
    v3 = _version(doc) >= 3
    table = _nri_table(doc)
    if table is None:
        return v3
    return table.get("disable", not v3) is False and table.get("disable_connections") is not True


def ignored_table(text: str) -> str | None:
    """The NRI table a containerd config has but containerd 1.7 ignores in it
    (``[plugins."io.containerd.nri.v1.nri"]`` in a version-1 config), else None."""
    doc = _toml(text)
    plugins = doc.get("plugins", {})
    if table_name(doc) == V1_TABLE and isinstance(plugins, dict) \
            and "io.containerd.nri.v1.nri" in plugins:
        return NRI_TABLE
    return None


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


def _by_hand(name: str, why: str) -> NodePrepError:
    return NodePrepError(
        f"valid TOML, but {why}: enable-nri cannot edit that form automatically; set "
        f"disable = false and disable_connections = false in [{name}] by hand")


def containerd_config(text: str) -> str:
    """``text`` (containerd's config.toml) with NRI on and open to external plugins
    (``disable = false``, ``disable_connections`` not ``true``) in the table containerd reads
    (:func:`table_name`); unchanged when it is so already. Raises :class:`NodePrepError` on
    text that is not TOML or that this edit cannot turn on (the NRI table written with dotted
    keys or as an inline table, a ``disable`` that is not a boolean): the message names what
    to set by hand."""
    if nri_enabled(text):
        return text
    doc = _toml(text)
    name = table_name(doc)
    table = _nri_table(doc)
    for key in ("disable", "disable_connections"):
        if table is not None and key in table and not isinstance(table[key], bool):
            raise _by_hand(name, f"{key} = {table[key]!r} in [{name}] is not a boolean")
    lines = text.splitlines(keepends=True)
    header = _HEADERS[name]
    start = next((i for i, ln in enumerate(lines) if header.match(ln.rstrip("\n"))), None)
    if start is None:
        if table is not None or (name == V1_TABLE and not isinstance(doc.get("plugins", {}), dict)):
            raise _by_hand(name, f"its [{name}] is written with dotted keys or as an inline "
                                 f"table")
        if not text.strip():  # no config: containerd's defaults; version 2 reads on 1.7 and 2.x
            text = "version = 2\n"
            name = NRI_TABLE
        sep = "" if text.endswith("\n") else "\n"
        new = text + sep + f"\n[{name}]\n  disable = false\n"
    else:
        end = next((i for i in range(start + 1, len(lines))
                    if _ANY_HEADER.match(lines[i])), len(lines))
        v3 = _version(doc) >= 3
        if (table is None or table.get("disable", not v3) is not False) \
                and not _set_false(lines, start + 1, end, "disable"):
            indent = re.match(r"^(\s*)", lines[start + 1]).group(1) if start + 1 < end else "  "
            lines.insert(start + 1, f"{indent}disable = false\n")
            end += 1
        if table is not None and table.get("disable_connections") is True:
            _set_false(lines, start + 1, end, "disable_connections")
        new = "".join(lines)
    try:
        on = nri_enabled(new)
    except NodePrepError:
        on = False
    if not on:
        raise _by_hand(name, f"its [{name}] settings are written in a form (dotted keys, an "
                             f"inline table) this edit does not change")
    return new


def crio_nri(text: str) -> dict:
    """A CRI-O drop-in's ``[crio.nri]`` table ({} when none); :class:`NodePrepError` when the
    text is not TOML."""
    crio = _toml(text).get("crio", {})
    nri = crio.get("nri", {}) if isinstance(crio, dict) else {}
    return nri if isinstance(nri, dict) else {}


def _crio_nri(text: str | None) -> dict:
    if text is None:
        return {}
    try:
        return crio_nri(text)
    except NodePrepError:
        return {}


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
