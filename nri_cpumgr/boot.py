"""The command's entry point (``nri-cpumgr``, ``python -m nri_cpumgr``): for ``nri-cpumgr run``
dialing a running runtime, RegisterPlugin goes out before the rest of the plugin is imported.

Registration needs three values, the plugin's name, index and socket (``pluginName``,
``pluginIndex``, ``socketPath``, ``--socket``); the rest of the start (argparse, logging, the
config model and its dataclasses, ``re``, ``socket``: ~30-45 ms of CPU on a 2-CPU VM before
the first byte, issue 34) is not needed for it. :func:`main` reads them from the command line
and the config file with builtins alone, sends the registration on a raw ``_socket``
(:mod:`nri_cpumgr.transport.early`, no protobuf) and then runs :func:`nri_cpumgr.cli.main` as
before. That command validates the whole config as it always did (same errors, same exit
status) and takes the connection only when the validated config names the same plugin and
socket (:func:`take`; otherwise it closes it and connects the usual way). When anything here
is unsure (an option it does not know, an abbreviation, a document that is not ``key:
value`` lines at column 0 with the other keys' nested values indented below them, a value
that is not a plain word), it sends nothing early, and the command registers the usual way.
The runtime can thus see a registration followed by a closed connection when the config is
invalid (it logs the plugin as gone), as it already could for the machine-dependent checks
made after registration.

A plugin the runtime launched (``NRI_PLUGIN_SOCKET``) builds everything before it answers
(a failed Configure stops containerd 1.7): nothing is sent early there.

The garbage collector is off from here to the end of the plugin's build
(:func:`release_gc`, called by the build after ``gc.freeze()``): the start allocates
long-lived objects only (modules, classes, the topology), which the collections would scan
again and again. Until then too, the start's dataclasses take their generated methods from
the committed code (:mod:`nri_cpumgr.dataclass_cache`) instead of compiling them, and
``logging`` comes without the modules ``traceback`` needs only to format a traceback
(:mod:`nri_cpumgr.standin`).
"""

from __future__ import annotations

import gc
import os
import sys

from nri_cpumgr.runline import run_arguments

#: The image's config file, read when ``--config`` is not given (nri_cpumgr.locations).
DEFAULT_CONFIG = "/etc/nri-cpumgr/config.yaml"
#: The config model's defaults for the three keys (nri_cpumgr.config.model.Config).
DEFAULTS = {"pluginName": "cpumgr", "pluginIndex": "90", "socketPath": "/var/run/nri/nri.sock"}
#: The config model's default ``stateDirectory`` and the CPU checkpoint's name there
#: (nri_cpumgr.runtime.plugin.CHECKPOINT_NAME).
STATE_DIRECTORY, CHECKPOINT_NAME = "/var/lib/nri-cpumgr", "cpu_manager_state"
#: The registration request's deadline (seconds), as the transport's.
REGISTER_TIMEOUT = 10.0
#: Seconds the connect and the write may block (a runtime whose listen backlog is full).
CONNECT_TIMEOUT = 1.0

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_PATH_CHARS = _NAME_CHARS | {"/"}
_URL_CHARS = _PATH_CHARS | set(":[]%")

#: The connection sent early: (socket fd, ttrpc stream id, name, index, socket path).
_early: tuple[int, int, str, str, str] | None = None
#: Why the early registration was not sent (None: sent, or not tried).
skipped: str | None = None
_gc_held = False
#: The config file's ``apiServerURL`` and ``nodeName`` when it sets ``podSpecSource:
#: apiServer`` (:func:`pod_source_keys`), read by :func:`_register`.
_pod_source: tuple[str, str] | None = None


def run_options(argv: list[str]) -> dict[str, str] | None:
    """The ``config``, ``socket`` and ``state_dir`` of a ``run`` command line (``argv``
    without the program) when given, as :func:`nri_cpumgr.runline.run_arguments` reads
    them; None when that gives None."""
    args = run_arguments(argv)
    if args is None:
        return None
    return {k: v for k in ("config", "socket", "state_dir")  # type: ignore[misc]
            if isinstance(v := args[k], str)}


def _plain(raw: str, chars: frozenset[str]) -> str | None:
    """A YAML scalar of a flat line (after ``key:``) as a string when it certainly is one
    made of ``chars``: a plain word starting with a letter, '/' or '_' (not one YAML reads as
    a bool or null), or a quoted string without escapes; an optional comment after it. None
    for anything else."""
    raw = raw.strip(" ")
    if raw[:1] in ("'", '"'):
        end = raw.find(raw[0], 1)
        if end < 0:
            return None
        value, rest = raw[1:end], raw[end + 1:]
        tail = rest.lstrip(" ")
        if tail and not (tail.startswith("#") and tail != rest):  # only " # a comment"
            return None
    else:
        value, _, _ = raw.partition(" #")
        value = value.rstrip(" ")
        if (not value or not (value[0].isalpha() or value[0] in "/_")
                or value.lower() in ("yes", "no", "true", "false", "on", "off", "null",
                                     "y", "n")):
            return None
    if not value or not set(value) <= chars or "\\" in value:
        return None
    return value


def _top_level(text: str) -> dict[str, str] | None:
    """The top-level keys of a config document made of ``key: value`` lines at column 0
    (the values of keys with nothing after their colon but a comment may go on indented
    lines below them: options, feature gates), comments and blank lines, each with the raw
    text after its colon; None when the document is anything else (a value on more than
    one line above all: a quoted one whose quote does not close on its line may hold lines
    that look like keys)."""
    out: dict[str, str] = {}
    nested = False  # (the key above takes indented lines: nothing after its colon)
    for line in text.split("\n"):
        stripped = line.strip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        if line[0] == " ":  # a nested value of the key above (options, feature gates):
            if not nested:  # never a top-level key, nor more of an inline value
                return None
            continue
        if not line.isascii() or not line.isprintable():
            return None  # tabs, CR, control or non-ASCII characters
        key, sep, rest = line.partition(":")
        if (not sep or not key.isalnum() or not key[0].islower() or key in out
                or (rest and rest[0] != " ")):
            return None
        value = rest.strip(" ")
        if value[:1] in ("'", '"') and value.find(value[0], 1) < 0:
            return None  # (a quoted value going on below)
        nested = not value or value.startswith("#")
        out[key] = rest
    return out


def registration_keys(text: str) -> dict[str, str] | None:
    """``pluginName``, ``pluginIndex``, ``socketPath`` of a config document made of ``key:
    value`` lines at column 0 (the values of other keys may go on indented lines below them:
    options, feature gates), comments and blank lines; the defaults for those absent. None
    when the document is anything else or one of the three is not a plain string. The
    caller checks the result against the validated config (this reads, never validates)."""
    top = _top_level(text)
    if top is None:
        return None
    out = dict(DEFAULTS)
    for key in out:
        if key in top:
            value = _plain(top[key], _NAME_CHARS if key != "socketPath" else _PATH_CHARS)
            if value is None or (key == "socketPath" and value[0] != "/"):
                return None  # (a relative socketPath: the config is refused, ConfigError)
            out[key] = value
    return out


def pod_source_keys(text: str) -> tuple[str, str] | None:
    """``apiServerURL`` and ``nodeName`` ("" when absent: their defaults) of a flat config
    document (as :func:`registration_keys` reads one) that sets ``podSpecSource:
    apiServer``; None for any other document, or one of the three not a plain string.
    For :mod:`nri_cpumgr.early_list`, which hands its LIST only to a watch whose validated
    config has the same two values."""
    top = _top_level(text)
    if top is None or "podSpecSource" not in top \
            or _plain(top["podSpecSource"], _NAME_CHARS) != "apiServer":
        return None
    out = []
    for key, chars in (("apiServerURL", _URL_CHARS), ("nodeName", _NAME_CHARS)):
        value = _plain(top[key], chars) if key in top else ""
        if value is None:
            return None
        out.append(value)
    return out[0], out[1]


def _register(argv: list[str]) -> None:
    """Send RegisterPlugin for a ``run`` command line when its values are certain (module
    doc); sets :data:`_early` or :data:`skipped`."""
    global _early, skipped, _pod_source
    opts = run_options(argv)
    if opts is None:
        skipped = "a command line the early registration does not read"
        return
    path = opts.get("config")
    if path is None and os.path.isfile(DEFAULT_CONFIG):
        path = DEFAULT_CONFIG
    keys = dict(DEFAULTS)
    if path is not None:
        try:
            with open(path, "rb") as f:
                text = f.read().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            skipped = "the config file could not be read"
            return
        got = registration_keys(text)
        if got is not None and (src := pod_source_keys(text)) is not None \
                and not _restart(opts.get("state_dir"), text):
            _pod_source = src
        if got is None:
            skipped = "not a flat config document"
            return
        keys = got
    name, idx = keys["pluginName"], keys["pluginIndex"]
    socket_path = opts.get("socket") or keys["socketPath"]
    if len(idx) != 2 or not idx.isdigit() or not name:
        skipped = "pluginName or pluginIndex not plain"
        return
    import _socket

    from nri_cpumgr.transport.early import registration_bytes

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(socket_path)
        sock.sendall(registration_bytes(name, idx, REGISTER_TIMEOUT, 1))
        sock.settimeout(None)
    except OSError as e:
        sock.close()
        skipped = f"{socket_path}: {e.strerror or e}"
        return
    _early = (sock.detach(), 1, name, idx, socket_path)


def _restart(state_dir: str | None, text: str) -> bool:
    """Whether the state directory (``--state-dir``, else the config's ``stateDirectory``,
    else its default) holds the plugin's CPU checkpoint, or the config names it in a way
    this does not read: a restart, whose Synchronize restores its Guaranteed containers
    without waiting for the watch's first LIST (:mod:`nri_cpumgr.early_list` is for a start
    that waits for it)."""
    if not state_dir:
        top = _top_level(text) or {}
        state_dir = _plain(top["stateDirectory"], _PATH_CHARS) if "stateDirectory" in top \
            else STATE_DIRECTORY
    return state_dir is None or os.path.exists(os.path.join(state_dir, CHECKPOINT_NAME))


def _list_early(url: str, node: str) -> None:
    """Fork the child making the pod spec watch's first LIST (:mod:`nri_cpumgr.early_list`)
    when the API server's URL and the node's name are known."""
    if (url or os.environ.get("KUBERNETES_SERVICE_HOST")) and (
            node or os.environ.get("NODE_NAME")):
        from nri_cpumgr import early_list

        def job(fd: int) -> int:  # (in the child)
            from nri_cpumgr.podsource import list_to

            return list_to(fd, url, node)

        early_list.start(url, node, job)


def take(name: str, idx: str, socket_path: str) -> tuple[int, int] | None:
    """The early connection, (socket fd, ttrpc stream id of its RegisterPlugin), when it
    registered ``name``/``idx`` on ``socket_path`` (the validated config's values); None when
    nothing was sent. A connection made for other values is closed (the caller connects
    the usual way). Once: the connection belongs to the caller."""
    global _early, skipped
    early, _early = _early, None
    if early is None:
        return None
    fd, sid, *sent = early
    if sent != [name, idx, socket_path]:
        os.close(fd)
        skipped = "the validated config names another plugin or socket"
        return None
    return fd, sid


def release_gc() -> None:
    """Turn the garbage collector back on if :func:`main` turned it off, and give
    ``@dataclass`` its own compilation back (:mod:`nri_cpumgr.dataclass_cache`) (the build
    calls this after ``gc.freeze()``; :func:`main` at the end)."""
    global _gc_held
    cache = sys.modules.get("nri_cpumgr.dataclass_cache")
    if cache is not None:
        cache.uninstall()
    if _gc_held:
        _gc_held = False
        gc.enable()


def main(argv: list[str] | None = None) -> int:
    """``nri-cpumgr``: :func:`nri_cpumgr.cli.main`, after the early registration of a
    ``run`` dialing a runtime (module doc). Returns the exit status."""
    global _gc_held
    if argv is None:
        argv = sys.argv[1:]
    launched = "NRI_PLUGIN_SOCKET" in os.environ
    if argv[:1] == ["run"] or (launched and not argv):
        if gc.isenabled():
            gc.disable()
            _gc_held = True
        if not launched:
            _register(argv)
        from nri_cpumgr import dataclass_cache, standin

        dataclass_cache.install()  # (until the build's release_gc)
        # traceback's source lines and exception-group indentation, when first needed
        standin.import_with("logging", ("linecache", "textwrap"))
        if not launched and _pod_source is not None:  # (forked with logging, re and enum
            _list_early(*_pod_source)  # imported: the child's CPU, which the start competes with)
    try:
        from nri_cpumgr.cli import main as cli_main

        return cli_main(argv)
    finally:
        release_gc()
